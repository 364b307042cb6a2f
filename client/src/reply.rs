//! What the server answers: a push's id, and a result per id for acks,
//! nacks and cancels. The outcomes themselves ([`AckOutcome`],
//! [`NackOutcome`], [`CancelOutcome`]) are the server's own types, from
//! `delayq-proto`.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::message::{MessageId, MessageView, Occurrence, Status};

/// Each message's outcome in these answers, as the server defines it
/// (`delayq-proto`); one a newer server sends reads as `Unknown`.
pub use delayq_proto::{AckOutcome, CancelOutcome, NackOutcome};

/// The answer to a push.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Pushed {
    pub id: MessageId,
    /// A live message of the topic already held the `bizKey`: `id` is that
    /// message's, and nothing new was accepted.
    #[serde(default)]
    pub duplicate: bool,
}

/// What one long poll brought: the messages handed to this consumer (each
/// now `Consuming`), and a result per ack it carried.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Polled {
    pub messages: Vec<MessageView>,
    #[serde(default, rename = "results")]
    pub acks: Vec<AckResult>,
}

/// What an ack did to one message.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AckResult {
    pub id: MessageId,
    pub result: AckOutcome,
    /// With `not_in_flight`: the message's status, when known.
    #[serde(default)]
    pub status: Option<Status>,
    /// A recurring message: the occurrence it waits for now.
    #[serde(default)]
    pub next_occurrence: Option<Occurrence>,
}

/// What a nack did to one message.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NackResult {
    pub id: MessageId,
    pub result: NackOutcome,
    #[serde(default)]
    pub status: Option<Status>,
    #[serde(default)]
    pub attempts: Option<u32>,
    /// With `delaying`: when it is delivered again (epoch ms).
    #[serde(default)]
    pub due_time: Option<i64>,
}

/// The answer to a cancel by ids or by `bizKey`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Cancelled {
    /// How many results are `deleted`.
    pub deleted: usize,
    pub results: Vec<CancelResult>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct CancelResult {
    pub id: MessageId,
    pub result: CancelOutcome,
}

/// The answer to a cancel by `bizKey` prefix: counts, not ids.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PrefixCancelled {
    /// Live messages whose key starts with the prefix.
    pub matched: usize,
    #[serde(rename = "results")]
    pub counts: BTreeMap<CancelOutcome, usize>,
}

#[derive(Deserialize)]
pub(crate) struct Ids {
    pub ids: Vec<MessageId>,
}

#[derive(Deserialize)]
pub(crate) struct AckResults {
    pub results: Vec<AckResult>,
}

#[derive(Deserialize)]
pub(crate) struct NackResults {
    pub results: Vec<NackResult>,
}

#[derive(Deserialize)]
pub(crate) struct OneCancel {
    pub result: CancelOutcome,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_results() {
        let p: PrefixCancelled = serde_json::from_value(
            json!({"matched": 3, "results": {"deleted": 2, "in_flight": 1}}),
        )
        .unwrap();
        assert_eq!(p.counts[&CancelOutcome::Deleted], 2);
        assert_eq!(p.counts[&CancelOutcome::InFlight], 1);
        let r: AckResult =
            serde_json::from_value(json!({"id": "5", "result": "not_in_flight", "status": "Dead"}))
                .unwrap();
        assert_eq!(
            (r.result, r.status),
            (AckOutcome::NotInFlight, Some(Status::Dead))
        );
        let polled: Polled = serde_json::from_value(json!({"messages": []})).unwrap();
        assert!(polled.acks.is_empty());
    }
}

/// A page of a search (`GET /messages?topic=…`): messages in id order, and
/// the id to continue after (`None` on the last page).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct MessagePage {
    pub messages: Vec<MessageView>,
    #[serde(default)]
    pub next: Option<MessageId>,
}

/// What rescheduling one message did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RescheduleOutcome {
    Rescheduled,
    /// Handed to a consumer: left alone.
    InFlight,
    AlreadyConsumed,
    Deleted,
    Dead,
    NotFound,
    /// An outcome a newer server sends.
    #[serde(other)]
    Unknown,
}

/// One message's reschedule.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RescheduleResult {
    pub id: MessageId,
    pub result: RescheduleOutcome,
    /// Rescheduled: when it is due now (epoch ms).
    #[serde(default)]
    pub due_time: Option<i64>,
    /// Rescheduled: its priority now.
    #[serde(default)]
    pub priority: Option<u8>,
}

/// The answer to a reschedule by ids or bizKey.
#[derive(Debug, Clone, Deserialize)]
pub struct Rescheduled {
    pub rescheduled: usize,
    pub results: Vec<RescheduleResult>,
}

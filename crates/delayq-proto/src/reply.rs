//! The answers to pushes, polls, acks, nacks, cancels, reschedules and
//! searches: what the server builds and sends, and what a client reads.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::ErrorCode;
use crate::message::{MessageId, MessageView, Occurrence, Status};
use crate::outcome::{AckOutcome, CancelOutcome, NackOutcome};

/// A message is accepted and durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PushReply {
    pub id: MessageId,
    /// A live message of the topic holds the bizKey: its id is answered.
    #[serde(default, skip_serializing_if = "is_false")]
    pub duplicate: bool,
    /// With `onDuplicate` `replace` or `extend`, a duplicate: what it did
    /// to the live message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<DuplicateOutcome>,
    /// With `result`: the live message's due time now (none when it is in
    /// flight).
    #[serde(default, rename = "dueTime", skip_serializing_if = "Option::is_none")]
    pub due_time: Option<i64>,
}

/// What a push with `onDuplicate` `replace` or `extend` did to the live
/// message holding its bizKey.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DuplicateOutcome {
    /// It took the push's body, due time and priority.
    Replaced,
    /// Its due time moved later.
    Extended,
    /// `extend` to a time not later than its own: left as it was.
    NotLater,
    /// Handed to a consumer: left alone.
    InFlight,
    /// An outcome this version does not know.
    #[serde(other)]
    Unknown,
}

impl DuplicateOutcome {
    /// What the server sends.
    pub const SENT: [DuplicateOutcome; 4] = [
        DuplicateOutcome::Replaced,
        DuplicateOutcome::Extended,
        DuplicateOutcome::NotLater,
        DuplicateOutcome::InFlight,
    ];

    /// The name on the wire: `replaced`, `extended`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            DuplicateOutcome::Replaced => "replaced",
            DuplicateOutcome::Extended => "extended",
            DuplicateOutcome::NotLater => "not_later",
            DuplicateOutcome::InFlight => "in_flight",
            DuplicateOutcome::Unknown => "unknown",
        }
    }
}

/// What `onDuplicate` did to the live message holding a batch message's
/// bizKey.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DuplicateUpdate {
    /// The batch message's position (from 0); its `ids` entry is the live
    /// message's id.
    pub index: usize,
    pub result: DuplicateOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_time: Option<i64>,
}

/// The batch is accepted and durable: the ids in the order pushed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PushBatchReply {
    pub ids: Vec<MessageId>,
    /// The positions (from 0) of the messages that were not pushed because
    /// a live message of their topic held their bizKey (one already there,
    /// or an earlier one of the batch): their `ids` entry is that message's
    /// id, as a single push answers with `"duplicate": true`.
    #[serde(default)]
    #[cfg_attr(feature = "utoipa", schema(required = true))]
    pub duplicates: Vec<usize>,
    /// Of those, the ones pushed with `onDuplicate` `replace` or `extend`:
    /// what each did to the live message (absent when none was).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub updates: Vec<DuplicateUpdate>,
}

/// Messages handed out, each now `Consuming`; empty when the timeout passed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PollReply {
    pub messages: Vec<MessageView>,
}

/// `POST /get/{topic}`: the acks' results, then the messages handed out.
/// (A client reads `GET /get/{topic}`'s answer as one too, with no acks.)
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct AckAndPollReply {
    #[serde(default)]
    #[cfg_attr(feature = "utoipa", schema(required = true))]
    pub acked: usize,
    #[serde(default)]
    #[cfg_attr(feature = "utoipa", schema(required = true))]
    pub results: Vec<AckResult>,
    pub messages: Vec<MessageView>,
}

/// One id's ack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AckResult {
    pub id: MessageId,
    pub result: AckOutcome,
    /// Not in flight: the message's status (Delaying or Ready while it
    /// waits for a delivery; null when Redis could not say); a stale
    /// delivery: where the message is now; consumed, the last delivery of
    /// a cancelled series: Deleted.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<Status>))]
    pub status: Option<Option<Status>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_occurrence: Option<Occurrence>,
}

/// `POST /ack/{id}`: consumed, or (a recurring message) waiting for its
/// next occurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AckReply {
    pub id: MessageId,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_occurrence: Option<Occurrence>,
}

/// `POST /ack`: one journal commit for all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct AckBatchReply {
    pub acked: usize,
    pub results: Vec<AckResult>,
}

/// `POST /nack`: one journal commit for all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct NackBatchReply {
    pub nacked: usize,
    pub results: Vec<NackResult>,
}

/// One id's nack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct NackResult {
    pub id: MessageId,
    pub result: NackOutcome,
    /// The status it is in now; not in flight: null when it was never
    /// delivered.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<Status>))]
    pub status: Option<Option<Status>>,
    /// Deliveries so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<i32>,
    /// `delaying`: when it is delivered again (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_time: Option<i64>,
}

/// One message's cancel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct CancelOne {
    pub id: MessageId,
    pub result: CancelOutcome,
}

/// `POST /cancel` by ids or bizKey: a result per message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct CancelEach {
    /// How many results are `deleted`.
    pub deleted: usize,
    pub results: Vec<CancelOne>,
}

/// `GET /delete?id=` of an unknown id: an error with a definite result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct DeleteNotFound {
    pub error: ErrorCode,
    pub message: String,
    pub id: MessageId,
    pub result: CancelOutcome,
}

/// `POST /cancel`: a result per id (by ids or bizKey), or counts per
/// outcome (by prefix).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum CancelReply {
    Each(CancelEach),
    Counts(PrefixCounts),
}

/// Cancelling or rescheduling by bizKey prefix: how many live messages
/// matched, and how many came to each outcome (by its name on the wire:
/// `deleted`, `in_flight`, `rescheduled`, …).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "utoipa", schema(as = CancelCounts))]
pub struct PrefixCounts {
    /// Live messages whose bizKey starts with the prefix.
    pub matched: u64,
    /// Messages per outcome (`deleted`, `in_flight`, …).
    pub results: BTreeMap<String, u64>,
}

impl PrefixCounts {
    /// How many came to `outcome` (its name on the wire).
    pub fn count(&self, outcome: &str) -> u64 {
        self.results.get(outcome).copied().unwrap_or(0)
    }
}

/// What rescheduling one message did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RescheduleOutcome {
    Rescheduled,
    /// Handed to a consumer: left alone.
    InFlight,
    AlreadyConsumed,
    Deleted,
    Dead,
    NotFound,
    /// An outcome this version does not know.
    #[serde(other)]
    Unknown,
}

impl RescheduleOutcome {
    /// What the server sends.
    pub const SENT: [RescheduleOutcome; 6] = [
        RescheduleOutcome::Rescheduled,
        RescheduleOutcome::InFlight,
        RescheduleOutcome::AlreadyConsumed,
        RescheduleOutcome::Deleted,
        RescheduleOutcome::Dead,
        RescheduleOutcome::NotFound,
    ];

    /// The name on the wire: `rescheduled`, `in_flight`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            RescheduleOutcome::Rescheduled => "rescheduled",
            RescheduleOutcome::InFlight => "in_flight",
            RescheduleOutcome::AlreadyConsumed => "already_consumed",
            RescheduleOutcome::Deleted => "deleted",
            RescheduleOutcome::Dead => "dead",
            RescheduleOutcome::NotFound => "not_found",
            RescheduleOutcome::Unknown => "unknown",
        }
    }
}

/// One message's reschedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RescheduleOne {
    pub id: MessageId,
    pub result: RescheduleOutcome,
    /// Rescheduled: when it is due now (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_time: Option<i64>,
    /// Rescheduled: its priority now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
}

/// `POST /reschedule` by ids or bizKey: a result per message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RescheduleEach {
    pub rescheduled: usize,
    pub results: Vec<RescheduleOne>,
}

/// By ids or bizKey: a result per message; by prefix: how many matched and
/// the count per outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum RescheduleReply {
    Each(RescheduleEach),
    Counts(PrefixCounts),
}

/// `GET /messages?topic=…`: a page of a topic's messages in id order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct MessagePage {
    pub messages: Vec<MessageView>,
    /// The `after` of the next page; null on the last.
    #[serde(default)]
    pub next: Option<MessageId>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A field that may be absent (`None`) or null (`Some(None)`): serde alone
/// reads both as `None`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_null_status_reads_apart_from_an_absent_one() {
        let r: AckResult =
            serde_json::from_value(json!({"id": "5", "result": "not_in_flight", "status": null}))
                .unwrap();
        assert_eq!(r.status, Some(None));
        let r: AckResult =
            serde_json::from_value(json!({"id": "5", "result": "not_in_flight", "status": "Dead"}))
                .unwrap();
        assert_eq!(r.status, Some(Some(Status::Dead)));
        let r: AckResult =
            serde_json::from_value(json!({"id": "5", "result": "consumed"})).unwrap();
        assert_eq!(r.status, None);
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"id": "5", "result": "consumed"})
        );
        let p: PushReply = serde_json::from_value(json!({"id": "7"})).unwrap();
        assert!(!p.duplicate);
        assert_eq!(serde_json::to_value(p).unwrap(), json!({"id": "7"}));
        let polled: AckAndPollReply = serde_json::from_value(json!({"messages": []})).unwrap();
        assert!(polled.results.is_empty());
        let o: RescheduleOutcome = serde_json::from_value(json!("moved_to_mars")).unwrap();
        assert_eq!(o, RescheduleOutcome::Unknown);
    }

    #[test]
    fn a_cancel_reads_as_results_or_counts() {
        let each: CancelReply = serde_json::from_value(
            json!({"deleted": 1, "results": [{"id": "5", "result": "deleted"}]}),
        )
        .unwrap();
        assert!(matches!(each, CancelReply::Each(e) if e.deleted == 1 && e.results.len() == 1));
        let counts: CancelReply =
            serde_json::from_value(json!({"matched": 3, "results": {"deleted": 3}})).unwrap();
        assert!(matches!(counts, CancelReply::Counts(c) if c.count("deleted") == 3));
    }
}

//! What an ack, a nack or a cancel did to one message: the `result` of
//! each entry in their answers.
//!
//! Each enum ends with `Unknown`, what an outcome a newer server sends
//! reads as; the server never sends it.

use serde::{Deserialize, Serialize};

/// What an ack did to one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckOutcome {
    /// Consumed, or (a recurring message) waiting for its next occurrence.
    Consumed,
    /// Not handed out: not delivered yet, its ack deadline passed, or it
    /// ended otherwise (see the result's `status`).
    NotInFlight,
    /// The receipt names another delivery than the current one: nothing
    /// changed (see the result's `status`).
    StaleDelivery,
    NotFound,
    /// An outcome this version does not know.
    #[serde(other)]
    Unknown,
}

impl AckOutcome {
    /// The name on the wire: `consumed`, `not_in_flight`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            AckOutcome::Consumed => "consumed",
            AckOutcome::NotInFlight => "not_in_flight",
            AckOutcome::StaleDelivery => "stale_delivery",
            AckOutcome::NotFound => "not_found",
            AckOutcome::Unknown => "unknown",
        }
    }
}

/// What a nack did to one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NackOutcome {
    /// Ready again at once.
    Ready,
    /// Back to `Delaying`, due at the result's `dueTime`.
    Delaying,
    /// That was its last attempt.
    Dead,
    /// A recurring message cancelled while an occurrence was out: it ends.
    Deleted,
    NotInFlight,
    /// The receipt names an earlier delivery: nothing changed.
    StaleDelivery,
    NotFound,
    /// An outcome this version does not know.
    #[serde(other)]
    Unknown,
}

impl NackOutcome {
    /// The name on the wire: `ready`, `delaying`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            NackOutcome::Ready => "ready",
            NackOutcome::Delaying => "delaying",
            NackOutcome::Dead => "dead",
            NackOutcome::Deleted => "deleted",
            NackOutcome::NotInFlight => "not_in_flight",
            NackOutcome::StaleDelivery => "stale_delivery",
            NackOutcome::NotFound => "not_found",
            NackOutcome::Unknown => "unknown",
        }
    }
}

/// What cancelling one message did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelOutcome {
    /// Cancelled, now or before.
    Deleted,
    /// Handed to a consumer: left alone.
    InFlight,
    AlreadyConsumed,
    Dead,
    NotFound,
    /// An outcome this version does not know.
    #[serde(other)]
    Unknown,
}

impl CancelOutcome {
    /// The name on the wire: `deleted`, `in_flight`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            CancelOutcome::Deleted => "deleted",
            CancelOutcome::InFlight => "in_flight",
            CancelOutcome::AlreadyConsumed => "already_consumed",
            CancelOutcome::Dead => "dead",
            CancelOutcome::NotFound => "not_found",
            CancelOutcome::Unknown => "unknown",
        }
    }
}

/// The outcomes the server sends, each enum's in declaration order (the
/// order of the OpenAPI document's `enum`): every one but `Unknown`.
impl AckOutcome {
    pub const SENT: &'static [AckOutcome] = &[
        AckOutcome::Consumed,
        AckOutcome::NotInFlight,
        AckOutcome::StaleDelivery,
        AckOutcome::NotFound,
    ];
}

impl NackOutcome {
    pub const SENT: &'static [NackOutcome] = &[
        NackOutcome::Ready,
        NackOutcome::Delaying,
        NackOutcome::Dead,
        NackOutcome::Deleted,
        NackOutcome::NotInFlight,
        NackOutcome::StaleDelivery,
        NackOutcome::NotFound,
    ];
}

impl CancelOutcome {
    pub const SENT: &'static [CancelOutcome] = &[
        CancelOutcome::Deleted,
        CancelOutcome::InFlight,
        CancelOutcome::AlreadyConsumed,
        CancelOutcome::Dead,
        CancelOutcome::NotFound,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn outcomes_are_written_as_named_and_read_back() {
        for o in AckOutcome::SENT
            .iter()
            .copied()
            .chain([AckOutcome::Unknown])
        {
            assert_eq!(serde_json::to_value(o).unwrap(), json!(o.as_str()));
            assert_eq!(
                serde_json::from_value::<AckOutcome>(json!(o.as_str())).unwrap(),
                o
            );
        }
        for o in NackOutcome::SENT
            .iter()
            .copied()
            .chain([NackOutcome::Unknown])
        {
            assert_eq!(serde_json::to_value(o).unwrap(), json!(o.as_str()));
            assert_eq!(
                serde_json::from_value::<NackOutcome>(json!(o.as_str())).unwrap(),
                o
            );
        }
        for o in CancelOutcome::SENT
            .iter()
            .copied()
            .chain([CancelOutcome::Unknown])
        {
            assert_eq!(serde_json::to_value(o).unwrap(), json!(o.as_str()));
            assert_eq!(
                serde_json::from_value::<CancelOutcome>(json!(o.as_str())).unwrap(),
                o
            );
        }
    }

    /// `SENT` names every outcome but `Unknown`: a variant added to an
    /// enum fails to compile here until this test (and `SENT`) know it.
    #[test]
    fn sent_lists_every_outcome_but_unknown() {
        let ack = |o| match o {
            AckOutcome::Consumed
            | AckOutcome::NotInFlight
            | AckOutcome::StaleDelivery
            | AckOutcome::NotFound => true,
            AckOutcome::Unknown => false,
        };
        let nack = |o| match o {
            NackOutcome::Ready
            | NackOutcome::Delaying
            | NackOutcome::Dead
            | NackOutcome::Deleted
            | NackOutcome::NotInFlight
            | NackOutcome::StaleDelivery
            | NackOutcome::NotFound => true,
            NackOutcome::Unknown => false,
        };
        let cancel = |o| match o {
            CancelOutcome::Deleted
            | CancelOutcome::InFlight
            | CancelOutcome::AlreadyConsumed
            | CancelOutcome::Dead
            | CancelOutcome::NotFound => true,
            CancelOutcome::Unknown => false,
        };
        assert!(AckOutcome::SENT.iter().all(|&o| ack(o)));
        assert!(NackOutcome::SENT.iter().all(|&o| nack(o)));
        assert!(CancelOutcome::SENT.iter().all(|&o| cancel(o)));
        assert_eq!(
            (
                AckOutcome::SENT.len(),
                NackOutcome::SENT.len(),
                CancelOutcome::SENT.len()
            ),
            (4, 7, 5)
        );
    }

    #[test]
    fn outcomes_of_a_newer_server_read_as_unknown() {
        let ack: AckOutcome = serde_json::from_value(json!("postponed")).unwrap();
        let nack: NackOutcome = serde_json::from_value(json!("postponed")).unwrap();
        let cancel: CancelOutcome = serde_json::from_value(json!("postponed")).unwrap();
        assert_eq!(
            (ack, nack, cancel),
            (
                AckOutcome::Unknown,
                NackOutcome::Unknown,
                CancelOutcome::Unknown
            )
        );
    }
}

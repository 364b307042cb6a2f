//! What the server answers: a push's id, and a result per id for acks,
//! nacks and cancels. The outcomes themselves ([`AckOutcome`],
//! [`NackOutcome`], [`CancelOutcome`]) are the server's own types, from
//! `delayq-proto`.

/// Each message's outcome in these answers, as the server defines it
/// (`delayq-proto`); one a newer server sends reads as `Unknown`.
pub use delayq_proto::{
    AckOutcome, CancelOutcome, DuplicateOutcome, NackOutcome, RescheduleOutcome,
};

pub use delayq_proto::DuplicateUpdate;
/// The answers themselves are the server's own types too.
pub use delayq_proto::{
    AckAndPollReply, AckResult, CancelEach, CancelOne, MessagePage, NackResult, PrefixCounts,
    PushReply, RescheduleEach, RescheduleOne,
};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_results() {
        let p: PrefixCounts = serde_json::from_value(
            json!({"matched": 3, "results": {"deleted": 2, "in_flight": 1}}),
        )
        .unwrap();
        assert_eq!(p.count(CancelOutcome::Deleted.as_str()), 2);
        assert_eq!(p.count("in_flight"), 1);
        assert_eq!(p.count("dead"), 0);
        let r: AckResult =
            serde_json::from_value(json!({"id": "5", "result": "not_in_flight", "status": "Dead"}))
                .unwrap();
        assert_eq!(
            (r.result, r.status),
            (
                AckOutcome::NotInFlight,
                Some(Some(delayq_proto::Status::Dead))
            )
        );
    }
}

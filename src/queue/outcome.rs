//! What the queue's single acks and cancels come to, and what an ack says:
//! the values the batching of single requests ([`super::coalesce`]) carries
//! between a handler and the batch it joins.

use crate::message::{MessageId, Receipt, Status};
use crate::repeat::Occurrence;

/// One ack: the message, and what the consumer says of the delivery it
/// acks (a recurring message's occurrence, the delivery's receipt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub id: MessageId,
    pub occurrence: Option<i32>,
    pub receipt: Option<Receipt>,
}

impl Ack {
    pub fn id(id: MessageId) -> Ack {
        Ack {
            id,
            occurrence: None,
            receipt: None,
        }
    }

    /// The occurrence acked: as said, or as the receipt names it.
    pub(super) fn occurrence(&self) -> Option<i32> {
        self.occurrence
            .or_else(|| self.receipt.and_then(|r| r.occurrence))
    }
}

/// What acking one id did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    /// Consumed now, or before (acking twice is harmless).
    Consumed,
    /// A recurring message's occurrence is consumed: the message waits for
    /// its next occurrence (or it was acked before and waits already).
    Next(Occurrence),
    /// Acked, the last delivery of a recurring message whose series was
    /// cancelled while it was out: the message ended Deleted.
    Deleted,
    /// Not handed out: scheduled, ready for its first delivery, or ended
    /// some other way (the status says which).
    NotInFlight(Option<Status>),
    /// The receipt names another delivery than the one in hand, or than
    /// the last one when none is: nothing changed. `now` is where the
    /// message is; `earlier`: the receipt is one of an earlier delivery
    /// (else no delivery of the message was handed out with it).
    Stale {
        now: Status,
        earlier: bool,
    },
    NotFound,
}

impl AckOutcome {
    pub fn is_consumed(self) -> bool {
        matches!(
            self,
            AckOutcome::Consumed | AckOutcome::Next(_) | AckOutcome::Deleted
        )
    }
}

/// What cancelling one message did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// Cancelled now, or before. A recurring message handed out when its
    /// series is cancelled counts too: that delivery is its last.
    Deleted,
    /// Handed to a consumer: left alone (it ends with the consumer's ack,
    /// or comes back after its ttl and can be cancelled then).
    InFlight,
    AlreadyConsumed,
    Dead,
    NotFound,
}

impl CancelOutcome {
    /// The name on the wire (`deleted`, `in_flight`, ...).
    pub fn as_str(self) -> &'static str {
        delayq_proto::CancelOutcome::from(self).as_str()
    }
}

impl From<CancelOutcome> for delayq_proto::CancelOutcome {
    fn from(o: CancelOutcome) -> Self {
        match o {
            CancelOutcome::Deleted => Self::Deleted,
            CancelOutcome::InFlight => Self::InFlight,
            CancelOutcome::AlreadyConsumed => Self::AlreadyConsumed,
            CancelOutcome::Dead => Self::Dead,
            CancelOutcome::NotFound => Self::NotFound,
        }
    }
}

//! What the schedule's scripts did, as their callers read it: one type
//! per operation, named for the Redis side (the API renders its own).

use crate::message::{Message, MessageId, Status};
pub use crate::retry::AfterFailure;

/// One shard as `GET /admin/cluster` shows it.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardCounts {
    pub delaying: i64,
    pub ready: i64,
    pub in_flight: i64,
    /// The stored fencing epoch (0: none yet).
    pub epoch: i64,
    /// Due time (epoch ms) of the earliest scheduled message, when it is
    /// already due: the shard is behind.
    pub oldest_overdue: Option<i64>,
}

/// What to do with a lease (see lease.lua).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseOp {
    Acquire,
    Renew,
    Release,
}

/// What scheduling did with one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduled {
    /// Added to its delay zset; `at` is when (Redis's clock, ms).
    Added { at: i64 },
    /// Redis holds it already (scheduled, ready or in flight).
    Present,
    /// It was acked or cancelled lately (a tombstone); left out.
    Finished,
}

/// What one scan step did.
#[derive(Debug, Default)]
pub struct TickResult {
    /// (id, topic, deliveries so far) moved from the delay zset to a
    /// ready queue.
    pub moved: Vec<(MessageId, String, i32)>,
    /// Messages whose ack deadline passed: failed deliveries.
    pub failed: Vec<FailedDelivery>,
    /// Due time (ms) of the earliest message still scheduled.
    pub next_due: Option<i64>,
    /// Earliest ack deadline (ms) still running.
    pub next_deadline: Option<i64>,
    /// When the scan ran, by Redis's clock (ms): the time its moves are
    /// recorded with. Every script that changes a message's status runs on
    /// the shard's Redis, one at a time, so stamps from its clock follow the
    /// order the changes happened, whichever node made them.
    pub at: i64,
}

/// One failed delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedDelivery {
    pub id: MessageId,
    pub topic: String,
    /// Deliveries so far (the failed one included).
    pub attempts: i32,
    pub then: AfterFailure,
}

/// What a nack did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisNack {
    /// The delivery failed; `at` is when, by Redis's clock (ms).
    Failed {
        attempts: i32,
        then: AfterFailure,
        at: i64,
        topic: String,
    },
    /// Scheduled or ready (`state`): not handed out.
    NotInFlight { state: Status },
    /// The receipt names an earlier delivery; nothing changed. `state`:
    /// where the message is now.
    Stale { state: Status },
    /// This shard does not hold it.
    Absent,
}

/// A message handed to a consumer.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub shard: u32,
    /// When it was handed out, by Redis's clock (ms).
    pub at: i64,
    pub attempts: i32,
    pub message: Message,
    /// The record as the claim left it (what `advance_many`
    /// checks is unchanged).
    pub record: String,
}

/// What an ack did; with the message's delivery count where Redis held it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisAck {
    Acked {
        attempts: i32,
    },
    /// Acked, the last delivery of a series cancelled while it was out:
    /// the message ends Deleted, as its cancel answered.
    Stopped {
        attempts: i32,
    },
    /// A recurring message, handed out: nothing changed yet; the caller
    /// moves it on with `advance_many`, giving back this
    /// record.
    Recurring {
        attempts: i32,
        record: String,
    },
    /// Not handed out; with its record when it is recurring (an ack of an
    /// earlier occurrence finds it waiting for its next one).
    NotInFlight {
        recurring: Option<String>,
        /// Where it waits: Delaying or Ready.
        state: Status,
    },
    /// The receipt names another delivery than the one in hand (or the
    /// last one); nothing changed. `state`: where the message is now.
    Stale {
        state: Status,
        attempts: i32,
        recurring: Option<String>,
    },
    /// Not held, and acked or cancelled lately (a tombstone); with the
    /// end while the journal has not recorded it yet.
    Finished(Option<End>),
    Absent,
}

/// What moving a recurring message on did (see advance.lua).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advanced {
    /// Scheduled for its next occurrence; `at` by Redis's clock (ms).
    Next { at: i64 },
    /// Its series ended with this occurrence: it left Redis.
    Ended { at: i64 },
    /// The record changed since the ack read it: ack again.
    Changed,
}

/// What a cancel did; with the message's delivery count where Redis held it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisCancel {
    Deleted {
        attempts: i32,
    },
    /// A recurring message in flight: its series ends with this delivery.
    Stopped {
        attempts: i32,
    },
    InFlight,
    /// Not held: this shard ended it lately and the journal has not
    /// recorded the end yet.
    Finished(End),
    Absent,
}

/// An end of a message's life Redis applied (`{P:s}:unjournaled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    pub status: Status,
    pub attempts: i32,
    /// When, by Redis's clock (ms).
    pub at: i64,
}

impl End {
    /// Reads `status|attempts|at`.
    pub fn parse(text: &str) -> Option<End> {
        let mut parts = text.split('|');
        let status = Status::from_code(parts.next()?.parse().ok()?)?;
        let attempts = parts.next()?.parse().ok()?;
        let at = parts.next()?.parse().ok()?;
        Some(End {
            status,
            attempts,
            at,
        })
    }
}

/// The [`AfterFailure`] a script's outcome names (`ready`, `delaying`,
/// `dead`, `stopped`), `due` the new due time when delaying.
pub(super) fn after_failure(outcome: &str, due: i64) -> Option<AfterFailure> {
    Some(match outcome {
        "ready" => AfterFailure::Ready,
        "delaying" => AfterFailure::Delaying { due },
        "dead" => AfterFailure::Dead,
        "stopped" => AfterFailure::Stopped,
        _ => return None,
    })
}

/// What a batch did to each of its items: `None` where the item's shard
/// could not be reached (a Redis Cluster master down), so nothing is known
/// of it; `failed` says why. What the others' calls did is known, and was
/// done.
#[derive(Debug)]
pub struct Replies<T> {
    pub each: Vec<Option<T>>,
    pub failed: Option<crate::error::RedisError>,
}

//! The wake-ups themselves: a shard's due time, a topic's ready messages,
//! and "notices may have been lost".

use actix::Message;

/// Something in `shard` needs attention at `at_ms` (a new due time, or an
/// ack deadline of a message just handed out).
#[derive(Message, Clone, Copy)]
#[rtype(result = "()")]
pub struct Touch {
    pub shard: u32,
    pub at_ms: i64,
}

/// Every owned shard scans now (after wake-ups may have been lost).
#[derive(Message, Clone, Copy)]
#[rtype(result = "()")]
pub struct WakeAll;

/// A wake-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Shard `shard` holds a message due at `at_ms`.
    Due { shard: u32, at_ms: i64 },
    /// Messages of `topic` became ready.
    Ready { topic: String },
    /// Notices may have been lost (a pub/sub reconnect): wake everything.
    Resubscribed,
}

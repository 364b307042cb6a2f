//! What stopped an operation of the queue.

use crate::error::{JournalError, RedisError};
use crate::message::{MessageId, NoWorkerId};

/// What stopped an operation of the queue.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// Redis failed, or holds a record delayq cannot read.
    #[error(transparent)]
    Redis(#[from] RedisError),
    /// The journal database failed or refused the write.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// This node has no Snowflake worker id leased: it takes no pushes.
    #[error("{0}")]
    NoWorkerId(#[from] NoWorkerId),
    /// Messages are durable in the journal but Redis did not take them;
    /// the next restore (or the reconciler) schedules them.
    #[error("{0}")]
    NotScheduled(String),
    /// The journal holds no such message.
    #[error("no message {0}")]
    NotFound(MessageId),
    /// A repair was refused: these nodes' journals are behind Redis (ends
    /// applied in Redis and not yet journaled look live in the journal).
    /// This node has just resumed from a stall: a poll claims nothing for
    /// a consumer that is likely gone (see [`crate::stall`]).
    #[error("{0}")]
    Stalled(String),
    #[error("the journal of node(s) {} is behind Redis: repairing now could bring back messages acked or cancelled meanwhile; try again once they caught up", .0.join(", "))]
    JournalBehind(Vec<String>),
}

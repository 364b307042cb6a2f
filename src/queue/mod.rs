//! The queue's rules: accepting pushes, handing messages out, acks, nacks
//! (what a failed delivery leads to), recurring occurrences, cancels, dead
//! letters. Every entry point (the HTTP API, the command line, forwarders)
//! calls this layer; the HTTP handlers in [`crate::api`] only parse requests
//! and render outcomes.
//!
//! Outcomes a caller must tell apart (an ack of a message not handed out,
//! a cancel of a consumed message) are values, enums per operation;
//! [`QueueError`] is for what stopped an operation (an outage, a refusal).

pub mod cancel;
pub mod consume;
pub mod dead;
pub mod produce;

use std::sync::Arc;

use actix::Addr;

use crate::actors::journal::Journal;
use crate::actors::router::RouterActor;
use crate::error::{JournalError, ShardError};
use crate::message::{IdGenerator, MessageId, NoWorkerId};
use crate::notify::Topics;
use crate::redis::schedule::RedisSchedule;

/// The handles the rules work with; cheap to clone.
#[derive(Clone)]
pub struct Queue {
    pub journal: Journal,
    pub router: Addr<RouterActor>,
    pub redis: RedisSchedule,
    pub waiters: Topics,
    pub ids: Arc<IdGenerator>,
}

/// What stopped an operation of the queue.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// Redis failed, or holds a record delayq cannot read.
    #[error(transparent)]
    Redis(#[from] ShardError),
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
}

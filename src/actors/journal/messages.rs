//! The messages the JournalActor answers: one per write of the journal's
//! storage layer, and [`Read`], which runs any read of it.

use std::sync::Arc;

use actix::prelude::*;

use crate::error::JournalError;
use crate::journal::connection::JournalConn;
use crate::journal::store::{
    DeleteDeadOutcome, InsertOutcome, OutboxRows, RequeueOutcome, StatusChange,
};
use crate::message::{Message, MessageId, Status};

/// Insert messages as WaitPut in one transaction (a group commit); from
/// an outbox, with the rows they come from.
#[derive(Message)]
#[rtype(result = "Result<Vec<InsertOutcome>, JournalError>")]
pub struct InsertMessages(pub Vec<Message>, pub Vec<bool>, pub Option<OutboxRows>);

/// Write flow rows and status updates in one transaction.
#[derive(Message)]
#[rtype(result = "Result<(), JournalError>")]
pub struct RecordFlow(pub Arc<Vec<StatusChange>>);

/// Takes `(due_time, id)` entries off the waiting list.
#[derive(Message)]
#[rtype(result = "Result<(), JournalError>")]
pub struct UnlistWaiting(pub Vec<(i64, i64)>);

/// Move live messages to a new due time and/or priority (see
/// [`crate::journal::store::move_messages`]).
#[derive(Message)]
#[rtype(result = "Result<Vec<crate::journal::store::JournalMove>, JournalError>")]
pub struct MoveMessages {
    pub ids: Vec<MessageId>,
    pub due: Option<i64>,
    pub priority: Option<i32>,
}

/// Replace what a push's `onDuplicate` names in the live message holding
/// its key (see [`crate::journal::store::replace_message`]).
#[derive(Message)]
#[rtype(
    result = "Result<(crate::journal::store::JournalMove, Option<crate::journal::store::RowBefore>), JournalError>"
)]
pub struct ReplaceMessage {
    pub id: MessageId,
    pub replacement: crate::journal::store::Replacement,
}

/// Put a replaced row back (see [`crate::journal::store::unreplace`]).
#[derive(Message)]
#[rtype(result = "Result<bool, JournalError>")]
pub struct Unreplace {
    pub id: MessageId,
    pub wrote: crate::journal::store::RowBefore,
    pub before: crate::journal::store::RowBefore,
}

/// Bring a dead message back (see [`crate::journal::store::requeue_dead`]).
#[derive(Message)]
#[rtype(result = "Result<RequeueOutcome, JournalError>")]
pub struct RequeueDead {
    pub id: MessageId,
    pub now: i64,
}

/// End a dead message's life as Deleted (see [`crate::journal::store::delete_dead`]).
#[derive(Message)]
#[rtype(result = "Result<DeleteDeadOutcome, JournalError>")]
pub struct DeleteDead {
    pub id: MessageId,
    pub now: i64,
}

/// Live messages by bizKey: the one holding `key`, or a page of those whose
/// key starts with `prefix`.
pub enum LiveByBizKey {
    Exact {
        topic: String,
        key: String,
    },
    Prefix {
        topic: String,
        prefix: String,
        /// Only messages in this (live) status.
        status: Option<Status>,
        after: i64,
        limit: i64,
    },
}

/// Does the database take a write (see [`crate::journal::store::probe_write`])?
#[derive(Message)]
#[rtype(result = "Result<(), JournalError>")]
pub struct ProbeWrite;

/// Deletes finished messages and their history (see
/// [`crate::journal::store::retention::purge`]).
#[derive(Message)]
#[rtype(result = "Result<u64, JournalError>")]
pub struct Purge {
    pub ids: Vec<i64>,
    pub statuses: Vec<i16>,
    pub before: i64,
}

/// Delete the records of outbox rows pushed before `before` (see
/// [`crate::journal::store::retention::purge_outbox_done`]).
#[derive(Message)]
#[rtype(result = "Result<u64, JournalError>")]
pub struct PurgeOutbox {
    pub before: i64,
}

/// A read of the journal: a store function run on a pooled connection on
/// the journal's threads. Every query that only reads goes through it, so
/// a new read is a store function and the call that names it.
pub struct Read<R>(pub ReadFn<R>);

/// What a [`Read`] runs.
pub type ReadFn<R> = Box<dyn FnOnce(&mut JournalConn) -> Result<R, JournalError> + Send>;

impl<R: Send + 'static> actix::Message for Read<R> {
    type Result = Result<R, JournalError>;
}

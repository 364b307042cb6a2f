//! The messages the JournalActor answers: one per write or read of the
//! journal's storage layer.

use std::sync::Arc;

use actix::prelude::*;

use crate::error::JournalError;
use crate::journal::models::{FlowRow, MessageRow};
use crate::journal::store::{
    DeleteDeadOutcome, InsertOutcome, RequeueOutcome, RowState, StatusChange,
};
use crate::message::{Message, MessageId, Status};

/// Insert messages as WaitPut in one transaction (a group commit).
#[derive(Message)]
#[rtype(result = "Result<Vec<InsertOutcome>, JournalError>")]
pub struct InsertMessages(pub Vec<Message>, pub Vec<bool>);

/// Write flow rows and status updates in one transaction.
#[derive(Message)]
#[rtype(result = "Result<(), JournalError>")]
pub struct RecordFlow(pub Arc<Vec<StatusChange>>);

/// A message and its flow history.
#[derive(Message)]
#[rtype(result = "Result<Option<(MessageRow, Vec<FlowRow>)>, JournalError>")]
pub struct FindMessage(pub MessageId);

/// One keyset page of live messages, for restore.
#[derive(Message)]
#[rtype(result = "Result<Vec<MessageRow>, JournalError>")]
pub struct LivePage {
    pub after: i64,
    pub limit: i64,
    /// Leave out WaitPut messages due after this (the Redis horizon).
    pub far_from: Option<i64>,
}

/// How many messages wait in the journal alone due after `far_from` (see
/// [`crate::journal::store::count_waiting_beyond`]).
#[derive(Message)]
#[rtype(result = "Result<u64, JournalError>")]
pub struct CountWaitingBeyond {
    pub far_from: i64,
}

/// One page of the messages listed as waiting, as they come within the
/// Redis horizon (see [`crate::journal::store::waiting_page`]).
#[derive(Message)]
#[rtype(result = "Result<Vec<(i64, i64)>, JournalError>")]
pub struct WaitingPage {
    pub after: (i64, i64),
    pub due_until: i64,
    pub limit: i64,
}

/// Takes `(due_time, id)` entries off the waiting list.
#[derive(Message)]
#[rtype(result = "Result<(), JournalError>")]
pub struct UnlistWaiting(pub Vec<(i64, i64)>);

/// How many live messages have ids above `after` (see
/// [`crate::journal::store::count_live`]).
#[derive(Message)]
#[rtype(result = "Result<u64, JournalError>")]
pub struct CountLive {
    pub after: i64,
}

/// One keyset page of live rows, without bodies, for the reconciler (see
/// [`crate::journal::store::live_states`]).
#[derive(Message)]
#[rtype(result = "Result<(Vec<RowState>, Option<i64>), JournalError>")]
pub struct LiveStates {
    pub after: i64,
    pub limit: i64,
    /// Leave out WaitPut messages due after this (the Redis horizon).
    pub far_from: Option<i64>,
}

/// What the reconciler reads of the rows of these ids.
#[derive(Message)]
#[rtype(result = "Result<Vec<RowState>, JournalError>")]
pub struct StatesOf(pub Vec<i64>);

/// The whole rows of these ids.
#[derive(Message)]
#[rtype(result = "Result<Vec<MessageRow>, JournalError>")]
pub struct RowsOf(pub Vec<i64>);

/// Dead messages of a topic, with their histories.
#[derive(Message)]
#[rtype(result = "Result<Vec<(MessageRow, Vec<FlowRow>)>, JournalError>")]
pub struct DeadPage {
    pub topic: String,
    pub after: i64,
    pub limit: i64,
}

/// Move live messages to a new due time and/or priority (see
/// [`crate::journal::store::move_messages`]).
#[derive(Message)]
#[rtype(result = "Result<Vec<crate::journal::store::JournalMove>, JournalError>")]
pub struct MoveMessages {
    pub ids: Vec<MessageId>,
    pub due: Option<i64>,
    pub priority: Option<i32>,
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

/// One page of a topic's messages in one status (see [`crate::journal::store::topic_page`]).
#[derive(Message)]
#[rtype(result = "Result<Vec<MessageRow>, JournalError>")]
pub struct TopicPage {
    pub topic: String,
    pub status: Status,
    pub after: i64,
    pub limit: i64,
}

/// Messages per topic and status (see [`crate::journal::store::topic_counts`]).
#[derive(Message)]
#[rtype(result = "Result<Vec<(String, i16, i64)>, JournalError>")]
pub struct TopicCounts {
    pub limit: i64,
}

/// Whether the journal holds a message of the topic (see [`crate::journal::store::topic_known`]).
#[derive(Message)]
#[rtype(result = "Result<bool, JournalError>")]
pub struct TopicKnown {
    pub topic: String,
}

/// Live messages by bizKey: the one holding `key`, or a page of those whose
/// key starts with `prefix`.
#[derive(Message)]
#[rtype(result = "Result<(Vec<MessageRow>, Option<i64>), JournalError>")]
pub enum LiveByBizKey {
    Exact {
        topic: String,
        key: String,
    },
    Prefix {
        topic: String,
        prefix: String,
        /// Only messages in this (live) status.
        status: Option<crate::message::Status>,
        after: i64,
        limit: i64,
    },
}

/// Is the database answering?
#[derive(Message)]
#[rtype(result = "Result<(), JournalError>")]
pub struct Ping;

/// Does the database take a write (see [`crate::journal::store::probe_write`])?
#[derive(Message)]
#[rtype(result = "Result<(), JournalError>")]
pub struct ProbeWrite;

/// Messages ended by one of `statuses` per the flow rows with ids in
/// `(after, below)` (see [`crate::journal::store::retention::ended_page`]).
#[derive(Message)]
#[rtype(result = "Result<(Vec<i64>, Option<i64>), JournalError>")]
pub struct EndedPage {
    pub after: i64,
    pub below: i64,
    pub statuses: Vec<i16>,
    pub limit: i64,
}

/// Deletes finished messages and their history (see
/// [`crate::journal::store::retention::purge`]).
#[derive(Message)]
#[rtype(result = "Result<u64, JournalError>")]
pub struct Purge {
    pub ids: Vec<i64>,
    pub statuses: Vec<i16>,
    pub before: i64,
}

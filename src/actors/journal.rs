//! JournalActor: the journal's blocking work (diesel) on a SyncArbiter, away
//! from the HTTP and shard threads. Callers use [`crate::journal::Journal`],
//! which batches inserts and flow rows before they reach this actor.

use std::sync::{Arc, Mutex, MutexGuard};

use actix::prelude::*;

use crate::error::JournalError;
use crate::journal::connection::Pool;
use crate::journal::models::{FlowRow, MessageRow};
use crate::journal::store::{self, InsertOutcome, NodeInfo, StatusChange};
use crate::message::{IdGenerator, Message, MessageId};
use crate::redis::keys::Keys;

/// Insert messages as WaitPut in one transaction (a group commit).
#[derive(Message)]
#[rtype(result = "Result<Vec<InsertOutcome>, JournalError>")]
pub struct InsertMessages(pub Vec<Message>);

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
}

/// Is the database answering?
#[derive(Message)]
#[rtype(result = "Result<(), JournalError>")]
pub struct Ping;

pub struct JournalActor {
    pub pool: Pool,
    /// SQLite has one writer at a time, and its busy handler sleeps in
    /// growing steps while it waits; writers queue on this lock instead and
    /// start the moment the previous commit ends. None for MySQL/MariaDB.
    pub write_lock: Option<Arc<Mutex<()>>>,
    pub ids: Arc<IdGenerator>,
    pub node: NodeInfo,
    pub keys: Keys,
    /// Each shard's delay zset key, named on every WaitPut flow row.
    pub delay_names: Vec<Arc<str>>,
}

impl JournalActor {
    fn writing(&self) -> Option<MutexGuard<'_, ()>> {
        self.write_lock
            .as_ref()
            .map(|l| l.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }
}

impl Actor for JournalActor {
    type Context = SyncContext<Self>;
}

impl Handler<InsertMessages> for JournalActor {
    type Result = Result<Vec<InsertOutcome>, JournalError>;

    fn handle(&mut self, msg: InsertMessages, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        let _writing = self.writing();
        let (keys, names) = (&self.keys, &self.delay_names);
        let shard_name = |id: MessageId| names[keys.shard_of(id) as usize].clone();
        // Another writer (this node's or another node's) may commit the same
        // live (topic, bizKey) between this batch's check and its insert:
        // the batch rolls back; run it again and the check finds that
        // message, so only the duplicate rows change outcome.
        let mut tries = 0;
        loop {
            match store::insert_messages(&mut conn, &self.ids, &self.node, &shard_name, &msg.0) {
                Err(JournalError::Database(diesel::result::Error::DatabaseError(
                    diesel::result::DatabaseErrorKind::UniqueViolation,
                    _,
                ))) if tries < 5 => tries += 1,
                other => return other,
            }
        }
    }
}

impl Handler<RecordFlow> for JournalActor {
    type Result = Result<(), JournalError>;

    fn handle(&mut self, msg: RecordFlow, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        let _writing = self.writing();
        store::apply_changes(&mut conn, &self.ids, &self.node, &msg.0)
    }
}

impl Handler<FindMessage> for JournalActor {
    type Result = Result<Option<(MessageRow, Vec<FlowRow>)>, JournalError>;

    fn handle(&mut self, msg: FindMessage, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        match store::find(&mut conn, msg.0)? {
            Some(row) => Ok(Some((row, store::history(&mut conn, msg.0)?))),
            None => Ok(None),
        }
    }
}

impl Handler<LivePage> for JournalActor {
    type Result = Result<Vec<MessageRow>, JournalError>;

    fn handle(&mut self, msg: LivePage, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        store::live_page(&mut conn, msg.after, msg.limit)
    }
}

impl Handler<Ping> for JournalActor {
    type Result = Result<(), JournalError>;

    fn handle(&mut self, _: Ping, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        store::ping(&mut conn)
    }
}

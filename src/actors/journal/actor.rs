//! The JournalActor: runs on a SyncArbiter's threads and does the blocking
//! (diesel) work of each message by calling [`crate::journal::store`].

use std::sync::{Arc, MutexGuard};

use actix::prelude::*;

use crate::error::JournalError;
use crate::journal::connection::Pool;
use crate::journal::store::{self, DeleteDeadOutcome, InsertOutcome, NodeInfo, RequeueOutcome};
use crate::message::{IdGenerator, MessageId};
use crate::redis::keys::Keys;

use super::messages::{
    DeleteDead, InsertMessages, MoveMessages, ProbeWrite, Purge, PurgeOutbox, Read, RecordFlow,
    ReplaceMessage, RequeueDead, UnlistWaiting, Unreplace,
};
use super::write_lock::WriteLock;

pub struct JournalActor {
    pub pool: Pool,
    /// SQLite has one writer at a time, and its busy handler sleeps in
    /// growing steps while it waits; writers queue on this lock instead and
    /// start the moment the previous commit ends. None for MySQL/MariaDB.
    pub write_lock: Option<Arc<WriteLock>>,
    pub ids: Arc<IdGenerator>,
    pub node: NodeInfo,
    pub keys: Keys,
    /// Each shard's delay zset key, named on every WaitPut flow row.
    pub delay_names: Vec<Arc<str>>,
    /// This actor writes the status changes no caller waits for: it lets
    /// pushes take the SQLite write lock first.
    pub background: bool,
}

impl JournalActor {
    fn writing(&self) -> Option<MutexGuard<'_, ()>> {
        self.write_lock.as_ref().map(|l| l.first())
    }
}

impl Actor for JournalActor {
    type Context = SyncContext<Self>;
}

impl<R: Send + 'static> Handler<Read<R>> for JournalActor {
    type Result = Result<R, JournalError>;

    fn handle(&mut self, msg: Read<R>, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        (msg.0)(&mut conn)
    }
}

impl Handler<InsertMessages> for JournalActor {
    type Result = Result<Vec<InsertOutcome>, JournalError>;

    fn handle(&mut self, msg: InsertMessages, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        let _writing = self.writing();
        let (keys, names) = (&self.keys, &self.delay_names);
        let shard_name = |id: MessageId| names[keys.shard_of(id) as usize].clone();
        // A bizKey raced by another writer is settled row by row inside
        // the transaction (see `store::insert_messages`). What is left is
        // MySQL's deadlock detector picking this transaction as the victim
        // when two batches lock the same keys in opposite orders: the whole
        // transaction was rolled back, so it runs again.
        let mut tries = 0;
        loop {
            match store::insert_messages(
                &mut conn,
                &self.ids,
                &self.node,
                &shard_name,
                &msg.0,
                &msg.1,
                msg.2.as_ref(),
            ) {
                Err(e) if e.is_deadlock() && tries < 5 => tries += 1,
                other => return other,
            }
        }
    }
}

impl Handler<RecordFlow> for JournalActor {
    type Result = Result<(), JournalError>;

    fn handle(&mut self, msg: RecordFlow, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        // The changes no caller waits for let waiting pushes go first.
        let _writing = match &self.write_lock {
            Some(l) if self.background => Some(l.after_pushes()),
            _ => self.writing(),
        };
        store::apply_changes(&mut conn, &self.ids, &self.node, &msg.0)
    }
}

impl Handler<UnlistWaiting> for JournalActor {
    type Result = Result<(), JournalError>;

    fn handle(&mut self, msg: UnlistWaiting, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        let _writing = self.writing();
        store::unlist_waiting(&mut conn, &msg.0)
    }
}

impl Handler<RequeueDead> for JournalActor {
    type Result = Result<RequeueOutcome, JournalError>;

    fn handle(&mut self, msg: RequeueDead, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        let _writing = self.writing();
        let shard = self.delay_names[self.keys.shard_of(msg.id) as usize].clone();
        store::requeue_dead(&mut conn, &self.ids, &self.node, shard, msg.id, msg.now)
    }
}

impl Handler<MoveMessages> for JournalActor {
    type Result = Result<Vec<store::JournalMove>, JournalError>;

    fn handle(&mut self, msg: MoveMessages, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        let _writing = self.writing();
        store::move_messages(&mut conn, &msg.ids, msg.due, msg.priority)
    }
}

impl Handler<ReplaceMessage> for JournalActor {
    type Result = Result<(store::JournalMove, Option<store::RowBefore>), JournalError>;

    fn handle(&mut self, msg: ReplaceMessage, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        let _writing = self.writing();
        // Concurrent pushes of one bizKey lock its row and its key's index
        // entry; MySQL's deadlock detector may pick this transaction, rolled
        // back whole: it runs again, as an insert does.
        let mut tries = 0;
        loop {
            match store::replace_message(&mut conn, msg.id, &msg.replacement) {
                Err(e) if e.is_deadlock() && tries < 5 => tries += 1,
                other => return other,
            }
        }
    }
}

impl Handler<Unreplace> for JournalActor {
    type Result = Result<bool, JournalError>;

    fn handle(&mut self, msg: Unreplace, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        let _writing = self.writing();
        let mut tries = 0;
        loop {
            match store::unreplace(&mut conn, msg.id, &msg.wrote, &msg.before) {
                Err(e) if e.is_deadlock() && tries < 5 => tries += 1,
                other => return other,
            }
        }
    }
}

impl Handler<DeleteDead> for JournalActor {
    type Result = Result<DeleteDeadOutcome, JournalError>;

    fn handle(&mut self, msg: DeleteDead, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        let _writing = self.writing();
        let shard = self.delay_names[self.keys.shard_of(msg.id) as usize].clone();
        store::delete_dead(&mut conn, &self.ids, &self.node, shard, msg.id, msg.now)
    }
}

impl Handler<ProbeWrite> for JournalActor {
    type Result = Result<(), JournalError>;

    fn handle(&mut self, _: ProbeWrite, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        let _writing = self.writing();
        store::probe_write(&mut conn)
    }
}

impl Handler<Purge> for JournalActor {
    type Result = Result<u64, JournalError>;

    fn handle(&mut self, msg: Purge, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        // Bulk work: pushes take SQLite's write lock first.
        let _writing = self.write_lock.as_ref().map(|l| l.after_pushes());
        store::retention::purge(&mut conn, &msg.ids, &msg.statuses, msg.before)
    }
}

impl Handler<PurgeOutbox> for JournalActor {
    type Result = Result<u64, JournalError>;

    fn handle(&mut self, msg: PurgeOutbox, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        let _writing = self.write_lock.as_ref().map(|l| l.after_pushes());
        store::retention::purge_outbox_done(&mut conn, msg.before)
    }
}

/// Lowers the calling thread's CPU priority to `nice` (Linux keeps one per
/// thread); a thread already at that nice value or lower is left alone, so
/// a node started niced is never raised.
#[cfg(target_os = "linux")]
pub(super) fn lower_thread_priority(nice: i32) {
    // SAFETY: gettid has no preconditions; getpriority and setpriority only
    // read their arguments; errno is this thread's own.
    let (tid, current) = unsafe {
        let tid = libc::gettid() as libc::id_t;
        *libc::__errno_location() = 0;
        (tid, libc::getpriority(libc::PRIO_PROCESS, tid))
    };
    if nice <= current {
        return;
    }
    // SAFETY: as above.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } != 0 {
        tracing::warn!(nice, error = %std::io::Error::last_os_error(), "cannot lower the journal writer's priority");
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn lower_thread_priority(_nice: i32) {}

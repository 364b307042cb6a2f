//! The JournalActor: runs on a SyncArbiter's threads and does the blocking
//! (diesel) work of each message by calling [`crate::journal::store`].

use std::sync::{Arc, MutexGuard};

use actix::prelude::*;

use crate::error::JournalError;
use crate::journal::connection::Pool;
use crate::journal::models::{FlowRow, MessageRow};
use crate::journal::store::{
    self, DeleteDeadOutcome, InsertOutcome, NodeInfo, RequeueOutcome, RowState,
};
use crate::message::{IdGenerator, MessageId};
use crate::redis::keys::Keys;

use super::messages::{
    CountLive, CountWaitingBeyond, DeadPage, DeleteDead, EndedPage, FindMessage, InsertMessages,
    LiveByBizKey, LivePage, LiveStates, MoveMessages, Ping, ProbeWrite, Purge, RecordFlow,
    RequeueDead, RowsOf, StatesOf, TopicCounts, TopicKnown, TopicPage, UnlistWaiting, WaitingPage,
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

impl Handler<FindMessage> for JournalActor {
    type Result = Result<Option<(MessageRow, Vec<FlowRow>)>, JournalError>;

    fn handle(&mut self, msg: FindMessage, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        store::find_with_history(&mut conn, msg.0)
    }
}

impl Handler<LivePage> for JournalActor {
    type Result = Result<Vec<MessageRow>, JournalError>;

    fn handle(&mut self, msg: LivePage, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        store::live_page(&mut conn, msg.after, msg.limit, msg.far_from)
    }
}

impl Handler<CountWaitingBeyond> for JournalActor {
    type Result = Result<u64, JournalError>;

    fn handle(&mut self, msg: CountWaitingBeyond, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        store::count_waiting_beyond(&mut conn, msg.far_from)
    }
}

impl Handler<WaitingPage> for JournalActor {
    type Result = Result<Vec<(i64, i64)>, JournalError>;

    fn handle(&mut self, msg: WaitingPage, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        store::waiting_page(&mut conn, msg.after, msg.due_until, msg.limit)
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

impl Handler<CountLive> for JournalActor {
    type Result = Result<u64, JournalError>;

    fn handle(&mut self, msg: CountLive, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        store::count_live(&mut conn, msg.after)
    }
}

impl Handler<LiveStates> for JournalActor {
    type Result = Result<(Vec<RowState>, Option<i64>), JournalError>;

    fn handle(&mut self, msg: LiveStates, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        store::live_states(&mut conn, msg.after, msg.limit, msg.far_from)
    }
}

impl Handler<StatesOf> for JournalActor {
    type Result = Result<Vec<RowState>, JournalError>;

    fn handle(&mut self, msg: StatesOf, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        store::states_of(&mut conn, &msg.0)
    }
}

impl Handler<RowsOf> for JournalActor {
    type Result = Result<Vec<MessageRow>, JournalError>;

    fn handle(&mut self, msg: RowsOf, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        store::rows_of(&mut conn, &msg.0)
    }
}

impl Handler<DeadPage> for JournalActor {
    type Result = Result<Vec<(MessageRow, Vec<FlowRow>)>, JournalError>;

    fn handle(&mut self, msg: DeadPage, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        store::dead_page(&mut conn, &msg.topic, msg.after, msg.limit)
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

impl Handler<DeleteDead> for JournalActor {
    type Result = Result<DeleteDeadOutcome, JournalError>;

    fn handle(&mut self, msg: DeleteDead, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        let _writing = self.writing();
        let shard = self.delay_names[self.keys.shard_of(msg.id) as usize].clone();
        store::delete_dead(&mut conn, &self.ids, &self.node, shard, msg.id, msg.now)
    }
}

impl Handler<TopicPage> for JournalActor {
    type Result = Result<Vec<MessageRow>, JournalError>;

    fn handle(&mut self, msg: TopicPage, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        store::topic_page(&mut conn, &msg.topic, msg.status, msg.after, msg.limit)
    }
}

impl Handler<TopicCounts> for JournalActor {
    type Result = Result<Vec<(String, i16, i64)>, JournalError>;

    fn handle(&mut self, msg: TopicCounts, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        store::topic_counts(&mut conn, msg.limit)
    }
}

impl Handler<TopicKnown> for JournalActor {
    type Result = Result<bool, JournalError>;

    fn handle(&mut self, msg: TopicKnown, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        store::topic_known(&mut conn, &msg.topic)
    }
}

impl Handler<LiveByBizKey> for JournalActor {
    type Result = Result<(Vec<MessageRow>, Option<i64>), JournalError>;

    fn handle(&mut self, msg: LiveByBizKey, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        match msg {
            LiveByBizKey::Exact { topic, key } => Ok((
                store::live_by_biz_key(&mut conn, &topic, &key)?
                    .into_iter()
                    .collect(),
                None,
            )),
            LiveByBizKey::Prefix {
                topic,
                prefix,
                status,
                after,
                limit,
            } => store::live_by_biz_key_prefix(&mut conn, &topic, &prefix, status, after, limit),
        }
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

impl Handler<EndedPage> for JournalActor {
    type Result = Result<(Vec<i64>, Option<i64>), JournalError>;

    fn handle(&mut self, msg: EndedPage, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        store::retention::ended_page(&mut conn, msg.after, msg.below, &msg.statuses, msg.limit)
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

impl Handler<Ping> for JournalActor {
    type Result = Result<(), JournalError>;

    fn handle(&mut self, _: Ping, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        store::ping(&mut conn)
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

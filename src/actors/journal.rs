//! The journal handle and its JournalActor.
//!
//! [`Journal`] is the handle the rest of delayq uses. It feeds two batchers:
//! - inserts are group-committed: pushes that arrive while a commit is under
//!   way go together into the next transaction, and each push is answered
//!   only after its own transaction committed;
//! - status changes are gathered for a few milliseconds (or until many are
//!   waiting) and written together; a failed write is retried with backoff
//!   and never dropped. Changes a caller waits for (ack, cancel) take a lane
//!   of their own, so they do not queue behind a burst of Ready/Consuming
//!   rows; the journal's update rules make the two lanes' order irrelevant
//!   (see [`store::apply_changes`]).
//! - the changes waiting to be written are counted: past `--journal-backlog`
//!   the shard actors stop promoting due messages ([`Journal::lagging`])
//!   until the journal catches up, so a database outage costs lateness,
//!   not unbounded memory. Nothing is dropped: at shutdown what the database
//!   would not take in time is handed back ([`Journal::close`]) and kept in
//!   Redis until a node writes it (see `node.rs`).
//! - a batch the database refuses while it answers (a constraint, a
//!   trigger) is split until the refused changes are alone; they are set
//!   aside and reported (`GET /admin/journal`), the rest is written. A group
//!   commit of pushes that fails so is tried again push by push, so only the
//!   refused push gets the error.
//!
//! The JournalActor does the blocking work (diesel) on a SyncArbiter, away
//! from the HTTP and shard threads; it calls the storage layer in
//! [`crate::journal`], which knows nothing of actors.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::error::JournalError;
use crate::journal::connection::{self, JournalUrl, Pool};
use crate::journal::models::{FlowRow, MessageRow};
use crate::journal::store::{
    self, DeleteDeadOutcome, InsertOutcome, NodeInfo, RequeueOutcome, RowState, StatusChange,
};
use crate::message::{now_ms, IdGenerator, Message, MessageId, Status};
use crate::metrics::metrics;
use crate::redis::keys::Keys;
use crate::redis::schedule::RedisSchedule;

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

/// How many live messages have ids above `after` (see
/// [`store::count_live`]).
#[derive(Message)]
#[rtype(result = "Result<u64, JournalError>")]
pub struct CountLive {
    pub after: i64,
}

/// One keyset page of live rows, without bodies, for the reconciler (see
/// [`store::live_states`]).
#[derive(Message)]
#[rtype(result = "Result<(Vec<RowState>, Option<i64>), JournalError>")]
pub struct LiveStates {
    pub after: i64,
    pub limit: i64,
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

/// Bring a dead message back (see [`store::requeue_dead`]).
#[derive(Message)]
#[rtype(result = "Result<RequeueOutcome, JournalError>")]
pub struct RequeueDead {
    pub id: MessageId,
    pub now: i64,
}

/// End a dead message's life as Deleted (see [`store::delete_dead`]).
#[derive(Message)]
#[rtype(result = "Result<DeleteDeadOutcome, JournalError>")]
pub struct DeleteDead {
    pub id: MessageId,
    pub now: i64,
}

/// One page of a topic's messages in one status (see [`store::topic_page`]).
#[derive(Message)]
#[rtype(result = "Result<Vec<MessageRow>, JournalError>")]
pub struct TopicPage {
    pub topic: String,
    pub status: Status,
    pub after: i64,
    pub limit: i64,
}

/// Messages per topic and status (see [`store::topic_counts`]).
#[derive(Message)]
#[rtype(result = "Result<Vec<(String, i16, i64)>, JournalError>")]
pub struct TopicCounts {
    pub limit: i64,
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
        after: i64,
        limit: i64,
    },
}

/// Is the database answering?
#[derive(Message)]
#[rtype(result = "Result<(), JournalError>")]
pub struct Ping;

/// Does the database take a write (see [`store::probe_write`])?
#[derive(Message)]
#[rtype(result = "Result<(), JournalError>")]
pub struct ProbeWrite;

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

/// SQLite's one writer at a time, with pushes first: a producer waits for
/// its commit, while the status changes of deliveries can wait a little.
#[derive(Default)]
pub struct WriteLock {
    lock: Mutex<()>,
    /// Writers (pushes, changes a caller waits for) waiting for the lock.
    waiting: AtomicUsize,
}

/// How long background status changes let waiting pushes go first before
/// they take the lock in turn, so a stream of pushes cannot starve them.
const YIELD_TO_PUSHES: Duration = Duration::from_millis(50);

impl WriteLock {
    fn first(&self) -> MutexGuard<'_, ()> {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        guard
    }

    fn after_pushes(&self) -> MutexGuard<'_, ()> {
        let until = std::time::Instant::now() + YIELD_TO_PUSHES;
        loop {
            let guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            if self.waiting.load(Ordering::Acquire) == 0 || std::time::Instant::now() >= until {
                return guard;
            }
            drop(guard);
            std::thread::sleep(Duration::from_micros(200));
        }
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
            match store::insert_messages(&mut conn, &self.ids, &self.node, &shard_name, &msg.0) {
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
        store::live_page(&mut conn, msg.after, msg.limit)
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
        store::live_states(&mut conn, msg.after, msg.limit)
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
                after,
                limit,
            } => store::live_by_biz_key_prefix(&mut conn, &topic, &prefix, after, limit),
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

impl Handler<Ping> for JournalActor {
    type Result = Result<(), JournalError>;

    fn handle(&mut self, _: Ping, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        store::ping(&mut conn)
    }
}

/// How the journal is started.
#[derive(Debug, Clone, Copy)]
pub struct JournalOptions {
    /// Status changes queued before promotion pauses (`--journal-backlog`).
    pub backlog: usize,
    /// The nice value of the thread that writes the status changes no
    /// caller waits for (`--journal-nice`; 0: the process's own priority).
    pub background_nice: i32,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            backlog: DEFAULT_BACKLOG,
            background_nice: 0,
        }
    }
}

/// Default of `--journal-nice`.
pub const DEFAULT_NICE: i32 = 10;

/// Lowers the calling thread's CPU priority to `nice` (Linux keeps one per
/// thread); a thread already at that nice value or lower is left alone, so
/// a node started niced is never raised.
#[cfg(target_os = "linux")]
fn lower_thread_priority(nice: i32) {
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
fn lower_thread_priority(_nice: i32) {}

/// Most messages in one group commit.
const MAX_INSERT_BATCH: usize = 2_000;
/// Most status changes in one flow write, and how long the first waits.
const MAX_FLOW_BATCH: usize = 2_000;
const FLOW_WINDOW: Duration = Duration::from_millis(5);
/// A flow write waiting this long for the database means the journal is
/// behind (see [`Journal::behind`]).
const HUNG_WRITE_MS: i64 = 1_000;
/// How long a caller waits for its status change to be durable.
const DURABLE_WAIT: Duration = Duration::from_secs(2);

struct InsertRequest {
    messages: Vec<Message>,
    reply: oneshot::Sender<Result<Vec<InsertOutcome>, JournalError>>,
}

struct FlowRequest {
    changes: Vec<StatusChange>,
    /// Told when the changes are written, or why they were not.
    done: Option<oneshot::Sender<Result<(), String>>>,
}

/// Default of `--journal-backlog`: status changes queued before promotion
/// pauses (about 100 bytes each).
pub const DEFAULT_BACKLOG: usize = 200_000;
/// Refused changes kept for `GET /admin/journal`.
const POISON_KEPT: usize = 1_000;

/// A status change the database refused while it answered.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Refused {
    pub id: MessageId,
    pub status: crate::message::Status,
    pub attempts: Option<i32>,
    pub at: i64,
    pub error: String,
    pub refused_at: i64,
}

/// What waits to be written, shared by the handle and the writers.
#[derive(Default)]
struct Backlog {
    /// Status changes queued and not yet written (or set aside).
    pending: AtomicUsize,
    limit: usize,
    /// Shutting down: a write that fails after this (epoch ms) gives its
    /// changes back instead of retrying.
    closing_at: AtomicU64,
    closing: AtomicBool,
    /// Changes given back at shutdown.
    unwritten: Mutex<Vec<StatusChange>>,
    refused: Mutex<VecDeque<Refused>>,
    refused_total: AtomicU64,
    /// When a flow write last went through (epoch ms).
    last_write_ok: std::sync::atomic::AtomicI64,
    /// Since when flow writes have been failing for want of the database
    /// (epoch ms; 0: they are not).
    failing_since: std::sync::atomic::AtomicI64,
    /// Since when the flow write under way has been waiting for the
    /// database (epoch ms; 0: none is under way): a database that hangs
    /// rather than fails.
    writing_since: std::sync::atomic::AtomicI64,
}

impl Backlog {
    fn give_up(&self) -> bool {
        self.closing.load(Ordering::Acquire)
            && now_ms() as u64 >= self.closing_at.load(Ordering::Acquire)
    }
}

/// The journal's queue, as `GET /admin/journal` shows it.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BacklogView {
    pub pending: usize,
    pub limit: usize,
    pub lagging: bool,
    pub refused: u64,
    pub recent_refused: Vec<Refused>,
}

#[derive(Clone)]
pub struct Journal {
    actor: Addr<JournalActor>,
    inserts: mpsc::UnboundedSender<InsertRequest>,
    flows: mpsc::UnboundedSender<FlowRequest>,
    urgent: mpsc::UnboundedSender<FlowRequest>,
    backlog: Arc<Backlog>,
}

impl Journal {
    /// Starts the JournalActor threads and the two batchers. Must run inside
    /// an actix system. `backlog` bounds the queued status changes (see
    /// [`Journal::lagging`]).
    pub fn start(
        url: &JournalUrl,
        redis: RedisSchedule,
        node: NodeInfo,
        ids: Arc<IdGenerator>,
        options: JournalOptions,
    ) -> Journal {
        let keys = redis.keys().clone();
        let writers = url.parallel_writers();
        // One thread per parallel insert batch, one for the changes callers
        // wait for, two for reads; and one for the other changes.
        let threads = writers + 3;
        let pool = connection::pool(url, threads as u32 + 1);
        let write_lock =
            matches!(url, JournalUrl::Sqlite(_)).then(|| Arc::new(WriteLock::default()));
        let make = move |background: bool| {
            let (pool, write_lock, ids, node, keys) = (
                pool.clone(),
                write_lock.clone(),
                ids.clone(),
                node.clone(),
                keys.clone(),
            );
            move || JournalActor {
                pool: pool.clone(),
                write_lock: write_lock.clone(),
                ids: ids.clone(),
                node: node.clone(),
                delay_names: (0..keys.shards()).map(|s| keys.delay(s).into()).collect(),
                keys: keys.clone(),
                background,
            }
        };
        let actor = SyncArbiter::start_with_thread_builder(
            threads,
            || std::thread::Builder::new().name("journal".into()),
            make(false),
        );
        // Status changes no caller waits for (a promotion, a hand-out, an
        // ack answered before its commit) are the bulk of the journal's
        // work during a burst of deliveries. Their thread runs at a lower
        // CPU priority, so on a busy machine handing messages out comes
        // first and the journal catches up after (within `--journal-backlog`).
        let nice = options.background_nice;
        let background_actor = make(true);
        let background = SyncArbiter::start_with_thread_builder(
            1,
            || std::thread::Builder::new().name("journal-changes".into()),
            move || {
                lower_thread_priority(nice);
                background_actor()
            },
        );
        let (inserts, insert_rx) = mpsc::unbounded_channel();
        let (flows, flow_rx) = mpsc::unbounded_channel();
        let (urgent, urgent_rx) = mpsc::unbounded_channel();
        let backlog = Arc::new(Backlog {
            limit: options.backlog.max(1),
            ..Default::default()
        });
        actix::spawn(run_inserts(actor.clone(), insert_rx, writers));
        actix::spawn(run_flows(
            background,
            flow_rx,
            backlog.clone(),
            redis.clone(),
        ));
        actix::spawn(run_flows(actor.clone(), urgent_rx, backlog.clone(), redis));
        Journal {
            actor,
            inserts,
            flows,
            urgent,
            backlog,
        }
    }

    /// More status changes wait to be written than the backlog allows: the
    /// shard actors hold off promoting due messages until it shrinks.
    pub fn lagging(&self) -> bool {
        self.backlog.pending.load(Ordering::Acquire) >= self.backlog.limit
    }

    /// Half the backlog is taken: bulk work (a restore) waits before it
    /// adds more, leaving the rest to the scans and consumers.
    pub fn half_full(&self) -> bool {
        self.backlog.pending.load(Ordering::Acquire) >= self.backlog.limit / 2
    }

    /// Status changes are waiting because the journal is unreachable (or
    /// takes no writes), or more wait than the backlog allows: Redis is
    /// ahead of the journal by more than the usual milliseconds.
    pub fn behind(&self) -> bool {
        let writing = self.backlog.writing_since.load(Ordering::Acquire);
        self.backlog.failing_since.load(Ordering::Acquire) != 0
            || self.lagging()
            || (writing != 0 && now_ms() - writing > HUNG_WRITE_MS)
    }

    /// Status changes waiting to be written.
    pub fn backlog_pending(&self) -> usize {
        self.backlog.pending.load(Ordering::Acquire)
    }

    pub fn backlog(&self) -> BacklogView {
        let refused = self
            .backlog
            .refused
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        BacklogView {
            pending: self.backlog.pending.load(Ordering::Acquire),
            limit: self.backlog.limit,
            lagging: self.lagging(),
            refused: self.backlog.refused_total.load(Ordering::Acquire),
            recent_refused: refused.iter().rev().take(100).cloned().collect(),
        }
    }

    /// Shutdown: waits up to `wait` for every queued status change to be
    /// written, then gives back what the database did not take (for the
    /// caller to keep elsewhere). Changes queued afterwards are not
    /// covered: stop producing them first.
    pub async fn close(&self, wait: Duration) -> Vec<StatusChange> {
        let b = &self.backlog;
        b.closing_at.store(
            (now_ms() as u64).saturating_add(wait.as_millis() as u64),
            Ordering::Release,
        );
        b.closing.store(true, Ordering::Release);
        // Writers give up on a failing write after the deadline; allow them
        // one more attempt's time to hand their changes back.
        let deadline = tokio::time::Instant::now() + wait + Duration::from_secs(10);
        while b.pending.load(Ordering::Acquire) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let stuck = b.pending.load(Ordering::Acquire);
        if stuck > 0 {
            tracing::error!(
                changes = stuck,
                "status changes still being written when the node stopped (a database statement hung); they may not be journaled"
            );
        }
        std::mem::take(&mut *b.unwritten.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Makes messages durable (status WaitPut). Answers once their
    /// transaction committed, or with the error that stopped it: then
    /// nothing of the call was written.
    pub async fn insert(&self, messages: Vec<Message>) -> Result<Vec<InsertOutcome>, JournalError> {
        let (reply, rx) = oneshot::channel();
        self.inserts
            .send(InsertRequest { messages, reply })
            .map_err(|_| JournalError::Unavailable("journal is shutting down".into()))?;
        rx.await
            .map_err(|_| JournalError::Unavailable("journal is shutting down".into()))?
    }

    /// Queues status changes; they are written within a few milliseconds,
    /// and retried until written.
    pub fn record(&self, changes: Vec<StatusChange>) {
        if changes.is_empty() {
            return;
        }
        let n = changes.len();
        self.backlog.pending.fetch_add(n, Ordering::AcqRel);
        if self
            .flows
            .send(FlowRequest {
                changes,
                done: None,
            })
            .is_err()
        {
            self.backlog.pending.fetch_sub(n, Ordering::AcqRel);
            tracing::error!(
                changes = n,
                "journal flow writer has stopped; status changes not recorded"
            );
        }
    }

    /// Like [`Journal::record`], and waits until the changes are committed.
    pub async fn record_durable(&self, changes: Vec<StatusChange>) -> Result<(), JournalError> {
        self.committed(&self.urgent, changes).await
    }

    async fn committed(
        &self,
        lane: &mpsc::UnboundedSender<FlowRequest>,
        changes: Vec<StatusChange>,
    ) -> Result<(), JournalError> {
        let (done, rx) = oneshot::channel();
        let n = changes.len();
        self.backlog.pending.fetch_add(n, Ordering::AcqRel);
        lane.send(FlowRequest {
            changes,
            done: Some(done),
        })
        .map_err(|_| {
            self.backlog.pending.fetch_sub(n, Ordering::AcqRel);
            JournalError::Unavailable("journal is shutting down".into())
        })?;
        match tokio::time::timeout(DURABLE_WAIT, rx).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(refused))) => Err(JournalError::Refused(refused)),
            Ok(Err(_)) => Err(JournalError::Unavailable("journal is shutting down".into())),
            Err(_) => Err(JournalError::Unavailable(
                "the journal database did not commit in time; the change is queued and will be written when it answers".into(),
            )),
        }
    }

    pub async fn find(
        &self,
        id: MessageId,
    ) -> Result<Option<(MessageRow, Vec<FlowRow>)>, JournalError> {
        self.actor.send(FindMessage(id)).await?
    }

    pub async fn live_page(&self, after: i64, limit: i64) -> Result<Vec<MessageRow>, JournalError> {
        self.actor.send(LivePage { after, limit }).await?
    }

    pub async fn count_live(&self, after: i64) -> Result<u64, JournalError> {
        self.actor.send(CountLive { after }).await?
    }

    pub async fn live_states(
        &self,
        after: i64,
        limit: i64,
    ) -> Result<(Vec<RowState>, Option<i64>), JournalError> {
        self.actor.send(LiveStates { after, limit }).await?
    }

    pub async fn states_of(&self, ids: Vec<i64>) -> Result<Vec<RowState>, JournalError> {
        self.actor.send(StatesOf(ids)).await?
    }

    pub async fn rows_of(&self, ids: Vec<i64>) -> Result<Vec<MessageRow>, JournalError> {
        self.actor.send(RowsOf(ids)).await?
    }

    pub async fn ping(&self) -> Result<(), JournalError> {
        self.actor.send(Ping).await?
    }

    pub async fn dead_page(
        &self,
        topic: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<(MessageRow, Vec<FlowRow>)>, JournalError> {
        self.actor
            .send(DeadPage {
                topic: topic.to_string(),
                after,
                limit,
            })
            .await?
    }

    pub async fn requeue_dead(
        &self,
        id: MessageId,
        now: i64,
    ) -> Result<RequeueOutcome, JournalError> {
        self.actor.send(RequeueDead { id, now }).await?
    }

    pub async fn delete_dead(
        &self,
        id: MessageId,
        now: i64,
    ) -> Result<DeleteDeadOutcome, JournalError> {
        self.actor.send(DeleteDead { id, now }).await?
    }

    pub async fn topic_page(
        &self,
        topic: &str,
        status: Status,
        after: i64,
        limit: i64,
    ) -> Result<Vec<MessageRow>, JournalError> {
        self.actor
            .send(TopicPage {
                topic: topic.to_string(),
                status,
                after,
                limit,
            })
            .await?
    }

    pub async fn topic_counts(&self, limit: i64) -> Result<Vec<(String, i16, i64)>, JournalError> {
        self.actor.send(TopicCounts { limit }).await?
    }

    pub async fn live_by_biz_key(
        &self,
        query: LiveByBizKey,
    ) -> Result<(Vec<MessageRow>, Option<i64>), JournalError> {
        self.actor.send(query).await?
    }

    /// Waits until every status change queued so far is written.
    pub async fn flush(&self) -> Result<(), JournalError> {
        self.committed(&self.flows, Vec::new()).await?;
        self.committed(&self.urgent, Vec::new()).await
    }
}

/// Group commit: while one batch commits, the next one gathers.
async fn run_inserts(
    actor: Addr<JournalActor>,
    mut rx: mpsc::UnboundedReceiver<InsertRequest>,
    writers: usize,
) {
    let slots = Arc::new(Semaphore::new(writers));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = rx.recv().await else { return };
        let mut count = first.messages.len();
        let mut batch = vec![first];
        while count < MAX_INSERT_BATCH {
            match rx.try_recv() {
                Ok(req) => {
                    count += req.messages.len();
                    batch.push(req);
                }
                Err(_) => break,
            }
        }
        let actor = actor.clone();
        actix::spawn(async move {
            let messages: Vec<Message> = batch
                .iter()
                .flat_map(|r| r.messages.iter().cloned())
                .collect();
            let (rows, began) = (messages.len(), std::time::Instant::now());
            let result = match actor.send(InsertMessages(messages)).await {
                Ok(r) => r,
                Err(e) => Err(e.into()),
            };
            if result.is_ok() {
                metrics().journal_committed("insert", rows, began);
            }
            match result {
                Ok(mut outcomes) => {
                    for req in batch.into_iter().rev() {
                        let mine = outcomes.split_off(outcomes.len() - req.messages.len());
                        let _ = req.reply.send(Ok(mine));
                    }
                }
                // The database answers, yet refused the group: each push
                // (all or none of its messages) is tried alone, so only the
                // refused one gets the error.
                Err(e) if e.is_refusal() && database_answers(&actor).await => {
                    tracing::warn!(error = %e, pushes = batch.len(), "journal refused a group commit; committing its pushes one by one");
                    for req in batch {
                        let alone = match actor.send(InsertMessages(req.messages)).await {
                            // Refused alone, by a database that takes other
                            // writes: this push is the trouble.
                            Ok(Err(e))
                                if e.is_refusal()
                                    && matches!(actor.send(ProbeWrite).await, Ok(Ok(()))) =>
                            {
                                Err(JournalError::Refused(e.to_string()))
                            }
                            Ok(r) => r,
                            Err(e) => Err(e.into()),
                        };
                        let _ = req.reply.send(alone.map_err(|e| match e {
                            JournalError::Refused(m) => JournalError::Refused(m),
                            other => JournalError::Unavailable(other.to_string()),
                        }));
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "journal insert failed; pushes answered with 503");
                    let shared = e.to_string();
                    for req in batch {
                        let _ = req
                            .reply
                            .send(Err(JournalError::Unavailable(shared.clone())));
                    }
                }
            }
            drop(slot);
        });
    }
}

/// Does the database answer a trivial query?
async fn database_answers(actor: &Addr<JournalActor>) -> bool {
    matches!(actor.send(Ping).await, Ok(Ok(())))
}

/// Flow rows: gathered for a few ms, written in order, retried until written
/// (or, once shutting down, given back; or, refused by a database that
/// answers, set aside).
async fn run_flows(
    actor: Addr<JournalActor>,
    mut rx: mpsc::UnboundedReceiver<FlowRequest>,
    backlog: Arc<Backlog>,
    redis: RedisSchedule,
) {
    while let Some(first) = rx.recv().await {
        let mut changes = Vec::new();
        let mut waiters = Vec::new();
        let take = |req: FlowRequest, changes: &mut Vec<StatusChange>, waiters: &mut Vec<_>| {
            changes.extend(req.changes);
            waiters.extend(req.done);
        };
        take(first, &mut changes, &mut waiters);
        let window = tokio::time::sleep(FLOW_WINDOW);
        tokio::pin!(window);
        while changes.len() < MAX_FLOW_BATCH {
            // A caller waiting for durability (ack, cancel) does not sit out
            // the window: the batch takes what is queued and commits.
            if !waiters.is_empty() {
                while let Ok(req) = rx.try_recv() {
                    take(req, &mut changes, &mut waiters);
                }
                break;
            }
            tokio::select! {
                biased;
                req = rx.recv() => match req {
                    Some(req) => take(req, &mut changes, &mut waiters),
                    None => break,
                },
                _ = &mut window => break,
            }
        }
        let (n, began) = (changes.len(), std::time::Instant::now());
        // The ends (acked, cancelled, dead) in this batch: once written,
        // Redis no longer needs to keep them for the journal.
        let ends: Vec<MessageId> = changes
            .iter()
            .filter(|c| c.status.is_terminal())
            .map(|c| c.id)
            .collect();
        let written = write_flows(&actor, changes, &backlog).await;
        if !ends.is_empty() && matches!(written, Written::All) {
            let redis = redis.clone();
            actix::spawn(async move {
                if let Err(e) = redis.journaled(&ends).await {
                    // Left for the reconciler, which finds the journal has them.
                    tracing::debug!(error = %e, "cannot tell Redis the journal has these ends");
                }
            });
        }
        if n > 0 {
            metrics().journal_committed("flow", n, began);
        }
        backlog.pending.fetch_sub(n, Ordering::AcqRel);
        match written {
            Written::All => {
                for w in waiters {
                    let _ = w.send(Ok(()));
                }
            }
            // The callers cannot tell whose change it was: each is told;
            // one retrying finds its own change written, or refused again.
            Written::SetAside(error) => {
                for w in waiters {
                    let _ = w.send(Err(error.clone()));
                }
            }
            Written::GaveBack => {}
        }
    }
}

/// What became of a batch of status changes.
enum Written {
    All,
    /// Written but for changes the database refuses (set aside).
    SetAside(String),
    /// Shutting down: changes given back instead of written.
    GaveBack,
}

/// Writes one batch of status changes. Retries while the database is
/// unreachable; when it answers yet keeps refusing the batch, splits it in
/// halves until the refused changes are alone, and sets those aside. A
/// change is set aside only once the database is seen taking other writes
/// (another write went through meanwhile, or a probe write does): a
/// database that takes no write at all (read-only, out of space) is an
/// outage, waited out like any other.
async fn write_flows(
    actor: &Addr<JournalActor>,
    changes: Vec<StatusChange>,
    backlog: &Backlog,
) -> Written {
    let mut parts = vec![changes];
    let mut backoff = Duration::from_millis(50);
    let mut outcome = Written::All;
    while let Some(part) = parts.pop() {
        if part.is_empty() {
            continue;
        }
        let part = Arc::new(part);
        let mut refusals = 0;
        let mut first_refused = 0;
        loop {
            let _ = backlog.writing_since.compare_exchange(
                0,
                now_ms(),
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            let sent = actor.send(RecordFlow(part.clone())).await;
            backlog.writing_since.store(0, Ordering::Release);
            let (err, refusal) = match sent {
                Ok(Ok(())) => {
                    backlog.last_write_ok.store(now_ms(), Ordering::Release);
                    backlog.failing_since.store(0, Ordering::Release);
                    break;
                }
                Ok(Err(e)) => (e.to_string(), e.is_refusal()),
                Err(e) => (e.to_string(), false),
            };
            if refusal && first_refused == 0 {
                first_refused = now_ms();
            }
            // Only a statement the database refuses while it answers counts
            // against the batch; anything else (an outage, no worker id for
            // the flow rows' ids) is waited out.
            let answers = refusal && database_answers(actor).await;
            if answers {
                refusals += 1;
                // Refused again and again by a database that answers: not
                // an outage (a single change gets more tries: a deadlock
                // victim is refused once or twice, then written).
                let alone = part.len() == 1;
                let takes_writes = || async {
                    backlog.last_write_ok.load(Ordering::Acquire) > first_refused
                        || matches!(actor.send(ProbeWrite).await, Ok(Ok(())))
                };
                if refusals >= 2 && (!alone || (refusals >= 4 && takes_writes().await)) {
                    let part = Arc::try_unwrap(part).unwrap_or_else(|p| (*p).clone());
                    if alone {
                        set_aside(backlog, &part[0], &err);
                        outcome = Written::SetAside(err);
                    } else {
                        tracing::warn!(error = %err, changes = part.len(), "journal refused a batch of status changes; splitting it");
                        let mut part = part;
                        let half = part.split_off(part.len() / 2);
                        parts.push(half);
                        parts.push(part);
                    }
                    break;
                }
            } else {
                let _ = backlog.failing_since.compare_exchange(
                    0,
                    now_ms(),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                tracing::warn!(error = %err, pending = part.len(), "journal flow write failed; retrying");
            }
            if backlog.give_up() {
                let part = Arc::try_unwrap(part).unwrap_or_else(|p| (*p).clone());
                tracing::warn!(
                    changes = part.len(),
                    "shutting down with the journal unreachable; giving status changes back"
                );
                backlog
                    .unwritten
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend(part);
                outcome = Written::GaveBack;
                break;
            }
            // A refusal is tried again at once (no outage to wait out);
            // an unreachable database, or one that takes no write at all,
            // with growing pauses.
            let pause = if answers && refusals < 4 {
                Duration::from_millis(10)
            } else if backlog.closing.load(Ordering::Acquire) {
                backoff.min(Duration::from_millis(200))
            } else {
                backoff
            };
            tokio::time::sleep(pause).await;
            if !answers || refusals >= 4 {
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
    outcome
}

fn set_aside(backlog: &Backlog, ch: &StatusChange, error: &str) {
    tracing::error!(id = %ch.id, status = %ch.status, at = ch.at, error, "the journal refuses this status change; set aside (GET /admin/journal)");
    backlog.refused_total.fetch_add(1, Ordering::AcqRel);
    metrics().journal_refused.inc();
    let mut kept = backlog.refused.lock().unwrap_or_else(|p| p.into_inner());
    if kept.len() >= POISON_KEPT {
        kept.pop_front();
    }
    kept.push_back(Refused {
        id: ch.id,
        status: ch.status,
        attempts: ch.attempts,
        at: ch.at,
        error: error.to_string(),
        refused_at: now_ms(),
    });
}

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
//!
//! The JournalActor does the blocking work (diesel) on a SyncArbiter, away
//! from the HTTP and shard threads; it calls the storage layer in
//! [`crate::journal`], which knows nothing of actors.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::error::JournalError;
use crate::journal::connection::{self, JournalUrl, Pool};
use crate::journal::models::{FlowRow, MessageRow};
use crate::journal::store::{
    self, InsertOutcome, NodeInfo, RequeueOutcome, RowState, StatusChange,
};
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

impl Handler<Ping> for JournalActor {
    type Result = Result<(), JournalError>;

    fn handle(&mut self, _: Ping, _: &mut Self::Context) -> Self::Result {
        let mut conn = self.pool.get()?;
        store::ping(&mut conn)
    }
}

/// Most messages in one group commit.
const MAX_INSERT_BATCH: usize = 2_000;
/// Most status changes in one flow write, and how long the first waits.
const MAX_FLOW_BATCH: usize = 2_000;
const FLOW_WINDOW: Duration = Duration::from_millis(5);
/// How long a caller waits for its status change to be durable.
const DURABLE_WAIT: Duration = Duration::from_secs(2);

struct InsertRequest {
    messages: Vec<Message>,
    reply: oneshot::Sender<Result<Vec<InsertOutcome>, JournalError>>,
}

struct FlowRequest {
    changes: Vec<StatusChange>,
    done: Option<oneshot::Sender<()>>,
}

#[derive(Clone)]
pub struct Journal {
    actor: Addr<JournalActor>,
    inserts: mpsc::UnboundedSender<InsertRequest>,
    flows: mpsc::UnboundedSender<FlowRequest>,
    urgent: mpsc::UnboundedSender<FlowRequest>,
}

impl Journal {
    /// Starts the JournalActor threads and the two batchers. Must run inside
    /// an actix system.
    pub fn start(url: &JournalUrl, keys: Keys, node: NodeInfo, ids: Arc<IdGenerator>) -> Journal {
        let writers = url.parallel_writers();
        // One thread per parallel insert batch, two for the flow lanes, two for reads.
        let threads = writers + 4;
        let pool = connection::pool(url, threads as u32);
        let write_lock =
            matches!(url, JournalUrl::Sqlite(_)).then(|| Arc::new(std::sync::Mutex::new(())));
        let actor = SyncArbiter::start(threads, move || JournalActor {
            pool: pool.clone(),
            write_lock: write_lock.clone(),
            ids: ids.clone(),
            node: node.clone(),
            delay_names: (0..keys.shards()).map(|s| keys.delay(s).into()).collect(),
            keys: keys.clone(),
        });
        let (inserts, insert_rx) = mpsc::unbounded_channel();
        let (flows, flow_rx) = mpsc::unbounded_channel();
        let (urgent, urgent_rx) = mpsc::unbounded_channel();
        actix::spawn(run_inserts(actor.clone(), insert_rx, writers));
        actix::spawn(run_flows(actor.clone(), flow_rx));
        actix::spawn(run_flows(actor.clone(), urgent_rx));
        Journal {
            actor,
            inserts,
            flows,
            urgent,
        }
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
        if !changes.is_empty()
            && self
                .flows
                .send(FlowRequest {
                    changes,
                    done: None,
                })
                .is_err()
        {
            tracing::error!("journal flow writer has stopped; status changes not recorded");
        }
    }

    /// Like [`Journal::record`], and waits until the changes are committed.
    pub async fn record_durable(&self, changes: Vec<StatusChange>) -> Result<(), JournalError> {
        Self::committed(&self.urgent, changes).await
    }

    async fn committed(
        lane: &mpsc::UnboundedSender<FlowRequest>,
        changes: Vec<StatusChange>,
    ) -> Result<(), JournalError> {
        let (done, rx) = oneshot::channel();
        lane.send(FlowRequest {
            changes,
            done: Some(done),
        })
        .map_err(|_| JournalError::Unavailable("journal is shutting down".into()))?;
        match tokio::time::timeout(DURABLE_WAIT, rx).await {
            Ok(Ok(())) => Ok(()),
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

    pub async fn live_by_biz_key(
        &self,
        query: LiveByBizKey,
    ) -> Result<(Vec<MessageRow>, Option<i64>), JournalError> {
        self.actor.send(query).await?
    }

    /// Waits until every status change queued so far is written.
    pub async fn flush(&self) -> Result<(), JournalError> {
        Self::committed(&self.flows, Vec::new()).await?;
        Self::committed(&self.urgent, Vec::new()).await
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
            let result = match actor.send(InsertMessages(messages)).await {
                Ok(r) => r,
                Err(e) => Err(e.into()),
            };
            match result {
                Ok(mut outcomes) => {
                    for req in batch.into_iter().rev() {
                        let mine = outcomes.split_off(outcomes.len() - req.messages.len());
                        let _ = req.reply.send(Ok(mine));
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

/// Flow rows: gathered for a few ms, written in order, retried until written.
async fn run_flows(actor: Addr<JournalActor>, mut rx: mpsc::UnboundedReceiver<FlowRequest>) {
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
        let mut backoff = Duration::from_millis(50);
        let batch = Arc::new(changes);
        loop {
            if batch.is_empty() {
                break;
            }
            match actor.send(RecordFlow(batch.clone())).await {
                Ok(Ok(())) => break,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, pending = batch.len(), "journal flow write failed; retrying")
                }
                Err(e) => tracing::warn!(error = %e, "journal actor unreachable; retrying"),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
        for w in waiters {
            let _ = w.send(());
        }
    }
}

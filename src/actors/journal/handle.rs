//! [`Journal`], the handle the rest of delayq uses: starting the actor
//! threads and batchers, queueing inserts and status changes, the backlog's
//! state, shutdown, and the reads.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::{mpsc, oneshot};

use crate::error::JournalError;
use crate::journal::connection::{self, JournalConn, JournalUrl};
use crate::journal::models::{FlowRow, MessageRow};
use crate::journal::store::{
    self, DeleteDeadOutcome, InsertOutcome, NodeInfo, RequeueOutcome, RowState, StatusChange,
};
use crate::message::{now_ms, IdGenerator, Message, MessageId, Status};
use crate::redis::schedule::RedisSchedule;

use super::actor::{lower_thread_priority, JournalActor};
use super::backlog::{Backlog, BacklogView, DEFAULT_BACKLOG};
use super::batches::{run_flows, run_inserts, FlowRequest, InsertRequest};
use super::holds::{Hold, Holds};
use super::messages::{
    DeleteDead, InsertMessages, LiveByBizKey, MoveMessages, Purge, PurgeOutbox, Read,
    ReplaceMessage, RequeueDead, UnlistWaiting, Unreplace,
};
use super::write_lock::WriteLock;

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

/// A flow write waiting this long for the database means the journal is
/// behind (see [`Journal::behind`]).
const HUNG_WRITE_MS: i64 = 1_000;
/// How long a caller waits for its status change to be durable.
const DURABLE_WAIT: Duration = Duration::from_secs(2);

#[derive(Clone)]
pub struct Journal {
    actor: Addr<JournalActor>,
    inserts: mpsc::UnboundedSender<InsertRequest>,
    flows: mpsc::UnboundedSender<FlowRequest>,
    urgent: mpsc::UnboundedSender<FlowRequest>,
    backlog: Arc<Backlog>,
    holds: Arc<Holds>,
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
            holds: Arc::default(),
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
    /// Inserts messages (all or none, one group commit); those flagged in
    /// `waiting` are due beyond the Redis horizon and listed as waiting
    /// (see [`crate::horizon`]).
    pub async fn insert(
        &self,
        messages: Vec<Message>,
        waiting: Vec<bool>,
    ) -> Result<Vec<InsertOutcome>, JournalError> {
        let (reply, rx) = oneshot::channel();
        self.inserts
            .send(InsertRequest {
                messages,
                waiting,
                reply,
            })
            .map_err(|_| JournalError::Unavailable("journal is shutting down".into()))?;
        rx.await
            .map_err(|_| JournalError::Unavailable("journal is shutting down".into()))?
    }

    /// Inserts messages pushed from an application's outbox, one row of it
    /// per message, in a transaction of their own (not grouped with other
    /// pushes): see [`store::OutboxRows`].
    pub async fn insert_outbox(
        &self,
        messages: Vec<Message>,
        waiting: Vec<bool>,
        rows: store::OutboxRows,
    ) -> Result<Vec<InsertOutcome>, JournalError> {
        let result = self
            .actor
            .send(InsertMessages(messages, waiting, Some(rows)))
            .await
            .map_err(|_| JournalError::Unavailable("journal is shutting down".into()))?;
        match result {
            // Refused by a database that takes other writes: these rows are
            // the trouble. One that takes none (read-only, out of space) is
            // out, as for any push.
            Err(e) if e.is_refusal() => {
                let answers = matches!(
                    self.actor.send(super::messages::ProbeWrite).await,
                    Ok(Ok(()))
                );
                Err(if answers {
                    JournalError::Refused(e.to_string())
                } else {
                    JournalError::Unavailable(e.to_string())
                })
            }
            other => other,
        }
    }

    /// Deletes the records of outbox rows whose delete committed.
    pub async fn forget_outbox_rows(
        &self,
        source: String,
        rows: Vec<i64>,
    ) -> Result<(), JournalError> {
        self.read(move |c| store::forget_outbox_rows(c, &source, &rows))
            .await
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

    /// Runs `read` (a store function) on a pooled connection on the
    /// journal's threads.
    pub async fn read<R: Send + 'static>(
        &self,
        read: impl FnOnce(&mut JournalConn) -> Result<R, JournalError> + Send + 'static,
    ) -> Result<R, JournalError> {
        self.actor
            .send(Read(Box::new(read)))
            .await
            .map_err(crate::error::journal_unreachable)?
    }

    pub async fn find(
        &self,
        id: MessageId,
    ) -> Result<Option<(MessageRow, Vec<FlowRow>)>, JournalError> {
        self.read(move |c| store::find_with_history(c, id)).await
    }

    /// [`Journal::find`] for a caller that is waiting for its answer (an
    /// ack, nack or cancel of an id Redis does not hold): a database that
    /// does not answer within the wait for a durable change is
    /// unavailable, rather than holding the caller until it answers.
    pub async fn find_waiting(
        &self,
        id: MessageId,
    ) -> Result<Option<(MessageRow, Vec<FlowRow>)>, JournalError> {
        match tokio::time::timeout(DURABLE_WAIT, self.find(id)).await {
            Ok(found) => found,
            Err(_) => Err(JournalError::Unavailable(format!(
                "the journal database did not answer in time; only the journal can tell \
                 what became of message {id} (Redis no longer holds it); try again"
            ))),
        }
    }

    pub async fn live_page(
        &self,
        after: i64,
        limit: i64,
        far_from: Option<i64>,
    ) -> Result<Vec<MessageRow>, JournalError> {
        self.read(move |c| store::live_page(c, after, limit, far_from))
            .await
    }

    pub async fn count_waiting_beyond(&self, far_from: i64) -> Result<u64, JournalError> {
        self.read(move |c| store::count_waiting_beyond(c, far_from))
            .await
    }

    pub async fn waiting_page(
        &self,
        after: (i64, i64),
        due_until: i64,
        limit: i64,
    ) -> Result<Vec<(i64, i64)>, JournalError> {
        self.read(move |c| store::waiting_page(c, after, due_until, limit))
            .await
    }

    pub async fn waiting_scan_page(
        &self,
        after: (i64, i64),
        until: i64,
        limit: i64,
    ) -> Result<Vec<(i64, i64, i16, String)>, JournalError> {
        self.read(move |c| store::waiting_scan_page(c, after, until, limit))
            .await
    }

    pub async fn unlist_waiting(&self, entries: Vec<(i64, i64)>) -> Result<(), JournalError> {
        if entries.is_empty() {
            return Ok(());
        }
        self.actor
            .send(UnlistWaiting(entries))
            .await
            .map_err(crate::error::journal_unreachable)?
    }

    pub async fn count_live(&self, after: i64) -> Result<u64, JournalError> {
        self.read(move |c| store::count_live(c, after)).await
    }

    pub async fn live_states(
        &self,
        after: i64,
        limit: i64,
        far_from: Option<i64>,
    ) -> Result<(Vec<RowState>, Option<i64>), JournalError> {
        self.read(move |c| store::live_states(c, after, limit, far_from))
            .await
    }

    pub async fn states_of(&self, ids: Vec<i64>) -> Result<Vec<RowState>, JournalError> {
        self.read(move |c| store::states_of(c, &ids)).await
    }

    pub async fn rows_of(&self, ids: Vec<i64>) -> Result<Vec<MessageRow>, JournalError> {
        self.read(move |c| store::rows_of(c, &ids)).await
    }

    /// Messages one of `statuses` ended, per the flow rows with ids in
    /// `(after, below)`, and where the next page starts.
    pub async fn ended_page(
        &self,
        after: i64,
        below: i64,
        statuses: Vec<i16>,
        limit: i64,
    ) -> Result<(Vec<i64>, Option<i64>), JournalError> {
        self.read(move |c| store::retention::ended_page(c, after, below, &statuses, limit))
            .await
    }

    /// Deletes those of `ids` still in one of `statuses` and unchanged
    /// since `before`, with their history; how many.
    /// Deletes the records of outbox rows pushed before `before`.
    pub async fn purge_outbox_done(&self, before: i64) -> Result<u64, JournalError> {
        self.actor
            .send(PurgeOutbox { before })
            .await
            .map_err(|_| JournalError::Unavailable("journal is shutting down".into()))?
    }

    pub async fn purge(
        &self,
        ids: Vec<i64>,
        statuses: Vec<i16>,
        before: i64,
    ) -> Result<u64, JournalError> {
        self.actor
            .send(Purge {
                ids,
                statuses,
                before,
            })
            .await
            .map_err(crate::error::journal_unreachable)?
    }

    pub async fn ping(&self) -> Result<(), JournalError> {
        self.read(store::ping).await
    }

    pub async fn dead_page(
        &self,
        topic: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<(MessageRow, Vec<FlowRow>)>, JournalError> {
        let topic = topic.to_string();
        self.read(move |c| store::dead_page(c, &topic, after, limit))
            .await
    }

    pub async fn requeue_dead(
        &self,
        id: MessageId,
        now: i64,
    ) -> Result<RequeueOutcome, JournalError> {
        self.actor
            .send(RequeueDead { id, now })
            .await
            .map_err(crate::error::journal_unreachable)?
    }

    /// Moves live messages to a new due time and/or priority, durably.
    pub async fn move_messages(
        &self,
        ids: Vec<MessageId>,
        due: Option<i64>,
        priority: Option<i32>,
    ) -> Result<Vec<crate::journal::store::JournalMove>, JournalError> {
        self.actor
            .send(MoveMessages { ids, due, priority })
            .await
            .map_err(crate::error::journal_unreachable)?
    }

    /// Replaces what a push's `onDuplicate` names in the live message `id`,
    /// durably: its move, and the row as it was when it changed.
    pub async fn replace_message(
        &self,
        id: MessageId,
        replacement: crate::journal::store::Replacement,
    ) -> Result<
        (
            crate::journal::store::JournalMove,
            Option<crate::journal::store::RowBefore>,
        ),
        JournalError,
    > {
        self.actor
            .send(ReplaceMessage { id, replacement })
            .await
            .map_err(crate::error::journal_unreachable)?
    }

    /// Puts a replaced row back while it is as the replacement left it.
    pub async fn unreplace(
        &self,
        id: MessageId,
        wrote: crate::journal::store::RowBefore,
        before: crate::journal::store::RowBefore,
    ) -> Result<bool, JournalError> {
        self.actor
            .send(Unreplace { id, wrote, before })
            .await
            .map_err(crate::error::journal_unreachable)?
    }

    pub async fn delete_dead(
        &self,
        id: MessageId,
        now: i64,
    ) -> Result<DeleteDeadOutcome, JournalError> {
        self.actor
            .send(DeleteDead { id, now })
            .await
            .map_err(crate::error::journal_unreachable)?
    }

    pub async fn topic_page(
        &self,
        topic: &str,
        status: Status,
        after: i64,
        limit: i64,
    ) -> Result<Vec<MessageRow>, JournalError> {
        let topic = topic.to_string();
        self.read(move |c| store::topic_page(c, &topic, status, after, limit))
            .await
    }

    pub async fn topic_counts(&self, limit: i64) -> Result<Vec<(String, i16, i64)>, JournalError> {
        self.read(move |c| store::topic_counts(c, limit)).await
    }

    /// Whether the journal holds any message of `topic`.
    pub async fn topic_known(&self, topic: &str) -> Result<bool, JournalError> {
        let topic = topic.to_string();
        self.read(move |c| store::topic_known(c, &topic)).await
    }

    pub async fn live_by_biz_key(
        &self,
        query: LiveByBizKey,
    ) -> Result<(Vec<MessageRow>, Option<i64>), JournalError> {
        self.read(move |c| match query {
            LiveByBizKey::Exact { topic, key } => Ok((
                store::live_by_biz_key(c, &topic, &key)?
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
            } => store::live_by_biz_key_prefix(c, &topic, &prefix, status, after, limit),
        })
        .await
    }

    /// Taken before an operation changes Redis, dropped once its status
    /// changes are queued: [`Journal::written_up_to_now`] waits for it.
    pub fn hold(&self) -> Hold {
        self.holds.hold()
    }

    /// Waits until every status change this node has applied in Redis so
    /// far is written (or set aside as refused): the operations holding
    /// theirs queue them, and both lanes write what is queued. Each lane's
    /// wait keeps its place in the queue however long the database takes.
    /// An error: the journal is shutting down (what is queued is given
    /// back, to the spill).
    pub async fn written_up_to_now(&self) -> Result<(), JournalError> {
        self.holds.released_before_now().await;
        let mut waits = Vec::with_capacity(2);
        for lane in [&self.flows, &self.urgent] {
            let (done, rx) = oneshot::channel();
            lane.send(FlowRequest {
                changes: Vec::new(),
                done: Some(done),
            })
            .map_err(|_| JournalError::Unavailable("journal is shutting down".into()))?;
            waits.push(rx);
        }
        for rx in waits {
            // Err(refused): a change of its batch was set aside; the rest
            // is written.
            rx.await
                .map_err(|_| JournalError::Unavailable("journal is shutting down".into()))?
                .ok();
        }
        Ok(())
    }

    /// Waits until every status change queued so far is written.
    pub async fn flush(&self) -> Result<(), JournalError> {
        self.committed(&self.flows, Vec::new()).await?;
        self.committed(&self.urgent, Vec::new()).await
    }
}

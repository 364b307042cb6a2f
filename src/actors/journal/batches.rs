//! The batchers: the group commit of pushes, and the flow writers that
//! gather status changes, write them, retry, split refused batches and
//! set refused changes aside.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::error::JournalError;
use crate::journal::store::{InsertOutcome, StatusChange};
use crate::message::{now_ms, Message, MessageId};
use crate::metrics::metrics;
use crate::redis::schedule::RedisSchedule;

use super::actor::JournalActor;
use super::backlog::{Backlog, Refused, POISON_KEPT};
use super::messages::{InsertMessages, ProbeWrite, Read, RecordFlow};

/// Most messages in one group commit.
const MAX_INSERT_BATCH: usize = 2_000;
/// Most status changes in one flow write, and how long the first waits
/// when no caller waits for it. Nothing is at stake in the wait (an end
/// stays in Redis's unjournaled hash until its batch is written); a
/// longer one makes fewer, larger commits when changes trickle in, as a
/// consumer acking each message with its own request sends them (20,000
/// single acks on SQLite: 1.5-1.6 s of the journal thread's CPU at 20 ms,
/// 1.8 s at 5 ms).
const MAX_FLOW_BATCH: usize = 8_000;
const FLOW_WINDOW: Duration = Duration::from_millis(20);

pub(super) struct InsertRequest {
    pub(super) messages: Vec<Message>,
    /// Per message: due beyond the Redis horizon, so listed as waiting.
    pub(super) waiting: Vec<bool>,
    pub(super) reply: oneshot::Sender<Result<Vec<InsertOutcome>, JournalError>>,
}

pub(super) struct FlowRequest {
    pub(super) changes: Vec<StatusChange>,
    /// Told when the changes are written, or why they were not.
    pub(super) done: Option<oneshot::Sender<Result<(), String>>>,
}

/// Group commit: while one batch commits, the next one gathers.
pub(super) async fn run_inserts(
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
            let waiting: Vec<bool> = batch
                .iter()
                .flat_map(|r| {
                    let n = r.messages.len();
                    r.waiting
                        .iter()
                        .copied()
                        .chain(std::iter::repeat(false))
                        .take(n)
                })
                .collect();
            let (rows, began) = (messages.len(), std::time::Instant::now());
            let result = match actor.send(InsertMessages(messages, waiting, None)).await {
                Ok(r) => r,
                Err(e) => Err(crate::error::journal_unreachable(e)),
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
                        let alone = match actor
                            .send(InsertMessages(req.messages, req.waiting, None))
                            .await
                        {
                            // Refused alone, by a database that takes other
                            // writes: this push is the trouble.
                            Ok(Err(e))
                                if e.is_refusal()
                                    && matches!(actor.send(ProbeWrite).await, Ok(Ok(()))) =>
                            {
                                Err(JournalError::Refused(e.to_string()))
                            }
                            Ok(r) => r,
                            Err(e) => Err(crate::error::journal_unreachable(e)),
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
    matches!(
        actor
            .send(Read(Box::new(crate::journal::store::ping)))
            .await,
        Ok(Ok(()))
    )
}

/// Flow rows: gathered for a few ms, written in order, retried until written
/// (or, once shutting down, given back; or, refused by a database that
/// answers, set aside).
pub(super) async fn run_flows(
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
                if let Err(e) = redis.journal_sync().journaled(&ends).await {
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
            // Behind from the first failed try, refused or unreachable alike
            // (a database that answers but takes no write is an outage too):
            // the changes are applied in Redis and not journaled.
            let _ = backlog.failing_since.compare_exchange(
                0,
                now_ms(),
                Ordering::AcqRel,
                Ordering::Acquire,
            );
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
                        // The database takes other writes: this change alone
                        // is refused, and no longer waits.
                        set_aside(backlog, &part[0], &err);
                        backlog.failing_since.store(0, Ordering::Release);
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

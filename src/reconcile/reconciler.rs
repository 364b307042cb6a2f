//! The [`Reconciler`]: the two passes over the journal and Redis, the
//! second look that settles each difference, and the repairs.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;

use crate::actors::journal::Journal;
use crate::actors::router::{RouterActor, Schedule};
use crate::error::JournalError;
use crate::journal::store::RowState;
use crate::journal::StatusChange;
use crate::message::{now_ms, MessageId, Status};
use crate::queue::QueueError;
use crate::redis::inspect::{End, Held, Place};
use crate::redis::schedule::{RedisSchedule, Scheduled};

use super::classify::{classify, Kind, Options, FLOW_SHARD, RECHECK_AFTER, RECHECK_BATCH, SAMPLE};
use delayq_proto::{Difference, ReconcileReport, Repair, Sample};

/// A difference waiting to be looked at again.
struct Candidate {
    id: MessageId,
    topic: String,
    kind: Kind,
    found: Instant,
}

#[derive(Clone)]
pub struct Reconciler {
    pub journal: Journal,
    pub router: Addr<RouterActor>,
    pub redis: RedisSchedule,
    pub options: Options,
    /// One reconciliation at a time in a process.
    running: Arc<tokio::sync::Mutex<()>>,
}

impl Reconciler {
    pub fn new(
        journal: Journal,
        router: Addr<RouterActor>,
        redis: RedisSchedule,
        options: Options,
    ) -> Self {
        Reconciler {
            journal,
            router,
            redis,
            options,
            running: Arc::default(),
        }
    }

    /// Compares the journal with Redis and repairs what `repair` covers.
    /// `progress` is called after each page.
    pub async fn run(
        &self,
        repair: Repair,
        progress: impl Fn(&ReconcileReport),
    ) -> Result<ReconcileReport, QueueError> {
        let _one_at_a_time = self.running.lock().await;
        // A repair trusts the journal's live rows to be live: not while a
        // node's journal is behind (the periodic run, the API, the
        // dashboard and the command line alike). Checked again before each
        // batch of repairs (`settle`).
        if repair != Repair::None {
            let behind = self.redis.journal_sync().journals_behind().await?;
            if !behind.is_empty() {
                return Err(QueueError::JournalBehind(behind));
            }
        }
        let start = Instant::now();
        let grace_ms = self.options.grace.as_millis() as i64;
        let mut report = ReconcileReport {
            repair,
            journal_scanned: 0,
            journal_recent: 0,
            redis_scanned: 0,
            missing: Difference::default(),
            unscheduled: Difference::default(),
            finished_in_journal: Difference::default(),
            unknown: Difference::default(),
            status_mismatch: Difference::default(),
            unjournaled: Difference::default(),
            grace_ms: grace_ms as u64,
            started_at: now_ms(),
            elapsed_ms: 0,
        };
        let mut pending: Vec<Candidate> = Vec::new();
        let mut seen: HashSet<MessageId> = HashSet::new();

        // Journal → Redis.
        let mut after = 0;
        loop {
            let page_start = Instant::now();
            let cutoff = now_ms() - grace_ms;
            let (page, next) = self
                .journal
                .live_states(after, self.options.page as i64, self.far(0))
                .await?;
            let far = self.far(crate::horizon::load_lag_ms(self.redis.horizon_ms()));
            let (rows, recent): (Vec<RowState>, Vec<RowState>) =
                page.into_iter().partition(|r| r.updated_time < cutoff);
            report.journal_recent += recent.len() as u64;
            let items: Vec<(MessageId, &str)> = rows
                .iter()
                .map(|r| (MessageId(r.id), r.topic.as_str()))
                .collect();
            let held = self.redis.inspect().locate(&items).await?;
            report.journal_scanned += rows.len() as u64;
            for (row, h) in rows.iter().zip(held) {
                if let Some(kind) = classify(Some(row), h, cutoff, far.unwrap_or(i64::MAX)) {
                    if seen.insert(MessageId(row.id)) {
                        pending.push(Candidate {
                            id: MessageId(row.id),
                            topic: row.topic.clone(),
                            kind,
                            found: Instant::now(),
                        });
                    }
                }
            }
            // The page's own work: a re-check waits, and is not paced.
            let worked = page_start.elapsed();
            if pending.len() >= RECHECK_BATCH {
                self.settle(std::mem::take(&mut pending), repair, &mut report)
                    .await?;
            }
            report.elapsed_ms = start.elapsed().as_millis() as u64;
            progress(&report);
            let Some(n) = next else { break };
            after = n;
            self.pace(worked).await;
        }

        // Redis → journal.
        for shard in 0..self.redis.keys().shards() {
            let mut cursor = 0;
            loop {
                let page_start = Instant::now();
                let (next, records) = self
                    .redis
                    .inspect()
                    .scan_records(shard, cursor, self.options.page)
                    .await?;
                report.redis_scanned += records.len() as u64;
                let ids: Vec<i64> = records.iter().map(|(id, _)| id.0).collect();
                let rows: HashMap<i64, RowState> = if ids.is_empty() {
                    HashMap::new()
                } else {
                    self.journal
                        .states_of(ids)
                        .await?
                        .into_iter()
                        .map(|r| (r.id, r))
                        .collect()
                };
                let cutoff = now_ms() - grace_ms;
                for (id, header) in records {
                    let row = rows.get(&id.0);
                    // Live rows were compared by the first pass.
                    if row.is_some_and(|r| !r.status().is_terminal()) {
                        continue;
                    }
                    let Some(kind) = classify(row, Held::Record(Place::Nowhere), cutoff, i64::MAX)
                    else {
                        continue;
                    };
                    if seen.insert(id) {
                        let topic = match (row, header) {
                            (Some(r), _) => r.topic.clone(),
                            (None, Some(h)) => h.topic,
                            (None, None) => String::new(),
                        };
                        pending.push(Candidate {
                            id,
                            topic,
                            kind,
                            found: Instant::now(),
                        });
                    }
                }
                let worked = page_start.elapsed();
                if pending.len() >= RECHECK_BATCH {
                    self.settle(std::mem::take(&mut pending), repair, &mut report)
                        .await?;
                }
                report.elapsed_ms = start.elapsed().as_millis() as u64;
                progress(&report);
                if next == 0 {
                    break;
                }
                cursor = next;
                self.pace(worked).await;
            }
        }
        self.settle(pending, repair, &mut report).await?;
        report.elapsed_ms = start.elapsed().as_millis() as u64;
        // The last re-check's findings, shown as the report will say them.
        progress(&report);
        let m = crate::metrics::metrics();
        for (kind, d) in [
            ("missing", &report.missing),
            ("unscheduled", &report.unscheduled),
            ("finished_in_journal", &report.finished_in_journal),
            ("unknown", &report.unknown),
            ("status_mismatch", &report.status_mismatch),
            ("unjournaled", &report.unjournaled),
        ] {
            if d.repaired > 0 {
                m.repaired
                    .get_or_create(&crate::metrics::KindLabel { kind })
                    .inc_by(d.repaired);
            }
        }
        Ok(report)
    }

    /// The pause after a page whose work took `worked`.
    /// Messages waiting in the journal alone due after this are not
    /// expected in Redis: now plus the horizon, less `slack` ms (none
    /// without a horizon).
    fn far(&self, slack: i64) -> Option<i64> {
        let horizon = self.redis.horizon_ms();
        (horizon > 0).then(|| now_ms().saturating_add(horizon) - slack)
    }

    async fn pace(&self, worked: Duration) {
        let pause = self.options.pause.max(worked * self.options.idle);
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }

    /// Looks at candidates again (both sides read anew, once the journal
    /// had time to catch up), counts those that are still the same
    /// difference, and repairs what `repair` covers.
    async fn settle(
        &self,
        candidates: Vec<Candidate>,
        repair: Repair,
        report: &mut ReconcileReport,
    ) -> Result<(), QueueError> {
        let Some(first) = candidates.iter().map(|c| c.found).min() else {
            return Ok(());
        };
        let wait = RECHECK_AFTER
            .min(self.options.grace)
            .saturating_sub(first.elapsed());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let ids: Vec<i64> = candidates.iter().map(|c| c.id.0).collect();
        let rows: HashMap<i64, RowState> = self
            .journal
            .states_of(ids)
            .await?
            .into_iter()
            .map(|r| (r.id, r))
            .collect();
        let items: Vec<(MessageId, &str)> = candidates
            .iter()
            .map(|c| (c.id, c.topic.as_str()))
            .collect();
        let held = self.redis.inspect().locate(&items).await?;
        let cutoff = now_ms() - self.options.grace.as_millis() as i64;
        let far = self.far(crate::horizon::load_lag_ms(self.redis.horizon_ms()));
        let mut to_repair: Vec<(MessageId, Kind)> = Vec::new();
        for (c, h) in candidates.iter().zip(held) {
            let row = rows.get(&c.id.0);
            if classify(row, h, cutoff, far.unwrap_or(i64::MAX)) != Some(c.kind) {
                continue;
            }
            let d = c.kind.of(report);
            d.count += 1;
            if d.sample.len() < SAMPLE {
                let (journal, redis) = match c.kind {
                    Kind::StatusMismatch { journal, redis, .. } => (Some(journal), Some(redis)),
                    _ => (row.map(RowState::status), None),
                };
                d.sample.push(Sample {
                    id: c.id,
                    journal,
                    redis,
                });
            }
            if c.kind.repaired_by(repair) {
                to_repair.push((c.id, c.kind));
            }
        }
        if !to_repair.is_empty() {
            // A run can take minutes: a journal that fell behind since it
            // started (see `run`) stops the repairs before this batch.
            let behind = self.redis.journal_sync().journals_behind().await?;
            if !behind.is_empty() {
                return Err(QueueError::JournalBehind(behind));
            }
            self.repair(&to_repair, report).await?;
        }
        Ok(())
    }

    async fn repair(
        &self,
        found: &[(MessageId, Kind)],
        report: &mut ReconcileReport,
    ) -> Result<(), QueueError> {
        let of = |want: fn(&Kind) -> bool| -> Vec<MessageId> {
            found
                .iter()
                .filter(|(_, k)| want(k))
                .map(|(id, _)| *id)
                .collect()
        };

        let missing = of(|k| matches!(k, Kind::Missing));
        if !missing.is_empty() {
            let read_at = now_ms();
            let rows = self
                .journal
                .rows_of(missing.iter().map(|id| id.0).collect())
                .await?;
            let batch: Vec<_> = rows
                .iter()
                .filter(|r| !r.status().is_terminal())
                .map(|r| (r.message(), r.attempts))
                .collect();
            if !batch.is_empty() {
                // The router records them Delaying, as a restore does.
                let outcomes = self
                    .router
                    .send(Schedule { batch, read_at })
                    .await
                    .map_err(crate::error::router_unreachable)??;
                report.missing.repaired += outcomes
                    .iter()
                    .filter(|o| matches!(o, Scheduled::Added { .. }))
                    .count() as u64;
            }
        }

        let ended: Vec<(MessageId, End)> = found
            .iter()
            .filter_map(|(id, k)| match k {
                Kind::Unjournaled(end) => Some((*id, *end)),
                _ => None,
            })
            .collect();
        if !ended.is_empty() {
            // The journal takes the end Redis applied (an end never turns
            // back: a row already ended keeps its own), then Redis forgets
            // the entry and the tombstone expires as usual.
            let shard: Arc<str> = FLOW_SHARD.into();
            let changes: Vec<StatusChange> = ended
                .iter()
                .map(|(id, end)| {
                    StatusChange::ended(*id, end.status, end.attempts, end.at, shard.clone())
                })
                .collect();
            // An end the journal refuses stays in Redis, counted and not
            // repaired; the ends it took are forgotten there all the same.
            let recorded = self
                .record(changes, "unjournaled", |row, _| row.status().is_terminal())
                .await?;
            let ids: Vec<MessageId> = ended
                .iter()
                .zip(recorded)
                .filter(|(_, recorded)| *recorded)
                .map(|((id, _), _)| *id)
                .collect();
            if !ids.is_empty() {
                self.redis.journal_sync().journaled(&ids).await?;
            }
            report.unjournaled.repaired += ids.len() as u64;
        }

        let unscheduled = of(|k| matches!(k, Kind::Unscheduled));
        if !unscheduled.is_empty() {
            // Never earlier than the journal says: a message waiting out a
            // failed delivery's retry is due then, not at its record's due
            // time (which its record keeps, see replace.lua).
            let due: HashMap<i64, i64> = self
                .journal
                .states_of(unscheduled.iter().map(|id| id.0).collect())
                .await?
                .into_iter()
                .map(|r| (r.id, r.due_time))
                .collect();
            let unscheduled: Vec<(MessageId, Option<i64>)> = unscheduled
                .into_iter()
                .map(|id| (id, due.get(&id.0).copied()))
                .collect();
            let put_back = self.redis.inspect().replace(&unscheduled).await?;
            report.unscheduled.repaired += put_back.iter().filter(|&&p| p).count() as u64;
        }

        let finished = of(|k| matches!(k, Kind::FinishedInJournal));
        if !finished.is_empty() {
            // Read once more right before the purge: a dead letter requeued
            // since the second look is live again, and stays.
            let ended: HashSet<i64> = self
                .journal
                .states_of(finished.iter().map(|id| id.0).collect())
                .await?
                .into_iter()
                .filter(|r| r.status().is_terminal())
                .map(|r| r.id)
                .collect();
            let finished: Vec<MessageId> = finished
                .into_iter()
                .filter(|id| ended.contains(&id.0))
                .collect();
            let removed = self.redis.inspect().purge(&finished).await?;
            report.finished_in_journal.repaired += removed.iter().filter(|&&p| p).count() as u64;
        }

        let mismatched: Vec<(MessageId, Status, Option<i64>)> = found
            .iter()
            .filter_map(|(id, k)| match k {
                Kind::StatusMismatch { redis, due, .. } => Some((*id, *redis, *due)),
                _ => None,
            })
            .collect();
        if !mismatched.is_empty() {
            let ids: Vec<MessageId> = mismatched.iter().map(|(id, _, _)| *id).collect();
            let headers = self.redis.inspect().headers(&ids).await?;
            let at = now_ms();
            let shard: Arc<str> = FLOW_SHARD.into();
            let changes: Vec<StatusChange> = mismatched
                .iter()
                .zip(headers)
                .filter_map(|((id, status, due), h)| {
                    h.map(|h| {
                        StatusChange::corrected(*id, *status, h.attempts, at, *due, shard.clone())
                    })
                })
                .collect();
            let recorded = self
                .record(changes, "statusMismatch", |row, ch| {
                    row.status() == ch.status
                })
                .await?;
            report.status_mismatch.repaired += recorded.iter().filter(|&&r| r).count() as u64;
        }
        Ok(())
    }

    /// Records a repair's status changes (of differences of `kind`):
    /// whether the journal holds each, in input order. A change the
    /// journal refuses while it answers (a trigger, a constraint) must not
    /// stop the run, or it would stop every run after it: the journal
    /// splits a refused batch down to single changes, writes the others,
    /// sets the refused ones aside (`GET /admin/journal`) and answers the
    /// whole batch refused. The rows are then read again, and a change
    /// counts as recorded when its row `shows` it (recording them again
    /// one by one would write the flow rows of those written twice). Any
    /// other error (the journal unreachable, or slow) stops the run.
    async fn record(
        &self,
        changes: Vec<StatusChange>,
        kind: &str,
        shows: fn(&RowState, &StatusChange) -> bool,
    ) -> Result<Vec<bool>, QueueError> {
        if changes.is_empty() {
            return Ok(Vec::new());
        }
        let why = match self.journal.record_durable(changes.clone()).await {
            Ok(()) => return Ok(vec![true; changes.len()]),
            Err(JournalError::Refused(why)) => why,
            Err(e) => return Err(e.into()),
        };
        let rows: HashMap<i64, RowState> = self
            .journal
            .states_of(changes.iter().map(|c| c.id.0).collect())
            .await?
            .into_iter()
            .map(|r| (r.id, r))
            .collect();
        let recorded: Vec<bool> = changes
            .iter()
            .map(|c| rows.get(&c.id.0).is_some_and(|r| shows(r, c)))
            .collect();
        let refused: Vec<MessageId> = changes
            .iter()
            .zip(&recorded)
            .filter(|(_, &r)| !r)
            .map(|(c, _)| c.id)
            .collect();
        tracing::warn!(
            kind,
            refused = refused.len(),
            recorded = changes.len() - refused.len(),
            ids = ?&refused[..refused.len().min(SAMPLE)],
            error = %why,
            "the journal refuses some of the reconciler's repairs; they are left as they are \
             (GET /admin/journal lists them) and the rest goes on"
        );
        Ok(recorded)
    }
}

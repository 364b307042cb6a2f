//! Reconciliation: the journal and Redis compared, message by message, and
//! put right on request. A restore only adds what Redis lacks and only runs
//! when the data set marker is gone; Redis can also lose part of its data
//! with the marker intact (an AOF `everysec` crash, a replica promoted
//! before it caught up, an evicted key), and a message answered 200 must
//! still be delivered.
//!
//! Two passes, each in small pages with a pause after each page (on a
//! serving node pages of 100, over a Redis connection of its own, and a
//! pause of at least 2 ms and four times as long as the page took, see
//! [`Options`] and [`crate::node`]), so the scans that deliver messages
//! keep their lateness:
//! - the journal's live rows (not Consumed, Deleted or Dead), in keyset
//!   pages by id, each page looked up in Redis with one pipeline: is the
//!   record in its shard's hash, is there a tombstone, and where does it sit
//!   (delay zset, ready queue, in-flight zset);
//! - each shard's message hash, walked with HSCAN, the ids looked up in the
//!   journal: Redis holding what the journal says is finished, or what the
//!   journal does not know.
//!
//! The journal lags Redis by a few milliseconds (its flow rows are written
//! in batches), and a push is in the journal before Redis has it, so only
//! rows whose last change is older than the grace period are compared, and
//! a Redis state is held against the journal only when it is older than
//! the grace period too (an ack deadline tells when a message was handed
//! out, a due time when it became ready). Every difference found is looked
//! at once more, both sides read again, before it is reported or repaired.
//!
//! | kind | what | repair |
//! |---|---|---|
//! | `missing` | live in the journal; Redis has no record and no tombstone | scheduled again like a restore (`Schedule`: idempotent, tombstone-aware; an overdue one is due at once), recorded Delaying |
//! | `unscheduled` | Redis holds the record, but in no delay zset, ready queue or in-flight zset | put back in its delay zset with its record's score (replace.lua) |
//! | `finishedInJournal` | Redis holds it; the journal says Consumed, Deleted or Dead | removed from Redis, leaving a tombstone (purge.lua) |
//! | `statusMismatch` | both hold it live, in different statuses | the journal follows Redis (the live state): a status change is recorded |
//! | `unknown` | Redis holds it; the journal has no such row | reported only: the journal may have lost the row (a database restored from a backup) and Redis holds the only copy |
//! | `unjournaled` | Redis ended it (acked, cancelled, dead: its end waits in `{P:s}:unjournaled`) and the journal never heard: the node that made the change stopped first | the end is written to the journal, so nothing brings the message back |
//!
//! The leader runs it every `--reconcile-interval` and repairs by itself
//! what keeps messages from being delivered (`missing`, `unscheduled`) and
//! what would bring an ended one back (`unjournaled`);
//! `GET /admin/reconcile?repair=true` and `delayq reconcile --repair`
//! repair every kind but `unknown`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use serde::Serialize;

use crate::actors::journal::Journal;
use crate::actors::router::{RouterActor, Schedule};
use crate::error::ShardError;
use crate::journal::store::RowState;
use crate::journal::StatusChange;
use crate::message::{now_ms, MessageId, Status};
use crate::queue::QueueError;
use crate::redis::inspect::{End, Held, Place};
use crate::redis::schedule::{RedisSchedule, Scheduled};

/// Differences looked at again together.
const RECHECK_BATCH: usize = 1_000;
/// How long a difference must last before it counts: the journal's flow
/// batches land within milliseconds.
const RECHECK_AFTER: Duration = Duration::from_millis(500);
/// Ids shown per kind of difference.
const SAMPLE: usize = 20;
/// Named on the flow rows a repair writes.
const FLOW_SHARD: &str = "reconcile";

/// What a reconciliation puts right.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum Repair {
    /// Report only.
    None,
    /// What keeps messages from being delivered (`missing`,
    /// `unscheduled`) or would bring an ended one back (`unjournaled`).
    Delivery,
    /// Every kind but `unknown`.
    All,
}

impl Repair {
    fn covers(self, kind: &Kind) -> bool {
        match self {
            Repair::None => false,
            Repair::Delivery => matches!(
                kind,
                Kind::Missing | Kind::Unscheduled | Kind::Unjournaled(_)
            ),
            Repair::All => !matches!(kind, Kind::Unknown),
        }
    }
}

/// How a reconciliation runs.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Rows changed (and Redis states reached) more recently are left out.
    pub grace: Duration,
    /// Journal rows per page (and records per HSCAN step).
    pub page: usize,
    /// The least pause after each page, for the scans' sake.
    pub pause: Duration,
    /// After each page, also pause this many times as long as the page
    /// took: a reconciliation then takes at most about 1 / (1 + idle) of
    /// the machine's time while it runs, however fast the machine is.
    pub idle: u32,
}

/// One kind of difference: how many, how many were repaired, and the first
/// few.
#[derive(Debug, Default, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Difference {
    pub count: u64,
    pub repaired: u64,
    pub sample: Vec<Sample>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    pub id: MessageId,
    /// The journal's status, where it has the row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal: Option<Status>,
    /// Where Redis holds it, as a status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis: Option<Status>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReconcileReport {
    pub repair: Repair,
    /// Live journal rows compared (older than the grace period).
    pub journal_scanned: u64,
    /// Live journal rows left out: changed within the grace period.
    pub journal_recent: u64,
    /// Records of Redis's message hashes walked.
    pub redis_scanned: u64,
    pub missing: Difference,
    pub unscheduled: Difference,
    pub finished_in_journal: Difference,
    pub unknown: Difference,
    pub status_mismatch: Difference,
    pub unjournaled: Difference,
    pub grace_ms: u64,
    pub started_at: i64,
    pub elapsed_ms: u64,
}

impl ReconcileReport {
    /// No difference of any kind.
    pub fn is_clean(&self) -> bool {
        self.differences() == 0
    }

    pub fn differences(&self) -> u64 {
        self.missing.count
            + self.unscheduled.count
            + self.finished_in_journal.count
            + self.unknown.count
            + self.status_mismatch.count
            + self.unjournaled.count
    }

    fn of(&mut self, kind: &Kind) -> &mut Difference {
        match kind {
            Kind::Missing => &mut self.missing,
            Kind::Unscheduled => &mut self.unscheduled,
            Kind::FinishedInJournal => &mut self.finished_in_journal,
            Kind::Unknown => &mut self.unknown,
            Kind::StatusMismatch { .. } => &mut self.status_mismatch,
            Kind::Unjournaled(_) => &mut self.unjournaled,
        }
    }
}

/// One difference of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Missing,
    Unscheduled,
    FinishedInJournal,
    Unknown,
    /// The journal says `journal`; Redis holds it as `redis` (due at `due`
    /// when scheduled).
    StatusMismatch {
        journal: Status,
        redis: Status,
        due: Option<i64>,
    },
    /// Redis ended it; the journal did not record the end.
    Unjournaled(End),
}

/// Compares one message's journal row (None: no row) with what Redis holds
/// of it. `cutoff` is now minus the grace period: a state reached after it
/// may be one the other side has not heard of yet.
fn classify(row: Option<&RowState>, held: Held, cutoff: i64) -> Option<Kind> {
    let Some(row) = row else {
        return matches!(held, Held::Record(_)).then_some(Kind::Unknown);
    };
    if let Held::Unjournaled(end) = held {
        // An end the node that made it has not journaled yet, or never
        // will (it stopped): once it is older than the grace period, the
        // journal is told, whatever it says now (a terminal row only
        // needs Redis to forget the entry).
        return (end.at < cutoff).then_some(Kind::Unjournaled(end));
    }
    if row.updated_time >= cutoff {
        return None;
    }
    let journal = row.status();
    if journal.is_terminal() {
        return matches!(held, Held::Record(_)).then_some(Kind::FinishedInJournal);
    }
    let place = match held {
        Held::Absent => return Some(Kind::Missing),
        Held::Unjournaled(_) => unreachable!("handled above"),
        // Acked or cancelled in Redis lately: the journal is catching up.
        Held::Finished => return None,
        Held::Record(Place::Nowhere) => return Some(Kind::Unscheduled),
        Held::Record(p) => p,
    };
    // The end of a delivery (a nack, an expired ack deadline) came before
    // its deadline: once that is older than the grace period, so is the end.
    let delivery_over = row.updated_time + row.ttl < cutoff;
    let (redis, due, settled) = match place {
        Place::Delay { due } => (
            Status::Delaying,
            Some(due),
            journal != Status::Consuming || delivery_over,
        ),
        Place::Ready => (
            Status::Ready,
            None,
            match journal {
                Status::Consuming => delivery_over,
                _ => row.due_time < cutoff,
            },
        ),
        Place::InFlight { deadline } => (Status::Consuming, None, deadline - row.ttl < cutoff),
        Place::Nowhere => unreachable!("handled above"),
    };
    (redis != journal && settled).then_some(Kind::StatusMismatch {
        journal,
        redis,
        due,
    })
}

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
        // dashboard and the command line alike).
        if repair != Repair::None {
            let behind = self.redis.journals_behind().await?;
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
                .live_states(after, self.options.page as i64)
                .await?;
            let (rows, recent): (Vec<RowState>, Vec<RowState>) =
                page.into_iter().partition(|r| r.updated_time < cutoff);
            report.journal_recent += recent.len() as u64;
            let items: Vec<(MessageId, &str)> = rows
                .iter()
                .map(|r| (MessageId(r.id), r.topic.as_str()))
                .collect();
            let held = self.redis.locate(&items).await?;
            report.journal_scanned += rows.len() as u64;
            for (row, h) in rows.iter().zip(held) {
                if let Some(kind) = classify(Some(row), h, cutoff) {
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
                    let Some(kind) = classify(row, Held::Record(Place::Nowhere), cutoff) else {
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
        let held = self.redis.locate(&items).await?;
        let cutoff = now_ms() - self.options.grace.as_millis() as i64;
        let mut to_repair: Vec<(MessageId, Kind)> = Vec::new();
        for (c, h) in candidates.iter().zip(held) {
            let row = rows.get(&c.id.0);
            if classify(row, h, cutoff) != Some(c.kind) {
                continue;
            }
            let d = report.of(&c.kind);
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
            if repair.covers(&c.kind) {
                to_repair.push((c.id, c.kind));
            }
        }
        if !to_repair.is_empty() {
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
                    .send(Schedule(batch))
                    .await
                    .map_err(ShardError::from)??;
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
                .map(|(id, end)| StatusChange {
                    id: *id,
                    status: end.status,
                    attempts: Some(end.attempts),
                    at: end.at,
                    due: None,
                    shard: shard.clone(),
                    occurrence: None,
                })
                .collect();
            self.journal.record_durable(changes).await?;
            let ids: Vec<MessageId> = ended.iter().map(|(id, _)| *id).collect();
            self.redis.journaled(&ids).await?;
            report.unjournaled.repaired += ids.len() as u64;
        }

        let unscheduled = of(|k| matches!(k, Kind::Unscheduled));
        if !unscheduled.is_empty() {
            let put_back = self.redis.replace(&unscheduled).await?;
            report.unscheduled.repaired += put_back.iter().filter(|&&p| p).count() as u64;
        }

        let finished = of(|k| matches!(k, Kind::FinishedInJournal));
        if !finished.is_empty() {
            let removed = self.redis.purge(&finished).await?;
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
            let headers = self.redis.headers(&ids).await?;
            let at = now_ms();
            let shard: Arc<str> = FLOW_SHARD.into();
            let changes: Vec<StatusChange> = mismatched
                .iter()
                .zip(headers)
                .filter_map(|((id, status, due), h)| {
                    h.map(|h| StatusChange {
                        id: *id,
                        status: *status,
                        attempts: Some(h.attempts),
                        at,
                        due: *due,
                        shard: shard.clone(),
                        occurrence: None,
                    })
                })
                .collect();
            let n = changes.len() as u64;
            self.journal.record_durable(changes).await?;
            report.status_mismatch.repaired += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(status: Status, updated: i64, due: i64) -> RowState {
        RowState {
            id: 1,
            topic: "t".into(),
            status: status.code(),
            updated_time: updated,
            due_time: due,
            ttl: 1_000,
        }
    }

    const CUT: i64 = 100_000;

    #[test]
    fn recent_rows_are_left_alone() {
        let r = row(Status::Delaying, CUT, CUT + 50_000);
        assert_eq!(classify(Some(&r), Held::Absent, CUT), None);
    }

    #[test]
    fn kinds() {
        let old = CUT - 10_000;
        let delaying = row(Status::Delaying, old, CUT + 50_000);
        assert_eq!(
            classify(Some(&delaying), Held::Absent, CUT),
            Some(Kind::Missing)
        );
        assert_eq!(classify(Some(&delaying), Held::Finished, CUT), None);
        assert_eq!(
            classify(Some(&delaying), Held::Record(Place::Nowhere), CUT),
            Some(Kind::Unscheduled)
        );
        let due = CUT + 50_000;
        assert_eq!(
            classify(Some(&delaying), Held::Record(Place::Delay { due }), CUT),
            None
        );
        assert_eq!(
            classify(None, Held::Record(Place::Nowhere), CUT),
            Some(Kind::Unknown)
        );
        assert_eq!(classify(None, Held::Finished, CUT), None);
        let consumed = row(Status::Consumed, old, old);
        assert_eq!(
            classify(Some(&consumed), Held::Record(Place::Ready), CUT),
            Some(Kind::FinishedInJournal)
        );
        assert_eq!(classify(Some(&consumed), Held::Finished, CUT), None);
    }

    #[test]
    fn status_mismatches_wait_for_both_sides_to_settle() {
        let old = CUT - 10_000;
        // Handed out long ago; the journal still says Delaying.
        let delaying = row(Status::Delaying, old, old);
        let long_ago = Held::Record(Place::InFlight {
            deadline: old + 1_000,
        });
        assert_eq!(
            classify(Some(&delaying), long_ago, CUT),
            Some(Kind::StatusMismatch {
                journal: Status::Delaying,
                redis: Status::Consuming,
                due: None
            })
        );
        // Handed out a moment ago: its Consuming row may be on its way.
        let just_now = Held::Record(Place::InFlight {
            deadline: CUT + 1_000,
        });
        assert_eq!(classify(Some(&delaying), just_now, CUT), None);
        // Delaying in the journal, ready in Redis: only once its due time
        // is older than the grace period.
        let due_now = row(Status::Delaying, old, CUT + 5);
        assert_eq!(
            classify(Some(&due_now), Held::Record(Place::Ready), CUT),
            None
        );
        assert!(classify(Some(&delaying), Held::Record(Place::Ready), CUT).is_some());
        // Consuming in the journal, scheduled again in Redis: only once the
        // delivery's ack deadline is older than the grace period.
        let consuming = row(Status::Consuming, CUT - 500, old);
        let again = Held::Record(Place::Delay { due: CUT + 9_000 });
        assert_eq!(classify(Some(&consuming), again, CUT), None);
        let consuming = row(Status::Consuming, old, old);
        assert_eq!(
            classify(Some(&consuming), again, CUT),
            Some(Kind::StatusMismatch {
                journal: Status::Consuming,
                redis: Status::Delaying,
                due: Some(CUT + 9_000)
            })
        );
    }
}

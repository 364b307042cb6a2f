//! Journal retention: a message finished long enough ago leaves the
//! journal, with its history, so the journal grows with the messages that
//! are live and lately finished, not with every message ever pushed.
//!
//! | kind | ended as | kept for |
//! |---|---|---|
//! | `finished` | Consumed, Deleted | `--retain-finished` (default 7 days) |
//! | `dead` | Dead | `--retain-dead` (default 30 days): an operator has that long to requeue or delete it |
//! | outbox records | left behind by an outbox pass cut short (the others go at once) | the longer of the two, kept forever when either is `0` (see [`crate::outbox`]) |
//!
//! `0` keeps a kind forever. The leader runs a pass every
//! `--retention-interval`: for each kind it reads the flow rows written
//! since its cursor (in Redis, `{P}:retention`) up to now minus the
//! retention, and deletes each message those rows ended, unless it changed
//! since (a dead letter requeued is live again; its next end starts the
//! clock anew). Flow ids are minted when the row is written, so the cursor
//! walks time and reads each flow row once; nothing is added to a push or a
//! status change. Pages are small and paced like the reconciler's, so
//! pushes and deliveries keep their pace. A lost cursor (Redis lost its
//! data) only means one pass reads from the start again.

use std::time::{Duration, Instant};

use crate::actors::journal::Journal;
use crate::message::{now_ms, MessageId, Status};
use crate::queue::QueueError;
use crate::redis::schedule::RedisSchedule;

/// Flow rows read per page.
const PAGE: i64 = 500;
/// The least pause after each page.
const PAUSE: Duration = Duration::from_millis(5);
/// After each page, also pause this many times as long as the page took.
const IDLE: u32 = 4;

/// How long each kind of finished message is kept (zero: forever).
#[derive(Debug, Clone, Copy)]
pub struct Keep {
    pub finished: Duration,
    pub dead: Duration,
}

/// What one pass removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    /// Messages deleted with their history.
    pub purged: u64,
    /// Messages the flow rows read had ended (purged or kept because they
    /// changed since).
    pub ended: u64,
}

#[derive(Clone)]
pub struct Retention {
    pub journal: Journal,
    pub redis: RedisSchedule,
    pub keep: Keep,
}

impl Retention {
    /// One pass over each kind that is not kept forever.
    pub async fn run(&self) -> Result<Pass, QueueError> {
        let mut pass = Pass::default();
        let kinds = [
            (
                "finished",
                self.keep.finished,
                vec![Status::Consumed.code(), Status::Deleted.code()],
            ),
            ("dead", self.keep.dead, vec![Status::Dead.code()]),
        ];
        for (kind, keep, statuses) in kinds {
            if keep.is_zero() {
                continue;
            }
            self.run_kind(kind, keep, statuses, &mut pass).await?;
        }
        if pass.purged > 0 {
            crate::metrics::metrics().journal_purged.inc_by(pass.purged);
        }
        // The records of outbox rows (see crate::outbox) left behind by a
        // pass cut short: kept as long as the longer of the two, so a row
        // still in the outbox finds its record when a node reads it again.
        let records = self.keep.finished.max(self.keep.dead);
        if !self.keep.finished.is_zero() && !self.keep.dead.is_zero() {
            let before = now_ms() - records.as_millis() as i64;
            self.journal.purge_outbox_done(before).await?;
        }
        Ok(pass)
    }

    async fn run_kind(
        &self,
        kind: &str,
        keep: Duration,
        statuses: Vec<i16>,
        pass: &mut Pass,
    ) -> Result<(), QueueError> {
        let before = now_ms() - keep.as_millis() as i64;
        let below = MessageId::first_at(before).0;
        let mut after = self
            .redis
            .records()
            .retention_cursor(kind)
            .await?
            .unwrap_or(0);
        while after < below - 1 {
            let started = Instant::now();
            let (ids, next) = self
                .journal
                .ended_page(after, below, statuses.clone(), PAGE)
                .await?;
            pass.ended += ids.len() as u64;
            if !ids.is_empty() {
                pass.purged += self.journal.purge(ids, statuses.clone(), before).await?;
            }
            after = next.unwrap_or(below - 1);
            self.redis
                .records()
                .save_retention_cursor(kind, after)
                .await?;
            let pause = PAUSE.max(started.elapsed() * IDLE);
            tokio::time::sleep(pause).await;
        }
        Ok(())
    }
}

//! Restore: rebuild Redis from the journal. Streams live messages (not
//! Consumed, Deleted or Dead) in keyset pages, so memory stays bounded, and
//! schedules each one idempotently: a message Redis still holds is counted
//! as already present and left as it is, so restore can run twice, or while
//! the node serves, without duplicates.
//!
//! Progress: each page moves a keyset cursor (the last id done), kept in
//! Redis (`{P}:restore`, see [`crate::redis::keys`]) while the restore runs
//! and deleted when it ends. A restore that was interrupted (its process
//! killed, Redis or the journal gone away) leaves the cursor behind, and
//! the next restore with the same `expire` resumes after it, within ten
//! minutes of the last page ([`RESTORE_CURSOR_MS`]); later ones start from
//! the first row. The cursor lives in the Redis being restored, so a Redis
//! that lost its data lost the cursor with it and is restored from the
//! first row. Should keys below a cursor be lost between the interruption
//! and the resume, the reconciler ([`crate::reconcile`]) schedules those
//! messages again. A dry run neither reads nor moves the cursor.
//! [`RestoreStatus`] holds this process's current or last restore for
//! `GET /admin/restore`; progress is logged at most once a second.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::Addr;

use crate::actors::journal::Journal;
use crate::actors::router::{RouterActor, Schedule};
use crate::journal::models::MessageRow;
use crate::message::{now_ms, MessageId, Status};
use crate::queue::QueueError;
use crate::redis::inspect::{RestoreCursor, RESTORE_CURSOR_MS};
use crate::redis::schedule::{RedisSchedule, Scheduled};

const PAGE: i64 = 2_000;

/// What a restore did, and a restore as `GET /admin/restore` shows it.
pub use delayq_proto::{RestoreProgress, RestoreReport};

/// This process's current or last restore.
#[derive(Debug, Clone, Default)]
pub struct RestoreStatus(Arc<Mutex<Option<RestoreProgress>>>);

impl RestoreStatus {
    pub fn get(&self) -> Option<RestoreProgress> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, p: RestoreProgress) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(p);
    }
}

/// How long a restore waits for the journal to write its status rows.
const FLUSH_PATIENCE: Duration = Duration::from_secs(300);

/// How often a restore logs its progress.
const LOG_EVERY: Duration = Duration::from_secs(1);

/// Restores Redis from the journal: the stores it reads and writes, and
/// where it reports its progress.
#[derive(Clone)]
pub struct Restorer {
    pub journal: Journal,
    pub router: Addr<RouterActor>,
    pub redis: RedisSchedule,
    pub status: RestoreStatus,
}

fn progress_of(r: &RestoreReport, expire: bool, started_at: i64, cursor: i64) -> RestoreProgress {
    let secs = (r.elapsed_ms as f64 / 1000.0).max(0.001);
    RestoreProgress {
        running: true,
        expire,
        dry_run: r.dry_run,
        scanned: r.scanned,
        restored: r.restored,
        already_present: r.already_present,
        skipped_expired: r.skipped_expired,
        skipped_finished: r.skipped_finished,
        rate_per_second: (r.scanned as f64 / secs * 10.0).round() / 10.0,
        started_at,
        finished_at: None,
        cursor,
        resumed_after: r.resumed_after,
        error: None,
    }
}

impl Restorer {
    /// Restores every live message. `progress` is called after each page.
    #[tracing::instrument(name = "restore", level = "debug", skip(self, progress))]
    pub async fn all(
        &self,
        expire: bool,
        dry_run: bool,
        progress: impl Fn(&RestoreReport),
    ) -> Result<RestoreReport, QueueError> {
        let start = Instant::now();
        let started_at = now_ms();
        let mut report = RestoreReport {
            dry_run,
            ..Default::default()
        };
        let mut after = 0;
        if let Some(c) = self.resumes_after(expire, dry_run).await? {
            tracing::info!(
                after = c.after,
                interrupted_at = c.updated_at,
                "resuming an interrupted restore after its cursor"
            );
            after = c.after;
            report.resumed_after = Some(c.after);
        }
        self.status
            .set(progress_of(&report, expire, started_at, after));
        if let Some(far) = self.far_from() {
            report.beyond_horizon = self.journal.count_waiting_beyond(far).await?;
        }
        let result = self
            .pages(
                &mut report,
                &mut after,
                expire,
                started_at,
                start,
                &progress,
            )
            .await;
        report.elapsed_ms = start.elapsed().as_millis() as u64;
        let mut done = progress_of(&report, expire, started_at, after);
        done.running = false;
        done.finished_at = Some(now_ms());
        done.error = result.as_ref().err().map(|e| e.to_string());
        self.status.set(done.clone());
        match &result {
            Ok(()) => tracing::info!(
                scanned = done.scanned,
                restored = done.restored,
                already_present = done.already_present,
                skipped_expired = done.skipped_expired,
                rate_per_second = done.rate_per_second,
                dry_run,
                "restore finished"
            ),
            Err(e) => tracing::warn!(
                error = %e,
                cursor = after,
                "restore stopped; running it again resumes after its cursor"
            ),
        }
        result.map(|()| report)
    }

    /// Messages waiting in the journal alone due after this are left there
    /// (none without a horizon).
    fn far_from(&self) -> Option<i64> {
        let horizon = self.redis.horizon_ms();
        (horizon > 0).then(|| now_ms().saturating_add(horizon))
    }

    /// The interrupted restore a restore with this `expire` would resume
    /// after: its cursor, when it moved within [`RESTORE_CURSOR_MS`] (a dry
    /// run resumes nothing).
    pub async fn resumes_after(
        &self,
        expire: bool,
        dry_run: bool,
    ) -> Result<Option<RestoreCursor>, QueueError> {
        if dry_run {
            return Ok(None);
        }
        Ok(self
            .redis
            .inspect()
            .restore_cursor()
            .await?
            .filter(|c| c.expire == expire && now_ms() - c.updated_at < RESTORE_CURSOR_MS))
    }

    async fn pages(
        &self,
        report: &mut RestoreReport,
        after: &mut i64,
        expire: bool,
        started_at: i64,
        start: Instant,
        progress: &impl Fn(&RestoreReport),
    ) -> Result<(), QueueError> {
        let mut logged = Instant::now();
        loop {
            // Its Delaying rows must not fill the journal's backlog: past
            // it, the shards would hold off promoting due messages.
            while self.journal.half_full() {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            let read_at = now_ms();
            let page = self
                .journal
                .live_page(*after, PAGE, self.far_from())
                .await?;
            let Some(last) = page.last() else { break };
            let last = last.id;
            crate::faults::pause_here("restore_frozen").await;
            self.page(&page, read_at, expire, report.dry_run, report)
                .await?;
            *after = last;
            report.elapsed_ms = start.elapsed().as_millis() as u64;
            let p = progress_of(report, expire, started_at, *after);
            if !report.dry_run {
                self.redis
                    .inspect()
                    .save_restore_cursor(&RestoreCursor {
                        after: *after,
                        expire,
                        started_at,
                        updated_at: now_ms(),
                    })
                    .await?;
            }
            if logged.elapsed() >= LOG_EVERY {
                logged = Instant::now();
                tracing::info!(
                    scanned = p.scanned,
                    restored = p.restored,
                    already_present = p.already_present,
                    rate_per_second = p.rate_per_second,
                    cursor = p.cursor,
                    "restoring"
                );
            }
            self.status.set(p);
            progress(report);
            if (page.len() as i64) < PAGE {
                break;
            }
        }
        if !report.dry_run {
            self.flush_patiently().await?;
            self.redis.inspect().clear_restore_cursor().await?;
        }
        Ok(())
    }

    /// Waits until the journal wrote the Delaying rows of what was
    /// restored. A large restore queues a row per message, written in
    /// batches well after Redis took the messages, and one wait for the
    /// journal gives up after two seconds: wait again while the journal
    /// keeps writing, up to [`FLUSH_PATIENCE`].
    async fn flush_patiently(&self) -> Result<(), QueueError> {
        let start = Instant::now();
        loop {
            match self.journal.flush().await {
                Ok(()) => return Ok(()),
                Err(e) if start.elapsed() < FLUSH_PATIENCE => {
                    tracing::info!(error = %e, "restore: waiting for the journal to write the restored messages' status rows");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Restores one message, when it is live.
    #[tracing::instrument(name = "restore", level = "debug", skip(self))]
    pub async fn one(
        &self,
        id: MessageId,
        expire: bool,
    ) -> Result<(RestoreReport, Status), QueueError> {
        let start = Instant::now();
        let read_at = now_ms();
        let row = match self.journal.find(id).await? {
            Some((row, _)) => row,
            None => return Err(QueueError::NotFound(id)),
        };
        let mut report = RestoreReport::default();
        let status = row.status();
        if !status.is_terminal() {
            self.page(
                std::slice::from_ref(&row),
                read_at,
                expire,
                false,
                &mut report,
            )
            .await?;
            self.journal.flush().await?;
        }
        report.elapsed_ms = start.elapsed().as_millis() as u64;
        Ok((report, status))
    }

    async fn page(
        &self,
        rows: &[MessageRow],
        read_at: i64,
        expire: bool,
        dry_run: bool,
        report: &mut RestoreReport,
    ) -> Result<(), QueueError> {
        let now = now_ms();
        report.scanned += rows.len() as u64;
        let (wanted, expired): (Vec<&MessageRow>, Vec<&MessageRow>) =
            rows.iter().partition(|r| expire || r.due_time > now);
        // Overdue and left out: those Redis holds already (ready, in
        // flight) are present, as they are with `expire`; only the rest
        // are skipped.
        if !expired.is_empty() {
            let ids: Vec<MessageId> = expired.iter().map(|r| MessageId(r.id)).collect();
            let present = self.redis.present(&ids).await?;
            let n = present.iter().filter(|&&p| p).count() as u64;
            report.already_present += n;
            report.skipped_expired += ids.len() as u64 - n;
        }
        if wanted.is_empty() {
            return Ok(());
        }
        if dry_run {
            let ids: Vec<MessageId> = wanted.iter().map(|r| MessageId(r.id)).collect();
            let present = self.redis.present(&ids).await?;
            let n = present.iter().filter(|&&p| p).count() as u64;
            report.already_present += n;
            report.restored += ids.len() as u64 - n;
            return Ok(());
        }
        let messages: Vec<_> = wanted.iter().map(|r| (r.message(), r.attempts)).collect();
        let ids: Vec<MessageId> = messages.iter().map(|(m, _)| m.id).collect();
        let added = self
            .router
            .send(Schedule {
                batch: messages,
                read_at,
            })
            .await
            .map_err(crate::error::router_unreachable)??;
        // The router records the restored messages Delaying.
        for (id, outcome) in ids.iter().zip(added) {
            tracing::debug!(id = %id, ?outcome, "restored from the journal");
            match outcome {
                Scheduled::Added { .. } => {
                    report.restored += 1;
                    crate::metrics::metrics().restored.inc();
                }
                Scheduled::Present => report.already_present += 1,
                Scheduled::Finished => report.skipped_finished += 1,
            }
        }
        Ok(())
    }
}

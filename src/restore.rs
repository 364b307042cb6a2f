//! Restore: rebuild Redis from the journal. Streams live messages (not
//! Consumed, Deleted or Dead) in keyset pages, so memory stays bounded, and
//! schedules each one idempotently: a message Redis still holds is counted
//! as already present and left as it is, so restore can run twice, or while
//! the node serves, without duplicates.

use std::time::Instant;

use actix::Addr;
use serde::Serialize;

use crate::actors::journal::Journal;
use crate::actors::router::{RouterActor, Schedule};
use crate::error::ApiError;
use crate::error::ErrorCode;
use crate::journal::models::MessageRow;
use crate::message::{now_ms, MessageId, Status};
use crate::redis::schedule::{RedisSchedule, Scheduled};

const PAGE: i64 = 2_000;

#[derive(Debug, Default, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreReport {
    /// Live messages read from the journal.
    pub scanned: u64,
    /// Added back to Redis (with `dryRun`: would be added).
    pub restored: u64,
    /// Redis held them already.
    pub already_present: u64,
    /// Due time passed and `expire` was false.
    pub skipped_expired: u64,
    /// Acked or cancelled in Redis moments ago; the journal is catching up.
    pub skipped_finished: u64,
    pub dry_run: bool,
    pub elapsed_ms: u64,
}

pub struct Restorer {
    pub journal: Journal,
    pub router: Addr<RouterActor>,
    pub redis: RedisSchedule,
}

impl Restorer {
    /// Restores every live message. `progress` is called after each page.
    pub async fn all(
        &self,
        expire: bool,
        dry_run: bool,
        progress: impl Fn(&RestoreReport),
    ) -> Result<RestoreReport, ApiError> {
        let start = Instant::now();
        let mut report = RestoreReport {
            dry_run,
            ..Default::default()
        };
        let mut after = 0;
        loop {
            let page = self.journal.live_page(after, PAGE).await?;
            let Some(last) = page.last() else { break };
            after = last.id;
            self.page(&page, expire, dry_run, &mut report).await?;
            report.elapsed_ms = start.elapsed().as_millis() as u64;
            progress(&report);
            if (page.len() as i64) < PAGE {
                break;
            }
        }
        if !dry_run {
            self.journal.flush().await?;
        }
        report.elapsed_ms = start.elapsed().as_millis() as u64;
        Ok(report)
    }

    /// Restores one message, when it is live.
    pub async fn one(
        &self,
        id: MessageId,
        expire: bool,
    ) -> Result<(RestoreReport, Status), ApiError> {
        let start = Instant::now();
        let row = match self.journal.find(id).await? {
            Some((row, _)) => row,
            None => {
                return Err(ApiError::NotFound {
                    code: ErrorCode::NotFound,
                    message: format!("no message {id} in the journal"),
                })
            }
        };
        let mut report = RestoreReport::default();
        let status = row.status();
        if !status.is_terminal() {
            self.page(std::slice::from_ref(&row), expire, false, &mut report)
                .await?;
            self.journal.flush().await?;
        }
        report.elapsed_ms = start.elapsed().as_millis() as u64;
        Ok((report, status))
    }

    async fn page(
        &self,
        rows: &[MessageRow],
        expire: bool,
        dry_run: bool,
        report: &mut RestoreReport,
    ) -> Result<(), ApiError> {
        let now = now_ms();
        report.scanned += rows.len() as u64;
        let (wanted, expired): (Vec<&MessageRow>, Vec<&MessageRow>) =
            rows.iter().partition(|r| expire || r.due_time > now);
        report.skipped_expired += expired.len() as u64;
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
        let messages = wanted.iter().map(|r| (r.message(), r.attempts)).collect();
        let added = self
            .router
            .send(Schedule(messages))
            .await
            .map_err(crate::error::ShardError::from)??;
        // The router records the restored messages Delaying.
        for outcome in added {
            match outcome {
                Scheduled::Added { .. } => report.restored += 1,
                Scheduled::Present => report.already_present += 1,
                Scheduled::Finished => report.skipped_finished += 1,
            }
        }
        Ok(())
    }
}

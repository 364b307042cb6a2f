//! The forecast: how many messages fall due per bucket over the coming
//! span (`GET /forecast`, `GET /topics/{topic}/forecast`).
//!
//! - Redis holds the near future (and retries and recurring occurrences
//!   further ahead): every shard's delay zset is counted per bucket with
//!   ZCOUNT, exact and cheap at any size. The zsets hold every topic, so a
//!   topic's share of a bucket is read from its messages' records: all of
//!   them when the bucket is small, else a uniform sample at random ranks,
//!   and the count is then an estimate with its 95 % interval.
//! - The journal holds what waits beyond the Redis horizon: its listed
//!   messages still waiting (of the topic, or all) are counted exactly, by
//!   due time, up to [`JOURNAL_ROWS`] rows; past them the answer says how
//!   far it counted.
//!
//! Both bounds keep a request's cost bounded however many messages are
//! pending: [`SAMPLE`] records at most, [`JOURNAL_ROWS`] rows at most, and
//! one ZCOUNT per shard and bucket.

use delayq_proto::Forecast;

use super::error::QueueError;
use super::state::Queue;
use crate::message::now_ms;
use crate::redis::forecast::{estimate, Share};

/// Journal rows one forecast reads at most.
pub const JOURNAL_ROWS: u64 = 1_000_000;
/// Journal rows per page.
const JOURNAL_PAGE: i64 = 20_000;
/// Records one topic forecast reads at most (about): spread over the
/// non-empty buckets, at least [`MIN_PER_BUCKET`] each.
pub const SAMPLE: u64 = 20_000;
/// The least a bucket too large to read whole is sampled with.
pub const MIN_PER_BUCKET: u64 = 16;
/// Most buckets one forecast has.
pub const MAX_BUCKETS: i64 = 2_000;

impl Queue {
    /// The forecast of `topic` (None: every topic) from now on:
    /// `buckets` buckets of `bucket` ms.
    pub async fn forecast(
        &self,
        topic: Option<&str>,
        bucket: i64,
        buckets: usize,
    ) -> Result<Forecast, QueueError> {
        let now = now_ms();
        let from = now;
        let until = from + bucket * buckets as i64;
        let counts = self
            .redis
            .inspect()
            .due_counts(from, bucket, buckets)
            .await?;
        let ranges = buckets + 1;
        let shares: Option<Vec<Share>> = match topic {
            None => None,
            Some(t) => {
                let nonempty = (0..ranges).filter(|&r| counts.total(r) > 0).count() as u64;
                let per = (SAMPLE / nonempty.max(1)).max(MIN_PER_BUCKET);
                Some(self.redis.inspect().topic_share(&counts, t, per).await?)
            }
        };
        let share = |r: usize| shares.as_ref().map(|s| s[r]);

        // The journal's waiting messages, page by page within the budget.
        let mut journal = vec![0u64; buckets];
        let mut after = (from - 1, i64::MAX);
        let mut rows = 0u64;
        let mut counted_until = None;
        loop {
            let page = self
                .journal
                .waiting_due_page(after, until, topic.map(str::to_string), JOURNAL_PAGE)
                .await?;
            for &(due, _) in &page {
                let b = ((due - from) / bucket) as usize;
                if let Some(n) = journal.get_mut(b) {
                    *n += 1;
                }
            }
            rows += page.len() as u64;
            let full = page.len() as i64 == JOURNAL_PAGE;
            if let Some(&last) = page.last() {
                after = last;
            }
            if !full {
                break;
            }
            if rows >= JOURNAL_ROWS {
                counted_until = Some(after.0);
                break;
            }
        }

        let mut out = Vec::with_capacity(buckets);
        for (b, &j) in journal.iter().enumerate() {
            let at = from + b as i64 * bucket;
            let mut x = estimate(at, counts.total(b + 1), share(b + 1));
            x.count += j;
            x.low = x.low.map(|l| l + j);
            x.high = x.high.map(|h| h + j);
            out.push(x);
        }
        let overdue = estimate(now, counts.total(0), share(0));
        let exact =
            counted_until.is_none() && overdue.low.is_none() && out.iter().all(|b| b.low.is_none());
        let sampled = shares
            .as_ref()
            .map_or(0, |s| s.iter().map(|x| x.seen).sum());
        Ok(Forecast {
            topic: topic.map(str::to_string),
            now,
            from,
            bucket,
            span: bucket * buckets as i64,
            overdue,
            total: out.iter().map(|b| b.count).sum(),
            buckets: out,
            exact,
            journal_counted_until: counted_until,
            sampled,
            journal_rows: rows,
        })
    }
}

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
//!   messages still waiting are read by due time (with their topics for a
//!   topic's forecast) and counted exactly, up to [`JOURNAL_ROWS`] rows of
//!   any topic; past them the answer says how far it counted.
//!
//! Both bounds keep a request's cost bounded however many messages are
//! pending: [`SAMPLE`] records at most, [`JOURNAL_ROWS`] rows at most, and
//! one ZCOUNT per shard and bucket.

use std::collections::BTreeMap;

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

        // The journal's waiting messages, page by page within the budget
        // (rows read, of any topic: a topic's are found among them).
        let mut journal = vec![0u64; buckets];
        let mut after = (from - 1, i64::MAX);
        let mut rows = 0u64;
        let mut counted_until = None;
        loop {
            let page: Vec<(i64, i64, bool)> = match topic {
                None => self
                    .journal
                    .waiting_due_page(after, until, JOURNAL_PAGE)
                    .await?
                    .into_iter()
                    .map(|(due, id)| (due, id, true))
                    .collect(),
                Some(t) => self
                    .journal
                    .waiting_topic_page(after, until, JOURNAL_PAGE)
                    .await?
                    .into_iter()
                    .map(|(due, id, of)| (due, id, of == t))
                    .collect(),
            };
            for &(due, _, mine) in &page {
                let b = ((due - from) / bucket) as usize;
                if let (true, Some(n)) = (mine, journal.get_mut(b)) {
                    *n += 1;
                }
            }
            rows += page.len() as u64;
            let full = page.len() as i64 == JOURNAL_PAGE;
            if let Some(&(due, id, _)) = page.last() {
                after = (due, id);
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

impl Queue {
    /// How many messages of each topic fall due within the next hour (for
    /// `/metrics`): Redis's count of the hour split by the topics of its
    /// messages (all read when they are few, else [`SAMPLE`] at random, and
    /// scaled), plus the journal's waiting messages of the hour, counted up
    /// to [`JOURNAL_ROWS`].
    pub async fn due_next_hour(&self) -> Result<BTreeMap<String, u64>, QueueError> {
        const HOUR: i64 = 3_600_000;
        let from = now_ms();
        let counts = self.redis.inspect().due_counts(from, HOUR, 1).await?;
        let read = self
            .redis
            .inspect()
            .topics_of_range(&counts, 1, SAMPLE)
            .await?;
        let n = counts.total(1);
        let mut out: BTreeMap<String, u64> = read
            .by_topic
            .into_iter()
            .map(|(t, k)| {
                let est = if read.whole || read.seen == 0 {
                    k
                } else {
                    (n as f64 * k as f64 / read.seen as f64).round() as u64
                };
                (t, est)
            })
            .collect();
        let mut after = (from - 1, i64::MAX);
        let mut rows = 0u64;
        loop {
            let page = self
                .journal
                .waiting_topic_page(after, from + HOUR, JOURNAL_PAGE)
                .await?;
            rows += page.len() as u64;
            let full = page.len() as i64 == JOURNAL_PAGE;
            if let Some((due, id, _)) = page.last() {
                after = (*due, *id);
            }
            for (_, _, topic) in page {
                *out.entry(topic).or_default() += 1;
            }
            if !full || rows >= JOURNAL_ROWS {
                break;
            }
        }
        Ok(out)
    }
}

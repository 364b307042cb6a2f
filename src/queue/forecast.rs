//! The forecast: how many messages fall due per bucket over the coming
//! span (`GET /forecast`, `GET /topics/{topic}/forecast`), and the next
//! hour per topic (`delayq_topic_due_next_hour`).
//!
//! - The journal holds what waits beyond the Redis horizon: its waiting
//!   list is read first, by due time, up to [`JOURNAL_ROWS`] rows (ended
//!   messages, still listed until their time comes near, are read and not
//!   counted); past them the answer says how far it counted. One such read
//!   runs at a time per node, beside the journal's writers.
//! - Redis holds the near future (and retries and recurring occurrences
//!   further ahead): every shard's delay zset is counted per bucket with
//!   ZCOUNT, exact and cheap at any size. The zsets hold every topic, so a
//!   topic's share of a bucket is read from its messages: every one when
//!   the bucket holds few, else a uniform sample per shard (the count is
//!   then an estimate with its 95 % interval); their topics come from the
//!   journal.
//! - A listed message near the horizon may be scheduled into Redis while
//!   this reads: those Redis holds once it has been counted are left to
//!   Redis's count, so none is counted twice.
//!
//! Every part is bounded: one ZCOUNT per shard and bucket, about
//! [`SAMPLE`] messages read, [`JOURNAL_ROWS`] rows.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

use delayq_proto::{Forecast, ForecastBucket};
use tokio::sync::Semaphore;

use super::error::QueueError;
use super::state::Queue;
use crate::message::{now_ms, MessageId, Status};
use crate::redis::forecast::{estimate, DueCounts, ShardRead, Tally};

/// Journal rows one forecast reads at most: each is joined with its
/// message, about 13 µs a row on a SQLite journal of 11 million messages
/// (a 1,000,000-row read took 13.6 s; BENCHMARKS.md, "The forecast").
pub const JOURNAL_ROWS: u64 = 200_000;
/// Journal rows per page.
const JOURNAL_PAGE: i64 = 20_000;
/// Messages one topic forecast reads (about): spread over the non-empty
/// buckets, at least [`MIN_PER_RANGE`] each.
pub const SAMPLE: u64 = 20_000;
/// The least a bucket is read with.
pub const MIN_PER_RANGE: u64 = 4;
/// Most buckets one forecast has.
pub const MAX_BUCKETS: i64 = 2_000;
/// Messages the next hour's reading reads (about).
const METRIC_SAMPLE: u64 = 5_000;
/// Listed messages due within the horizon and this much past it may be
/// scheduled into Redis while they are read.
const NEAR_MS: i64 = 300_000;
/// Most of them looked up in Redis.
const NEAR_ROWS: usize = 50_000;
const HOUR: i64 = 3_600_000;

/// One journal read of the waiting list at a time on a node: the journal's
/// read threads are the ones its writes run on.
static JOURNAL_READS: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(1));

/// What the journal's waiting list said.
struct Waiting {
    /// Rows read (any topic, ended ones too).
    rows: u64,
    /// The due time reading stopped at, when the budget ran out.
    counted_until: Option<i64>,
    /// Messages near the horizon that were counted, with what they were
    /// counted in (for [`Queue::drop_held`]).
    near: Vec<(MessageId, usize, String)>,
}

impl Queue {
    /// Reads the waiting list's messages still waiting and due before
    /// `until`, in due order, within the budget: each `(due, topic)` goes
    /// to `count`, which says what it counted it in (None: nothing).
    async fn read_waiting(
        &self,
        until: i64,
        mut count: impl FnMut(i64, &str) -> Option<usize>,
    ) -> Result<Waiting, QueueError> {
        let _one = JOURNAL_READS.acquire().await.expect("never closed");
        let horizon = self.redis.horizon_ms();
        let near_until = now_ms().saturating_add(horizon).saturating_add(NEAR_MS);
        let waiting = Status::WaitPut.code();
        let mut out = Waiting {
            rows: 0,
            counted_until: None,
            near: Vec::new(),
        };
        let mut after = (i64::MIN, i64::MIN);
        loop {
            let page = self
                .journal
                .waiting_scan_page(after, until, JOURNAL_PAGE)
                .await?;
            out.rows += page.len() as u64;
            let full = page.len() as i64 == JOURNAL_PAGE;
            if let Some((due, id, _, _)) = page.last() {
                after = (*due, *id);
            }
            for (due, id, status, topic) in page {
                if status != waiting {
                    continue;
                }
                if let Some(r) = count(due, &topic) {
                    // With the horizon off, the loader drains every row.
                    if (horizon == 0 || due < near_until) && out.near.len() < NEAR_ROWS {
                        out.near.push((MessageId(id), r, topic));
                    }
                }
            }
            if !full {
                break;
            }
            if out.rows >= JOURNAL_ROWS {
                // Cut only where a row is left unread.
                let more = self.journal.waiting_scan_page(after, until, 1).await?;
                if !more.is_empty() {
                    out.counted_until = Some(after.0);
                }
                break;
            }
        }
        Ok(out)
    }

    /// Of the near messages counted from the journal, those Redis's delay
    /// zsets hold now (scheduled meanwhile): Redis counted them (or, for
    /// one scheduled between Redis's count and now, nobody: a moment).
    async fn held_now(&self, near: &[(MessageId, usize, String)]) -> Result<Vec<bool>, QueueError> {
        let ids: Vec<MessageId> = near.iter().map(|(id, _, _)| *id).collect();
        Ok(self.redis.inspect().held(&ids).await?)
    }

    /// The topics of the messages Redis read, tallied for `topic` per
    /// range and shard.
    async fn tally(
        &self,
        reads: &[Vec<ShardRead>],
        topic: &str,
    ) -> Result<Vec<Vec<Tally>>, QueueError> {
        let topics = self.topics_of(reads).await?;
        Ok(reads
            .iter()
            .map(|shards| {
                shards
                    .iter()
                    .map(|sr| tally_of(sr, &topics, topic))
                    .collect()
            })
            .collect())
    }

    async fn topics_of(
        &self,
        reads: &[Vec<ShardRead>],
    ) -> Result<HashMap<i64, String>, QueueError> {
        let mut ids: Vec<i64> = reads
            .iter()
            .flatten()
            .flat_map(|sr| sr.ids.iter().map(|id| id.0))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(self
            .journal
            .states_of(ids)
            .await?
            .into_iter()
            .map(|r| (r.id, r.topic))
            .collect())
    }

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
        // Range 0: overdue; 1 + b: bucket b.
        let range_of = |due: i64| {
            if due < from {
                0
            } else {
                1 + ((due - from) / bucket) as usize
            }
        };
        let mut journal = vec![0u64; buckets + 1];
        let waiting = self
            .read_waiting(until, |due, of| {
                if topic.is_some_and(|t| t != of) {
                    return None;
                }
                let r = range_of(due).min(buckets);
                journal[r] += 1;
                Some(r)
            })
            .await?;
        let counts = self
            .redis
            .inspect()
            .due_counts(from, bucket, buckets)
            .await?;
        let ranges: Vec<(Option<i64>, i64)> = std::iter::once((None, from))
            .chain((0..buckets as i64).map(|b| (Some(from + b * bucket), from + (b + 1) * bucket)))
            .collect();
        let tallies = match topic {
            None => None,
            Some(t) => {
                let nonempty = (0..ranges.len()).filter(|&r| counts.total(r) > 0).count() as u64;
                let per = (SAMPLE / nonempty.max(1)).max(MIN_PER_RANGE);
                let sizes: Vec<u64> = (0..ranges.len())
                    .map(|r| if counts.total(r) == 0 { 0 } else { per })
                    .collect();
                let reads = self
                    .redis
                    .inspect()
                    .read_ranges(&ranges, &counts.counts, &sizes)
                    .await?;
                Some(self.tally(&reads, t).await?)
            }
        };
        // After every reading of Redis: a message scheduled before one of
        // them is held now, and left to Redis's count.
        for ((_, r, _), held) in waiting.near.iter().zip(self.held_now(&waiting.near).await?) {
            if held {
                journal[*r] -= 1;
            }
        }
        let figures = |r: usize, at: i64| {
            let mut x = match &tallies {
                None => ForecastBucket::exact(at, counts.total(r)),
                Some(t) => estimate(at, &t[r]),
            };
            let j = journal[r];
            x.count += j;
            x.low = x.low.map(|l| l + j);
            x.high = x.high.map(|h| h + j);
            x
        };
        let out: Vec<ForecastBucket> = (0..buckets)
            .map(|b| figures(b + 1, from + b as i64 * bucket))
            .collect();
        let overdue = figures(0, now);
        let exact = waiting.counted_until.is_none()
            && overdue.low.is_none()
            && out.iter().all(|b| b.low.is_none());
        let sampled = tallies
            .as_ref()
            .map_or(0, |t| t.iter().flatten().map(|x| x.seen).sum());
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
            journal_counted_until: waiting.counted_until,
            sampled,
            journal_rows: waiting.rows,
        })
    }

    /// How many messages of each topic fall due within the next hour (for
    /// `/metrics`): Redis's count of the hour split by the topics of its
    /// messages (all of them when they are few, else about
    /// [`METRIC_SAMPLE`] at random, scaled), plus the journal's waiting
    /// messages of the hour.
    pub async fn due_next_hour(&self) -> Result<BTreeMap<String, u64>, QueueError> {
        let from = now_ms();
        let until = from + HOUR;
        let mut journal: BTreeMap<String, u64> = BTreeMap::new();
        let waiting = self
            .read_waiting(until, |due, of| {
                (due >= from).then(|| {
                    *journal.entry(of.to_string()).or_default() += 1;
                    0
                })
            })
            .await?;
        let DueCounts { counts } = self.redis.inspect().due_counts(from, HOUR, 1).await?;
        let hour: Vec<Vec<u64>> = counts.iter().map(|c| vec![c[1]]).collect();
        let reads = self
            .redis
            .inspect()
            .read_ranges(&[(Some(from), until)], &hour, &[METRIC_SAMPLE])
            .await?;
        for ((_, _, of), held) in waiting.near.iter().zip(self.held_now(&waiting.near).await?) {
            if held {
                if let Some(n) = journal.get_mut(of) {
                    *n -= 1;
                }
            }
        }
        let topics = self.topics_of(&reads).await?;
        let mut names: Vec<&String> = topics.values().collect();
        names.sort_unstable();
        names.dedup();
        let mut out = journal;
        for name in names {
            let tallies: Vec<Tally> = reads[0]
                .iter()
                .map(|sr| tally_of(sr, &topics, name))
                .collect();
            *out.entry(name.clone()).or_default() += estimate(from, &tallies).count;
        }
        out.retain(|_, n| *n > 0);
        Ok(out)
    }
}

/// One shard's reading of a range, tallied for `topic` (a message whose
/// topic the journal no longer knows is not counted as read).
fn tally_of(sr: &ShardRead, topics: &HashMap<i64, String>, topic: &str) -> Tally {
    let mut t = Tally {
        n: sr.n,
        whole: sr.whole,
        ..Tally::default()
    };
    for of in sr.ids.iter().filter_map(|id| topics.get(&id.0)) {
        t.seen += 1;
        t.matched += u64::from(of == topic);
    }
    t
}

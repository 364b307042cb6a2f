//! What Redis says of the coming buckets, for the forecast
//! (`GET /forecast`): how many scheduled messages fall due in each bucket
//! (ZCOUNT on every shard's delay zset: exact, O(log n) each), and the
//! share of one topic among them (the delay zsets hold every topic, so a
//! bucket's messages are read at random ranks, up to a budget, and their
//! records' topics counted; every message of a bucket is read when it
//! holds no more than its share of the budget).

use delayq_proto::ForecastBucket;

use super::inspect::Inspection;
use super::scripts::evalsha;
use crate::error::RedisError;

/// What every shard's delay zset holds before `from` (overdue: not yet
/// taken by the shard's owner) and from `from` on, in buckets.
#[derive(Debug, Clone, Default)]
pub struct DueCounts {
    /// Per shard: the overdue count, then one count per bucket.
    pub counts: Vec<Vec<u64>>,
}

impl DueCounts {
    /// Every shard's count of range `r` (0: overdue, 1 + b: bucket b).
    pub fn total(&self, r: usize) -> u64 {
        self.counts.iter().map(|c| c[r]).sum()
    }
}

/// A topic's share of each bucket's messages, as read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Share {
    /// Of the topic, among those read.
    pub matched: u64,
    /// Read (still there, with a record).
    pub seen: u64,
    /// Every message of the bucket was meant to be read.
    pub whole: bool,
}

/// The score range `[low, high)` of messages due in `[from, until)` ms.
fn scores(from: i64, until: i64) -> (String, String) {
    (format!("{}", from * 256), format!("({}", until * 256))
}

impl Inspection<'_> {
    /// Every shard's counts from `from` on, `buckets` buckets of `bucket`
    /// ms each: one pipeline of ZCOUNTs.
    pub async fn due_counts(
        self,
        from: i64,
        bucket: i64,
        buckets: usize,
    ) -> Result<DueCounts, RedisError> {
        let shards = self.keys.shards();
        let mut pipe = redis::pipe();
        for s in 0..shards {
            let key = self.keys.delay(s);
            pipe.zcount(&key, "-inf", format!("({}", from * 256));
            for b in 0..buckets as i64 {
                let (low, high) = scores(from + b * bucket, from + (b + 1) * bucket);
                pipe.zcount(&key, low, high);
            }
        }
        let all: Vec<u64> = pipe.query_async(&mut self.con.clone()).await?;
        Ok(DueCounts {
            counts: all.chunks(buckets + 1).map(<[u64]>::to_vec).collect(),
        })
    }

    /// `topic`'s share of each range's messages (as [`DueCounts`] numbers
    /// them): up to `per_bucket` read at
    /// random ranks across the shards (every one where the bucket holds no
    /// more). The ranks come from `counts` (read just before): a message
    /// that moved since may be read in its neighbour's place.
    pub async fn topic_share(
        self,
        counts: &DueCounts,
        topic: &str,
        per_bucket: u64,
    ) -> Result<Vec<Share>, RedisError> {
        let shards = counts.counts.len();
        let buckets = counts.counts.first().map_or(0, Vec::len);
        // Per shard: the script's groups (one per bucket), as ARGV.
        let mut args: Vec<Vec<String>> = vec![vec![topic.to_string()]; shards];
        let mut whole = Vec::with_capacity(buckets);
        // Rank of each shard's first message of the range.
        let mut first: Vec<u64> = vec![0; shards];
        let mut rng = fastrand::Rng::new();
        for b in 0..buckets {
            let n = counts.total(b);
            let mut ranks: Vec<Vec<u64>> = vec![Vec::new(); shards];
            let place = |g: u64, ranks: &mut Vec<Vec<u64>>| {
                // The g-th message of the bucket, counting shard by shard.
                let mut g = g;
                for s in 0..shards {
                    let c = counts.counts[s][b];
                    if g < c {
                        ranks[s].push(first[s] + g);
                        return;
                    }
                    g -= c;
                }
            };
            if n <= per_bucket {
                for g in 0..n {
                    place(g, &mut ranks);
                }
                whole.push(true);
            } else {
                for _ in 0..per_bucket {
                    place(rng.u64(0..n), &mut ranks);
                }
                whole.push(false);
            }
            for s in 0..shards {
                args[s].push(ranks[s].len().to_string());
                args[s].extend(ranks[s].iter().map(u64::to_string));
                first[s] += counts.counts[s][b];
            }
        }
        let mut pipe = redis::pipe();
        for (s, a) in args.iter().enumerate() {
            let s = s as u32;
            pipe.add_command(evalsha(
                &self.scripts.forecast,
                &[self.keys.delay(s), self.keys.messages(s)],
                a,
            ));
        }
        let replies: Vec<Vec<u64>> = self
            .scripts
            .run_pipe("forecast", &mut self.con.clone(), &pipe)
            .await?;
        let mut out: Vec<Share> = whole
            .into_iter()
            .map(|whole| Share {
                whole,
                ..Share::default()
            })
            .collect();
        for r in replies {
            if r.len() != buckets * 2 {
                return Err(RedisError::BadRecord(format!(
                    "forecast.lua returned {} numbers for {buckets} buckets",
                    r.len()
                )));
            }
            for (b, pair) in r.chunks(2).enumerate() {
                out[b].matched += pair[0];
                out[b].seen += pair[1];
            }
        }
        Ok(out)
    }
}

/// What the messages of one range of [`DueCounts`] are, by topic.
#[derive(Debug, Clone, Default)]
pub struct TopicsRead {
    /// Topic → how many of those read are of it.
    pub by_topic: std::collections::BTreeMap<String, u64>,
    /// How many were read (still there, with a record).
    pub seen: u64,
    /// Every message of the range was meant to be read.
    pub whole: bool,
}

impl Inspection<'_> {
    /// The topics of range `r`'s messages: every one when it holds no more
    /// than `limit`, else `limit` at random ranks.
    pub async fn topics_of_range(
        self,
        counts: &DueCounts,
        r: usize,
        limit: u64,
    ) -> Result<TopicsRead, RedisError> {
        let shards = counts.counts.len();
        let n = counts.total(r);
        let first: Vec<u64> = counts.counts.iter().map(|c| c[..r].iter().sum()).collect();
        let mut ranks: Vec<Vec<u64>> = vec![Vec::new(); shards];
        let place = |g: u64, ranks: &mut Vec<Vec<u64>>| {
            let mut g = g;
            for s in 0..shards {
                let c = counts.counts[s][r];
                if g < c {
                    ranks[s].push(first[s] + g);
                    return;
                }
                g -= c;
            }
        };
        let whole = n <= limit;
        if whole {
            (0..n).for_each(|g| place(g, &mut ranks));
        } else {
            let mut rng = fastrand::Rng::new();
            (0..limit).for_each(|_| place(rng.u64(0..n), &mut ranks));
        }
        let mut out = TopicsRead {
            whole,
            ..TopicsRead::default()
        };
        let mut pipe = redis::pipe();
        let mut asked = 0;
        for (s, rs) in ranks.iter().enumerate().filter(|(_, rs)| !rs.is_empty()) {
            let s = s as u32;
            let args: Vec<String> = rs.iter().map(u64::to_string).collect();
            pipe.add_command(evalsha(
                &self.scripts.forecast_topics,
                &[self.keys.delay(s), self.keys.messages(s)],
                &args,
            ));
            asked += 1;
        }
        if asked == 0 {
            return Ok(out);
        }
        let replies: Vec<Vec<Option<String>>> = self
            .scripts
            .run_pipe("forecast_topics", &mut self.con.clone(), &pipe)
            .await?;
        for topic in replies.into_iter().flatten().flatten() {
            out.seen += 1;
            *out.by_topic.entry(topic).or_default() += 1;
        }
        Ok(out)
    }
}

/// A bucket's figures from a count `n` (exact) and a topic's share read of
/// it: exact when every message was read, else the estimate `n · matched /
/// seen` with its 95 % Wilson interval.
pub fn estimate(at: i64, n: u64, share: Option<Share>) -> ForecastBucket {
    let Some(sh) = share else {
        return ForecastBucket::exact(at, n);
    };
    if n == 0 {
        return ForecastBucket::exact(at, 0);
    }
    if sh.whole && sh.seen == n {
        return ForecastBucket::exact(at, sh.matched);
    }
    if sh.seen == 0 {
        // Nothing read (all gone meanwhile): anything from none to all.
        return ForecastBucket {
            at,
            count: 0,
            low: Some(0),
            high: Some(n),
        };
    }
    let (low, high) = wilson(sh.matched, sh.seen);
    let count = (n as f64 * sh.matched as f64 / sh.seen as f64).round() as u64;
    ForecastBucket {
        at,
        count,
        low: Some(((n as f64 * low).floor() as u64).max(sh.matched.min(1))),
        high: Some(((n as f64 * high).ceil() as u64).min(n)),
    }
}

/// The 95 % Wilson score interval of a proportion `k / n`.
pub fn wilson(k: u64, n: u64) -> (f64, f64) {
    let (k, n) = (k as f64, n as f64);
    let z = 1.959_964f64;
    let p = k / n;
    let z2n = z * z / n;
    let centre = (p + z2n / 2.0) / (1.0 + z2n);
    let half = z * (p * (1.0 - p) / n + z2n / (4.0 * n)).sqrt() / (1.0 + z2n);
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_read_whole_is_exact() {
        let share = Share {
            matched: 3,
            seen: 10,
            whole: true,
        };
        assert_eq!(estimate(5, 10, Some(share)), ForecastBucket::exact(5, 3));
        assert_eq!(estimate(5, 7, None), ForecastBucket::exact(5, 7));
        assert_eq!(
            estimate(5, 0, Some(Share::default())),
            ForecastBucket::exact(5, 0)
        );
    }

    #[test]
    fn a_sampled_bucket_states_its_interval() {
        let share = Share {
            matched: 50,
            seen: 200,
            whole: false,
        };
        let b = estimate(0, 10_000, Some(share));
        assert_eq!(b.count, 2_500);
        let (low, high) = (b.low.unwrap(), b.high.unwrap());
        assert!(low < 2_500 && high > 2_500, "{low}..{high}");
        // ±6 points at 95 % for 200 read.
        assert!((1_900..2_100).contains(&low), "{low}");
        assert!((3_000..3_200).contains(&high), "{high}");
        // None of the topic read: still up to a few percent.
        let none = estimate(
            0,
            10_000,
            Some(Share {
                matched: 0,
                seen: 200,
                whole: false,
            }),
        );
        assert_eq!((none.count, none.low), (0, Some(0)));
        assert!(none.high.unwrap() > 100 && none.high.unwrap() < 300);
    }

    #[test]
    fn the_interval_covers_the_truth_as_often_as_it_says() {
        // 2,000 samples of 100 from a bucket where 30 % are of the topic.
        let mut rng = fastrand::Rng::with_seed(7);
        let mut covered = 0;
        for _ in 0..2_000 {
            let k = (0..100).filter(|_| rng.f64() < 0.3).count() as u64;
            let (low, high) = wilson(k, 100);
            if low <= 0.3 && 0.3 <= high {
                covered += 1;
            }
        }
        assert!(covered > 1_860, "covered {covered} of 2,000");
    }
}

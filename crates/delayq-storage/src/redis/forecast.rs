//! What Redis says of the coming buckets, for the forecast
//! (`GET /forecast`): how many scheduled messages fall due in each bucket
//! (ZCOUNT on every shard's delay zset: exact, O(log n) each), and which
//! messages a range holds, to find one topic's share of it (the delay
//! zsets hold every topic): every id of a shard's range when it holds few,
//! else ids at random ranks of it, counted and read in one script call per
//! shard (forecast.lua), so what is read is always of the range. The ids'
//! topics come from the journal (a record in Redis carries the body, which
//! a script would copy whole).

use delayq_proto::ForecastBucket;

use super::inspect::Inspection;
use super::scripts::evalsha;
use crate::error::RedisError;
use crate::message::MessageId;

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

/// One shard's reading of one range.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardRead {
    /// How many messages the range held.
    pub n: u64,
    /// `ids` are every message of the range, else a uniform sample.
    pub whole: bool,
    pub ids: Vec<MessageId>,
}

/// The score range `[low, high)` of messages due in `[from, until)` ms
/// (`from` None: everything before `until`).
fn scores(from: Option<i64>, until: i64) -> (String, String) {
    (
        from.map_or("-inf".to_string(), |f| (f.saturating_mul(256)).to_string()),
        until.saturating_mul(256).to_string(),
    )
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
            pipe.zcount(&key, "-inf", format!("({}", from.saturating_mul(256)));
            for b in 0..buckets as i64 {
                let (low, high) = scores(Some(from + b * bucket), from + (b + 1) * bucket);
                pipe.zcount(&key, low, format!("({high}"));
            }
        }
        let all: Vec<u64> = pipe.query_async(&mut self.con.clone()).await?;
        Ok(DueCounts {
            counts: all.chunks(buckets + 1).map(<[u64]>::to_vec).collect(),
        })
    }

    /// Reads `ranges` (`[from, until)` ms; `from` None: everything before
    /// `until`) on every shard: each range's `sizes` entry is how many ids
    /// to read of it in all, shared among the shards as `counts` (read
    /// before, per shard and range) says they hold it. Returns, per range,
    /// each shard's reading.
    pub async fn read_ranges(
        self,
        ranges: &[(Option<i64>, i64)],
        counts: &[Vec<u64>],
        sizes: &[u64],
    ) -> Result<Vec<Vec<ShardRead>>, RedisError> {
        let shards = self.keys.shards() as usize;
        let mut rng = fastrand::Rng::new();
        let mut pipe = redis::pipe();
        for s in 0..shards {
            let mut args: Vec<String> = Vec::new();
            for (r, &(from, until)) in ranges.iter().enumerate() {
                let total: u64 = counts.iter().map(|c| c[r]).sum();
                let here = counts.get(s).map_or(0, |c| c[r]);
                // This shard's part of the range's size, at least one id
                // where it holds any (its count may have grown since).
                let k = if total == 0 {
                    0
                } else {
                    (sizes[r] * here).div_ceil(total).max(u64::from(here > 0))
                };
                let (low, high) = scores(from, until);
                args.push(low);
                args.push(high);
                args.push(k.to_string());
                args.extend((0..k).map(|_| rng.f64().to_string()));
            }
            pipe.add_command(evalsha(
                &self.scripts.forecast,
                &[self.keys.delay(s as u32)],
                &args,
            ));
        }
        let replies: Vec<Vec<Vec<String>>> = self
            .scripts
            .run_pipe("forecast", &mut self.con.clone(), &pipe)
            .await?;
        let bad = |what: String| RedisError::BadRecord(format!("forecast.lua returned {what}"));
        let mut out: Vec<Vec<ShardRead>> = vec![Vec::with_capacity(shards); ranges.len()];
        for shard in replies {
            if shard.len() != ranges.len() {
                return Err(bad(format!("{} ranges for {}", shard.len(), ranges.len())));
            }
            for (r, g) in shard.into_iter().enumerate() {
                let (n, whole) = match (g.first(), g.get(1)) {
                    (Some(n), Some(w)) => {
                        (n.parse().map_err(|_| bad(format!("count {n}")))?, w == "1")
                    }
                    _ => return Err(bad(format!("{g:?}"))),
                };
                let ids = g[2..]
                    .iter()
                    .map(|id| id.parse().map_err(|_| bad(format!("id {id}"))))
                    .collect::<Result<_, _>>()?;
                out[r].push(ShardRead { n, whole, ids });
            }
        }
        Ok(out)
    }

    /// Whether each message is in its shard's delay zset.
    pub async fn held(self, ids: &[MessageId]) -> Result<Vec<bool>, RedisError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.zscore(self.keys.delay(self.keys.shard_of(*id)), id.to_string());
        }
        let scores: Vec<Option<f64>> = pipe.query_async(&mut self.con.clone()).await?;
        Ok(scores.iter().map(Option::is_some).collect())
    }
}

/// One shard's reading of a range, tallied for one topic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// The range's count on the shard.
    pub n: u64,
    /// Every message of it was read.
    pub whole: bool,
    /// Read, with a topic known (a message gone from the journal since is
    /// not).
    pub seen: u64,
    /// Of those, of the topic.
    pub matched: u64,
}

/// A range's figures for one topic from its shards' tallies: exact where
/// every message was read (and found), else the stratified estimate
/// `Σ n · matched / seen` with its 95 % interval (normal, each shard's
/// share taken as `(matched + 2) / (seen + 4)` for its variance, so a
/// share read as 0 or 1 still has one).
pub fn estimate(at: i64, shards: &[Tally]) -> ForecastBucket {
    let (mut exact, mut blind) = (0u64, 0u64);
    let (mut est, mut var, mut most, mut least) = (0f64, 0f64, 0u64, 0u64);
    let mut sampled = false;
    for t in shards {
        if t.n == 0 {
            continue;
        }
        if t.whole && t.seen == t.n {
            exact += t.matched;
            continue;
        }
        sampled = true;
        if t.seen == 0 {
            // Nothing read: anything from none to all.
            blind += t.n;
            continue;
        }
        most += t.n;
        least += t.matched.min(t.n);
        let n = t.n as f64;
        est += n * t.matched as f64 / t.seen as f64;
        let p = (t.matched as f64 + 2.0) / (t.seen as f64 + 4.0);
        var += n * n * p * (1.0 - p) / t.seen as f64;
    }
    if !sampled {
        return ForecastBucket::exact(at, exact);
    }
    let half = 1.959_964 * var.sqrt();
    let clamp = |x: f64| (x.max(least as f64) as u64).min(most);
    ForecastBucket {
        at,
        count: exact + clamp(est.round()),
        low: Some(exact + clamp((est - half).floor())),
        high: Some(exact + clamp((est + half).ceil()) + blind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(n: u64, whole: bool, seen: u64, matched: u64) -> Tally {
        Tally {
            n,
            whole,
            seen,
            matched,
        }
    }

    #[test]
    fn ranges_read_whole_are_exact() {
        let b = estimate(
            5,
            &[
                tally(10, true, 10, 3),
                tally(4, true, 4, 4),
                Tally::default(),
            ],
        );
        assert_eq!(b, ForecastBucket::exact(5, 7));
        assert_eq!(estimate(5, &[]), ForecastBucket::exact(5, 0));
        // A message gone from the journal meanwhile: no longer exact.
        assert!(estimate(5, &[tally(10, true, 9, 3)]).low.is_some());
    }

    #[test]
    fn a_sampled_range_states_its_interval() {
        let b = estimate(0, &[tally(10_000, false, 200, 50), tally(3, true, 3, 2)]);
        assert_eq!(b.count, 2_502);
        let (low, high) = (b.low.unwrap(), b.high.unwrap());
        assert!((1_850..2_100).contains(&low), "{low}");
        assert!((2_900..3_200).contains(&high), "{high}");
        // None of the topic read: still up to a few percent.
        let none = estimate(0, &[tally(10_000, false, 200, 0)]);
        assert_eq!((none.count, none.low), (0, Some(0)));
        assert!(
            none.high.unwrap() > 100 && none.high.unwrap() < 400,
            "{none:?}"
        );
        // Nothing read at all: anything.
        let blind = estimate(0, &[tally(100, false, 0, 0)]);
        assert_eq!((blind.low, blind.high), (Some(0), Some(100)));
    }

    #[test]
    fn the_interval_covers_the_truth_as_often_as_it_says() {
        // Two shards of a range: 6,000 messages (30 % of the topic) and
        // 2,000 (80 %), sampled 150 and 50 times with replacement; truth
        // 3,400.
        let mut rng = fastrand::Rng::with_seed(7);
        let mut covered = 0;
        let runs = 2_000;
        for _ in 0..runs {
            let draw = |n: u64, p: f64, k: u64, rng: &mut fastrand::Rng| {
                let m = (0..k).filter(|_| rng.f64() < p).count() as u64;
                tally(n, false, k, m)
            };
            let a = draw(6_000, 0.3, 150, &mut rng);
            let b = draw(2_000, 0.8, 50, &mut rng);
            let e = estimate(0, &[a, b]);
            if e.low.unwrap() <= 3_400 && 3_400 <= e.high.unwrap() {
                covered += 1;
            }
        }
        assert!(covered * 100 >= runs * 93, "covered {covered} of {runs}");
    }
}

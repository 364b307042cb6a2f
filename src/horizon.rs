//! The Redis horizon: Redis holds the near future only.
//!
//! A message due further ahead than `--redis-horizon` (default 1 h) is
//! answered once the journal committed it, like any push, and stays there
//! alone (status WaitPut: accepted, not yet scheduled); it costs Redis
//! nothing. The [`Loader`] of each node pages the journal by due time (the
//! `(status, due_time, id)` index) and schedules into Redis the waiting
//! messages of the shards this node owns as they come within the horizon,
//! so a message is in its shard's delay zset well before it falls due
//! (at least the horizon less [`Pace::grace_ms`] and a round or two) and
//! its lateness is that of any other.
//!
//! - Fenced: each shard's messages are scheduled with the epoch this node
//!   owns it with (schedule.lua refuses an older one), so a deposed owner
//!   holding an old page cannot bring back what the new owner delivered.
//! - Idempotent: scheduling leaves a message Redis holds as it is and
//!   refuses one acked or cancelled lately (its tombstone), so reading a row
//!   twice, or a push and the loader scheduling one message together, is
//!   harmless; the router records what Redis took Delaying, which takes it
//!   off the next pages.
//! - Bounded: one page of [`PAGE`] rows at a time, held back while the
//!   journal's backlog is half full, like a restore.
//! - Handed over with the shard: the loader reads which shards (and
//!   epochs) this node owns before each page, and reads again from the
//!   start of the window whenever they change, so a failover or rebalance
//!   gives the new owner the waiting messages at once.
//!
//! A row is read once unchanged for [`Pace::grace_ms`], so a fresh push
//! still on its way to Redis is not scheduled twice. Every few rounds the
//! loader reads the window from its start again: a row the grace kept out,
//! or one whose schedule met an outage, is taken then. A message whose push
//! met a Redis outage (journaled, not scheduled) is scheduled this way too.
//!
//! What is in Redis already stays there: a nack or retry delay, or a
//! recurring message's next occurrence, beyond the horizon keeps its
//! record in Redis. A cancel of a waiting message finds it in the journal
//! (and leaves a tombstone a late page cannot pass); a repeated bizKey
//! answers with it; a restore leaves it in the journal; the reconciler
//! expects it absent from Redis until [`load_lag_ms`] before the horizon.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use actix::Addr;

use crate::actors::journal::Journal;
use crate::actors::router::{Batch, Load, OwnedShards, RouterActor};
use crate::error::RedisError;
use crate::message::now_ms;
use crate::queue::QueueError;
use crate::redis::schedule::{RedisSchedule, Scheduled};

/// Journal rows read per page.
pub const PAGE: i64 = 500;
/// Rounds between two reads of the window from its start.
const RESCAN_EVERY: u32 = 10;
/// How often an outage is logged while it lasts.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// How the loader paces itself for a horizon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Between rounds that found less than a page.
    pub period: Duration,
    /// A row is read once unchanged this long (ms): a fresh push's own
    /// schedule lands first.
    pub grace_ms: i64,
}

impl Pace {
    /// A twentieth of the horizon between rounds (50 ms to 1 s) and a
    /// quarter of it as grace (100 ms to 5 s).
    pub fn of(horizon_ms: i64) -> Pace {
        Pace {
            period: Duration::from_millis((horizon_ms / 20).clamp(50, 1_000) as u64),
            grace_ms: (horizon_ms / 4).clamp(100, 5_000),
        }
    }
}

/// How long before it crosses the horizon a waiting message may still be
/// in the journal alone: the grace, two rounds and a second to spare.
pub fn load_lag_ms(horizon_ms: i64) -> i64 {
    let pace = Pace::of(horizon_ms);
    pace.grace_ms + 2 * pace.period.as_millis() as i64 + 1_000
}

/// Schedules the waiting messages of the shards this node owns as they
/// come within the horizon.
pub struct Loader {
    pub journal: Journal,
    pub router: Addr<RouterActor>,
    pub redis: RedisSchedule,
}

impl Loader {
    /// Runs until the router stops; does nothing without a horizon.
    pub async fn run(self) {
        let horizon = self.redis.horizon_ms();
        if horizon == 0 {
            return;
        }
        let pace = Pace::of(horizon);
        let start = (i64::MIN, 0);
        let mut after = start;
        let mut owned_before = Vec::new();
        let mut round: u32 = 0;
        let mut warned: Option<Instant> = None;
        loop {
            let Ok(owned) = self.router.send(OwnedShards).await else {
                return;
            };
            round = round.wrapping_add(1);
            if owned != owned_before || round.is_multiple_of(RESCAN_EVERY) {
                after = start;
                owned_before = owned.clone();
            }
            if owned.is_empty() {
                tokio::time::sleep(pace.period).await;
                continue;
            }
            match self.page(&owned, after, horizon, pace).await {
                Ok((next, full)) => {
                    after = next;
                    if full {
                        continue;
                    }
                }
                Err(QueueError::Redis(RedisError::StaleEpoch { shard, stored })) => {
                    tracing::info!(
                        shard,
                        stored,
                        "horizon loader: the shard moved on; reading which shards this node owns again"
                    );
                    after = start;
                }
                Err(e) => {
                    if warned.is_none_or(|w| w.elapsed() >= WARN_EVERY) {
                        warned = Some(Instant::now());
                        tracing::warn!(error = %e, "horizon loader: cannot schedule waiting messages yet; retrying");
                    }
                    after = start;
                }
            }
            tokio::time::sleep(pace.period).await;
        }
    }

    /// Reads one page after `after` and schedules its rows of the shards
    /// in `owned`: where the next page starts, and whether this one was
    /// full.
    async fn page(
        &self,
        owned: &[(u32, i64)],
        after: (i64, i64),
        horizon: i64,
        pace: Pace,
    ) -> Result<((i64, i64), bool), QueueError> {
        while self.journal.half_full() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let now = now_ms();
        let rows = self
            .journal
            .waiting_page(after, now + horizon, now - pace.grace_ms, PAGE)
            .await?;
        let full = rows.len() as i64 == PAGE;
        let next = rows.last().map_or(after, |r| (r.due_time, r.id));
        let keys = self.redis.keys();
        let epochs: BTreeMap<u32, i64> = owned.iter().copied().collect();
        let mut by_shard: BTreeMap<u32, Batch> = BTreeMap::new();
        for row in &rows {
            let shard = keys.shard_of(crate::message::MessageId(row.id));
            if epochs.contains_key(&shard) {
                by_shard
                    .entry(shard)
                    .or_default()
                    .push((row.message(), row.attempts));
            }
        }
        for (shard, batch) in by_shard {
            let added = self
                .router
                .send(Load {
                    shard,
                    epoch: epochs[&shard],
                    batch,
                })
                .await
                .map_err(RedisError::from)??;
            let n = added
                .iter()
                .filter(|s| matches!(s, Scheduled::Added { .. }))
                .count();
            crate::metrics::metrics().horizon_loaded.inc_by(n as u64);
            if n > 0 {
                tracing::debug!(
                    shard,
                    loaded = n,
                    "horizon loader: scheduled from the journal"
                );
            }
        }
        Ok((next, full))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pace_follows_the_horizon_within_bounds() {
        assert_eq!(
            Pace::of(3_600_000),
            Pace {
                period: Duration::from_secs(1),
                grace_ms: 5_000
            }
        );
        assert_eq!(
            Pace::of(2_000),
            Pace {
                period: Duration::from_millis(100),
                grace_ms: 500
            }
        );
        assert_eq!(Pace::of(1_000).period, Duration::from_millis(50));
        // A message crossing the horizon is loaded well before it is due.
        for h in [1_000, 2_000, 60_000, 3_600_000] {
            assert!(load_lag_ms(h) < h + 1_000, "{h}");
        }
    }
}

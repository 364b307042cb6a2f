//! The Redis horizon: Redis holds the near future only.
//!
//! A message due further ahead than `--redis-horizon` (default 1 h) is
//! answered once the journal committed it, like any push, and stays there
//! alone (status WaitPut: accepted, not yet scheduled), listed in the
//! `message_waiting` table by due time, in the push's own transaction; it
//! costs Redis nothing. A push due within the horizon writes nothing more
//! than before (an index over every message's due time would make every
//! push pay: it halved SQLite's push rate). The [`Loader`] of each node
//! pages that list by due time and schedules into Redis the waiting
//! messages of the shards this node owns as they come within the horizon,
//! so a message is in its shard's delay zset well before it falls due (the
//! horizon less a round or two) and its lateness is that of any other.
//! What it scheduled, or found no longer waiting (cancelled, scheduled by a
//! restore, purged), it takes off the list.
//!
//! - Fenced: each shard's messages are scheduled with the epoch this node
//!   owns it with (schedule.lua refuses an older one), so a deposed owner
//!   holding an old page cannot bring back what the new owner delivered.
//! - Idempotent: scheduling leaves a message Redis holds as it is and
//!   refuses one acked or cancelled lately (its tombstone); a crash between
//!   scheduling and unlisting only has the next owner schedule it again,
//!   which changes nothing.
//! - Bounded: one page of [`PAGE`] entries at a time (its shards scheduled
//!   together), held back while the
//!   journal's backlog is half full, like a restore.
//! - Handed over with the shard: the loader reads which shards (and
//!   epochs) this node owns before each page, and reads again from the
//!   start of the window whenever they change, so a failover or rebalance
//!   gives the new owner the waiting messages at once.
//!
//! With the horizon off (`0`) the loader drains what is still listed,
//! whatever its due time. What is in Redis already stays there: a nack or
//! retry delay, or a recurring message's next occurrence, beyond the
//! horizon keeps its record in Redis. A cancel of a waiting message finds
//! it in the journal (and leaves a tombstone a late page cannot pass); a
//! repeated bizKey answers with it; a restore leaves it in the journal; the
//! reconciler expects it absent from Redis until [`load_lag_ms`] before the
//! horizon.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use actix::Addr;

use crate::actors::journal::Journal;
use crate::actors::router::{Batch, Load, OwnedShards, RouterActor};
use crate::error::RedisError;
use crate::message::{now_ms, MessageId, Status};
use crate::queue::QueueError;
use crate::redis::schedule::{RedisSchedule, Scheduled};

/// Journal rows read per page.
pub const PAGE: i64 = 2_000;
/// Sweeps of the window between two reads of it from its start (a sweep
/// ends on a page that is not full).
const RESCAN_EVERY: u32 = 10;
/// Most bytes of message bodies in one script call of the loader.
const LOAD_BYTES: usize = 4 << 20;
/// How often an outage is logged while it lasts.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// How long the loader waits between rounds that found less than a page:
/// a twentieth of the horizon, 50 ms to 1 s.
pub fn period(horizon_ms: i64) -> Duration {
    Duration::from_millis((horizon_ms / 20).clamp(50, 1_000) as u64)
}

/// How long after it crossed the horizon a waiting message may still be
/// in the journal alone: a read of the window from its start, two more
/// rounds, and half a minute for a crowd crossing at once (300,000 take
/// about 20 s to load) or a journal that holds the loader back.
pub fn load_lag_ms(horizon_ms: i64) -> i64 {
    (RESCAN_EVERY as i64 + 2) * period(horizon_ms).as_millis() as i64 + 30_000
}

/// Schedules the waiting messages of the shards this node owns as they
/// come within the horizon.
pub struct Loader {
    pub journal: Journal,
    pub router: Addr<RouterActor>,
    pub redis: RedisSchedule,
}

impl Loader {
    /// Runs until the router stops.
    pub async fn run(self) {
        // Without a horizon, what is still listed is loaded at once.
        let horizon = match self.redis.horizon_ms() {
            0 => i64::MAX / 2,
            h => h,
        };
        let period = period(horizon);
        let start = (i64::MIN, 0);
        let mut after = start;
        let mut owned_before = Vec::new();
        let mut sweeps: u32 = 0;
        let mut warned: Option<Instant> = None;
        loop {
            let Ok(owned) = self.router.send(OwnedShards).await else {
                return;
            };
            if owned != owned_before {
                after = start;
                owned_before = owned.clone();
            }
            if owned.is_empty() {
                tokio::time::sleep(period).await;
                continue;
            }
            match self.page(&owned, after, horizon).await {
                Ok((next, full)) => {
                    after = next;
                    if full {
                        continue;
                    }
                    // A sweep of the window ended: every few, the next
                    // starts from its beginning again.
                    sweeps = sweeps.wrapping_add(1);
                    if sweeps.is_multiple_of(RESCAN_EVERY) {
                        after = start;
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
            tokio::time::sleep(period).await;
        }
    }

    /// Reads one page after `after` and schedules its messages of the
    /// shards in `owned`, then takes them off the list: where the next page
    /// starts, and whether this one was full.
    async fn page(
        &self,
        owned: &[(u32, i64)],
        after: (i64, i64),
        horizon: i64,
    ) -> Result<((i64, i64), bool), QueueError> {
        while self.journal.half_full() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let entries = self
            .journal
            .waiting_page(after, now_ms().saturating_add(horizon), PAGE)
            .await?;
        let full = entries.len() as i64 == PAGE;
        let next = entries.last().copied().unwrap_or(after);
        let keys = self.redis.keys();
        let epochs: BTreeMap<u32, i64> = owned.iter().copied().collect();
        let mine: Vec<(i64, i64)> = entries
            .into_iter()
            .filter(|&(_, id)| epochs.contains_key(&keys.shard_of(MessageId(id))))
            .collect();
        if mine.is_empty() {
            return Ok((next, full));
        }
        let read_at = now_ms();
        let rows = self
            .journal
            .rows_of(mine.iter().map(|&(_, id)| id).collect())
            .await?;
        // Per shard, calls of at most LOAD_BYTES of bodies.
        let mut by_shard: BTreeMap<u32, Vec<Batch>> = BTreeMap::new();
        let mut bytes: BTreeMap<u32, usize> = BTreeMap::new();
        let mut not_waiting: HashSet<i64> = mine.iter().map(|&(_, id)| id).collect();
        for row in rows.iter().filter(|r| r.status() == Status::WaitPut) {
            not_waiting.remove(&row.id);
            let shard = keys.shard_of(MessageId(row.id));
            let calls = by_shard.entry(shard).or_default();
            let size = bytes.entry(shard).or_default();
            if calls.is_empty() || *size + row.body.len() > LOAD_BYTES {
                calls.push(Batch::new());
                *size = 0;
            }
            *size += row.body.len() + 256;
            calls
                .last_mut()
                .expect("a call was just added")
                .push((row.message(), row.attempts));
        }
        // Every shard at once, each one call after another; a shard that
        // fails (its master down, the shard moved on) keeps its messages
        // listed and holds up no other.
        let shards = by_shard.into_iter().map(|(shard, calls)| {
            let epoch = epochs[&shard];
            let load = move |batch| Load {
                shard,
                epoch,
                read_at,
                batch,
            };
            async move {
                let mut added = 0;
                for batch in calls {
                    let outcome = self
                        .router
                        .send(load(batch))
                        .await
                        .map_err(crate::error::router_unreachable)
                        .and_then(|r| r);
                    match outcome {
                        Ok(o) => {
                            added += o
                                .iter()
                                .filter(|s| matches!(s, Scheduled::Added { .. }))
                                .count();
                        }
                        Err(e) => return (shard, added, Err(e)),
                    }
                }
                (shard, added, Ok(()))
            }
        });
        let mut failed = HashSet::new();
        let mut first_error = None;
        for (shard, added, outcome) in futures::future::join_all(shards).await {
            crate::metrics::metrics()
                .horizon_loaded
                .inc_by(added as u64);
            if added > 0 {
                tracing::debug!(
                    shard,
                    loaded = added,
                    "horizon loader: scheduled from the journal"
                );
            }
            if let Err(e) = outcome {
                failed.insert(shard);
                first_error.get_or_insert(e);
            }
        }
        // Scheduled, or no longer waiting (ended, scheduled by a restore,
        // purged): off the list. What a failed shard still waits for
        // stays listed.
        let done: Vec<(i64, i64)> = mine
            .into_iter()
            .filter(|&(_, id)| {
                not_waiting.contains(&id) || !failed.contains(&keys.shard_of(MessageId(id)))
            })
            .collect();
        self.journal.unlist_waiting(done).await?;
        if let Some(e) = first_error {
            return Err(e.into());
        }
        Ok((next, full))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pace_follows_the_horizon_within_bounds() {
        assert_eq!(period(3_600_000), Duration::from_secs(1));
        assert_eq!(period(2_000), Duration::from_millis(100));
        assert_eq!(period(1_000), Duration::from_millis(50));
        assert_eq!(load_lag_ms(3_600_000), 42_000);
    }
}

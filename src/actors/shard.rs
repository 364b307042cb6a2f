//! ZsetShardActor: scans one shard, alive only on the shard's owner.
//!
//! It does not poll on a fixed tick. It sleeps until the earliest due time
//! (or ack deadline) in its shard, on the process's own timer, and is woken
//! early by [`Wake`] when something earlier arrives. Each scan step is one
//! script call moving up to [`BATCH`] messages; a full batch is followed at
//! once by another. A new owner raises the shard's fencing epoch before its
//! first scan, and a scan with an older epoch is refused by Redis.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use actix::prelude::*;

use crate::error::ShardError;
use crate::journal::{Journal, StatusChange};
use crate::message::{now_ms, Status};
use crate::ready::Waiters;
use crate::redis::schedule::{RedisSchedule, TickResult};

/// Messages moved per script call.
pub const BATCH: usize = 1_000;
/// Longest sleep: a safety net for changes this node was not told about
/// (another process restoring into Redis, a lost wake-up).
const MAX_SLEEP_MS: i64 = 1_000;
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Wake up at `at_ms` at the latest.
#[derive(Message, Clone, Copy)]
#[rtype(result = "()")]
pub struct Wake {
    pub at_ms: i64,
}

/// Stop scanning (the shard moved to another node, or shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Release;

pub struct ZsetShardActor {
    shard: u32,
    redis: RedisSchedule,
    journal: Journal,
    waiters: Waiters,
    delay_key: std::sync::Arc<str>,
    epoch: i64,
    /// When the pending timer fires, if one is pending.
    timer: Option<(i64, SpawnHandle)>,
    scanning: bool,
    /// A wake-up arrived during a scan: scan again right after it.
    rescan: bool,
    backoff: Duration,
}

impl ZsetShardActor {
    pub fn new(shard: u32, redis: RedisSchedule, journal: Journal, waiters: Waiters) -> Self {
        let delay_key = redis.keys().delay(shard).into();
        ZsetShardActor {
            shard,
            redis,
            journal,
            waiters,
            delay_key,
            epoch: 0,
            timer: None,
            scanning: false,
            rescan: false,
            backoff: Duration::from_millis(50),
        }
    }

    fn schedule_at(&mut self, at_ms: i64, ctx: &mut Context<Self>) {
        if let Some((_, handle)) = self.timer.take() {
            ctx.cancel_future(handle);
        }
        let now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as i64)
            .unwrap_or(0);
        let wait = Duration::from_micros((at_ms * 1000 - now_us).max(0) as u64);
        let handle = ctx.run_later(wait, |act, ctx| {
            act.timer = None;
            act.scan(ctx);
        });
        self.timer = Some((at_ms, handle));
    }

    fn scan(&mut self, ctx: &mut Context<Self>) {
        if self.scanning {
            self.rescan = true;
            return;
        }
        self.scanning = true;
        self.rescan = false;
        let (redis, shard, epoch) = (self.redis.clone(), self.shard, self.epoch);
        let step = async move { redis.tick(shard, now_ms(), BATCH, epoch).await };
        ctx.spawn(step.into_actor(self).map(|res, act, ctx| {
            act.scanning = false;
            match res {
                Ok(t) => {
                    act.backoff = Duration::from_millis(50);
                    act.after_scan(t, ctx);
                }
                Err(ShardError::StaleEpoch(_)) => {
                    tracing::error!(
                        shard = act.shard,
                        "a newer owner raised this shard's epoch; stopping its scan"
                    );
                    ctx.stop();
                }
                Err(e) => {
                    tracing::warn!(shard = act.shard, error = %e, "shard scan failed; retrying");
                    let retry = now_ms() + act.backoff.as_millis() as i64;
                    act.backoff = (act.backoff * 2).min(MAX_BACKOFF);
                    act.schedule_at(retry, ctx);
                }
            }
        }));
    }

    fn after_scan(&mut self, t: TickResult, ctx: &mut Context<Self>) {
        let now = now_ms();
        let mut changes = Vec::with_capacity(t.moved.len() + t.requeued.len());
        let mut topics: Vec<&str> = Vec::new();
        for (id, topic) in &t.moved {
            changes.push(StatusChange {
                id: *id,
                status: Status::Ready,
                attempts: None,
                at: now,
                shard: self.delay_key.clone(),
            });
            topics.push(topic);
        }
        for (id, topic, attempts) in &t.requeued {
            tracing::debug!(shard = self.shard, id = %id, attempts, "ack deadline passed; delivering again");
            changes.push(StatusChange {
                id: *id,
                status: Status::Ready,
                attempts: Some(*attempts),
                at: now,
                shard: self.delay_key.clone(),
            });
            topics.push(topic);
        }
        topics.sort_unstable();
        topics.dedup();
        for topic in topics {
            self.waiters.notify(topic);
        }
        self.journal.record(changes);

        let full = t.moved.len() >= BATCH || t.requeued.len() >= BATCH;
        if full || self.rescan {
            self.schedule_at(now, ctx);
            return;
        }
        let next = [t.next_due, t.next_deadline].into_iter().flatten().min();
        let at = next.map_or(now + MAX_SLEEP_MS, |n| n.min(now + MAX_SLEEP_MS));
        self.schedule_at(at, ctx);
    }
}

impl Actor for ZsetShardActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let redis = self.redis.clone();
        let shard = self.shard;
        // Become the shard's owner in Redis before the first scan; retry
        // until Redis answers.
        ctx.wait(
            async move {
                let mut backoff = Duration::from_millis(50);
                loop {
                    match redis.raise_epoch(shard).await {
                        Ok(epoch) => return epoch,
                        Err(e) => {
                            tracing::warn!(shard, error = %e, "cannot raise shard epoch; retrying");
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(MAX_BACKOFF);
                        }
                    }
                }
            }
            .into_actor(self)
            .map(|epoch, act, ctx| {
                act.epoch = epoch;
                tracing::debug!(shard = act.shard, epoch, "scanning shard");
                act.scan(ctx);
            }),
        );
    }
}

impl Handler<Wake> for ZsetShardActor {
    type Result = ();

    fn handle(&mut self, msg: Wake, ctx: &mut Self::Context) {
        if self.scanning {
            self.rescan = true;
        } else if self.timer.is_none_or(|(at, _)| msg.at_ms < at) {
            self.schedule_at(msg.at_ms, ctx);
        }
    }
}

impl Handler<Release> for ZsetShardActor {
    type Result = ();

    fn handle(&mut self, _: Release, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

//! ZsetShardActor: scans one shard, alive only on the shard's owner.
//!
//! It does not poll on a fixed tick. It sleeps until the earliest due time
//! (or ack deadline) in its shard, on the process's own timer, and is woken
//! early by [`Wake`] when something earlier arrives. Each scan step is one
//! script call moving up to [`BATCH`] messages; a full batch is followed at
//! once by another.
//!
//! Fencing: the actor is started with its owner's epoch (a token from the
//! cluster module, see [`crate::cluster`]); every scan passes it, the first
//! raises the shard's stored epoch, and Redis refuses a scan with an older
//! one. A refused actor reports [`Stale`] to the cluster module and stops.

use std::time::Duration;

use actix::prelude::*;
use tokio::sync::{mpsc, oneshot};

use crate::actors::journal::Journal;
use crate::actors::permit::Permit;
use crate::error::RedisError;
use crate::journal::StatusChange;
use crate::message::now_ms;
use crate::metrics::metrics;
use crate::notify::Topics;
use crate::redis::schedule::{AfterFailure, RedisSchedule, TickResult};

/// Messages moved per script call. A call of 4,000 held Redis for about
/// 20 ms on a quiet machine and for 51 ms on a busy one (a million due
/// within one second, scripts/bench-million), over the 50 ms no command
/// may take; with 2,000 one shard promotes 100,000 due messages as fast
/// as with 4,000 (116-128k/s against 114-152k/s in the same hour,
/// scripts/bench-promotion).
pub const BATCH: usize = 2_000;
/// Longest sleep: a safety net for changes this node was not told about
/// (another process restoring into Redis, a lost wake-up).
const MAX_SLEEP_MS: i64 = 1_000;
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How soon a scan without a valid permit looks again.
const PERMIT_RETRY_MS: i64 = 20;
/// How soon a scan held back by the journal's backlog looks again.
const BACKLOG_RETRY_MS: i64 = 50;

/// A shard actor found a higher epoch than its own in Redis and stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stale {
    pub shard: u32,
    /// The actor's epoch.
    pub epoch: i64,
    /// The epoch Redis holds.
    pub stored: i64,
}

/// Wake up at `at_ms` at the latest.
#[derive(Message, Clone, Copy)]
#[rtype(result = "()")]
pub struct Wake {
    pub at_ms: i64,
}

/// Stop scanning (the shard moved to another node, or shutdown). Answered
/// once the scan under way, if any, has finished and the actor stopped.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Release;

pub struct ZsetShardActor {
    shard: u32,
    redis: RedisSchedule,
    journal: Journal,
    waiters: Topics,
    delay_key: std::sync::Arc<str>,
    epoch: i64,
    stale: mpsc::UnboundedSender<Stale>,
    permit: Permit,
    /// Callers of Release waiting for the scan under way to finish.
    releasing: Vec<oneshot::Sender<()>>,
    /// When the pending timer fires, if one is pending.
    timer: Option<(i64, SpawnHandle)>,
    scanning: bool,
    /// A wake-up arrived during a scan: scan again right after it.
    rescan: bool,
    backoff: Duration,
    /// Promotion is held back by the journal's backlog.
    held_back: bool,
    /// Scans wait for a valid permit (logged once per lapse).
    waiting_for_permit: bool,
}

impl ZsetShardActor {
    pub fn new(
        shard: u32,
        epoch: i64,
        redis: RedisSchedule,
        journal: Journal,
        waiters: Topics,
        stale: mpsc::UnboundedSender<Stale>,
        permit: Permit,
    ) -> Self {
        let delay_key = redis.keys().delay(shard).into();
        ZsetShardActor {
            shard,
            redis,
            journal,
            waiters,
            delay_key,
            epoch,
            stale,
            permit,
            releasing: Vec::new(),
            timer: None,
            scanning: false,
            rescan: false,
            backoff: Duration::from_millis(50),
            held_back: false,
            waiting_for_permit: false,
        }
    }

    fn schedule_at(&mut self, at_ms: i64, ctx: &mut Context<Self>) {
        if let Some((_, handle)) = self.timer.take() {
            ctx.cancel_future(handle);
        }
        // Due times are on the clock of the shard's master (Redis's): the
        // sleep is measured against this node's estimate of it, not its
        // wall clock.
        let now_us = crate::clock::now_us_for(self.shard);
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
        if !self.permit.valid() && !crate::faults::on("ignore_permit") {
            // Membership not confirmed lately (ZooKeeper unreachable, or
            // this process was paused): wait for it.
            if !self.waiting_for_permit {
                tracing::info!(
                    shard = self.shard,
                    "membership not confirmed lately; the scan waits for ZooKeeper"
                );
                self.waiting_for_permit = true;
            }
            self.schedule_at(now_ms() + PERMIT_RETRY_MS, ctx);
            return;
        }
        if self.waiting_for_permit {
            tracing::info!(shard = self.shard, "membership confirmed; scanning again");
            self.waiting_for_permit = false;
        }
        if self.journal.lagging() {
            // The journal is far behind (its database is down or slow):
            // promoting more would only grow the queue of status changes.
            // Due messages wait in the zset, late but not lost.
            if !self.held_back {
                tracing::warn!(
                    shard = self.shard,
                    "journal backlog full; holding off promotion until it catches up"
                );
                self.held_back = true;
            }
            self.schedule_at(now_ms() + BACKLOG_RETRY_MS, ctx);
            return;
        }
        if self.held_back {
            tracing::info!(shard = self.shard, "journal caught up; promoting again");
            self.held_back = false;
        }
        self.scanning = true;
        self.rescan = false;
        let (redis, shard, epoch) = (self.redis.clone(), self.shard, self.epoch);
        let step = async move { redis.delivery().tick(shard, BATCH, epoch).await };
        ctx.spawn(step.into_actor(self).map(|res, act, ctx| {
            act.scanning = false;
            if !act.releasing.is_empty() {
                // Let go: what this scan moved is recorded, nothing more.
                if let Ok(t) = res {
                    act.after_scan(t, ctx);
                }
                ctx.stop();
                return;
            }
            match res {
                Ok(t) => {
                    act.backoff = Duration::from_millis(50);
                    crate::actors::health::scan_ok(act.shard);
                    act.after_scan(t, ctx);
                }
                Err(RedisError::StaleEpoch { stored, .. }) => {
                    metrics().scan_refused(act.shard, "stale_epoch");
                    crate::actors::health::scan_failed(act.shard, "stale epoch");
                    if let Some(suppressed) = crate::actors::health::may_log(act.shard, "stale") {
                        tracing::error!(
                            shard = act.shard,
                            epoch = act.epoch,
                            stored,
                            suppressed,
                            "Redis holds a higher epoch for this shard than this owner's; stopping its scan"
                        );
                    }
                    let _ = act.stale.send(Stale {
                        shard: act.shard,
                        epoch: act.epoch,
                        stored,
                    });
                    ctx.stop();
                }
                Err(e) => {
                    metrics().scan_refused(act.shard, "error");
                    crate::actors::health::scan_failed(act.shard, "scan failing");
                    if let Some(suppressed) = crate::actors::health::may_log(act.shard, "error") {
                        tracing::warn!(shard = act.shard, error = %e, suppressed, "shard scan failed; retrying");
                    }
                    let retry = now_ms() + act.backoff.as_millis() as i64;
                    act.backoff = (act.backoff * 2).min(MAX_BACKOFF);
                    act.schedule_at(retry, ctx);
                }
            }
        }));
    }

    fn after_scan(&mut self, t: TickResult, ctx: &mut Context<Self>) {
        if !self.releasing.is_empty() {
            self.record(t);
            return;
        }
        let (full, next) = (
            t.moved.len() >= BATCH || t.failed.len() >= BATCH,
            [t.next_due, t.next_deadline].into_iter().flatten().min(),
        );
        self.record(t);
        let now = crate::clock::now_ms_for(self.shard);
        if full || self.rescan {
            self.schedule_at(now, ctx);
            return;
        }
        let at = next.map_or(now + MAX_SLEEP_MS, |n| n.min(now + MAX_SLEEP_MS));
        self.schedule_at(at, ctx);
    }

    /// Records what a scan did and wakes the consumers of its topics.
    fn record(&mut self, t: TickResult) {
        let _scan = tracing::debug_span!("scan", shard = self.shard, epoch = self.epoch).entered();
        let now = t.at;
        let mut changes = Vec::with_capacity(t.moved.len() + t.failed.len());
        let mut topics: Vec<&str> = Vec::new();
        let m = metrics();
        m.promoted.inc_by(t.moved.len() as u64);
        for (id, topic, attempts) in &t.moved {
            tracing::debug!(id = %id, topic = %topic, "due: ready for its consumers");
            let mut change = StatusChange::promoted(*id, now, self.delay_key.clone());
            // A message waiting out a failed delivery keeps its count in
            // its history.
            change.attempts = (*attempts > 0).then_some(*attempts);
            changes.push(change);
            topics.push(topic);
        }
        for f in &t.failed {
            match f.then {
                AfterFailure::Dead => m.count(&m.dead, &f.topic, 1),
                AfterFailure::Stopped => {}
                _ => m.count(&m.redelivered, &f.topic, 1),
            }
            match f.then {
                AfterFailure::Ready => {
                    tracing::debug!(shard = self.shard, id = %f.id, attempts = f.attempts, "ack deadline passed; delivering again");
                    topics.push(&f.topic);
                }
                AfterFailure::Delaying { due } => {
                    tracing::debug!(shard = self.shard, id = %f.id, attempts = f.attempts, due, "ack deadline passed; delivering again after the retry delay");
                }
                AfterFailure::Dead => {
                    tracing::info!(shard = self.shard, id = %f.id, topic = %f.topic, attempts = f.attempts, "ack deadline passed on the last attempt; the message is dead");
                }
                AfterFailure::Stopped => {
                    tracing::debug!(shard = self.shard, id = %f.id, "ack deadline passed on the last delivery of a cancelled series");
                }
            }
            changes.push(StatusChange::failed(
                f.id,
                f.then,
                f.attempts,
                now,
                self.delay_key.clone(),
            ));
        }
        topics.sort_unstable();
        topics.dedup();
        for topic in topics {
            self.waiters.notify(topic);
        }
        self.journal.record(changes);
    }
}

impl Actor for ZsetShardActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        tracing::info!(shard = self.shard, epoch = self.epoch, "scanning shard");
        self.scan(ctx);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        tracing::info!(
            shard = self.shard,
            epoch = self.epoch,
            "stopped scanning shard"
        );
        if !self.releasing.is_empty() {
            // Let go of: whether it could be scanned is no longer this
            // node's concern.
            crate::actors::health::forget(self.shard);
        }
        for done in self.releasing.drain(..) {
            let _ = done.send(());
        }
    }
}

impl Handler<Wake> for ZsetShardActor {
    type Result = ();

    fn handle(&mut self, msg: Wake, ctx: &mut Self::Context) {
        if !self.releasing.is_empty() {
            return;
        }
        if self.scanning {
            self.rescan = true;
        } else if self.timer.is_none_or(|(at, _)| msg.at_ms < at) {
            self.schedule_at(msg.at_ms, ctx);
        }
    }
}

impl Handler<Release> for ZsetShardActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Release, ctx: &mut Self::Context) -> Self::Result {
        let (done, stopped) = oneshot::channel();
        self.releasing.push(done);
        if let Some((_, handle)) = self.timer.take() {
            ctx.cancel_future(handle);
        }
        if !self.scanning {
            ctx.stop();
        }
        Box::pin(async move {
            let _ = stopped.await;
        })
    }
}

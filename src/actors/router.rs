//! RouterActor: `shard = hash(id) % shards`. Writes a message into its
//! shard's keys (any node may write any shard), records it Delaying, and
//! wakes the shard's actor when this node owns the shard, so it can move its
//! wake-up earlier (an owner elsewhere is woken over Redis pub/sub by the
//! schedule script). It shares an arbiter with the shard actors, so a
//! message's Delaying is recorded before the Ready its shard actor records.
//!
//! It is also the shard actors' supervisor: the cluster module turns
//! ownership into [`StartShard`] and [`StopShard`], and the router starts and
//! stops one [`ZsetShardActor`] per owned shard.

use actix::prelude::*;
use tokio::sync::mpsc;

use crate::actors::journal::Journal;
use crate::actors::permit::Permit;
use crate::actors::shard::{Release, Stale, Wake, ZsetShardActor};
use crate::error::RedisError;
use crate::journal::StatusChange;
use crate::message::{now_ms, Message};
use crate::notify::Topics;
pub use crate::notify::{Touch, WakeAll};
use crate::redis::schedule::{RedisSchedule, Scheduled};

/// Messages with their delivery counts.
pub type Batch = Vec<(Message, i32)>;

/// Schedule messages (with their delivery counts); answers what happened
/// to each.
#[derive(Message)]
#[rtype(result = "Result<Vec<Scheduled>, RedisError>")]
pub struct Schedule {
    pub batch: Batch,
    /// When what is scheduled was read (the journal's rows, a push's
    /// commit; the cluster's clock, ms): too old a reading is refused
    /// ([`crate::redis::schedule::STALE_READING_MS`]).
    pub read_at: i64,
}

/// Schedule messages of one shard from the journal, as its owner holding
/// `epoch` (the horizon loader): refused once the shard's stored epoch is
/// above it (see [`RedisSchedule::schedule_fenced`]).
#[derive(Message)]
#[rtype(result = "Result<Vec<Scheduled>, RedisError>")]
pub struct Load {
    pub shard: u32,
    pub epoch: i64,
    /// When the page was read from the journal (ms).
    pub read_at: i64,
    pub batch: Batch,
}

/// This node now owns `shard` with this epoch: start scanning it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StartShard {
    pub shard: u32,
    pub epoch: i64,
}

/// This node lets go of `shard`: answered once its actor has finished the
/// scan under way and stopped.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopShard {
    pub shard: u32,
}

/// The shards this node scans now, with their epochs.
#[derive(Message)]
#[rtype(result = "Vec<(u32, i64)>")]
pub struct OwnedShards;

pub struct RouterActor {
    redis: RedisSchedule,
    journal: Journal,
    waiters: Topics,
    stale: mpsc::UnboundedSender<Stale>,
    permit: Permit,
    /// Each shard's delay zset key, named on the Delaying flow rows.
    delay_names: Vec<std::sync::Arc<str>>,
    owned: Vec<Option<(i64, Addr<ZsetShardActor>)>>,
}

impl RouterActor {
    /// A router that owns no shard yet. Shard actors report a stale epoch
    /// on `stale`.
    pub fn new(
        redis: RedisSchedule,
        journal: Journal,
        waiters: Topics,
        stale: mpsc::UnboundedSender<Stale>,
        permit: Permit,
    ) -> Self {
        let shards = redis.keys().shards() as usize;
        let delay_names = (0..shards as u32)
            .map(|s| redis.keys().delay(s).into())
            .collect();
        RouterActor {
            redis,
            journal,
            waiters,
            stale,
            permit,
            delay_names,
            owned: vec![None; shards],
        }
    }

    fn wake(&self, shard: u32, at_ms: i64) {
        if let Some(Some((_, actor))) = self.owned.get(shard as usize) {
            if actor.connected() {
                actor.do_send(Wake { at_ms });
            }
        }
    }
}

impl Actor for RouterActor {
    type Context = Context<Self>;
}

impl RouterActor {
    /// Runs a schedule call, then records what Redis took and wakes the
    /// shards that must look earlier.
    fn schedule_with(
        &self,
        call: impl std::future::Future<Output = Result<(Batch, Vec<Scheduled>), RedisError>> + 'static,
    ) -> ResponseActFuture<Self, Result<Vec<Scheduled>, RedisError>> {
        Box::pin(call.into_actor(self).map(|res, act, _| {
            let (messages, added) = res?;
            act.scheduled(&messages, &added);
            Ok(added)
        }))
    }

    /// Records the messages Redis took Delaying and wakes the shard actors
    /// of this node that must look earlier.
    fn scheduled(&mut self, messages: &Batch, added: &[Scheduled]) {
        let keys = self.redis.keys();
        let mut earliest: Vec<Option<i64>> = vec![None; self.owned.len()];
        let mut changes = Vec::new();
        for ((m, _), at) in messages.iter().zip(added).filter_map(|(m, s)| match s {
            Scheduled::Added { at } => Some((m, *at)),
            _ => None,
        }) {
            let shard = keys.shard_of(m.id);
            let slot = &mut earliest[shard as usize];
            *slot = Some(slot.map_or(m.due_time, |e: i64| e.min(m.due_time)));
            changes.push(StatusChange::scheduled(
                m.id,
                at,
                self.delay_names[shard as usize].clone(),
            ));
        }
        self.journal.record(changes);
        for (shard, at) in earliest.into_iter().enumerate() {
            if let Some(at) = at {
                self.wake(shard as u32, at);
            }
        }
    }
}

impl Handler<Schedule> for RouterActor {
    type Result = ResponseActFuture<Self, Result<Vec<Scheduled>, RedisError>>;

    fn handle(&mut self, msg: Schedule, _: &mut Self::Context) -> Self::Result {
        let redis = self.redis.clone();
        self.schedule_with(async move {
            let added = redis.schedule(&msg.batch, msg.read_at).await?;
            Ok((msg.batch, added))
        })
    }
}

impl Handler<Load> for RouterActor {
    type Result = ResponseActFuture<Self, Result<Vec<Scheduled>, RedisError>>;

    fn handle(&mut self, msg: Load, _: &mut Self::Context) -> Self::Result {
        let redis = self.redis.clone();
        self.schedule_with(async move {
            let added = redis
                .schedule_fenced(msg.shard, msg.epoch, msg.read_at, &msg.batch)
                .await?;
            Ok((msg.batch, added))
        })
    }
}

impl Handler<Touch> for RouterActor {
    type Result = ();

    fn handle(&mut self, msg: Touch, _: &mut Self::Context) {
        self.wake(msg.shard, msg.at_ms);
    }
}

impl Handler<StartShard> for RouterActor {
    type Result = ();

    fn handle(&mut self, msg: StartShard, _: &mut Self::Context) {
        let Some(slot) = self.owned.get_mut(msg.shard as usize) else {
            return;
        };
        if let Some((epoch, actor)) = slot {
            if *epoch == msg.epoch && actor.connected() {
                return;
            }
            actor.do_send(Release);
        }
        let (r, j, w, s) = (
            self.redis.clone(),
            self.journal.clone(),
            self.waiters.clone(),
            self.stale.clone(),
        );
        let actor =
            ZsetShardActor::new(msg.shard, msg.epoch, r, j, w, s, self.permit.clone()).start();
        *slot = Some((msg.epoch, actor));
    }
}

impl Handler<StopShard> for RouterActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: StopShard, _: &mut Self::Context) -> Self::Result {
        let actor = self
            .owned
            .get_mut(msg.shard as usize)
            .and_then(Option::take);
        Box::pin(async move {
            if let Some((_, actor)) = actor {
                let _ = actor.send(Release).await;
            }
        })
    }
}

impl Handler<OwnedShards> for RouterActor {
    type Result = Vec<(u32, i64)>;

    fn handle(&mut self, _: OwnedShards, _: &mut Self::Context) -> Self::Result {
        self.owned
            .iter()
            .enumerate()
            .filter_map(|(s, o)| {
                o.as_ref()
                    .filter(|(_, a)| a.connected())
                    .map(|(e, _)| (s as u32, *e))
            })
            .collect()
    }
}

impl Handler<WakeAll> for RouterActor {
    type Result = ();

    fn handle(&mut self, _: WakeAll, _: &mut Self::Context) {
        let now = now_ms();
        for shard in 0..self.owned.len() as u32 {
            self.wake(shard, now);
        }
    }
}

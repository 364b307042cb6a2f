//! RouterActor: `shard = hash(id) % shards`. Writes a message into its
//! shard's keys (any node may write any shard), records it Delaying, and
//! wakes the shard's actor when this node owns the shard, so it can move its
//! wake-up earlier. It shares an arbiter with the shard actors, so a message's
//! Delaying is recorded before the Ready its shard actor records.

use actix::prelude::*;

use crate::actors::shard::{Wake, ZsetShardActor};
use crate::error::ShardError;
use crate::journal::{Journal, StatusChange};
use crate::message::{now_ms, Message, MessageId, Status};
use crate::redis::schedule::{CancelResult, RedisSchedule, Scheduled};

/// Messages with their delivery counts.
pub type Batch = Vec<(Message, i32)>;

/// Schedule messages (with their delivery counts); answers what happened
/// to each.
#[derive(Message)]
#[rtype(result = "Result<Vec<Scheduled>, ShardError>")]
pub struct Schedule(pub Batch);

/// Cancel a message that has not been handed to a consumer; with
/// `tombstone_absent`, keep one Redis does not hold from being scheduled.
#[derive(Message)]
#[rtype(result = "Result<CancelResult, ShardError>")]
pub struct Cancel {
    pub id: MessageId,
    pub tombstone_absent: bool,
}

/// Something in `shard` needs attention at `at_ms` (a new due time, or an
/// ack deadline of a message just handed out).
#[derive(Message, Clone, Copy)]
#[rtype(result = "()")]
pub struct Touch {
    pub shard: u32,
    pub at_ms: i64,
}

/// This node now owns `shard` and scans it with `actor`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ShardOwned {
    pub shard: u32,
    pub actor: Addr<ZsetShardActor>,
}

pub struct RouterActor {
    redis: RedisSchedule,
    journal: Journal,
    /// Each shard's delay zset key, named on the Delaying flow rows.
    delay_names: Vec<std::sync::Arc<str>>,
    owned: Vec<Option<Addr<ZsetShardActor>>>,
}

impl RouterActor {
    /// A router that owns no shard yet (the CLI's restore runs this way).
    pub fn new(redis: RedisSchedule, journal: Journal) -> Self {
        let shards = redis.keys().shards() as usize;
        let delay_names = (0..shards as u32)
            .map(|s| redis.keys().delay(s).into())
            .collect();
        RouterActor {
            redis,
            journal,
            delay_names,
            owned: vec![None; shards],
        }
    }

    fn wake(&self, shard: u32, at_ms: i64) {
        if let Some(Some(actor)) = self.owned.get(shard as usize) {
            actor.do_send(Wake { at_ms });
        }
    }
}

impl Actor for RouterActor {
    type Context = Context<Self>;
}

impl Handler<Schedule> for RouterActor {
    type Result = ResponseActFuture<Self, Result<Vec<Scheduled>, ShardError>>;

    fn handle(&mut self, msg: Schedule, _: &mut Self::Context) -> Self::Result {
        let redis = self.redis.clone();
        Box::pin(
            async move {
                let added = redis.schedule(&msg.0).await?;
                Ok((msg.0, added))
            }
            .into_actor(self)
            .map(|res: Result<(Batch, Vec<Scheduled>), ShardError>, act, _| {
                let (messages, added) = res?;
                let keys = act.redis.keys();
                let now = now_ms();
                let mut earliest: Vec<Option<i64>> = vec![None; act.owned.len()];
                let mut changes = Vec::new();
                for ((m, _), _) in messages
                    .iter()
                    .zip(&added)
                    .filter(|(_, &s)| s == Scheduled::Added)
                {
                    let shard = keys.shard_of(m.id);
                    let slot = &mut earliest[shard as usize];
                    *slot = Some(slot.map_or(m.due_time, |e: i64| e.min(m.due_time)));
                    changes.push(StatusChange {
                        id: m.id,
                        status: Status::Delaying,
                        attempts: None,
                        at: now,
                        shard: act.delay_names[shard as usize].clone(),
                    });
                }
                act.journal.record(changes);
                for (shard, at) in earliest.into_iter().enumerate() {
                    if let Some(at) = at {
                        act.wake(shard as u32, at);
                    }
                }
                Ok(added)
            }),
        )
    }
}

impl Handler<Cancel> for RouterActor {
    type Result = ResponseFuture<Result<CancelResult, ShardError>>;

    fn handle(&mut self, msg: Cancel, _: &mut Self::Context) -> Self::Result {
        let redis = self.redis.clone();
        Box::pin(async move { redis.cancel(msg.id, msg.tombstone_absent).await })
    }
}

impl Handler<Touch> for RouterActor {
    type Result = ();

    fn handle(&mut self, msg: Touch, _: &mut Self::Context) {
        self.wake(msg.shard, msg.at_ms);
    }
}

impl Handler<ShardOwned> for RouterActor {
    type Result = ();

    fn handle(&mut self, msg: ShardOwned, _: &mut Self::Context) {
        if let Some(slot) = self.owned.get_mut(msg.shard as usize) {
            *slot = Some(msg.actor);
        }
    }
}

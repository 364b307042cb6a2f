//! The queue's handles (the journal, the router, Redis, the waiting polls,
//! the id generator) and what its rules share: the ends Redis keeps for the
//! journal, the live holder of a bizKey, acting on a bizKey prefix a page
//! at a time; pausing and resuming a topic.

use std::sync::Arc;

use actix::Addr;

use super::coalesce::Coalesce;
use super::error::QueueError;
use super::outcome::{Ack, AckOutcome, CancelOutcome};
use crate::actors::journal::Journal;
use crate::actors::router::RouterActor;
use crate::journal::StatusChange;
use crate::message::{IdGenerator, MessageId};
use crate::notify::Topics;
use crate::redis::schedule::{End, RedisSchedule};

/// The handles the rules work with; cheap to clone.
#[derive(Clone)]
pub struct Queue {
    // The stores are the queue's own: handlers read through its methods
    // (`read.rs`) as they act through its rules.
    pub(super) journal: Journal,
    pub(super) router: Addr<RouterActor>,
    pub(super) redis: RedisSchedule,
    pub waiters: Topics,
    pub(super) ids: Arc<IdGenerator>,
    /// Single acks (`POST /ack/{id}`), applied together with their
    /// neighbours.
    pub(super) acks: Option<Coalesce<Ack, AckOutcome>>,
    /// Single cancels (`GET /delete`), likewise.
    pub(super) cancels: Option<Coalesce<MessageId, CancelOutcome>>,
}

/// Journal rows read per page when acting on a bizKey prefix.
const PREFIX_PAGE: i64 = 500;

/// What acting on a bizKey prefix came to: how many live messages matched,
/// and how many came to each outcome (by its name on the wire).
pub type PrefixCounts = (usize, std::collections::BTreeMap<&'static str, u64>);

/// The end of `id` Redis keeps for the journal (`{P:s}:unjournaled`),
/// found by an ack or a cancel of a message that ended already, as the
/// change to record with it. Until the journal has that end, Redis keeps
/// it; the journal may never have heard of it (its write was refused, or
/// lost with the node that made it), and without this only the reconciler
/// would tell it. Recorded twice it changes nothing: an ended row keeps
/// its end and its history (see [`StatusChange::kept`]). Once written,
/// Redis forgets the entry.
pub(super) fn kept_end(redis: &RedisSchedule, id: MessageId, end: End) -> StatusChange {
    let keys = redis.keys();
    let shard = keys.unjournaled(keys.shard_of(id));
    StatusChange::kept_end(id, end.status, end.attempts, end.at, shard.into())
}

/// The live message holding `(topic, bizKey)`: its id, or none.
pub(super) async fn live_holder(
    state: &Queue,
    topic: &str,
    key: &str,
) -> Result<Vec<MessageId>, QueueError> {
    let (rows, _) = state
        .journal
        .live_by_biz_key(crate::actors::journal::LiveByBizKey::Exact {
            topic: topic.to_string(),
            key: key.to_string(),
        })
        .await?;
    Ok(rows.iter().map(|r| MessageId(r.id)).collect())
}

/// Acts on every live message of `topic` whose bizKey starts with `prefix`
/// (compared exactly), a page of ids at a time (cancel, reschedule).
pub(super) async fn each_prefix_page<O, Fut>(
    state: &Queue,
    topic: &str,
    prefix: &str,
    mut act: impl FnMut(Vec<MessageId>) -> Fut,
    name: impl Fn(&O) -> &'static str,
) -> Result<PrefixCounts, QueueError>
where
    Fut: std::future::Future<Output = Result<Vec<O>, QueueError>>,
{
    let mut counts = std::collections::BTreeMap::new();
    let mut matched = 0;
    let mut after = 0;
    loop {
        let (rows, next) = state
            .journal
            .live_by_biz_key(crate::actors::journal::LiveByBizKey::Prefix {
                topic: topic.to_string(),
                prefix: prefix.to_string(),
                status: None,
                after,
                limit: PREFIX_PAGE,
            })
            .await?;
        let ids: Vec<MessageId> = rows.iter().map(|r| MessageId(r.id)).collect();
        matched += ids.len();
        for o in act(ids).await? {
            *counts.entry(name(&o)).or_insert(0) += 1;
        }
        match next {
            Some(n) => after = n,
            None => return Ok((matched, counts)),
        }
    }
}

impl Queue {
    /// Pauses `topic` on every node (see [`RedisSchedule::pause`]): when
    /// it was paused, and whether this call paused it.
    pub async fn pause(&self, topic: &str) -> Result<(i64, bool), QueueError> {
        let (at, changed) = self.redis.topics().pause(topic).await?;
        if changed {
            tracing::info!(topic, "topic paused");
        }
        Ok((at, changed))
    }

    /// Resumes `topic` on every node; this node's waiting polls look at
    /// once (other nodes' hear it from Redis). Whether it was paused.
    pub async fn resume(&self, topic: &str) -> Result<bool, QueueError> {
        let changed = self.redis.topics().resume(topic).await?;
        self.waiters.notify(topic);
        if changed {
            tracing::info!(topic, "topic resumed");
        }
        Ok(changed)
    }
}

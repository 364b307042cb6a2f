//! The queue's rules: accepting pushes, handing messages out, acks, nacks
//! (what a failed delivery leads to), recurring occurrences, cancels, dead
//! letters. Every entry point (the HTTP API, the command line, forwarders)
//! calls this layer; the HTTP handlers in [`crate::api`] only parse requests
//! and render outcomes.
//!
//! Outcomes a caller must tell apart (an ack of a message not handed out,
//! a cancel of a consumed message) are values, enums per operation;
//! [`QueueError`] is for what stopped an operation (an outage, a refusal).

pub mod cancel;
pub mod coalesce;
pub mod consume;
pub mod dead;
pub mod produce;
pub mod read;
pub mod reschedule;

use std::sync::Arc;

use actix::Addr;

use crate::actors::journal::Journal;
use crate::actors::router::RouterActor;
use crate::error::{JournalError, RedisError};
use crate::journal::StatusChange;
use crate::message::{IdGenerator, MessageId, NoWorkerId};
use crate::notify::Topics;
use crate::redis::schedule::{End, RedisSchedule};

/// The handles the rules work with; cheap to clone.
#[derive(Clone)]
pub struct Queue {
    // The stores are the queue's own: handlers read through its methods
    // (`read.rs`) as they act through its rules.
    journal: Journal,
    router: Addr<RouterActor>,
    redis: RedisSchedule,
    pub waiters: Topics,
    ids: Arc<IdGenerator>,
    /// Single acks (`POST /ack/{id}`), applied together with their
    /// neighbours.
    acks: Option<coalesce::Coalesce<consume::Ack, consume::AckOutcome>>,
    /// Single cancels (`GET /delete`), likewise.
    cancels: Option<coalesce::Coalesce<MessageId, cancel::CancelOutcome>>,
}

/// Most acks or cancels applied in one batch.
const COALESCE: usize = 500;

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
fn kept_end(redis: &RedisSchedule, id: MessageId, end: End) -> StatusChange {
    let keys = redis.keys();
    let shard = keys.unjournaled(keys.shard_of(id));
    StatusChange::kept_end(id, end.status, end.attempts, end.at, shard.into())
}

/// The live message holding `(topic, bizKey)`: its id, or none.
async fn live_holder(state: &Queue, topic: &str, key: &str) -> Result<Vec<MessageId>, QueueError> {
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
async fn each_prefix_page<O, Fut>(
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
    /// The queue of a serving node: single acks and cancels are batched
    /// with their neighbours (must run inside the actix system).
    pub fn new(
        journal: Journal,
        router: Addr<RouterActor>,
        redis: RedisSchedule,
        waiters: Topics,
        ids: Arc<IdGenerator>,
    ) -> Queue {
        let mut q = Queue {
            journal,
            router,
            redis,
            waiters,
            ids,
            acks: None,
            cancels: None,
        };
        let (a, c) = (q.clone(), q.clone());
        q.acks = Some(coalesce::Coalesce::start(COALESCE, move |acks| {
            consume::ack_batch(a.clone(), acks)
        }));
        q.cancels = Some(coalesce::Coalesce::start(COALESCE, move |ids| {
            cancel::cancel_batch(c.clone(), ids)
        }));
        q
    }

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

    /// Acks one delivery, batched with the acks queued beside it; answered
    /// once Redis applied it (its end is kept in Redis until the journal
    /// has it, see [`crate::redis::keys`]'s `unjournaled`). An ack of an id
    /// Redis does not hold waits for the journal's word (a couple of
    /// seconds at most), on its own: the acks queued behind it do not.
    pub async fn ack_one(&self, ack: consume::Ack) -> Result<consume::AckOutcome, QueueError> {
        match &self.acks {
            Some(c) => c.call(ack).await,
            None => Ok(
                consume::ack_deliveries(self, &[ack], consume::AckJournal::Queued)
                    .await?
                    .remove(0),
            ),
        }
    }

    /// Cancels one message, batched with the cancels queued beside it (one
    /// Redis round trip and one journal commit for the batch); answered
    /// once the journal committed it, so its bizKey is free at once. The
    /// next batch goes to Redis while this one waits for its commit.
    pub async fn cancel_one(&self, id: MessageId) -> Result<cancel::CancelOutcome, QueueError> {
        match &self.cancels {
            Some(c) => c.call(id).await,
            None => Ok(cancel::cancel_many(self, &[id]).await?.remove(0)),
        }
    }
}

/// What stopped an operation of the queue.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// Redis failed, or holds a record delayq cannot read.
    #[error(transparent)]
    Redis(#[from] RedisError),
    /// The journal database failed or refused the write.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// This node has no Snowflake worker id leased: it takes no pushes.
    #[error("{0}")]
    NoWorkerId(#[from] NoWorkerId),
    /// Messages are durable in the journal but Redis did not take them;
    /// the next restore (or the reconciler) schedules them.
    #[error("{0}")]
    NotScheduled(String),
    /// The journal holds no such message.
    #[error("no message {0}")]
    NotFound(MessageId),
    /// A repair was refused: these nodes' journals are behind Redis (ends
    /// applied in Redis and not yet journaled look live in the journal).
    /// This node has just resumed from a stall: a poll claims nothing for
    /// a consumer that is likely gone (see [`crate::stall`]).
    #[error("{0}")]
    Stalled(String),
    #[error("the journal of node(s) {} is behind Redis: repairing now could bring back messages acked or cancelled meanwhile; try again once they caught up", .0.join(", "))]
    JournalBehind(Vec<String>),
}

//! Cancelling: one message, many by id, by bizKey, or by bizKey prefix.
//! Every id gets a definite outcome.

use futures::stream::{self, StreamExt};

use super::coalesce::Staged;
use super::error::QueueError;
pub use super::outcome::CancelOutcome;
use super::state::{each_prefix_page, kept_end, live_holder, PrefixCounts, Queue};
use crate::error::{JournalError, RedisError};
use crate::journal::StatusChange;
use crate::message::{now_ms, MessageId, Status};
use crate::redis::schedule::{End, RedisCancel};

/// Journal lookups in flight at once within one request (the ids Redis
/// does not hold).
const CONCURRENCY: usize = 32;

impl Queue {
    /// Cancels one message, batched with the cancels queued beside it (one
    /// Redis round trip and one journal commit for the batch); answered
    /// once the journal committed it, so its bizKey is free at once. The
    /// next batch goes to Redis while this one waits for its commit.
    pub async fn cancel_one(&self, id: MessageId) -> Result<CancelOutcome, QueueError> {
        match &self.cancels {
            Some(c) => c.call(id).await,
            None => Ok(cancel_many(self, &[id]).await?.remove(0)),
        }
    }
}

/// What a cancel leaves for the journal.
#[derive(Debug, Clone, Copy)]
enum Journaled {
    Nothing,
    /// Cancelled now, after this many deliveries.
    Deleted(i32),
    /// Ended before (acked, cancelled, dead), the end kept in Redis for
    /// the journal: recorded with this cancel (one sent again because the
    /// first one's end never reached the journal).
    Kept(End),
}

/// Where cancelling one message stands after the Redis step: its outcome
/// and what the journal is to record.
type Settled = (CancelOutcome, Journaled);

/// The outcome of what Redis said of a cancel; `None` when Redis does not
/// hold the message and only the journal can tell.
fn from_redis(r: RedisCancel) -> Option<Settled> {
    match r {
        RedisCancel::InFlight => Some((CancelOutcome::InFlight, Journaled::Nothing)),
        // Ended in Redis, the journal not told yet: the end says how.
        RedisCancel::Finished(end) => Some((ended(end.status), Journaled::Kept(end))),
        // A recurring message in flight: that delivery is its last.
        RedisCancel::Deleted { attempts } | RedisCancel::Stopped { attempts } => {
            Some((CancelOutcome::Deleted, Journaled::Deleted(attempts)))
        }
        RedisCancel::Absent => None,
    }
}

/// Cancels a message Redis does not hold: asks the journal how its life
/// went, and cancels a live one in Redis again with a tombstone.
async fn cancel_absent(state: &Queue, id: MessageId) -> Result<Settled, QueueError> {
    let redis = &state.redis;
    Ok(match state.journal.find_waiting(id).await? {
        None => (CancelOutcome::NotFound, Journaled::Nothing),
        Some((row, _)) => match row.status() {
            Status::Consumed => (CancelOutcome::AlreadyConsumed, Journaled::Nothing),
            Status::Deleted => (CancelOutcome::Deleted, Journaled::Nothing),
            Status::Dead => (CancelOutcome::Dead, Journaled::Nothing),
            Status::Consuming => (CancelOutcome::InFlight, Journaled::Nothing),
            // The journal stores none: its codes read as the seven above.
            Status::Unknown => (CancelOutcome::NotFound, Journaled::Nothing),
            // Live, yet not in Redis: its push has not reached Redis yet
            // (or met an outage), or Redis lost it. Cancel again with a
            // tombstone, so neither that push nor a restore brings it back.
            Status::WaitPut | Status::Delaying | Status::Ready => {
                match from_redis(redis.delivery().cancel(id, true).await?) {
                    Some(settled) => settled,
                    // Cancelled now, its tombstone set.
                    None => (CancelOutcome::Deleted, Journaled::Deleted(row.attempts)),
                }
            }
        },
    })
}

/// The outcome of cancelling a message that already ended as `status`.
fn ended(status: Status) -> CancelOutcome {
    match status {
        Status::Consumed => CancelOutcome::AlreadyConsumed,
        Status::Dead => CancelOutcome::Dead,
        _ => CancelOutcome::Deleted,
    }
}

/// The first step of cancelling `ids`: one script call per shard, in one
/// pipeline; what Redis said of each (on a Redis Cluster, the ids of a
/// master that failed get its error, the others their outcome).
async fn cancel_in_redis(state: &Queue, ids: &[MessageId]) -> Vec<Result<RedisCancel, QueueError>> {
    let struck: Vec<bool> = ids
        .iter()
        .map(|id| crate::faults::strikes("plant_answer", id.0, 2))
        .collect();
    let round: Vec<MessageId> = ids
        .iter()
        .zip(&struck)
        .filter(|(_, &s)| !s)
        .map(|(&id, _)| id)
        .collect();
    let (each, failed) = if round.is_empty() {
        (Vec::new(), None)
    } else {
        match state.redis.delivery().cancel_many(&round, false).await {
            Ok(replies) => (replies.each, replies.failed),
            Err(e) => (Vec::new(), Some(e)),
        }
    };
    if let Some(e) = &failed {
        tracing::warn!(error = %e, "cancel not applied in Redis; answered with an error");
    }
    let mut each = each.into_iter();
    struck
        .into_iter()
        .map(|struck| {
            if struck {
                return Ok(RedisCancel::Deleted { attempts: 0 });
            }
            each.next().flatten().ok_or_else(|| match &failed {
                // Each id its own copy of the error, of the same kind.
                Some(RedisError::BadRecord(m)) => RedisError::BadRecord(m.clone()).into(),
                Some(e) => QueueError::NotScheduled(e.to_string()),
                None => QueueError::NotScheduled("no answer".into()),
            })
        })
        .collect()
}

/// The second step, the journal's: the ones Redis does not hold are
/// looked up, and every one cancelled now is committed, with any end Redis
/// kept for the journal (one commit for all). An outcome or error per id;
/// the outer error is the commit's, for every id (a cancel is answered
/// once the journal has it, and an answer without a change waits its turn
/// behind the changes queued before it).
async fn settle(
    state: &Queue,
    ids: &[MessageId],
    in_redis: Vec<Result<RedisCancel, QueueError>>,
) -> Result<Vec<Result<CancelOutcome, QueueError>>, QueueError> {
    let results: Vec<Result<Settled, QueueError>> = stream::iter(ids.iter().zip(in_redis))
        .map(|(&id, r)| async move {
            match from_redis(r?) {
                Some(settled) => Ok(settled),
                None => cancel_absent(state, id).await,
            }
        })
        .buffered(CONCURRENCY)
        .collect()
        .await;
    let keys = state.redis.keys();
    let now = now_ms();
    let mut outcomes = Vec::with_capacity(ids.len());
    let mut changes = Vec::new();
    let mut cancelled = 0;
    for (&id, r) in ids.iter().zip(results) {
        outcomes.push(r.map(|(outcome, journaled)| {
            match journaled {
                Journaled::Nothing => {}
                Journaled::Deleted(attempts) => {
                    cancelled += 1;
                    changes.push(StatusChange::deleted(
                        id,
                        attempts,
                        now,
                        keys.delay(keys.shard_of(id)).into(),
                    ));
                }
                Journaled::Kept(end) => changes.push(kept_end(&state.redis, id, end)),
            }
            outcome
        }));
    }
    crate::metrics::metrics().cancelled.inc_by(cancelled);
    // What was cancelled in Redis reaches the journal even when another id
    // met an outage; cancelling again finds each one finished.
    state.journal.record_durable(changes).await?;
    Ok(outcomes)
}

/// Cancels messages, a few at a time, and answers once the journal
/// committed every one cancelled now (one commit for all of them).
pub async fn cancel_many(
    state: &Queue,
    ids: &[MessageId],
) -> Result<Vec<CancelOutcome>, QueueError> {
    // Until what Redis applied is queued for the journal (a fence's flush
    // waits for it).
    let _hold = state.journal.hold();
    let in_redis = cancel_in_redis(state, ids).await;
    settle(state, ids, in_redis).await?.into_iter().collect()
}

/// A batch of single cancels (`GET /delete`), in two steps (see
/// [`super::coalesce`]): the Redis step with the batch, then the journal's
/// (lookups and the commit) on its own, so the next batch's cancels do not
/// wait for this one's commit.
pub(super) async fn cancel_batch(
    state: Queue,
    ids: Vec<MessageId>,
) -> Result<Staged<CancelOutcome>, QueueError> {
    let hold = state.journal.hold();
    let in_redis = cancel_in_redis(&state, &ids).await;
    let later = async move {
        let _hold = hold;
        match settle(&state, &ids, in_redis).await {
            Ok(each) => each,
            // The commit failed: every cancel of the batch is told so.
            Err(e) => ids.iter().map(|_| Err(told_again(&e))).collect(),
        }
    };
    Ok(Staged {
        now: Vec::new(),
        later: Some(Box::pin(later)),
    })
}

/// The error of a batch's commit, for each of its callers.
fn told_again(e: &QueueError) -> QueueError {
    QueueError::Journal(match e {
        QueueError::Journal(JournalError::Refused(why)) => JournalError::Refused(why.clone()),
        QueueError::Journal(JournalError::Unavailable(why)) => {
            JournalError::Unavailable(why.clone())
        }
        other => JournalError::Unavailable(other.to_string()),
    })
}

/// The live message holding `(topic, bizKey)`, cancelled: its id and
/// outcome, or nothing when no live message holds the key.
pub async fn cancel_biz_key(
    state: &Queue,
    topic: &str,
    key: &str,
) -> Result<Vec<(MessageId, CancelOutcome)>, QueueError> {
    let ids = live_holder(state, topic, key).await?;
    let outcomes = cancel_many(state, &ids).await?;
    Ok(ids.into_iter().zip(outcomes).collect())
}

/// Every live message of `topic` whose bizKey starts with `prefix`
/// (compared exactly), cancelled a page at a time: how many matched, and
/// the outcomes, counted.
pub async fn cancel_biz_key_prefix(
    state: &Queue,
    topic: &str,
    prefix: &str,
) -> Result<PrefixCounts, QueueError> {
    each_prefix_page(
        state,
        topic,
        prefix,
        |ids| async move { cancel_many(state, &ids).await },
        |o: &CancelOutcome| o.as_str(),
    )
    .await
}

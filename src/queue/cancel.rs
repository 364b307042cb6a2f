//! Cancelling: one message, many by id, by bizKey, or by bizKey prefix.
//! Every id gets a definite outcome.

use futures::stream::{self, StreamExt};

use super::{Queue, QueueError};
use crate::journal::StatusChange;
use crate::message::{now_ms, MessageId, Status};
use crate::redis::schedule::RedisCancel;

/// Cancels in flight at once within one request.
const CONCURRENCY: usize = 32;

/// What cancelling one message did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// Cancelled now, or before. A recurring message handed out when its
    /// series is cancelled counts too: that delivery is its last.
    Deleted,
    /// Handed to a consumer: left alone (it ends with the consumer's ack,
    /// or comes back after its ttl and can be cancelled then).
    InFlight,
    AlreadyConsumed,
    Dead,
    NotFound,
}

impl CancelOutcome {
    /// The name on the wire (`deleted`, `in_flight`, ...).
    pub fn as_str(self) -> &'static str {
        delayq_proto::CancelOutcome::from(self).as_str()
    }
}

impl From<CancelOutcome> for delayq_proto::CancelOutcome {
    fn from(o: CancelOutcome) -> Self {
        match o {
            CancelOutcome::Deleted => Self::Deleted,
            CancelOutcome::InFlight => Self::InFlight,
            CancelOutcome::AlreadyConsumed => Self::AlreadyConsumed,
            CancelOutcome::Dead => Self::Dead,
            CancelOutcome::NotFound => Self::NotFound,
        }
    }
}

/// Cancels one message in Redis and, where Redis does not hold it, asks
/// the journal how its life went. Returns the outcome and, when it was
/// cancelled now, its delivery count for the journal.
async fn cancel_in_redis(
    state: &Queue,
    id: MessageId,
) -> Result<(CancelOutcome, Option<i32>), QueueError> {
    let redis = &state.redis;
    Ok(match redis.cancel(id, false).await? {
        RedisCancel::InFlight => (CancelOutcome::InFlight, None),
        // Ended in Redis, the journal not told yet: the end says how.
        RedisCancel::Finished(end) => (ended(end.status), None),
        // A recurring message in flight: that delivery is its last.
        RedisCancel::Deleted { attempts } | RedisCancel::Stopped { attempts } => {
            (CancelOutcome::Deleted, Some(attempts))
        }
        // Redis does not hold it: the journal knows how its life ended.
        RedisCancel::Absent => match state.journal.find_waiting(id).await? {
            None => (CancelOutcome::NotFound, None),
            Some((row, _)) => match row.status() {
                Status::Consumed => (CancelOutcome::AlreadyConsumed, None),
                Status::Deleted => (CancelOutcome::Deleted, None),
                Status::Dead => (CancelOutcome::Dead, None),
                Status::Consuming => (CancelOutcome::InFlight, None),
                // Live, yet not in Redis: its push has not reached Redis yet
                // (or met an outage), or Redis lost it. Cancel again with a
                // tombstone, so neither that push nor a restore brings it back.
                Status::WaitPut | Status::Delaying | Status::Ready => {
                    match redis.cancel(id, true).await? {
                        RedisCancel::InFlight => (CancelOutcome::InFlight, None),
                        RedisCancel::Deleted { attempts } | RedisCancel::Stopped { attempts } => {
                            (CancelOutcome::Deleted, Some(attempts))
                        }
                        RedisCancel::Finished(end) => (ended(end.status), None),
                        RedisCancel::Absent => (CancelOutcome::Deleted, Some(row.attempts)),
                    }
                }
            },
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

/// Cancels messages, a few at a time, and answers once the journal
/// committed every one cancelled now (one commit for all of them).
pub async fn cancel_many(
    state: &Queue,
    ids: &[MessageId],
) -> Result<Vec<CancelOutcome>, QueueError> {
    let results: Vec<Result<(CancelOutcome, Option<i32>), QueueError>> = stream::iter(ids)
        .map(|&id| cancel_in_redis(state, id))
        .buffered(CONCURRENCY)
        .collect()
        .await;
    let keys = state.redis.keys();
    let now = now_ms();
    let mut outcomes = Vec::with_capacity(ids.len());
    let mut changes = Vec::new();
    let mut first_error = None;
    for (&id, r) in ids.iter().zip(results) {
        match r {
            Ok((outcome, attempts)) => {
                if let Some(attempts) = attempts {
                    changes.push(StatusChange::deleted(
                        id,
                        attempts,
                        now,
                        keys.delay(keys.shard_of(id)).into(),
                    ));
                }
                outcomes.push(outcome);
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    crate::metrics::metrics()
        .cancelled
        .inc_by(changes.len() as u64);
    // What was cancelled in Redis reaches the journal even when another id
    // met an outage; cancelling again finds each one finished.
    state.journal.record_durable(changes).await?;
    match first_error {
        Some(e) => Err(e),
        None => Ok(outcomes),
    }
}

/// The live message holding `(topic, bizKey)`, cancelled: its id and
/// outcome, or nothing when no live message holds the key.
pub async fn cancel_biz_key(
    state: &Queue,
    topic: &str,
    key: &str,
) -> Result<Vec<(MessageId, CancelOutcome)>, QueueError> {
    let ids = super::live_holder(state, topic, key).await?;
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
) -> Result<super::PrefixCounts, QueueError> {
    super::each_prefix_page(
        state,
        topic,
        prefix,
        |ids| async move { cancel_many(state, &ids).await },
        |o: &CancelOutcome| o.as_str(),
    )
    .await
}

//! Rescheduling: a message not handed out yet moves to a new due time
//! and/or priority and keeps its id. The journal moves first (durable when
//! answered, and a restore never brings back the old time), then Redis,
//! whose answer decides the outcome: a message handed out meanwhile is
//! `in_flight` and keeps its delivery (its journal row's due time moved,
//! which only a failed delivery or a restore reads, and both set it anew);
//! one ended meanwhile (acked, cancelled, dead: Redis's tombstone) is
//! answered as it ended, never `rescheduled`.
//! A message waiting in the journal beyond the Redis horizon moves there
//! alone; the horizon loader schedules it when its new time comes near.

use std::sync::Arc;

use futures::stream::{self, StreamExt};

use delayq_proto::RescheduleOutcome;

use super::error::QueueError;
use super::state::{each_prefix_page, live_holder, PrefixCounts, Queue};
use crate::error::RedisError;
use crate::journal::store::JournalMove;
use crate::journal::StatusChange;
use crate::message::{now_ms, MessageId, Status};
use crate::redis::record;
use crate::redis::schedule::{RecordChange, RedisMove};
use crate::repeat::Occurrence;

/// Moves per journal transaction.
const CHUNK: usize = 1_000;
/// Redis calls in flight at once within one request.
const CONCURRENCY: usize = 32;

/// What rescheduling one message did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveOutcome {
    /// Moved: now due then (epoch ms), with that priority.
    Rescheduled {
        due: i64,
        priority: i32,
    },
    /// Handed to a consumer: left alone.
    InFlight,
    AlreadyConsumed,
    Deleted,
    Dead,
    NotFound,
}

impl MoveOutcome {
    /// What the API answers for it.
    pub fn outcome(self) -> RescheduleOutcome {
        match self {
            MoveOutcome::Rescheduled { .. } => RescheduleOutcome::Rescheduled,
            MoveOutcome::InFlight => RescheduleOutcome::InFlight,
            MoveOutcome::AlreadyConsumed => RescheduleOutcome::AlreadyConsumed,
            MoveOutcome::Deleted => RescheduleOutcome::Deleted,
            MoveOutcome::Dead => RescheduleOutcome::Dead,
            MoveOutcome::NotFound => RescheduleOutcome::NotFound,
        }
    }

    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        self.outcome().as_str()
    }

    fn ended(status: Status) -> MoveOutcome {
        match status {
            Status::Deleted => MoveOutcome::Deleted,
            Status::Dead => MoveOutcome::Dead,
            _ => MoveOutcome::AlreadyConsumed,
        }
    }
}

/// What a reschedule asks: a new due time, a new priority, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewSchedule {
    pub due: Option<i64>,
    pub priority: Option<u8>,
    /// A recurring message's series moves as a whole: the pending
    /// occurrence's own due time (what the next one follows from) moves
    /// with it. Only with `due`.
    pub series: bool,
}

/// Reads of a record before a series move gives up on one that keeps
/// changing under it.
const SERIES_TRIES: usize = 8;

/// Moves each of `ids`; an outcome per id, in order. Each move leaves a
/// status change for the journal as soon as Redis made it (its flow row,
/// the status it waits in, and its due time under the journal's ordering
/// of changes, so an older change still on its way cannot put the old
/// time back): Delaying or Ready as Redis holds it, WaitPut for one
/// waiting in the journal alone.
pub async fn reschedule_many(
    state: &Queue,
    ids: &[MessageId],
    to: NewSchedule,
) -> Result<Vec<MoveOutcome>, QueueError> {
    let mut out = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(CHUNK) {
        let journal = state
            .journal
            .move_messages(chunk.to_vec(), to.due, to.priority.map(i32::from))
            .await?;
        let moved: Vec<Result<MoveOutcome, QueueError>> = stream::iter(chunk.iter().zip(journal))
            .map(|(&id, held)| move_one(state, id, held, to))
            .buffered(CONCURRENCY)
            .collect()
            .await;
        for r in moved {
            out.push(r?);
        }
    }
    Ok(out)
}

/// Moves one message in Redis, the journal having moved it (`held`).
async fn move_one(
    state: &Queue,
    id: MessageId,
    held: JournalMove,
    to: NewSchedule,
) -> Result<MoveOutcome, QueueError> {
    let JournalMove::Moved {
        status,
        due,
        priority,
        occurrence,
    } = held
    else {
        return Ok(match held {
            JournalMove::Ended(status) => MoveOutcome::ended(status),
            _ => MoveOutcome::NotFound,
        });
    };
    let keys = state.redis.keys();
    let shard: Arc<str> = keys.delay(keys.shard_of(id)).into();
    let journal = (due, priority.clamp(0, 255) as u8);
    let mut tries = 0;
    // The occurrence whose series moved in Redis: its number.
    let mut series_moved;
    let moved = loop {
        let series = match (to.series, to.due) {
            (true, Some(due)) => series_records(state, id, due).await?,
            _ => None,
        };
        series_moved = series.as_ref().map(|s| s.0);
        let series = series.as_ref().map(|(_, a, b)| (a.as_str(), b.as_str()));
        match state
            .redis
            .reschedule(
                id,
                to.due,
                to.priority,
                journal,
                RecordChange {
                    swap: series,
                    ..RecordChange::default()
                },
            )
            .await?
        {
            RedisMove::Changed if tries + 1 < SERIES_TRIES => tries += 1,
            RedisMove::Changed => {
                return Err(QueueError::Redis(RedisError::BadRecord(format!(
                    "the record of {id} changed {SERIES_TRIES} times while its series was moved"
                ))))
            }
            // Ended in Redis since the journal's move read it live (acked,
            // cancelled or dead, and journaled since): the journal says
            // how. Live there, it is a dead message brought back whose
            // tombstone is about to go: Redis is asked again.
            RedisMove::Ended => match state.journal.states_of(vec![id.0]).await?.first() {
                None => return Ok(MoveOutcome::NotFound),
                Some(row) if row.status().is_terminal() => {
                    return Ok(MoveOutcome::ended(row.status()))
                }
                Some(_) if tries + 1 < SERIES_TRIES => tries += 1,
                // Still guarded: whatever schedules it next (a restore once
                // the tombstone is gone) reads the journal's new time.
                Some(_) => break RedisMove::Absent,
            },
            other => break other,
        }
    };
    let (outcome, change) = match moved {
        RedisMove::Moved {
            due,
            priority,
            ready,
            at,
        } => {
            let mut change = StatusChange::scheduled(id, at, shard);
            if ready {
                change.status = Status::Ready;
            }
            change.due = Some(due);
            change.series = series_moved.map(|number| Occurrence {
                number,
                due_time: due,
            });
            let moved = MoveOutcome::Rescheduled {
                due,
                priority: priority.into(),
            };
            (moved, Some(change))
        }
        RedisMove::InFlight => (MoveOutcome::InFlight, None),
        RedisMove::Changed | RedisMove::Ended => unreachable!("answered above"),
        RedisMove::Finished(end) => (MoveOutcome::ended(end.status), None),
        // Waiting in the journal beyond the horizon, on its way to Redis
        // (the move's score waits for it there), or lost from Redis (the
        // reconciler restores it at the journal's new time): the journal
        // moved its row while it was live (`JournalMove::Moved`, the row
        // held from that read to the update), and Redis has not ended it
        // since (no tombstone), so it is rescheduled.
        // A series waiting in the journal alone moves there.
        RedisMove::Absent => {
            let change = (status == Status::WaitPut).then(|| {
                let mut change = StatusChange::waiting(id, now_ms(), shard);
                change.due = Some(due);
                if to.series {
                    change.series = occurrence.map(|number| Occurrence {
                        number,
                        due_time: due,
                    });
                }
                change
            });
            (MoveOutcome::Rescheduled { due, priority }, change)
        }
    };
    state.journal.record(change.into_iter().collect());
    Ok(outcome)
}

/// For a recurring message Redis holds: its occurrence's number, its
/// record as read, and the same with the occurrence's own due time at
/// `due`, so the series goes on from there (the score is the script's to
/// set). None for a message Redis does not hold, that is not recurring, or
/// whose series was cancelled (`,x`: handed out, its last delivery).
async fn series_records(
    state: &Queue,
    id: MessageId,
    due: i64,
) -> Result<Option<(i32, String, String)>, QueueError> {
    let Some(read) = state.redis.record_of(id).await? else {
        return Ok(None);
    };
    if read.split('|').nth(4).is_some_and(|f| f.ends_with(",x")) {
        return Ok(None);
    }
    let (attempts, mut message) = record::decode(id, &read).map_err(RedisError::BadRecord)?;
    let Some(occurrence) = message.occurrence.as_mut() else {
        return Ok(None);
    };
    occurrence.due_time = due;
    let number = occurrence.number;
    message.due_time = due;
    let moved = record::encode(&message, attempts);
    Ok(Some((number, read, moved)))
}

/// The live message holding `(topic, bizKey)`, moved: its id and outcome,
/// or nothing when no live message holds the key.
pub async fn reschedule_biz_key(
    state: &Queue,
    topic: &str,
    key: &str,
    to: NewSchedule,
) -> Result<Vec<(MessageId, MoveOutcome)>, QueueError> {
    let ids = live_holder(state, topic, key).await?;
    let outcomes = reschedule_many(state, &ids, to).await?;
    Ok(ids.into_iter().zip(outcomes).collect())
}

/// Every live message of `topic` whose bizKey starts with `prefix`,
/// moved: how many matched, and how many came to each outcome.
pub async fn reschedule_biz_key_prefix(
    state: &Queue,
    topic: &str,
    prefix: &str,
    to: NewSchedule,
) -> Result<PrefixCounts, QueueError> {
    each_prefix_page(
        state,
        topic,
        prefix,
        |ids| async move { reschedule_many(state, &ids, to).await },
        |o: &MoveOutcome| o.as_str(),
    )
    .await
}

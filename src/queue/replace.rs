//! A push's `onDuplicate`: what it does to the live message holding its
//! `(topic, bizKey)`. `replace` (debounce) gives that message the push's
//! body, due time and priority; `extend` moves only its due time, and only
//! later. The message keeps its id.
//!
//! The journal changes first (durable when answered, and a restore
//! schedules the new state), then Redis is made to hold the journal's row:
//! one script call swaps the record only if it is still the one read (the
//! body lives in the record) and moves its score. Pushes replacing one
//! message at once commit in one order and may reach Redis in another, so
//! each reads the row again after its Redis step and goes on until Redis
//! holds what the journal holds: the last commit is what is delivered.
//! Redis's answer decides the outcome:
//! - a message handed out meanwhile is left alone (`in_flight`), and a
//!   replaced row is put back in the journal, so the journal says what
//!   was delivered;
//! - one that ended meanwhile (acked, cancelled, dead) no longer holds the
//!   key: the push is tried again as a new message;
//! - one Redis does not hold yet (its own push's schedule on its way) is
//!   scheduled here with the journal's state, and the next pass swaps
//!   whichever record landed first; one due beyond the horizon waits in
//!   the journal, which the horizon loader reads.

use std::sync::Arc;

use delayq_proto::DuplicateOutcome;

use super::error::QueueError;
use super::state::Queue;
use crate::actors::router::Schedule;
use crate::error::RedisError;
use crate::journal::models::MessageRow;
use crate::journal::store::{JournalMove, Replacement, RowBefore};
use crate::journal::StatusChange;
use crate::message::{now_ms, Message, MessageId, OnDuplicate, Status};
use crate::redis::record;
use crate::redis::schedule::RedisMove;

/// Reads of a record before a replacement gives up on one that keeps
/// changing under it.
const TRIES: usize = 32;

/// What a push with `onDuplicate` did to the live message holding its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replaced {
    /// Changed (`replaced` or `extended`): now due then, with that
    /// priority.
    Changed { outcome: DuplicateOutcome, due: i64 },
    /// `extend` to a time not later than the message's: left as it was.
    NotLater { due: i64 },
    /// Handed to a consumer: left alone.
    InFlight,
    /// It ended before the change reached it: the key is free.
    Ended,
}

impl Replaced {
    /// What the push answers, with the due time when there is one.
    pub fn answer(self) -> (DuplicateOutcome, Option<i64>) {
        match self {
            Replaced::Changed { outcome, due } => (outcome, Some(due)),
            Replaced::NotLater { due } => (DuplicateOutcome::NotLater, Some(due)),
            Replaced::InFlight => (DuplicateOutcome::InFlight, None),
            Replaced::Ended => (DuplicateOutcome::Unknown, None),
        }
    }
}

/// What Redis is to hold of a replaced message.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    body: String,
    due: i64,
    priority: u8,
}

impl Queue {
    /// Applies `m`'s `onDuplicate` (`replace` or `extend`) to `holder`, the
    /// live message of its `(topic, bizKey)` as the journal's insert found
    /// it.
    pub(super) async fn replace_holder(
        &self,
        holder: &MessageRow,
        m: &Message,
        mode: OnDuplicate,
    ) -> Result<Replaced, QueueError> {
        let id = MessageId(holder.id);
        let (replacement, outcome) = match mode {
            OnDuplicate::Replace => (
                Replacement {
                    body: Some(m.body.clone()),
                    due: m.due_time,
                    priority: Some(i32::from(m.priority)),
                    only_later: false,
                },
                DuplicateOutcome::Replaced,
            ),
            _ => (
                Replacement {
                    body: None,
                    due: m.due_time,
                    priority: None,
                    only_later: true,
                },
                DuplicateOutcome::Extended,
            ),
        };
        let (held, before) = self.journal.replace_message(id, replacement).await?;
        let (status, due, priority) = match held {
            JournalMove::Moved {
                status,
                due,
                priority,
                ..
            } => (status, due, priority),
            JournalMove::Kept { due, .. } => return Ok(Replaced::NotLater { due }),
            JournalMove::Ended(_) | JournalMove::NotFound => return Ok(Replaced::Ended),
        };
        let priority = priority.clamp(0, 255) as u8;
        let (wrote_due, wrote_priority) = (due, priority);
        let keys = self.redis.keys();
        let shard: Arc<str> = keys.delay(keys.shard_of(id)).into();
        // What Redis is to hold: the journal's row, read after the change.
        // Two pushes replacing one message at once commit in one order and
        // may reach Redis in the other; each reads the row again after its
        // Redis step and goes on until Redis holds what the journal holds,
        // so the last commit is what is delivered.
        let mut target = Target {
            body: m.body.clone(),
            due,
            priority,
        };
        if mode != OnDuplicate::Replace {
            match self.live_row(id).await? {
                Some(t) => target = t,
                None => return Ok(Replaced::Ended),
            }
        }
        let mut tries = 0;
        // Scheduled here, the journal's new state, when Redis did not hold
        // it: the next pass swaps whatever record landed first.
        let mut scheduled = false;
        let moved = loop {
            let read = self.redis.record_of(id).await?;
            let mut swap = None;
            if let Some(read) = read {
                let (attempts, mut message) =
                    record::decode(id, &read).map_err(RedisError::BadRecord)?;
                // Another push's pass made Redis hold the journal's state
                // (said below as `Changed`, which no pass ends with).
                if tries > 0
                    && (message.body == target.body || crate::faults::on("plant_stale_body"))
                    && message.due_time == target.due
                    && message.priority == target.priority
                {
                    break RedisMove::Changed;
                }
                if !crate::faults::on("plant_stale_body") {
                    message.body = target.body.clone();
                }
                message.due_time = target.due;
                message.priority = target.priority;
                swap = Some((read, record::encode(&message, attempts)));
            }
            let again = tries + 1 < TRIES;
            let answer = self
                .redis
                .reschedule(
                    id,
                    Some(target.due),
                    Some(target.priority),
                    (target.due, target.priority),
                    swap.as_ref().map(|(a, b)| (a.as_str(), b.as_str())),
                )
                .await?;
            tries += 1;
            match answer {
                // The record is not the one read (another push swapped it),
                // or one landed after the read found none (its score moved,
                // its body not): again, from the journal's row as it is now.
                RedisMove::Changed if again => match self.live_row(id).await? {
                    Some(now) => target = now,
                    None => break RedisMove::Ended,
                },
                RedisMove::Moved { .. } if swap.is_none() && again => {}
                RedisMove::Moved { .. } if again => match self.live_row(id).await? {
                    Some(now) if now != target => target = now,
                    _ => break answer,
                },
                RedisMove::Absent
                    if !scheduled
                        && status == Status::WaitPut
                        && !self.redis.beyond_horizon(target.due, now_ms())
                        && again =>
                {
                    let mut next = holder.message();
                    next.body = target.body.clone();
                    next.priority = target.priority;
                    next.due_time = target.due;
                    self.router
                        .send(Schedule {
                            batch: vec![(next, holder.attempts)],
                            read_at: now_ms(),
                        })
                        .await
                        .map_err(crate::error::router_unreachable)??;
                    scheduled = true;
                }
                RedisMove::Changed | RedisMove::Moved { .. } | RedisMove::Absent if !again => {
                    return Err(QueueError::Redis(RedisError::BadRecord(format!(
                        "the record of {id} changed {TRIES} times while a push replaced it"
                    ))))
                }
                other => break other,
            }
        };
        let due = target.due;
        Ok(match moved {
            RedisMove::Moved { due, ready, at, .. } => {
                let mut change = StatusChange::scheduled(id, at, shard);
                if ready {
                    change.status = Status::Ready;
                }
                change.due = Some(due);
                self.journal.record(vec![change]);
                Replaced::Changed { outcome, due }
            }
            RedisMove::InFlight => {
                self.put_back(id, m, wrote_due, wrote_priority, before)
                    .await?;
                Replaced::InFlight
            }
            RedisMove::Finished(_) | RedisMove::Ended => Replaced::Ended,
            RedisMove::Changed => Replaced::Changed { outcome, due },
            // Not in Redis and not to be scheduled here: beyond the
            // horizon (the loader schedules the journal's new state), or
            // lost while scheduled (the reconciler restores it from the
            // journal). The journal has the new state.
            RedisMove::Absent => {
                if status == Status::WaitPut {
                    let mut change = StatusChange::waiting(id, now_ms(), shard);
                    change.due = Some(due);
                    self.journal.record(vec![change]);
                }
                Replaced::Changed { outcome, due }
            }
        })
    }

    /// The journal's body, due time and priority of `id` while it is live.
    async fn live_row(&self, id: MessageId) -> Result<Option<Target>, QueueError> {
        Ok(self
            .journal
            .rows_of(vec![id.0])
            .await?
            .pop()
            .filter(|row| !row.status().is_terminal())
            .map(|row| Target {
                body: row.body,
                due: row.due_time,
                priority: row.priority.clamp(0, 255) as u8,
            }))
    }

    /// A replaced row put back in the journal when Redis had handed the
    /// message out: the journal says what was delivered.
    async fn put_back(
        &self,
        id: MessageId,
        m: &Message,
        due: i64,
        priority: u8,
        before: Option<RowBefore>,
    ) -> Result<(), QueueError> {
        let Some(before) = before else {
            return Ok(());
        };
        let wrote = RowBefore {
            body: m.body.clone(),
            due,
            priority: i32::from(priority),
        };
        self.journal.unreplace(id, wrote, before).await?;
        Ok(())
    }
}

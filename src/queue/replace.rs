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
use crate::redis::schedule::{RecordChange, RedisMove};

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

impl Target {
    /// The holder's message as the journal read it, with this body, due
    /// time and priority.
    fn on(&self, holder: &MessageRow) -> Message {
        let mut next = holder.message();
        next.body = self.body.clone();
        next.priority = self.priority;
        next.due_time = self.due;
        next
    }

    fn of(row: &RowBefore) -> Target {
        Target {
            body: row.body.clone(),
            due: row.due,
            priority: row.priority.clamp(0, 255) as u8,
        }
    }
}

impl Queue {
    /// Applies `m`'s `onDuplicate` (`replace` or `extend`) to `holder`, the
    /// live message of its `(topic, bizKey)` as the journal's insert found
    /// it. `m`'s due time is counted on the clock of the holder's shard.
    pub(super) async fn replace_holder(
        &self,
        holder: &MessageRow,
        m: &Message,
        mode: OnDuplicate,
    ) -> Result<Replaced, QueueError> {
        let id = MessageId(holder.id);
        let extend = mode != OnDuplicate::Replace;
        let replacement = Replacement {
            body: (!extend).then(|| m.body.clone()),
            due: m.due_time,
            priority: (!extend).then(|| i32::from(m.priority)),
            only_later: extend,
        };
        let (held, before) = self.journal.replace_message(id, replacement).await?;
        // What this push left in the row: the journal's answer (an extend
        // keeps the body and priority, and the later of the two times).
        let (status, kept, due, priority) = match held {
            JournalMove::Moved {
                status,
                due,
                priority,
                ..
            } => (status, false, due, priority),
            // Not later than its time: nothing changed in the journal, yet
            // Redis is still made to hold the journal's row (an earlier
            // push may have changed the journal and not reached Redis).
            JournalMove::Kept {
                status,
                due,
                priority,
            } => (status, true, due, priority),
            JournalMove::Ended(_) | JournalMove::NotFound => return Ok(Replaced::Ended),
        };
        let Some(before) = before else {
            return Ok(Replaced::Ended);
        };
        let wrote = RowBefore {
            body: if extend {
                before.body.clone()
            } else {
                m.body.clone()
            },
            due,
            priority,
        };
        let keys = self.redis.keys();
        let shard: Arc<str> = keys.delay(keys.shard_of(id)).into();
        // What Redis is to hold: the journal's row. Two pushes replacing
        // one message at once commit in one order and may reach Redis in
        // the other; each reads the row again after its Redis step and
        // goes on until Redis holds what the journal holds, so the last
        // commit is what is delivered.
        let mut target = Target::of(&wrote);
        let mut tries = 0;
        // Scheduled here, the journal's new state, when Redis did not hold
        // it: the next pass swaps whatever record landed first.
        let mut scheduled = false;
        // A pass of this push changed Redis: its change took effect, even
        // if the message is handed out, or ends, before a later pass.
        let mut applied = false;
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
            // Not held: the record it is to have when whatever is
            // scheduling it from an older reading of the journal lands.
            let coming = swap
                .is_none()
                .then(|| record::encode(&target.on(holder), holder.attempts));
            let again = tries + 1 < TRIES;
            let answer = self
                .redis
                .reschedule(
                    id,
                    Some(target.due),
                    Some(target.priority),
                    (target.due, target.priority),
                    RecordChange {
                        swap: swap.as_ref().map(|(a, b)| (a.as_str(), b.as_str())),
                        only_later: extend,
                        absent: coming.as_deref(),
                    },
                )
                .await?;
            tries += 1;
            if matches!(answer, RedisMove::Moved { .. }) && swap.is_some() {
                applied = true;
            }
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
                    self.router
                        .send(Schedule {
                            batch: vec![(target.on(holder), holder.attempts)],
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
        let changed = |due: i64| {
            if kept || (extend && due <= before.due) {
                Replaced::NotLater { due }
            } else if extend {
                Replaced::Changed {
                    outcome: DuplicateOutcome::Extended,
                    due,
                }
            } else {
                Replaced::Changed {
                    outcome: DuplicateOutcome::Replaced,
                    due,
                }
            }
        };
        Ok(match moved {
            RedisMove::Moved { due, ready, at, .. } => {
                let mut change = StatusChange::scheduled(id, at, shard);
                if ready {
                    change.status = Status::Ready;
                }
                change.due = Some(due);
                self.journal.record(vec![change]);
                changed(due)
            }
            RedisMove::InFlight => self.in_flight(id, &wrote, &before, applied).await?,
            // Ended after a pass of this push changed it: the change was
            // delivered (or cancelled with it), and the key is not pushed
            // again.
            RedisMove::Finished(_) | RedisMove::Ended if applied => changed(target.due),
            RedisMove::Finished(_) | RedisMove::Ended => Replaced::Ended,
            // Another push's pass made Redis hold the journal's state.
            RedisMove::Changed => changed(target.due),
            // Not in Redis and not to be scheduled here: beyond the
            // horizon (the loader schedules the journal's new state), or
            // lost while scheduled (the reconciler restores it from the
            // journal). The journal has the new state.
            RedisMove::Absent => {
                if status == Status::WaitPut {
                    let mut change = StatusChange::waiting(id, now_ms(), shard);
                    change.due = Some(target.due);
                    self.journal.record(vec![change]);
                }
                changed(target.due)
            }
        })
    }

    /// Redis had handed the message out: what was handed out says whether
    /// this push's change made it. When it did, the answer is the change's;
    /// when not, the journal's row is put back to what Redis handed out
    /// (if the row is still as this push left it), so the journal says
    /// what was delivered, and the answer is `in_flight`.
    async fn in_flight(
        &self,
        id: MessageId,
        wrote: &RowBefore,
        before: &RowBefore,
        applied: bool,
    ) -> Result<Replaced, QueueError> {
        let handed = match self.redis.record_of(id).await? {
            Some(read) => Some(record::decode(id, &read).map_err(RedisError::BadRecord)?.1),
            None => None,
        };
        let delivered = handed.as_ref().map(|h| RowBefore {
            body: h.body.clone(),
            due: h.due_time,
            priority: i32::from(h.priority),
        });
        if delivered.as_ref() == Some(wrote) && (applied || wrote != before) {
            let outcome = if wrote.body != before.body || wrote.priority != before.priority {
                DuplicateOutcome::Replaced
            } else {
                DuplicateOutcome::Extended
            };
            return Ok(Replaced::Changed {
                outcome,
                due: wrote.due,
            });
        }
        if wrote != before {
            let back = delivered.unwrap_or_else(|| before.clone());
            self.journal.unreplace(id, wrote.clone(), back).await?;
        }
        Ok(Replaced::InFlight)
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
}

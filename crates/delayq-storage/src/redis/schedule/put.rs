//! Putting messages into the schedule: adding them to their shards' delay
//! zsets (fenced by the shard's epoch when a restore or the reconciler
//! writes), requeueing a dead message, and asking which ids Redis holds.

use crate::error::RedisError;
use crate::message::{now_ms, Message, MessageId};
use crate::redis::keys::score;
use crate::redis::record;
use crate::redis::scripts::evalsha;

use super::handle::{fenced, stale_reading_ms, RedisSchedule};
use super::outcomes::Scheduled;

impl RedisSchedule {
    /// Adds messages (with their delivery counts) to their shards' delay
    /// zsets; a message Redis holds already, or that was finished lately, is
    /// left as it is. Returns what happened to each, in input order.
    pub async fn schedule(
        &self,
        messages: &[(Message, i32)],
        read_at: i64,
    ) -> Result<Vec<Scheduled>, RedisError> {
        let replies: Vec<(Vec<usize>, Vec<i64>)> = self
            .per_shard(
                "schedule",
                &self.scripts.schedule,
                messages.iter().map(|(m, _)| m.id),
                |shard, idx| {
                    let items = idx.iter().map(|&i| &messages[i]);
                    (
                        self.schedule_keys(shard),
                        self.schedule_args(shard, 0, read_at, items),
                    )
                },
            )
            .await
            .map_err(stale_reading)?;
        let mut outcome = vec![Scheduled::Present; messages.len()];
        for (idx, flags) in replies {
            for (i, o) in idx.into_iter().zip(outcomes_of(flags)) {
                outcome[i] = o;
            }
        }
        Ok(outcome)
    }

    /// [`RedisSchedule::schedule`] for messages of one shard, by its owner
    /// holding `epoch`: refused (and nothing scheduled) once the shard's
    /// stored epoch is above it, so a deposed owner cannot bring back what
    /// the new one delivered.
    pub async fn schedule_fenced(
        &self,
        shard: u32,
        epoch: i64,
        read_at: i64,
        messages: &[(Message, i32)],
    ) -> Result<Vec<Scheduled>, RedisError> {
        let cmd = evalsha(
            &self.scripts.schedule,
            &self.schedule_keys(shard),
            &self.schedule_args(shard, epoch.max(1), read_at, messages.iter()),
        );
        let flags: Vec<i64> = match self
            .scripts
            .run("schedule", &mut self.con.clone(), &cmd)
            .await
        {
            Err(e) => return Err(stale_reading(fenced(e, shard))),
            Ok(v) => v,
        };
        Ok(outcomes_of(flags))
    }

    fn schedule_keys(&self, shard: u32) -> Vec<String> {
        let k = &self.keys;
        vec![
            k.delay(shard),
            k.messages(shard),
            k.finished(shard),
            k.epoch(shard),
            k.moved(shard),
            k.moved_at(shard),
        ]
    }

    fn schedule_args<'a>(
        &self,
        shard: u32,
        epoch: i64,
        read_at: i64,
        messages: impl Iterator<Item = &'a (Message, i32)>,
    ) -> Vec<String> {
        // The reading's time on the clock of the shard's master (the
        // callers stamp it on the latest master's).
        let read_at = if read_at > 0 {
            read_at - (crate::clock::now_ms() - crate::clock::now_ms_for(shard)).max(0)
        } else {
            0
        };
        let mut args = vec![
            self.keys.wake_channel(shard),
            epoch.to_string(),
            read_at.to_string(),
            stale_reading_ms().to_string(),
        ];
        for (m, attempts) in messages {
            args.push(m.id.to_string());
            args.push((score(m.due_time, m.priority) as i64).to_string());
            args.push(record::encode(m, *attempts));
        }
        args
    }

    /// Schedules messages brought back from `Dead` (attempts from 0): the
    /// tombstones their deaths left go first.
    pub async fn schedule_requeued(
        &self,
        messages: &[Message],
    ) -> Result<Vec<Scheduled>, RedisError> {
        let mut pipe = redis::pipe();
        for m in messages {
            let shard = self.keys.shard_of(m.id);
            pipe.zrem(self.keys.finished(shard), m.id.to_string())
                .ignore()
                .hdel(self.keys.unjournaled(shard), m.id.to_string())
                .ignore();
        }
        let _: () = pipe.query_async(&mut self.con.clone()).await?;
        let batch: Vec<(Message, i32)> = messages.iter().map(|m| (m.clone(), 0)).collect();
        self.schedule(&batch, now_ms()).await
    }

    /// Which of these messages does Redis hold already?
    pub async fn present(&self, ids: &[MessageId]) -> Result<Vec<bool>, RedisError> {
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.hexists(self.keys.messages(self.keys.shard_of(*id)), id.to_string());
        }
        Ok(pipe.query_async(&mut self.con.clone()).await?)
    }
}

/// A refusal of schedule.lua's for a reading older than
/// [`STALE_READING_MS`], read as [`RedisError::StaleReading`].
fn stale_reading(e: RedisError) -> RedisError {
    match e {
        RedisError::Redis(r) if r.code() == Some("STALE_READING") => RedisError::StaleReading {
            age_ms: r
                .detail()
                .and_then(|d| d.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
        },
        e => e,
    }
}

/// schedule.lua's flags (then the time it ran) as outcomes.
fn outcomes_of(mut flags: Vec<i64>) -> Vec<Scheduled> {
    let at = flags.pop().unwrap_or_else(now_ms);
    flags
        .into_iter()
        .map(|flag| match flag {
            1 => Scheduled::Added { at },
            2 => Scheduled::Finished,
            _ => Scheduled::Present,
        })
        .collect()
}

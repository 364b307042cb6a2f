//! Rescheduling: a message not handed out yet takes a new due time and/or
//! priority in place (see reschedule.lua).

use redis::Value;

use super::handle::RedisSchedule;
use super::outcomes::End;
use crate::error::RedisError;
use crate::message::MessageId;
use crate::redis::reply::text;
use crate::redis::scripts::evalsha;

/// What rescheduling did in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisMove {
    /// Moved: now due then, with that priority; `ready`: waiting for a
    /// consumer still (due already), else in the delay zset; `at`: when, by
    /// Redis's clock.
    Moved {
        due: i64,
        priority: u8,
        ready: bool,
        at: i64,
    },
    InFlight,
    /// Not held: this shard ended it lately and the journal has not
    /// recorded the end yet.
    Finished(End),
    /// Not held: this shard ended it lately (its tombstone) and the journal
    /// has recorded the end, which says how.
    Ended,
    /// Not in Redis and not ended there lately (waiting in the journal
    /// beyond the horizon, on its way to Redis, or lost): the move waits
    /// in the shard's moved hash for the call that schedules it.
    Absent,
    /// A series moved as a whole: the record changed since the caller read
    /// it (handed out and acked meanwhile, say); nothing moved.
    Changed,
}

impl RedisSchedule {
    /// Message `id`'s record as its shard holds it now, if it does.
    pub async fn record_of(&self, id: MessageId) -> Result<Option<String>, RedisError> {
        let k = &self.keys;
        let rec: Option<String> = redis::cmd("HGET")
            .arg(k.messages(k.shard_of(id)))
            .arg(id.to_string())
            .query_async(&mut self.con.clone())
            .await?;
        Ok(rec)
    }

    /// Gives message `id` a new due time and/or priority (`None` keeps
    /// it) unless it is handed out.
    /// `journal`: the due time and priority the journal holds now (after
    /// the move), for a message Redis does not hold yet. `record`: what
    /// else changes (see [`RecordChange`]).
    pub async fn reschedule(
        &self,
        id: MessageId,
        due: Option<i64>,
        priority: Option<u8>,
        journal: (i64, u8),
        record: RecordChange<'_>,
    ) -> Result<RedisMove, RedisError> {
        let k = &self.keys;
        let shard = k.shard_of(id);
        let (read, replace) = record.swap.unwrap_or(("", ""));
        let cmd = evalsha(
            &self.scripts.reschedule,
            &[
                k.delay(shard),
                k.messages(shard),
                k.inflight(shard),
                k.unjournaled(shard),
                k.moved(shard),
                k.moved_at(shard),
                k.finished(shard),
            ],
            &[
                id.to_string(),
                k.ready_prefix(shard),
                due.map_or(String::new(), |d| d.to_string()),
                priority.map_or(String::new(), |p| p.to_string()),
                k.wake_channel(shard),
                (crate::redis::keys::score(journal.0, journal.1) as i64).to_string(),
                read.to_string(),
                replace.to_string(),
                if record.only_later { "1" } else { "" }.to_string(),
                record.absent.unwrap_or_default().to_string(),
            ],
        );
        let reply: Vec<Value> = self
            .scripts
            .run("reschedule", &mut self.con.clone(), &cmd)
            .await?;
        let part = |i: usize| reply.get(i).map(text).transpose();
        let bad = || RedisError::BadRecord(format!("reschedule returned {reply:?}"));
        Ok(match part(0)?.as_deref() {
            Some("moved") => RedisMove::Moved {
                due: part(1)?.and_then(|d| d.parse().ok()).ok_or_else(bad)?,
                priority: part(2)?.and_then(|p| p.parse().ok()).ok_or_else(bad)?,
                ready: part(3)?.as_deref() == Some("ready"),
                at: part(4)?.and_then(|t| t.parse().ok()).ok_or_else(bad)?,
            },
            Some("in_flight") => RedisMove::InFlight,
            Some("changed") => RedisMove::Changed,
            Some("finished") => match part(1)?.as_deref().and_then(End::parse) {
                Some(end) => RedisMove::Finished(end),
                None => RedisMove::Ended,
            },
            Some("absent") => RedisMove::Absent,
            _ => return Err(bad()),
        })
    }
}

/// What a reschedule changes beside the score.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecordChange<'a> {
    /// The record as read, and the one to put in its place (a recurring
    /// series moved as a whole, a replaced body); refused (`Changed`) when
    /// the record is not the one read.
    pub swap: Option<(&'a str, &'a str)>,
    /// The due time moves only later than the one Redis holds.
    pub only_later: bool,
    /// For a message Redis does not hold: the record it is to have when it
    /// comes (left with its move).
    pub absent: Option<&'a str>,
}

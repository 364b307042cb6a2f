//! Looking at what Redis holds, for the reconciler (the server's `reconcile`):
//! where messages sit, a bounded walk of a shard's message hash, the two
//! repairs done in Redis (purge.lua, replace.lua); the restore's keyset
//! cursor (the server's `restore`); and the eviction policy Redis runs with.
//! Reads are pipelined, one round trip per page.

use std::collections::BTreeMap;

use redis::{AsyncCommands, Value};

use crate::error::RedisError;
use crate::message::MessageId;
use crate::redis::keys::due_of_score;
use crate::redis::reply::{opt_score, text};
use crate::redis::schedule::handle::schedule_handle;
pub use crate::redis::schedule::End;
use crate::redis::scripts::evalsha;

/// Where Redis holds a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// In its shard's delay zset, due at this time (ms).
    Delay { due: i64 },
    /// In its topic's ready queue.
    Ready,
    /// Handed to a consumer; its ack deadline (ms).
    InFlight { deadline: i64 },
    /// The record is there but nothing places it: nothing would deliver it.
    Nowhere,
}

/// What Redis holds of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Its record, and where it sits.
    Record(Place),
    /// No record, but it was acked or cancelled lately (a tombstone).
    Finished,
    /// No record, and an end Redis applied that the journal has not
    /// confirmed (the unjournaled hash): the node that made it stopped
    /// before its journal did.
    Unjournaled(End),
    /// Nothing at all.
    Absent,
}

/// The header of a stored record (see [`crate::redis::record`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub topic: String,
    pub ttl: i64,
    pub attempts: i32,
    pub score: i64,
}

impl Header {
    /// Reads `topic|ttl|attempts|score|...`; None for anything else.
    pub fn parse(record: &str) -> Option<Header> {
        let mut parts = record.splitn(5, '|');
        let topic = parts.next()?.to_string();
        let ttl = parts.next()?.parse().ok()?;
        let attempts = parts.next()?.parse().ok()?;
        let score = parts.next()?.parse().ok()?;
        parts.next()?;
        Some(Header {
            topic,
            ttl,
            attempts,
            score,
        })
    }
}

pub use delayq_proto::RestoreCursor;

/// How long a restore cursor outlives its last page: a restore run again
/// within this time resumes, a later one starts from the first row (the
/// keys below the cursor may have been lost since; see the server's `restore`).
pub const RESTORE_CURSOR_MS: i64 = 600_000;

fn to_i64(v: &Value) -> Option<i64> {
    opt_score(v).map(|f| f as i64)
}

schedule_handle!(
    /// Looking at what Redis holds: where each message is, its record's header,
    /// the records' count and scan, purging and replacing records, the restore
    /// cursor, and Redis's eviction policy.
    Inspection,
    inspect,
    "Looking at what Redis holds."
);

impl Inspection<'_> {
    /// Where Redis holds each message: `(id, topic)` pairs, the topic
    /// naming the ready queue to look in. One pipeline for all.
    pub async fn locate(self, items: &[(MessageId, &str)]) -> Result<Vec<Held>, RedisError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let k = &self.keys;
        let mut pipe = redis::pipe();
        for (id, topic) in items {
            let s = k.shard_of(*id);
            let id = id.to_string();
            pipe.hexists(k.messages(s), &id)
                .zscore(k.delay(s), &id)
                .zscore(k.inflight(s), &id)
                .zscore(k.ready(s, topic), &id)
                .zscore(k.finished(s), &id)
                .hget(k.unjournaled(s), &id);
        }
        let replies: Vec<Value> = pipe.query_async(&mut self.con.clone()).await?;
        let mut out = Vec::with_capacity(items.len());
        for r in replies.chunks(6) {
            if r.len() < 6 {
                return Err(RedisError::BadRecord(format!("locate returned {r:?}")));
            }
            let held = if to_i64(&r[0]) == Some(1) {
                Held::Record(if let Some(s) = opt_score(&r[1]) {
                    Place::Delay {
                        due: due_of_score(s),
                    }
                } else if let Some(d) = to_i64(&r[2]) {
                    Place::InFlight { deadline: d }
                } else if opt_score(&r[3]).is_some() {
                    Place::Ready
                } else {
                    Place::Nowhere
                })
            } else if let Some(end) = text(&r[5]).ok().as_deref().and_then(End::parse) {
                Held::Unjournaled(end)
            } else if opt_score(&r[4]).is_some() {
                Held::Finished
            } else {
                Held::Absent
            };
            out.push(held);
        }
        // A due message of an ordered group waiting behind its group's
        // turn is in its group's held zset, named from its record's group:
        // read for those found nowhere else (few: the rest are losses).
        let nowhere: Vec<usize> = (0..out.len())
            .filter(|&i| matches!(out[i], Held::Record(Place::Nowhere)))
            .collect();
        for i in nowhere {
            let (id, topic) = items[i];
            let s = k.shard_of(id);
            let rec: Option<String> = self.con.clone().hget(k.messages(s), id.to_string()).await?;
            let group = rec.and_then(|r| crate::redis::record::decode(id, &r).ok()?.1.group);
            if let Some(group) = group {
                let score: Option<f64> = self
                    .con
                    .clone()
                    .zscore(k.held(s, topic, &group), id.to_string())
                    .await?;
                if score.is_some() {
                    out[i] = Held::Record(Place::Ready);
                }
            }
        }
        Ok(out)
    }

    /// How many records the shards' message hashes hold: what a walk over
    /// them reads.
    pub async fn record_count(self) -> Result<u64, RedisError> {
        let mut pipe = redis::pipe();
        for shard in 0..self.keys.shards() {
            pipe.hlen(self.keys.messages(shard));
        }
        let counts: Vec<u64> = pipe.query_async(&mut self.con.clone()).await?;
        Ok(counts.iter().sum())
    }

    /// One step of a walk over shard `shard`'s message hash (HSCAN from
    /// `cursor`, about `count` records): the ids with their record headers,
    /// and the cursor to go on with (0: the walk is over).
    pub async fn scan_records(
        self,
        shard: u32,
        cursor: u64,
        count: usize,
    ) -> Result<(u64, Vec<(MessageId, Option<Header>)>), RedisError> {
        let (next, flat): (u64, Vec<Value>) = redis::cmd("HSCAN")
            .arg(self.keys.messages(shard))
            .arg(cursor)
            .arg("COUNT")
            .arg(count)
            .query_async(&mut self.con.clone())
            .await?;
        let mut out = Vec::with_capacity(flat.len() / 2);
        for pair in flat.chunks(2) {
            let Ok(id) = text(&pair[0])?.parse::<MessageId>() else {
                continue;
            };
            let header = pair
                .get(1)
                .and_then(|v| text(v).ok())
                .as_deref()
                .and_then(Header::parse);
            out.push((id, header));
        }
        Ok((next, out))
    }

    /// The record headers of these messages (None where Redis holds none).
    pub async fn headers(self, ids: &[MessageId]) -> Result<Vec<Option<Header>>, RedisError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.hget(self.keys.messages(self.keys.shard_of(*id)), id.to_string());
        }
        let records: Vec<Option<String>> = pipe.query_async(&mut self.con.clone()).await?;
        Ok(records
            .iter()
            .map(|r| r.as_deref().and_then(Header::parse))
            .collect())
    }

    /// Removes finished messages from Redis, leaving tombstones (purge.lua):
    /// whether each was held.
    pub async fn purge(self, ids: &[MessageId]) -> Result<Vec<bool>, RedisError> {
        let by_shard = self.by_shard(ids.iter().copied());
        let k = &self.keys;
        let mut pipe = redis::pipe();
        for (&shard, idx) in &by_shard {
            let mut args = vec![k.ready_prefix(shard)];
            args.extend(idx.iter().map(|&i| ids[i].to_string()));
            pipe.add_command(evalsha(
                &self.scripts.purge,
                &[
                    k.delay(shard),
                    k.messages(shard),
                    k.inflight(shard),
                    k.finished(shard),
                ],
                &args,
            ));
        }
        self.flags("purge", ids.len(), &by_shard, &pipe).await
    }

    /// Puts messages whose record sits nowhere back in their delay zsets
    /// (replace.lua), each due at its record's due time or at the one the
    /// journal holds (`None`: not known), whichever is later: whether each
    /// was put back.
    pub async fn replace(
        self,
        messages: &[(MessageId, Option<i64>)],
    ) -> Result<Vec<bool>, RedisError> {
        let by_shard = self.by_shard(messages.iter().map(|(id, _)| *id));
        let k = &self.keys;
        let mut pipe = redis::pipe();
        for (&shard, idx) in &by_shard {
            let mut args = vec![k.ready_prefix(shard), k.wake_channel(shard)];
            for &i in idx {
                let (id, due) = messages[i];
                args.push(id.to_string());
                args.push(due.map_or(String::new(), |d| d.to_string()));
            }
            pipe.add_command(evalsha(
                &self.scripts.replace,
                &[k.delay(shard), k.messages(shard), k.inflight(shard)],
                &args,
            ));
        }
        self.flags("replace", messages.len(), &by_shard, &pipe)
            .await
    }

    async fn flags(
        self,
        script: &'static str,
        n: usize,
        by_shard: &BTreeMap<u32, Vec<usize>>,
        pipe: &redis::Pipeline,
    ) -> Result<Vec<bool>, RedisError> {
        if by_shard.is_empty() {
            return Ok(Vec::new());
        }
        let replies: Vec<Vec<i64>> = self
            .scripts
            .run_pipe(script, &mut self.con.clone(), pipe)
            .await?;
        let mut out = vec![false; n];
        for ((_, idx), flags) in by_shard.iter().zip(replies) {
            for (&i, f) in idx.iter().zip(flags) {
                out[i] = f == 1;
            }
        }
        Ok(out)
    }

    /// The cursor of a restore under way or interrupted lately, if any.
    pub async fn restore_cursor(self) -> Result<Option<RestoreCursor>, RedisError> {
        let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(self.keys.restore_cursor())
            .query_async(&mut self.con.clone())
            .await?;
        let num = |f: &str| fields.get(f).and_then(|v| v.parse::<i64>().ok());
        Ok(match (num("after"), num("expire"), num("startedAt")) {
            (Some(after), Some(expire), Some(started_at)) => Some(RestoreCursor {
                after,
                expire: expire == 1,
                started_at,
                updated_at: num("updatedAt").unwrap_or(started_at),
            }),
            _ => None,
        })
    }

    /// Records how far a restore got; the key lapses
    /// [`RESTORE_CURSOR_MS`] after the last page.
    pub async fn save_restore_cursor(self, c: &RestoreCursor) -> Result<(), RedisError> {
        let key = self.keys.restore_cursor();
        let _: () = redis::pipe()
            .atomic()
            .hset_multiple(
                &key,
                &[
                    ("after", c.after),
                    ("expire", c.expire as i64),
                    ("startedAt", c.started_at),
                    ("updatedAt", c.updated_at),
                ],
            )
            .ignore()
            .pexpire(&key, RESTORE_CURSOR_MS)
            .ignore()
            .query_async(&mut self.con.clone())
            .await?;
        Ok(())
    }

    /// A restore finished: nothing to resume.
    pub async fn clear_restore_cursor(self) -> Result<(), RedisError> {
        let _: () = redis::cmd("DEL")
            .arg(self.keys.restore_cursor())
            .query_async(&mut self.con.clone())
            .await?;
        Ok(())
    }

    /// Redis's `maxmemory-policy`; None when Redis does not say (CONFIG
    /// disabled or renamed, as managed services often do).
    pub async fn maxmemory_policy(self) -> Option<String> {
        let reply: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query_async(&mut self.con.clone())
            .await;
        reply.ok().and_then(|v| v.into_iter().nth(1))
    }
}

/// Can Redis drop keys under this policy? Anything but `noeviction` can,
/// and a dropped key loses messages while the data set marker survives.
pub fn evicts(policy: &str) -> bool {
    policy != "noeviction"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse() {
        let h = Header::parse("a:b|1000|2|3830|3,n,0,0|{\"x\":1}").unwrap();
        assert_eq!(
            h,
            Header {
                topic: "a:b".into(),
                ttl: 1000,
                attempts: 2,
                score: 3830
            }
        );
        assert!(Header::parse("a|1|2|3").is_none());
        assert!(Header::parse("a|x|2|3|{}").is_none());
        assert!(evicts("allkeys-lru") && evicts("volatile-ttl") && !evicts("noeviction"));
    }
}

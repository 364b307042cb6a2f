//! The schedule's operations on Redis, each one script call (or one pipeline
//! of them) on one shard's keys. Any node may run any of them: ownership only
//! decides who runs [`RedisSchedule::tick`].

mod bookkeeping;
mod deliver;
mod outcomes;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::redis::Conn;
use redis::{FromRedisValue, Script};

use crate::error::RedisError;
use crate::message::{now_ms, Message, MessageId};
use crate::redis::keys::{score, Keys};
use crate::redis::record;
use crate::redis::scripts::{evalsha, Scripts};
pub use outcomes::*;

#[derive(Clone)]
pub struct RedisSchedule {
    pub(in crate::redis) con: Conn,
    pub(in crate::redis) keys: Keys,
    pub(in crate::redis) scripts: Arc<Scripts>,
    /// This node's id, named on the ready notifications it publishes.
    node: Arc<str>,
}

/// How long an acked or cancelled message's tombstone keeps a restore (or
/// a repeated push) from scheduling it again: far longer than a restore
/// takes between reading a journal page and writing it to Redis.
pub const TOMBSTONE_MS: i64 = 120_000;

/// How long a node's word that its journal is behind counts.
pub const BEHIND_FRESH_MS: i64 = 5_000;

impl RedisSchedule {
    pub async fn new(con: Conn, keys: Keys, node: &str) -> Result<Self, RedisError> {
        let scripts = Arc::new(Scripts::new(con.is_cluster()));
        let mut c = con.clone();
        scripts.load(&mut c).await?;
        Ok(RedisSchedule {
            con,
            keys,
            scripts,
            node: node.into(),
        })
    }

    /// The same schedule over another connection: work that sends large
    /// pipelines (the reconciler) takes its own, so the replies the shard
    /// scans wait for do not queue behind its replies on one socket.
    pub fn with_connection(&self, con: Conn) -> RedisSchedule {
        RedisSchedule {
            con,
            ..self.clone()
        }
    }

    /// The shared, self-reconnecting connection (for leases and one-off commands).
    pub fn connection(&self) -> Conn {
        self.con.clone()
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Indexes of `ids` grouped by their shard, for one script call per
    /// shard.
    pub(crate) fn by_shard(
        &self,
        ids: impl Iterator<Item = MessageId>,
    ) -> BTreeMap<u32, Vec<usize>> {
        let mut by_shard: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, id) in ids.enumerate() {
            by_shard.entry(self.keys.shard_of(id)).or_default().push(i);
        }
        by_shard
    }

    /// One call of `script` per shard among `ids`, all in one pipeline
    /// timed as `name`: `call(shard, idx)` gives the keys and arguments of
    /// the call for the items at `idx` (indexes into `ids`). Each call's
    /// reply comes back with its indexes.
    pub(crate) async fn per_shard<T: FromRedisValue>(
        &self,
        name: &'static str,
        script: &Script,
        ids: impl Iterator<Item = MessageId>,
        mut call: impl FnMut(u32, &[usize]) -> (Vec<String>, Vec<String>),
    ) -> Result<Vec<(Vec<usize>, T)>, RedisError> {
        let by_shard = self.by_shard(ids);
        let mut pipe = redis::pipe();
        for (&shard, idx) in &by_shard {
            let (keys, args) = call(shard, idx);
            pipe.add_command(evalsha(script, &keys, &args));
        }
        let replies: Vec<T> = self
            .scripts
            .run_pipe(name, &mut self.con.clone(), &pipe)
            .await?;
        Ok(by_shard.into_values().zip(replies).collect())
    }

    /// Adds messages (with their delivery counts) to their shards' delay
    /// zsets; a message Redis holds already, or that was finished lately, is
    /// left as it is. Returns what happened to each, in input order.
    pub async fn schedule(
        &self,
        messages: &[(Message, i32)],
    ) -> Result<Vec<Scheduled>, RedisError> {
        let k = &self.keys;
        let replies: Vec<(Vec<usize>, Vec<i64>)> = self
            .per_shard(
                "schedule",
                &self.scripts.schedule,
                messages.iter().map(|(m, _)| m.id),
                |shard, idx| {
                    let mut args = Vec::with_capacity(idx.len() * 3 + 1);
                    args.push(k.wake_channel(shard));
                    for &i in idx {
                        let (m, attempts) = &messages[i];
                        args.push(m.id.to_string());
                        args.push((score(m.due_time, m.priority) as i64).to_string());
                        args.push(record::encode(m, *attempts));
                    }
                    (
                        vec![k.delay(shard), k.messages(shard), k.finished(shard)],
                        args,
                    )
                },
            )
            .await?;
        let mut outcome = vec![Scheduled::Present; messages.len()];
        for (idx, mut flags) in replies {
            let at = flags.pop().unwrap_or_else(now_ms);
            for (&i, flag) in idx.iter().zip(flags) {
                outcome[i] = match flag {
                    1 => Scheduled::Added { at },
                    2 => Scheduled::Finished,
                    _ => Scheduled::Present,
                };
            }
        }
        Ok(outcome)
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
        self.schedule(&batch).await
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

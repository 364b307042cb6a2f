//! One concern of the schedule, as a handle of its own (JournalSync, from
//! RedisSchedule::journal_sync()): what Redis keeps for the journal: the
//! ends it has yet to record, which nodes' journals are behind or stopped,
//! flush requests and their answers, and the spill's trimming.

use super::handle::{schedule_handle, BEHIND_FRESH_MS};
use super::outcomes::End;
use crate::error::RedisError;
use crate::message::{now_ms, MessageId, Status};
use crate::redis::scripts::evalsha;

schedule_handle!(
    /// What Redis keeps for the journal: the ends it has yet to record, which
    /// nodes' journals are behind or stopped, flush requests and their answers,
    /// and the spill's trimming.
    JournalSync,
    journal_sync,
    "What Redis keeps for the journal."
);

impl JournalSync<'_> {
    /// The ends these messages reached in Redis that the journal has not
    /// recorded yet (the shards' unjournaled hashes), in input order.
    pub async fn pending_ends(self, ids: &[MessageId]) -> Result<Vec<Option<End>>, RedisError> {
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.hget(
                self.keys.unjournaled(self.keys.shard_of(*id)),
                id.to_string(),
            );
        }
        let found: Vec<Option<String>> = pipe.query_async(&mut self.con.clone()).await?;
        Ok(found
            .iter()
            .map(|t| t.as_deref().and_then(End::parse))
            .collect())
    }

    /// Nodes whose journal is behind Redis, by their word of the last
    /// [`BEHIND_FRESH_MS`].
    pub async fn journals_behind(self) -> Result<Vec<String>, RedisError> {
        Ok(redis::cmd("ZRANGEBYSCORE")
            .arg(self.keys.journal_behind())
            .arg(now_ms() - BEHIND_FRESH_MS)
            .arg("+inf")
            .query_async(&mut self.con.clone())
            .await?)
    }

    /// Says whether `node`'s journal is behind (read by
    /// [`JournalSync::journals_behind`]) and that `node` runs (read by
    /// [`crate::redis::schedule::Ownership::nodes_alive`]), and forgets the word of nodes
    /// silent for [`BEHIND_FRESH_MS`] (stopped meanwhile).
    pub async fn say_journal_behind(self, node: &str, behind: bool) -> Result<(), RedisError> {
        let key = self.keys.journal_behind();
        let now = now_ms();
        let mut pipe = redis::pipe();
        if behind {
            pipe.cmd("ZADD").arg(&key).arg(now).arg(node).ignore();
        } else {
            pipe.cmd("ZREM").arg(&key).arg(node).ignore();
        }
        pipe.cmd("ZREMRANGEBYSCORE")
            .arg(&key)
            .arg("-inf")
            .arg(now - BEHIND_FRESH_MS)
            .ignore();
        // And that it runs (see `delayq reshard`).
        let alive = self.keys.alive();
        pipe.cmd("ZADD").arg(&alive).arg(now).arg(node).ignore();
        pipe.cmd("ZREMRANGEBYSCORE")
            .arg(&alive)
            .arg("-inf")
            .arg(now - BEHIND_FRESH_MS)
            .ignore();
        Ok(pipe.query_async(&mut self.con.clone()).await?)
    }

    /// Says `node` stopped (its word that it runs is taken back).
    pub async fn say_stopped(self, node: &str) {
        let mut con = self.con.clone();
        let r: redis::RedisResult<()> = redis::pipe()
            .cmd("ZREM")
            .arg(self.keys.alive())
            .arg(node)
            .ignore()
            .cmd("ZREM")
            .arg(self.keys.journal_behind())
            .arg(node)
            .ignore()
            .query_async(&mut con)
            .await;
        if let Err(e) = r {
            tracing::debug!(error = %e, "cannot take back this node's word that it runs");
        }
    }

    /// Asks every node to write the status changes it has queued: the
    /// ask's number, for [`JournalSync::flushed_by`].
    pub async fn ask_flush(self) -> Result<i64, RedisError> {
        Ok(redis::cmd("INCR")
            .arg(self.keys.flush_asked())
            .query_async(&mut self.con.clone())
            .await?)
    }

    /// The latest ask, and the latest `node` answered.
    pub async fn flush_ask_of(self, node: &str) -> Result<(i64, i64), RedisError> {
        let (asked, answered): (Option<i64>, Option<i64>) = redis::pipe()
            .cmd("GET")
            .arg(self.keys.flush_asked())
            .cmd("HGET")
            .arg(self.keys.flushed())
            .arg(node)
            .query_async(&mut self.con.clone())
            .await?;
        Ok((asked.unwrap_or(0), answered.unwrap_or(0)))
    }

    /// Says `node` answered ask `asked`: every change it had queued when
    /// it read the ask is written.
    pub async fn say_flushed(self, node: &str, asked: i64) -> Result<(), RedisError> {
        Ok(redis::cmd("HSET")
            .arg(self.keys.flushed())
            .arg(node)
            .arg(asked)
            .query_async(&mut self.con.clone())
            .await?)
    }

    /// The latest ask each of `nodes` answered (0: none).
    pub async fn flushed_by(self, nodes: &[String]) -> Result<Vec<i64>, RedisError> {
        if nodes.is_empty() {
            return Ok(Vec::new());
        }
        let answered: Vec<Option<i64>> = redis::cmd("HMGET")
            .arg(self.keys.flushed())
            .arg(nodes)
            .query_async(&mut self.con.clone())
            .await?;
        Ok(answered.into_iter().map(|a| a.unwrap_or(0)).collect())
    }

    /// The journal has recorded these messages' ends: Redis no longer keeps
    /// them in the shards' unjournaled hashes (their tombstones then expire
    /// as usual).
    pub async fn journaled(self, ids: &[MessageId]) -> Result<(), RedisError> {
        let by_shard = self.by_shard(ids.iter().copied());
        let mut pipe = redis::pipe();
        for (&shard, idx) in &by_shard {
            let members: Vec<String> = idx.iter().map(|&i| ids[i].to_string()).collect();
            pipe.hdel(self.keys.unjournaled(shard), members).ignore();
        }
        let _: () = pipe.query_async(&mut self.con.clone()).await?;
        Ok(())
    }

    /// Ends messages Redis does not hold while the journal says they are
    /// live (end_absent.lua): `(id, the end, attempts)`. Whether each was
    /// ended (false: it is back in Redis meanwhile), in input order.
    pub async fn end_absent(
        self,
        ends: &[(MessageId, Status, i32)],
    ) -> Result<Vec<bool>, RedisError> {
        let k = &self.keys;
        let replies: Vec<(Vec<usize>, Vec<i64>)> = self
            .per_shard(
                "end_absent",
                &self.scripts.end_absent,
                ends.iter().map(|(id, _, _)| *id),
                |shard, idx| {
                    let mut args = Vec::with_capacity(idx.len() * 3);
                    for &i in idx {
                        let (id, status, attempts) = ends[i];
                        args.push(id.to_string());
                        args.push(status.code().to_string());
                        args.push(attempts.to_string());
                    }
                    (
                        vec![k.messages(shard), k.finished(shard), k.unjournaled(shard)],
                        args,
                    )
                },
            )
            .await?;
        let mut out = vec![false; ends.len()];
        for (idx, flags) in replies {
            for (&i, f) in idx.iter().zip(flags) {
                out[i] = f == 1;
            }
        }
        Ok(out)
    }

    /// Removes the first `count` lines of the journal spill list `key`,
    /// only while `holder` still has the replay lock `lock` (see
    /// spill_trim.lua): whether it did.
    pub async fn trim_spill(
        self,
        lock: &str,
        key: &str,
        holder: &str,
        count: usize,
    ) -> Result<bool, RedisError> {
        let cmd = evalsha(
            &self.scripts.spill_trim,
            &[lock, key],
            &[holder, &count.to_string()],
        );
        let trimmed: i64 = self
            .scripts
            .run("spill_trim", &mut self.con.clone(), &cmd)
            .await?;
        Ok(trimmed == 1)
    }
}

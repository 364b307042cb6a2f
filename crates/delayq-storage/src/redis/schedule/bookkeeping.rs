//! The schedule's bookkeeping: shard epochs and counts, the ends the
//! journal has yet to record, leases and worker reservations, the data
//! set's markers, and the small shared records (journals behind, revoked
//! dashboard sessions, Redis's clock).

use super::{End, LeaseOp, RedisSchedule, ShardCounts, BEHIND_FRESH_MS};
use crate::error::RedisError;
use crate::message::{now_ms, MessageId, Status};
use crate::redis::keys::due_of_score;
use crate::redis::scripts::evalsha;

impl RedisSchedule {
    /// A standalone node's ownership token for a shard: one above the stored
    /// epoch (the first scan with it raises the stored value; see tick.lua).
    pub async fn next_epoch(&self, shard: u32) -> Result<i64, RedisError> {
        let stored: Option<i64> = redis::cmd("GET")
            .arg(self.keys.epoch(shard))
            .query_async(&mut self.con.clone())
            .await?;
        Ok(stored.unwrap_or(0) + 1)
    }

    /// Raises shard `shard`'s epoch from `stored` to `next` if it is still
    /// `stored` (takeover.lua): whether it did.
    pub async fn take_over(&self, shard: u32, stored: i64, next: i64) -> Result<bool, RedisError> {
        let cmd = evalsha(
            &self.scripts.takeover,
            &[self.keys.epoch(shard)],
            &[stored, next],
        );
        let (done, _now): (i64, String) = self
            .scripts
            .run("takeover", &mut self.con.clone(), &cmd)
            .await?;
        Ok(done == 1)
    }

    /// The ends these messages reached in Redis that the journal has not
    /// recorded yet (the shards' unjournaled hashes), in input order.
    pub async fn pending_ends(&self, ids: &[MessageId]) -> Result<Vec<Option<End>>, RedisError> {
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
    pub async fn journals_behind(&self) -> Result<Vec<String>, RedisError> {
        Ok(redis::cmd("ZRANGEBYSCORE")
            .arg(self.keys.journal_behind())
            .arg(now_ms() - BEHIND_FRESH_MS)
            .arg("+inf")
            .query_async(&mut self.con.clone())
            .await?)
    }

    /// Says whether `node`'s journal is behind (read by
    /// [`RedisSchedule::journals_behind`]) and that `node` runs (read by
    /// [`RedisSchedule::nodes_alive`]), and forgets the word of nodes
    /// silent for [`BEHIND_FRESH_MS`] (stopped meanwhile).
    pub async fn say_journal_behind(&self, node: &str, behind: bool) -> Result<(), RedisError> {
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
    pub async fn say_stopped(&self, node: &str) {
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
    /// ask's number, for [`RedisSchedule::flushed_by`].
    pub async fn ask_flush(&self) -> Result<i64, RedisError> {
        Ok(redis::cmd("INCR")
            .arg(self.keys.flush_asked())
            .query_async(&mut self.con.clone())
            .await?)
    }

    /// The latest ask, and the latest `node` answered.
    pub async fn flush_ask_of(&self, node: &str) -> Result<(i64, i64), RedisError> {
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
    pub async fn say_flushed(&self, node: &str, asked: i64) -> Result<(), RedisError> {
        Ok(redis::cmd("HSET")
            .arg(self.keys.flushed())
            .arg(node)
            .arg(asked)
            .query_async(&mut self.con.clone())
            .await?)
    }

    /// The latest ask each of `nodes` answered (0: none).
    pub async fn flushed_by(&self, nodes: &[String]) -> Result<Vec<i64>, RedisError> {
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

    /// Nodes that said they run within the last [`BEHIND_FRESH_MS`].
    pub async fn nodes_alive(&self) -> Result<Vec<String>, RedisError> {
        Ok(redis::cmd("ZRANGEBYSCORE")
            .arg(self.keys.alive())
            .arg(now_ms() - BEHIND_FRESH_MS)
            .arg("+inf")
            .query_async(&mut self.con.clone())
            .await?)
    }

    /// Keeps the leader's last periodic reconciliation (JSON) for a day.
    pub async fn save_reconciled(&self, json: &str) -> Result<(), RedisError> {
        Ok(redis::cmd("SET")
            .arg(self.keys.reconciled())
            .arg(json)
            .arg("EX")
            .arg(24 * 3600)
            .query_async(&mut self.con.clone())
            .await?)
    }

    /// The leader's last periodic reconciliation, if one was kept.
    pub async fn reconciled(&self) -> Result<Option<String>, RedisError> {
        Ok(redis::cmd("GET")
            .arg(self.keys.reconciled())
            .query_async(&mut self.con.clone())
            .await?)
    }

    /// Records a logged-out dashboard session (its cookie's signed body)
    /// until `until` (epoch ms), when it would have expired anyway.
    pub async fn revoke_ui_session(&self, body: &str, until: i64) -> Result<(), RedisError> {
        Ok(redis::cmd("ZADD")
            .arg(self.keys.ui_revoked())
            .arg(until)
            .arg(body)
            .query_async(&mut self.con.clone())
            .await?)
    }

    /// The logged-out dashboard sessions not expired yet (forgetting the
    /// others).
    pub async fn revoked_ui_sessions(&self) -> Result<Vec<String>, RedisError> {
        let key = self.keys.ui_revoked();
        let (list,): (Vec<String>,) = redis::pipe()
            .cmd("ZREMRANGEBYSCORE")
            .arg(&key)
            .arg("-inf")
            .arg(now_ms())
            .ignore()
            .cmd("ZRANGE")
            .arg(&key)
            .arg(0)
            .arg(-1)
            .query_async(&mut self.con.clone())
            .await?;
        Ok(list)
    }

    /// How far the journal's retention of `kind` has read the flow rows
    /// (None: from the start).
    pub async fn retention_cursor(&self, kind: &str) -> Result<Option<i64>, RedisError> {
        let v: Option<i64> = redis::cmd("HGET")
            .arg(self.keys.retention_cursor())
            .arg(kind)
            .query_async(&mut self.con.clone())
            .await?;
        Ok(v)
    }

    pub async fn save_retention_cursor(&self, kind: &str, after: i64) -> Result<(), RedisError> {
        let _: () = redis::cmd("HSET")
            .arg(self.keys.retention_cursor())
            .arg(kind)
            .arg(after)
            .query_async(&mut self.con.clone())
            .await?;
        Ok(())
    }

    /// The journal has recorded these messages' ends: Redis no longer keeps
    /// them in the shards' unjournaled hashes (their tombstones then expire
    /// as usual).
    pub async fn journaled(&self, ids: &[MessageId]) -> Result<(), RedisError> {
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
        &self,
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

    /// Reads each shard's master's clock and notes it ([`crate::clock`]).
    pub async fn probe_clock(&self) -> Result<(), RedisError> {
        self.probe().await.map(drop)
    }

    /// Counts of one shard, each O(1) in Redis: every message Redis holds is
    /// in the message hash, and is delaying, in flight, or else ready.
    pub async fn shard_counts(&self, shard: u32) -> Result<ShardCounts, RedisError> {
        let k = &self.keys;
        let (total, delaying, in_flight, head, epoch): (
            i64,
            i64,
            i64,
            Vec<(String, f64)>,
            Option<i64>,
        ) = redis::pipe()
            .hlen(k.messages(shard))
            .zcard(k.delay(shard))
            .zcard(k.inflight(shard))
            .cmd("ZRANGE")
            .arg(k.delay(shard))
            .arg(0)
            .arg(0)
            .arg("WITHSCORES")
            .get(k.epoch(shard))
            .query_async(&mut self.con.clone())
            .await?;
        let now = now_ms();
        Ok(ShardCounts {
            delaying,
            ready: (total - delaying - in_flight).max(0),
            in_flight,
            epoch: epoch.unwrap_or(0),
            oldest_overdue: head
                .first()
                .map(|(_, s)| due_of_score(*s))
                .filter(|due| *due < now),
        })
    }

    /// Runs a lease operation (see lease.lua): whether this holder has the
    /// lease afterwards, and who holds it.
    pub async fn lease(
        &self,
        op: LeaseOp,
        key: &str,
        holder: &str,
        lease_ms: u64,
    ) -> Result<(bool, Option<String>), RedisError> {
        let op = match op {
            LeaseOp::Acquire => "acquire",
            LeaseOp::Renew => "renew",
            LeaseOp::Release => "release",
        };
        let cmd = evalsha(
            &self.scripts.lease,
            &[key],
            &[op, holder, &lease_ms.to_string()],
        );
        let (held, cur): (i64, Option<String>) = self
            .scripts
            .run("lease", &mut self.con.clone(), &cmd)
            .await?;
        Ok((held == 1, cur))
    }

    /// Removes the first `count` lines of the journal spill list `key`,
    /// only while `holder` still has the replay lock `lock` (see
    /// spill_trim.lua): whether it did.
    pub async fn trim_spill(
        &self,
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

    /// Raises worker `worker`'s reserved millisecond to at least `ms`;
    /// returns (reserved before, reserved now).
    pub async fn reserve(&self, worker: u16, ms: i64) -> Result<(i64, i64), RedisError> {
        let cmd = evalsha(
            &self.scripts.reserve,
            &[self.keys.worker_reserved(worker)],
            &[ms],
        );
        let (before, now): (String, String) = self
            .scripts
            .run("reserve", &mut self.con.clone(), &cmd)
            .await?;
        let num = |v: String| {
            v.parse::<i64>()
                .map_err(|e| RedisError::BadRecord(e.to_string()))
        };
        Ok((num(before)?, num(now)?))
    }

    pub async fn ping(&self) -> Result<(), RedisError> {
        let _: String = redis::cmd("PING")
            .query_async(&mut self.con.clone())
            .await?;
        Ok(())
    }

    /// Does this Redis hold a delayq data set (the marker key)?
    pub async fn has_dataset_marker(&self) -> Result<bool, RedisError> {
        Ok(redis::cmd("EXISTS")
            .arg(self.keys.dataset_marker())
            .query_async::<i64>(&mut self.con.clone())
            .await?
            == 1)
    }

    pub async fn set_dataset_marker(&self, node_id: &str) -> Result<(), RedisError> {
        let _: () = redis::pipe()
            .cmd("SET")
            .arg(self.keys.dataset_marker())
            .arg(node_id)
            .arg("NX")
            .ignore()
            .cmd("SET")
            .arg(self.keys.shard_count())
            .arg(self.keys.shards())
            .arg("NX")
            .ignore()
            .query_async(&mut self.con.clone())
            .await?;
        Ok(())
    }

    /// Records this deployment's shard count with the data set unless one
    /// is recorded already; returns the recorded one.
    pub async fn record_shard_count(&self) -> Result<u32, RedisError> {
        let (recorded,): (Option<String>,) = redis::pipe()
            .cmd("SET")
            .arg(self.keys.shard_count())
            .arg(self.keys.shards())
            .arg("NX")
            .ignore()
            .get(self.keys.shard_count())
            .query_async(&mut self.con.clone())
            .await?;
        recorded.as_deref().unwrap_or("").parse().map_err(|_| {
            RedisError::BadRecord(format!("{} holds {recorded:?}", self.keys.shard_count()))
        })
    }

    /// `FROM>TO` while a reshard moves the data set.
    pub async fn resharding(&self) -> Result<Option<String>, RedisError> {
        Ok(redis::cmd("GET")
            .arg(self.keys.resharding())
            .query_async(&mut self.con.clone())
            .await?)
    }
}

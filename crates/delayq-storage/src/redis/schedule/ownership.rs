//! One concern of the schedule, as a handle of its own (Ownership, from
//! RedisSchedule::ownership()): who holds what: shard epochs and takeovers,
//! worker-id leases and their reserved milliseconds, the nodes alive, and
//! the data set's markers (the node that made it, its shard count, a
//! reshard under way).

use super::handle::{schedule_handle, BEHIND_FRESH_MS};
use super::outcomes::LeaseOp;
use crate::error::RedisError;
use crate::message::now_ms;
use crate::redis::scripts::evalsha;

schedule_handle!(
    /// Who holds what: shard epochs and takeovers, worker-id leases and their
    /// reserved milliseconds, the nodes alive, and the data set's markers (the
    /// node that made it, its shard count, a reshard under way).
    Ownership,
    ownership,
    "Who holds what."
);

impl Ownership<'_> {
    /// A standalone node's ownership token for a shard: one above the stored
    /// epoch (the first scan with it raises the stored value; see tick.lua).
    pub async fn next_epoch(self, shard: u32) -> Result<i64, RedisError> {
        let stored: Option<i64> = redis::cmd("GET")
            .arg(self.keys.epoch(shard))
            .query_async(&mut self.con.clone())
            .await?;
        Ok(stored.unwrap_or(0) + 1)
    }

    /// Raises shard `shard`'s epoch from `stored` to `next` if it is still
    /// `stored` (takeover.lua): whether it did.
    pub async fn take_over(self, shard: u32, stored: i64, next: i64) -> Result<bool, RedisError> {
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

    /// Runs a lease operation (see lease.lua): whether this holder has the
    /// lease afterwards, and who holds it.
    pub async fn lease(
        self,
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

    /// Raises worker `worker`'s reserved millisecond to at least `ms`;
    /// returns (reserved before, reserved now).
    pub async fn reserve(self, worker: u16, ms: i64) -> Result<(i64, i64), RedisError> {
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

    /// Nodes that said they run within the last [`BEHIND_FRESH_MS`].
    pub async fn nodes_alive(self) -> Result<Vec<String>, RedisError> {
        Ok(redis::cmd("ZRANGEBYSCORE")
            .arg(self.keys.alive())
            .arg(now_ms() - BEHIND_FRESH_MS)
            .arg("+inf")
            .query_async(&mut self.con.clone())
            .await?)
    }

    /// Does this Redis hold a delayq data set (the marker key)?
    pub async fn has_dataset_marker(self) -> Result<bool, RedisError> {
        Ok(redis::cmd("EXISTS")
            .arg(self.keys.dataset_marker())
            .query_async::<i64>(&mut self.con.clone())
            .await?
            == 1)
    }

    pub async fn set_dataset_marker(self, node_id: &str) -> Result<(), RedisError> {
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
    pub async fn record_shard_count(self) -> Result<u32, RedisError> {
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
    pub async fn resharding(self) -> Result<Option<String>, RedisError> {
        Ok(redis::cmd("GET")
            .arg(self.keys.resharding())
            .query_async(&mut self.con.clone())
            .await?)
    }
}

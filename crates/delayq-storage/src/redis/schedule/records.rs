//! One concern of the schedule, as a handle of its own (Records, from
//! RedisSchedule::records()): small shared records and readings: the last
//! reconciliation, revoked dashboard sessions, the retention cursors,
//! Redis's clock, a shard's counts, a ping.

use super::handle::schedule_handle;
use super::outcomes::ShardCounts;
use crate::error::RedisError;
use crate::message::now_ms;
use crate::redis::keys::due_of_score;

schedule_handle!(
    /// Small shared records and readings: the last reconciliation, revoked
    /// dashboard sessions, the retention cursors, Redis's clock, a shard's
    /// counts, a ping.
    Records,
    records,
    "Small shared records and readings."
);

impl Records<'_> {
    /// Keeps the leader's last periodic reconciliation (JSON) for a day.
    pub async fn save_reconciled(self, json: &str) -> Result<(), RedisError> {
        Ok(redis::cmd("SET")
            .arg(self.keys.reconciled())
            .arg(json)
            .arg("EX")
            .arg(24 * 3600)
            .query_async(&mut self.con.clone())
            .await?)
    }

    /// The leader's last periodic reconciliation, if one was kept.
    pub async fn reconciled(self) -> Result<Option<String>, RedisError> {
        Ok(redis::cmd("GET")
            .arg(self.keys.reconciled())
            .query_async(&mut self.con.clone())
            .await?)
    }

    /// Records a logged-out dashboard session (its cookie's signed body)
    /// until `until` (epoch ms), when it would have expired anyway.
    pub async fn revoke_ui_session(self, body: &str, until: i64) -> Result<(), RedisError> {
        Ok(redis::cmd("ZADD")
            .arg(self.keys.ui_revoked())
            .arg(until)
            .arg(body)
            .query_async(&mut self.con.clone())
            .await?)
    }

    /// The logged-out dashboard sessions not expired yet (forgetting the
    /// others).
    pub async fn revoked_ui_sessions(self) -> Result<Vec<String>, RedisError> {
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
    pub async fn retention_cursor(self, kind: &str) -> Result<Option<i64>, RedisError> {
        let v: Option<i64> = redis::cmd("HGET")
            .arg(self.keys.retention_cursor())
            .arg(kind)
            .query_async(&mut self.con.clone())
            .await?;
        Ok(v)
    }

    pub async fn save_retention_cursor(self, kind: &str, after: i64) -> Result<(), RedisError> {
        let _: () = redis::cmd("HSET")
            .arg(self.keys.retention_cursor())
            .arg(kind)
            .arg(after)
            .query_async(&mut self.con.clone())
            .await?;
        Ok(())
    }

    /// Reads each shard's master's clock and notes it ([`crate::clock`]).
    pub async fn probe_clock(self) -> Result<(), RedisError> {
        self.probe().await.map(drop)
    }

    /// Counts of one shard, each O(1) in Redis: every message Redis holds is
    /// in the message hash, and is delaying, in flight, or else ready.
    pub async fn shard_counts(self, shard: u32) -> Result<ShardCounts, RedisError> {
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

    pub async fn ping(self) -> Result<(), RedisError> {
        let _: String = redis::cmd("PING")
            .query_async(&mut self.con.clone())
            .await?;
        Ok(())
    }
}

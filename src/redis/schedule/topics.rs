//! Paused topics. The hash `{P}:paused` (topic → when it was paused) is
//! what a pause is; every shard's `{P:s}:paused` set is the copy its
//! hand-out scripts (take.lua, claim.lua) read in the same step as they
//! claim, so a topic paused when the pause is answered hands nothing out,
//! on any node.

use std::collections::BTreeMap;

use redis::AsyncCommands;

use super::RedisSchedule;
use crate::error::RedisError;
use crate::message::now_ms;
use crate::redis::keys::due_of_score;
use crate::redis::scripts::evalsha;

impl RedisSchedule {
    /// Pauses `topic` on every shard (the hash first, so a pause cut short
    /// is listed and is completed by the next pause or the next node to
    /// start). Answers when the topic was paused (ms; an earlier pause's
    /// time when it was paused already) and whether this call paused it.
    pub async fn pause(&self, topic: &str) -> Result<(i64, bool), RedisError> {
        let mut con = self.con.clone();
        let key = self.keys.paused_topics();
        let paused: bool = con.hset_nx(&key, topic, now_ms()).await?;
        self.set_shards_paused(topic, true).await?;
        let at: Option<i64> = con.hget(&key, topic).await?;
        Ok((at.unwrap_or_else(now_ms), paused))
    }

    /// Resumes `topic` on every shard, then forgets the pause (so a resume
    /// cut short still lists the topic paused, and is completed by the next
    /// resume). Shards with messages waiting ready wake the long polls of
    /// every node. Answers whether the topic was paused.
    pub async fn resume(&self, topic: &str) -> Result<bool, RedisError> {
        let mut con = self.con.clone();
        let key = self.keys.paused_topics();
        let was: bool = con.hexists(&key, topic).await?;
        self.set_shards_paused(topic, false).await?;
        let _: i64 = con.hdel(&key, topic).await?;
        Ok(was)
    }

    async fn set_shards_paused(&self, topic: &str, paused: bool) -> Result<(), RedisError> {
        let k = &self.keys;
        let mut pipe = redis::pipe();
        for shard in 0..k.shards() {
            pipe.add_command(evalsha(
                &self.scripts.pause,
                &[k.paused(shard), k.ready(shard, topic)],
                &[
                    topic,
                    if paused { "1" } else { "0" },
                    &k.ready_channel(shard),
                    &self.node,
                ],
            ));
        }
        let _: Vec<i64> = self
            .scripts
            .run_pipe("pause", &mut self.con.clone(), &pipe)
            .await?;
        Ok(())
    }

    /// Paused topics → when each was paused (ms).
    pub async fn paused_topics(&self) -> Result<BTreeMap<String, i64>, RedisError> {
        Ok(self.con.clone().hgetall(self.keys.paused_topics()).await?)
    }

    /// Makes every shard's paused set follow the hash: run as a node
    /// starts, after a pause or resume cut short or a reshard.
    pub async fn sync_paused(&self) -> Result<(), RedisError> {
        let paused = self.paused_topics().await?;
        let mut con = self.con.clone();
        for shard in 0..self.keys.shards() {
            let held: Vec<String> = con.smembers(self.keys.paused(shard)).await?;
            for topic in held.iter().filter(|t| !paused.contains_key(*t)) {
                self.set_shards_paused(topic, false).await?;
            }
        }
        for topic in paused.keys() {
            self.set_shards_paused(topic, true).await?;
        }
        Ok(())
    }

    /// The due time (ms) of each topic's oldest message waiting ready,
    /// across shards (`None`: nothing waits).
    pub async fn oldest_ready(&self, topics: &[&str]) -> Result<Vec<Option<i64>>, RedisError> {
        if topics.is_empty() {
            return Ok(Vec::new());
        }
        let shards = self.keys.shards();
        let mut pipe = redis::pipe();
        for topic in topics {
            for shard in 0..shards {
                pipe.cmd("ZRANGE")
                    .arg(self.keys.ready(shard, topic))
                    .arg(0)
                    .arg(0)
                    .arg("WITHSCORES");
            }
        }
        let heads: Vec<Vec<(String, f64)>> = pipe.query_async(&mut self.con.clone()).await?;
        Ok(heads
            .chunks(shards as usize)
            .map(|per_shard| {
                per_shard
                    .iter()
                    .filter_map(|h| h.first().map(|(_, s)| due_of_score(*s)))
                    .min()
            })
            .collect())
    }
}

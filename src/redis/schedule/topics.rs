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
    /// A resume racing with it may clear the hash between the two steps:
    /// the pause then goes again, so it ends listed and applied.
    pub async fn pause(&self, topic: &str) -> Result<(i64, bool), RedisError> {
        let mut con = self.con.clone();
        let key = self.keys.paused_topics();
        let mut paused = false;
        for _ in 0..8 {
            paused |= con.hset_nx::<_, _, _, bool>(&key, topic, now_ms()).await?;
            self.set_shards_paused(topic, true).await?;
            if let Some(at) = con.hget::<_, _, Option<i64>>(&key, topic).await? {
                return Ok((at, paused));
            }
        }
        Err(RedisError::BadRecord(format!(
            "the pause of {topic} kept being undone by resumes; pause again"
        )))
    }

    /// Resumes `topic` on every shard, then forgets the pause (so a resume
    /// cut short still lists the topic paused, and is completed by the next
    /// resume). Shards with messages waiting ready wake the long polls of
    /// every node. Answers whether the topic was paused. A pause racing
    /// with it wins: when the hash holds the topic again after the resume,
    /// its shards are paused again, so the list and the shards agree.
    pub async fn resume(&self, topic: &str) -> Result<bool, RedisError> {
        let mut con = self.con.clone();
        let key = self.keys.paused_topics();
        let was: bool = con.hexists(&key, topic).await?;
        self.set_shards_paused(topic, false).await?;
        let _: i64 = con.hdel(&key, topic).await?;
        if con.hexists::<_, _, bool>(&key, topic).await? {
            self.set_shards_paused(topic, true).await?;
        }
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
    /// starts, after a pause or resume cut short or a reshard. Pauses and
    /// resumes may run meanwhile: each pass re-reads the hash after it
    /// changed the shards and puts back what it undid, until a pass sees
    /// the hash unchanged.
    pub async fn sync_paused(&self) -> Result<(), RedisError> {
        let mut con = self.con.clone();
        for _ in 0..8 {
            let paused = self.paused_topics().await?;
            for topic in paused.keys() {
                self.set_shards_paused(topic, true).await?;
            }
            let mut stale = std::collections::BTreeSet::new();
            for shard in 0..self.keys.shards() {
                let held: Vec<String> = con.smembers(self.keys.paused(shard)).await?;
                stale.extend(held.into_iter().filter(|t| !paused.contains_key(t)));
            }
            for topic in &stale {
                self.set_shards_paused(topic, false).await?;
            }
            let now = self.paused_topics().await?;
            for topic in now
                .keys()
                .filter(|t| stale.contains(*t) || !paused.contains_key(*t))
            {
                self.set_shards_paused(topic, true).await?;
            }
            for topic in paused.keys().filter(|t| !now.contains_key(*t)) {
                self.set_shards_paused(topic, false).await?;
            }
            if now.keys().eq(paused.keys()) {
                return Ok(());
            }
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

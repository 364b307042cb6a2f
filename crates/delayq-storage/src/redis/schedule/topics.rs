//! Paused topics. The hash `{P}:paused` (topic → when it was paused) is
//! what a pause is; every shard's `{P:s}:paused` set is the copy its
//! hand-out scripts (take.lua, claim.lua) read in the same step as they
//! claim, so a topic paused when the pause is answered hands nothing out,
//! on any node.

use std::collections::{BTreeMap, BTreeSet};

use redis::AsyncCommands;

use super::handle::schedule_handle;
use crate::error::RedisError;
use crate::message::now_ms;
use crate::redis::keys::due_of_score;
use crate::redis::scripts::evalsha;

schedule_handle!(
    /// A topic's state across the cluster: pausing and resuming it, the paused
    /// topics, and the oldest ready message of each.
    TopicState,
    topics,
    "A topic's state across the cluster."
);

impl TopicState<'_> {
    /// Pauses `topic` on every shard: the hash first (with the pause's
    /// number, pause_topic.lua), so a pause cut short is listed and is
    /// completed by the next node to start. Answers when the topic was
    /// paused (ms; an earlier pause's time when it was paused already) and
    /// whether this call paused it. A resume after it (a higher number)
    /// wins on every shard, whichever reaches a shard first.
    pub async fn pause(self, topic: &str) -> Result<(i64, bool), RedisError> {
        let (seq, at, changed): (i64, i64, bool) = self.pause_word("pause", topic).await?;
        self.set_shards_paused(topic, true, seq).await?;
        Ok((at, changed))
    }

    /// Resumes `topic` on every shard (the hash first, with the resume's
    /// number). Shards with messages waiting ready wake the long polls of
    /// every node. Answers whether the topic was paused. A pause after it
    /// wins on every shard.
    pub async fn resume(self, topic: &str) -> Result<bool, RedisError> {
        let (seq, was): (i64, bool) = self.pause_word("resume", topic).await?;
        self.set_shards_paused(topic, false, seq).await?;
        Ok(was)
    }

    /// One call of pause_topic.lua: `op` is `pause`, `resume` or `read`.
    async fn pause_word<T: redis::FromRedisValue>(
        self,
        op: &str,
        topic: &str,
    ) -> Result<T, RedisError> {
        let cmd = evalsha(
            &self.scripts.pause_topic,
            &[self.keys.paused_topics(), self.keys.pause_seq()],
            &[op, topic, &now_ms().to_string()],
        );
        Ok(self
            .scripts
            .run("pause_topic", &mut self.con.clone(), &cmd)
            .await?)
    }

    async fn set_shards_paused(
        self,
        topic: &str,
        paused: bool,
        seq: i64,
    ) -> Result<(), RedisError> {
        let k = &self.keys;
        let mut pipe = redis::pipe();
        for shard in 0..k.shards() {
            pipe.add_command(evalsha(
                &self.scripts.pause,
                &[
                    k.paused(shard),
                    k.ready(shard, topic),
                    k.shard_pause_seq(shard),
                ],
                &[
                    topic,
                    if paused { "1" } else { "0" },
                    &k.ready_channel(shard),
                    &self.node,
                    &seq.to_string(),
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
    pub async fn paused_topics(self) -> Result<BTreeMap<String, i64>, RedisError> {
        Ok(self.con.clone().hgetall(self.keys.paused_topics()).await?)
    }

    /// Makes every shard's paused set follow the hash: run as a node
    /// starts, after a pause or resume cut short or a reshard. The hash is
    /// read with the number of the last pause or resume, and every shard
    /// is told the hash's state under that number: a pause or resume made
    /// after the reading has a higher one, so this undoes nothing newer,
    /// on any shard, at any moment.
    pub async fn sync_paused(self) -> Result<(), RedisError> {
        let mut con = self.con.clone();
        let read: Vec<String> = self.pause_word("read", "").await?;
        let seq: i64 = read.first().and_then(|s| s.parse().ok()).unwrap_or(0);
        let paused: BTreeSet<String> = read.iter().skip(1).step_by(2).cloned().collect();
        crate::faults::pause_here("sync_paused_slow").await;
        for topic in &paused {
            self.set_shards_paused(topic, true, seq).await?;
        }
        let mut stale = BTreeSet::new();
        for shard in 0..self.keys.shards() {
            let held: Vec<String> = con.smembers(self.keys.paused(shard)).await?;
            stale.extend(held.into_iter().filter(|t| !paused.contains(t)));
        }
        for topic in &stale {
            self.set_shards_paused(topic, false, seq).await?;
        }
        crate::faults::pause_here("sync_paused_slow").await;
        Ok(())
    }

    /// Each topic's ordered groups across shards: `None` for a topic
    /// with none due or handed out.
    pub async fn group_counts(
        self,
        topics: &[&str],
    ) -> Result<Vec<Option<delayq_proto::GroupCounts>>, RedisError> {
        if topics.is_empty() {
            return Ok(Vec::new());
        }
        // The shards' topics with groups first (one command a shard), then
        // the counts of those alone: topics without groups cost nothing more.
        let shards = self.keys.shards();
        let mut pipe = redis::pipe();
        for shard in 0..shards {
            pipe.smembers(self.keys.group_topics(shard));
        }
        let with_groups: Vec<BTreeSet<String>> = pipe.query_async(&mut self.con.clone()).await?;
        let mut asked = Vec::new();
        let mut pipe = redis::pipe();
        for (i, topic) in topics.iter().enumerate() {
            for (shard, here) in with_groups.iter().enumerate() {
                if here.contains(*topic) {
                    let shard = shard as u32;
                    pipe.hlen(self.keys.group_turns(shard, topic))
                        .scard(self.keys.groups_waiting(shard, topic))
                        .get(self.keys.held_count(shard, topic));
                    asked.push(i);
                }
            }
        }
        let mut out = vec![None; topics.len()];
        if asked.is_empty() {
            return Ok(out);
        }
        let counts: Vec<Option<i64>> = pipe.query_async(&mut self.con.clone()).await?;
        for (&i, s) in asked.iter().zip(counts.chunks(3)) {
            let c: &mut delayq_proto::GroupCounts = out[i].get_or_insert_with(Default::default);
            c.active += s[0].unwrap_or(0);
            c.waiting += s[1].unwrap_or(0);
            c.held += s[2].unwrap_or(0).max(0);
        }
        Ok(out
            .into_iter()
            .map(|c| c.filter(|c| c.active > 0))
            .collect())
    }

    /// The due time (ms) of each topic's oldest message waiting ready,
    /// across shards (`None`: nothing waits).
    pub async fn oldest_ready(self, topics: &[&str]) -> Result<Vec<Option<i64>>, RedisError> {
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

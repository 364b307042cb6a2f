//! The shards' clocks and fences, read in one pipeline (probe.lua on each
//! shard's keys, so on a Redis Cluster each answer comes from the shard's
//! own master): see [`crate::clock`] and `{P:s}:applied` in
//! [`crate::redis::keys`].

use std::time::Instant;

use super::handle::RedisSchedule;
use crate::error::RedisError;
use crate::redis::scripts::evalsha;

/// What the probe read of one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardProbe {
    pub shard: u32,
    /// The data set serving the shard: its Redis process's run id and
    /// replication id (`RUN/REPLID`).
    pub run: String,
    /// The process on which the journal's ends were last known applied
    /// to the shard (None: never).
    pub applied: Option<String>,
}

impl ShardProbe {
    /// Whether the shard hands nothing out until the journal's ends are
    /// re-applied (the process serving it is not the one named).
    pub fn fenced(&self) -> bool {
        self.applied.as_deref() != Some(self.run.as_str())
    }
}

impl RedisSchedule {
    /// Reads every shard's clock (noted per master, [`crate::clock`]) and
    /// fence.
    pub async fn probe(&self) -> Result<Vec<ShardProbe>, RedisError> {
        let k = &self.keys;
        let mut pipe = redis::pipe();
        for shard in 0..k.shards() {
            pipe.add_command(evalsha(
                &self.scripts.probe,
                &[k.applied(shard)],
                &[] as &[String],
            ));
        }
        let sent = Instant::now();
        let replies: Vec<(i64, i64, String, String)> = self
            .scripts
            .run_pipe("probe", &mut self.con.clone(), &pipe)
            .await?;
        let mut out = Vec::with_capacity(replies.len());
        for (shard, (secs, micros, run, applied)) in (0..k.shards()).zip(replies) {
            crate::clock::observe_master(&run, Some(shard), sent, secs * 1_000_000 + micros);
            out.push(ShardProbe {
                shard,
                run,
                applied: (!applied.is_empty()).then_some(applied),
            });
        }
        Ok(out)
    }

    /// Lifts `shard`'s fence: the journal's ends were re-applied on the
    /// process `run`. False when another process serves the shard by now.
    pub async fn confirm_applied(&self, shard: u32, run: &str) -> Result<bool, RedisError> {
        let cmd = evalsha(
            &self.scripts.confirm,
            &[self.keys.applied(shard)],
            &[run.to_string(), crate::clock::now_ms_for(shard).to_string()],
        );
        let named: i64 = self
            .scripts
            .run("confirm", &mut self.con.clone(), &cmd)
            .await?;
        Ok(named == 1)
    }
}

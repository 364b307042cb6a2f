//! The Lua scripts, one per atomic step, loaded with `include_str!` and run by
//! SHA. When Redis has forgotten them (a restart, `SCRIPT FLUSH`) they are
//! loaded again and the call is retried once (on a Redis Cluster, `SCRIPT
//! LOAD` goes to every master, so a replica promoted by a failover learns
//! them at the first NOSCRIPT).

use std::time::Instant;

use crate::redis::conn::Conn;

use redis::{
    Cmd, ErrorKind, FromRedisValue, Pipeline, RedisResult, Script, ServerErrorKind, ToRedisArgs,
};

use crate::metrics::metrics;

pub struct Scripts {
    pub schedule: Script,
    pub tick: Script,
    pub claim: Script,
    pub take: Script,
    pub ack: Script,
    pub advance: Script,
    pub nack: Script,
    pub cancel: Script,
    pub lease: Script,
    pub reserve: Script,
    pub purge: Script,
    pub replace: Script,
    pub takeover: Script,
    pub end_absent: Script,
    pub pause: Script,
    pub reschedule: Script,
    pub probe: Script,
    pub confirm: Script,
    pub pause_topic: Script,
    pub spill_trim: Script,
    pub forecast: Script,
}

impl Scripts {
    /// The scripts; `sharded` (a Redis Cluster) publishes with SPUBLISH on
    /// the shard's own channels, so a notice stays on the shard's master
    /// and its replicas instead of crossing the whole cluster bus.
    pub fn new(sharded: bool) -> Self {
        let lua = |parts: &[&str]| {
            let source = parts.concat();
            Script::new(&if sharded {
                sharded_publish(&source)
            } else {
                source
            })
        };
        Scripts {
            schedule: lua(&[
                include_str!("lua/clock.lua"),
                include_str!("lua/bulk.lua"),
                include_str!("lua/moved.lua"),
                include_str!("lua/schedule.lua"),
            ]),
            tick: lua(&[
                include_str!("lua/clock.lua"),
                include_str!("lua/bulk.lua"),
                include_str!("lua/group.lua"),
                include_str!("lua/retry.lua"),
                include_str!("lua/fence.lua"),
                include_str!("lua/tick.lua"),
            ]),
            claim: lua(&[
                include_str!("lua/clock.lua"),
                include_str!("lua/bulk.lua"),
                include_str!("lua/limit.lua"),
                include_str!("lua/fence.lua"),
                include_str!("lua/claim.lua"),
            ]),
            take: lua(&[
                include_str!("lua/clock.lua"),
                include_str!("lua/bulk.lua"),
                include_str!("lua/limit.lua"),
                include_str!("lua/fence.lua"),
                include_str!("lua/take.lua"),
            ]),
            ack: lua(&[
                include_str!("lua/clock.lua"),
                include_str!("lua/bulk.lua"),
                include_str!("lua/group.lua"),
                include_str!("lua/ack.lua"),
            ]),
            advance: lua(&[
                include_str!("lua/clock.lua"),
                include_str!("lua/group.lua"),
                include_str!("lua/advance.lua"),
            ]),
            nack: lua(&[
                include_str!("lua/clock.lua"),
                include_str!("lua/group.lua"),
                include_str!("lua/retry.lua"),
                include_str!("lua/nack.lua"),
            ]),
            cancel: lua(&[
                include_str!("lua/clock.lua"),
                include_str!("lua/group.lua"),
                include_str!("lua/cancel.lua"),
            ]),
            lease: lua(&[include_str!("lua/lease.lua")]),
            reserve: lua(&[include_str!("lua/reserve.lua")]),
            purge: lua(&[
                include_str!("lua/clock.lua"),
                include_str!("lua/group.lua"),
                include_str!("lua/purge.lua"),
            ]),
            replace: lua(&[
                include_str!("lua/group.lua"),
                include_str!("lua/replace.lua"),
            ]),
            takeover: lua(&[include_str!("lua/takeover.lua")]),
            end_absent: lua(&[
                include_str!("lua/clock.lua"),
                include_str!("lua/end_absent.lua"),
            ]),
            pause: lua(&[include_str!("lua/pause.lua")]),
            reschedule: lua(&[
                include_str!("lua/clock.lua"),
                include_str!("lua/moved.lua"),
                include_str!("lua/group.lua"),
                include_str!("lua/reschedule.lua"),
            ]),
            probe: lua(&[include_str!("lua/fence.lua"), include_str!("lua/probe.lua")]),
            confirm: lua(&[
                include_str!("lua/fence.lua"),
                include_str!("lua/confirm.lua"),
            ]),
            pause_topic: lua(&[include_str!("lua/pause_topic.lua")]),
            spill_trim: lua(&[include_str!("lua/spill_trim.lua")]),
            forecast: lua(&[include_str!("lua/forecast.lua")]),
        }
    }
}

/// `source` publishing with SPUBLISH wherever it used PUBLISH.
fn sharded_publish(source: &str) -> String {
    source.replace("redis.call('PUBLISH'", "redis.call('SPUBLISH'")
}

/// One EVALSHA call, to run alone or inside a pipeline.
pub fn evalsha<K: ToRedisArgs, A: ToRedisArgs>(script: &Script, keys: &[K], args: &[A]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len());
    for k in keys {
        cmd.arg(k);
    }
    for a in args {
        cmd.arg(a);
    }
    cmd
}

fn is_noscript(err: &redis::RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

impl Scripts {
    fn all(&self) -> [&Script; 21] {
        [
            &self.schedule,
            &self.tick,
            &self.claim,
            &self.take,
            &self.ack,
            &self.advance,
            &self.nack,
            &self.cancel,
            &self.lease,
            &self.reserve,
            &self.purge,
            &self.replace,
            &self.takeover,
            &self.end_absent,
            &self.pause,
            &self.reschedule,
            &self.probe,
            &self.confirm,
            &self.pause_topic,
            &self.spill_trim,
            &self.forecast,
        ]
    }

    pub async fn load(&self, con: &mut Conn) -> RedisResult<()> {
        for s in self.all() {
            s.prepare_invoke().load_async(con).await?;
        }
        con.remember_scripts(self.all());
        Ok(())
    }

    /// Runs one call of the script named `name` (timed under that name).
    pub async fn run<T: FromRedisValue>(
        &self,
        name: &'static str,
        con: &mut Conn,
        cmd: &Cmd,
    ) -> RedisResult<T> {
        let began = Instant::now();
        let result = match cmd.query_async(con).await {
            Err(e) if is_noscript(&e) => {
                self.load(con).await?;
                cmd.query_async(con).await
            }
            other => other,
        };
        metrics().script_took(name, began);
        result
    }

    /// Runs a pipeline of calls of the script named `name` (and plain
    /// commands), timed as one.
    pub async fn run_pipe<T: FromRedisValue>(
        &self,
        name: &'static str,
        con: &mut Conn,
        pipe: &Pipeline,
    ) -> RedisResult<T> {
        let began = Instant::now();
        // A call that answered NOSCRIPT did not run: the connection loads
        // the scripts again and sends only those calls again (redis::conn);
        // sending the whole pipeline again would run twice what ran.
        let result = pipe.query_async(con).await;
        metrics().script_took(name, began);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_a_cluster_every_publish_is_sharded() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/redis/lua");
        let mut publishing = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let source = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            let sharded = sharded_publish(&source);
            // However a script spells a call, none publishes unsharded.
            let plain = |s: &str| s.matches("PUBLISH").count() - s.matches("SPUBLISH").count();
            assert_eq!(plain(&sharded), 0, "{source}");
            publishing += (plain(&source) > 0) as usize;
        }
        assert!(publishing >= 5, "{publishing} scripts publish");
        let (plain, sharded) = (Scripts::new(false), Scripts::new(true));
        assert_ne!(plain.tick.get_hash(), sharded.tick.get_hash());
        assert_eq!(plain.claim.get_hash(), sharded.claim.get_hash());
    }
}

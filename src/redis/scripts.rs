//! The Lua scripts, one per atomic step, loaded with `include_str!` and run by
//! SHA. When Redis has forgotten them (a restart, `SCRIPT FLUSH`) they are
//! loaded again and the call is retried once.

use std::time::Instant;

use redis::aio::ConnectionManager;

use redis::{
    Cmd, ErrorKind, FromRedisValue, Pipeline, RedisResult, Script, ServerErrorKind, ToRedisArgs,
};

use crate::metrics::metrics;

pub struct Scripts {
    pub schedule: Script,
    pub tick: Script,
    pub claim: Script,
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
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts {
            schedule: Script::new(concat!(
                include_str!("lua/clock.lua"),
                include_str!("lua/schedule.lua")
            )),
            tick: Script::new(concat!(
                include_str!("lua/clock.lua"),
                include_str!("lua/retry.lua"),
                include_str!("lua/tick.lua")
            )),
            claim: Script::new(concat!(
                include_str!("lua/clock.lua"),
                include_str!("lua/claim.lua")
            )),
            ack: Script::new(concat!(
                include_str!("lua/clock.lua"),
                include_str!("lua/ack.lua")
            )),
            advance: Script::new(concat!(
                include_str!("lua/clock.lua"),
                include_str!("lua/advance.lua")
            )),
            nack: Script::new(concat!(
                include_str!("lua/clock.lua"),
                include_str!("lua/retry.lua"),
                include_str!("lua/nack.lua")
            )),
            cancel: Script::new(concat!(
                include_str!("lua/clock.lua"),
                include_str!("lua/cancel.lua")
            )),
            lease: Script::new(include_str!("lua/lease.lua")),
            reserve: Script::new(include_str!("lua/reserve.lua")),
            purge: Script::new(concat!(
                include_str!("lua/clock.lua"),
                include_str!("lua/purge.lua")
            )),
            replace: Script::new(include_str!("lua/replace.lua")),
            takeover: Script::new(include_str!("lua/takeover.lua")),
            end_absent: Script::new(concat!(
                include_str!("lua/clock.lua"),
                include_str!("lua/end_absent.lua")
            )),
        }
    }
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
    fn all(&self) -> [&Script; 13] {
        [
            &self.schedule,
            &self.tick,
            &self.claim,
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
        ]
    }

    pub async fn load(&self, con: &mut ConnectionManager) -> RedisResult<()> {
        for s in self.all() {
            s.prepare_invoke().load_async(con).await?;
        }
        Ok(())
    }

    /// Runs one call of the script named `name` (timed under that name).
    pub async fn run<T: FromRedisValue>(
        &self,
        name: &'static str,
        con: &mut ConnectionManager,
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
        con: &mut ConnectionManager,
        pipe: &Pipeline,
    ) -> RedisResult<T> {
        let began = Instant::now();
        let result = match pipe.query_async(con).await {
            Err(e) if is_noscript(&e) => {
                self.load(con).await?;
                pipe.query_async(con).await
            }
            other => other,
        };
        metrics().script_took(name, began);
        result
    }
}

//! The schedule's handle: the connection, the keys and the scripts every
//! concern of the schedule works with, this node's settings (its id, the
//! horizon, the topics' limits), one script call per shard, and the
//! windows that guard a reading (tombstones, stale readings).

use std::collections::BTreeMap;
use std::sync::Arc;

use redis::{FromRedisValue, Script};

use crate::error::RedisError;
use crate::limit::Limit;
use crate::message::MessageId;
use crate::redis::conn::Conn;
use crate::redis::keys::Keys;
use crate::redis::scripts::{evalsha, Scripts};

/// A handle on one concern of the schedule: `$name<'a>`, taken with
/// `RedisSchedule::$take()`, reading the schedule's connection, keys and
/// scripts through `Deref`.
macro_rules! schedule_handle {
    ($(#[$doc:meta])* $name:ident, $take:ident, $short:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub struct $name<'a>(&'a $crate::redis::schedule::handle::RedisSchedule);

        impl $crate::redis::schedule::handle::RedisSchedule {
            #[doc = $short]
            pub fn $take(&self) -> $name<'_> {
                $name(self)
            }
        }

        impl std::ops::Deref for $name<'_> {
            type Target = $crate::redis::schedule::handle::RedisSchedule;

            fn deref(&self) -> &Self::Target {
                self.0
            }
        }
    };
}
pub(in crate::redis) use schedule_handle;

/// The replies of one script call per shard: each with the indexes of its
/// items, `None` where that shard's call failed; `failed` is the first
/// failure.
pub struct PerShard<T> {
    pub replies: Vec<(Vec<usize>, Option<T>)>,
    pub failed: Option<RedisError>,
}

#[derive(Clone)]
pub struct RedisSchedule {
    pub(in crate::redis) con: Conn,
    pub(in crate::redis) keys: Keys,
    pub(in crate::redis) scripts: Arc<Scripts>,
    /// This node's id, named on the ready notifications it publishes.
    pub(in crate::redis) node: Arc<str>,
    /// Messages due further ahead than this (ms) are left in the journal
    /// (0: none is); see the server's `horizon`.
    horizon_ms: i64,
    /// Rate limits and concurrency caps by topic ([`crate::limit`]).
    limits: Arc<BTreeMap<String, Limit>>,
}

/// How long an acked or cancelled message's tombstone keeps a restore (or
/// a repeated push) from scheduling it again: far longer than a restore
/// takes between reading a journal page and writing it to Redis.
pub const TOMBSTONE_MS: i64 = 120_000;

/// [`TOMBSTONE_MS`], or the fault `tombstone_ms`'s (see [`crate::faults`]).
pub fn tombstone_ms() -> i64 {
    crate::faults::millis("tombstone_ms").map_or(TOMBSTONE_MS, |ms| ms as i64)
}

/// The oldest reading (of the journal, or a push's commit) schedule.lua
/// writes into Redis: half the two minutes that tombstones and moves guard
/// a reading, so a process frozen between its reading and its write (a
/// stopped or paused machine) cannot bring back what was cancelled, nor
/// put a message at a time it was moved from, after those windows closed.
pub const STALE_READING_MS: i64 = TOMBSTONE_MS / 2;

/// [`STALE_READING_MS`]: half of [`tombstone_ms`].
pub fn stale_reading_ms() -> i64 {
    tombstone_ms() / 2
}

/// How long a node's word that its journal is behind counts.
pub const BEHIND_FRESH_MS: i64 = 5_000;

impl RedisSchedule {
    pub async fn new(con: Conn, keys: Keys, node: &str) -> Result<Self, RedisError> {
        let scripts = Arc::new(Scripts::new(con.is_cluster()));
        let mut c = con.clone();
        scripts.load(&mut c).await?;
        Ok(RedisSchedule {
            con,
            keys,
            scripts,
            node: node.into(),
            horizon_ms: 0,
            limits: Arc::default(),
        })
    }

    /// The same schedule, handing topics out within these limits (by
    /// topic).
    pub fn with_limits(mut self, limits: BTreeMap<String, Limit>) -> RedisSchedule {
        self.limits = Arc::new(limits);
        self
    }

    /// The limits, by topic.
    pub fn limits(&self) -> &BTreeMap<String, Limit> {
        &self.limits
    }

    /// `topic`'s limits (zeros: none).
    pub fn limit(&self, topic: &str) -> Limit {
        self.limits.get(topic).copied().unwrap_or_default()
    }

    /// The same schedule, leaving messages due further ahead than
    /// `horizon` in the journal (zero: none).
    pub fn with_horizon(mut self, horizon: std::time::Duration) -> RedisSchedule {
        self.horizon_ms = horizon.as_millis().min(i64::MAX as u128) as i64;
        self
    }

    /// The horizon (ms; 0 when every message goes to Redis when pushed).
    pub fn horizon_ms(&self) -> i64 {
        self.horizon_ms
    }

    /// Is a message due at `due` (ms) beyond the horizon at `now`, so it
    /// waits in the journal alone?
    pub fn beyond_horizon(&self, due: i64, now: i64) -> bool {
        self.horizon_ms > 0 && due > now.saturating_add(self.horizon_ms)
    }

    /// The same schedule over another connection: work that sends large
    /// pipelines (the reconciler) takes its own, so the replies the shard
    /// scans wait for do not queue behind its replies on one socket.
    pub fn with_connection(&self, con: Conn) -> RedisSchedule {
        RedisSchedule {
            con,
            ..self.clone()
        }
    }

    /// The shared, self-reconnecting connection (for leases and one-off commands).
    pub fn connection(&self) -> Conn {
        self.con.clone()
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// A Redis Cluster: each shard's keys live in their own slot, so no
    /// script spans shards.
    pub fn is_cluster(&self) -> bool {
        self.con.is_cluster()
    }

    /// Indexes of `ids` grouped by their shard, for one script call per
    /// shard.
    pub(crate) fn by_shard(
        &self,
        ids: impl Iterator<Item = MessageId>,
    ) -> BTreeMap<u32, Vec<usize>> {
        let mut by_shard: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, id) in ids.enumerate() {
            by_shard.entry(self.keys.shard_of(id)).or_default().push(i);
        }
        by_shard
    }

    /// One call of `script` per shard among `ids`, all in one pipeline
    /// timed as `name`: `call(shard, idx)` gives the keys and arguments of
    /// the call for the items at `idx` (indexes into `ids`). Each call's
    /// reply comes back with its indexes.
    pub(crate) async fn per_shard<T: FromRedisValue>(
        &self,
        name: &'static str,
        script: &Script,
        ids: impl Iterator<Item = MessageId>,
        mut call: impl FnMut(u32, &[usize]) -> (Vec<String>, Vec<String>),
    ) -> Result<Vec<(Vec<usize>, T)>, RedisError> {
        let by_shard = self.by_shard(ids);
        let mut pipe = redis::pipe();
        for (&shard, idx) in &by_shard {
            let (keys, args) = call(shard, idx);
            pipe.add_command(evalsha(script, &keys, &args));
        }
        let replies: Vec<T> = self
            .scripts
            .run_pipe(name, &mut self.con.clone(), &pipe)
            .await?;
        Ok(by_shard.into_values().zip(replies).collect())
    }

    /// [`Self::per_shard`], where each shard's call may fail on its own: on
    /// a Redis Cluster each shard's call goes to its own master, and one
    /// master down (or timing out) leaves the replies of the calls that
    /// ran on the others, which the caller must still learn (a nack that
    /// ran there set a retry time the journal must record). On one Redis
    /// the pipeline runs or fails as a whole.
    pub(crate) async fn per_shard_each<T: FromRedisValue>(
        &self,
        name: &'static str,
        script: &Script,
        ids: impl Iterator<Item = MessageId>,
        mut call: impl FnMut(u32, &[usize]) -> (Vec<String>, Vec<String>),
    ) -> Result<PerShard<T>, RedisError> {
        if !self.is_cluster() {
            let replies = self.per_shard(name, script, ids, call).await?;
            return Ok(PerShard {
                replies: replies.into_iter().map(|(idx, r)| (idx, Some(r))).collect(),
                failed: None,
            });
        }
        let by_shard = self.by_shard(ids);
        let calls = by_shard.iter().map(|(&shard, idx)| {
            let (keys, args) = call(shard, idx);
            let cmd = evalsha(script, &keys, &args);
            async move {
                self.scripts
                    .run::<T>(name, &mut self.con.clone(), &cmd)
                    .await
            }
        });
        let results = futures::future::join_all(calls).await;
        let mut out = PerShard {
            replies: Vec::with_capacity(results.len()),
            failed: None,
        };
        for (idx, result) in by_shard.into_values().zip(results) {
            match result {
                Ok(r) => out.replies.push((idx, Some(r))),
                Err(e) => {
                    out.failed.get_or_insert(e.into());
                    out.replies.push((idx, None));
                }
            }
        }
        Ok(out)
    }
}

/// A script's error, with a `STALE_EPOCH <stored> ...` refusal (tick.lua,
/// schedule.lua) read as [`RedisError::StaleEpoch`] of `shard`.
pub(in crate::redis) fn fenced(e: redis::RedisError, shard: u32) -> RedisError {
    if e.code() != Some("STALE_EPOCH") {
        return e.into();
    }
    let stored = e
        .detail()
        .and_then(|d| d.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(i64::MAX);
    RedisError::StaleEpoch { shard, stored }
}

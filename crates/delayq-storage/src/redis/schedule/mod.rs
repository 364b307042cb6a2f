//! The schedule's operations on Redis, each one script call (or one pipeline
//! of them) on one shard's keys. Any node may run any of them: ownership only
//! decides who runs [`Delivery::tick`].
//!
//! [`RedisSchedule`] holds the connection, the keys and the scripts, and
//! schedules messages (here, with the fence's checks in `fence.rs` and
//! reschedules in `moves.rs`). Every other concern is a handle of its own,
//! small enough to read at once, taken from it: [`RedisSchedule::delivery`]
//! (handing out, acks, nacks, cancels), [`RedisSchedule::topics`] (pauses,
//! the oldest ready), [`RedisSchedule::inspect`] (where messages are,
//! records, the restore cursor), [`RedisSchedule::ownership`] (epochs,
//! leases, the data set's markers), [`RedisSchedule::journal_sync`] (what
//! Redis keeps for the journal) and [`RedisSchedule::records`] (small shared
//! records, shard counts, the clock probe, ping).

/// A handle on one concern of the schedule: `$name<'a>`, taken with
/// `RedisSchedule::$take()`, reading the schedule's connection, keys and
/// scripts through `Deref`.
macro_rules! schedule_handle {
    ($(#[$doc:meta])* $name:ident, $take:ident, $short:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub struct $name<'a>(&'a $crate::redis::schedule::RedisSchedule);

        impl $crate::redis::schedule::RedisSchedule {
            #[doc = $short]
            pub fn $take(&self) -> $name<'_> {
                $name(self)
            }
        }

        impl std::ops::Deref for $name<'_> {
            type Target = $crate::redis::schedule::RedisSchedule;

            fn deref(&self) -> &Self::Target {
                self.0
            }
        }
    };
}
pub(crate) use schedule_handle;

mod deliver;
mod fence;
mod journal_sync;
mod moves;
mod outcomes;
mod ownership;
mod records;
mod topics;

pub use deliver::Delivery;
pub use fence::ShardProbe;
pub use journal_sync::JournalSync;
pub use moves::RedisMove;
pub use ownership::Ownership;
pub use records::Records;
pub use topics::TopicState;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::limit::Limit;
use crate::redis::Conn;
use redis::{FromRedisValue, Script};

use crate::error::RedisError;
use crate::message::{now_ms, Message, MessageId};
use crate::redis::keys::{score, Keys};
use crate::redis::record;
use crate::redis::scripts::{evalsha, Scripts};
pub use outcomes::*;

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
    node: Arc<str>,
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

    /// Adds messages (with their delivery counts) to their shards' delay
    /// zsets; a message Redis holds already, or that was finished lately, is
    /// left as it is. Returns what happened to each, in input order.
    pub async fn schedule(
        &self,
        messages: &[(Message, i32)],
        read_at: i64,
    ) -> Result<Vec<Scheduled>, RedisError> {
        let replies: Vec<(Vec<usize>, Vec<i64>)> = self
            .per_shard(
                "schedule",
                &self.scripts.schedule,
                messages.iter().map(|(m, _)| m.id),
                |shard, idx| {
                    let items = idx.iter().map(|&i| &messages[i]);
                    (
                        self.schedule_keys(shard),
                        self.schedule_args(shard, 0, read_at, items),
                    )
                },
            )
            .await
            .map_err(stale_reading)?;
        let mut outcome = vec![Scheduled::Present; messages.len()];
        for (idx, flags) in replies {
            for (i, o) in idx.into_iter().zip(outcomes_of(flags)) {
                outcome[i] = o;
            }
        }
        Ok(outcome)
    }

    /// [`RedisSchedule::schedule`] for messages of one shard, by its owner
    /// holding `epoch`: refused (and nothing scheduled) once the shard's
    /// stored epoch is above it, so a deposed owner cannot bring back what
    /// the new one delivered.
    pub async fn schedule_fenced(
        &self,
        shard: u32,
        epoch: i64,
        read_at: i64,
        messages: &[(Message, i32)],
    ) -> Result<Vec<Scheduled>, RedisError> {
        let cmd = evalsha(
            &self.scripts.schedule,
            &self.schedule_keys(shard),
            &self.schedule_args(shard, epoch.max(1), read_at, messages.iter()),
        );
        let flags: Vec<i64> = match self
            .scripts
            .run("schedule", &mut self.con.clone(), &cmd)
            .await
        {
            Err(e) => return Err(stale_reading(fenced(e, shard))),
            Ok(v) => v,
        };
        Ok(outcomes_of(flags))
    }

    fn schedule_keys(&self, shard: u32) -> Vec<String> {
        let k = &self.keys;
        vec![
            k.delay(shard),
            k.messages(shard),
            k.finished(shard),
            k.epoch(shard),
            k.moved(shard),
            k.moved_at(shard),
        ]
    }

    fn schedule_args<'a>(
        &self,
        shard: u32,
        epoch: i64,
        read_at: i64,
        messages: impl Iterator<Item = &'a (Message, i32)>,
    ) -> Vec<String> {
        // The reading's time on the clock of the shard's master (the
        // callers stamp it on the latest master's).
        let read_at = if read_at > 0 {
            read_at - (crate::clock::now_ms() - crate::clock::now_ms_for(shard)).max(0)
        } else {
            0
        };
        let mut args = vec![
            self.keys.wake_channel(shard),
            epoch.to_string(),
            read_at.to_string(),
            stale_reading_ms().to_string(),
        ];
        for (m, attempts) in messages {
            args.push(m.id.to_string());
            args.push((score(m.due_time, m.priority) as i64).to_string());
            args.push(record::encode(m, *attempts));
        }
        args
    }

    /// Schedules messages brought back from `Dead` (attempts from 0): the
    /// tombstones their deaths left go first.
    pub async fn schedule_requeued(
        &self,
        messages: &[Message],
    ) -> Result<Vec<Scheduled>, RedisError> {
        let mut pipe = redis::pipe();
        for m in messages {
            let shard = self.keys.shard_of(m.id);
            pipe.zrem(self.keys.finished(shard), m.id.to_string())
                .ignore()
                .hdel(self.keys.unjournaled(shard), m.id.to_string())
                .ignore();
        }
        let _: () = pipe.query_async(&mut self.con.clone()).await?;
        let batch: Vec<(Message, i32)> = messages.iter().map(|m| (m.clone(), 0)).collect();
        self.schedule(&batch, now_ms()).await
    }

    /// Which of these messages does Redis hold already?
    pub async fn present(&self, ids: &[MessageId]) -> Result<Vec<bool>, RedisError> {
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.hexists(self.keys.messages(self.keys.shard_of(*id)), id.to_string());
        }
        Ok(pipe.query_async(&mut self.con.clone()).await?)
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

/// A refusal of schedule.lua's for a reading older than
/// [`STALE_READING_MS`], read as [`RedisError::StaleReading`].
fn stale_reading(e: RedisError) -> RedisError {
    match e {
        RedisError::Redis(r) if r.code() == Some("STALE_READING") => RedisError::StaleReading {
            age_ms: r
                .detail()
                .and_then(|d| d.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
        },
        e => e,
    }
}

/// schedule.lua's flags (then the time it ran) as outcomes.
fn outcomes_of(mut flags: Vec<i64>) -> Vec<Scheduled> {
    let at = flags.pop().unwrap_or_else(now_ms);
    flags
        .into_iter()
        .map(|flag| match flag {
            1 => Scheduled::Added { at },
            2 => Scheduled::Finished,
            _ => Scheduled::Present,
        })
        .collect()
}

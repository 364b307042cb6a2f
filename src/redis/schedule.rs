//! The schedule's operations on Redis, each one script call (or one pipeline
//! of them) on one shard's keys. Any node may run any of them: ownership only
//! decides who runs [`RedisSchedule::tick`].

use std::collections::BTreeMap;
use std::sync::Arc;

use redis::aio::ConnectionManager;
use redis::Value;

use crate::error::ShardError;
use crate::message::{now_ms, Message, MessageId, Receipt, Status};
use crate::redis::keys::{due_of_score, score, Keys};
use crate::redis::record;
use crate::redis::scripts::{evalsha, Scripts};

#[derive(Clone)]
pub struct RedisSchedule {
    pub(in crate::redis) con: ConnectionManager,
    pub(in crate::redis) keys: Keys,
    pub(in crate::redis) scripts: Arc<Scripts>,
    /// This node's id, named on the ready notifications it publishes.
    node: Arc<str>,
}

/// One shard as `GET /admin/cluster` shows it.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardCounts {
    pub delaying: i64,
    pub ready: i64,
    pub in_flight: i64,
    /// The stored fencing epoch (0: none yet).
    pub epoch: i64,
    /// Due time (epoch ms) of the earliest scheduled message, when it is
    /// already due: the shard is behind.
    pub oldest_overdue: Option<i64>,
}

/// How long an acked or cancelled message's tombstone keeps a restore (or
/// a repeated push) from scheduling it again: far longer than a restore
/// takes between reading a journal page and writing it to Redis.
pub const TOMBSTONE_MS: i64 = 120_000;

/// How long a node's word that its journal is behind counts.
pub const BEHIND_FRESH_MS: i64 = 5_000;

/// What to do with a lease (see lease.lua).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseOp {
    Acquire,
    Renew,
    Release,
}

/// What scheduling did with one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduled {
    /// Added to its delay zset; `at` is when (Redis's clock, ms).
    Added { at: i64 },
    /// Redis holds it already (scheduled, ready or in flight).
    Present,
    /// It was acked or cancelled lately (a tombstone); left out.
    Finished,
}

/// What one scan step did.
#[derive(Debug, Default)]
pub struct TickResult {
    /// (id, topic) moved from the delay zset to a ready queue.
    pub moved: Vec<(MessageId, String)>,
    /// Messages whose ack deadline passed: failed deliveries.
    pub failed: Vec<FailedDelivery>,
    /// Due time (ms) of the earliest message still scheduled.
    pub next_due: Option<i64>,
    /// Earliest ack deadline (ms) still running.
    pub next_deadline: Option<i64>,
    /// When the scan ran, by Redis's clock (ms): the time its moves are
    /// recorded with. Every script that changes a message's status runs on
    /// the shard's Redis, one at a time, so stamps from its clock follow the
    /// order the changes happened, whichever node made them.
    pub at: i64,
}

/// Where a failed delivery (a nack, or an ack deadline that passed) left a
/// message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Ready again at once.
    Ready,
    /// Scheduled again, due at this time (ms).
    Delaying { due: i64 },
    /// That was its last attempt.
    Dead,
    /// A recurring message whose series was cancelled during this
    /// delivery: it ends here.
    Stopped,
}

impl AfterFailure {
    pub fn status(self) -> Status {
        match self {
            AfterFailure::Ready => Status::Ready,
            AfterFailure::Delaying { .. } => Status::Delaying,
            AfterFailure::Dead => Status::Dead,
            AfterFailure::Stopped => Status::Deleted,
        }
    }

    fn parse(outcome: &str, due: i64) -> Option<Self> {
        Some(match outcome {
            "ready" => AfterFailure::Ready,
            "delaying" => AfterFailure::Delaying { due },
            "dead" => AfterFailure::Dead,
            "stopped" => AfterFailure::Stopped,
            _ => return None,
        })
    }
}

/// One failed delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedDelivery {
    pub id: MessageId,
    pub topic: String,
    /// Deliveries so far (the failed one included).
    pub attempts: i32,
    pub then: AfterFailure,
}

/// What a nack did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NackResult {
    /// The delivery failed; `at` is when, by Redis's clock (ms).
    Failed {
        attempts: i32,
        then: AfterFailure,
        at: i64,
        topic: String,
    },
    /// Scheduled or ready: not handed out.
    NotInFlight,
    /// The receipt names an earlier delivery; nothing changed. `state`:
    /// where the message is now.
    Stale { state: Status },
    /// This shard does not hold it.
    Absent,
}

/// A message handed to a consumer.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub shard: u32,
    /// When it was handed out, by Redis's clock (ms).
    pub at: i64,
    pub attempts: i32,
    pub message: Message,
    /// The record as the claim left it (what [`RedisSchedule::advance_many`]
    /// checks is unchanged).
    pub record: String,
}

/// What an ack did; with the message's delivery count where Redis held it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckResult {
    Acked {
        attempts: i32,
    },
    /// A recurring message, handed out: nothing changed yet; the caller
    /// moves it on with [`RedisSchedule::advance_many`], giving back this
    /// record.
    Recurring {
        attempts: i32,
        record: String,
    },
    /// Not handed out; with its record when it is recurring (an ack of an
    /// earlier occurrence finds it waiting for its next one).
    NotInFlight {
        recurring: Option<String>,
    },
    /// The receipt names another delivery than the one in hand (or the
    /// last one); nothing changed. `state`: where the message is now.
    Stale {
        state: Status,
        attempts: i32,
        recurring: Option<String>,
    },
    /// Not held, and acked or cancelled lately (a tombstone); with the
    /// end while the journal has not recorded it yet.
    Finished(Option<crate::redis::inspect::End>),
    Absent,
}

/// What moving a recurring message on did (see advance.lua).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advanced {
    /// Scheduled for its next occurrence; `at` by Redis's clock (ms).
    Next { at: i64 },
    /// Its series ended with this occurrence: it left Redis.
    Ended { at: i64 },
    /// The record changed since the ack read it: ack again.
    Changed,
}

/// What a cancel did; with the message's delivery count where Redis held it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelResult {
    Deleted {
        attempts: i32,
    },
    /// A recurring message in flight: its series ends with this delivery.
    Stopped {
        attempts: i32,
    },
    InFlight,
    /// Not held: this shard ended it lately and the journal has not
    /// recorded the end yet.
    Finished(crate::redis::inspect::End),
    Absent,
}

fn ids_and_topics(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(items) => items.clone(),
        _ => Vec::new(),
    }
}

pub(in crate::redis) fn text(v: &Value) -> Result<String, ShardError> {
    redis::from_redis_value_ref::<String>(v).map_err(|e| ShardError::BadRecord(e.to_string()))
}

pub(crate) fn opt_score(v: &Value) -> Option<f64> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        Value::Int(i) => Some(*i as f64),
        Value::Double(d) => Some(*d),
        _ => None,
    }
}

/// The time a script ran (Redis's clock, ms), its reply's last element;
/// `default` when it is not there.
fn ran_at(reply: &mut Vec<Value>, default: i64) -> i64 {
    reply
        .pop()
        .and_then(|v| opt_score(&v))
        .map_or(default, |t| t as i64)
}

/// A receipt as the scripts compare it ('' for none). The fault
/// `ignore_receipts` (see [`crate::faults`]) drops it: the planted bug a
/// fault checker must catch.
fn receipt_arg(receipt: Option<Receipt>) -> String {
    match receipt {
        Some(r) if !crate::faults::on("ignore_receipts") => r.delivery(),
        _ => String::new(),
    }
}

/// The status a script's place name (`in_flight`, `ready`, `delaying`)
/// stands for.
fn place_status(place: &str) -> Status {
    match place {
        "in_flight" => Status::Consuming,
        "delaying" => Status::Delaying,
        _ => Status::Ready,
    }
}

fn parse_id(v: &Value) -> Result<MessageId, ShardError> {
    text(v)?.parse().map_err(ShardError::BadRecord)
}

impl RedisSchedule {
    pub async fn new(con: ConnectionManager, keys: Keys, node: &str) -> Result<Self, ShardError> {
        let scripts = Arc::new(Scripts::default());
        let mut c = con.clone();
        scripts.load(&mut c).await?;
        Ok(RedisSchedule {
            con,
            keys,
            scripts,
            node: node.into(),
        })
    }

    /// The same schedule over another connection: work that sends large
    /// pipelines (the reconciler) takes its own, so the replies the shard
    /// scans wait for do not queue behind its replies on one socket.
    pub fn with_connection(&self, con: ConnectionManager) -> RedisSchedule {
        RedisSchedule {
            con,
            ..self.clone()
        }
    }

    /// The shared, self-reconnecting connection (for leases and one-off commands).
    pub fn connection(&self) -> ConnectionManager {
        self.con.clone()
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
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

    /// Adds messages (with their delivery counts) to their shards' delay
    /// zsets; a message Redis holds already, or that was finished lately, is
    /// left as it is. Returns what happened to each, in input order.
    pub async fn schedule(
        &self,
        messages: &[(Message, i32)],
    ) -> Result<Vec<Scheduled>, ShardError> {
        let by_shard = self.by_shard(messages.iter().map(|(m, _)| m.id));
        let mut pipe = redis::pipe();
        for (&shard, idx) in &by_shard {
            let mut args: Vec<String> = Vec::with_capacity(idx.len() * 3 + 1);
            args.push(self.keys.wake_channel(shard));
            for &i in idx {
                let (m, attempts) = &messages[i];
                args.push(m.id.to_string());
                args.push((score(m.due_time, m.priority) as i64).to_string());
                args.push(record::encode(m, *attempts));
            }
            pipe.add_command(evalsha(
                &self.scripts.schedule,
                &[
                    self.keys.delay(shard),
                    self.keys.messages(shard),
                    self.keys.finished(shard),
                ],
                &args,
            ));
        }
        let replies: Vec<Vec<i64>> = self
            .scripts
            .run_pipe("schedule", &mut self.con.clone(), &pipe)
            .await?;
        let mut outcome = vec![Scheduled::Present; messages.len()];
        for ((_, idx), mut flags) in by_shard.iter().zip(replies) {
            let at = flags.pop().unwrap_or_else(now_ms);
            for (&i, flag) in idx.iter().zip(flags) {
                outcome[i] = match flag {
                    1 => Scheduled::Added { at },
                    2 => Scheduled::Finished,
                    _ => Scheduled::Present,
                };
            }
        }
        Ok(outcome)
    }

    /// Schedules messages brought back from `Dead` (attempts from 0): the
    /// tombstones their deaths left go first.
    pub async fn schedule_requeued(
        &self,
        messages: &[Message],
    ) -> Result<Vec<Scheduled>, ShardError> {
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
        self.schedule(&batch).await
    }

    /// Which of these messages does Redis hold already?
    pub async fn present(&self, ids: &[MessageId]) -> Result<Vec<bool>, ShardError> {
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.hexists(self.keys.messages(self.keys.shard_of(*id)), id.to_string());
        }
        Ok(pipe.query_async(&mut self.con.clone()).await?)
    }

    /// A standalone node's ownership token for a shard: one above the stored
    /// epoch (the first scan with it raises the stored value; see tick.lua).
    pub async fn next_epoch(&self, shard: u32) -> Result<i64, ShardError> {
        let stored: Option<i64> = redis::cmd("GET")
            .arg(self.keys.epoch(shard))
            .query_async(&mut self.con.clone())
            .await?;
        Ok(stored.unwrap_or(0) + 1)
    }

    /// Raises shard `shard`'s epoch from `stored` to `next` if it is still
    /// `stored` (takeover.lua): whether it did.
    pub async fn take_over(&self, shard: u32, stored: i64, next: i64) -> Result<bool, ShardError> {
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

    /// The ends these messages reached in Redis that the journal has not
    /// recorded yet (the shards' unjournaled hashes), in input order.
    pub async fn pending_ends(
        &self,
        ids: &[MessageId],
    ) -> Result<Vec<Option<crate::redis::inspect::End>>, ShardError> {
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.hget(
                self.keys.unjournaled(self.keys.shard_of(*id)),
                id.to_string(),
            );
        }
        let found: Vec<Option<String>> = pipe.query_async(&mut self.con.clone()).await?;
        Ok(found
            .iter()
            .map(|t| t.as_deref().and_then(crate::redis::inspect::End::parse))
            .collect())
    }

    /// Nodes whose journal is behind Redis, by their word of the last
    /// [`BEHIND_FRESH_MS`].
    pub async fn journals_behind(&self) -> Result<Vec<String>, ShardError> {
        Ok(redis::cmd("ZRANGEBYSCORE")
            .arg(self.keys.journal_behind())
            .arg(now_ms() - BEHIND_FRESH_MS)
            .arg("+inf")
            .query_async(&mut self.con.clone())
            .await?)
    }

    /// Says whether `node`'s journal is behind (read by
    /// [`RedisSchedule::journals_behind`]), and forgets the word of nodes
    /// silent for [`BEHIND_FRESH_MS`] (stopped meanwhile).
    pub async fn say_journal_behind(&self, node: &str, behind: bool) -> Result<(), ShardError> {
        let key = self.keys.journal_behind();
        let now = now_ms();
        let mut pipe = redis::pipe();
        if behind {
            pipe.cmd("ZADD").arg(&key).arg(now).arg(node).ignore();
        } else {
            pipe.cmd("ZREM").arg(&key).arg(node).ignore();
        }
        pipe.cmd("ZREMRANGEBYSCORE")
            .arg(&key)
            .arg("-inf")
            .arg(now - BEHIND_FRESH_MS)
            .ignore();
        Ok(pipe.query_async(&mut self.con.clone()).await?)
    }

    /// Records a logged-out dashboard session (its cookie's signed body)
    /// until `until` (epoch ms), when it would have expired anyway.
    pub async fn revoke_ui_session(&self, body: &str, until: i64) -> Result<(), ShardError> {
        Ok(redis::cmd("ZADD")
            .arg(self.keys.ui_revoked())
            .arg(until)
            .arg(body)
            .query_async(&mut self.con.clone())
            .await?)
    }

    /// The logged-out dashboard sessions not expired yet (forgetting the
    /// others).
    pub async fn revoked_ui_sessions(&self) -> Result<Vec<String>, ShardError> {
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

    /// The journal has recorded these messages' ends: Redis no longer keeps
    /// them in the shards' unjournaled hashes (their tombstones then expire
    /// as usual).
    pub async fn journaled(&self, ids: &[MessageId]) -> Result<(), ShardError> {
        let by_shard = self.by_shard(ids.iter().copied());
        let mut pipe = redis::pipe();
        for (&shard, idx) in &by_shard {
            let members: Vec<String> = idx.iter().map(|&i| ids[i].to_string()).collect();
            pipe.hdel(self.keys.unjournaled(shard), members).ignore();
        }
        let _: () = pipe.query_async(&mut self.con.clone()).await?;
        Ok(())
    }

    /// Ends messages Redis does not hold while the journal says they are
    /// live (end_absent.lua): `(id, the end, attempts)`. Whether each was
    /// ended (false: it is back in Redis meanwhile), in input order.
    pub async fn end_absent(
        &self,
        ends: &[(MessageId, Status, i32)],
    ) -> Result<Vec<bool>, ShardError> {
        let by_shard = self.by_shard(ends.iter().map(|(id, _, _)| *id));
        let k = &self.keys;
        let mut pipe = redis::pipe();
        for (&shard, idx) in &by_shard {
            let mut args = Vec::with_capacity(idx.len() * 3);
            for &i in idx {
                let (id, status, attempts) = ends[i];
                args.push(id.to_string());
                args.push(status.code().to_string());
                args.push(attempts.to_string());
            }
            pipe.add_command(evalsha(
                &self.scripts.end_absent,
                &[k.messages(shard), k.finished(shard), k.unjournaled(shard)],
                &args,
            ));
        }
        let replies: Vec<Vec<i64>> = self
            .scripts
            .run_pipe("end_absent", &mut self.con.clone(), &pipe)
            .await?;
        let mut out = vec![false; ends.len()];
        for ((_, idx), flags) in by_shard.iter().zip(replies) {
            for (&i, f) in idx.iter().zip(flags) {
                out[i] = f == 1;
            }
        }
        Ok(out)
    }

    /// Reads Redis's clock (`TIME`) and notes it ([`crate::clock`]).
    pub async fn probe_clock(&self) -> Result<(), ShardError> {
        let sent = std::time::Instant::now();
        let (secs, micros): (i64, i64) = redis::cmd("TIME")
            .query_async(&mut self.con.clone())
            .await?;
        crate::clock::observe(sent, secs * 1_000_000 + micros);
        Ok(())
    }

    /// Counts of one shard, each O(1) in Redis: every message Redis holds is
    /// in the message hash, and is delaying, in flight, or else ready.
    pub async fn shard_counts(&self, shard: u32) -> Result<ShardCounts, ShardError> {
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

    /// One scan step of a shard, now by Redis's clock: moves up to `limit`
    /// due messages to their ready queues and returns up to `limit`
    /// expired in-flight ones.
    pub async fn tick(
        &self,
        shard: u32,
        limit: usize,
        epoch: i64,
    ) -> Result<TickResult, ShardError> {
        let k = &self.keys;
        let cmd = evalsha(
            &self.scripts.tick,
            &[
                k.delay(shard),
                k.messages(shard),
                k.inflight(shard),
                k.epoch(shard),
                k.finished(shard),
                k.unjournaled(shard),
            ],
            &[
                limit.to_string(),
                k.ready_prefix(shard),
                epoch.to_string(),
                TOMBSTONE_MS.to_string(),
                k.ready_channel(),
                self.node.to_string(),
            ],
        );
        let sent = std::time::Instant::now();
        let reply: Value = match self.scripts.run("tick", &mut self.con.clone(), &cmd).await {
            Err(e) if e.code() == Some("STALE_EPOCH") => {
                let stored = e
                    .detail()
                    .and_then(|d| d.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(i64::MAX);
                return Err(ShardError::StaleEpoch { shard, stored });
            }
            other => other?,
        };
        let now_ms = crate::clock::now_ms();
        let parts = ids_and_topics(&reply);
        if parts.len() != 5 {
            return Err(ShardError::BadRecord(format!("tick returned {reply:?}")));
        }
        let mut out = TickResult::default();
        for pair in ids_and_topics(&parts[0]).chunks(2) {
            out.moved.push((parse_id(&pair[0])?, text(&pair[1])?));
        }
        for f in ids_and_topics(&parts[1]).chunks(5) {
            if f.len() < 5 {
                return Err(ShardError::BadRecord(format!("tick returned {reply:?}")));
            }
            let due = opt_score(&f[4]).unwrap_or(now_ms as f64) as i64;
            let then = AfterFailure::parse(&text(&f[3])?, due)
                .ok_or_else(|| ShardError::BadRecord(format!("tick returned {reply:?}")))?;
            out.failed.push(FailedDelivery {
                id: parse_id(&f[0])?,
                topic: text(&f[1])?,
                attempts: opt_score(&f[2]).unwrap_or(0.0) as i32,
                then,
            });
        }
        out.next_due = opt_score(&parts[2]).map(due_of_score);
        out.next_deadline = opt_score(&parts[3]).map(|s| s as i64);
        out.at = opt_score(&parts[4]).map_or(now_ms, |s| s as i64);
        crate::clock::observe(sent, out.at * 1000 + 999);
        Ok(out)
    }

    /// The first `count` ready messages of a topic across all shards, by
    /// score: (score, shard, id).
    pub async fn peek_ready(
        &self,
        topic: &str,
        count: usize,
    ) -> Result<Vec<(f64, u32, String)>, ShardError> {
        let mut pipe = redis::pipe();
        for shard in 0..self.keys.shards() {
            pipe.cmd("ZRANGE")
                .arg(self.keys.ready(shard, topic))
                .arg(0)
                .arg(count as i64 - 1)
                .arg("WITHSCORES");
        }
        let heads: Vec<Vec<(String, f64)>> = pipe.query_async(&mut self.con.clone()).await?;
        let mut all: Vec<(f64, u32, String)> = heads
            .into_iter()
            .enumerate()
            .flat_map(|(shard, items)| items.into_iter().map(move |(id, s)| (s, shard as u32, id)))
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.2.cmp(&b.2)));
        all.truncate(count);
        Ok(all)
    }

    /// Claims, in each shard, the first `n` ready messages of a topic for a
    /// consumer (attempts + 1, ack deadline now + ttl). Returns them in score
    /// order across shards.
    pub async fn claim(
        &self,
        topic: &str,
        per_shard: &BTreeMap<u32, usize>,
    ) -> Result<Vec<Claimed>, ShardError> {
        let now_ms = now_ms();
        let mut pipe = redis::pipe();
        for (&shard, &n) in per_shard {
            let k = &self.keys;
            pipe.add_command(evalsha(
                &self.scripts.claim,
                &[k.ready(shard, topic), k.messages(shard), k.inflight(shard)],
                &[n as i64],
            ));
        }
        let mut replies: Vec<Vec<String>> = self
            .scripts
            .run_pipe("claim", &mut self.con.clone(), &pipe)
            .await?;
        let mut out = Vec::new();
        for (&shard, records) in per_shard.keys().zip(&mut replies) {
            let at = records.pop().and_then(|t| t.parse().ok()).unwrap_or(now_ms);
            for rec in records.drain(..) {
                let (attempts, message) = record::decode(&rec).map_err(ShardError::BadRecord)?;
                out.push(Claimed {
                    shard,
                    at,
                    attempts,
                    message,
                    record: rec,
                });
            }
        }
        out.sort_by(|a, b| {
            score(a.message.due_time, a.message.priority)
                .total_cmp(&score(b.message.due_time, b.message.priority))
                .then_with(|| a.message.id.cmp(&b.message.id))
        });
        Ok(out)
    }

    /// Acks many messages, each with the receipt of the delivery acked
    /// when the consumer gave one: one script call per shard, all in one
    /// pipeline. Returns what happened to each, in input order.
    pub async fn ack_many(
        &self,
        acks: &[(MessageId, Option<Receipt>)],
    ) -> Result<Vec<AckResult>, ShardError> {
        let ids: Vec<MessageId> = acks.iter().map(|(id, _)| *id).collect();
        let by_shard = self.by_shard(ids.iter().copied());
        let mut pipe = redis::pipe();
        for (&shard, idx) in &by_shard {
            let mut args = Vec::with_capacity(idx.len() * 2 + 1);
            args.push(self.keys.ready_prefix(shard));
            for &i in idx {
                args.push(ids[i].to_string());
                args.push(receipt_arg(acks[i].1));
            }
            pipe.add_command(evalsha(
                &self.scripts.ack,
                &[
                    self.keys.inflight(shard),
                    self.keys.messages(shard),
                    self.keys.finished(shard),
                    self.keys.unjournaled(shard),
                    self.keys.delay(shard),
                ],
                &args,
            ));
        }
        let replies: Vec<Vec<Value>> = self
            .scripts
            .run_pipe("ack", &mut self.con.clone(), &pipe)
            .await?;
        let mut out = vec![AckResult::Absent; ids.len()];
        for ((_, idx), mut reply) in by_shard.iter().zip(replies) {
            ran_at(&mut reply, 0);
            for (&i, four) in idx.iter().zip(reply.chunks(4)) {
                if four.len() < 4 {
                    return Err(ShardError::BadRecord(format!("ack returned {four:?}")));
                }
                let attempts = opt_score(&four[1]).unwrap_or(0.0) as i32;
                let record = text(&four[2])?;
                out[i] = match text(&four[0])?.as_str() {
                    "acked" | "acked_late" => AckResult::Acked { attempts },
                    "recurring" => AckResult::Recurring { attempts, record },
                    "not_in_flight" => AckResult::NotInFlight {
                        recurring: (!record.is_empty()).then_some(record),
                    },
                    "stale" => AckResult::Stale {
                        state: place_status(&text(&four[3])?),
                        attempts,
                        recurring: (!record.is_empty()).then_some(record),
                    },
                    "finished" => {
                        AckResult::Finished(crate::redis::inspect::End::parse(&text(&four[3])?))
                    }
                    _ => AckResult::Absent,
                };
            }
        }
        Ok(out)
    }

    /// Moves acked recurring messages on: each `(id, the record the ack
    /// read, the next occurrence or None when the series ends)`. One script
    /// call per shard, in one pipeline; results in input order.
    pub async fn advance_many(
        &self,
        items: &[(MessageId, String, Option<Message>)],
    ) -> Result<Vec<Advanced>, ShardError> {
        let by_shard = self.by_shard(items.iter().map(|(id, _, _)| *id));
        let now = now_ms();
        let k = &self.keys;
        let mut pipe = redis::pipe();
        for (&shard, idx) in &by_shard {
            let mut args = Vec::with_capacity(idx.len() * 4 + 2);
            args.push(k.ready_prefix(shard));
            args.push(k.wake_channel(shard));
            for &i in idx {
                let (id, seen, next) = &items[i];
                args.push(id.to_string());
                args.push(seen.clone());
                match next {
                    Some(m) => {
                        args.push(record::encode(m, 0));
                        args.push((score(m.due_time, m.priority) as i64).to_string());
                    }
                    None => {
                        args.push(String::new());
                        args.push("0".to_string());
                    }
                }
            }
            pipe.add_command(evalsha(
                &self.scripts.advance,
                &[
                    k.inflight(shard),
                    k.messages(shard),
                    k.delay(shard),
                    k.finished(shard),
                    k.unjournaled(shard),
                ],
                &args,
            ));
        }
        let replies: Vec<Vec<Value>> = self
            .scripts
            .run_pipe("advance", &mut self.con.clone(), &pipe)
            .await?;
        let mut out = vec![Advanced::Changed; items.len()];
        for ((_, idx), mut reply) in by_shard.iter().zip(replies) {
            let at = ran_at(&mut reply, now);
            for (&i, outcome) in idx.iter().zip(reply) {
                out[i] = match text(&outcome)?.as_str() {
                    "advanced" => Advanced::Next { at },
                    "ended" => Advanced::Ended { at },
                    _ => Advanced::Changed,
                };
            }
        }
        Ok(out)
    }

    /// Gives back delivered messages: each `(id, wait, receipt)`, `wait`
    /// the nack's delay in ms or `None` for the message's retry policy,
    /// `receipt` the delivery's when the consumer gave one. One script call
    /// per shard, in one pipeline; results in input order.
    pub async fn nack_many(
        &self,
        nacks: &[(MessageId, Option<i64>, Option<Receipt>)],
    ) -> Result<Vec<NackResult>, ShardError> {
        let by_shard = self.by_shard(nacks.iter().map(|(id, _, _)| *id));
        let now = now_ms();
        let k = &self.keys;
        let mut pipe = redis::pipe();
        for (&shard, idx) in &by_shard {
            let mut args = Vec::with_capacity(idx.len() * 2 + 4);
            args.push(k.ready_prefix(shard));
            args.push(k.wake_channel(shard));
            args.push(k.ready_channel());
            args.push(self.node.to_string());
            for &i in idx {
                let (id, wait, receipt) = nacks[i];
                args.push(id.to_string());
                args.push(wait.map_or_else(|| "-".to_string(), |w| w.to_string()));
                args.push(receipt_arg(receipt));
            }
            pipe.add_command(evalsha(
                &self.scripts.nack,
                &[
                    k.inflight(shard),
                    k.messages(shard),
                    k.delay(shard),
                    k.finished(shard),
                    k.unjournaled(shard),
                ],
                &args,
            ));
        }
        let replies: Vec<Vec<Value>> = self
            .scripts
            .run_pipe("nack", &mut self.con.clone(), &pipe)
            .await?;
        let mut out = vec![NackResult::Absent; nacks.len()];
        for ((_, idx), mut reply) in by_shard.iter().zip(replies) {
            let at = ran_at(&mut reply, now);
            for (&i, four) in idx.iter().zip(reply.chunks(4)) {
                if four.len() < 4 {
                    return Err(ShardError::BadRecord(format!("nack returned {four:?}")));
                }
                let attempts = opt_score(&four[1]).unwrap_or(0.0) as i32;
                let due = opt_score(&four[2]).unwrap_or(0.0) as i64;
                let outcome = text(&four[0])?;
                out[i] = match AfterFailure::parse(&outcome, due) {
                    Some(then) => NackResult::Failed {
                        attempts,
                        then,
                        at,
                        topic: text(&four[3])?,
                    },
                    None if outcome == "not_in_flight" => NackResult::NotInFlight,
                    None if outcome == "stale" => NackResult::Stale {
                        state: place_status(&text(&four[3])?),
                    },
                    None => NackResult::Absent,
                };
            }
        }
        Ok(out)
    }

    pub async fn cancel(
        &self,
        id: MessageId,
        tombstone_absent: bool,
    ) -> Result<CancelResult, ShardError> {
        let shard = self.keys.shard_of(id);
        let k = &self.keys;
        let cmd = evalsha(
            &self.scripts.cancel,
            &[
                k.delay(shard),
                k.messages(shard),
                k.inflight(shard),
                k.finished(shard),
                k.unjournaled(shard),
            ],
            &[
                id.to_string(),
                k.ready_prefix(shard),
                if tombstone_absent { "1" } else { "0" }.to_string(),
            ],
        );
        let reply: Vec<Value> = self
            .scripts
            .run("cancel", &mut self.con.clone(), &cmd)
            .await?;
        let r = reply.first().map(text).transpose()?.unwrap_or_default();
        let attempts = reply.get(1).and_then(opt_score).unwrap_or(0.0) as i32;
        Ok(match r.as_str() {
            "deleted" => CancelResult::Deleted { attempts },
            "stopped" => CancelResult::Stopped { attempts },
            "in_flight" => CancelResult::InFlight,
            "finished" => match reply
                .get(2)
                .and_then(|v| text(v).ok())
                .as_deref()
                .and_then(crate::redis::inspect::End::parse)
            {
                Some(end) => CancelResult::Finished(end),
                None => CancelResult::Absent,
            },
            _ => CancelResult::Absent,
        })
    }

    /// Runs a lease operation (see lease.lua): whether this holder has the
    /// lease afterwards, and who holds it.
    pub async fn lease(
        &self,
        op: LeaseOp,
        key: &str,
        holder: &str,
        lease_ms: u64,
    ) -> Result<(bool, Option<String>), ShardError> {
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
    pub async fn reserve(&self, worker: u16, ms: i64) -> Result<(i64, i64), ShardError> {
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
                .map_err(|e| ShardError::BadRecord(e.to_string()))
        };
        Ok((num(before)?, num(now)?))
    }

    pub async fn ping(&self) -> Result<(), ShardError> {
        let _: String = redis::cmd("PING")
            .query_async(&mut self.con.clone())
            .await?;
        Ok(())
    }

    /// Does this Redis hold a delayq data set (the marker key)?
    pub async fn has_dataset_marker(&self) -> Result<bool, ShardError> {
        Ok(redis::cmd("EXISTS")
            .arg(self.keys.dataset_marker())
            .query_async::<i64>(&mut self.con.clone())
            .await?
            == 1)
    }

    pub async fn set_dataset_marker(&self, node_id: &str) -> Result<(), ShardError> {
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
    pub async fn record_shard_count(&self) -> Result<u32, ShardError> {
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
            ShardError::BadRecord(format!("{} holds {recorded:?}", self.keys.shard_count()))
        })
    }

    /// `FROM>TO` while a reshard moves the data set.
    pub async fn resharding(&self) -> Result<Option<String>, ShardError> {
        Ok(redis::cmd("GET")
            .arg(self.keys.resharding())
            .query_async(&mut self.con.clone())
            .await?)
    }
}

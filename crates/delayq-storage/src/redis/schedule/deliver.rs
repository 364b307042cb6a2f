//! Delivery: a shard's scan step, and the claims, acks, nacks and cancels
//! of consumers and producers, each one script call per shard.

use std::collections::{BTreeMap, BTreeSet};

use redis::Value;

use super::handle::{fenced, schedule_handle, PerShard};
use super::outcomes::after_failure;
use super::outcomes::{
    Advanced, Claimed, End, FailedDelivery, RedisAck, RedisCancel, RedisNack, Replies, TickResult,
};
use crate::error::RedisError;
use crate::message::{now_ms, Message, MessageId, Receipt};
use crate::redis::keys::{due_of_score, score, Keys};
use crate::redis::record;
use crate::redis::reply::{ids_and_topics, opt_score, parse_id, place_status, ran_at, text};
use crate::redis::scripts::evalsha;

/// How long (ms) a poll waits before it looks again at a shard fenced after
/// a possible loss of Redis's writes (see `reconcile::fence`), when no
/// other shard had anything for it.
const FENCED_RECHECK_MS: u64 = 100;

/// A receipt as the scripts compare it ('' for none). The fault
/// `ignore_receipts` (see [`crate::faults`]) drops it: the planted bug a
/// fault checker must catch.
fn receipt_arg(receipt: Option<Receipt>) -> String {
    match receipt {
        Some(r) if !crate::faults::on("ignore_receipts") => r.delivery(),
        _ => String::new(),
    }
}

/// The keys of the scripts that move a message handed out (advance.lua,
/// nack.lua): in flight, records, delay zset, tombstones, unjournaled.
fn moving_keys(k: &Keys, shard: u32) -> Vec<String> {
    vec![
        k.inflight(shard),
        k.messages(shard),
        k.delay(shard),
        k.finished(shard),
        k.unjournaled(shard),
    ]
}

/// One message a claim (claim.lua, take.lua) returned: its id and its
/// record, attempts already raised.
fn claimed(shard: u32, at: i64, id: &str, record: String) -> Result<Claimed, RedisError> {
    let id = id
        .parse()
        .map(MessageId)
        .map_err(|_| RedisError::BadRecord(format!("a claim returned the id {id:?}")))?;
    let (attempts, message) = record::decode(id, &record).map_err(RedisError::BadRecord)?;
    Ok(Claimed {
        shard,
        at,
        attempts,
        message,
        record,
    })
}

/// Claimed messages as a poll hands them out: by due time and priority (as
/// their records say), then by id.
fn sort_claimed(claimed: &mut [Claimed]) {
    claimed.sort_by(|a, b| {
        score(a.message.due_time, a.message.priority)
            .total_cmp(&score(b.message.due_time, b.message.priority))
            .then_with(|| a.message.id.cmp(&b.message.id))
    });
}

schedule_handle!(
    /// Handing messages out: the shard's tick (promotion of what is due),
    /// peeking at and claiming ready messages, taking one by id, acks,
    /// advancing recurring messages, nacks and cancels.
    Delivery,
    delivery,
    "Handing messages out."
);

impl Delivery<'_> {
    /// One scan step of a shard, now by Redis's clock: moves up to `limit`
    /// due messages to their ready queues and returns up to `limit`
    /// expired in-flight ones.
    pub async fn tick(
        self,
        shard: u32,
        limit: usize,
        epoch: i64,
    ) -> Result<TickResult, RedisError> {
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
                k.applied(shard),
            ],
            &[
                limit.to_string(),
                k.ready_prefix(shard),
                epoch.to_string(),
                super::handle::tombstone_ms().to_string(),
                k.ready_channel(shard),
                self.node.to_string(),
            ],
        );
        let sent = std::time::Instant::now();
        let reply: Value = match self.scripts.run("tick", &mut self.con.clone(), &cmd).await {
            Err(e) => return Err(fenced(e, shard)),
            Ok(v) => v,
        };
        let now_ms = crate::clock::now_ms();
        let parts = ids_and_topics(&reply);
        if parts.len() != 5 {
            return Err(RedisError::BadRecord(format!("tick returned {reply:?}")));
        }
        let mut out = TickResult::default();
        for three in ids_and_topics(&parts[0]).chunks(3) {
            if three.len() < 3 {
                return Err(RedisError::BadRecord(format!("tick returned {reply:?}")));
            }
            let attempts = text(&three[2])?.parse().unwrap_or(0);
            out.moved
                .push((parse_id(&three[0])?, text(&three[1])?, attempts));
        }
        for f in ids_and_topics(&parts[1]).chunks(5) {
            if f.len() < 5 {
                return Err(RedisError::BadRecord(format!("tick returned {reply:?}")));
            }
            let due = opt_score(&f[4]).unwrap_or(now_ms as f64) as i64;
            let then = after_failure(&text(&f[3])?, due)
                .ok_or_else(|| RedisError::BadRecord(format!("tick returned {reply:?}")))?;
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
        crate::clock::observe_shard(shard, sent, out.at * 1000 + 999);
        Ok(out)
    }

    /// The first `count` ready messages of a topic across the shards not
    /// in `skip`, by score: (score, shard, id).
    pub async fn peek_ready(
        self,
        topic: &str,
        count: usize,
        skip: &BTreeSet<u32>,
    ) -> Result<Vec<(f64, u32, String)>, RedisError> {
        let shards: Vec<u32> = (0..self.keys.shards())
            .filter(|s| !skip.contains(s))
            .collect();
        let mut pipe = redis::pipe();
        for &shard in &shards {
            pipe.cmd("ZRANGE")
                .arg(self.keys.ready(shard, topic))
                .arg(0)
                .arg(count as i64 - 1)
                .arg("WITHSCORES");
        }
        let heads: Vec<Vec<(String, f64)>> = pipe.query_async(&mut self.con.clone()).await?;
        let mut all: Vec<(f64, u32, String)> = heads
            .into_iter()
            .zip(shards)
            .flat_map(|(items, shard)| items.into_iter().map(move |(id, s)| (s, shard, id)))
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.2.cmp(&b.2)));
        all.truncate(count);
        Ok(all)
    }

    /// Claims, in each shard, the first `n` ready messages of a topic for a
    /// consumer (attempts + 1, ack deadline now + ttl). Returns them in score
    /// order across shards; when the topic's limits let none be claimed, how
    /// long (ms) until they may let one; and the shards whose limits held
    /// them back (their share of the rate or of the cap spent).
    pub async fn claim(
        self,
        topic: &str,
        per_shard: &BTreeMap<u32, usize>,
    ) -> Result<(Vec<Claimed>, u64, Vec<u32>), RedisError> {
        let now_ms = now_ms();
        // Each shard's bucket fills at its share of the topic's rate, and
        // each shard caps its hand-outs at its share of the cap.
        let limit = self.limit(topic);
        let shards = self.keys.shards();
        let rate = f64::from(limit.per_second) / f64::from(shards);
        let mut pipe = redis::pipe();
        for (&shard, &n) in per_shard {
            let k = &self.keys;
            let cap = crate::limit::concurrency_share(limit.concurrency, shard, shards);
            pipe.add_command(evalsha(
                &self.scripts.claim,
                &[
                    k.ready(shard, topic),
                    k.messages(shard),
                    k.inflight(shard),
                    k.paused(shard),
                    k.limit(shard, topic),
                    k.busy(shard, topic),
                    k.applied(shard),
                ],
                &[
                    n.to_string(),
                    topic.to_string(),
                    rate.to_string(),
                    cap.to_string(),
                    crate::limit::BUSY_RECHECK_MS.to_string(),
                    FENCED_RECHECK_MS.to_string(),
                ],
            ));
        }
        let mut replies: Vec<Vec<String>> = self
            .scripts
            .run_pipe("claim", &mut self.con.clone(), &pipe)
            .await?;
        let mut out = Vec::new();
        let mut wait = u64::MAX;
        let mut held = Vec::new();
        for (&shard, records) in per_shard.keys().zip(&mut replies) {
            let at = records.pop().and_then(|t| t.parse().ok()).unwrap_or(now_ms);
            if let Some(w) = records.pop().and_then(|w| w.parse::<u64>().ok()) {
                if w > 0 {
                    wait = wait.min(w);
                    held.push(shard);
                }
            }
            let mut items = records.drain(..);
            while let (Some(id), Some(rec)) = (items.next(), items.next()) {
                out.push(claimed(shard, at, &id, rec)?);
            }
        }
        sort_claimed(&mut out);
        let wait = if out.is_empty() && wait < u64::MAX {
            wait
        } else {
            0
        };
        Ok((out, wait, held))
    }

    /// A poll's claim in one round trip (one Redis, not a cluster, whose
    /// slots keep shards apart): the first `count` ready messages of a topic
    /// across all shards by score, claimed as [`Self::claim`] claims them,
    /// in the same order. Also how many queue entries had no record
    /// (dropped: when that left nothing claimed, look again), and when the
    /// topic's rate limit let nothing be claimed, how long (ms) until it
    /// lets one.
    pub async fn take(
        self,
        topic: &str,
        count: usize,
    ) -> Result<(Vec<Claimed>, usize, u64), RedisError> {
        let k = &self.keys;
        let mut keys = Vec::with_capacity(6 * k.shards() as usize + 1);
        for shard in 0..k.shards() {
            keys.push(k.ready(shard, topic));
            keys.push(k.messages(shard));
            keys.push(k.inflight(shard));
            keys.push(k.paused(shard));
            keys.push(k.busy(shard, topic));
            keys.push(k.applied(shard));
        }
        // One Redis: the topic's one bucket (shard 0's key).
        keys.push(k.limit(0, topic));
        let cmd = evalsha(
            &self.scripts.take,
            &keys,
            &[
                count.to_string(),
                topic.to_string(),
                self.limit(topic).per_second.to_string(),
                self.limit(topic).concurrency.to_string(),
                crate::limit::BUSY_RECHECK_MS.to_string(),
            ],
        );
        let mut reply: Vec<String> = self
            .scripts
            .run("take", &mut self.con.clone(), &cmd)
            .await?;
        let at = reply
            .pop()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(now_ms);
        let wait = reply.pop().and_then(|n| n.parse().ok()).unwrap_or(0);
        let dropped = reply.pop().and_then(|n| n.parse().ok()).unwrap_or(0);
        let mut out = Vec::with_capacity(reply.len() / 3);
        let mut items = reply.into_iter();
        while let (Some(shard), Some(id), Some(rec)) = (items.next(), items.next(), items.next()) {
            let shard: u32 = shard
                .parse()
                .map_err(|_| RedisError::BadRecord(format!("take returned the shard {shard:?}")))?;
            out.push(claimed(shard, at, &id, rec)?);
        }
        sort_claimed(&mut out);
        Ok((out, dropped, wait))
    }

    /// Acks many messages, each with the receipt of the delivery acked
    /// when the consumer gave one: one script call per shard, all in one
    /// pipeline. Returns what happened to each, in input order.
    pub async fn ack_many(
        self,
        acks: &[(MessageId, Option<Receipt>)],
    ) -> Result<Replies<RedisAck>, RedisError> {
        let k = &self.keys;
        let replies: PerShard<Vec<Value>> = self
            .per_shard_each(
                "ack",
                &self.scripts.ack,
                acks.iter().map(|(id, _)| *id),
                |shard, idx| {
                    let mut args = Vec::with_capacity(idx.len() * 2 + 1);
                    args.push(k.ready_prefix(shard));
                    for &i in idx {
                        args.push(acks[i].0.to_string());
                        args.push(receipt_arg(acks[i].1));
                    }
                    let keys = vec![
                        k.inflight(shard),
                        k.messages(shard),
                        k.finished(shard),
                        k.unjournaled(shard),
                        k.delay(shard),
                    ];
                    (keys, args)
                },
            )
            .await?;
        let mut out = vec![None; acks.len()];
        for (idx, reply) in replies.replies {
            let Some(mut reply) = reply else { continue };
            ran_at(&mut reply, 0);
            for (&i, four) in idx.iter().zip(reply.chunks(4)) {
                if four.len() < 4 {
                    return Err(RedisError::BadRecord(format!("ack returned {four:?}")));
                }
                let attempts = opt_score(&four[1]).unwrap_or(0.0) as i32;
                let record = text(&four[2])?;
                out[i] = Some(match text(&four[0])?.as_str() {
                    "acked" | "acked_late" => RedisAck::Acked { attempts },
                    "acked_stopped" => RedisAck::Stopped { attempts },
                    "recurring" => RedisAck::Recurring { attempts, record },
                    "not_in_flight" => RedisAck::NotInFlight {
                        recurring: (!record.is_empty()).then_some(record),
                        state: place_status(&text(&four[3])?),
                    },
                    "stale" => RedisAck::Stale {
                        state: place_status(&text(&four[3])?),
                        attempts,
                        recurring: (!record.is_empty()).then_some(record),
                    },
                    "finished" => RedisAck::Finished(End::parse(&text(&four[3])?)),
                    _ => RedisAck::Absent,
                });
            }
        }
        Ok(Replies {
            each: out,
            failed: replies.failed,
        })
    }

    /// Moves acked recurring messages on: each `(id, the record the ack
    /// read, the next occurrence or None when the series ends)`. One script
    /// call per shard, in one pipeline; results in input order.
    pub async fn advance_many(
        self,
        items: &[(MessageId, String, Option<Message>)],
    ) -> Result<Vec<Advanced>, RedisError> {
        let now = now_ms();
        let k = &self.keys;
        let replies: Vec<(Vec<usize>, Vec<Value>)> = self
            .per_shard(
                "advance",
                &self.scripts.advance,
                items.iter().map(|(id, _, _)| *id),
                |shard, idx| {
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
                    (moving_keys(k, shard), args)
                },
            )
            .await?;
        let mut out = vec![Advanced::Changed; items.len()];
        for (idx, mut reply) in replies {
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
        self,
        nacks: &[(MessageId, Option<i64>, Option<Receipt>)],
    ) -> Result<Replies<RedisNack>, RedisError> {
        let now = now_ms();
        let k = &self.keys;
        let replies: PerShard<Vec<Value>> = self
            .per_shard_each(
                "nack",
                &self.scripts.nack,
                nacks.iter().map(|(id, _, _)| *id),
                |shard, idx| {
                    let mut args = Vec::with_capacity(idx.len() * 3 + 4);
                    args.push(k.ready_prefix(shard));
                    args.push(k.wake_channel(shard));
                    args.push(k.ready_channel(shard));
                    args.push(self.node.to_string());
                    for &i in idx {
                        let (id, wait, receipt) = nacks[i];
                        args.push(id.to_string());
                        args.push(wait.map_or_else(|| "-".to_string(), |w| w.to_string()));
                        args.push(receipt_arg(receipt));
                    }
                    (moving_keys(k, shard), args)
                },
            )
            .await?;
        let mut out = vec![None; nacks.len()];
        for (idx, reply) in replies.replies {
            let Some(mut reply) = reply else { continue };
            let at = ran_at(&mut reply, now);
            for (&i, four) in idx.iter().zip(reply.chunks(4)) {
                if four.len() < 4 {
                    return Err(RedisError::BadRecord(format!("nack returned {four:?}")));
                }
                let attempts = opt_score(&four[1]).unwrap_or(0.0) as i32;
                let due = opt_score(&four[2]).unwrap_or(0.0) as i64;
                let outcome = text(&four[0])?;
                out[i] = Some(match after_failure(&outcome, due) {
                    Some(then) => RedisNack::Failed {
                        attempts,
                        then,
                        at,
                        topic: text(&four[3])?,
                    },
                    None if outcome == "not_in_flight" => RedisNack::NotInFlight {
                        state: place_status(&text(&four[3])?),
                    },
                    None if outcome == "stale" => RedisNack::Stale {
                        state: place_status(&text(&four[3])?),
                    },
                    None => RedisNack::Absent,
                });
            }
        }
        Ok(Replies {
            each: out,
            failed: replies.failed,
        })
    }

    /// Cancels one message (see [`Self::cancel_many`]).
    pub async fn cancel(
        self,
        id: MessageId,
        tombstone_absent: bool,
    ) -> Result<RedisCancel, RedisError> {
        let mut replies = self.cancel_many(&[id], tombstone_absent).await?;
        match (replies.each.pop().flatten(), replies.failed) {
            (Some(r), _) => Ok(r),
            (None, Some(e)) => Err(e),
            (None, None) => Err(RedisError::BadRecord("cancel returned nothing".into())),
        }
    }

    /// Cancels messages: one script call per shard, all in one pipeline
    /// (on a Redis Cluster each shard's call on its own, so a master down
    /// fails only its own ids: `each` is `None` for those, `failed` says
    /// why). With `tombstone_absent`, an id this shard does not hold leaves
    /// a tombstone all the same (the journal said it is live). Results in
    /// input order.
    pub async fn cancel_many(
        self,
        ids: &[MessageId],
        tombstone_absent: bool,
    ) -> Result<Replies<RedisCancel>, RedisError> {
        let k = &self.keys;
        let replies: PerShard<Vec<Value>> = self
            .per_shard_each(
                "cancel",
                &self.scripts.cancel,
                ids.iter().copied(),
                |shard, idx| {
                    let mut args = Vec::with_capacity(idx.len() + 2);
                    args.push(k.ready_prefix(shard));
                    args.push(if tombstone_absent { "1" } else { "0" }.to_string());
                    args.extend(idx.iter().map(|&i| ids[i].to_string()));
                    let keys = vec![
                        k.delay(shard),
                        k.messages(shard),
                        k.inflight(shard),
                        k.finished(shard),
                        k.unjournaled(shard),
                    ];
                    (keys, args)
                },
            )
            .await?;
        let mut out = vec![None; ids.len()];
        for (idx, reply) in replies.replies {
            let Some(reply) = reply else { continue };
            if reply.len() != idx.len() * 3 {
                return Err(RedisError::BadRecord(format!(
                    "cancel returned {} values for {} ids",
                    reply.len(),
                    idx.len()
                )));
            }
            for (&i, three) in idx.iter().zip(reply.chunks(3)) {
                let attempts = opt_score(&three[1]).unwrap_or(0.0) as i32;
                out[i] = Some(match text(&three[0])?.as_str() {
                    "deleted" => RedisCancel::Deleted { attempts },
                    "stopped" => RedisCancel::Stopped { attempts },
                    "in_flight" => RedisCancel::InFlight,
                    "finished" => match End::parse(&text(&three[2])?) {
                        Some(end) => RedisCancel::Finished(end),
                        None => RedisCancel::Absent,
                    },
                    _ => RedisCancel::Absent,
                });
            }
        }
        Ok(Replies {
            each: out,
            failed: replies.failed,
        })
    }
}

//! Consumers: long polls hand ready messages out; acks end a delivery (or
//! move a recurring message on to its next occurrence); nacks fail it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::coalesce::Staged;
use super::error::QueueError;
pub use super::outcome::{Ack, AckOutcome};
use super::state::{kept_end, Queue};
use crate::actors::router::Touch;
use crate::actors::router::Touch as WakeShard;
use crate::error::RedisError;
use crate::journal::StatusChange;
use crate::message::{now_ms, MessageId, MessageView, Receipt, Status};
use crate::metrics::metrics;
use crate::redis::record;
use crate::redis::schedule::{Advanced, AfterFailure, Claimed, RedisAck, RedisNack};
use crate::repeat::Occurrence;

/// A waiting long poll looks at the ready queues at least this often, so a
/// lost notification (another node's, over pub/sub) costs at most this.
const RECHECK: Duration = Duration::from_secs(1);

/// Set when the node begins to shut down: waiting long polls answer with
/// nothing at once rather than being cut off with the connection.
static CLOSING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static CLOSING_NOTICE: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// The node is shutting down: every waiting long poll (and every later
/// one) answers with an empty list now.
pub fn begin_closing() {
    CLOSING.store(true, std::sync::atomic::Ordering::Release);
    CLOSING_NOTICE.notify_waiters();
}

/// Whether the node is shutting down ([`begin_closing`]).
pub fn closing() -> bool {
    CLOSING.load(std::sync::atomic::Ordering::Acquire)
}

/// Waits up to `timeout_s` for ready messages of `topic` and hands out up
/// to `count` of them; an empty list when none came.
#[tracing::instrument(name = "poll", level = "debug", skip(state))]
pub async fn poll(
    state: &Queue,
    topic: &str,
    count: usize,
    timeout_s: u64,
) -> Result<Vec<MessageView>, QueueError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout_s);
    let notify = state.waiters.topic(topic);
    let closed = CLOSING_NOTICE.notified();
    tokio::pin!(closed);
    closed.as_mut().enable();
    loop {
        if closing() {
            return Ok(Vec::new());
        }
        // Listen before looking, so a message made ready in between wakes us.
        let woken = notify.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        // A poll that waited through a stall of this process was most
        // likely given up by its sender: claim nothing for it.
        if let Some(why) = crate::stall::stalled() {
            return Err(QueueError::Stalled(why));
        }
        let (claimed, limited) = claim(state, topic, count).await?;
        let mut claimed = skip_missed(state, claimed).await?;
        if crate::faults::on("plant_lost") {
            let (lost, kept): (Vec<Claimed>, Vec<Claimed>) = claimed
                .into_iter()
                .partition(|c| crate::faults::strikes("plant_lost", c.message.id.0, 16));
            let acks: Vec<Ack> = lost.iter().map(|c| Ack::id(c.message.id)).collect();
            if !acks.is_empty() {
                ack_deliveries(state, &acks, AckJournal::Queued).await?;
            }
            claimed = kept;
        }
        if !claimed.is_empty() {
            return Ok(deliver(state, claimed));
        }
        // The topic's rate limit holds it back: wait for the next token
        // (wake-ups would only find the bucket empty again).
        if limited > 0 {
            let until = tokio::time::Instant::now() + Duration::from_millis(limited);
            tokio::select! {
                _ = tokio::time::sleep_until(until.min(deadline)) => {}
                _ = closed.as_mut() => return Ok(Vec::new()),
            }
            if until >= deadline {
                return Ok(Vec::new());
            }
            continue;
        }
        let recheck = (tokio::time::Instant::now() + RECHECK).min(deadline);
        tokio::select! {
            _ = closed.as_mut() => return Ok(Vec::new()),
            _ = woken => {}
            _ = tokio::time::sleep_until(recheck), if recheck < deadline => {}
            _ = tokio::time::sleep_until(deadline) => return Ok(Vec::new()),
        }
    }
}

/// Claims up to `count` ready messages of `topic`; with none, how long
/// (ms) the topic's rate limit holds it back (0: not limited, none ready).
async fn claim(
    state: &Queue,
    topic: &str,
    count: usize,
) -> Result<(Vec<Claimed>, u64), QueueError> {
    // One Redis: a single script call peeks and claims across the shards.
    // Queue entries whose record is gone are dropped on the way: when that
    // left nothing claimed, look again (each look drops up to `count`).
    if !state.redis.is_cluster() {
        for _ in 0..64 {
            let (claimed, dropped, limited) = state.redis.delivery().take(topic, count).await?;
            if !claimed.is_empty() || dropped == 0 {
                return Ok((claimed, limited));
            }
        }
        return Ok((Vec::new(), 0));
    }
    // The first `count` ready messages across shards decide how many to take
    // from each shard's queue head. Other consumers may empty a queue in
    // between: look again while the queues are not empty. A shard whose
    // share of the topic's rate or cap is spent is left out of the next
    // look, so the others' messages go out meanwhile; the poll waits only
    // when every shard with messages is held back.
    let mut skip = BTreeSet::new();
    let mut wait = 0;
    for _ in 0..8 {
        let picks = state
            .redis
            .delivery()
            .peek_ready(topic, count, &skip)
            .await?;
        if picks.is_empty() {
            return Ok((Vec::new(), wait));
        }
        let mut per_shard: BTreeMap<u32, usize> = BTreeMap::new();
        for (_, shard, _) in &picks {
            *per_shard.entry(*shard).or_default() += 1;
        }
        let (claimed, limited, held) = state.redis.delivery().claim(topic, &per_shard).await?;
        if !claimed.is_empty() {
            return Ok((claimed, 0));
        }
        if limited > 0 {
            wait = if wait == 0 {
                limited
            } else {
                wait.min(limited)
            };
            skip.extend(held);
        }
    }
    Ok((Vec::new(), wait))
}

/// Occurrences of recurring messages with `misfire: "skip"` that were
/// missed (the next occurrence was due before this one was handed out) are
/// not delivered: each moves on to its series' first time in the future.
/// Returns the rest, to hand out.
async fn skip_missed(state: &Queue, claimed: Vec<Claimed>) -> Result<Vec<Claimed>, QueueError> {
    let missed = |c: &Claimed| {
        let (Some(r), Some(occ)) = (c.message.repeat.as_ref(), c.message.occurrence) else {
            return false;
        };
        r.misfire_policy() == crate::repeat::Misfire::Skip
            && crate::repeat::Series::next(r, occ.number, occ.due_time)
                .is_some_and(|next| next <= c.at)
    };
    if !claimed.iter().any(missed) {
        return Ok(claimed);
    }
    let (skipped, keep): (Vec<Claimed>, Vec<Claimed>) = claimed.into_iter().partition(missed);
    let items: Vec<(MessageId, String, Option<crate::message::Message>)> = skipped
        .iter()
        .map(|c| {
            (
                c.message.id,
                c.record.clone(),
                crate::message::next_occurrence(&c.message, c.at),
            )
        })
        .collect();
    let advanced = state.redis.delivery().advance_many(&items).await?;
    let keys = state.redis.keys();
    let mut changes = Vec::new();
    for (c, ((id, _, next), done)) in skipped.iter().zip(items.into_iter().zip(advanced)) {
        let shard: std::sync::Arc<str> = keys.inflight(c.shard).into();
        match (done, next) {
            (Advanced::Next { at }, Some(next)) => {
                let occ = next.occurrence.expect("a next occurrence has its number");
                tracing::debug!(id = %id, skipped = ?c.message.occurrence, next = occ.number, "missed occurrence skipped (misfire: skip)");
                changes.push(StatusChange::moved_on(id, occ, next.due_time, at, shard));
                state.router.do_send(WakeShard {
                    shard: c.shard,
                    at_ms: next.due_time,
                });
            }
            (Advanced::Ended { at } | Advanced::Next { at }, _) => {
                changes.push(StatusChange::consumed(id, c.attempts, at, shard))
            }
            // Changed meanwhile (cancelled): left as it is.
            (Advanced::Changed, _) => {}
        }
    }
    state.journal.record(changes);
    Ok(keep)
}

fn deliver(state: &Queue, claimed: Vec<Claimed>) -> Vec<MessageView> {
    let now = now_ms();
    let keys = state.redis.keys();
    let mut changes = Vec::with_capacity(claimed.len());
    let mut views = Vec::with_capacity(claimed.len());
    // Each shard's actor must wake for the earliest ack deadline handed out.
    let mut deadlines: BTreeMap<u32, i64> = BTreeMap::new();
    let mut inflight_names: BTreeMap<u32, std::sync::Arc<str>> = BTreeMap::new();
    let m = metrics();
    let mut per_topic: BTreeMap<&str, u64> = BTreeMap::new();
    for c in &claimed {
        *per_topic.entry(&c.message.topic).or_default() += 1;
        // A message's (or occurrence's) first delivery: later ones are
        // late by design (a ttl passed, a nack).
        if c.attempts == 1 {
            m.delivered_late(c.at - c.message.due_time);
        }
    }
    for (topic, n) in per_topic {
        m.count(&m.delivered, topic, n);
    }
    for c in claimed {
        tracing::debug!(id = %c.message.id, shard = c.shard, attempt = c.attempts, late_ms = c.at - c.message.due_time, "handed out");
        let deadline = deadlines.entry(c.shard).or_insert(i64::MAX);
        *deadline = (*deadline).min(now + c.message.ttl);
        changes.push(StatusChange::handed_out(
            c.message.id,
            c.attempts,
            c.at,
            inflight_names
                .entry(c.shard)
                .or_insert_with(|| keys.inflight(c.shard).into())
                .clone(),
        ));
        let receipt = Receipt {
            attempts: c.attempts,
            deadline: c.at + c.message.ttl,
            occurrence: c.message.occurrence.map(|o| o.number),
        };
        views.push(MessageView {
            message: c.message,
            status: Status::Consuming,
            attempts: c.attempts,
            receipt: Some(receipt.to_string()),
        });
    }
    for (shard, at_ms) in deadlines {
        state.router.do_send(Touch { shard, at_ms });
    }
    state.journal.record(changes);
    views
}

/// The answer to an ack of a message consumed already, by the delivery
/// `attempts` counts: consumed (acking twice is harmless), unless the
/// ack's receipt names another delivery (the current holder acked first).
/// A recurring message's receipt names an occurrence, whose deliveries
/// count from 0 again: its earlier occurrence's ack, sent again, is done.
fn acked_already(ack: &Ack, attempts: i32) -> AckOutcome {
    match ack.receipt {
        Some(r) if r.occurrence.is_none() && r.attempts != attempts => AckOutcome::Stale {
            now: Status::Consumed,
            earlier: r.attempts < attempts,
        },
        _ => AckOutcome::Consumed,
    }
}

impl Queue {
    /// Acks one delivery, batched with the acks queued beside it; answered
    /// once Redis applied it (its end is kept in Redis until the journal
    /// has it, see [`crate::redis::keys`]'s `unjournaled`). An ack of an id
    /// Redis does not hold waits for the journal's word (a couple of
    /// seconds at most), on its own: the acks queued behind it do not.
    pub async fn ack_one(&self, ack: Ack) -> Result<AckOutcome, QueueError> {
        match &self.acks {
            Some(c) => c.call(ack).await,
            None => Ok(ack_deliveries(self, &[ack], AckJournal::Queued)
                .await?
                .remove(0)),
        }
    }
}

/// When an ack is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckJournal {
    /// Once the journal committed it.
    Committed,
    /// Once Redis let go of the message; the journal row follows within
    /// milliseconds, with the other status changes.
    Queued,
}

/// Acks messages: one script call per shard and one journal commit for the
/// whole call. With [`AckJournal::Committed`] it answers once every consumed
/// message is durable; on an error nothing is lost: Redis may have let go of
/// some of them, and acking them again finds them Consuming in the journal
/// and completes the ack.
pub async fn ack(
    state: &Queue,
    ids: &[MessageId],
    journal: AckJournal,
) -> Result<Vec<AckOutcome>, QueueError> {
    let acks: Vec<Ack> = ids.iter().map(|&id| Ack::id(id)).collect();
    ack_deliveries(state, &acks, journal).await
}

/// Like [`ack`], each id with what the consumer says of the delivery it
/// acks: its receipt (an ack of another delivery than the one in hand is
/// `Stale` and changes nothing), a recurring message's occurrence (an ack
/// of an earlier occurrence, retried after its answer was lost, never acks
/// a later one that is handed out by now).
#[tracing::instrument(name = "ack", level = "debug", skip_all, fields(acks = acks.len()))]
pub async fn ack_deliveries(
    state: &Queue,
    acks: &[Ack],
    journal: AckJournal,
) -> Result<Vec<AckOutcome>, QueueError> {
    let (outcomes, _) = ack_rounds(state, acks, journal, Lookups::Ask).await?;
    Ok(outcomes)
}

/// A batch of single acks (`POST /ack/{id}`), in two steps (see
/// [`super::coalesce`]): the acks Redis can answer are applied and answered
/// at once; an ack of an id Redis does not hold needs the journal's word
/// (never issued, acked long ago, ...), so it is acked again on its own,
/// beside the batches that follow, and a journal database that stopped
/// answering holds up only that ack.
pub(super) async fn ack_batch(
    state: Queue,
    acks: Vec<Ack>,
) -> Result<Staged<AckOutcome>, QueueError> {
    let (outcomes, deferred) =
        ack_rounds(&state, &acks, AckJournal::Queued, Lookups::Defer).await?;
    let mut now: Vec<Option<AckOutcome>> = outcomes.into_iter().map(Some).collect();
    for &i in &deferred {
        now[i] = None;
    }
    let later = (!deferred.is_empty()).then(|| {
        let left: Vec<Ack> = deferred.iter().map(|&i| acks[i]).collect();
        let one = move |ack: Ack| {
            let state = state.clone();
            async move {
                ack_deliveries(&state, &[ack], AckJournal::Queued)
                    .await?
                    .pop()
                    .ok_or_else(|| QueueError::NotScheduled("no answer".into()))
            }
        };
        let all = futures::future::join_all(left.into_iter().map(one));
        Box::pin(all) as futures::future::LocalBoxFuture<'static, _>
    });
    Ok(Staged { now, later })
}

/// What an ack of an id Redis does not hold does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lookups {
    /// Asks the journal how the message's life went.
    Ask,
    /// Leaves it unanswered: its index is returned.
    Defer,
}

/// [`ack_deliveries`]; with [`Lookups::Defer`], also the indexes of the
/// acks left unanswered (their outcomes are placeholders).
async fn ack_rounds(
    state: &Queue,
    acks: &[Ack],
    journal: AckJournal,
    lookups: Lookups,
) -> Result<(Vec<AckOutcome>, Vec<usize>), QueueError> {
    // Until what Redis applied is queued for the journal (a fence's flush
    // waits for it; the lookups below can take seconds).
    let _hold = state.journal.hold();
    let mut deferred = Vec::new();
    let ids: Vec<MessageId> = acks.iter().map(|a| a.id).collect();
    let ids = &ids[..];
    let keys = state.redis.keys();
    let now = now_ms();
    let consumed = |id: MessageId, attempts: i32, at: i64| {
        StatusChange::consumed(id, attempts, at, keys.inflight(keys.shard_of(id)).into())
    };
    // A recurring message moved on to an occurrence: Delaying, no attempts.
    let moved_on = |id: MessageId, next: Occurrence, due: i64, at: i64| {
        StatusChange::moved_on(id, next, due, at, keys.inflight(keys.shard_of(id)).into())
    };
    let mut outcomes = vec![AckOutcome::NotInFlight(None); ids.len()];
    let mut changes = Vec::new();
    let mut lookup_error: Option<QueueError> = None;
    let mut absent: Vec<(usize, MessageId, i32)> = Vec::new();
    let mut pending: Vec<usize> = (0..ids.len()).collect();
    if crate::faults::on("plant_revived") {
        pending.retain(|&i| {
            let struck = crate::faults::strikes("plant_revived", ids[i].0, 8);
            if struck {
                outcomes[i] = AckOutcome::Consumed;
            }
            !struck
        });
    }
    // A recurring message is read, then moved on only if its record is
    // still the one read; one changed in between (its deadline passed, its
    // series was cancelled) is acked again. Rounds after the first are rare.
    for _ in 0..ADVANCE_ROUNDS {
        if pending.is_empty() {
            break;
        }
        let round: Vec<(MessageId, Option<Receipt>)> =
            pending.iter().map(|&i| (ids[i], acks[i].receipt)).collect();
        let results = match state.redis.delivery().ack_many(&round).await {
            Ok(r) => r,
            Err(e) => {
                // What earlier rounds applied in Redis still reaches the
                // journal.
                state.journal.record(changes);
                return Err(e.into());
            }
        };
        // A shard that could not be reached (a Redis Cluster master
        // down) fails the batch, after what the others' calls did reaches
        // the journal.
        if let Some(e) = results.failed {
            lookup_error.get_or_insert(e.into());
        }
        // (index, attempts, (id, record read, next occurrence))
        let mut advancing = Vec::new();
        for (&i, result) in pending.iter().zip(results.each) {
            let id = ids[i];
            let Some(result) = result else { continue };
            outcomes[i] = match result {
                RedisAck::Acked { attempts } => {
                    metrics().acked.inc();
                    changes.push(consumed(id, attempts, now));
                    AckOutcome::Consumed
                }
                // Its series was cancelled while this delivery was out:
                // the message ends Deleted (the journal says so already).
                RedisAck::Stopped { attempts } => {
                    metrics().acked.inc();
                    changes.push(StatusChange::deleted(
                        id,
                        attempts,
                        now,
                        keys.inflight(keys.shard_of(id)).into(),
                    ));
                    AckOutcome::Deleted
                }
                RedisAck::Recurring { attempts, record } => {
                    let (_, msg) = record::decode(id, &record).map_err(RedisError::BadRecord)?;
                    match (acks[i].occurrence(), msg.occurrence) {
                        // The consumer acks an earlier occurrence: that one
                        // was acked already, this one is someone else's.
                        (Some(said), Some(occ)) if said < occ.number => AckOutcome::Next(occ),
                        _ => {
                            advancing.push((
                                i,
                                attempts,
                                (id, record, crate::message::next_occurrence(&msg, now)),
                            ));
                            continue;
                        }
                    }
                }
                RedisAck::NotInFlight {
                    recurring: Some(record),
                    state: waits,
                } => {
                    let (attempts, msg) =
                        record::decode(id, &record).map_err(RedisError::BadRecord)?;
                    match msg.occurrence {
                        // Waiting for a later occurrence, not handed out yet:
                        // this acks an earlier one again (its answer was
                        // lost). The journal catches up with the occurrence.
                        Some(occ)
                            if acks[i]
                                .occurrence()
                                .map_or(attempts == 0 && occ.number > 1, |said| {
                                    said < occ.number
                                }) =>
                        {
                            changes.push(moved_on(id, occ, msg.due_time, now));
                            AckOutcome::Next(occ)
                        }
                        _ => AckOutcome::NotInFlight(Some(waits)),
                    }
                }
                RedisAck::NotInFlight {
                    recurring: None,
                    state,
                } => AckOutcome::NotInFlight(Some(state)),
                RedisAck::Stale {
                    state: now,
                    recurring,
                    attempts,
                } => {
                    // A recurring message's earlier occurrence, acked
                    // again (its answer lost): done already.
                    let earlier = recurring.as_deref().and_then(|r| {
                        let (_, msg) = record::decode(id, r).ok()?;
                        let occ = msg.occurrence?;
                        (acks[i].occurrence()? < occ.number).then_some(occ)
                    });
                    match earlier {
                        Some(occ) => AckOutcome::Next(occ),
                        None => AckOutcome::Stale {
                            now,
                            earlier: acks[i].receipt.is_some_and(|r| r.attempts < attempts),
                        },
                    }
                }
                // Ended in Redis and not journaled yet: the end says how,
                // and is recorded with this ack (an ack sent again because
                // the first one's end never reached the journal).
                RedisAck::Finished(Some(end)) => {
                    changes.push(kept_end(&state.redis, id, end));
                    match end.status {
                        Status::Consumed => acked_already(&acks[i], end.attempts),
                        other => AckOutcome::NotInFlight(Some(other)),
                    }
                }
                RedisAck::Absent | RedisAck::Finished(None) if lookups == Lookups::Defer => {
                    deferred.push(i);
                    continue;
                }
                // Redis does not hold it: the journal knows how its life went.
                RedisAck::Absent | RedisAck::Finished(None) => match find(state, id).await {
                    Err(e) => {
                        lookup_error.get_or_insert(e);
                        continue;
                    }
                    Ok(found) => match found {
                        None => AckOutcome::NotFound,
                        Some((row, _)) => match row.status() {
                            Status::Consumed => acked_already(&acks[i], row.attempts),
                            // A recurring message handed out, that Redis lost (a
                            // restart, a failover) with its series: ending it would
                            // end the whole series. It is left to the restore and
                            // the reconciler, which schedule it again from the
                            // journal: this occurrence comes back, as any delivery
                            // Redis lost does, and its ack then moves the series on.
                            Status::Consuming
                                if crate::message::next_occurrence(&row.message(), now)
                                    .is_some() =>
                            {
                                AckOutcome::NotInFlight(None)
                            }
                            // Handed out, and Redis no longer holds it: an earlier
                            // ack got as far as Redis but was answered 503 before the
                            // journal committed (or Redis lost its data). The
                            // consumer is done with it.
                            Status::Consuming => {
                                absent.push((i, id, row.attempts));
                                continue;
                            }
                            // Redis let go of it lately (its tombstone) and the
                            // journal never heard why: an earlier ack reached Redis
                            // and the node stopped before the journal recorded the
                            // delivery and the ack. Only a consumer that was handed
                            // the message knows its id to ack it; the journal ends
                            // Consumed, so no restore delivers it again.
                            Status::WaitPut | Status::Delaying | Status::Ready
                                if result == RedisAck::Finished(None) =>
                            {
                                absent.push((i, id, row.attempts.max(1)));
                                continue;
                            }
                            other => AckOutcome::NotInFlight(Some(other)),
                        },
                    },
                },
            };
        }
        pending.clear();
        // Acks of messages Redis does not hold and the journal says are
        // live end in Redis too (a tombstone, the end for the journal),
        // so a restore running now cannot schedule them again; one a
        // restore put back meanwhile is acked again, the usual way.
        if !absent.is_empty() {
            let ends: Vec<(MessageId, Status, i32)> = absent
                .iter()
                .map(|&(_, id, attempts)| (id, Status::Consumed, attempts))
                .collect();
            match state.redis.journal_sync().end_absent(&ends).await {
                Ok(flags) => {
                    for ((i, id, attempts), ended) in absent.drain(..).zip(flags) {
                        if ended {
                            metrics().acked.inc();
                            changes.push(consumed(id, attempts, now));
                            outcomes[i] = AckOutcome::Consumed;
                        } else {
                            pending.push(i);
                        }
                    }
                }
                Err(e) => {
                    // What Redis applied before the error still reaches the journal
                    state.journal.record(changes);
                    return Err(e.into());
                }
            }
        }
        if advancing.is_empty() {
            continue;
        }
        let items: Vec<_> = advancing.iter().map(|(_, _, item)| item.clone()).collect();
        let advanced = match state.redis.delivery().advance_many(&items).await {
            Ok(a) => a,
            Err(e) => {
                // What Redis applied before the error still reaches the journal
                state.journal.record(changes);
                return Err(e.into());
            }
        };
        for ((i, attempts, (id, _, next)), done) in advancing.into_iter().zip(advanced) {
            match (done, next) {
                (Advanced::Next { at }, Some(next)) => {
                    metrics().acked.inc();
                    let occ = next.occurrence.expect("a next occurrence has its number");
                    changes.push(moved_on(id, occ, next.due_time, at));
                    state.router.do_send(WakeShard {
                        shard: keys.shard_of(id),
                        at_ms: next.due_time,
                    });
                    outcomes[i] = AckOutcome::Next(occ);
                }
                (Advanced::Next { at } | Advanced::Ended { at }, _) => {
                    metrics().acked.inc();
                    changes.push(consumed(id, attempts, at));
                    outcomes[i] = AckOutcome::Consumed;
                }
                (Advanced::Changed, _) => pending.push(i),
            }
        }
    }
    // Every change Redis applied goes to the journal, even when another
    // id's lookup failed.
    match journal {
        AckJournal::Committed => state.journal.record_durable(changes).await?,
        AckJournal::Queued => state.journal.record(changes),
    }
    let left: BTreeSet<usize> = deferred.iter().copied().collect();
    for (i, (id, outcome)) in ids.iter().zip(&outcomes).enumerate() {
        if !left.contains(&i) {
            tracing::debug!(id = %id, ?outcome, "acked");
        }
    }
    match lookup_error {
        Some(e) => Err(e),
        None => Ok((outcomes, deferred)),
    }
}

/// The journal's row of a message Redis no longer holds; a journal
/// database that does not answer in a couple of seconds is unavailable
/// (see [`crate::actors::journal::Journal::find_waiting`]).
async fn find(
    state: &Queue,
    id: MessageId,
) -> Result<
    Option<(
        crate::journal::models::MessageRow,
        Vec<crate::journal::models::FlowRow>,
    )>,
    QueueError,
> {
    Ok(state.journal.find_waiting(id).await?)
}

/// Rounds of reading and moving on a recurring message an ack makes before
/// it answers `not_in_flight` (its record kept changing under it).
const ADVANCE_ROUNDS: usize = 4;

/// What nacking one id did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NackOutcome {
    /// The delivery failed: the message is ready again, scheduled again,
    /// or dead after its last attempt.
    Failed {
        attempts: i32,
        then: AfterFailure,
    },
    /// Not handed out, or ended (the status says how, when known).
    NotInFlight(Option<Status>),
    /// The receipt names an earlier delivery; nothing changed. The status
    /// is where the message is now.
    Stale(Status),
    NotFound,
}

/// Gives back delivered messages, each with its own wait (`None`: its retry
/// policy) and the receipt of the delivery given back when the consumer
/// has one, and answers once the journal committed what became of them.
#[tracing::instrument(name = "nack", level = "debug", skip_all, fields(nacks = nacks.len()))]
pub async fn nack(
    state: &Queue,
    nacks: &[(MessageId, Option<i64>, Option<Receipt>)],
) -> Result<Vec<NackOutcome>, QueueError> {
    let results = state.redis.delivery().nack_many(nacks).await?;
    let keys = state.redis.keys();
    let mut outcomes = Vec::with_capacity(nacks.len());
    let mut changes = Vec::new();
    let mut ready_topics: Vec<String> = Vec::new();
    // A shard that could not be reached (a Redis Cluster master down)
    // fails the batch, after the retry times the others' calls set reach
    // the journal: a nack sent again finds them not in flight.
    let mut lookup_error: Option<QueueError> = results.failed.map(Into::into);
    for (&(id, _, _), result) in nacks.iter().zip(results.each) {
        let Some(result) = result else {
            outcomes.push(NackOutcome::NotFound);
            continue;
        };
        outcomes.push(match result {
            RedisNack::Failed {
                attempts,
                then,
                at,
                topic,
            } => {
                let shard = keys.shard_of(id);
                let m = metrics();
                m.count(&m.nacked, &topic, 1);
                if then == AfterFailure::Dead {
                    m.count(&m.dead, &topic, 1);
                }
                match then {
                    AfterFailure::Ready => ready_topics.push(topic),
                    AfterFailure::Delaying { due } => state.router.do_send(WakeShard {
                        shard,
                        at_ms: due,
                    }),
                    AfterFailure::Dead => {
                        tracing::info!(id = %id, topic = %topic, attempts, "nacked on its last attempt; the message is dead")
                    }
                    AfterFailure::Stopped => {}
                }
                changes.push(StatusChange::failed(
                    id,
                    then,
                    attempts,
                    at,
                    keys.inflight(shard).into(),
                ));
                NackOutcome::Failed { attempts, then }
            }
            RedisNack::NotInFlight { state } => NackOutcome::NotInFlight(Some(state)),
            RedisNack::Stale { state: now } => NackOutcome::Stale(now),
            RedisNack::Absent => match find(state, id).await {
                Err(e) => {
                    lookup_error.get_or_insert(e);
                    NackOutcome::NotFound
                }
                Ok(None) => NackOutcome::NotFound,
                Ok(Some((row, _))) => NackOutcome::NotInFlight(Some(row.status())),
            },
        });
    }
    ready_topics.sort_unstable();
    ready_topics.dedup();
    for topic in &ready_topics {
        state.waiters.notify(topic);
    }
    state.journal.record_durable(changes).await?;
    for ((id, _, _), outcome) in nacks.iter().zip(&outcomes) {
        tracing::debug!(id = %id, ?outcome, "given back");
    }
    match lookup_error {
        Some(e) => Err(e),
        None => Ok(outcomes),
    }
}

//! The invariants, checked from the history alone (the server's state only
//! as the final read of each message), and the report.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{json, Value};

use super::history::{from_wall_ms, CancelBy, Fault, Got, OnDuplicate, Op, Pushed, Res, What};
use super::workload::{CAP, LIMITED, PAUSED};

/// How long before Redis lost its writes an ack answered 200 may still
/// come back when a node stopped around then: an end Redis applied and
/// the node had queued for the journal when it was killed (or frozen past
/// the fence's wait), with Redis's copy lost (docs/src/concepts.md, "When Redis loses
/// its last writes": "What can still come back"). A running node writes
/// its queued ends before a fenced shard hands anything out again. The
/// journal's flow batches lag by a few milliseconds on an idle machine;
/// under the checker's own load lags past 1 s were seen, so 3 s.
pub const UNJOURNALED_ACK_MS: i64 = 3_000;
/// How long after Redis lost its writes a node stopped may still have
/// left its queued ends out of the fence's walk: a frozen node is waited
/// for until it has not said it runs for 5 s, and the fence is probed
/// every second.
pub const NODE_GONE_MS: i64 = 7_000;

/// How long a restarted node may go without its worker id lease, so
/// without writing status changes to the journal: its old ZooKeeper
/// session's expiry (the checker's cluster runs 3 s sessions) and a step.
pub const LEASE_WAIT_MS: i64 = 5_000;
/// How long an end a killed node left in Redis waits for the reconciler
/// (`--reconcile-interval 2s`, `--reconcile-grace 2s`) to journal it.
pub const RECONCILED_MS: i64 = 5_000;

/// When the ends a node killed at `from` left in Redis's unjournaled hash
/// are in the journal at the latest: the reconciler (the leader's duty)
/// writes them within [`RECONCILED_MS`], a span that starts again after
/// each fault overlapping it that keeps the reconciler from the journal or
/// from leading, or holds it back (the database out of reach or refusing
/// writes, ZooKeeper partitioned or without quorum, a node killed, frozen
/// or its clock moved: the leader, whose duty it is, or the node that
/// takes over from it; a clock behind holds entries younger than the
/// grace). A 30-minute run saw the leader killed right after acks it
/// answered while the database was down, and the new leader's first pass
/// come 7 s later, past a clock jump behind.
fn reconciled_by(from: i64, faults: &[Fault]) -> i64 {
    let us = 1_000;
    let mut until = from + RECONCILED_MS * us;
    loop {
        let later = faults
            .iter()
            .filter(|h| {
                (h.journal_away()
                    || h.kind.starts_with("zookeeper_")
                    || h.kind.starts_with("node_"))
                    && h.from <= until
                    && h.to >= from
            })
            .map(|h| h.to + RECONCILED_MS * us)
            .max()
            .unwrap_or(until);
        if later <= until {
            return until;
        }
        until = later;
    }
}

/// When `loss` took from Redis what `ack` applied (None: it could not).
/// Most losses happen at once (a restart, a promotion), and lose what was
/// applied before. A Redis Cluster master failed over while it hung
/// answers, when it resumes, the commands its connections sent meanwhile
/// and a while after, and loses them when it learns of the failover (by
/// [`Fault::stale_until`]): an ack answered in that span was lost then.
fn lost_at(loss: &Fault, ack: &Op) -> Option<i64> {
    if !loss.master_hung() || ack.complete < loss.from {
        return Some(loss.from);
    }
    (ack.invoke <= loss.stale_until()).then_some(ack.complete.min(loss.stale_until()))
}

/// Whether `poll` may hand out again what `op` (an ack or a cancel) ended
/// because a Redis Cluster master failed over while it hung answered `op`
/// after it resumed and lost it with its data when it learned of the
/// failover: when the new master's fence walk came first, the message is
/// handed out again (its ack deadline passed, or it fell due) until the
/// reconciler takes out of Redis what the journal ended
/// (`finishedInJournal`).
fn stale_write(op: &Op, poll: &Op, losses: &[&Fault], faults: &[Fault]) -> bool {
    losses.iter().any(|f| {
        f.master_hung()
            && op.complete >= f.from
            && op.invoke <= f.stale_until()
            && poll.invoke <= reconciled_by(f.stale_until(), faults)
    })
}

/// Why a delivery after an ack answered consumed is inside the documented
/// window (docs/src/concepts.md, "When Redis loses its last writes": "What can still
/// come back"): Redis lost its writes between the two, and the ack's end
/// may not have reached the journal by then. None: a violation.
fn unjournaled(ack: &Op, poll: &Op, losses: &[&Fault], faults: &[Fault]) -> Option<&'static str> {
    // The history counts µs; the bounds are in ms.
    let us = 1_000;
    losses
        .iter()
        .filter_map(|f| lost_at(f, ack))
        .filter(|&at| at >= ack.invoke && at <= poll.complete)
        .find_map(|at| {
            let stopped = faults.iter().any(|g| {
                g.stopped_node() && g.to >= ack.invoke && g.from <= at + NODE_GONE_MS * us
            });
            if stopped && ack.complete + UNJOURNALED_ACK_MS * us >= at {
                return Some(
                    "ack answered within 3 s before Redis lost its writes, a node stopped then",
                );
            }
            faults.iter().find_map(|g| {
                let during = |from: i64, to: i64| ack.complete >= from && ack.invoke <= to;
                if g.journal_away()
                    && during(g.from - us * 1_000, g.to + us * 1_000)
                    && at <= g.to + RECONCILED_MS * us
                {
                    Some("ack answered while the journal was out of reach")
                } else if g.restarted_node()
                    && during(g.to, g.to + LEASE_WAIT_MS * us)
                    && at <= g.to + (LEASE_WAIT_MS + 1_000) * us
                {
                    Some("ack answered by a node not yet holding its worker id lease")
                } else if g.restarted_node()
                    && during(g.from - RECONCILED_MS * us, g.from)
                    && at <= reconciled_by(g.from, faults)
                {
                    Some("ack's end left by a killed node for the reconciler")
                } else {
                    None
                }
            })
        })
}

/// The final read of a message: its status and due time (wall ms).
#[derive(Debug, Clone)]
pub struct Final {
    pub status: String,
    pub due: i64,
}

/// One delivery: the poll that brought it and the message.
struct Delivery<'a> {
    op: &'a Op,
    consumer: usize,
    got: &'a Got,
}

struct Push<'a> {
    op: &'a Op,
    delay: i64,
    body: &'a str,
    topic: &'a str,
    biz_key: Option<&'a str>,
}

/// How a push with `onDuplicate` (debounce) may have changed a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Touch {
    /// Answered ok as `replaced` or `extended` with the message's id.
    Applied,
    /// No definite answer (unknown, or failed: counted as maybe applied
    /// too) on the message's topic and bizKey.
    Maybe,
    /// Answered ok as changing nothing of it (`in_flight`, `not_later`)
    /// or as another message (a fresh push, or the key's other holder):
    /// what it wrote to the journal can come back only when Redis lost
    /// its writes (a restore reads the journal).
    OnlyIfLost,
    No,
}

/// What `p` (a push with `onDuplicate` in `op`) may have done to message
/// `id` of `key` (its topic and bizKey).
fn touch(op: &Op, p: &Pushed, id: &str, key: Option<(&str, &str)>) -> Touch {
    let same_key = key.is_some_and(|(t, k)| p.topic == t && p.biz_key.as_deref() == Some(k));
    if op.res != Res::Ok {
        return if same_key { Touch::Maybe } else { Touch::No };
    }
    if p.duplicate && p.id.as_deref() == Some(id) {
        if p.answered("replaced") || p.answered("extended") {
            return Touch::Applied;
        }
        return Touch::OnlyIfLost;
    }
    if same_key {
        Touch::OnlyIfLost
    } else {
        Touch::No
    }
}

/// A change that may have set a message's due time: its push, a
/// reschedule, a replace or an extend. `at`: the earliest due time it
/// could set, on the history's scale; `definite`: answered as applied.
struct Change<'a> {
    op: &'a Op,
    at: i64,
    definite: bool,
    origin: bool,
}

/// The violations by invariant: how many, and the first
/// [`KEPT_EXAMPLES`] of each.
#[derive(Default)]
pub struct Violations(pub BTreeMap<&'static str, (usize, Vec<String>)>);

const KEPT_EXAMPLES: usize = 100;

impl Violations {
    pub(super) fn add(&mut self, invariant: &'static str, what: String) {
        let (n, examples) = self.0.entry(invariant).or_default();
        *n += 1;
        if examples.len() < KEPT_EXAMPLES {
            examples.push(what);
        }
    }

    pub fn total(&self) -> usize {
        self.0.values().map(|(n, _)| n).sum()
    }
}

/// The report's violations: by invariant, how many and the first five.
pub fn violations_json(v: &Violations) -> Value {
    json!(v
        .0
        .iter()
        .map(|(k, (n, l))| (
            *k,
            json!({"count": n, "first": l.iter().take(5).collect::<Vec<_>>()})
        ))
        .collect::<BTreeMap<_, _>>())
}

fn ms(us: i64) -> i64 {
    us / 1000
}

/// Checks the history; `drained_at` is when the faults had healed and the
/// quiet period began, `finals` the final read of every message pushed.
pub fn check(
    ops: &[Op],
    faults: &[Fault],
    finals: &HashMap<String, Option<Final>>,
    drained_at: i64,
) -> (Violations, Value) {
    let mut v = Violations::default();
    let mut pushes: HashMap<&str, Push> = HashMap::new();
    // Bodies of pushes that got no definite answer: they may exist (a
    // replace or extend whose holder ended is a new message too).
    let mut maybe: HashMap<&str, (&Op, &Pushed)> = HashMap::new();
    // Pushes with onDuplicate (debounce) by topic and bizKey.
    let mut debounces: HashMap<(&str, &str), Vec<(&Op, &Pushed)>> = HashMap::new();
    // The topic and bizKey of each message an answer named.
    let mut key_of: HashMap<&str, (&str, &str)> = HashMap::new();
    let mut deliveries: Vec<Delivery> = Vec::new();
    // id → (ack op, answered consumed)
    let mut acks: HashMap<&str, Vec<(&Op, bool)>> = HashMap::new();
    // receipt → when an ack or nack of that delivery was sent (and may
    // have ended it).
    let mut ended: HashMap<(&str, &str), i64> = HashMap::new();
    let mut cancels: Vec<(&Op, &CancelBy, &Vec<String>)> = Vec::new();
    // A prefix cancel answered ok: its topic, prefix and count deleted.
    let mut prefix_counts: Vec<(&Op, &str, &str, u64)> = Vec::new();
    let mut reschedules: HashMap<&str, Vec<(&Op, i64, bool)>> = HashMap::new();
    let mut pauses: Vec<(&Op, bool)> = Vec::new();
    let mut nacked: HashSet<&str> = HashSet::new();
    // id → the ordered group its push named.
    let mut group_of: HashMap<&str, &str> = HashMap::new();
    for op in ops {
        match &op.what {
            What::Push { msgs } => {
                for p in msgs {
                    if let Some(k) = &p.biz_key {
                        if p.on_duplicate.is_some() {
                            debounces
                                .entry((p.topic.as_str(), k.as_str()))
                                .or_default()
                                .push((op, p));
                        }
                        if let (Some(id), Res::Ok) = (&p.id, op.res) {
                            key_of.insert(id, (p.topic.as_str(), k.as_str()));
                        }
                    }
                    if let (Some(id), Some(g), Res::Ok, false) =
                        (&p.id, &p.group, op.res, p.duplicate)
                    {
                        group_of.insert(id.as_str(), g.as_str());
                    }
                    match (&p.id, op.res) {
                        (Some(id), Res::Ok) if !p.duplicate => {
                            pushes.insert(
                                id,
                                Push {
                                    op,
                                    delay: p.delay,
                                    body: &p.body,
                                    topic: &p.topic,
                                    biz_key: p.biz_key.as_deref(),
                                },
                            );
                        }
                        (_, Res::Unknown) => {
                            maybe.insert(&p.body, (op, p));
                        }
                        (_, Res::Fail) if p.on_duplicate.is_some() => {
                            maybe.insert(&p.body, (op, p));
                        }
                        _ => {}
                    }
                }
            }
            What::Poll {
                consumer,
                topic,
                got,
                acks: carried,
            } => {
                if op.res == Res::Ok {
                    for g in got {
                        if &g.topic != topic {
                            v.add(
                                "answer",
                                format!(
                                    "{}: a message of {} handed out by a poll of {topic}",
                                    g.id, g.topic
                                ),
                            );
                        }
                        deliveries.push(Delivery {
                            op,
                            consumer: *consumer,
                            got: g,
                        });
                    }
                }
                for (id, receipt, consumed) in carried {
                    if op.res.maybe() {
                        ended.entry((id, receipt)).or_insert(op.invoke);
                        acks.entry(id)
                            .or_default()
                            .push((op, op.res == Res::Ok && *consumed));
                    }
                }
            }
            What::Ack {
                id,
                receipt,
                consumed,
            } => {
                if op.res.maybe() {
                    ended.entry((id, receipt)).or_insert(op.invoke);
                    acks.entry(id)
                        .or_default()
                        .push((op, op.res == Res::Ok && *consumed));
                }
            }
            What::Nack { id, receipt } => {
                if op.res.maybe() {
                    ended.entry((id, receipt)).or_insert(op.invoke);
                    nacked.insert(id);
                }
            }
            What::Cancel {
                by,
                deleted,
                counted,
            } => {
                cancels.push((op, by, deleted));
                if let (CancelBy::Prefix { topic, prefix }, Some(n)) = (by, counted) {
                    prefix_counts.push((op, topic, prefix, *n));
                }
            }
            What::Reschedule {
                id,
                delay,
                rescheduled,
            } => reschedules
                .entry(id)
                .or_default()
                .push((op, *delay, *rescheduled)),
            What::Pause { topic } if topic == PAUSED => pauses.push((op, true)),
            What::Resume { topic } if topic == PAUSED => pauses.push((op, false)),
            What::Pause { .. } | What::Resume { .. } => {}
        }
    }
    let redis_losses: Vec<&Fault> = faults.iter().filter(|f| f.redis_lost()).collect();
    let lost_between = |from: i64, to: i64| {
        redis_losses
            .iter()
            .any(|f| f.from <= to && f.stale_until() >= from)
    };
    // A hung master's old data served after a failover: an ack or cancel
    // applied on the new master meanwhile is not in it.
    let stale_master = |done: i64, poll: &Op| {
        redis_losses.iter().any(|f| {
            f.master_hung()
                && done <= f.stale_until()
                && poll.invoke <= f.stale_until()
                && poll.complete >= f.from
        })
    };
    const STALE: &str = "a failed-over Redis Cluster master serving its old data after it resumed";
    const STALE_WRITE: &str =
        "an ack or cancel a failed-over Redis Cluster master answered after it resumed, lost with its data, before the reconciler's pass";

    // Unknown pushes by topic and bizKey: what may have made a message an
    // answer named but no push answered.
    let mut maybe_by_key: HashMap<(&str, &str), Vec<(&Op, &Pushed)>> = HashMap::new();
    for (op, p) in maybe.values() {
        if let Some(k) = &p.biz_key {
            maybe_by_key
                .entry((p.topic.as_str(), k.as_str()))
                .or_default()
                .push((op, p));
        }
    }
    // Each message delivered: the pushes that may have made it (the one
    // answered with its id, or those that got no definite answer with its
    // body, or with its topic and bizKey), and its topic and bizKey.
    let mut origins: HashMap<&str, Vec<(&Op, i64, &str)>> = HashMap::new();
    let mut keys: HashMap<&str, (&str, &str)> = HashMap::new();
    for d in &deliveries {
        let id = d.got.id.as_str();
        if origins.contains_key(id) {
            continue;
        }
        let mut list: Vec<(&Op, i64, &str)> = Vec::new();
        let mut key = key_of.get(id).copied();
        match pushes.get(id) {
            Some(p) => list.push((p.op, p.op.invoke + p.delay * 1000, p.body)),
            None => {
                if let Some((op, p)) = maybe.get(d.got.body.as_str()) {
                    list.push((op, op.invoke + p.delay * 1000, p.body.as_str()));
                    if key.is_none() {
                        key = p.biz_key.as_deref().map(|k| (p.topic.as_str(), k));
                    }
                }
                for (op, p) in key.and_then(|k| maybe_by_key.get(&k)).into_iter().flatten() {
                    if !list.iter().any(|o| o.2 == p.body) {
                        list.push((op, op.invoke + p.delay * 1000, p.body.as_str()));
                    }
                }
            }
        }
        if let Some(k) = key {
            keys.insert(id, k);
        }
        origins.insert(id, list);
    }
    // The pushes with onDuplicate that may have changed message `id`.
    let touching = |id: &str| -> Vec<(&Op, &Pushed, Touch)> {
        let key = keys.get(id).copied();
        key.and_then(|k| debounces.get(&k))
            .into_iter()
            .flatten()
            .map(|(op, p)| (*op, *p, touch(op, p, id, key)))
            .filter(|t| t.2 != Touch::No)
            .collect()
    };
    let mut excused_by: BTreeMap<&'static str, u64> = BTreeMap::new();
    const REPLACE_LOST: &str =
        "a replace lost by Redis, delivered with a former body until a restore reads the journal's";

    // Nothing delivered that was never pushed; bodies intact: a delivered
    // body is its push's or one of its replaces' (answered replaced, or
    // with no definite answer), sent before the poll was answered.
    // Replaced: a poll sent after a replace was answered `replaced` hands
    // out that replace's body, or that of a replace that may have been
    // applied after it (not answered before it was sent), unless Redis
    // lost its writes between (the documented window).
    for d in &deliveries {
        let id = d.got.id.as_str();
        let body = d.got.body.as_str();
        let origin = &origins[id];
        if origin.is_empty() {
            v.add(
                "phantom",
                format!("{id} ({body:?}) delivered, never pushed"),
            );
            continue;
        }
        let touched = touching(id);
        let replaces: Vec<&(&Op, &Pushed, Touch)> = touched
            .iter()
            .filter(|(op, p, _)| {
                p.on_duplicate == Some(OnDuplicate::Replace) && op.invoke < d.op.complete
            })
            .collect();
        let could = origin.iter().any(|o| o.2 == body)
            || replaces
                .iter()
                .any(|(_, p, t)| *t != Touch::OnlyIfLost && p.body == body);
        if !could {
            let lost_replace = replaces.iter().find(|(op, p, t)| {
                *t == Touch::OnlyIfLost && p.body == body && lost_between(op.invoke, d.op.complete)
            });
            if lost_replace.is_some() {
                *excused_by
                    .entry("a replace answered in_flight or as another message, its journal row read by a restore after Redis lost its writes")
                    .or_default() += 1;
            } else {
                v.add(
                    "body",
                    format!(
                        "{id}: pushed {:?}, delivered {body:?}, neither its push's nor a replace's that may have been applied ({} replaces sent before the poll was answered)",
                        origin[0].2,
                        replaces.len()
                    ),
                );
            }
            continue;
        }
        for (r, rp, _) in replaces.iter().filter(|(op, p, t)| {
            *t == Touch::Applied && p.answered("replaced") && op.complete < d.op.invoke
        }) {
            let later = replaces.iter().any(|(op, p, t)| {
                *t != Touch::OnlyIfLost && op.complete > r.invoke && p.body == body
            });
            if rp.body == body || later {
                continue;
            }
            if lost_between(r.invoke, d.op.complete) {
                *excused_by.entry(REPLACE_LOST).or_default() += 1;
            } else {
                v.add(
                    "replaced",
                    format!(
                        "{id}: delivered {body:?} by a poll at {}..{} ms via :{}, after a replace with {:?} was answered replaced at {}..{} ms via :{} (and no replace that may have come after it has that body)",
                        ms(d.op.invoke),
                        ms(d.op.complete),
                        d.op.node,
                        rp.body,
                        ms(r.invoke),
                        ms(r.complete),
                        r.node
                    ),
                );
            }
            break;
        }
    }

    // Never early: by the test host's clock, a hand-out arrives no
    // earlier than the invocation plus the delay of the last change of its
    // due time: its push, a reschedule, a replace or an extend. Any change
    // that may have been applied (no definite answer, or answered while
    // the poll ran) may be that last one, unless one answered as applied
    // was sent after it was answered and answered before the poll was
    // sent (and Redis lost nothing between: a lost reschedule or replace
    // runs at the former time, the documented window). An extend only
    // moves a due time later, so one with no definite answer changes no
    // bound.
    let mut lateness_in: Vec<i64> = Vec::new();
    let mut lateness_out: Vec<i64> = Vec::new();
    // The same for messages due by a reschedule: how late its answer's
    // due time is kept.
    let mut rescheduled_in: Vec<i64> = Vec::new();
    let mut rescheduled_out: Vec<i64> = Vec::new();
    let mut first_seen: HashSet<&str> = HashSet::new();
    for d in &deliveries {
        let id = d.got.id.as_str();
        let origin = &origins[id];
        if origin.is_empty() {
            continue;
        }
        let pushed = origin.iter().map(|o| o.1).min().unwrap_or(i64::MAX);
        let mut changes: Vec<Change> = origin
            .iter()
            .map(|(op, at, _)| Change {
                op,
                at: *at,
                definite: false,
                origin: true,
            })
            .collect();
        for (r, delay, rescheduled) in reschedules.get(id).into_iter().flatten() {
            if r.res == Res::Ok && *rescheduled || r.res == Res::Unknown {
                changes.push(Change {
                    op: r,
                    at: r.invoke + delay * 1000,
                    definite: r.res == Res::Ok,
                    origin: false,
                });
            }
        }
        for (op, p, t) in touching(id) {
            let replace = p.on_duplicate == Some(OnDuplicate::Replace);
            if t == Touch::Applied || (t == Touch::Maybe && replace) {
                changes.push(Change {
                    op,
                    at: op.invoke + p.delay * 1000,
                    definite: t == Touch::Applied,
                    origin: false,
                });
            }
        }
        let last = |c: &Change, honour_loss: bool| {
            c.op.invoke < d.op.complete
                && !changes.iter().any(|e| {
                    e.definite
                        && e.op.complete < d.op.invoke
                        && e.op.invoke > c.op.complete
                        && !(honour_loss && lost_between(e.op.invoke, d.op.complete))
                })
        };
        let bound = changes
            .iter()
            .filter(|c| last(c, true))
            .map(|c| c.at)
            .min()
            .unwrap_or(pushed);
        // What the bound would be had no change Redis lost been lost.
        let unlost = changes
            .iter()
            .filter(|c| last(c, false))
            .map(|c| c.at)
            .min()
            .unwrap_or(pushed);
        // Due by a reschedule, replace or extend answered before the poll.
        let moved = changes
            .iter()
            .any(|c| c.definite && !c.origin && c.op.complete < d.op.invoke);
        if d.op.complete >= bound && d.op.complete < unlost {
            *excused_by
                .entry("a reschedule or replace lost by Redis, delivered at its former time")
                .or_default() += 1;
        }
        if d.op.complete < bound {
            v.add(
                "early",
                format!(
                    "{id}: arrived {} ms before its due time ({} ms by the push's, reschedule's, replace's or extend's invocation and delay; pushed due at {} ms; poll {}..{} ms via :{})",
                    ms(bound - d.op.complete),
                    ms(bound),
                    ms(pushed),
                    ms(d.op.invoke),
                    ms(d.op.complete),
                    d.op.node
                ),
            );
        }
        if first_seen.insert(id) {
            let late = ms(d.op.complete - bound);
            let in_fault = faults
                .iter()
                .any(|f| f.from <= bound + 1_000_000 && f.to + 5_000_000 >= bound);
            match (in_fault, moved) {
                (true, false) => lateness_in.push(late),
                (false, false) => lateness_out.push(late),
                (true, true) => rescheduled_in.push(late),
                (false, true) => rescheduled_out.push(late),
            }
        }
    }

    // Nothing revived: no hand-out after an ack answered consumed, except
    // an ack answered within UNJOURNALED_ACK_MS before Redis lost its
    // writes (or while the journal was out of reach) — the documented
    // window.
    let mut by_id: HashMap<&str, Vec<&Delivery>> = HashMap::new();
    for d in &deliveries {
        by_id.entry(d.got.id.as_str()).or_default().push(d);
    }
    for (id, list) in &acks {
        for (ack, consumed) in list {
            if !consumed {
                continue;
            }
            for d in by_id.get(id).into_iter().flatten() {
                if d.op.invoke <= ack.complete {
                    continue;
                }
                let why = stale_master(ack.complete, d.op)
                    .then_some(STALE)
                    .or_else(|| unjournaled(ack, d.op, &redis_losses, faults))
                    .or_else(|| {
                        stale_write(ack, d.op, &redis_losses, faults).then_some(STALE_WRITE)
                    });
                match why {
                    Some(why) => *excused_by.entry(why).or_default() += 1,
                    None => v.add(
                        "revived",
                        format!(
                            "{id}: handed out {} ms after an ack answered consumed (ack {}..{} ms via :{}, poll {}..{} ms)",
                            ms(d.op.invoke - ack.complete),
                            ms(ack.invoke),
                            ms(ack.complete),
                            ack.node,
                            ms(d.op.invoke),
                            ms(d.op.complete)
                        ),
                    ),
                }
            }
        }
    }

    // Answers are true (debounce): a push with onDuplicate answered as a
    // duplicate says what it did, with the due time it left the message
    // at, except `in_flight` (nothing changed, no due time).
    for (op, p) in debounces.values().flatten() {
        if op.res != Res::Ok || !p.duplicate {
            continue;
        }
        let fits = match (p.on_duplicate, p.result.as_deref()) {
            (Some(OnDuplicate::Replace), Some("replaced"))
            | (Some(OnDuplicate::Extend), Some("extended" | "not_later")) => p.due_time.is_some(),
            (_, Some("in_flight")) => p.due_time.is_none(),
            _ => false,
        };
        if !fits {
            v.add(
                "answer",
                format!(
                    "{}: a push with onDuplicate {:?} answered duplicate with result {:?} and dueTime {:?} ({}..{} ms via :{})",
                    p.id.as_deref().unwrap_or_default(),
                    p.on_duplicate.map_or("", |m| m.name()),
                    p.result,
                    p.due_time,
                    ms(op.invoke),
                    ms(op.complete),
                    op.node
                ),
            );
        }
    }

    // Answers are true: a message a cancel answered `deleted` is not
    // handed out after that answer (a cancel waits for its journal commit,
    // so no Redis loss excuses it); a paused topic hands nothing out
    // between a pause answered ok and the next resume's invocation.
    for (op, _, deleted) in &cancels {
        if op.res != Res::Ok {
            continue;
        }
        for id in deleted.iter() {
            for d in by_id.get(id.as_str()).into_iter().flatten() {
                if d.op.invoke <= op.complete {
                    continue;
                }
                if stale_master(op.complete, d.op) {
                    *excused_by.entry(STALE).or_default() += 1;
                } else if stale_write(op, d.op, &redis_losses, faults) {
                    *excused_by.entry(STALE_WRITE).or_default() += 1;
                } else {
                    v.add(
                        "answer",
                        format!(
                            "{id}: answered deleted at {} ms, handed out in a poll at {}..{} ms",
                            ms(op.complete),
                            ms(d.op.invoke),
                            ms(d.op.complete)
                        ),
                    );
                }
            }
        }
    }
    let mut sorted_pauses = pauses.clone();
    sorted_pauses.sort_by_key(|(op, _)| op.invoke);
    for (i, (p, is_pause)) in sorted_pauses.iter().enumerate() {
        if !is_pause || p.res != Res::Ok {
            continue;
        }
        let until = sorted_pauses[i + 1..]
            .iter()
            .find(|(_, pause)| !pause)
            .map_or(i64::MAX, |(r, _)| r.invoke);
        for d in &deliveries {
            if d.got.topic == PAUSED
                && d.op.invoke > p.complete
                && d.op.complete < until
                && !lost_between(p.complete, d.op.complete)
            {
                v.add(
                    "answer",
                    format!(
                        "{}: handed out by a poll at {}..{} ms while {PAUSED} was paused (pause answered at {} ms)",
                        d.got.id,
                        ms(d.op.invoke),
                        ms(d.op.complete),
                        ms(p.complete)
                    ),
                );
            }
        }
    }

    // One consumer at a time: no hand-out (by Redis's clock) while an
    // earlier delivery's receipt is live (before its deadline, and before
    // an ack or nack of it was sent), unless Redis lost its writes
    // between the two.
    // Until when a delivery held its message, at the latest: its deadline,
    // or an ack or nack of it sent before.
    let held_until = |d: &Delivery| {
        let deadline = d.got.deadline()?;
        Some(
            deadline.min(
                ended
                    .get(&(d.got.id.as_str(), d.got.receipt.as_str()))
                    .copied()
                    .unwrap_or(i64::MAX),
            ),
        )
    };
    for (id, list) in &by_id {
        let mut list: Vec<&&Delivery> = list.iter().collect();
        list.sort_by_key(|d| d.got.claimed());
        for pair in list.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let (Some(a_at), Some(b_at), Some(held_until)) =
                (a.got.claimed(), b.got.claimed(), held_until(a))
            else {
                continue;
            };
            if b_at + 1_000 < held_until && !lost_between(a_at, b_at) {
                v.add(
                    "doubled",
                    format!(
                        "{id}: handed to consumer {} while consumer {} held it ({} ms into its ttl; receipts {} via :{} and {} via :{})",
                        b.consumer,
                        a.consumer,
                        ms(b_at - a_at),
                        a.got.receipt,
                        a.op.node,
                        b.got.receipt,
                        b.op.node
                    ),
                );
            }
        }
    }

    // One message of a group at a time: no hand-out of a message of an
    // ordered group (by Redis's clock) while an earlier delivery of
    // another message of the group is live (before its deadline, and
    // before an ack or nack of it was sent), unless Redis lost its writes
    // between the two. (A nack or an expired deadline keeps the turn with
    // that message: the next may still not go out then, which this, by
    // the earliest end, does not hold against it.) The group is the one
    // its push named, else the one its delivery named.
    let mut by_group: BTreeMap<&str, Vec<&Delivery>> = BTreeMap::new();
    for d in &deliveries {
        let group = group_of
            .get(d.got.id.as_str())
            .copied()
            .or(d.got.group.as_deref());
        if let Some(g) = group {
            by_group.entry(g).or_default().push(d);
        }
    }
    let mut grouped_deliveries = 0;
    for (group, list) in &mut by_group {
        grouped_deliveries += list.len();
        list.sort_by_key(|d| d.got.claimed());
        for (i, a) in list.iter().enumerate() {
            let (Some(a_at), Some(held_until)) = (a.got.claimed(), held_until(a)) else {
                continue;
            };
            // The next delivery of another message of the group.
            let Some(b) = list[i + 1..].iter().find(|b| b.got.id != a.got.id) else {
                continue;
            };
            let Some(b_at) = b.got.claimed() else {
                continue;
            };
            if b_at + 1_000 < held_until && !lost_between(a_at, b_at) {
                v.add(
                    "grouped",
                    format!(
                        "group {group}: {} handed to consumer {} while consumer {} held {} ({} ms into its ttl; via :{} and :{})",
                        b.got.id,
                        b.consumer,
                        a.consumer,
                        a.got.id,
                        ms(b_at - a_at),
                        a.op.node,
                        b.op.node
                    ),
                );
            }
        }
    }

    // The limited topic's cap: never more handed out and held than it.
    let mut holds: Vec<(i64, i64)> = deliveries
        .iter()
        .filter(|d| d.got.topic == LIMITED)
        .filter_map(|d| Some((d.got.claimed()?, held_until(d)?)))
        .collect();
    holds.sort();
    let mut open: Vec<i64> = Vec::new();
    for (at, until) in holds {
        open.retain(|&u| u > at + 1_000);
        open.push(until);
        if open.len() > CAP && !lost_between(at - 5_000_000, at) {
            v.add(
                "cap",
                format!(
                    "{} of {LIMITED} held at {} ms (cap {CAP})",
                    open.len(),
                    ms(at)
                ),
            );
        }
    }

    // Nothing lost: every push answered ok ends (an ack answered consumed,
    // a cancel answered deleted, or a final read agreeing with an ack or
    // cancel that may have been applied), or is still waiting at the end,
    // due after the quiet period began.
    let cancel_sent = |id: &str, p: &Push| {
        cancels.iter().any(|(op, by, _)| {
            op.res.maybe()
                && match by {
                    CancelBy::Id(c) => c == id,
                    CancelBy::BizKey { topic, key } => {
                        p.topic == topic && p.biz_key == Some(key.as_str())
                    }
                    CancelBy::Prefix { topic, prefix } => {
                        p.topic == topic
                            && p.biz_key.is_some_and(|k| k.starts_with(prefix.as_str()))
                    }
                }
        })
    };
    let deleted_ok: HashSet<&str> = cancels
        .iter()
        .filter(|(op, _, _)| op.res == Res::Ok)
        .flat_map(|(_, _, d)| d.iter().map(String::as_str))
        .collect();
    // Answers are true (prefix cancels): a prefix cancel's count of
    // deleted messages is at most the messages of its topic and prefix
    // that may have existed, pushed (answered ok or not at all) before it
    // was answered, less those an ack answered consumed ended before it
    // was sent with no Redis loss since. (One a cancel ended before counts:
    // a cancel of a deleted message answers `deleted` again. One whose ack
    // Redis lost may be live again, in the documented window.)
    let mut acked_at: HashMap<&str, i64> = HashMap::new();
    for (id, list) in &acks {
        for (op, consumed) in list {
            if *consumed {
                let at = acked_at.entry(id).or_insert(op.complete);
                *at = (*at).min(op.complete);
            }
        }
    }
    for (cancel, topic, prefix, counted) in &prefix_counts {
        let mut could = 0u64;
        for op in ops {
            let What::Push { msgs } = &op.what else {
                continue;
            };
            if !op.res.maybe() || op.invoke >= cancel.complete {
                continue;
            }
            for p in msgs {
                let matches = p.topic == *topic
                    && p.biz_key.as_deref().is_some_and(|k| k.starts_with(prefix));
                let gone = p
                    .id
                    .as_deref()
                    .and_then(|id| acked_at.get(id))
                    .is_some_and(|&at| at < cancel.invoke && !lost_between(at, cancel.complete));
                if matches && !p.duplicate && !gone {
                    could += 1;
                }
            }
        }
        if *counted > could {
            v.add(
                "answer",
                format!(
                    "a cancel of {topic}'s bizKeys from {prefix:?} answered {counted} deleted; at most {could} such messages could have been live or deleted already ({}..{} ms via :{})",
                    ms(cancel.invoke),
                    ms(cancel.complete),
                    cancel.node
                ),
            );
        }
    }

    for (id, p) in &pushes {
        let acked_ok = acks.get(id).into_iter().flatten().any(|(_, c)| *c);
        let ack_sent = acks.contains_key(id);
        if acked_ok || deleted_ok.contains(id) {
            continue;
        }
        let delivered = by_id.contains_key(id);
        match finals.get(*id).cloned().flatten() {
            None => v.add("lost", format!("{id}: accepted at {} ms, unknown at the end", ms(p.op.complete))),
            Some(f) => match f.status.as_str() {
                "Consumed" if ack_sent => {}
                "Deleted" if cancel_sent(id, p) => {}
                "Dead" => {}
                "Consumed" | "Deleted" => v.add(
                    "lost",
                    format!(
                        "{id}: ended {} though no consumer acked it and no cancel named it (delivered: {delivered})",
                        f.status
                    ),
                ),
                _ if from_wall_ms(f.due) < drained_at => v.add(
                    "lost",
                    format!(
                        "{id}: still {} at the end, due {} ms before the quiet period began (delivered: {delivered})",
                        f.status,
                        ms(drained_at - from_wall_ms(f.due))
                    ),
                ),
                _ => {}
            },
        }
    }

    let mut by_kind: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
    for op in ops {
        *by_kind
            .entry(op.what.kind())
            .or_default()
            .entry(op.res.name())
            .or_default() += 1;
    }
    // Pushes with onDuplicate by mode and answer (`new`: its key's
    // holder had ended, so it was pushed as a new message).
    let mut debounced: BTreeMap<String, u64> = BTreeMap::new();
    for (op, p) in debounces.values().flatten() {
        let mode = p.on_duplicate.map_or("", |m| m.name());
        let answer = match (op.res, &p.result) {
            (Res::Ok, Some(r)) => r.as_str(),
            (Res::Ok, None) if !p.duplicate => "new",
            (Res::Ok, None) => "duplicate",
            (res, _) => res.name(),
        };
        *debounced.entry(format!("{mode} {answer}")).or_default() += 1;
    }
    let mut fault_counts: BTreeMap<&str, u64> = BTreeMap::new();
    for f in faults {
        *fault_counts.entry(f.kind).or_default() += 1;
    }
    let report = json!({
        "operations": by_kind,
        "messages": {
            "accepted": pushes.len(),
            "delivered": by_id.len(),
            "deliveries": deliveries.len(),
            "acked": acks.values().filter(|l| l.iter().any(|(_, c)| *c)).count(),
            "cancelled": deleted_ok.len(),
            "nacked": nacked.len(),
        },
        "debounce": debounced,
        "groups": {
            "accepted": group_of.len(),
            "groups": by_group.len(),
            "deliveries": grouped_deliveries,
        },
        "faults": fault_counts,
        "violations": violations_json(&v),
        "in_the_documented_windows": excused_by,
        "lateness_ms": {
            "in_fault_windows": percentiles(&mut lateness_in),
            "outside": percentiles(&mut lateness_out),
            "rescheduled": {
                "in_fault_windows": percentiles(&mut rescheduled_in),
                "outside": percentiles(&mut rescheduled_out),
            },
        },
    });
    (v, report)
}

fn percentiles(xs: &mut [i64]) -> Value {
    if xs.is_empty() {
        return json!({"count": 0});
    }
    xs.sort_unstable();
    let at = |q: f64| xs[((xs.len() - 1) as f64 * q).round() as usize];
    json!({"count": xs.len(), "p50": at(0.5), "p99": at(0.99), "max": xs[xs.len() - 1]})
}

#[cfg(test)]
mod windows {
    use super::*;

    fn fault(kind: &'static str, from_ms: i64, to_ms: i64) -> Fault {
        Fault {
            kind,
            from: from_ms * 1_000,
            to: to_ms * 1_000,
        }
    }

    fn op(invoke_ms: i64, complete_ms: i64) -> Op {
        Op {
            invoke: invoke_ms * 1_000,
            complete: complete_ms * 1_000,
            res: Res::Ok,
            node: 1,
            what: What::Nack {
                id: "1".into(),
                receipt: "1-1".into(),
            },
        }
    }

    /// A 25-minute Redis Cluster run (seed 967645709): an ack sent while a
    /// master hung, answered by that master as it resumed (after the
    /// failover), its node's journal out of reach, the node killed before
    /// it wrote the ack: the stale master's copy was lost when it learned
    /// of the failover, so the hang's end, not its start, is the loss.
    #[test]
    fn an_ack_a_resumed_failed_over_master_answered_is_lost_after_it() {
        let faults = vec![
            fault("redis_master_hung", 467_262, 470_863),
            fault("database_down", 470_863, 473_698),
            fault("node_clock_behind", 473_698, 473_981),
        ];
        let losses: Vec<&Fault> = faults.iter().filter(|f| f.redis_lost()).collect();
        let ack = op(469_868, 470_893);
        let poll = op(474_556, 474_573);
        assert_eq!(lost_at(losses[0], &ack), Some(470_893_000));
        assert!(unjournaled(&ack, &poll, &losses, &faults).is_some());
        // Without a node stopped or the journal away, it is not that window.
        let hung_only = vec![fault("redis_master_hung", 467_262, 470_863)];
        let losses: Vec<&Fault> = hung_only.iter().collect();
        assert_eq!(unjournaled(&ack, &poll, &losses, &hung_only), None);
        // An ack sent after the stale master's while was not lost by it.
        let late = op(474_000, 474_010);
        assert_eq!(lost_at(losses[0], &late), None);
        // A restart loses what came before it, at once.
        let restart = fault("redis_restart_empty", 467_262, 468_000);
        assert_eq!(lost_at(&restart, &ack), Some(467_262_000));
    }

    fn pushed(id: Option<&str>, body: &str, delay: i64, on: Option<OnDuplicate>) -> Pushed {
        Pushed {
            id: id.map(str::to_string),
            topic: "chk".into(),
            body: body.into(),
            delay,
            biz_key: Some("k".into()),
            duplicate: on.is_some() && id.is_some(),
            on_duplicate: on,
            result: None,
            due_time: None,
            group: None,
        }
    }

    fn push_op(invoke_ms: i64, complete_ms: i64, res: Res, p: Pushed) -> Op {
        Op {
            res,
            what: What::Push { msgs: vec![p] },
            ..op(invoke_ms, complete_ms)
        }
    }

    fn replace_op(invoke_ms: i64, complete_ms: i64, res: Res, body: &str, result: &str) -> Op {
        let mut p = pushed(
            (res == Res::Ok).then_some("1"),
            body,
            0,
            Some(OnDuplicate::Replace),
        );
        p.result = (res == Res::Ok).then(|| result.to_string());
        p.due_time = (res == Res::Ok && result != "in_flight").then_some(0);
        push_op(invoke_ms, complete_ms, res, p)
    }

    fn poll_op(invoke_ms: i64, complete_ms: i64, body: &str) -> Op {
        Op {
            what: What::Poll {
                consumer: 0,
                topic: "chk".into(),
                got: vec![Got {
                    id: "1".into(),
                    topic: "chk".into(),
                    body: body.into(),
                    receipt: "r".into(),
                    ttl: 1_000,
                    group: None,
                }],
                acks: vec![],
            },
            ..op(invoke_ms, complete_ms)
        }
    }

    fn found(ops: &[Op], faults: &[Fault]) -> Vec<&'static str> {
        let (v, _) = check(ops, faults, &HashMap::new(), 0);
        v.0.keys().copied().filter(|k| *k != "lost").collect()
    }

    /// A poll sent after a replace was answered `replaced` hands out its
    /// body, or that of a replace that may have come after it; the
    /// former body only inside a Redis loss; one answered `in_flight`
    /// changes nothing; a replace that may have been applied may make the
    /// message due as early as it says.
    #[test]
    fn a_replace_answered_replaced_is_what_is_delivered() {
        let push = push_op(0, 10, Res::Ok, pushed(Some("1"), "v0", 60_000, None));
        let replaced = replace_op(100, 110, Res::Ok, "v1", "replaced");
        // Its own body, due at once: not early.
        let ops = vec![push.clone(), replaced.clone(), poll_op(200, 210, "v1")];
        assert_eq!(found(&ops, &[]), Vec::<&str>::new());
        // The push's body after the answer: a stale body.
        let ops = vec![push.clone(), replaced.clone(), poll_op(200, 210, "v0")];
        assert_eq!(found(&ops, &[]), vec!["replaced"]);
        // Unless Redis lost its writes between: the former body, at the
        // replace's time or the former one.
        let loss = vec![fault("redis_restart_empty", 150, 160)];
        assert_eq!(found(&ops, &loss), Vec::<&str>::new());
        // A poll sent before the answer may get either, as early as the
        // replace made it due.
        let ops = vec![push.clone(), replaced.clone(), poll_op(105, 120, "v0")];
        assert_eq!(found(&ops, &[]), Vec::<&str>::new());
        // A later replace with no answer may be what the poll got, and
        // may have made it due at once.
        let ops = vec![
            push.clone(),
            replaced.clone(),
            replace_op(150, 20_000, Res::Unknown, "v2", ""),
            poll_op(200, 210, "v2"),
        ];
        assert_eq!(found(&ops, &[]), Vec::<&str>::new());
        // A replace answered before the one answered replaced was sent
        // is not.
        let ops = vec![
            push.clone(),
            replace_op(20, 30, Res::Ok, "v2", "replaced"),
            replaced.clone(),
            poll_op(200, 210, "v2"),
        ];
        assert_eq!(found(&ops, &[]), vec!["replaced"]);
        // One answered in_flight changes nothing: its body is not the
        // message's, and its delay does not make it due.
        let ops = vec![
            push.clone(),
            replace_op(100, 110, Res::Ok, "v3", "in_flight"),
            poll_op(200, 210, "v3"),
        ];
        assert_eq!(found(&ops, &[]), vec!["body", "early"]);
        let ops = vec![
            push.clone(),
            replace_op(100, 110, Res::Ok, "v3", "in_flight"),
            poll_op(200, 210, "v0"),
        ];
        assert_eq!(found(&ops, &[]), vec!["early"]);
        // An answer `replaced` says the due time it set; `in_flight` none.
        let mut no_due = replaced.clone();
        if let What::Push { msgs } = &mut no_due.what {
            msgs[0].due_time = None;
        }
        let ops = vec![push.clone(), no_due, poll_op(200, 210, "v1")];
        assert_eq!(found(&ops, &[]), vec!["answer"]);
    }

    /// The stale master's lost acks are excused until the reconciler's
    /// pass after its while, and only for acks it could have answered.
    #[test]
    fn a_stale_masters_lost_ack_is_excused_until_the_reconcilers_pass() {
        let faults = vec![fault("redis_master_hung", 467_262, 470_863)];
        let losses: Vec<&Fault> = faults.iter().collect();
        let ack = op(469_868, 470_893);
        // Its while ends at 473 863 ms, the reconciler's pass 5 s later.
        assert!(stale_write(&ack, &op(478_000, 478_010), &losses, &faults));
        assert!(!stale_write(&ack, &op(479_000, 479_010), &losses, &faults));
        // An ack answered before the hang, or sent after the while: not it.
        assert!(!stale_write(
            &op(460_000, 460_010),
            &op(470_000, 470_010),
            &losses,
            &faults
        ));
        assert!(!stale_write(
            &op(474_000, 474_010),
            &op(475_000, 475_010),
            &losses,
            &faults
        ));
        // Nor after a restart, which loses what came before it at once.
        let restart = vec![fault("redis_restart_empty", 467_262, 468_000)];
        let losses: Vec<&Fault> = restart.iter().collect();
        assert!(!stale_write(&ack, &op(470_000, 470_010), &losses, &restart));
    }
}

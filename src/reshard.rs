//! `delayq reshard --shards N`: moves a stopped deployment's Redis data set
//! to another shard count.
//!
//! The shard count is part of the data set (`{P}:shards`, see
//! [`crate::redis::keys`]): nodes refuse to start with another one. This
//! tool moves every message Redis holds (scheduled, ready, in flight) to
//! the shard its id hashes to under the new count, each in the same place
//! with the same score (so due times, priorities and ack deadlines stay),
//! and with it the tombstones and the ends waiting for the journal, and the
//! moves left for messages on their way to Redis (`{P:s}:moved`, within
//! their two minutes; older ones are dropped). The journal is not touched. Each shard's epoch is raised to the highest
//! epoch of the old shards, so fencing stays monotonic.
//!
//! It is resumable: `{P}:resharding` says `FROM>TO` while it runs (nodes
//! refuse to start meanwhile), every message is first copied (idempotently)
//! and then removed from its old shard, so a run killed at any point is
//! finished by running it again with the same `--shards`.

use std::time::Instant;

use anyhow::{bail, Context as _};
use redis::Value;

use crate::progress::Progress;
use crate::redis::inspect::Header;
use crate::redis::keys::{shard_of, Keys};
use crate::redis::schedule::RedisSchedule;

/// Records read from a shard's hash per step.
pub const PAGE: u64 = 500;

/// What a reshard did.
#[derive(Debug, Default, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReshardReport {
    pub from: u32,
    pub to: u32,
    /// Messages moved to another shard.
    pub moved: u64,
    /// Messages already in their shard under the new count.
    pub stayed: u64,
    /// Tombstones and pending journal ends moved.
    pub tombstones: u64,
    /// Moves left for messages on their way to Redis (reschedules of
    /// messages Redis did not hold) moved to another shard.
    pub moves: u64,
    /// Such moves dropped: past their two minutes, no schedule takes them.
    pub moves_dropped: u64,
    /// Whether this run finished one an earlier run left.
    pub resumed: bool,
    pub elapsed_ms: u64,
}

/// Where a message sits in its shard, with its score there.
enum Spot {
    Delay(f64),
    InFlight(f64),
    Ready(String, f64),
    Nowhere,
}

/// Before a reshard told `--split-groups`: every shard forgets its groups'
/// turns, and the messages held behind them go back to the shard's delay
/// zset with their scores (due: the next scan makes each ready, or held
/// behind a turn its new shard keeps). None is left behind a turn that no
/// shard would ever pass on.
async fn reset_groups(con: &mut crate::redis::conn::Conn, keys: &Keys) -> anyhow::Result<()> {
    for s in 0..keys.shards() {
        let topics: Vec<String> = redis::cmd("SMEMBERS")
            .arg(keys.group_topics(s))
            .query_async(con)
            .await?;
        for topic in &topics {
            let (turns, waiting): (Vec<String>, Vec<String>) = redis::pipe()
                .hkeys(keys.group_turns(s, topic))
                .smembers(keys.groups_waiting(s, topic))
                .query_async(con)
                .await?;
            for group in turns.iter().chain(&waiting) {
                let held = keys.held(s, topic, group);
                let ids: Vec<(String, f64)> = redis::cmd("ZRANGE")
                    .arg(&held)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query_async(con)
                    .await?;
                let mut pipe = redis::pipe();
                for (id, score) in &ids {
                    pipe.zadd(keys.delay(s), id, *score).ignore();
                }
                pipe.del(&held).ignore();
                let _: () = pipe.query_async(con).await?;
            }
            let _: () = redis::pipe()
                .del(keys.group_turns(s, topic))
                .del(keys.groups_waiting(s, topic))
                .del(keys.held_count(s, topic))
                .query_async(con)
                .await?;
        }
        let _: () = redis::cmd("DEL")
            .arg(keys.group_topics(s))
            .query_async(con)
            .await?;
    }
    Ok(())
}

/// How many records of `keys`' shards belong to an ordered group (a
/// record whose field list ends in `,gN`, see [`crate::redis::record`]).
async fn count_grouped(
    con: &mut crate::redis::conn::Conn,
    keys: &Keys,
    page: u64,
) -> anyhow::Result<u64> {
    let mut grouped = 0;
    for s in 0..keys.shards() {
        let mut cursor = 0u64;
        loop {
            let (next, flat): (u64, Vec<String>) = redis::cmd("HSCAN")
                .arg(keys.messages(s))
                .arg(cursor)
                .arg("COUNT")
                .arg(page)
                .query_async(con)
                .await?;
            for pair in flat.chunks(2).filter(|p| p.len() == 2) {
                let grouped_record = pair[0]
                    .parse::<crate::message::MessageId>()
                    .ok()
                    .and_then(|id| crate::redis::record::decode(id, &pair[1]).ok())
                    .is_some_and(|(_, m)| m.group.is_some());
                grouped += u64::from(grouped_record);
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(grouped)
}

/// Moves the data set of `redis` (opened with the *new* count) from the
/// count it was recorded with to the new one. `page` records per step.
/// A message of an ordered group is in its group's shard (see
/// [`Keys::shard_of_group`]) and keeps its id, so under another count its
/// group would spread over shards: unless `split_groups`, a reshard that
/// finds any in Redis refuses before it changes anything.
pub async fn reshard(
    redis: &RedisSchedule,
    page: usize,
    split_groups: bool,
) -> anyhow::Result<ReshardReport> {
    let started = Instant::now();
    let to = redis.keys().shards();
    let prefix = redis.keys().prefix().to_string();
    let mut con = redis.connection();
    let marker_key = redis.keys().resharding();
    let count_key = redis.keys().shard_count();
    let (recorded, moving): (Option<String>, Option<String>) = redis::pipe()
        .get(&count_key)
        .get(&marker_key)
        .query_async(&mut con)
        .await?;
    let (from, resumed) = match moving {
        Some(m) => {
            let (f, t) = m
                .split_once('>')
                .and_then(|(f, t)| Some((f.parse::<u32>().ok()?, t.parse::<u32>().ok()?)))
                .with_context(|| format!("{marker_key} holds {m:?}"))?;
            if t != to {
                bail!(
                    "a reshard from {f} to {t} shards is under way or was interrupted; \
                     finish it with `delayq reshard --shards {t}` first"
                );
            }
            (f, true)
        }
        None => {
            let Some(recorded) = recorded else {
                bail!(
                    "this Redis holds no recorded shard count for key prefix '{prefix}': \
                     nothing to move (a node records it when it starts)"
                );
            };
            let from: u32 = recorded
                .parse()
                .with_context(|| format!("{count_key} holds {recorded:?}"))?;
            if from == to {
                return Ok(ReshardReport {
                    from,
                    to,
                    elapsed_ms: started.elapsed().as_millis() as u64,
                    ..Default::default()
                });
            }
            (from, false)
        }
    };
    // A node holding the standalone lease is running: refuse.
    let standalone: Option<String> = redis::cmd("GET")
        .arg(redis.keys().standalone_lease())
        .query_async(&mut con)
        .await?;
    if let Some(holder) = standalone {
        bail!("a node is running on this data set ({holder}): stop every node before a reshard");
    }
    // Nodes in ZooKeeper mode hold no such lease: each says every second
    // that it runs.
    let alive = redis.ownership().nodes_alive().await?;
    if !alive.is_empty() {
        bail!(
            "nodes are running on this data set ({}): stop every node before a reshard \
             (a node stopped within the last {} s still counts)",
            alive.join(", "),
            crate::redis::schedule::BEHIND_FRESH_MS / 1000
        );
    }
    if !resumed && !split_groups {
        let grouped = count_grouped(&mut con, &Keys::new(&prefix, from), page as u64).await?;
        let used: bool = redis::cmd("EXISTS")
            .arg(redis.keys().groups_used())
            .query_async(&mut con)
            .await?;
        if grouped > 0 || used {
            bail!(
                "this data set carries messages of ordered groups ({grouped} in Redis now; \
                 more may wait in the journal alone, due beyond the horizon or dead): each \
                 group's messages are kept in one shard and a reshard keeps ids, so under \
                 {to} shards a group would spread over shards that each hand out one of it \
                 at a time. Once none is left, or to move them anyway, pass --split-groups"
            );
        }
    }
    if split_groups {
        reset_groups(&mut con, &Keys::new(&prefix, from)).await?;
    }
    let _: () = redis::cmd("SET")
        .arg(&marker_key)
        .arg(format!("{from}>{to}"))
        .query_async(&mut con)
        .await?;
    tracing::warn!(
        from,
        to,
        resumed,
        "moving the data set to another shard count"
    );

    let old = Keys::new(&prefix, from);
    let new = Keys::new(&prefix, to);
    let mut report = ReshardReport {
        from,
        to,
        resumed,
        ..Default::default()
    };
    let total: u64 = {
        let mut pipe = redis::pipe();
        for s in 0..from {
            pipe.hlen(old.messages(s));
        }
        let counts: Vec<u64> = pipe.query_async(&mut con).await?;
        counts.iter().sum()
    };
    let shown = Progress::start("reshard", Some(total));
    // The highest epoch of any shard, old or new, for every new shard.
    let mut epoch_pipe = redis::pipe();
    for s in 0..from.max(to) {
        epoch_pipe.get(old.epoch(s));
    }
    let epochs: Vec<Option<i64>> = epoch_pipe.query_async(&mut con).await?;
    let top = epochs.into_iter().flatten().max().unwrap_or(0);
    // Redis's clock, which the moves' times are by.
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut con).await?;
    let now = secs * 1000 + micros / 1000;

    for s in 0..from {
        let mut cursor = 0u64;
        loop {
            let (next, flat): (u64, Vec<String>) = redis::cmd("HSCAN")
                .arg(old.messages(s))
                .arg(cursor)
                .arg("COUNT")
                .arg(page)
                .query_async(&mut con)
                .await?;
            let records: Vec<(String, String)> = flat
                .chunks(2)
                .filter(|p| p.len() == 2)
                .map(|p| (p[0].clone(), p[1].clone()))
                .collect();
            let moving: Vec<&(String, String)> = records
                .iter()
                .filter(|(id, _)| match id.parse::<crate::message::MessageId>() {
                    Ok(id) => shard_of(id, to) != s,
                    Err(_) => false,
                })
                .collect();
            report.stayed += (records.len() - moving.len()) as u64;
            if !moving.is_empty() {
                // Where each sits now.
                let mut pipe = redis::pipe();
                for (id, rec) in &moving {
                    let topic = Header::parse(rec).map(|h| h.topic).unwrap_or_default();
                    pipe.zscore(old.delay(s), id)
                        .zscore(old.inflight(s), id)
                        .zscore(old.ready(s, &topic), id);
                }
                let found: Vec<Value> = pipe.query_async(&mut con).await?;
                let spots: Vec<Spot> = moving
                    .iter()
                    .zip(found.chunks(3))
                    .map(|((_, rec), r)| {
                        let score = |v: &Value| crate::redis::reply::opt_score(v);
                        if let Some(x) = score(&r[0]) {
                            Spot::Delay(x)
                        } else if let Some(x) = score(&r[1]) {
                            Spot::InFlight(x)
                        } else if let Some(x) = score(&r[2]) {
                            Spot::Ready(Header::parse(rec).map(|h| h.topic).unwrap_or_default(), x)
                        } else {
                            Spot::Nowhere
                        }
                    })
                    .collect();
                // Copy (idempotent), then remove from the old shard.
                let mut copy = redis::pipe();
                let mut remove = redis::pipe();
                for ((id, rec), spot) in moving.iter().zip(&spots) {
                    let n = shard_of(id.parse().expect("parsed above"), to);
                    copy.hset_nx(new.messages(n), id, rec).ignore();
                    match spot {
                        Spot::Delay(x) => {
                            copy.zadd(new.delay(n), id, *x).ignore();
                            remove.zrem(old.delay(s), id).ignore();
                        }
                        Spot::InFlight(x) => {
                            copy.zadd(new.inflight(n), id, *x).ignore();
                            remove.zrem(old.inflight(s), id).ignore();
                        }
                        Spot::Ready(topic, x) => {
                            copy.zadd(new.ready(n, topic), id, *x).ignore();
                            remove.zrem(old.ready(s, topic), id).ignore();
                        }
                        // Placed nowhere (Redis lost the key that placed
                        // it): scheduled by its own score, as the
                        // reconciler would.
                        Spot::Nowhere => {
                            if let Some(h) = Header::parse(rec) {
                                copy.zadd(new.delay(n), id, h.score).ignore();
                            }
                        }
                    }
                    remove.hdel(old.messages(s), id).ignore();
                }
                let _: () = copy.query_async(&mut con).await?;
                if crate::faults::once("reshard_stops") {
                    bail!("injected fault: the reshard stopped after copying a page");
                }
                let _: () = remove.query_async(&mut con).await?;
                report.moved += moving.len() as u64;
            }
            shown.update(
                report.moved + report.stayed,
                || format!("moved {}, stayed {}", report.moved, report.stayed),
                || {
                    format!(
                        "reshard: moved {} stayed {} of {total}",
                        report.moved, report.stayed
                    )
                },
            );
            if next == 0 {
                break;
            }
            cursor = next;
        }
        report.tombstones += move_tombstones(&mut con, &old, &new, s, page).await?;
        let (moves, dropped) = move_moves(&mut con, &old, &new, s, page, now).await?;
        report.moves += moves;
        report.moves_dropped += dropped;
    }
    drop(shown);
    let mut finish = redis::pipe();
    for s in 0..to {
        finish.set(new.epoch(s), top).ignore();
    }
    finish
        .set(&count_key, to)
        .ignore()
        .del(&marker_key)
        .ignore();
    let _: () = finish.query_async(&mut con).await?;
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    tracing::warn!(
        from,
        to,
        moved = report.moved,
        stayed = report.stayed,
        "the data set now has {to} shards; start the nodes with --shards {to}"
    );
    Ok(report)
}

/// Moves shard `s`'s tombstones and pending journal ends that belong to
/// another shard under the new count; how many.
async fn move_tombstones(
    con: &mut crate::redis::Conn,
    old: &Keys,
    new: &Keys,
    s: u32,
    page: usize,
) -> anyhow::Result<u64> {
    let to = new.shards();
    let mut moved = 0;
    for (zset, key) in [(true, old.finished(s)), (false, old.unjournaled(s))] {
        let mut cursor = 0u64;
        loop {
            let (next, flat): (u64, Vec<String>) = redis::cmd(if zset { "ZSCAN" } else { "HSCAN" })
                .arg(&key)
                .arg(cursor)
                .arg("COUNT")
                .arg(page)
                .query_async(con)
                .await?;
            let mut copy = redis::pipe();
            let mut remove = redis::pipe();
            for pair in flat.chunks(2).filter(|p| p.len() == 2) {
                let Ok(id) = pair[0].parse::<crate::message::MessageId>() else {
                    continue;
                };
                let n = shard_of(id, to);
                if n == s {
                    continue;
                }
                if zset {
                    copy.cmd("ZADD")
                        .arg(new.finished(n))
                        .arg(&pair[1])
                        .arg(&pair[0])
                        .ignore();
                    remove.zrem(&key, &pair[0]).ignore();
                } else {
                    copy.hset(new.unjournaled(n), &pair[0], &pair[1]).ignore();
                    remove.hdel(&key, &pair[0]).ignore();
                }
                moved += 1;
            }
            if copy.cmd_iter().next().is_some() {
                let _: () = copy.query_async(con).await?;
                let _: () = remove.query_async(con).await?;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(moved)
}

/// How long a move waits for the message it was left for (as moved.lua).
const MOVE_MS: i64 = 120_000;

/// Moves shard `s`'s moves (`{P:s}:moved`, `id → score|at`, and the index
/// scoring each id by `at`) that belong to another shard under the new
/// count, and drops those past their time (`now - at >= MOVE_MS`, Redis's
/// clock) wherever they belong; how many of each.
async fn move_moves(
    con: &mut crate::redis::Conn,
    old: &Keys,
    new: &Keys,
    s: u32,
    page: usize,
    now: i64,
) -> anyhow::Result<(u64, u64)> {
    let to = new.shards();
    let (hash, index) = (old.moved(s), old.moved_at(s));
    let (mut moved, mut dropped) = (0, 0);
    let mut cursor = 0u64;
    loop {
        let (next, flat): (u64, Vec<String>) = redis::cmd("HSCAN")
            .arg(&hash)
            .arg(cursor)
            .arg("COUNT")
            .arg(page)
            .query_async(con)
            .await?;
        let mut copy = redis::pipe();
        let mut remove = redis::pipe();
        for pair in flat.chunks(2).filter(|p| p.len() == 2) {
            let (field, value) = (&pair[0], &pair[1]);
            let at = value
                .rsplit_once('|')
                .and_then(|(_, at)| at.parse::<i64>().ok());
            let n = field
                .parse::<crate::message::MessageId>()
                .ok()
                .map(|id| shard_of(id, to));
            match (at, n) {
                (Some(at), Some(n)) if now - at < MOVE_MS => {
                    if n == s {
                        continue;
                    }
                    copy.hset(new.moved(n), field, value)
                        .ignore()
                        .zadd(new.moved_at(n), field, at)
                        .ignore()
                        .pexpire(new.moved(n), MOVE_MS)
                        .ignore()
                        .pexpire(new.moved_at(n), MOVE_MS)
                        .ignore();
                    moved += 1;
                }
                // Past its time, or unreadable: no schedule takes it.
                _ => dropped += 1,
            }
            remove
                .hdel(&hash, field)
                .ignore()
                .zrem(&index, field)
                .ignore();
        }
        if copy.cmd_iter().next().is_some() {
            let _: () = copy.query_async(con).await?;
        }
        if remove.cmd_iter().next().is_some() {
            let _: () = remove.query_async(con).await?;
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    // A shard the new count does not have keeps nothing (an index entry
    // whose move is gone included).
    if s >= to {
        let _: () = redis::pipe()
            .del(&hash)
            .ignore()
            .del(&index)
            .ignore()
            .query_async(con)
            .await?;
    }
    Ok((moved, dropped))
}

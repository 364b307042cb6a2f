//! Recurring messages: a producer of series (`repeat: {every, times: 3}`)
//! and a consumer of their topic, with a record of their own (a series is
//! handed out once per occurrence, so the single-delivery invariants of
//! check.rs do not apply), and the invariants of a series:
//!
//! - `series_early`: occurrence n arrives no earlier, by the test host's
//!   clock, than the push's invocation + its delay + (n - 1) × every;
//! - `series_revived`: no hand-out of an occurrence at or before one whose
//!   ack was answered ok, unless Redis lost its writes between (docs/src/concepts.md:
//!   "an ack of one occurrence of a recurring series ... is delivered
//!   again");
//! - `series_doubled`: no hand-out while another delivery's receipt is live;
//! - `series_lost`: every series answered ok has each of its occurrences
//!   handed out, and reads Consumed at the end.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::check::Violations;
use super::history::{from_wall_ms, now, Fault, Res};
use super::workload::World;

/// The series' topic.
pub const REPEATING: &str = "rec";
/// Occurrences of each series.
const TIMES: i64 = 3;
/// Each delivery's ttl (ms).
const TTL: i64 = 1_500;

struct Push {
    invoke: i64,
    res: Res,
    id: Option<String>,
    delay: i64,
    every: i64,
}

struct Delivery {
    invoke: i64,
    complete: i64,
    id: String,
    number: i64,
    receipt: String,
}

struct Ack {
    invoke: i64,
    complete: i64,
    res: Res,
    id: String,
    number: i64,
    /// Answered Consumed (the last occurrence).
    consumed: bool,
}

#[derive(Default)]
pub struct Series {
    pushes: Mutex<Vec<Push>>,
    got: Mutex<Vec<Delivery>>,
    acks: Mutex<Vec<Ack>>,
}

/// Pushes a series every 1.5 to 3 s until the workload stops.
pub async fn producer(w: Arc<World>) {
    let mut rng = fastrand::Rng::with_seed(w.seed * 97 + 5);
    let mut n = 0u64;
    while !w.stop.load(Ordering::Acquire) {
        tokio::time::sleep(Duration::from_millis(rng.u64(1_500..3_000))).await;
        let Some(port) = w.port(rng.usize(..)) else {
            continue;
        };
        n += 1;
        let (delay, every) = (rng.i64(0..2_000), rng.i64(1_000..2_000));
        let body = json!({
            "topic": REPEATING, "body": format!("s{}-{n}", w.seed), "delay": delay,
            "ttl": TTL, "maxAttempts": 1000, "repeat": {"every": every, "times": TIMES},
        });
        let invoke = now();
        let answer = w
            .call(
                w.http
                    .post(format!("http://127.0.0.1:{port}/push"))
                    .json(&body),
            )
            .await;
        let res = Res::of(answer.as_ref().map(|(s, _)| *s));
        let id = match (&answer, res) {
            (Some((_, v)), Res::Ok) => v["id"].as_str().map(str::to_string),
            _ => None,
        };
        w.series.pushes.lock().unwrap().push(Push {
            invoke,
            res,
            id,
            delay,
            every,
        });
    }
}

/// Every series answered ok reads Consumed by its acks.
fn all_done(w: &World) -> bool {
    let pushes = w.series.pushes.lock().unwrap();
    let acks = w.series.acks.lock().unwrap();
    pushes
        .iter()
        .filter_map(|p| p.id.as_deref())
        .all(|id| acks.iter().any(|a| a.id == id && a.consumed))
}

/// Polls the series' topic and acks each occurrence (naming it), one in
/// ten after stalling past the ttl; once the workload drained, until every
/// series is consumed or `drain` ran out.
pub async fn consumer(w: Arc<World>, drain: Duration) {
    let mut rng = fastrand::Rng::with_seed(w.seed * 89 + 3);
    let mut drained_at: Option<Instant> = None;
    loop {
        if w.drained.load(Ordering::Acquire) {
            let at = *drained_at.get_or_insert_with(Instant::now);
            if all_done(&w) || at.elapsed() > drain {
                return;
            }
        }
        let Some(port) = w.port(rng.usize(..)) else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let invoke = now();
        let answer = w
            .call(w.http.get(format!(
                "http://127.0.0.1:{port}/get/{REPEATING}?count=10&timeout=1"
            )))
            .await;
        let complete = now();
        let Some((200, v)) = answer else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let got: Vec<(String, i64, String)> = v["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                (
                    m["id"].as_str().unwrap_or_default().to_string(),
                    m["occurrence"]["number"].as_i64().unwrap_or(0),
                    m["receipt"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        for (id, number, receipt) in got {
            w.series.got.lock().unwrap().push(Delivery {
                invoke,
                complete,
                id: id.clone(),
                number,
                receipt: receipt.clone(),
            });
            let stall = rng.u8(..10) == 0 && !w.drained.load(Ordering::Acquire);
            let w2 = w.clone();
            let ack = async move {
                if stall {
                    tokio::time::sleep(Duration::from_millis(TTL as u64 + 300)).await;
                }
                let url = format!(
                    "http://127.0.0.1:{port}/ack/{id}?receipt={receipt}&occurrence={number}"
                );
                let invoke = now();
                let answer = w2.call(w2.http.post(url)).await;
                let res = Res::of(answer.as_ref().map(|(s, _)| *s));
                let consumed = matches!(&answer, Some((200, v)) if v["status"] == "Consumed");
                w2.series.acks.lock().unwrap().push(Ack {
                    invoke,
                    complete: now(),
                    res,
                    id,
                    number,
                    consumed,
                });
            };
            if stall {
                tokio::spawn(ack);
            } else {
                ack.await;
            }
        }
    }
}

/// The final status of each series answered ok.
pub async fn finals(w: &World, port: u16) -> HashMap<String, String> {
    let ids: Vec<String> = w
        .series
        .pushes
        .lock()
        .unwrap()
        .iter()
        .filter_map(|p| p.id.clone())
        .collect();
    let mut out = HashMap::new();
    for id in ids {
        for _ in 0..20 {
            let r = w
                .http
                .get(format!("http://127.0.0.1:{port}/messages/{id}"))
                .send()
                .await;
            let Ok(r) = r else { continue };
            if r.status() != 200 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
            let v: Value = r.json().await.unwrap_or_default();
            out.insert(
                id.clone(),
                v["message"]["status"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
            break;
        }
    }
    out
}

/// Checks the series' record; adds to `v`, returns the report's part.
pub fn check(
    w: &World,
    faults: &[Fault],
    finals: &HashMap<String, String>,
    v: &mut Violations,
) -> Value {
    let pushes = w.series.pushes.lock().unwrap();
    let got = w.series.got.lock().unwrap();
    let acks = w.series.acks.lock().unwrap();
    let lost_between = |from: i64, to: i64| {
        faults
            .iter()
            .any(|f| f.redis_lost() && f.from <= to && f.stale_until() >= from)
    };
    let pushed: HashMap<&str, &Push> = pushes
        .iter()
        .filter_map(|p| Some((p.id.as_deref()?, p)))
        .collect();
    let mut by_id: HashMap<&str, Vec<&Delivery>> = HashMap::new();
    for d in got.iter() {
        by_id.entry(d.id.as_str()).or_default().push(d);
        // Never early, by the host's clock.
        if let Some(p) = pushed.get(d.id.as_str()) {
            let due = p.invoke + (p.delay + (d.number - 1) * p.every) * 1000;
            if d.complete < due {
                v.add(
                    "series_early",
                    format!(
                        "{}: occurrence {} arrived {} ms before invocation + delay + (n - 1) × every",
                        d.id,
                        d.number,
                        (due - d.complete) / 1000
                    ),
                );
            }
        }
    }
    // Nothing revived: no hand-out of an occurrence at or before one acked
    // ok, polled after that answer.
    for a in acks.iter().filter(|a| a.res == Res::Ok) {
        for d in by_id.get(a.id.as_str()).into_iter().flatten() {
            if d.number <= a.number && d.invoke > a.complete && !lost_between(a.invoke, d.complete)
            {
                v.add(
                    "series_revived",
                    format!(
                        "{}: occurrence {} handed out {} ms after the ack of occurrence {} was answered",
                        a.id,
                        d.number,
                        (d.invoke - a.complete) / 1000,
                        a.number
                    ),
                );
            }
        }
    }
    // One consumer at a time: by Redis's clock, a hand-out after another
    // delivery's, before that one's deadline and before its ack was sent.
    let deadline =
        |r: &str| -> Option<i64> { Some(from_wall_ms(r.split('-').nth(1)?.parse().ok()?)) };
    for (id, ds) in &by_id {
        let mut ds: Vec<(&Delivery, i64, i64)> = ds
            .iter()
            .filter_map(|d| {
                let end = deadline(&d.receipt)?;
                Some((*d, end - TTL * 1000, end))
            })
            .collect();
        ds.sort_by_key(|d| d.1);
        for pair in ds.windows(2) {
            let ((first, _, end), (second, claimed, _)) = (pair[0], pair[1]);
            let settled = acks
                .iter()
                .filter(|a| a.id == first.id && a.number == first.number)
                .map(|a| a.invoke)
                .min()
                .unwrap_or(i64::MAX);
            if claimed < end.min(settled) && !lost_between(first.invoke, second.complete) {
                v.add(
                    "series_doubled",
                    format!(
                        "{id}: occurrence {} handed out {} ms before occurrence {}'s receipt ran out",
                        second.number,
                        (end.min(settled) - claimed) / 1000,
                        first.number
                    ),
                );
            }
        }
    }
    // Nothing lost: each occurrence handed out, the series Consumed.
    let mut completed = 0;
    for id in pushed.keys() {
        let numbers: Vec<i64> = by_id
            .get(id)
            .into_iter()
            .flatten()
            .map(|d| d.number)
            .collect();
        let missing: Vec<i64> = (1..=TIMES).filter(|n| !numbers.contains(n)).collect();
        let status = finals.get(*id).map(String::as_str).unwrap_or("unread");
        if missing.is_empty() && status == "Consumed" {
            completed += 1;
        } else {
            v.add(
                "series_lost",
                format!(
                    "{id}: occurrences {missing:?} never handed out; reads {status} at the end"
                ),
            );
        }
    }
    json!({
        "pushed": pushes.len(),
        "accepted": pushed.len(),
        "unknown": pushes.iter().filter(|p| p.res == Res::Unknown).count(),
        "deliveries": got.len(),
        "acks": acks.len(),
        "completed": completed,
    })
}

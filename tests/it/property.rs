//! A random walk over the API: pushes (single, batch, recurring), polls,
//! acks, nacks, cancels and restores, valid and malformed, in a random
//! order from a seed. Whatever the walk does: no request gets a 5xx, and
//! once it settles, Redis and the journal agree on every message (live in
//! the journal exactly when Redis holds it, in the matching place).
//!
//! The seed is printed; `DELAYQ_WALK_SEED=N` replays one walk,
//! `DELAYQ_WALK_STEPS` sets its length (default 300).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::{now_ms, parse_id, status, wait_every, Backend, Env, Reply};
use serde_json::{json, Value};

backend_tests!(random_walks_keep_redis_and_the_journal_consistent);

/// xorshift64*: small, seeded, good enough to pick operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        (!items.is_empty()).then(|| &items[self.below(items.len() as u64) as usize])
    }
}

const TOPICS: &[&str] = &["w.a", "w.b", "w:c"];

/// A message, sometimes malformed in one field.
fn message(rng: &mut Rng) -> Value {
    let mut m = json!({
        "topic": TOPICS[rng.below(3) as usize],
        "body": format!("b{}", rng.next()),
        "delay": rng.below(1500),
        "ttl": 60_000,
    });
    if rng.chance(20) {
        m["bizKey"] = json!(format!("k{}", rng.below(8)));
    }
    if rng.chance(15) {
        m["priority"] = json!(rng.below(256));
    }
    if rng.chance(10) {
        m["maxAttempts"] = json!(1 + rng.below(3));
    }
    if rng.chance(10) {
        m["repeat"] = json!({"every": 300 + rng.below(500), "times": 1 + rng.below(3)});
    }
    if rng.chance(20) {
        let bad = [
            ("topic", json!("has space")),
            ("topic", json!(7)),
            ("delay", json!(-5)),
            ("delay", json!("soon")),
            ("ttl", json!(1)),
            ("priority", json!(999)),
            ("body", json!({"not": "text"})),
            ("maxAttempts", json!(0)),
            ("repeat", json!({"every": 1})),
            ("repeat", json!({"cron": "nope"})),
            ("retry", json!({"backoff": "sometimes"})),
            ("bizKey", json!("")),
            ("delay_ms", json!(5)),
        ];
        let (field, value) = rng.pick(&bad).unwrap().clone();
        m[field] = value;
    }
    m
}

fn junk_id(rng: &mut Rng) -> String {
    ["0", "-3", "abc", "99999999999999999999", "12345", "1.5", ""][rng.below(7) as usize]
        .to_string()
}

fn no_5xx(what: &str, r: &Reply, seed: u64) {
    assert!(
        r.status < 500,
        "seed {seed}: {what} got {}: {}",
        r.status,
        r.text
    );
}

async fn random_walks_keep_redis_and_the_journal_consistent(b: Backend) {
    let seed = std::env::var("DELAYQ_WALK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| now_ms() as u64 | 1);
    let steps: usize = std::env::var("DELAYQ_WALK_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    eprintln!("random walk: DELAYQ_WALK_SEED={seed} DELAYQ_WALK_STEPS={steps}");
    let mut rng = Rng(seed);
    let env = Env::start(b).await;
    let mut ids: Vec<String> = Vec::new();
    // Handed out by a poll and not yet acked or nacked (as far as we know).
    let mut in_hand: Vec<String> = Vec::new();

    for _ in 0..steps {
        let op = rng.below(100);
        if op < 30 {
            let m = message(&mut rng);
            let r = env.post_json("/push", &m).await;
            no_5xx("push", &r, seed);
            if r.status == 200 {
                ids.push(r.json["id"].as_str().unwrap().to_string());
            }
        } else if op < 38 {
            let n = 1 + rng.below(20);
            let batch: Vec<Value> = (0..n).map(|_| message(&mut rng)).collect();
            let r = env
                .post_json("/push/batch", &json!({ "messages": batch }))
                .await;
            no_5xx("push batch", &r, seed);
            if r.status == 200 {
                for id in r.json["ids"].as_array().unwrap() {
                    ids.push(id.as_str().unwrap().to_string());
                }
            }
        } else if op < 55 {
            let topic = TOPICS[rng.below(3) as usize];
            let count = 1 + rng.below(10);
            let r = env
                .get_path(&format!("/get/{topic}?count={count}&timeout=0"))
                .await;
            no_5xx("poll", &r, seed);
            if r.status == 200 {
                for m in r.json["messages"].as_array().unwrap() {
                    in_hand.push(m["id"].as_str().unwrap().to_string());
                }
            }
        } else if op < 68 {
            // Ack one in hand, a few in one batch, or via the poll loop.
            let pick: Vec<String> = (0..1 + rng.below(3))
                .filter_map(|_| rng.pick(&in_hand).cloned())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let r = match rng.below(3) {
                0 if !pick.is_empty() => env.ack(&pick[0]).await,
                1 => env.post_json("/ack", &json!({ "ids": pick })).await,
                _ => {
                    let topic = TOPICS[rng.below(3) as usize];
                    env.post_json(
                        &format!("/get/{topic}"),
                        &json!({"ack": pick, "count": 2, "timeout": 0}),
                    )
                    .await
                }
            };
            no_5xx("ack", &r, seed);
            if r.status < 400 {
                in_hand.retain(|id| !pick.contains(id));
            }
            if r.status == 200 {
                for m in r.json["messages"].as_array().into_iter().flatten() {
                    in_hand.push(m["id"].as_str().unwrap().to_string());
                }
            }
        } else if op < 76 {
            let Some(id) = rng.pick(&in_hand).cloned() else {
                continue;
            };
            let delay =
                ["", "?delay=0", "?delay=200", "?delay=-1", "?delay=x"][rng.below(5) as usize];
            let r = env
                .send(env.http.post(env.url(&format!("/nack/{id}{delay}"))))
                .await;
            no_5xx("nack", &r, seed);
            if r.status < 400 {
                in_hand.retain(|x| *x != id);
            }
        } else if op < 86 {
            let r = match rng.below(4) {
                0 => {
                    let id = rng.pick(&ids).cloned().unwrap_or_else(|| junk_id(&mut rng));
                    env.delete(&id).await
                }
                1 => {
                    let pick: Vec<String> = (0..1 + rng.below(4))
                        .filter_map(|_| rng.pick(&ids).cloned())
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect();
                    env.post_json("/cancel", &json!({ "ids": pick })).await
                }
                2 => {
                    let topic = TOPICS[rng.below(3) as usize];
                    env.post_json(
                        "/cancel",
                        &json!({"topic": topic, "bizKey": format!("k{}", rng.below(8))}),
                    )
                    .await
                }
                _ => {
                    let topic = TOPICS[rng.below(3) as usize];
                    env.post_json("/cancel", &json!({"topic": topic, "bizKeyPrefix": "k"}))
                        .await
                }
            };
            no_5xx("cancel", &r, seed);
        } else if op < 90 {
            let r = env
                .get_path(
                    [
                        "/reStore?expire=true",
                        "/reStore?expire=false",
                        "/reStore?expire=maybe",
                    ][rng.below(3) as usize],
                )
                .await;
            no_5xx("restore", &r, seed);
        } else if op < 94 {
            let id = rng.pick(&ids).cloned().unwrap_or_else(|| junk_id(&mut rng));
            let path = [
                format!("/reStore/{id}"),
                format!("/messages/{id}"),
                format!("/dead/{id}/requeue"),
            ][rng.below(3) as usize]
                .clone();
            let r = if path.contains("requeue") {
                env.post_json(&path, &json!({})).await
            } else {
                env.get_path(&path).await
            };
            no_5xx("lookup", &r, seed);
        } else {
            // Malformed requests of every kind.
            let id = junk_id(&mut rng);
            let r = match rng.below(6) {
                0 => {
                    env.post_raw("/push", "application/json", "{\"topic\": ")
                        .await
                }
                1 => env.post_raw("/push/batch", "text/plain", "x").await,
                2 => env.get_path(&format!("/get/w.a?count={id}")).await,
                3 => env.post_json("/ack", &json!({"ids": [id]})).await,
                4 => {
                    env.post_json("/nack", &json!({"ids": ["1"], "delay": "x"}))
                        .await
                }
                _ => env.get_path(&format!("/delete?id={id}")).await,
            };
            no_5xx("malformed", &r, seed);
        }
    }

    // Settle: ack what is in hand, let everything pushed fall due and be
    // recorded, then Redis and the journal must agree on every message.
    if !in_hand.is_empty() {
        for chunk in in_hand.chunks(100) {
            let r = env.post_json("/ack", &json!({ "ids": chunk })).await;
            no_5xx("final ack", &r, seed);
        }
    }
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let what = format!("seed {seed}: Redis and the journal to agree");
    let every = Duration::from_millis(300);
    wait_every(&what, Duration::from_secs(20), every, || async {
        let disagreements = disagreements(&env, &ids);
        if disagreements.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{:?}",
                &disagreements[..disagreements.len().min(10)]
            ))
        }
    })
    .await;
}

/// Where Redis holds a message: 'D' delay zset, 'F' in flight, 'X' in
/// flight as the last delivery of a cancelled series, 'R' ready (held, in
/// neither), or None.
fn redis_place(env: &Env, id: &str) -> Option<char> {
    let keys = &env.keys;
    let shard = keys.shard_of(parse_id(id));
    let mut con = env.redis.con();
    let (record, delay, flight): (Option<String>, Option<f64>, Option<f64>) = redis::pipe()
        .hget(keys.messages(shard), id)
        .zscore(keys.delay(shard), id)
        .zscore(keys.inflight(shard), id)
        .query(&mut con)
        .unwrap();
    let stopped = record
        .as_deref()
        .is_some_and(|r| r.split('|').nth(4).is_some_and(|h| h.ends_with(",x")));
    match (record, delay, flight) {
        (None, _, _) => None,
        (Some(_), Some(_), _) => Some('D'),
        (Some(_), None, Some(_)) if stopped => Some('X'),
        (Some(_), None, Some(_)) => Some('F'),
        (Some(_), None, None) => Some('R'),
    }
}

fn disagreements(env: &Env, ids: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for id in ids.iter().collect::<BTreeSet<_>>() {
        let row = env
            .journal
            .row(id)
            .expect("an accepted message is in the journal");
        let place = redis_place(env, id);
        let ok = match (row.status, place) {
            (s, None) => s >= status::CONSUMED,
            (status::DELAYING | status::WAIT_PUT, Some('D')) => true,
            (status::READY, Some('R')) => true,
            (status::CONSUMING, Some('F')) => true,
            // Its series was cancelled during this delivery: the journal
            // says Deleted, Redis keeps it until its ack, nack or deadline.
            (status::DELETED, Some('X')) => true,
            _ => false,
        };
        if !ok {
            out.push(format!(
                "{id}: journal status {} / Redis {place:?}",
                row.status
            ));
        }
    }
    out
}

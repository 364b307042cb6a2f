//! Rate limits per topic (`--topic-limit TOPIC=N/s`): a topic is handed out
//! no faster than its limit (after a first second's worth), its polls wait
//! for the next token rather than answering early and empty, and other
//! topics are not held back.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{Backend, Env};
use serde_json::{json, Value};

backend_tests!(a_limited_topic_is_handed_out_at_its_rate);

async fn a_limited_topic_is_handed_out_at_its_rate(b: Backend) {
    let env = Env::builder(b)
        .arg("--topic-limit")
        .arg("lim=20/s")
        .start()
        .await;
    handed_out_at_20_a_second(&env, Duration::from_secs(5)).await;
}

/// On a Redis Cluster each shard's bucket fills at its share of the rate:
/// together no faster than the limit; as the messages spread unevenly over
/// the shards, the slowest shard takes a little longer.
#[tokio::test(flavor = "multi_thread")]
async fn a_limited_topic_on_a_redis_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = crate::common::redis_cluster::RedisCluster::start(dir.path());
    let env = Env::builder(Backend::Sqlite)
        .redis_url(&cluster.url)
        .arg("--topic-limit")
        .arg("lim=20/s")
        .start()
        .await;
    handed_out_at_20_a_second(&env, Duration::from_secs(10)).await;
}

/// Pushes 70 messages of `lim` (limited to 20/s) and 50 of `free`, and
/// checks the hand-outs: `free` at once, `lim` no faster than the limit
/// after a first second's worth, within `within`, and no poll answered
/// early and empty.
async fn handed_out_at_20_a_second(env: &Env, within: Duration) {
    let limited = env
        .push_batch(
            (0..70)
                .map(|i| json!({"topic": "lim", "body": format!("{i}")}))
                .collect(),
        )
        .await;
    env.push_batch(
        (0..50)
            .map(|i| json!({"topic": "free", "body": format!("{i}")}))
            .collect(),
    )
    .await;
    // The other topic goes at once.
    let began = Instant::now();
    assert_eq!(
        env.collect("free", 50, Duration::from_secs(5)).await.len(),
        50
    );
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "{:?}",
        began.elapsed()
    );

    // Four consumers acking what they get; each poll's time and count.
    let seen: Arc<Mutex<Vec<i64>>> = Arc::default();
    let polls: Arc<Mutex<Vec<(u128, usize)>>> = Arc::default();
    let mut loops = Vec::new();
    for _ in 0..4 {
        let (http, base) = (env.http.clone(), env.url(""));
        let (seen, polls) = (seen.clone(), polls.clone());
        loops.push(tokio::spawn(async move {
            loop {
                let asked = Instant::now();
                let body: Value = http
                    .get(format!("{base}/get/lim?timeout=10&count=10"))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                let got = body["messages"].as_array().unwrap().clone();
                // When Redis handed each out: its ack deadline (in its
                // receipt, `ATTEMPTS-DEADLINE`) less its ttl (the default).
                let handed: Vec<i64> = got
                    .iter()
                    .map(|m| {
                        let receipt = m["receipt"].as_str().unwrap();
                        let deadline: i64 = receipt.split('-').nth(1).unwrap().parse().unwrap();
                        deadline - 30_000
                    })
                    .collect();
                polls
                    .lock()
                    .unwrap()
                    .push((asked.elapsed().as_millis(), got.len()));
                let ids: Vec<&str> = got.iter().map(|m| m["id"].as_str().unwrap()).collect();
                if !ids.is_empty() {
                    http.post(format!("{base}/ack"))
                        .json(&json!({"ids": ids}))
                        .send()
                        .await
                        .unwrap();
                }
                seen.lock().unwrap().extend(handed);
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.lock().unwrap().len() < limited.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for l in &loops {
        l.abort();
    }
    let mut times = seen.lock().unwrap().clone();
    assert_eq!(times.len(), limited.len(), "not all handed out in 20 s");
    times.sort_unstable();
    let first = times[0];
    // At most a second's worth at once, then 20 a second (and a few for the
    // clocks' granularity).
    for (k, t) in times.iter().enumerate() {
        let allowed = 20.0 + 20.0 * (t - first) as f64 / 1000.0 + 3.0;
        assert!(
            (k + 1) as f64 <= allowed,
            "{} handed out within {} ms of the first",
            k + 1,
            t - first
        );
    }
    let span = times.last().unwrap() - first;
    assert!(
        span >= 2_200,
        "70 at 20/s after a burst of 20 took only {span} ms"
    );
    assert!(
        span <= within.as_millis() as i64,
        "70 at 20/s took {span} ms"
    );
    // Held back, a poll waited for the next token: none answered early and
    // empty.
    for (ms, n) in polls.lock().unwrap().iter() {
        assert!(
            *n > 0 || *ms >= 9_900,
            "a poll answered empty after {ms} ms"
        );
    }
    let topics = env.get_path("/topics").await;
    let lim = topics.assert_ok()["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic"] == "lim")
        .cloned()
        .unwrap();
    assert_eq!(lim["limitPerSecond"], 20, "{lim}");
}

/// `TOPIC=concurrency=M`: never more than M messages of the topic handed
/// out and not yet acked, the cap used to the full, and a poll the cap
/// holds back waits (for an ack) rather than answering early and empty.
#[tokio::test(flavor = "multi_thread")]
async fn a_concurrency_cap_holds_hand_outs_to_m() {
    let env = Env::builder(Backend::Sqlite)
        .arg("--topic-limit")
        .arg("conc=concurrency=3")
        .start()
        .await;
    held_at_most(&env, 3).await;
    let topics = env.get_path("/topics").await;
    let conc = topics.assert_ok()["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic"] == "conc")
        .cloned()
        .unwrap();
    assert_eq!(conc["limitConcurrency"], 3, "{conc}");
    assert_eq!(conc["limitPerSecond"], Value::Null, "{conc}");
}

/// On a Redis Cluster each shard caps its share (4 shards, 1 each).
#[tokio::test(flavor = "multi_thread")]
async fn a_concurrency_cap_on_a_redis_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = crate::common::redis_cluster::RedisCluster::start(dir.path());
    let env = Env::builder(Backend::Sqlite)
        .redis_url(&cluster.url)
        .arg("--topic-limit")
        .arg("conc=100/s,concurrency=4")
        .start()
        .await;
    held_at_most(&env, 4).await;
}

/// Pushes 30 messages of `conc` and has six consumers take them (two a
/// poll), each holding what it got for 150 ms before acking it. What the
/// consumers hold (from the poll's answer until just before the ack is
/// sent) is always a part of what the server counts as handed out and not
/// acked, so it must never exceed `cap`, and with six consumers it reaches
/// it.
async fn held_at_most(env: &Env, cap: usize) {
    let ids = env
        .push_batch(
            (0..30)
                .map(|i| json!({"topic": "conc", "body": format!("{i}")}))
                .collect(),
        )
        .await;
    let held = Arc::new(Mutex::new((0usize, 0usize, 0usize))); // (now, most, handed out)
    let empty_polls: Arc<Mutex<Vec<u128>>> = Arc::default();
    let mut loops = Vec::new();
    for _ in 0..6 {
        let (http, base) = (env.http.clone(), env.url(""));
        let (held, empty_polls) = (held.clone(), empty_polls.clone());
        loops.push(tokio::spawn(async move {
            loop {
                let asked = Instant::now();
                let body: Value = http
                    .get(format!("{base}/get/conc?timeout=10&count=2"))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                let got = body["messages"].as_array().unwrap().clone();
                if got.is_empty() {
                    empty_polls
                        .lock()
                        .unwrap()
                        .push(asked.elapsed().as_millis());
                    continue;
                }
                {
                    let mut h = held.lock().unwrap();
                    h.0 += got.len();
                    h.1 = h.1.max(h.0);
                    h.2 += got.len();
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
                held.lock().unwrap().0 -= got.len();
                let ids: Vec<&str> = got.iter().map(|m| m["id"].as_str().unwrap()).collect();
                http.post(format!("{base}/ack"))
                    .json(&json!({"ids": ids}))
                    .send()
                    .await
                    .unwrap();
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while held.lock().unwrap().2 < ids.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for l in &loops {
        l.abort();
    }
    let (_, most, handed) = *held.lock().unwrap();
    assert_eq!(handed, ids.len(), "not all handed out in 30 s");
    assert!(most <= cap, "{most} held at once, cap {cap}");
    assert_eq!(most, cap, "the cap was never reached");
    assert!(
        empty_polls.lock().unwrap().is_empty(),
        "polls answered early and empty after {:?} ms",
        empty_polls.lock().unwrap()
    );
}

/// A delivery nobody acks holds its place until its ttl ends; then the cap
/// lets the next one out (the message itself comes back, to be handed out
/// again, counted anew).
#[tokio::test(flavor = "multi_thread")]
async fn an_unacked_delivery_frees_its_place_when_its_ttl_ends() {
    let env = Env::builder(Backend::Sqlite)
        .arg("--topic-limit")
        .arg("one=concurrency=1")
        .start()
        .await;
    let first = env
        .push(json!({"topic": "one", "body": "a", "ttl": 1_500}))
        .await;
    env.push(json!({"topic": "one", "body": "b", "ttl": 1_500}))
        .await;
    let got = env.poll("one", 5, 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].msg["id"], first.as_str());
    // Held back by the first, a poll waits until its ttl ends.
    let asked = Instant::now();
    let next = env.poll("one", 5, 1).await;
    let waited = asked.elapsed();
    assert_eq!(next.len(), 1, "nothing within 5 s");
    assert!(
        waited >= Duration::from_millis(1_200),
        "handed out {waited:?} after the first, within its ttl"
    );
    // A nack frees the place at once.
    let id = next[0].msg["id"].as_str().unwrap().to_string();
    env.post_json("/nack", &json!({"ids": [id], "delay": 60_000}))
        .await
        .assert_ok();
    let asked = Instant::now();
    let third = env.poll("one", 5, 1).await;
    assert_eq!(third.len(), 1);
    assert!(
        asked.elapsed() < Duration::from_millis(1_000),
        "{:?}",
        asked.elapsed()
    );
}

//! The cluster, end to end: a real three-server ZooKeeper ensemble, real
//! delayq processes sharing one Redis and one MariaDB journal, nodes killed
//! with SIGKILL and paused with SIGSTOP, ZooKeeper servers killed, nginx in
//! front. Each test is bounded in time and leaves nothing behind.
//!
//! `failover`: a node killed or paused, ZooKeeper failing; `ownership`:
//! shards spread, moved and shared behind nginx; `benchmark`: the figures
//! of BENCHMARKS.md, run by hand.

mod benchmark;
mod failover;
mod ownership;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::{
    assert_woken, jitter_ms, now_ms, random_hex, sleep_until_ms, status, wait_every, Received,
};
use serde_json::{json, Value};

/// Long-polls the nodes `ports` (one after another), acking everything,
/// until `expected` all arrived or `within` passed. Returns every delivery
/// per id, with whether its ack succeeded.
async fn drain(
    http: &reqwest::Client,
    ports: &[u16],
    topic: &str,
    expected: &HashSet<String>,
    within: Duration,
) -> HashMap<String, Vec<(Received, bool)>> {
    let deadline = Instant::now() + within;
    let mut got: HashMap<String, Vec<(Received, bool)>> = HashMap::new();
    let mut k = 0;
    while Instant::now() < deadline && !expected.iter().all(|id| got.contains_key(id)) {
        let port = ports[k % ports.len()];
        k += 1;
        for r in poll(http, port, topic, 1).await {
            let id = r.msg["id"].as_str().unwrap().to_string();
            let acked = ack(http, port, &id).await;
            got.entry(id).or_default().push((r, acked));
        }
    }
    got
}

async fn poll(http: &reqwest::Client, port: u16, topic: &str, timeout_s: u64) -> Vec<Received> {
    let url = format!("http://127.0.0.1:{port}/get/{topic}?timeout={timeout_s}&count=100");
    let Ok(resp) = http.get(url).send().await else {
        tokio::time::sleep(Duration::from_millis(50)).await;
        return Vec::new();
    };
    let at = now_ms();
    let Ok(v) = resp.json::<Value>().await else {
        return Vec::new();
    };
    v["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|msg| Received { at, msg })
        .collect()
}

async fn ack(http: &reqwest::Client, port: u16, id: &str) -> bool {
    http.post(format!("http://127.0.0.1:{port}/ack/{id}"))
        .send()
        .await
        .is_ok_and(|r| r.status() == 200)
}

/// Every expected id delivered, none early, none twice unless an earlier
/// delivery went un-acked (at-least-once).
fn assert_delivered(got: &HashMap<String, Vec<(Received, bool)>>, expected: &HashSet<String>) {
    let missing: Vec<&String> = expected
        .iter()
        .filter(|id| !got.contains_key(*id))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} never delivered: {missing:?}",
        missing.len(),
        expected.len()
    );
    for (id, deliveries) in got {
        for (r, _) in deliveries {
            let due = r.msg["dueTime"].as_i64().unwrap();
            assert!(r.at >= due, "{id} delivered {} ms early", due - r.at);
        }
        for pair in deliveries.windows(2) {
            assert!(
                !pair[0].1,
                "{id} was delivered again after it was acked: {deliveries:?}"
            );
        }
    }
}

fn messages(topic: &str, n: usize, first_delay: i64, step_ms: i64) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"topic": topic, "body": format!("m{i}"), "delay": first_delay + i as i64 * step_ms, "ttl": 2000}))
        .collect()
}

fn p99(mut v: Vec<i64>) -> i64 {
    v.sort_unstable();
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

/// The shard → owner map is the same everywhere, and each shard is owned.
fn owners_of(admin: &Value) -> Vec<Option<String>> {
    admin["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["owner"].as_str().map(String::from))
        .collect()
}

/// Waits (up to 10 s: the nodes learn of each other through ZooKeeper)
/// until node `i`'s `GET /metrics` shows `series` at `expected`.
async fn wait_metric(c: &Cluster, i: usize, series: &str, expected: f64) {
    let what = format!("node {i}'s {series} to be {expected}");
    let every = Duration::from_millis(200);
    wait_every(&what, Duration::from_secs(10), every, || async {
        let text = c.get(i, "/metrics").await.text;
        let value: Option<f64> = text
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok());
        if value == Some(expected) {
            Ok(())
        } else {
            Err(format!("{value:?}:\n{text}"))
        }
    })
    .await
}

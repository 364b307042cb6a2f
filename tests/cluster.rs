//! The cluster, end to end: a real three-server ZooKeeper ensemble, real
//! delayq processes sharing one Redis and one MariaDB journal, nodes killed
//! with SIGKILL and paused with SIGSTOP, ZooKeeper servers killed, nginx in
//! front. Each test is bounded in time and leaves nothing behind.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::{now_ms, random_hex, sleep_until_ms, status, Received};
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

#[tokio::test(flavor = "multi_thread")]
async fn active_standby_failover_after_kill9() {
    let mut c = Cluster::builder().start().await;
    let owners = c
        .wait_scanners(&[0, 1], Duration::from_secs(30), |_| true)
        .await;
    assert!(
        owners.iter().all(|o| o == &owners[0]),
        "active-standby: one node scans all: {owners:?}"
    );
    let active = Cluster::index_of(&owners[0]);
    let standby = 1 - active;
    // The active node scans alone whether or not the standby has joined
    // yet: wait for the standby to see it lead (a loaded machine can take
    // seconds to connect a ZooKeeper session).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let admin = loop {
        let admin = c.admin(standby).await;
        if admin["leader"] == owners[0].as_str() && admin["nodes"].as_array().unwrap().len() == 2 {
            break admin;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the standby never saw the leader: {admin}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(admin["mode"], "active-standby");
    assert_eq!(admin["nodes"].as_array().unwrap().len(), 2, "{admin}");
    // What Prometheus sees of the pair.
    let shards = admin["shards"].as_array().unwrap().len() as f64;
    for (node, leader, owned) in [(active, 1.0, shards), (standby, 0.0, 0.0)] {
        wait_metric(&c, node, "delayq_cluster_session{state=\"connected\"}", 1.0).await;
        wait_metric(&c, node, "delayq_cluster_leader", leader).await;
        wait_metric(&c, node, "delayq_cluster_nodes", 2.0).await;
        wait_metric(&c, node, "delayq_cluster_owned_shards", owned).await;
    }

    // Messages falling due over the next 8 s, half accepted by each node.
    let topic = format!("fo{}", random_hex(6));
    let mut ids = c.push_batch(active, messages(&topic, 80, 200, 100)).await;
    ids.extend(c.push_batch(standby, messages(&topic, 80, 250, 100)).await);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    c.kill9(active);
    let killed_at = now_ms();

    let expected: HashSet<String> = ids.into_iter().collect();
    let ports = [c.port(standby)];
    let got = drain(&c.http, &ports, &topic, &expected, Duration::from_secs(30)).await;
    assert_delivered(&got, &expected);
    // The first delivery of a message falling due after the kill: it had
    // to be moved by the new owner.
    let first_after = got
        .values()
        .flatten()
        .filter(|(r, _)| r.msg["dueTime"].as_i64().unwrap() > killed_at)
        .map(|(r, _)| r.at)
        .min()
        .unwrap();
    eprintln!(
        "failover: first delivery by the standby {} ms after kill -9 (session timeout {} ms)",
        first_after - killed_at,
        c.session_ms
    );
    assert!(
        first_after - killed_at <= c.session_ms as i64 + 3_000,
        "the standby took {} ms to deliver",
        first_after - killed_at
    );
    let admin = c.admin(standby).await;
    assert_eq!(admin["leader"], Cluster::node_name(standby), "{admin}");
    assert_eq!(admin["nodes"].as_array().unwrap().len(), 1, "{admin}");
    assert!(
        admin["shards"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["scanningHere"] == true),
        "{admin}"
    );
    wait_metric(&c, standby, "delayq_cluster_leader", 1.0).await;
    wait_metric(&c, standby, "delayq_cluster_owned_shards", shards).await;
}

/// Waits (up to 10 s: the nodes learn of each other through ZooKeeper)
/// until node `i`'s `GET /metrics` shows `series` at `expected`.
async fn wait_metric(c: &Cluster, i: usize, series: &str, expected: f64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = c.get(i, "/metrics").await.text;
        let value: Option<f64> = text
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok());
        if value == Some(expected) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "node {i}: {series} is {value:?}, not {expected}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_owner_is_fenced_even_without_epoch_keys() {
    let c = Cluster::builder().start().await;
    let owners = c
        .wait_scanners(&[0, 1], Duration::from_secs(30), |_| true)
        .await;
    let active = Cluster::index_of(&owners[0]);
    let standby = 1 - active;
    let old_name = Cluster::node_name(active);

    c.node(active).signal("STOP");
    c.wait_scanners(&[standby], c.session() * 2 + Duration::from_secs(10), |s| {
        s.iter().all(|v| v[0] == Cluster::node_name(standby))
    })
    .await;

    // Work for the paused node to steal, and Redis losing the epoch keys.
    let topic = format!("fe{}", random_hex(6));
    let ids = c.push_batch(standby, messages(&topic, 60, 0, 30)).await;
    let mut con = c.redis.con();
    for s in 0..c.keys.shards() {
        let _: () = redis::cmd("DEL")
            .arg(c.keys.epoch(s))
            .query(&mut con)
            .unwrap();
    }
    let resumed_at = now_ms();
    c.node(active).signal("CONT");

    let expected: HashSet<String> = ids.into_iter().collect();
    let got = drain(
        &c.http,
        &[c.port(standby)],
        &topic,
        &expected,
        Duration::from_secs(20),
    )
    .await;
    assert_delivered(&got, &expected);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        c.journal.flow_rows_by(&old_name, status::READY, resumed_at),
        0,
        "the paused old owner moved messages after it resumed"
    );

    // It rejoins as a standby.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let a = c.admin(active).await;
        if a["session"] == "connected"
            && a["leader"] == Cluster::node_name(standby)
            && a["inGoodStanding"] == true
        {
            assert!(
                a["shards"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|s| s["scanningHere"] == false),
                "{a}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the old owner did not rejoin as standby: {a}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(c.admin(standby).await["nodes"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn zookeeper_blip_and_outage() {
    // A blip of a third of the session: after the ensemble resumes, the
    // clients need up to another third to notice and reconnect, and the
    // ensemble may first elect a leader among its servers.
    let c = Cluster::builder().session_ms(6_000).start().await;
    let owners = c
        .wait_scanners(&[0, 1], Duration::from_secs(30), |_| true)
        .await;
    let active = Cluster::index_of(&owners[0]);
    let epochs = |a: &Value| -> Vec<Value> {
        a["shards"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["ownerEpoch"].clone())
            .collect()
    };
    let before = epochs(&c.admin(active).await);

    // A blip shorter than the session: the owner pauses and resumes, and
    // nothing is handed off (same owner nodes, same epochs).
    for n in 1..=3 {
        c.zk.pause(n);
    }
    tokio::time::sleep(c.session() / 3).await;
    for n in 1..=3 {
        c.zk.resume(n);
    }
    for i in 0..2 {
        c.wait_ready(i, Duration::from_secs(20)).await;
    }
    let owners_after = c
        .wait_scanners(&[0, 1], Duration::from_secs(20), |_| true)
        .await;
    assert_eq!(owners_after, owners, "a blip handed shards off");
    assert_eq!(
        epochs(&c.admin(active).await),
        before,
        "a blip changed the owners' epochs"
    );

    // The whole ensemble down for longer than the session: every node stops
    // scanning and refuses pushes; when it is back, nothing is lost.
    let topic = format!("zo{}", random_hex(6));
    let ids = c.push_batch(active, messages(&topic, 40, 1_000, 100)).await;
    for n in 1..=3 {
        c.zk.kill(n);
    }
    tokio::time::sleep(c.session() * 2).await;
    for i in 0..2 {
        let a = c.admin(i).await;
        assert!(
            a["shards"]
                .as_array()
                .unwrap()
                .iter()
                .all(|s| s["scanningHere"] == false),
            "node {i} still scans: {a}"
        );
        assert_ne!(a["session"], "connected", "{a}");
        let r = c
            .post(i, "/push", &json!({"topic": topic, "body": "x"}))
            .await;
        r.assert_error(503, "node_unavailable");
    }
    c.zk.start_all();
    c.wait_scanners(&[0, 1], Duration::from_secs(40), |_| true)
        .await;
    let expected: HashSet<String> = ids.into_iter().collect();
    let ports = [c.port(0), c.port(1)];
    let got = drain(&c.http, &ports, &topic, &expected, Duration::from_secs(20)).await;
    assert_delivered(&got, &expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn multi_active_spread_kill_rebalance_and_move_under_load() {
    let mut c = Cluster::builder()
        .nodes(3)
        .shards(6)
        .mode("multi-active")
        .start()
        .await;
    let even = |s: &[Vec<String>], nodes: usize| {
        let mut per: BTreeMap<&str, usize> = BTreeMap::new();
        for v in s {
            *per.entry(v[0].as_str()).or_default() += 1;
        }
        per.len() == nodes && per.values().all(|&n| n == 6 / nodes)
    };
    c.wait_scanners(&[0, 1, 2], Duration::from_secs(30), |s| even(s, 3))
        .await;

    // Load: a producer pushing to every live node in turn, a consumer
    // polling every live node in turn, acking all.
    let topic = format!("ma{}", random_hex(6));
    let ports = Arc::new(Mutex::new(vec![c.port(0), c.port(1), c.port(2)]));
    let pushed = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let (http, ports, pushed, stop, topic) = (
            c.http.clone(),
            ports.clone(),
            pushed.clone(),
            stop.clone(),
            topic.clone(),
        );
        tokio::spawn(async move {
            let mut k = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let port = {
                    let p = ports.lock().unwrap();
                    p[k % p.len()]
                };
                k += 1;
                let batch = json!({"messages": messages(&topic, 20, 300, 10)});
                if let Ok(r) = http
                    .post(format!("http://127.0.0.1:{port}/push/batch"))
                    .json(&batch)
                    .send()
                    .await
                {
                    if r.status() == 200 {
                        let v: Value = r.json().await.unwrap();
                        pushed.lock().unwrap().extend(
                            v["ids"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .map(|i| i.as_str().unwrap().to_string()),
                        );
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let got = Arc::new(Mutex::new(HashMap::<String, Vec<(Received, bool)>>::new()));
    let consumer = {
        let (http, ports, got, stop, topic) = (
            c.http.clone(),
            ports.clone(),
            got.clone(),
            stop.clone(),
            topic.clone(),
        );
        tokio::spawn(async move {
            let mut k = 0;
            let mut idle_after_stop = 0;
            loop {
                let port = {
                    let p = ports.lock().unwrap();
                    p[k % p.len()]
                };
                k += 1;
                let batch = poll(&http, port, &topic, 1).await;
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    idle_after_stop = if batch.is_empty() {
                        idle_after_stop + 1
                    } else {
                        0
                    };
                    if idle_after_stop > 6 {
                        return;
                    }
                }
                for r in batch {
                    let id = r.msg["id"].as_str().unwrap().to_string();
                    let acked = ack(&http, port, &id).await;
                    got.lock().unwrap().entry(id).or_default().push((r, acked));
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Kill one: its shards go to the others.
    c.kill9(2);
    ports.lock().unwrap().retain(|p| *p != 0);
    *ports.lock().unwrap() = vec![c.port(0), c.port(1)];
    c.wait_scanners(&[0, 1], c.session() * 2 + Duration::from_secs(10), |s| {
        even(s, 2)
    })
    .await;

    // It comes back: the leader spreads the shards again; a rebalance
    // keeps them even.
    c.start_node(2).await;
    ports.lock().unwrap().push(c.port(2));
    c.wait_scanners(&[0, 1, 2], Duration::from_secs(30), |s| even(s, 3))
        .await;
    let r = c.post(0, "/admin/rebalance", &json!({})).await;
    let assignment = r.assert_ok()["assignment"].as_array().unwrap().clone();
    assert_eq!(assignment.len(), 6);
    let after = c
        .wait_scanners(&[0, 1, 2], Duration::from_secs(30), |s| even(s, 3))
        .await;

    // Move one shard under load.
    let target = (0..3)
        .map(Cluster::node_name)
        .find(|n| n != &after[0])
        .unwrap();
    let r = c
        .post(1, &format!("/admin/shards/0/move?to={target}"), &json!({}))
        .await;
    r.assert_ok();
    c.wait_scanners(&[0, 1, 2], Duration::from_secs(30), |s| s[0][0] == target)
        .await;
    let view = c.admin(2).await;
    assert_eq!(
        owners_of(&view)[0].as_deref(),
        Some(target.as_str()),
        "{view}"
    );

    // Bad requests are clear errors.
    c.post(0, "/admin/shards/99/move?to=node-0", &json!({}))
        .await
        .assert_error(404, "no_such_shard");
    c.post(0, "/admin/shards/1/move?to=nobody", &json!({}))
        .await
        .assert_error(404, "no_such_node");
    c.post(0, "/admin/shards/x/move?to=node-0", &json!({}))
        .await
        .assert_error(400, "invalid_shard");

    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    producer.await.unwrap();
    let expected: HashSet<String> = pushed.lock().unwrap().iter().cloned().collect();
    assert!(
        expected.len() > 200,
        "the producer pushed only {}",
        expected.len()
    );
    tokio::time::timeout(Duration::from_secs(60), consumer)
        .await
        .expect("the consumer drains")
        .unwrap();
    let mut got = got.lock().unwrap().clone();
    // Messages a killed node handed out in a poll that never answered come
    // back after their ttl: collect any stragglers.
    let missing: HashSet<String> = expected
        .iter()
        .filter(|id| !got.contains_key(*id))
        .cloned()
        .collect();
    if !missing.is_empty() {
        let ports = [c.port(0), c.port(1), c.port(2)];
        for (id, d) in drain(&c.http, &ports, &topic, &missing, Duration::from_secs(20)).await {
            got.entry(id).or_default().extend(d);
        }
    }
    assert_delivered(&got, &expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn killing_the_zookeeper_leader_keeps_delivering() {
    let c = Cluster::builder().start().await;
    c.wait_scanners(&[0, 1], Duration::from_secs(30), |_| true)
        .await;
    let topic = format!("zl{}", random_hex(6));
    let ids = c.push_batch(0, messages(&topic, 60, 500, 50)).await;
    let leader = c.zk.leader();
    c.zk.kill(leader);
    // Pushes go on; a node that lost ZooKeeper for longer than a third of
    // its session refuses them for a moment (503), as a client retries.
    let deadline = Instant::now() + Duration::from_secs(20);
    let ids2 = loop {
        let r = c
            .post(
                1,
                "/push/batch",
                &json!({"messages": messages(&topic, 60, 500, 50)}),
            )
            .await;
        if r.status == 200 {
            break r.json["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect::<Vec<_>>();
        }
        r.assert_error(503, "node_unavailable");
        assert!(
            Instant::now() < deadline,
            "pushes refused for 20 s after the ZooKeeper leader died"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let expected: HashSet<String> = ids.into_iter().chain(ids2).collect();
    let got = drain(
        &c.http,
        &[c.port(0), c.port(1)],
        &topic,
        &expected,
        Duration::from_secs(30),
    )
    .await;
    assert_delivered(&got, &expected);
    c.wait_scanners(&[0, 1], Duration::from_secs(20), |_| true)
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn nginx_round_robin_and_wake_ups_across_nodes() {
    let mut c = Cluster::builder().start().await;
    let owners = c
        .wait_scanners(&[0, 1], Duration::from_secs(30), |_| true)
        .await;
    let owner = Cluster::index_of(&owners[0]);
    let other = 1 - owner;
    let front = c.start_nginx(&[0, 1]);

    // Through nginx: pushes alternate between the nodes; all delivered once.
    let topic = format!("ng{}", random_hex(6));
    let mut ids = HashSet::new();
    for i in 0..100 {
        let r = c
            .http
            .post(format!("http://127.0.0.1:{front}/push"))
            .json(&json!({"topic": topic, "body": format!("n{i}"), "delay": 300 + i * 7}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        ids.insert(v["id"].as_str().unwrap().to_string());
    }
    let got = drain(&c.http, &[front], &topic, &ids, Duration::from_secs(20)).await;
    assert_delivered(&got, &ids);
    assert!(
        got.values().all(|d| d.len() == 1),
        "a message was delivered twice"
    );
    let workers: BTreeSet<i64> = ids
        .iter()
        .map(|id| (id.parse::<i64>().unwrap() >> 12) & 1023)
        .collect();
    assert_eq!(
        workers.len(),
        2,
        "both nodes took pushes (and have their own worker ids)"
    );

    // A message pushed to the node that does not own its shard, while the
    // owner sleeps, is delivered on time to a consumer on that same
    // non-owner: the owner is woken over Redis, and so is the consumer.
    let mut lateness = Vec::new();
    for i in 0..8 {
        let t = format!("{topic}w{i}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let id = c
            .push(other, json!({"topic": t, "body": "w", "delay": 400}))
            .await;
        let got = c.poll(other, &t, 5, 1).await;
        assert_eq!(got.len(), 1, "nothing arrived on {t}");
        assert_eq!(got[0].msg["id"], id.as_str());
        lateness.push(got[0].at - got[0].msg["dueTime"].as_i64().unwrap());
    }
    eprintln!("lateness of pushes to the non-owner, consumed there: {lateness:?}");
    assert!(lateness.iter().all(|l| *l >= 0), "early: {lateness:?}");
    // Without the wake-ups these wait for the owner's 1 s safety scan.
    assert!(
        p99(lateness.clone()) < 500,
        "not woken across nodes: {lateness:?}"
    );

    // A recurring message pushed to and acked on the non-owner: each ack
    // there moves it on, and the owner is woken for the next occurrence.
    let t = format!("{topic}r");
    let id = c
        .push(
            other,
            json!({"topic": t, "body": "r", "delay": 300, "repeat": {"every": 600, "times": 3}}),
        )
        .await;
    let mut numbers = Vec::new();
    let mut late = Vec::new();
    for _ in 0..3 {
        let got = c.poll(other, &t, 5, 1).await;
        assert_eq!(got.len(), 1, "an occurrence did not arrive on {t}");
        assert_eq!(got[0].msg["id"], id.as_str());
        numbers.push(got[0].msg["occurrence"]["number"].as_i64().unwrap());
        late.push(got[0].at - got[0].msg["occurrence"]["dueTime"].as_i64().unwrap());
        assert!(ack(&c.http, c.port(other), &id).await);
    }
    assert_eq!(numbers, vec![1, 2, 3]);
    assert!(late.iter().all(|l| *l >= 0), "early: {late:?}");
    assert!(
        late.iter().all(|l| *l < 500),
        "not woken across nodes: {late:?}"
    );
    assert!(
        c.poll(other, &t, 1, 1).await.is_empty(),
        "a fourth occurrence"
    );
    let _ = owner;
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_biz_key_pushes_to_two_nodes_get_one_id() {
    let c = Cluster::builder().start().await;
    c.wait_scanners(&[0, 1], Duration::from_secs(30), |_| true)
        .await;
    // Both hold a worker id lease (scanning does not need one).
    c.wait_ready(0, Duration::from_secs(30)).await;
    c.wait_ready(1, Duration::from_secs(30)).await;
    let w0 = c.admin(0).await["workerId"].as_i64().unwrap();
    let w1 = c.admin(1).await["workerId"].as_i64().unwrap();
    assert_ne!(w0, w1, "two live nodes share a worker id");
    for round in 0..5 {
        let topic = format!("bk{}", random_hex(6));
        let key = format!("order-{round}");
        let mut pushes = Vec::new();
        for k in 0..10 {
            let (http, url) = (c.http.clone(), c.url(k % 2, "/push"));
            let body = json!({"topic": topic, "bizKey": key, "body": "x", "delay": 60_000});
            pushes.push(tokio::spawn(async move {
                let r = http.post(url).json(&body).send().await.unwrap();
                (r.status().as_u16(), r.json::<Value>().await.unwrap())
            }));
        }
        let mut ids = BTreeSet::new();
        for p in pushes {
            let (status, body) = p.await.unwrap();
            assert_eq!(status, 200, "{body}");
            ids.insert(body["id"].as_str().unwrap().to_string());
        }
        assert_eq!(ids.len(), 1, "one bizKey got several ids: {ids:?}");
        assert_eq!(c.journal.rows_by_biz_key(&topic, &key).len(), 1);
    }
    // Batches racing on some of their bizKeys: the shared keys get one id
    // each, and every other message of those batches is written as usual
    // (only the refused rows are settled again, not the whole batch).
    for round in 0..4 {
        let topic = format!("bb{}", random_hex(6));
        let mut pushes = Vec::new();
        for b in 0..6 {
            let messages: Vec<Value> = (0..100)
                .map(|k| json!({"topic": topic, "bizKey": format!("shared-{k}"), "body": "s", "delay": 60_000}))
                .chain((0..100).map(|k| json!({"topic": topic, "bizKey": format!("own-{b}-{k}"), "body": "o", "delay": 60_000})))
                .collect();
            let (http, url) = (c.http.clone(), c.url(b % 2, "/push/batch"));
            pushes.push(tokio::spawn(async move {
                let r = http
                    .post(url)
                    .json(&json!({ "messages": messages }))
                    .send()
                    .await
                    .unwrap();
                (r.status().as_u16(), r.json::<Value>().await.unwrap())
            }));
        }
        let mut shared: Vec<BTreeSet<String>> = vec![BTreeSet::new(); 100];
        let mut own = BTreeSet::new();
        for p in pushes {
            let (status, body) = p.await.unwrap();
            assert_eq!(status, 200, "round {round}: {body}");
            let ids: Vec<String> = body["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect();
            assert_eq!(ids.len(), 200);
            for k in 0..100 {
                shared[k].insert(ids[k].clone());
            }
            own.extend(ids[100..].iter().cloned());
        }
        for (k, ids) in shared.iter().enumerate() {
            assert_eq!(ids.len(), 1, "shared-{k} got several ids: {ids:?}");
            assert_eq!(
                c.journal
                    .rows_by_biz_key(&topic, &format!("shared-{k}"))
                    .len(),
                1
            );
        }
        assert_eq!(own.len(), 600, "every other message has its own id");
        assert!(own.iter().all(|id| !shared.iter().any(|s| s.contains(id))));
    }

    let settled: usize = std::fs::read_dir(c.dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| {
            std::fs::read_to_string(e.path())
                .unwrap_or_default()
                .matches("another writer took this bizKey")
                .count()
        })
        .sum();
    eprintln!("rows settled one by one after a bizKey race: {settled}");

    // Wait for a message due soon to come out, to show nothing is stuck.
    let id = c
        .push(0, json!({"topic": "bk-end", "body": "e", "delay": 100}))
        .await;
    sleep_until_ms(now_ms() + 100).await;
    let got = c.poll(1, "bk-end", 5, 1).await;
    assert_eq!(got[0].msg["id"], id.as_str());
}

/// The cluster benchmark (run by hand, figures in BENCHMARKS.md):
/// `cargo nextest run --release --test cluster --run-ignored only --no-capture cluster_benchmark`
/// - failover: kill -9 of the active node → first delivery by the new owner
///   of a message due after the kill, over `DELAYQ_BENCH_RUNS` (default 5)
///   kills, with a 6 s session;
/// - lateness p99 of messages pushed to the node that does not scan their
///   shard, consumed on that same node;
/// - lateness p99 while shards move (multi-active rebalance under load).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: run by hand, see BENCHMARKS.md"]
async fn cluster_benchmark() {
    let runs: usize = std::env::var("DELAYQ_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let session_ms: u64 = 6_000;

    // Failover.
    let mut c = Cluster::builder().session_ms(session_ms).start().await;
    let mut failovers = Vec::new();
    for run in 0..runs {
        let owners = c
            .wait_scanners(&[0, 1], Duration::from_secs(60), |_| true)
            .await;
        let active = Cluster::index_of(&owners[0]);
        let standby = 1 - active;
        let topic = format!("bf{run}{}", random_hex(4));
        let ids = c.push_batch(standby, messages(&topic, 500, 500, 20)).await;
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        c.kill9(active);
        let killed_at = now_ms();
        let expected: HashSet<String> = ids.into_iter().collect();
        let got = drain(
            &c.http,
            &[c.port(standby)],
            &topic,
            &expected,
            Duration::from_secs(40),
        )
        .await;
        assert_delivered(&got, &expected);
        let first = got
            .values()
            .flatten()
            .filter(|(r, _)| r.msg["dueTime"].as_i64().unwrap() > killed_at)
            .map(|(r, _)| r.at)
            .min()
            .unwrap();
        failovers.push(first - killed_at);
        eprintln!("failover run {run}: {} ms", first - killed_at);
        c.start_node(active).await;
    }
    failovers.sort_unstable();
    let median = failovers[failovers.len() / 2];

    // Lateness of pushes to the non-owner, consumed there.
    let owners = c
        .wait_scanners(&[0, 1], Duration::from_secs(60), |_| true)
        .await;
    let other = 1 - Cluster::index_of(&owners[0]);
    let topic = format!("bn{}", random_hex(4));
    let mut ids = Vec::new();
    for k in 0..10 {
        ids.extend(
            c.push_batch(other, messages(&topic, 500, 1_000 + k * 10, 1))
                .await,
        );
    }
    let expected: HashSet<String> = ids.into_iter().collect();
    let got = drain(
        &c.http,
        &[c.port(other)],
        &topic,
        &expected,
        Duration::from_secs(30),
    )
    .await;
    assert_delivered(&got, &expected);
    let non_owner: Vec<i64> = got
        .values()
        .map(|d| d[0].0.at - d[0].0.msg["dueTime"].as_i64().unwrap())
        .collect();
    drop(c);

    // Lateness while shards move.
    let c = Cluster::builder()
        .nodes(3)
        .shards(6)
        .mode("multi-active")
        .session_ms(session_ms)
        .start()
        .await;
    c.wait_scanners(&[0, 1, 2], Duration::from_secs(60), |s| {
        s.iter().all(|v| v.len() == 1)
    })
    .await;
    let topic = format!("br{}", random_hex(4));
    let mut ids = Vec::new();
    for k in 0..3 {
        ids.extend(c.push_batch(k, messages(&topic, 1000, 1_000, 3)).await);
    }
    let mover = async {
        for (n, shard) in [(1usize, 0u32), (2, 1), (0, 2), (1, 3)] {
            tokio::time::sleep(Duration::from_millis(700)).await;
            let to = Cluster::node_name(n);
            let _ = c
                .post(
                    0,
                    &format!("/admin/shards/{shard}/move?to={to}"),
                    &json!({}),
                )
                .await;
        }
        let _ = c.post(1, "/admin/rebalance", &json!({})).await;
    };
    let expected: HashSet<String> = ids.into_iter().collect();
    let ports = [c.port(0), c.port(1), c.port(2)];
    let (got, ()) = tokio::join!(
        drain(&c.http, &ports, &topic, &expected, Duration::from_secs(30)),
        mover
    );
    assert_delivered(&got, &expected);
    let moving: Vec<i64> = got
        .values()
        .map(|d| d[0].0.at - d[0].0.msg["dueTime"].as_i64().unwrap())
        .collect();
    println!(
        "cluster benchmark: failover median {median} ms over {runs} kills {failovers:?} (session {session_ms} ms); \
         non-owner lateness p99 {} ms max {} ms ({} msgs); lateness during shard moves p99 {} ms max {} ms ({} msgs)",
        p99(non_owner.clone()),
        non_owner.iter().max().unwrap(),
        non_owner.len(),
        p99(moving.clone()),
        moving.iter().max().unwrap(),
        moving.len()
    );
}

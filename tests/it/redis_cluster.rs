//! delayq on a Redis Cluster (`redis+cluster://`): 3 masters, each with a
//! replica, started by `cluster/redis-cluster`. The schedule spreads over
//! the masters; pushes, batches, cancels, acks in polls, the reconciler and
//! a restore work across them; and a master killed mid-stream, its replica
//! promoted, loses nothing, hands nothing out early and brings nothing
//! acked back.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{id_of, now_ms, status, Backend, Env, RedisCluster};

backend_tests!(
    a_cluster_serves_every_route_across_its_masters,
    a_master_killed_mid_stream_loses_nothing
);

/// Polls `topic` (acking what it got in the same request) until `n`
/// messages came or `within` passed; returns (arrival, message).
async fn take_acking(env: &Env, topic: &str, n: usize, within: Duration) -> Vec<(i64, Value)> {
    let deadline = tokio::time::Instant::now() + within;
    let mut got: Vec<(i64, Value)> = Vec::new();
    let mut ack: Vec<String> = Vec::new();
    while got.len() < n && tokio::time::Instant::now() < deadline {
        let r = env
            .post_json(
                &format!("/get/{topic}"),
                &json!({"ack": ack, "count": 100, "timeout": 1}),
            )
            .await;
        let at = now_ms();
        let reply = r.assert_ok();
        let results = reply["results"].as_array().cloned().unwrap_or_default();
        assert!(
            results.iter().all(|r| r["result"] == "consumed"),
            "acks in the poll: {reply}"
        );
        ack.clear();
        for m in reply["messages"].as_array().unwrap() {
            ack.push(id_of(m).to_string());
            got.push((at, m.clone()));
        }
    }
    if !ack.is_empty() {
        let r = env
            .post_json(
                &format!("/get/{topic}"),
                &json!({"ack": ack, "count": 1, "timeout": 0}),
            )
            .await;
        assert_eq!(r.assert_ok()["acked"], ack.len(), "{}", r.text);
    }
    got
}

async fn a_cluster_serves_every_route_across_its_masters(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let cluster = RedisCluster::start(dir.path());
    let env = Env::builder(b).redis_url(&cluster.url).start().await;
    let ready = env.get_path("/ready").await;
    assert_eq!(ready.status, 200, "{}", ready.text);

    // One by one and in batches (a batch spans every shard, so every
    // master), on two topics, due within 2 s.
    let mut ids = Vec::new();
    for i in 0..20 {
        let topic = if i % 2 == 0 { "a" } else { "b" };
        let delay = 300 + i * 50;
        ids.push(
            env.push(json!({"topic": topic, "body": format!("one {i}"), "delay": delay, "priority": i % 3}))
                .await,
        );
    }
    let batch: Vec<Value> = (0..80)
        .map(|i| {
            let topic = if i % 2 == 0 { "a" } else { "b" };
            json!({"topic": topic, "body": format!("batch {i}"), "delay": 500 + i * 15, "ttl": 1000})
        })
        .collect();
    ids.extend(env.push_batch(batch).await);
    // Ten cancelled, across the shards.
    let cancelled: BTreeSet<String> = ids.iter().step_by(10).cloned().collect();
    for id in &cancelled {
        env.delete(id).await.assert_ok();
    }
    let masters = cluster.masters_with_keys();
    assert!(
        masters.len() >= 2,
        "the schedule should spread over the masters, held by {masters:?}"
    );

    let mut got = take_acking(&env, "a", 45, Duration::from_secs(20)).await;
    got.extend(take_acking(&env, "b", 45, Duration::from_secs(20)).await);
    let mut seen = BTreeSet::new();
    for (at, m) in &got {
        let due = m["dueTime"].as_i64().unwrap();
        assert!(*at >= due, "handed out {} ms early: {m}", due - at);
        assert!(
            !cancelled.contains(id_of(m)),
            "a cancelled message came: {m}"
        );
        assert!(seen.insert(id_of(m).to_string()), "twice: {m}");
    }
    assert_eq!(seen.len(), 90, "every message not cancelled, once");

    // Acked in the polls: nothing comes back after the ttl.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    env.assert_nothing("a", 1).await;
    env.assert_nothing("b", 1).await;
    for id in &ids {
        let want = if cancelled.contains(id) {
            status::DELETED
        } else {
            status::CONSUMED
        };
        env.wait_status(id, want).await;
    }

    // Twelve messages due in a minute, over every shard. The reconciler
    // reads every shard's keys (pipelines split over the masters) and finds
    // Redis and the journal agree.
    let later: Vec<String> = env
        .push_batch(
            (0..12)
                .map(|i| json!({"topic": "c", "body": format!("later {i}"), "delay": 60_000}))
                .collect(),
        )
        .await;
    for id in &later {
        env.wait_scheduled(id).await;
    }
    let kinds = ["missing", "unscheduled", "finishedInJournal", "unknown"];
    let (report, _) = env.run_tool_report(&["reconcile", "--reconcile-grace", "1ms"]);
    assert!(report["redisScanned"].as_i64().unwrap() >= 12, "{report}");
    for kind in kinds {
        assert_eq!(report[kind]["count"], 0, "{kind}: {report}");
    }

    // One of them lost from the cluster: the reconciler sees it missing,
    // and a restore brings it back.
    let lost = later[5].clone();
    let shard = env
        .keys
        .shard_of(delayq::message::MessageId(lost.parse().unwrap()));
    let cluster_client = redis::cluster::ClusterClient::new(cluster_seeds(&cluster.url)).unwrap();
    let mut con = cluster_client.get_connection().unwrap();
    let _: () = redis::cmd("HDEL")
        .arg(env.keys.messages(shard))
        .arg(&lost)
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("ZREM")
        .arg(env.keys.delay(shard))
        .arg(&lost)
        .query(&mut con)
        .unwrap();
    let (report, _) = env.run_tool_report(&["reconcile", "--reconcile-grace", "1ms"]);
    assert_eq!(report["missing"]["count"], 1, "{report}");
    assert_eq!(
        report["missing"]["sample"][0]["id"],
        json!(lost),
        "{report}"
    );
    assert!(!env.scheduled_in_cluster(&cluster, &lost));
    let r = env.get_path("/reStore?expire=true").await;
    assert_eq!(r.assert_ok()["restored"], 1, "{}", r.text);
    assert!(env.scheduled_in_cluster(&cluster, &lost));

    // A paused topic: every master's shards hand nothing of it out (claim
    // scripts read the shard's paused set) until it is resumed.
    env.post_json("/topics/a/pause", &json!({}))
        .await
        .assert_ok();
    let paused: Vec<String> = env
        .push_batch(
            (0..16)
                .map(|i| json!({"topic": "a", "body": format!("paused {i}")}))
                .collect(),
        )
        .await;
    env.assert_nothing("a", 2).await;
    let topics = env.get_path("/topics").await;
    let a = topics.assert_ok()["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic"] == "a")
        .cloned()
        .unwrap_or_else(|| panic!("no topic a in {}", topics.text));
    assert_eq!(a["paused"], true, "{a}");
    assert!(a["oldestReadyDueTime"].as_i64().is_some(), "{a}");
    env.post_json("/topics/a/resume", &json!({}))
        .await
        .assert_ok();
    let got = take_acking(&env, "a", 16, Duration::from_secs(10)).await;
    let got: BTreeSet<&str> = got.iter().map(|(_, m)| id_of(m)).collect();
    assert_eq!(got, paused.iter().map(String::as_str).collect());

    // Rescheduled on every master: due in a minute, moved to half a second.
    let later: Vec<String> = env
        .push_batch(
            (0..16)
                .map(|i| json!({"topic": "d", "body": format!("later {i}"), "delay": 60_000}))
                .collect(),
        )
        .await;
    let r = env
        .post_json("/reschedule", &json!({"ids": later, "delay": 500}))
        .await;
    assert_eq!(r.assert_ok()["rescheduled"], 16, "{}", r.text);
    let got = take_acking(&env, "d", 16, Duration::from_secs(10)).await;
    for (at, m) in &got {
        let due = m["dueTime"].as_i64().unwrap();
        assert!(*at >= due, "handed out {} ms early: {m}", due - at);
    }
    let got: BTreeSet<&str> = got.iter().map(|(_, m)| id_of(m)).collect();
    assert_eq!(got, later.iter().map(String::as_str).collect());
}

/// The seed nodes of a `redis+cluster://` URL, as the node reads them.
fn cluster_seeds(url: &str) -> Vec<String> {
    match delayq::redis::conn::Target::parse(url) {
        Ok(delayq::redis::conn::Target::Cluster { seeds, .. }) => seeds,
        other => panic!("not a cluster URL: {url} ({other:?})"),
    }
}

impl Env {
    /// Does the cluster hold `id` in its shard's delay zset?
    fn scheduled_in_cluster(&self, cluster: &RedisCluster, id: &str) -> bool {
        let shard = self
            .keys
            .shard_of(delayq::message::MessageId(id.parse().unwrap()));
        let client = redis::cluster::ClusterClient::new(cluster_seeds(&cluster.url)).unwrap();
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(self.keys.delay(shard))
            .arg(id)
            .query(&mut client.get_connection().unwrap())
            .unwrap();
        score.is_some()
    }
}

/// A master that lost delayq's scripts (SCRIPT FLUSH, as after a restarted
/// server is promoted) answers NOSCRIPT to its part of a poll's claims:
/// only that part is sent again once the scripts are loaded, so the
/// claims that ran on the other masters are handed out, not held by
/// nobody until their ttl (red with the whole pipeline sent again).
#[tokio::test(flavor = "multi_thread")]
async fn a_master_that_lost_the_scripts_costs_no_claim() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = RedisCluster::start(dir.path());
    let env = Env::builder(Backend::Sqlite)
        .redis_url(&cluster.url)
        .start()
        .await;
    let batch: Vec<Value> = (0..40)
        .map(|i| json!({"topic": "ns", "body": format!("m{i}"), "delay": 100, "ttl": 60_000}))
        .collect();
    let ids = env.push_batch(batch).await;
    for id in &ids {
        env.wait_status(id, status::READY).await;
    }
    let masters = cluster.masters_with_keys();
    assert!(masters.len() >= 2, "held by {masters:?}");
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut cluster.con(masters[0]))
        .unwrap();
    let r = env
        .post_json("/get/ns", &json!({"count": 100, "timeout": 2}))
        .await;
    let got = r.assert_ok()["messages"].as_array().unwrap().len();
    assert_eq!(
        got, 40,
        "one poll hands out every ready message: {}",
        r.text
    );
}

/// `rediss+cluster://`: the node speaks TLS to every master and replica
/// (commands, scripts and the sharded pub/sub), trusting the cluster's CA
/// through `--tls-ca-file`; it schedules in the cluster, not in the env's
/// own plain Redis.
#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = crate::common::tls::Pki::make(dir.path());
    let cluster = RedisCluster::start_tls(dir.path(), &pki);
    let env = Env::builder(Backend::Sqlite)
        .redis_url(&cluster.url)
        .arg("--tls-ca-file")
        .arg(pki.ca.to_str().unwrap())
        .start()
        .await;
    let batch: Vec<Value> = (0..40)
        .map(|i| json!({"topic": "tls", "body": format!("m{i}"), "delay": 200 + i * 10}))
        .collect();
    let ids = env.push_batch(batch).await;
    let got = take_acking(&env, "tls", 40, Duration::from_secs(20)).await;
    let seen: BTreeSet<String> = got.iter().map(|(_, m)| id_of(m).to_string()).collect();
    assert_eq!(seen, ids.iter().cloned().collect::<BTreeSet<_>>());
    for (at, m) in &got {
        assert!(*at >= m["dueTime"].as_i64().unwrap(), "early: {m}");
    }
    let plain: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*{}*", env.config.key_prefix))
        .query(&mut env.redis.con())
        .unwrap();
    assert!(plain.is_empty(), "the env's plain Redis holds {plain:?}");
}

/// What the consumer saw of one message.
#[derive(Default)]
struct Seen {
    /// Arrival times.
    arrivals: Vec<i64>,
    due: i64,
    /// The bizKey it was pushed with (its body is the same text).
    biz_key: String,
    /// When its ack was answered `consumed`.
    acked_at: Option<i64>,
}

async fn a_master_killed_mid_stream_loses_nothing(b: Backend) {
    a_master_lost_mid_stream_loses_nothing(b, Loss::Killed).await
}

/// A master that hangs (SIGSTOP) is failed over while connections to it
/// stay open and silent: the node's client must learn the new slot map
/// without a MOVED from the old master (red with the nudge after a timeout
/// gone: every command for its slots timed out for good).
#[tokio::test(flavor = "multi_thread")]
async fn a_master_hung_mid_stream_loses_nothing() {
    a_master_lost_mid_stream_loses_nothing(Backend::Sqlite, Loss::Hung).await
}

#[derive(Clone, Copy, PartialEq)]
enum Loss {
    Killed,
    Hung,
}

async fn a_master_lost_mid_stream_loses_nothing(b: Backend, loss: Loss) {
    let dir = tempfile::tempdir().unwrap();
    let cluster = RedisCluster::start(dir.path());
    let env = Arc::new(
        Env::builder(b)
            .redis_url(&cluster.url)
            .arg("--reconcile-interval")
            .arg("2s")
            .start()
            .await,
    );
    const TOTAL: usize = 300;
    let topic = "f";

    // The producer: 10 messages every 100 ms for 3 s, due 0.5 to 2.5 s
    // later, retried until accepted (a push may fail while the cluster
    // fails over), each with a bizKey, as the README asks of a producer
    // that retries: a refused batch may be in the journal already, and
    // its retry is the same messages.
    let accepted: Arc<Mutex<Vec<String>>> = Arc::default();
    let producer = {
        let (env, accepted) = (env.clone(), accepted.clone());
        tokio::spawn(async move {
            for round in 0..TOTAL / 10 {
                let batch: Vec<Value> = (0..10)
                    .map(|i| {
                        let n = round * 10 + i;
                        json!({"topic": topic, "bizKey": format!("m{n}"), "body": format!("m{n}"), "delay": 500 + (n * 7919) % 2000, "ttl": 2000})
                    })
                    .collect();
                let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
                let mut refused = String::new();
                loop {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "pushes refused for a minute after the failover: {refused}\n{}",
                        env.server.log_tail(80)
                    );
                    let r = env
                        .post_json("/push/batch", &json!({ "messages": batch }))
                        .await;
                    if r.status == 200 {
                        let ids = r.json["ids"].as_array().unwrap();
                        accepted
                            .lock()
                            .unwrap()
                            .extend(ids.iter().map(|v| v.as_str().unwrap().to_string()));
                        break;
                    }
                    assert!(r.status >= 500, "a push refused: {}", r.text);
                    refused = format!("{} {}", r.status, r.text);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    // The consumer: polls, acks each message with its own request, and
    // keeps what it saw.
    let seen: Arc<Mutex<BTreeMap<String, Seen>>> = Arc::default();
    let consumer = {
        let (env, seen, accepted) = (env.clone(), seen.clone(), accepted.clone());
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
            let mut unacked: Vec<String> = Vec::new();
            while tokio::time::Instant::now() < deadline {
                let done = {
                    let seen = seen.lock().unwrap();
                    let accepted = accepted.lock().unwrap();
                    accepted.len() == TOTAL
                        && accepted
                            .iter()
                            .all(|id| seen.get(id).is_some_and(|s| s.acked_at.is_some()))
                };
                if done {
                    break;
                }
                let r = env
                    .get_path(&format!("/get/{topic}?timeout=1&count=50"))
                    .await;
                let at = now_ms();
                if r.status == 200 {
                    for m in r.json["messages"].as_array().unwrap() {
                        let mut seen = seen.lock().unwrap();
                        let s = seen.entry(id_of(m).to_string()).or_default();
                        s.arrivals.push(at);
                        s.due = m["dueTime"].as_i64().unwrap();
                        s.biz_key = m["body"].as_str().unwrap_or_default().to_string();
                        unacked.push(id_of(m).to_string());
                    }
                } else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let mut still = Vec::new();
                for id in unacked.drain(..) {
                    let r = env.ack(&id).await;
                    match (r.status, r.json["status"].as_str(), r.json["code"].as_str()) {
                        (200, Some("Consumed"), _) => {
                            seen.lock().unwrap().get_mut(&id).unwrap().acked_at = Some(now_ms())
                        }
                        // Its ttl passed first: it comes again.
                        (409, _, Some("not_in_flight" | "stale_delivery")) => {}
                        (s, _, _) if s >= 500 => still.push(id),
                        _ => panic!("ack {id}: {}", r.text),
                    }
                }
                unacked = still;
            }
        })
    };

    // A master dies 1.5 s into the stream (while messages are being
    // pushed, handed out and acked); its replica takes over.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let victim = cluster
        .status()
        .into_iter()
        .find(|s| s.role == "master")
        .unwrap()
        .n;
    match loss {
        Loss::Killed => cluster.kill(victim),
        Loss::Hung => cluster.pause(victim),
    }
    cluster.wait_ok();
    producer.await.unwrap();
    consumer.await.unwrap();
    match loss {
        Loss::Killed => cluster.start_one(victim),
        Loss::Hung => cluster.resume(victim),
    }
    // The ttl of anything handed out last passes: nothing comes back.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    env.assert_nothing(topic, 1).await;

    let accepted = accepted.lock().unwrap().clone();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(accepted.len(), TOTAL);
    // A refused push may have been applied in part (the README says so):
    // a message of it can be delivered and acked before the producer's
    // retry, which then finds its bizKey free and is accepted as a new
    // message. Anything else delivered was never pushed.
    let accepted_keys: HashSet<&str> = accepted
        .iter()
        .filter_map(|id| seen.get(id).map(|s| s.biz_key.as_str()))
        .collect();
    let unknown: Vec<(&String, &str)> = seen
        .iter()
        .filter(|(id, s)| !accepted.contains(id) && !accepted_keys.contains(s.biz_key.as_str()))
        .map(|(id, s)| (id, s.biz_key.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "delivered but never accepted: {unknown:?}"
    );
    let lost: Vec<&String> = accepted
        .iter()
        .filter(|id| seen.get(*id).is_none_or(|s| s.acked_at.is_none()))
        .collect();
    assert!(lost.is_empty(), "never delivered and acked: {lost:?}");
    for (id, s) in seen.iter() {
        for at in &s.arrivals {
            assert!(*at >= s.due, "{id} handed out {} ms early", s.due - at);
        }
        let acked = s.acked_at.unwrap();
        let after: Vec<&i64> = s.arrivals.iter().filter(|a| **a > acked).collect();
        assert!(after.is_empty(), "{id} came back after its ack: {after:?}");
    }
    for id in &accepted {
        env.wait_status(id, status::CONSUMED).await;
    }
}

/// One master's clock 3 s ahead, another's 3 s behind: each master's clock
/// is its shards' clock, so no message pushed with a delay is handed out
/// before its delay passed (by the host's clock, which the third master
/// keeps), on any master; `GET /admin/cluster` shows each master's offset.
#[tokio::test(flavor = "multi_thread")]
async fn masters_clocks_apart_make_nothing_early() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = RedisCluster::start_skewable(dir.path());
    let masters: Vec<usize> = cluster
        .status()
        .into_iter()
        .filter(|s| s.role == "master")
        .map(|s| s.n)
        .collect();
    assert_eq!(masters.len(), 3, "{:?}", cluster.status());
    cluster.skew_clock(masters[0], 3_000);
    cluster.skew_clock(masters[1], -3_000);
    let env = Env::builder(Backend::Sqlite)
        .redis_url(&cluster.url)
        .arg("--shards")
        .arg("12")
        .start()
        .await;
    // Each master's offset is seen (the shim reads it within a second, the
    // node probes every 500 ms).
    let mut offsets = Vec::new();
    for _ in 0..50 {
        let view = env.get_path("/admin/cluster").await;
        offsets = view.assert_ok()["clock"]["masters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["offsetMs"].as_i64().unwrap())
            .collect::<Vec<_>>();
        offsets.sort_unstable();
        if offsets.len() == 3 && offsets[0] < -2_500 && offsets[2] > 2_500 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        offsets.len() == 3 && offsets[0] < -2_500 && offsets[1].abs() < 500 && offsets[2] > 2_500,
        "each master's offset in /admin/cluster: {offsets:?}"
    );

    const DELAY: i64 = 5_000;
    let pushed_at = now_ms();
    let ids = env
        .push_batch(
            (0..300)
                .map(|i| json!({"topic": "skew", "body": format!("{i}"), "delay": DELAY}))
                .collect(),
        )
        .await;
    let got = take_acking(&env, "skew", ids.len(), Duration::from_secs(30)).await;
    assert_eq!(got.len(), ids.len(), "every message handed out");
    let early: Vec<(i64, String)> = got
        .iter()
        .filter(|(at, _)| *at < pushed_at + DELAY)
        .map(|(at, m)| (pushed_at + DELAY - at, id_of(m).to_string()))
        .collect();
    assert!(
        early.is_empty(),
        "{} of {} messages handed out before their delay passed (ms early, id): {:?}",
        early.len(),
        got.len(),
        &early[..early.len().min(10)]
    );
    // Nor late by a master's offset: each shard counts on its own master.
    let late = got
        .iter()
        .map(|(at, _)| at - (pushed_at + DELAY))
        .max()
        .unwrap();
    assert!(late < 2_500, "handed out up to {late} ms late");
}

/// A master whose replica fell behind is killed and the replica takes
/// over without the master's last writes (the replica hung, its link
/// cut, while 60 acks and 30 cancels reached the master and the journal):
/// none of the acked or cancelled messages is handed out again, and the
/// messages still live are.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_promoted_behind_its_master_brings_back_no_end() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = RedisCluster::start(dir.path());
    let env = Env::builder(Backend::Sqlite)
        .redis_url(&cluster.url)
        .start()
        .await;
    let handed: Vec<String> = env
        .push_batch(
            (0..60)
                .map(|i| json!({"topic": "lag", "body": format!("h{i}"), "delay": 0, "ttl": 1500}))
                .collect(),
        )
        .await;
    let later: Vec<String> = env
        .push_batch(
            (0..60)
                .map(|i| json!({"topic": "lag", "body": format!("l{i}"), "delay": 12_000}))
                .collect(),
        )
        .await;
    let got = env.collect("lag", 60, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 60, "{got:?}");

    // The first master and its replica.
    let servers = cluster.status();
    let master = servers.iter().find(|s| s.role == "master").unwrap().n;
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut cluster.con(master))
        .unwrap();
    let replica_port: u16 = info
        .lines()
        .find_map(|l| l.strip_prefix("slave0:"))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("port=")))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no replica in {info}"));
    let replica = servers.iter().find(|s| s.port == replica_port).unwrap().n;
    let master_keys: i64 = redis::cmd("DBSIZE")
        .query(&mut cluster.con(master))
        .unwrap();
    assert!(master_keys > 0, "the first master holds no shard");

    // The replica hangs (SIGSTOP); its link is cut, so what the master
    // takes now never reaches it.
    cluster.pause(replica);
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut cluster.con(master))
        .unwrap();
    assert_eq!(killed, 1, "the replica's link");

    for id in &handed {
        env.ack(id).await.assert_ok();
    }
    let (cancelled, kept) = later.split_at(30);
    for id in cancelled {
        let r = env.delete(id).await;
        assert_eq!(r.assert_ok()["result"], "deleted", "{}", r.text);
    }
    env.wait_statuses(&handed, status::CONSUMED).await;
    env.wait_statuses(cancelled, status::DELETED).await;

    // The master dies; the replica resumes and takes over.
    cluster.kill(master);
    cluster.resume(replica);
    let _: redis::RedisResult<()> = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .arg("TAKEOVER")
        .query(&mut cluster.con(replica));
    cluster.wait_role(replica, "master");
    cluster.wait_ok();

    // The revived deliveries' ttl is over; the later ones fall due in a
    // few seconds: collect until 15 s after the push of the later ones.
    let mut seen: Vec<String> = Vec::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(8);
    while tokio::time::Instant::now() < until || seen.len() < kept.len() {
        if tokio::time::Instant::now() > until + Duration::from_secs(20) {
            break;
        }
        let r = env.get_path("/get/lag?timeout=1&count=100").await;
        if r.status != 200 {
            continue;
        }
        for m in r.json["messages"].as_array().unwrap() {
            let id = id_of(m).to_string();
            env.ack(&id).await;
            seen.push(id);
        }
    }
    let ended: HashSet<&String> = handed.iter().chain(cancelled).collect();
    let back: Vec<&String> = seen.iter().filter(|id| ended.contains(id)).collect();
    assert!(
        back.is_empty(),
        "{} messages acked or cancelled before the failover were handed out again: {back:?}",
        back.len()
    );
    let seen: HashSet<&String> = seen.iter().collect();
    let lost: Vec<&String> = kept.iter().filter(|id| !seen.contains(id)).collect();
    assert!(lost.is_empty(), "live messages never handed out: {lost:?}");
}

/// Redis's clock steps 3 s forward (an NTP step on its hosts, a switch to
/// a Redis whose clock is ahead) while the node runs: the node's estimate
/// follows within a probe, so a message pushed with a delay after that is
/// not handed out before its delay passed.
#[tokio::test(flavor = "multi_thread")]
async fn a_forward_step_of_redis_clock_makes_nothing_early() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = RedisCluster::start_skewable(dir.path());
    let env = Env::builder(Backend::Sqlite)
        .redis_url(&cluster.url)
        .start()
        .await;
    // The node's estimate settles on the masters' clocks.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for s in cluster.status() {
        cluster.skew_clock(s.n, 3_000);
    }
    // The shim reads the offset within a second.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    const DELAY: i64 = 5_000;
    let pushed_at = now_ms();
    let ids = env
        .push_batch(
            (0..200)
                .map(|i| json!({"topic": "step", "body": format!("{i}"), "delay": DELAY}))
                .collect(),
        )
        .await;
    let got = take_acking(&env, "step", ids.len(), Duration::from_secs(30)).await;
    assert_eq!(got.len(), ids.len(), "every message handed out");
    let early: Vec<i64> = got
        .iter()
        .filter(|(at, _)| *at < pushed_at + DELAY)
        .map(|(at, _)| pushed_at + DELAY - at)
        .collect();
    assert!(
        early.is_empty(),
        "{} of {} messages handed out before their delay passed, up to {} ms early",
        early.len(),
        got.len(),
        early.iter().max().unwrap_or(&0)
    );
}

/// Runs `cmd` on whichever of the masters holds its key.
fn on_key_master<T: redis::FromRedisValue>(
    masters: &mut [redis::Connection],
    cmd: &redis::Cmd,
) -> T {
    for con in masters.iter_mut() {
        if let Ok(v) = cmd.query(con) {
            return v;
        }
    }
    panic!("no master answered {cmd:?}");
}

/// Pauses and resumes of one topic sent at once, many times, on a Redis
/// Cluster (the paused topics' hash and the shards' sets in different
/// slots): every shard ends as the last word says, which is what
/// `GET /topics` shows.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_pauses_and_resumes_leave_every_shard_as_the_list_says() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = RedisCluster::start(dir.path());
    let env = Arc::new(
        Env::builder(Backend::Sqlite)
            .redis_url(&cluster.url)
            .start()
            .await,
    );
    let topic = "flip";
    let mut masters: Vec<redis::Connection> = cluster
        .status()
        .into_iter()
        .filter(|s| s.role == "master")
        .map(|s| cluster.con(s.n))
        .collect();
    for round in 0..20 {
        let mut tasks = Vec::new();
        for verb in ["pause", "resume", "pause", "resume"] {
            let env = env.clone();
            tasks.push(tokio::spawn(async move {
                env.post_json(&format!("/topics/{topic}/{verb}"), &json!({}))
                    .await
                    .assert_ok();
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let listed: bool = on_key_master(
            &mut masters,
            redis::cmd("HEXISTS")
                .arg(env.keys.paused_topics())
                .arg(topic),
        );
        for s in 0..env.keys.shards() {
            let held: bool = on_key_master(
                &mut masters,
                redis::cmd("SISMEMBER").arg(env.keys.paused(s)).arg(topic),
            );
            assert_eq!(
                held, listed,
                "round {round}: shard {s} paused {held} while the list says {listed}"
            );
        }
    }
}

/// The ids among `ids` whose shard lives on master `master`: a command on
/// the shard's keys answers there, another master's answers MOVED.
fn ids_on_master<'a>(
    cluster: &RedisCluster,
    master: usize,
    env: &Env,
    ids: &'a [String],
) -> HashSet<&'a String> {
    let mut con = cluster.con(master);
    ids.iter()
        .filter(|id| {
            let shard = env
                .keys
                .shard_of(delayq::message::MessageId(id.parse().unwrap()));
            redis::cmd("HEXISTS")
                .arg(env.keys.messages(shard))
                .arg(id.as_str())
                .query::<bool>(&mut con)
                .is_ok()
        })
        .collect()
}

/// One master hangs (SIGSTOP) while a batch nack spans every master: the
/// nack fails (the hung master's part never answers), but the calls that
/// ran on the other masters set retry times, and the journal records them
/// before the error is answered, so a message moved on in Redis is not
/// left Consuming in the journal (red with one master's failure
/// discarding every master's replies: all 60 stayed Consuming).
#[tokio::test(flavor = "multi_thread")]
async fn a_nack_failing_on_one_master_journals_what_ran_on_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = RedisCluster::start(dir.path());
    let env = Env::builder(Backend::Sqlite)
        .redis_url(&cluster.url)
        .start()
        .await;
    let ids = env
        .push_batch(
            (0..60)
                .map(
                    |i| json!({"topic": "nk", "body": format!("n{i}"), "delay": 0, "ttl": 120_000}),
                )
                .collect(),
        )
        .await;
    let mut got = 0;
    while got < ids.len() {
        let r = env.get_path("/get/nk?timeout=2&count=100").await;
        got += r.assert_ok()["messages"].as_array().unwrap().len();
    }
    env.wait_statuses(&ids, status::CONSUMING).await;

    let hung = cluster.masters_with_keys()[0];
    let on_hung = ids_on_master(&cluster, hung, &env, &ids);
    assert!(
        !on_hung.is_empty() && on_hung.len() < ids.len(),
        "{} of {} on the hung master",
        on_hung.len(),
        ids.len()
    );

    cluster.pause(hung);
    let r = env
        .post_json("/nack", &json!({"ids": ids, "delay": 60_000}))
        .await;
    cluster.resume(hung);
    assert_eq!(
        r.status, 503,
        "a nack that could not reach a master: {}",
        r.text
    );

    let elsewhere: Vec<String> = ids
        .iter()
        .filter(|id| !on_hung.contains(id))
        .cloned()
        .collect();
    let rows = env.journal.rows(&elsewhere);
    let consuming: Vec<i64> = rows
        .iter()
        .filter(|r| r.status != status::DELAYING)
        .map(|r| r.id)
        .collect();
    assert!(
        consuming.is_empty(),
        "{} of {} nacked on a master that answered are not Delaying in the journal: {consuming:?}",
        consuming.len(),
        elsewhere.len()
    );
}

/// One master hangs (SIGSTOP) while a bulk cancel spans every master: the
/// cancel fails (the hung master's part never answers), but the ids the
/// other masters cancelled are Deleted in the journal before the error is
/// answered, and a second cancel once the master is back finishes the
/// rest. Seen red with the shards' calls sent as one cluster pipeline:
/// the hung master's silence discarded every master's replies, and the
/// messages cancelled elsewhere stayed Delaying in the journal.
#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_failing_on_one_master_journals_what_ran_on_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = RedisCluster::start(dir.path());
    let env = Env::builder(Backend::Sqlite)
        .redis_url(&cluster.url)
        .start()
        .await;
    let ids = env
        .push_batch(
            (0..60)
                .map(|i| json!({"topic": "cx", "body": format!("c{i}"), "delay": 60_000}))
                .collect(),
        )
        .await;
    for id in &ids {
        env.wait_scheduled(id).await;
    }

    let hung = cluster.masters_with_keys()[0];
    let on_hung = ids_on_master(&cluster, hung, &env, &ids);
    assert!(
        !on_hung.is_empty() && on_hung.len() < ids.len(),
        "{} of {} on the hung master",
        on_hung.len(),
        ids.len()
    );

    cluster.pause(hung);
    let r = env.post_json("/cancel", &json!({ "ids": ids })).await;
    cluster.resume(hung);
    assert_eq!(
        r.status, 503,
        "a cancel that could not reach a master: {}",
        r.text
    );

    let elsewhere: Vec<String> = ids
        .iter()
        .filter(|id| !on_hung.contains(id))
        .cloned()
        .collect();
    let live: Vec<i64> = env
        .journal
        .rows(&elsewhere)
        .iter()
        .filter(|r| r.status != status::DELETED)
        .map(|r| r.id)
        .collect();
    assert!(
        live.is_empty(),
        "{} of {} cancelled on a master that answered are not Deleted in the journal: {live:?}",
        live.len(),
        elsewhere.len()
    );

    // Again, with every master answering: each one ends Deleted.
    let again = env.post_json("/cancel", &json!({ "ids": ids })).await;
    again.assert_ok();
    let rows = env.journal.rows(&ids);
    assert_eq!(rows.len(), ids.len());
    assert!(rows.iter().all(|r| r.status == status::DELETED));
}

//! Ordered groups: within a topic, one message of a group at a time is
//! handed out and not yet ended, cluster-wide, and the group's messages go
//! out in due order (priority, then id, among the same due time). A nack
//! or an expired ttl keeps the group's turn with that message; a dead,
//! cancelled or acked one passes it on, as does one moved to later.
//! `GET /topics` and the dashboard show the groups waiting.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::cluster::Cluster;
use crate::common::{now_ms, Backend, Env, RedisCluster};

backend_tests!(
    one_message_of_a_group_at_a_time_in_due_order,
    a_restore_brings_the_groups_back
);

/// What one poll of `topic` hands out now (a short long poll), by body.
async fn bodies(env: &Env, topic: &str, timeout_s: u64) -> Vec<(String, String)> {
    let mut got: Vec<(String, String)> = env
        .poll(topic, timeout_s, 100)
        .await
        .into_iter()
        .map(|r| {
            (
                r.msg["body"].as_str().unwrap().to_string(),
                r.id().to_string(),
            )
        })
        .collect();
    got.sort();
    got
}

fn names(got: &[(String, String)]) -> Vec<&str> {
    got.iter().map(|(b, _)| b.as_str()).collect()
}

/// The one message a poll brings (within 10 s), as (body, id).
async fn next(env: &Env, topic: &str) -> (String, String) {
    let got = env.receive_one(topic).await;
    (
        got.msg["body"].as_str().unwrap().to_string(),
        got.id().to_string(),
    )
}

async fn groups_of(env: &Env, topic: &str) -> Value {
    let list = env.get_path("/topics").await;
    let list = list.assert_ok();
    list["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic"] == topic)
        .map(|t| t["groups"].clone())
        .unwrap_or(Value::Null)
}

async fn one_message_of_a_group_at_a_time_in_due_order(b: Backend) {
    let env = Env::start(b).await;
    group_round(&env).await;
}

/// Two groups and a message of none, all due within a few ms: the first
/// poll brings each group's first and the free one; each ack brings the
/// group's next, at once.
async fn group_round(env: &Env) {
    // Group names with the record's separators in them.
    const A: &str = "a|ü,g3";
    const B: &str = "b~|{,g";
    let at = now_ms() + 400;
    let mut ids = HashMap::new();
    for (body, group, due, priority) in [
        ("a3", Some(A), at + 2, 0),
        ("a1", Some(A), at, 0),
        ("a2", Some(A), at + 1, 0),
        // Same due time: the higher priority first.
        ("b2", Some(B), at, 0),
        ("b1", Some(B), at, 9),
        ("free", None, at, 0),
    ] {
        let mut msg = json!({"topic": "gr", "body": body, "deliverAt": due, "priority": priority});
        if let Some(g) = group {
            msg["group"] = json!(g);
        }
        ids.insert(body, env.push(msg).await);
    }
    let first = env.message(&ids["a1"]).await;
    assert_eq!(first["message"]["group"], A, "{first}");
    let free = env.message(&ids["free"]).await;
    assert!(free["message"].get("group").is_none(), "{free}");

    tokio::time::sleep(Duration::from_millis(600)).await;
    let got = bodies(env, "gr", 3).await;
    assert_eq!(names(&got), ["a1", "b1", "free"], "{got:?}");
    // Nothing else of either group while those are out, however long.
    env.assert_nothing("gr", 1).await;
    assert_eq!(
        groups_of(env, "gr").await,
        json!({"active": 2, "waiting": 2, "held": 3})
    );
    // A message waiting behind its group reads as ready.
    assert_eq!(env.message(&ids["a3"]).await["message"]["status"], "Ready");

    env.ack(&ids["a1"]).await.assert_ok();
    assert_eq!(next(env, "gr").await.0, "a2");
    env.ack(&ids["b1"]).await.assert_ok();
    assert_eq!(next(env, "gr").await.0, "b2");
    env.ack(&ids["free"]).await.assert_ok();
    env.assert_nothing("gr", 1).await;
    env.ack(&ids["a2"]).await.assert_ok();
    assert_eq!(next(env, "gr").await.0, "a3");
    assert_eq!(
        groups_of(env, "gr").await,
        json!({"active": 2, "waiting": 0, "held": 0})
    );
    env.ack(&ids["b2"]).await.assert_ok();
    env.ack(&ids["a3"]).await.assert_ok();
    env.assert_nothing("gr", 1).await;
    assert_eq!(groups_of(env, "gr").await, Value::Null);
}

#[tokio::test(flavor = "multi_thread")]
async fn groups_work_on_a_redis_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = RedisCluster::start(dir.path());
    let env = Env::builder(Backend::Postgres)
        .redis_url(&cluster.url)
        .start()
        .await;
    for _ in 0..2 {
        group_round(&env).await;
    }
}

/// Its failed deliveries keep the turn with the message: after its ack
/// deadline passed it comes back (not the next one), and after a nack's
/// wait too.
#[tokio::test(flavor = "multi_thread")]
async fn a_nack_or_an_expired_ttl_keeps_the_turn() {
    let env = Env::start(Backend::Sqlite).await;
    let first = env
        .push(json!({"topic": "gk", "group": "g", "body": "m1", "ttl": 500}))
        .await;
    let second = env
        .push(json!({"topic": "gk", "group": "g", "body": "m2", "deliverAt": now_ms() + 50}))
        .await;
    assert_eq!(next(&env, "gk").await.1, first);
    // Not acked: its deadline passes, and it is handed out again.
    let again = env.collect("gk", 1, Duration::from_secs(5)).await;
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].id(), first);
    assert_eq!(again[0].msg["attempts"], 2, "{}", again[0].msg);
    // Nacked with a wait: nothing of the group until it is due again.
    env.send(env.http.post(env.url(&format!("/nack/{first}?delay=1500"))))
        .await
        .assert_ok();
    env.assert_nothing("gk", 1).await;
    assert_eq!(
        groups_of(&env, "gk").await,
        json!({"active": 1, "waiting": 1, "held": 1})
    );
    assert_eq!(next(&env, "gk").await.1, first);
    env.ack(&first).await.assert_ok();
    assert_eq!(next(&env, "gk").await.1, second);
    env.ack(&second).await.assert_ok();
}

/// A message waiting for its retry keeps its group's turn through a new
/// priority or a move earlier (only a move later gives it up).
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_wait_keeps_the_turn_through_a_new_priority_or_a_move_earlier() {
    let env = Env::start(Backend::Sqlite).await;
    let at = now_ms() + 200;
    let a = env
        .push(json!({"topic": "gw", "group": "g", "body": "a", "deliverAt": at}))
        .await;
    let b = env
        .push(json!({"topic": "gw", "group": "g", "body": "b", "deliverAt": at + 1}))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(next(&env, "gw").await.1, a);
    env.send(env.http.post(env.url(&format!("/nack/{a}?delay=60000"))))
        .await
        .assert_ok();
    env.post_json("/reschedule", &json!({"id": a, "priority": 7}))
        .await
        .assert_ok();
    env.post_json("/reschedule", &json!({"id": a, "delay": 1_500}))
        .await
        .assert_ok();
    env.assert_nothing("gw", 1).await;
    assert_eq!(next(&env, "gw").await.1, a);
    env.ack(&a).await.assert_ok();
    assert_eq!(next(&env, "gw").await.1, b);
    env.ack(&b).await.assert_ok();
}

/// A dead, cancelled or acked message passes the turn on; a cancelled
/// one waiting behind it leaves the line; one moved later gives up its
/// place, and the turn when it held it.
#[tokio::test(flavor = "multi_thread")]
async fn dead_cancelled_and_moved_messages_release_the_turn() {
    let env = Env::start(Backend::Sqlite).await;
    let at = now_ms() + 300;
    let mut ids = HashMap::new();
    for (i, body) in ["d1", "d2", "d3", "d4", "d5"].iter().enumerate() {
        let mut msg =
            json!({"topic": "gd", "group": "g", "body": body, "deliverAt": at + i as i64});
        if *body == "d1" {
            msg["maxAttempts"] = json!(1);
        }
        ids.insert(*body, env.push(msg).await);
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(next(&env, "gd").await.0, "d1");
    // Its one attempt failed: dead, and the next takes the turn.
    env.send(env.http.post(env.url(&format!("/nack/{}", ids["d1"]))))
        .await
        .assert_ok();
    assert_eq!(env.message(&ids["d1"]).await["message"]["status"], "Dead");
    assert_eq!(next(&env, "gd").await.0, "d2");
    // d3 waits behind d2: cancelled, it leaves the line.
    env.delete(&ids["d3"]).await.assert_ok();
    // d4 waits behind d2: moved a second later, it gives up its place.
    env.post_json(
        "/reschedule",
        &json!({"id": ids["d4"], "deliverAt": now_ms() + 1_000}),
    )
    .await
    .assert_ok();
    env.ack(&ids["d2"]).await.assert_ok();
    assert_eq!(next(&env, "gd").await.0, "d5");
    env.ack(&ids["d5"]).await.assert_ok();
    assert_eq!(next(&env, "gd").await.0, "d4");
    env.ack(&ids["d4"]).await.assert_ok();

    // The holder cancelled while ready (not handed out) passes the turn.
    let at = now_ms() + 200;
    let h1 = env
        .push(json!({"topic": "gd", "group": "h", "body": "h1", "deliverAt": at}))
        .await;
    let h2 = env
        .push(json!({"topic": "gd", "group": "h", "body": "h2", "deliverAt": at + 1}))
        .await;
    let h3 = env
        .push(json!({"topic": "gd", "group": "h", "body": "h3", "deliverAt": at + 2}))
        .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    env.delete(&h1).await.assert_ok();
    assert_eq!(next(&env, "gd").await.1, h2);
    // The holder in flight is not cancelled; moved while ready to later,
    // it gives up the turn (h2 acked first, so h3 holds it, unhanded).
    env.ack(&h2).await.assert_ok();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let h4 = env
        .push(json!({"topic": "gd", "group": "h", "body": "h4"}))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    env.post_json("/reschedule", &json!({"id": h3, "delay": 800}))
        .await
        .assert_ok();
    assert_eq!(next(&env, "gd").await.1, h4);
    env.ack(&h4).await.assert_ok();
    assert_eq!(next(&env, "gd").await.1, h3);
    env.ack(&h3).await.assert_ok();
    env.assert_nothing("gd", 1).await;
    assert_eq!(groups_of(&env, "gd").await, Value::Null);
}

async fn a_restore_brings_the_groups_back(b: Backend) {
    let env = Env::start(b).await;
    let at = now_ms() + 1_000;
    let first = env
        .push(json!({"topic": "gs", "group": "g", "body": "s1", "deliverAt": at}))
        .await;
    let second = env
        .push(json!({"topic": "gs", "group": "g", "body": "s2", "deliverAt": at + 1}))
        .await;
    env.wait_journaled().await;
    assert_eq!(
        env.journal.row(&first).unwrap().msg_group.as_deref(),
        Some("g")
    );
    // Redis loses everything it held; the journal brings it back, groups
    // and all.
    env.redis.wipe_schedule(&env.keys);
    let report = env.get_path("/reStore?expire=true").await;
    assert_eq!(report.assert_ok()["restored"], 2, "{}", report.text);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let got = bodies(&env, "gs", 3).await;
    assert_eq!(names(&got), ["s1"], "{got:?}");
    env.ack(&first).await.assert_ok();
    assert_eq!(next(&env, "gs").await.1, second);
    env.ack(&second).await.assert_ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_groups_are_refused_and_change_nothing() {
    let env = Env::start(Backend::Sqlite).await;
    let before = env.stored();
    for group in [json!(""), json!(7), json!("x".repeat(257)), json!(["a"])] {
        env.post_json(
            "/push",
            &json!({"topic": "gb", "body": "x", "group": group}),
        )
        .await
        .assert_error(400, "invalid_group");
        env.post_json(
            "/push/batch",
            &json!({"messages": [{"topic": "gb", "body": "x", "group": group}]}),
        )
        .await
        .assert_error(400, "invalid_group");
    }
    env.assert_unchanged(&before, "bad groups");
    // 256 characters (not bytes) is the most.
    env.push(json!({"topic": "gb", "body": "x", "group": "ü".repeat(256)}))
        .await;
}

/// One delivery as a consumer saw it: when the poll answered and when
/// its ack was sent (client clocks of one process: `Instant`s).
#[derive(Debug, Clone)]
struct Seen {
    id: String,
    group: String,
    got: Instant,
    done: Option<Instant>,
}

/// Two nodes sharing the shards, four consumers (two on each) polling
/// together, acking after a short while, nacking some: within each group
/// no delivery is handed out before the one before it was acked or
/// nacked, and the group's messages are first handed out in due order.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_consumers_on_two_nodes_never_hold_two_of_a_group() {
    let c = Arc::new(Cluster::builder().mode("multi-active").start().await);
    c.wait_scanners(&[0, 1], Duration::from_secs(30), |_| true)
        .await;
    c.wait_ready(0, Duration::from_secs(30)).await;
    c.wait_ready(1, Duration::from_secs(30)).await;
    const GROUPS: usize = 8;
    const EACH: usize = 10;
    let at = now_ms() + 1_500;
    // Due order per group: spread over 600 ms, some at one instant with
    // priorities, pushed out of order from both nodes.
    let mut due_order: BTreeMap<String, Vec<(i64, i64, String)>> = BTreeMap::new();
    let mut batches: [Vec<Value>; 2] = [Vec::new(), Vec::new()];
    for g in 0..GROUPS {
        for k in 0..EACH {
            let due = at + ((k * 7919 + g * 104729) % 600) as i64 / 3 * 3;
            let priority = ((k * 31 + g) % 4) as i64;
            let body = format!("g{g}-{k}");
            batches[(g + k) % 2].push(json!({"topic": "gc", "group": format!("g{g}"),
                "body": body, "deliverAt": due, "priority": priority, "ttl": 20_000}));
            due_order
                .entry(format!("g{g}"))
                .or_default()
                .push((due, -priority, body));
        }
    }
    let mut ids_by_body = HashMap::new();
    for (node, batch) in batches.iter().enumerate() {
        let ids = c.push_batch(node, batch.clone()).await;
        for (m, id) in batch.iter().zip(ids) {
            ids_by_body.insert(m["body"].as_str().unwrap().to_string(), id);
        }
    }
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let total = GROUPS * EACH;
    let acked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut consumers = Vec::new();
    for w in 0..4usize {
        let (c, seen, acked) = (c.clone(), seen.clone(), acked.clone());
        consumers.push(tokio::spawn(async move {
            let node = w % 2;
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut n = 0u64;
            while acked.load(std::sync::atomic::Ordering::SeqCst) < total
                && Instant::now() < deadline
            {
                let got = c.poll(node, "gc", 1, 3).await;
                let now = Instant::now();
                for r in got {
                    n += 1;
                    let i = {
                        let mut s = seen.lock().unwrap();
                        s.push(Seen {
                            id: r.id().to_string(),
                            group: r.msg["group"].as_str().unwrap().to_string(),
                            got: now,
                            done: None,
                        });
                        s.len() - 1
                    };
                    tokio::time::sleep(Duration::from_millis(n % 5 * 4)).await;
                    let done = Instant::now();
                    seen.lock().unwrap()[i].done = Some(done);
                    let path = if n % 7 == 3 {
                        format!("/nack/{}?delay=30", r.id())
                    } else {
                        format!("/ack/{}", r.id())
                    };
                    let reply = c.send(c.http.post(c.url(node, &path))).await;
                    assert_eq!(reply.status, 200, "{path}: {}", reply.text);
                    if path.starts_with("/ack") {
                        acked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            }
        }));
    }
    for t in consumers {
        t.await.unwrap();
    }
    assert_eq!(
        acked.load(std::sync::atomic::Ordering::SeqCst),
        total,
        "not every message was acked"
    );
    let seen = seen.lock().unwrap().clone();
    let body_of: HashMap<&str, &str> = ids_by_body
        .iter()
        .map(|(b, id)| (id.as_str(), b.as_str()))
        .collect();
    for (group, mut due) in due_order {
        let mut mine: Vec<&Seen> = seen.iter().filter(|s| s.group == group).collect();
        mine.sort_by_key(|s| s.got);
        // No delivery before the one before it ended.
        for w in mine.windows(2) {
            assert!(
                w[1].got >= w[0].done.unwrap(),
                "{group}: {} handed out while {} was still out",
                body_of[w[1].id.as_str()],
                body_of[w[0].id.as_str()]
            );
        }
        // First deliveries in due order (priority, then id, at one instant).
        due.sort_by(|a, b| (a.0, a.1, &ids_by_body[&a.2]).cmp(&(b.0, b.1, &ids_by_body[&b.2])));
        let mut firsts: Vec<&str> = Vec::new();
        for s in &mine {
            let body = body_of[s.id.as_str()];
            if !firsts.contains(&body) {
                firsts.push(body);
            }
        }
        let expected: Vec<&str> = due.iter().map(|d| d.2.as_str()).collect();
        assert_eq!(firsts, expected, "{group}: handed out out of due order");
    }
}

/// A group's messages are in its shard and a reshard keeps ids, so
/// `delayq reshard` refuses once the data set carried messages of ordered
/// groups (some may wait in the journal alone), changing nothing, unless
/// told `--split-groups`: then no message is left behind a turn no shard
/// passes on.
#[tokio::test(flavor = "multi_thread")]
async fn a_reshard_refuses_once_groups_were_used() {
    let mut env = Env::start(Backend::Sqlite).await;
    // Sixteen groups of two: the first of each out (acked after the
    // reshard), the second held behind it. Under 8 shards some firsts move
    // to another shard while their seconds stay (one group in four).
    const GROUPS: usize = 16;
    let mut firsts = Vec::new();
    let mut seconds = Vec::new();
    for g in 0..GROUPS {
        firsts.push(
            env.push(json!({"topic": "gz", "group": format!("g{g}"), "body": "first"}))
                .await,
        );
    }
    for g in 0..GROUPS {
        seconds.push(
            env.push(json!({"topic": "gz", "group": format!("g{g}"), "body": "second"}))
                .await,
        );
    }
    let out = env.collect("gz", GROUPS, Duration::from_secs(10)).await;
    let mut out: Vec<String> = out.iter().map(|r| r.id().to_string()).collect();
    out.sort();
    let mut expected = firsts.clone();
    expected.sort();
    assert_eq!(out, expected);
    env.assert_nothing("gz", 1).await;
    env.stop_server();
    let count_key = format!("{{{}}}:shards", env.config.key_prefix);
    let refused = env
        .tool(&["reshard", "--shards", "8", "--page", "7"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{err}");
    assert!(
        err.contains("ordered groups (32 in Redis now") && err.contains("--split-groups"),
        "{err}"
    );
    let (count, marker): (Option<String>, Option<String>) = redis::pipe()
        .get(&count_key)
        .get(format!("{{{}}}:resharding", env.config.key_prefix))
        .query(&mut env.redis.con())
        .unwrap();
    assert_eq!((count.as_deref(), marker), (Some("4"), None));
    let moved = env
        .tool(&["reshard", "--shards", "8", "--split-groups"])
        .output()
        .unwrap();
    assert!(
        moved.status.success(),
        "{}",
        String::from_utf8_lossy(&moved.stderr)
    );
    env.config
        .extra_args
        .extend(["--shards".to_string(), "8".to_string()]);
    env.keys = delayq::redis::keys::Keys::new(&env.config.key_prefix, 8);
    env.start_server().await;
    // No held one is left behind its former turn.
    for id in &firsts {
        env.ack(id).await.assert_ok();
    }
    let got = env.collect("gz", GROUPS, Duration::from_secs(10)).await;
    let mut got: Vec<String> = got.iter().map(|r| r.id().to_string()).collect();
    got.sort();
    seconds.sort();
    assert_eq!(got, seconds);
    for id in &seconds {
        env.ack(id).await.assert_ok();
    }
    env.stop_server();
    // Nothing of a group in Redis now, yet groups were used: refused.
    let refused = env.tool(&["reshard", "--shards", "4"]).output().unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && err.contains("ordered groups (0 in Redis now"),
        "{err}"
    );
}

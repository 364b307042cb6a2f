//! Promises that hold across a cluster: clocks that are off, a rebuilt
//! ZooKeeper, a node cut off from Redis, hand-offs and resumes that fail
//! half way, the session timeout ZooKeeper grants, two processes with one
//! node id.

use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::{now_ms, wait_every};
use serde_json::{json, Value};

/// The shards `GET /admin/cluster` (its answer `v`) says its node scans.
fn scanned_here(v: &Value) -> Vec<u64> {
    v["shards"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["scanningHere"] == json!(true))
        .map(|s| s["shard"].as_u64().unwrap())
        .collect()
}

/// The active node's wall clock runs 5 s ahead and the standby's 5 s
/// behind; messages pushed through the standby with an 8 s delay are
/// handed out no earlier than 8 s after their push by the test's clock
/// (Redis's, on this machine), however the nodes' clocks disagree. Each
/// node reports its offset from Redis's clock.
#[tokio::test(flavor = "multi_thread")]
async fn never_early_when_the_nodes_clocks_are_off() {
    let c = Cluster::builder()
        .skew_clock(0, "+5s")
        .skew_clock(1, "-5s")
        .start()
        .await;
    for i in 0..2 {
        c.wait_ready(i, Duration::from_secs(30)).await;
    }
    let leader = c.wait_leader(0, Duration::from_secs(30)).await;
    let standby = 1 - Cluster::index_of(&leader);
    let messages: Vec<Value> = (0..50)
        .map(|n| json!({"topic": "skew", "delay": 8_000, "body": format!("{n}")}))
        .collect();
    let pushed_at = now_ms();
    let ids = c.push_batch(standby, messages).await;
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    while got.len() < ids.len() && Instant::now() < deadline {
        for r in c.poll(standby, "skew", 2, 100).await {
            c.ack(standby, r.id()).await.assert_ok();
            got.push(r);
        }
    }
    assert_eq!(got.len(), ids.len(), "every message delivered");
    for r in &got {
        let due = r.msg["dueTime"].as_i64().unwrap();
        assert!(
            due >= pushed_at + 8_000,
            "due {} ms after the push began: the pushing node's clock made it early",
            due - pushed_at
        );
        assert!(
            r.at >= pushed_at + 8_000,
            "handed out {} ms after the push began, before its 8 s delay",
            r.at - pushed_at
        );
        assert!(
            r.at >= due,
            "handed out {} ms before its due time",
            due - r.at
        );
    }
    // Each node knows how far off its clock is.
    for (i, want) in [(0, -5_000), (1, 5_000)] {
        let clock = c.admin(i).await["clock"].clone();
        let off = clock["offsetMs"].as_i64().unwrap();
        assert!(
            (want - 1_000..=want + 1_000).contains(&off),
            "node {i}: {clock}"
        );
        assert_eq!(clock["skewed"], json!(true), "node {i}: {clock}");
        let metrics = c.get(i, "/metrics").await.text;
        let line = metrics
            .lines()
            .find(|l| l.starts_with("delayq_clock_offset_seconds"))
            .unwrap_or_else(|| panic!("no clock offset in /metrics of node {i}"));
        let secs: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!((secs * 1000.0 - want as f64).abs() < 1_000.0, "{line}");
    }
}

/// A ZooKeeper ensemble rebuilt (or restored from an older snapshot) under
/// a running Redis hands out zxids below the epochs Redis keeps. Modelled
/// by raising every stored epoch far above any zxid before the node starts:
/// the owner takes its shards past the stored epochs and delivers; it
/// stays ready and logs the takeover a few times, not in a loop.
#[tokio::test(flavor = "multi_thread")]
async fn a_rebuilt_zookeeper_does_not_stall_the_shards() {
    let mut c = Cluster::builder().nodes(1).start().await;
    c.stop(0);
    let far = 1_000_000_000_000_000i64;
    {
        let mut con = c.redis.con();
        for s in 0..c.keys.shards() {
            let _: () = redis::cmd("SET")
                .arg(c.keys.epoch(s))
                .arg(far)
                .query(&mut con)
                .unwrap();
        }
    }
    c.start_node(0).await;
    c.wait_ready(0, Duration::from_secs(30)).await;
    let messages: Vec<Value> = (0..40)
        .map(|n| json!({"topic": "rebuilt", "delay": 500, "body": format!("{n}")}))
        .collect();
    let ids = c.push_batch(0, messages).await;
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(25);
    while got < ids.len() && Instant::now() < deadline {
        let list = c.poll(0, "rebuilt", 2, 100).await;
        for r in &list {
            c.ack(0, r.id()).await.assert_ok();
        }
        got += list.len();
        let ready = c.get(0, "/ready").await;
        assert_eq!(ready.status, 200, "the node stays ready: {}", ready.text);
    }
    assert_eq!(got, ids.len(), "every message delivered");
    let admin = c.admin(0).await;
    for shard in admin["shards"].as_array().unwrap() {
        assert!(
            shard["epoch"].as_i64().unwrap() > far,
            "each shard was taken past the stored epoch: {shard}"
        );
        assert_eq!(shard["scanningHere"], json!(true), "{shard}");
    }
    let metrics = c.get(0, "/metrics").await.text;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("delayq_shard_scan_refused_total{") && !l.ends_with(" 0")),
        "refused scans are counted"
    );
    let log = std::fs::read_to_string(&c.node(0).log).unwrap();
    let refused = log.matches("higher epoch for this shard").count();
    assert!(
        (1..=3 * c.keys.shards() as usize).contains(&refused),
        "{refused} lines about refused scans: logged a few times, not in a loop"
    );
}

/// A node that reaches ZooKeeper but not Redis scans nothing; it must not
/// keep its shards from the others. Node 0 reaches Redis through a proxy
/// that is cut: within about the session timeout it leaves the membership,
/// node 1 takes every shard and delivers everything pushed meanwhile;
/// healed, node 0 rejoins.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_cannot_reach_redis_gives_up_its_shards() {
    let mut c = Cluster::builder().mode("multi-active").start().await;
    let proxy = crate::common::proxy::Proxy::start(c.redis.port);
    c.stop(0);
    c.set_redis_url(0, &format!("redis://127.0.0.1:{}/0", proxy.port));
    c.start_node(0).await;
    let every = Duration::from_millis(200);
    wait_every(
        "node 0 to take a shard",
        Duration::from_secs(30),
        every,
        || async { (!scanned_here(&c.admin(0).await).is_empty()).then_some(()) },
    )
    .await;
    proxy.cut();
    let cut_at = Instant::now();
    let messages: Vec<Value> = (0..40)
        .map(|n| json!({"topic": "partition", "delay": 500, "body": format!("{n}")}))
        .collect();
    let ids = c.push_batch(1, messages).await;
    let mut got = std::collections::HashSet::new();
    let deadline = Instant::now() + c.session() + Duration::from_secs(20);
    while got.len() < ids.len() && Instant::now() < deadline {
        for r in c.poll(1, "partition", 2, 100).await {
            c.ack(1, r.id()).await.assert_ok();
            got.insert(r.id().to_string());
        }
    }
    assert_eq!(
        got.len(),
        ids.len(),
        "every message delivered by node 1; node 0:\n{}\nnode 1:\n{}",
        c.node(0).log_tail(40),
        c.node(1).log_tail(40)
    );
    eprintln!(
        "node 0 cut off from Redis: all delivered {:?} after the cut",
        cut_at.elapsed()
    );
    assert_eq!(
        scanned_here(&c.admin(1).await).len(),
        c.keys.shards() as usize,
        "node 1 scans every shard"
    );
    proxy.heal();
    let every = Duration::from_millis(200);
    wait_every(
        "node 0 to rejoin",
        Duration::from_secs(30),
        every,
        || async {
            let nodes = c.admin(1).await["nodes"].clone();
            let back = nodes
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n["id"] == json!("node-0"));
            if back {
                Ok(())
            } else {
                Err(nodes)
            }
        },
    )
    .await;
}

/// A hand-off whose owner-node delete fails once (a ZooKeeper error at that
/// moment) is retried, so the shard is not orphaned: its new owner takes it.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_owner_delete_in_a_hand_off_does_not_orphan_the_shard() {
    let mut c = Cluster::builder().mode("multi-active").start().await;
    c.stop(0);
    c.set_env(0, "DELAYQ_FAULTS", "zk_delete_owner_fails");
    c.start_node(0).await;
    let every = Duration::from_millis(200);
    let shard = wait_every(
        "node 0 to take a shard",
        Duration::from_secs(30),
        every,
        || async { scanned_here(&c.admin(0).await).first().copied() },
    )
    .await;
    c.post(
        0,
        &format!("/admin/shards/{shard}/move?to=node-1"),
        &json!({}),
    )
    .await
    .assert_ok();
    // Giving up, the nodes' logs are printed as they stop.
    let what = format!("node 1 to take shard {shard} after a failed delete (not orphaned)");
    wait_every(&what, Duration::from_secs(15), every, || async {
        scanned_here(&c.admin(1).await)
            .contains(&shard)
            .then_some(())
    })
    .await;
    let log = std::fs::read_to_string(&c.node(0).log).unwrap();
    assert!(
        log.contains("cannot delete the shard's owner node; trying again"),
        "the delete failed once"
    );
}

/// A resume after a reconnection that fails midway (the connection lost
/// again, a check that timed out) leaves no shard scanned by no one. Node
/// 0 loses ZooKeeper for a moment (its session lives on); meanwhile its
/// shards move to node 1; its first resume fails at its second shard.
/// Node 1 takes every shard and delivers what is pushed. (Before, the
/// shards not checked yet were dropped while node 0's session kept their
/// owner nodes, and node 0 stayed paused until a next "connected" event.)
#[tokio::test(flavor = "multi_thread")]
async fn a_resume_failing_midway_leaves_no_shard_unscanned() {
    let mut c = Cluster::builder()
        .mode("multi-active")
        .proxied()
        .session_ms(8_000)
        .start()
        .await;
    c.stop(0);
    c.set_env(0, "DELAYQ_FAULTS", "zk_resume_check_fails");
    c.start_node(0).await;
    let every = Duration::from_millis(200);
    let mine = wait_every(
        "node 0 to take two shards",
        Duration::from_secs(30),
        every,
        || async {
            let s = scanned_here(&c.admin(0).await);
            (s.len() >= 2).then_some(s)
        },
    )
    .await;
    for p in &c.links[0].zookeeper {
        p.cut();
    }
    wait_every(
        "node 0 to see its ZooKeeper connection lost",
        Duration::from_secs(10),
        every,
        || async {
            let a = c.admin(0).await;
            (a["session"] == json!("disconnected")).then_some(())
        },
    )
    .await;
    for shard in &mine {
        c.post(
            1,
            &format!("/admin/shards/{shard}/move?to=node-1"),
            &json!({}),
        )
        .await
        .assert_ok();
    }
    for p in &c.links[0].zookeeper {
        p.heal();
    }
    let shards = c.keys.shards() as usize;
    wait_every(
        "node 1 to scan every shard, node 0's included",
        Duration::from_secs(20),
        every,
        || async {
            let (zero, one) = (
                scanned_here(&c.admin(0).await),
                scanned_here(&c.admin(1).await),
            );
            if one.len() == shards && zero.is_empty() {
                Ok(())
            } else {
                Err(format!("node 0 scans {zero:?}, node 1 scans {one:?}"))
            }
        },
    )
    .await;
    let log = std::fs::read_to_string(&c.node(0).log).unwrap();
    assert!(
        log.contains("cannot resume after reconnecting"),
        "the resume failed once: {}",
        c.node(0).log_tail(30)
    );
    let messages: Vec<Value> = (0..40)
        .map(|n| json!({"topic": "resumed", "delay": 300, "body": format!("{n}")}))
        .collect();
    let ids = c.push_batch(1, messages).await;
    let mut got = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < ids.len() && Instant::now() < deadline {
        for r in c.poll(1, "resumed", 2, 100).await {
            c.ack(1, r.id()).await.assert_ok();
            got.insert(r.id().to_string());
        }
    }
    assert_eq!(got.len(), ids.len(), "every message delivered");
}

/// The ZooKeeper servers grant at most 40 ticks of session (`cluster/zk`),
/// whatever a node asks for: a node asking for 30 s of an ensemble ticking
/// every 100 ms gets 4 s, and its scan permit is a third of those 4 s, not of the 30 s
/// it asked for (a permit longer than the session would let a frozen node
/// scan on after its session expired and its shards moved).
#[tokio::test(flavor = "multi_thread")]
async fn the_permit_follows_the_granted_session_timeout() {
    let c = Cluster::builder()
        .nodes(1)
        .zk_tick_ms(100)
        .session_ms(30_000)
        .start()
        .await;
    c.wait_ready(0, Duration::from_secs(30)).await;
    let a = c.admin(0).await;
    assert_eq!(a["sessionTimeoutMs"], json!(4_000), "granted: {a}");
    let permit = a["permitMs"].as_u64().unwrap_or_else(|| panic!("{a}"));
    assert!(
        (1_000..=4_000 / 3).contains(&permit),
        "a permit of {permit} ms outlasts a third of the granted 4 s session"
    );
}

/// A second process started under a live node's id (or a restart before
/// the old session expired) never deletes the live session's registration
/// or owner nodes: it waits, and the live node keeps its shards.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_process_with_the_same_node_id_waits() {
    let c = Cluster::builder().nodes(1).start().await;
    c.wait_ready(0, Duration::from_secs(30)).await;
    let all = c.keys.shards() as usize;
    let every = Duration::from_millis(200);
    wait_every(
        "node 0 to take every shard",
        Duration::from_secs(30),
        every,
        || async { (scanned_here(&c.admin(0).await).len() == all).then_some(()) },
    )
    .await;
    // node-0 pauses (shorter than its session); a twin starts meanwhile.
    c.node(0).signal("STOP");
    let twin = c.start_twin(0).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    c.node(0).signal("CONT");
    tokio::time::sleep(c.session() + Duration::from_secs(2)).await;
    let admin = c.admin(0).await;
    assert_eq!(admin["session"], json!("connected"), "{admin}");
    assert_eq!(
        scanned_here(&admin).len(),
        all,
        "the live node kept its shards: {admin}"
    );
    let twin_admin = c
        .send(
            c.http
                .get(format!("http://127.0.0.1:{}/admin/cluster", twin.port)),
        )
        .await;
    assert!(
        scanned_here(&twin_admin.json).is_empty(),
        "the twin took nothing: {}",
        twin_admin.text
    );
    let ready = c
        .send(c.http.get(format!("http://127.0.0.1:{}/ready", twin.port)))
        .await;
    assert_eq!(ready.status, 503, "the twin is not ready: {}", ready.text);
    let log = std::fs::read_to_string(&twin.log).unwrap();
    assert!(log.contains("another session holds this node id's registration"));
}

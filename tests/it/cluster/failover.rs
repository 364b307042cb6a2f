//! Failover: the active node killed (SIGKILL) or paused (SIGSTOP),
//! ZooKeeper servers paused, killed and their leader lost.

use super::*;

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
    let every = Duration::from_millis(100);
    let what = "the standby to see the leader";
    let admin = wait_every(what, Duration::from_secs(30), every, || async {
        let admin = c.admin(standby).await;
        if admin["leader"] == owners[0].as_str() && admin["nodes"].as_array().unwrap().len() == 2 {
            Ok(admin)
        } else {
            Err(admin)
        }
    })
    .await;
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
    // Messages falling due after the kill had to be moved by the new
    // owner: the standby delivered them (how soon is a figure for the
    // benchmark, printed, not asserted: a loaded machine varies).
    let first_after = got
        .values()
        .flatten()
        .filter(|(r, _)| r.msg["dueTime"].as_i64().unwrap() > killed_at)
        .map(|(r, _)| r.at)
        .min()
        .expect("the standby delivered messages falling due after the kill");
    eprintln!(
        "failover: first delivery by the standby {} ms after kill -9 (session timeout {} ms)",
        first_after - killed_at,
        c.session_ms
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

/// Which of the two fences is left to stop a paused old owner.
#[derive(Clone, Copy, PartialEq)]
enum Fence {
    /// The ZooKeeper permit: Redis loses the epoch keys while the owner is
    /// paused, so its own (older) epoch would pass.
    Permit,
    /// The epoch in Redis: the nodes run with the fault `ignore_permit`, so
    /// the old owner scans as soon as it resumes.
    Epoch,
}

/// The owner paused (SIGSTOP) past its session; the standby takes every
/// shard and is given work, then is paused itself (well within its
/// session) while that work falls due, so the old owner, resumed, finds it
/// waiting. It moves nothing from then until it has rejoined as the
/// standby, and what was pushed is delivered once.
async fn a_paused_owner_is_fenced(fence: Fence) {
    // Sessions of 6 s: the standby's pause below stays far inside one.
    let mut b = Cluster::builder().session_ms(6_000);
    if fence == Fence::Epoch {
        b = b.env_all("DELAYQ_FAULTS", "ignore_permit");
    }
    let c = b.start().await;
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

    // Work for the paused node to steal, due while both are paused.
    let topic = format!("fe{}", random_hex(6));
    let pushed_at = now_ms();
    let ids = c.push_batch(standby, messages(&topic, 30, 300, 25)).await;
    if fence == Fence::Permit {
        let mut con = c.redis.con();
        for s in 0..c.keys.shards() {
            let _: () = redis::cmd("DEL")
                .arg(c.keys.epoch(s))
                .query(&mut con)
                .unwrap();
        }
    }
    c.node(standby).signal("STOP");
    sleep_until_ms(pushed_at + 1_100).await;
    let resumed_at = now_ms();
    c.node(active).signal("CONT");
    tokio::time::sleep(Duration::from_secs(1)).await;
    c.node(standby).signal("CONT");

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

    // It rejoins as a standby; until then (the whole time it could have
    // stolen work) it moved nothing.
    let every = Duration::from_millis(200);
    let what = "the old owner to rejoin as standby";
    let a = wait_every(what, Duration::from_secs(30), every, || async {
        let a = c.admin(active).await;
        if a["session"] == "connected"
            && a["leader"] == Cluster::node_name(standby)
            && a["inGoodStanding"] == true
        {
            Ok(a)
        } else {
            Err(a)
        }
    })
    .await;
    assert_eq!(
        c.journal.flow_rows_by(&old_name, status::READY, resumed_at),
        0,
        "the paused old owner moved messages after it resumed"
    );
    assert!(
        a["shards"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["scanningHere"] == false),
        "{a}"
    );
    assert_eq!(c.admin(standby).await["nodes"].as_array().unwrap().len(), 2);
    if fence == Fence::Epoch {
        // It did scan, and the epoch stopped it.
        let log = c.node(active).log_tail(2_000);
        assert!(
            log.contains("Redis holds a higher epoch for this shard"),
            "the resumed old owner never scanned into the epoch"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_owner_is_fenced_by_the_permit_alone() {
    a_paused_owner_is_fenced(Fence::Permit).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_owner_is_fenced_by_the_epoch_alone() {
    a_paused_owner_is_fenced(Fence::Epoch).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn zookeeper_blip_and_outage() {
    // Sessions of 9 s: a node's permit lasts a third (3 s), pings go every
    // third. A blip of 4 s outlasts the permit, and with the last ping up
    // to 3 s before it, leaves 2 s for the clients to reconnect (and the
    // ensemble to elect a leader among its servers) before a session
    // could expire.
    let c = Cluster::builder().session_ms(9_000).start().await;
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

    // A blip shorter than the session: the owner's scans wait (it says so)
    // and resume, what fell due meanwhile is delivered, none early, and
    // nothing is handed off (same owner nodes, same epochs).
    for n in 1..=3 {
        c.zk.pause(n);
    }
    let paused_at = now_ms();
    // Due after the permit lapsed (it was last confirmed before the blip).
    let topic = format!("zb{}", random_hex(6));
    let during: HashSet<String> = c
        .push_batch(active, messages(&topic, 20, 3_300, 20))
        .await
        .into_iter()
        .collect();
    sleep_until_ms(paused_at + 4_000).await;
    for n in 1..=3 {
        c.zk.resume(n);
    }
    for i in 0..2 {
        c.wait_ready(i, Duration::from_secs(20)).await;
    }
    let got = drain(
        &c.http,
        &[c.port(active)],
        &topic,
        &during,
        Duration::from_secs(20),
    )
    .await;
    assert_delivered(&got, &during);
    let log = c.node(active).log_tail(5_000);
    assert!(
        log.contains("membership not confirmed lately; the scan waits for ZooKeeper"),
        "the owner never noticed the blip"
    );
    assert!(
        log.contains("membership confirmed; scanning again"),
        "the owner never resumed its scans"
    );
    let owners_after = c
        .wait_scanners(&[0, 1], Duration::from_secs(20), |_| true)
        .await;
    assert_eq!(owners_after, owners, "a blip handed shards off");
    // Its scans may still be coming back on a loaded machine (no epoch
    // shown while it waits for ZooKeeper): read them once they are.
    let mut after = epochs(&c.admin(active).await);
    let back = std::time::Instant::now() + Duration::from_secs(20);
    while after.iter().any(Value::is_null) && std::time::Instant::now() < back {
        tokio::time::sleep(Duration::from_millis(200)).await;
        after = epochs(&c.admin(active).await);
    }
    assert_eq!(after, before, "a blip changed the owners' epochs");

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
    let what = "a push accepted after the ZooKeeper leader died";
    let every = Duration::from_millis(200);
    let ids2 = wait_every(what, Duration::from_secs(20), every, || async {
        let r = c
            .post(
                1,
                "/push/batch",
                &json!({"messages": messages(&topic, 60, 500, 50)}),
            )
            .await;
        if r.status == 200 {
            return Some(
                r.json["ids"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect::<Vec<_>>(),
            );
        }
        r.assert_error(503, "node_unavailable");
        None
    })
    .await;
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

/// Redis loses everything (FLUSHALL) under a running multi-active cluster:
/// the leader alone rebuilds it from the journal (the data set marker it
/// sets names it); the other node leaves it alone even while the leader is
/// paused and the marker is missing; every message is delivered once, none
/// early.
#[tokio::test(flavor = "multi_thread")]
async fn a_flushed_redis_is_restored_by_the_leader_alone() {
    // Sessions of 6 s: the leader's pause below stays far inside one.
    let c = Cluster::builder()
        .mode("multi-active")
        .session_ms(6_000)
        .start()
        .await;
    c.wait_scanners(&[0, 1], Duration::from_secs(30), |_| true)
        .await;
    let every = Duration::from_millis(100);
    let what = "both nodes to see the same leader";
    let leader_name = wait_every(what, Duration::from_secs(30), every, || async {
        let (a, b) = (c.admin(0).await, c.admin(1).await);
        match (a["leader"].as_str(), b["leader"].as_str()) {
            (Some(x), Some(y)) if x == y => Ok(x.to_string()),
            _ => Err(format!("{} / {}", a["leader"], b["leader"])),
        }
    })
    .await;
    let leader = Cluster::index_of(&leader_name);
    let other = 1 - leader;

    let topic = format!("fl{}", random_hex(6));
    let mut ids = c.push_batch(0, messages(&topic, 100, 5_000, 20)).await;
    ids.extend(c.push_batch(1, messages(&topic, 100, 5_000, 20)).await);
    let marker = c.keys.dataset_marker();
    let marker_holder = || -> Option<String> {
        redis::cmd("GET")
            .arg(&marker)
            .query(&mut c.redis.con())
            .unwrap()
    };
    let what = "the leader to set the data set marker";
    wait_every(what, Duration::from_secs(10), every, || async {
        marker_holder().ok_or("no marker yet")
    })
    .await;

    // The leader paused, Redis flushed: the other node checks the marker
    // each second and must not restore.
    c.node(leader).signal("STOP");
    c.redis.flushall();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let held = marker_holder();
    c.node(leader).signal("CONT");
    assert_eq!(held, None, "a node that does not lead restored Redis");

    let what = "the leader to restore Redis";
    let holder = wait_every(what, Duration::from_secs(20), every, || async {
        marker_holder().ok_or("no marker yet")
    })
    .await;
    assert_eq!(
        holder, leader_name,
        "the data set marker names who restored"
    );

    let expected: HashSet<String> = ids.into_iter().collect();
    let ports = [c.port(0), c.port(1)];
    let got = drain(&c.http, &ports, &topic, &expected, Duration::from_secs(30)).await;
    assert_delivered(&got, &expected);
    assert!(
        got.values().all(|d| d.len() == 1),
        "a message was delivered twice"
    );
    let restored = "Redis held no delayq data set; restored it from the journal";
    assert!(c.node(leader).log_tail(5_000).contains(restored));
    assert!(!c.node(other).log_tail(5_000).contains(restored));
}

/// Messages waiting in the journal beyond the horizon when the active node
/// is killed: the standby, taking the shards, takes their loading too, and
/// each is delivered once and never early.
#[tokio::test(flavor = "multi_thread")]
async fn waiting_messages_move_with_the_shards() {
    let mut c = Cluster::builder()
        .arg("--redis-horizon")
        .arg("3s")
        .start()
        .await;
    let owners = c
        .wait_scanners(&[0, 1], Duration::from_secs(30), |_| true)
        .await;
    let active = Cluster::index_of(&owners[0]);
    let standby = 1 - active;
    for i in [active, standby] {
        c.wait_ready(i, Duration::from_secs(30)).await;
    }
    let topic = format!("hz{}", random_hex(6));
    // Due 12 to 16 s from now: loaded no sooner than 9 s from now, well
    // after the kill, so the standby must load every one.
    let mut ids = c
        .push_batch(active, messages(&topic, 40, 12_000, 100))
        .await;
    ids.extend(
        c.push_batch(standby, messages(&topic, 40, 12_050, 100))
            .await,
    );
    c.kill9(active);

    let expected: HashSet<String> = ids.into_iter().collect();
    let ports = [c.port(standby)];
    let got = drain(&c.http, &ports, &topic, &expected, Duration::from_secs(40)).await;
    assert_delivered(&got, &expected);
    let twice: Vec<&String> = got
        .iter()
        .filter(|(_, d)| d.len() > 1)
        .map(|(id, _)| id)
        .collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
}

/// The leader replaying the journal spill is paused past its replay lock;
/// the other node leads and replays meanwhile, and the paused one resumes
/// mid-page and dies soon after. A replay that lost the lock must not
/// remove a page (it may be the page the other is writing, and the other
/// then removes one the dead node took and never wrote), and the one
/// replaying renews the lock through slow pages: every spilled change
/// reaches the journal.
#[tokio::test(flavor = "multi_thread")]
async fn a_spill_replay_paused_past_its_lock_drops_no_page() {
    let mut c = Cluster::builder()
        .env_all(
            "DELAYQ_FAULTS",
            "spill_lock_ms=1000,spill_page=10,spill_page_slow=1500",
        )
        .start()
        .await;
    let every = Duration::from_millis(100);
    let what = "both nodes to see the same leader";
    let leader_name = wait_every(what, Duration::from_secs(30), every, || async {
        let (a, b) = (c.admin(0).await, c.admin(1).await);
        match (a["leader"].as_str(), b["leader"].as_str()) {
            (Some(x), Some(y)) if x == y => Ok(x.to_string()),
            _ => Err(format!("{} / {}", a["leader"], b["leader"])),
        }
    })
    .await;
    let leader = Cluster::index_of(&leader_name);
    let other = 1 - leader;

    // Changes a stopped node kept in Redis: Ready, for messages due in an
    // hour (nothing else makes them Ready), six pages of ten.
    let topic = format!("sp{}", random_hex(6));
    let ids = c.push_batch(0, messages(&topic, 60, 3_600_000, 10)).await;
    let lines: Vec<String> = ids
        .iter()
        .map(|id| {
            json!({"id": id, "status": status::READY, "attempts": null, "at": now_ms(),
                   "due": null, "shard": "spill-test"})
            .to_string()
        })
        .collect();
    let key = c.keys.journal_spill();
    let lock = format!("{key}:lock");
    let holder = |c: &Cluster| -> Option<String> {
        redis::cmd("GET")
            .arg(&lock)
            .query(&mut c.redis.con())
            .unwrap()
    };
    let _: () = redis::cmd("RPUSH")
        .arg(&key)
        .arg(&lines)
        .query(&mut c.redis.con())
        .unwrap();

    // The leader replays: paused mid-page, past its lock.
    let what = "the leader to take the replay lock";
    wait_every(
        what,
        Duration::from_secs(10),
        Duration::from_millis(20),
        || async { (holder(&c).as_deref() == Some(leader_name.as_str())).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    c.node(leader).signal("STOP");
    let other_name = Cluster::node_name(other);
    let what = "the other node to take the replay lock";
    wait_every(what, c.session() * 3, Duration::from_millis(20), || async {
        (holder(&c).as_deref() == Some(other_name.as_str())).then_some(())
    })
    .await;
    // Mid-page of the other's replay, the paused one resumes.
    tokio::time::sleep(Duration::from_millis(600)).await;
    c.node(leader).signal("CONT");
    // It dies soon after: a page it took is never written by it.
    tokio::time::sleep(Duration::from_millis(400)).await;
    c.kill9(leader);

    let what = "the spill list to empty";
    wait_every(
        what,
        Duration::from_secs(60),
        Duration::from_millis(300),
        || async {
            let left: i64 = redis::cmd("LLEN")
                .arg(&key)
                .query(&mut c.redis.con())
                .unwrap();
            (left == 0)
                .then_some(())
                .ok_or(format!("{left} changes still in Redis"))
        },
    )
    .await;
    let what = "every spilled change in the journal";
    wait_every(
        what,
        Duration::from_secs(5),
        Duration::from_millis(300),
        || async {
            let missing = ids
                .iter()
                .filter(|id| !c.journal.flow_codes(id).contains(&status::READY))
                .count();
            (missing == 0).then_some(()).ok_or(format!(
                "the list is empty but {missing} of {} spilled changes never reached the journal",
                ids.len()
            ))
        },
    )
    .await;
    c.stop(other);
}

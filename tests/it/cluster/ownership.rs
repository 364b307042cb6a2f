//! Shard ownership: multi-active spread and rebalance under load, wake-ups
//! across nodes behind nginx, one id for a bizKey pushed to two nodes.

use super::*;

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
async fn nginx_round_robin_and_wake_ups_across_nodes() {
    let mut c = Cluster::builder().start().await;
    let owners = c
        .wait_scanners(&[0, 1], Duration::from_secs(30), |_| true)
        .await;
    let owner = Cluster::index_of(&owners[0]);
    let other = 1 - owner;
    let front = c.start_nginx(&[0, 1]);

    // Through nginx: pushes alternate between the nodes; all delivered once.
    // On a loaded machine cluster/nginx-watch may take a node out of
    // rotation for a second when its /ready is slow: push while both are in
    // rotation, and go on (a bounded number of pushes) until both nodes
    // have taken some.
    let nginx = c.nginx.as_ref().unwrap();
    nginx.wait_all_in_rotation(Duration::from_secs(20)).await;
    let topic = format!("ng{}", random_hex(6));
    let mut ids = HashSet::new();
    let mut workers = BTreeSet::new();
    let mut i = 0;
    while i < 100 || (workers.len() < 2 && i < 400) {
        let r = c
            .http
            .post(format!("http://127.0.0.1:{front}/push"))
            .json(&json!({"topic": topic, "body": format!("n{i}"), "delay": 300 + (i % 100) * 7}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        let id = v["id"].as_str().unwrap().to_string();
        workers.insert((id.parse::<i64>().unwrap() >> 12) & 1023);
        ids.insert(id);
        i += 1;
        if i % 50 == 0 {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let got = drain(&c.http, &[front], &topic, &ids, Duration::from_secs(30)).await;
    assert_delivered(&got, &ids);
    assert!(
        got.values().all(|d| d.len() == 1),
        "a message was delivered twice"
    );
    assert_eq!(
        workers.len(),
        2,
        "both nodes took pushes (and have their own worker ids); out of rotation now: {:?}",
        nginx.out_of_rotation()
    );

    // A message pushed to the node that does not own its shard, while the
    // owner sleeps, is delivered on time to a consumer on that same
    // non-owner: the owner is woken over Redis, and so is the consumer.
    let mut lateness = Vec::new();
    for i in 0..8 {
        let t = format!("{topic}w{i}");
        tokio::time::sleep(Duration::from_millis(300 + jitter_ms(1_000))).await;
        let id = c
            .push(other, json!({"topic": t, "body": "w", "delay": 400}))
            .await;
        let got = c.poll(other, &t, 5, 1).await;
        assert_eq!(got.len(), 1, "nothing arrived on {t}");
        assert_eq!(got[0].msg["id"], id.as_str());
        lateness.push(got[0].at - got[0].msg["dueTime"].as_i64().unwrap());
    }
    eprintln!("lateness of pushes to the non-owner, consumed there: {lateness:?}");
    // Without the wake-ups these wait for the owner's 1 s safety scan.
    assert_woken(&lateness, 6, "pushed to the non-owner, consumed there");

    // A recurring message pushed to and acked on the non-owner: each ack
    // there moves it on, and the owner is woken for the next occurrence.
    let t = format!("{topic}r");
    let id = c
        .push(
            other,
            json!({"topic": t, "body": "r", "delay": 300, "repeat": {"every": 400, "times": 6}}),
        )
        .await;
    let mut numbers = Vec::new();
    let mut late = Vec::new();
    for _ in 0..6 {
        let got = c.poll(other, &t, 5, 1).await;
        assert_eq!(got.len(), 1, "an occurrence did not arrive on {t}");
        assert_eq!(got[0].msg["id"], id.as_str());
        numbers.push(got[0].msg["occurrence"]["number"].as_i64().unwrap());
        late.push(got[0].at - got[0].msg["occurrence"]["dueTime"].as_i64().unwrap());
        assert!(ack(&c.http, c.port(other), &id).await);
    }
    assert_eq!(numbers, vec![1, 2, 3, 4, 5, 6]);
    assert_woken(&late, 5, "occurrences acked on the non-owner");
    assert!(
        c.poll(other, &t, 1, 1).await.is_empty(),
        "a seventh occurrence"
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

/// A pause said to one node holds on the other at once (the shards' paused
/// sets are in Redis, read by every claim), and a resume said to the other
/// wakes a long poll waiting on the first (over Redis pub/sub).
#[tokio::test(flavor = "multi_thread")]
async fn a_pause_and_a_resume_hold_on_every_node() {
    let c = Cluster::builder().start().await;
    c.wait_ready(0, Duration::from_secs(30)).await;
    c.wait_ready(1, Duration::from_secs(30)).await;
    let topic = format!("gw{}", random_hex(6));
    c.post(0, &format!("/topics/{topic}/pause"), &json!({}))
        .await
        .assert_ok();
    let ids: BTreeSet<String> = c
        .push_batch(
            1,
            (0..20)
                .map(|i| json!({"topic": topic, "body": format!("m{i}")}))
                .collect(),
        )
        .await
        .into_iter()
        .collect();
    assert!(
        c.poll(1, &topic, 2, 100).await.is_empty(),
        "handed out while paused"
    );
    let listed = c.get(1, "/topics").await;
    assert!(
        listed.assert_ok()["topics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["topic"] == topic.as_str() && t["paused"] == true),
        "{}",
        listed.text
    );
    // A poll waiting on node 0; the resume goes to node 1.
    let waiting = {
        let (http, url) = (
            c.http.clone(),
            c.url(0, &format!("/get/{topic}?timeout=20&count=100")),
        );
        tokio::spawn(async move {
            let body: Value = http.get(url).send().await.unwrap().json().await.unwrap();
            (body, now_ms())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resumed_at = now_ms();
    c.post(1, &format!("/topics/{topic}/resume"), &json!({}))
        .await
        .assert_ok();
    let (body, got_at) = waiting.await.unwrap();
    let got: BTreeSet<String> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert!(!got.is_empty(), "the waiting poll got nothing: {body}");
    assert!(got.is_subset(&ids), "{body}");
    // Woken by the other node's notice, not by its own look each second.
    assert!(
        got_at - resumed_at < 400,
        "handed out {} ms after the resume",
        got_at - resumed_at
    );
}

/// A message pushed to one node is rescheduled through the other: it keeps
/// its id and is handed out at its new time, whichever node owns its shard.
#[tokio::test(flavor = "multi_thread")]
async fn a_reschedule_through_another_node_holds() {
    let c = Cluster::builder().start().await;
    c.wait_ready(0, Duration::from_secs(30)).await;
    c.wait_ready(1, Duration::from_secs(30)).await;
    let topic = format!("mv{}", random_hex(6));
    let ids: Vec<String> = c
        .push_batch(
            0,
            (0..8)
                .map(|i| json!({"topic": topic, "body": format!("m{i}"), "delay": 60_000}))
                .collect(),
        )
        .await;
    let r = c
        .post(1, "/reschedule", &json!({"ids": ids, "delay": 500}))
        .await;
    let reply = r.assert_ok().clone();
    assert_eq!(reply["rescheduled"], 8, "{reply}");
    let due: BTreeMap<String, i64> = reply["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_string(),
                r["dueTime"].as_i64().unwrap(),
            )
        })
        .collect();
    let mut got = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < 8 && Instant::now() < deadline {
        for r in c.poll(0, &topic, 1, 100).await {
            got.insert(r.id().to_string(), r.at);
        }
    }
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        due.keys().collect::<Vec<_>>()
    );
    for (id, at) in &got {
        assert!(*at >= due[id], "{id} handed out {} ms early", due[id] - at);
    }
}

/// `delayq reshard` refuses while nodes in ZooKeeper mode run on the data
/// set (they hold no standalone lease), and refuses a shard count left to
/// its default; once the nodes stopped, it runs.
#[tokio::test(flavor = "multi_thread")]
async fn reshard_refuses_while_zookeeper_nodes_run() {
    let mut c = Cluster::builder().nodes(2).shards(4).start().await;
    c.wait_scanners(&[0, 1], Duration::from_secs(30), |s| s.len() == 4)
        .await;
    let (url, prefix) = (c.redis.url(), c.keys.prefix().to_string());
    let reshard = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
            .env_remove("DELAYQ_SHARDS")
            .args(["reshard", "--redis-url", &url])
            .args(["--key-prefix", &prefix])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (ok, err) = reshard(&["--shards", "8"]);
    assert!(!ok, "a reshard under running nodes must be refused");
    assert!(err.contains("nodes are running"), "{err}");
    assert!(
        err.contains(&Cluster::node_name(0)) && err.contains(&Cluster::node_name(1)),
        "the refusal names the running nodes: {err}"
    );
    let (ok, err) = reshard(&[]);
    assert!(!ok, "a reshard without --shards must be refused");
    assert!(err.contains("--shards N"), "{err}");

    c.stop(0);
    c.stop(1);
    let (ok, err) = reshard(&["--shards", "8"]);
    assert!(ok, "once every node stopped, the reshard runs: {err}");
}

/// A node starting up brings every shard's paused set in line with the
/// paused topics it read; a pause answered meanwhile (on another node) is
/// never undone on any shard, not even for a moment (the starting node is
/// slowed down after its reading and after its changes).
#[tokio::test(flavor = "multi_thread")]
async fn a_starting_node_never_undoes_a_pause_made_meanwhile() {
    let mut c = Cluster::builder().nodes(2).shards(4).start().await;
    c.stop(1);
    c.set_env(1, "DELAYQ_FAULTS", "sync_paused_slow");
    let topic = format!("ps{}", random_hex(6));
    let keys = c.keys.clone();
    let redis = c.redis.client();
    let pause_url = c.url(0, &format!("/topics/{topic}/pause"));
    let http = c.http.clone();
    let starting = c.start_twin(1);
    let pausing = async {
        // The twin reads the paused topics, then waits 600 ms.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let r = http.post(&pause_url).send().await.unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
        // Every shard holds the pause from its answer on: watch each
        // shard's set until the twin is done and a little after.
        let (keys, topic) = (keys.clone(), topic.clone());
        tokio::task::spawn_blocking(move || {
            let mut con = redis.get_connection().unwrap();
            let until = std::time::Instant::now() + Duration::from_secs(3);
            let mut undone = Vec::new();
            while std::time::Instant::now() < until {
                for s in 0..keys.shards() {
                    let held: bool = redis::cmd("SISMEMBER")
                        .arg(keys.paused(s))
                        .arg(&topic)
                        .query(&mut con)
                        .unwrap();
                    if !held {
                        undone.push(s);
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            undone
        })
        .await
        .unwrap()
    };
    let (_twin, undone) = tokio::join!(starting, pausing);
    assert!(
        undone.is_empty(),
        "a pause answered 200 was undone on shards {:?} ({} looks) by a node starting up",
        undone.iter().collect::<std::collections::BTreeSet<_>>(),
        undone.len()
    );
}

//! Promises of one node, its journal and its command-line tools: another
//! shard count refused, acks lost with a crash or arriving late, repairs
//! against a journal that is behind, misfire policies, resharding.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{now_ms, status, wait_every, Backend, Env, SHARDS};
use delayq::with_conn;
use diesel::connection::SimpleConnection;
use serde_json::{json, Value};

/// The shard count is part of the data set: a node started on it with
/// another count refuses to start and says what to do; with the right
/// count it starts and finds every message.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_with_another_shard_count_refuses_to_start() {
    let mut env = Env::start(Backend::Sqlite).await;
    let messages: Vec<Value> = (0..20)
        .map(|n| json!({"topic": "shards", "delay": 600_000, "body": format!("{n}")}))
        .collect();
    let ids = env.push_batch(messages).await;
    env.stop_server();
    let other = (SHARDS * 2).to_string();
    let log = env.dir.path().join("other-shards.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .arg("serve")
        .args(["--bind", "127.0.0.1:0"])
        .args(["--redis-url", &env.config.redis_url])
        .args(["--database-url", &env.config.database_url])
        .args(["--key-prefix", &env.config.key_prefix])
        .args(["--shards", &other])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("run delayq serve");
    let deadline = Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        exit.is_some_and(|s| !s.success()),
        "started with another shard count ({exit:?}):\n{stderr}"
    );
    assert!(
        stderr.contains(&format!("--shards {SHARDS}"))
            && stderr.contains(&format!("not {other}"))
            && stderr.contains("delayq reshard"),
        "the error names both counts and what to do:\n{stderr}"
    );
    env.start_server().await;
    for id in &ids {
        let row = env.journal.row(id).unwrap();
        assert_eq!(row.status, status::DELAYING, "{id}");
    }
    let mut con = env.redis.con();
    let held: i64 = (0..SHARDS)
        .map(|s| {
            redis::cmd("ZCARD")
                .arg(env.keys.delay(s))
                .query::<i64>(&mut con)
                .unwrap()
        })
        .sum();
    assert_eq!(held, ids.len() as i64, "every message still scheduled");
}

/// A consumer acks a message inside its next poll while the journal takes
/// no writes, and the node is killed before the journal caught up. The
/// tombstone that kept the message from coming back is then gone (as it
/// would be once its retention passed). Redis still holds the ack's end
/// for the journal: the reconciler writes it, and the message is never
/// delivered again.
#[tokio::test(flavor = "multi_thread")]
async fn an_ack_lost_with_a_crash_does_not_bring_the_message_back() {
    let mut env = Env::builder(Backend::Sqlite)
        .arg("--reconcile-interval")
        .arg("1s")
        .arg("--reconcile-grace")
        .arg("1s")
        .start()
        .await;
    let id = env
        .push(json!({"topic": "revival", "delay": 0, "body": "once"}))
        .await;
    let got = env.collect("revival", 1, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1);
    env.wait_status(&id, status::CONSUMING).await;

    // The journal takes no writes: another process holds SQLite's write lock.
    let mut lock = env.journal.conn();
    with_conn!(&mut lock, c => c.batch_execute("BEGIN IMMEDIATE")).unwrap();
    let r = env
        .post_json(
            "/get/revival",
            &json!({"ack": [id.clone()], "count": 1, "timeout": 0}),
        )
        .await;
    assert_eq!(
        r.assert_ok()["results"][0]["result"],
        json!("consumed"),
        "{}",
        r.text
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    env.server.kill9();
    with_conn!(&mut lock, c => c.batch_execute("ROLLBACK")).unwrap();
    drop(lock);
    assert_eq!(
        env.journal.row(&id).unwrap().status,
        status::CONSUMING,
        "the journal never heard of the ack"
    );
    // The tombstone's retention passes.
    let shard = env.keys.shard_of(crate::common::parse_id(&id));
    let _: () = redis::cmd("ZREM")
        .arg(env.keys.finished(shard))
        .arg(&id)
        .query(&mut env.redis.con())
        .unwrap();

    env.start_server().await;
    // The reconciler finishes the journal's side (once the killed node's
    // word that its journal is behind is stale) ...
    let what = "the journal to get the ack's end";
    let every = Duration::from_millis(100);
    wait_every(what, Duration::from_secs(30), every, || async {
        (env.journal.row(&id).unwrap().status == status::CONSUMED).then_some(())
    })
    .await;
    // ... and nothing brought the message back.
    env.assert_nothing("revival", 3).await;
    let history = env.history_statuses(&id).await;
    assert_eq!(
        history.iter().filter(|s| *s == "Consuming").count(),
        1,
        "delivered once: {history:?}"
    );
}

/// A consumer that stalls past the ttl and comes back late cannot touch
/// the delivery another consumer holds now: its nack and ack carry the
/// receipt of its own delivery, which ended, and are refused (409
/// `stale_delivery`, the message's current status named) with nothing
/// changed, alone, in a batch, or inside a poll. A third consumer gets
/// nothing while the second holds the message; the second's ack, with its
/// receipt, consumes it.
#[tokio::test(flavor = "multi_thread")]
async fn a_late_consumer_cannot_touch_the_next_delivery() {
    let env = Env::start(Backend::Sqlite).await;
    let id = env
        .push(json!({"topic": "late", "delay": 0, "ttl": 2_000, "body": "m"}))
        .await;
    let a = env.collect("late", 1, Duration::from_secs(10)).await;
    let receipt_a = a[0].msg["receipt"].as_str().unwrap().to_string();
    // A stalls; after the ttl B gets the redelivery.
    let b = env.collect("late", 1, Duration::from_secs(10)).await;
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].msg["attempts"], json!(2));
    let receipt_b = b[0].msg["receipt"].as_str().unwrap().to_string();
    assert_ne!(receipt_a, receipt_b, "each delivery has its own receipt");

    let nack = env
        .send(
            env.http
                .post(env.url(&format!("/nack/{id}?receipt={receipt_a}&delay=0"))),
        )
        .await;
    nack.assert_error(409, "stale_delivery");
    assert!(nack.text.contains("Consuming"), "{}", nack.text);
    let ack = env
        .send(
            env.http
                .post(env.url(&format!("/ack/{id}?receipt={receipt_a}"))),
        )
        .await;
    ack.assert_error(409, "stale_delivery");
    let batch = env
        .post_json("/ack", &json!({"ids": [{"id": id, "receipt": receipt_a}]}))
        .await;
    let batch = batch.assert_ok().clone();
    assert_eq!(batch["acked"], json!(0), "{batch}");
    assert_eq!(
        batch["results"][0]["result"],
        json!("stale_delivery"),
        "{batch}"
    );
    assert_eq!(batch["results"][0]["status"], json!("Consuming"), "{batch}");
    let in_poll = env
        .post_json(
            "/get/late",
            &json!({"ack": [{"id": id, "receipt": receipt_a}], "count": 1, "timeout": 0}),
        )
        .await;
    let in_poll = in_poll.assert_ok().clone();
    assert_eq!(
        in_poll["results"][0]["result"],
        json!("stale_delivery"),
        "{in_poll}"
    );
    // C gets nothing: B still holds it.
    assert_eq!(in_poll["messages"], json!([]), "{in_poll}");
    env.assert_nothing("late", 0).await;
    assert_eq!(env.journal.row(&id).unwrap().status, status::CONSUMING);

    let ack = env
        .send(
            env.http
                .post(env.url(&format!("/ack/{id}?receipt={receipt_b}"))),
        )
        .await;
    assert_eq!(ack.assert_ok()["status"], json!("Consumed"));
    env.assert_nothing("late", 1).await;
    let history = env.history_statuses(&id).await;
    assert_eq!(
        history.iter().filter(|s| *s == "Consuming").count(),
        2,
        "{history:?}"
    );

    // A receipt that is not one is a 400 and changes nothing.
    env.send(env.http.post(env.url(&format!("/ack/{id}?receipt=x-1"))))
        .await
        .assert_error(400, "invalid_receipt");
}

/// One rule for a late ack: once a delivery's ack deadline passed, its
/// consumer may still ack it with its receipt as long as no later delivery
/// was handed out, whether the message waits ready again or scheduled
/// again by its retry policy. Both are consumed.
#[tokio::test(flavor = "multi_thread")]
async fn a_late_ack_of_the_last_delivery_is_taken_ready_or_delaying() {
    let env = Env::start(Backend::Sqlite).await;
    let ready = env
        .push(json!({"topic": "late1", "delay": 0, "ttl": 300, "body": "r"}))
        .await;
    let delaying = env
        .push(
            json!({"topic": "late2", "delay": 0, "ttl": 300, "body": "d",
                     "retry": {"backoff": "fixed", "delay": 60_000}}),
        )
        .await;
    let r = env.collect("late1", 1, Duration::from_secs(10)).await;
    let d = env.collect("late2", 1, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(900)).await;
    env.wait_status(&ready, status::READY).await;
    env.wait_status(&delaying, status::DELAYING).await;
    for (id, got) in [(&ready, &r), (&delaying, &d)] {
        let receipt = got[0].msg["receipt"].as_str().unwrap();
        let ack = env
            .send(
                env.http
                    .post(env.url(&format!("/ack/{id}?receipt={receipt}"))),
            )
            .await;
        assert_eq!(ack.assert_ok()["status"], json!("Consumed"), "{}", ack.text);
        env.wait_status(id, status::CONSUMED).await;
    }
    env.assert_nothing("late1", 1).await;
}

/// A repair trusts the journal's live rows: while a node's journal is
/// behind Redis (here: its database takes no write, an ack waits to be
/// journaled), `GET /admin/reconcile?repair=true` and `delayq reconcile
/// --repair` are refused (409 `journal_behind`, naming the node) and
/// change nothing; a report without repair still runs. Once the journal
/// caught up, the repair runs.
#[tokio::test(flavor = "multi_thread")]
async fn manual_repairs_wait_for_a_journal_that_is_behind() {
    let env = Env::builder(Backend::Sqlite)
        .arg("--reconcile-interval")
        .arg("0")
        .start()
        .await;
    let id = env
        .push(json!({"topic": "behind", "delay": 0, "body": "b"}))
        .await;
    env.collect("behind", 1, Duration::from_secs(10)).await;
    env.wait_status(&id, status::CONSUMING).await;
    let mut lock = env.journal.conn();
    with_conn!(&mut lock, c => c.batch_execute("BEGIN IMMEDIATE")).unwrap();
    let r = env
        .post_json(
            "/get/behind",
            &json!({"ack": [id.clone()], "count": 1, "timeout": 0}),
        )
        .await;
    r.assert_ok();
    // The node says within a few seconds that its journal is behind.
    let what = "a repair refused";
    let every = Duration::from_millis(200);
    let refused = wait_every(what, Duration::from_secs(15), every, || async {
        let r = env.get_path("/admin/reconcile?repair=true").await;
        if r.status == 409 {
            return Some(r);
        }
        assert_eq!(r.status, 200, "{}", r.text);
        None
    })
    .await;
    refused.assert_error(409, "journal_behind");
    assert!(refused.text.contains("test-node-1"), "{}", refused.text);
    let tool = env.run_tool(&["reconcile", "--repair"]);
    assert!(
        !tool.status.success(),
        "the command-line repair ran: {}",
        String::from_utf8_lossy(&tool.stdout)
    );
    assert!(String::from_utf8_lossy(&tool.stderr).contains("behind"));
    with_conn!(&mut lock, c => c.batch_execute("ROLLBACK")).unwrap();
    drop(lock);
    env.wait_status(&id, status::CONSUMED).await;
    let every = Duration::from_millis(250);
    wait_every("a repair taken", Duration::from_secs(20), every, || async {
        let r = env.get_path("/admin/reconcile?repair=true").await;
        if r.status == 200 {
            Ok(())
        } else {
            Err(format!("refused: {}", r.text))
        }
    })
    .await;
}

/// A recurring series that fell behind (its consumer away for several
/// intervals) goes on by its misfire policy: `one` (the default) delivers
/// the waiting occurrence once, late, then goes on at the first time in
/// the future; `all` delivers every missed occurrence back to back; `skip`
/// delivers none of them.
#[tokio::test(flavor = "multi_thread")]
async fn a_series_that_fell_behind_follows_its_misfire_policy() {
    let env = Env::start(Backend::Sqlite).await;
    let push = |topic: &str, misfire: Option<&str>| {
        let mut repeat = json!({"every": 1_000});
        if let Some(m) = misfire {
            repeat["misfire"] = json!(m);
        }
        json!({"topic": topic, "delay": 0, "body": "tick", "repeat": repeat})
    };
    let t0 = now_ms();
    let one = env.push(push("mf-one", None)).await;
    let all = env.push(push("mf-all", Some("all"))).await;
    let skip = env.push(push("mf-skip", Some("skip"))).await;
    // The consumers take the first occurrence and come back 3.5 s later.
    let first_one = env.collect("mf-one", 1, Duration::from_secs(5)).await;
    let first_all = env.collect("mf-all", 1, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let acked_at = now_ms();
    for (id, got) in [(&one, &first_one), (&all, &first_all)] {
        let receipt = got[0].msg["receipt"].as_str().unwrap();
        let r = env
            .send(
                env.http
                    .post(env.url(&format!("/ack/{id}?receipt={receipt}"))),
            )
            .await;
        let next = r.assert_ok()["nextOccurrence"].clone();
        assert_eq!(next["number"], json!(2), "{}", r.text);
        let due = next["dueTime"].as_i64().unwrap();
        if *id == one {
            assert!(
                due > acked_at,
                "one: goes on in the future, got {}",
                due - acked_at
            );
            assert_eq!(
                (due - t0) % 1_000,
                (got[0].msg["dueTime"].as_i64().unwrap() - t0) % 1_000,
                "on the schedule"
            );
        } else {
            assert!(due < acked_at, "all: the missed occurrence comes next");
        }
    }
    // skip: the first occurrence waited 3.5 s unclaimed: it is missed and
    // never handed out; the next one handed out is due in the future of
    // that moment.
    let polled_at = now_ms();
    let got = env.collect("mf-skip", 1, Duration::from_secs(5)).await;
    assert_eq!(got.len(), 1);
    let occ = &got[0].msg["occurrence"];
    assert_eq!(occ["number"], json!(2), "{}", got[0].msg);
    assert!(
        occ["dueTime"].as_i64().unwrap() >= polled_at,
        "{}",
        got[0].msg
    );
    env.wait_status(&skip, status::CONSUMING).await;
    let history = env.history_statuses(&skip).await;
    assert_eq!(
        history.iter().filter(|s| *s == "Consuming").count(),
        1,
        "the missed occurrence was never handed out: {history:?}"
    );
}

/// `delayq reshard --shards N` moves a stopped deployment's data set to N
/// shards: messages scheduled, ready and in flight each keep their place
/// and score (so their due times and ack deadlines), tombstones move with
/// them, and the journal is untouched. A run stopped midway is finished by
/// running it again; nodes refuse to start meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn reshard_moves_every_message_to_its_new_shard() {
    let mut env = Env::start(Backend::Sqlite).await;
    let push = |topic: &str, n: usize, delay: i64| -> Vec<Value> {
        (0..n)
            .map(|i| json!({"topic": topic, "delay": delay, "ttl": 60_000, "body": format!("{i}")}))
            .collect()
    };
    let pushed_at = now_ms();
    let delaying = env.push_batch(push("rs-later", 30, 5_000)).await;
    let ready = env.push_batch(push("rs-ready", 10, 0)).await;
    let flying = env.push_batch(push("rs-flight", 10, 0)).await;
    let acked = env
        .push(json!({"topic": "rs-acked", "delay": 0, "body": "done"}))
        .await;
    for id in &ready {
        env.wait_status(id, status::READY).await;
    }
    let held = env
        .collect("rs-flight", flying.len(), Duration::from_secs(10))
        .await;
    assert_eq!(held.len(), flying.len());
    let done = env.collect("rs-acked", 1, Duration::from_secs(10)).await;
    env.ack(done[0].id()).await.assert_ok();
    env.wait_status(&acked, status::CONSUMED).await;
    env.stop_server();
    let journal_before = env.journal.counts();

    let reshard = |faults: &str| {
        env.tool(&["reshard", "--shards", "8", "--page", "7"])
            .env("DELAYQ_FAULTS", faults)
            .output()
            .unwrap()
    };
    let stopped = reshard("reshard_stops");
    assert!(!stopped.status.success(), "the injected fault stops it");
    let marker: Option<String> = redis::cmd("GET")
        .arg(format!("{{{}}}:resharding", env.config.key_prefix))
        .query(&mut env.redis.con())
        .unwrap();
    assert_eq!(marker.as_deref(), Some("4>8"));
    let out = reshard("");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["from"], json!(4));
    assert_eq!(report["to"], json!(8));
    assert_eq!(report["resumed"], json!(true));
    assert_eq!(
        env.journal.counts(),
        journal_before,
        "the journal is untouched"
    );

    env.config
        .extra_args
        .extend(["--shards".to_string(), "8".to_string()]);
    env.keys = delayq::redis::keys::Keys::new(&env.config.key_prefix, 8);
    env.start_server().await;
    // Each message sits in its shard under the new count.
    let mut con = env.redis.con();
    for id in delaying.iter().chain(&ready).chain(&flying) {
        let shard = env.keys.shard_of(crate::common::parse_id(id));
        let here: bool = redis::cmd("HEXISTS")
            .arg(env.keys.messages(shard))
            .arg(id)
            .query(&mut con)
            .unwrap();
        assert!(here, "{id} is not in shard {shard} of 8");
    }
    // In flight: still held, acked with the receipts handed out before.
    for r in &held {
        let receipt = r.msg["receipt"].as_str().unwrap();
        let a = env
            .send(
                env.http
                    .post(env.url(&format!("/ack/{}?receipt={receipt}", r.id()))),
            )
            .await;
        assert_eq!(a.assert_ok()["status"], "Consumed", "{}", a.text);
    }
    // Ready: delivered at once; scheduled: when due, never early.
    let got = env
        .collect("rs-ready", ready.len(), Duration::from_secs(10))
        .await;
    assert_eq!(got.len(), ready.len());
    let later = env
        .collect("rs-later", delaying.len(), Duration::from_secs(20))
        .await;
    assert_eq!(later.len(), delaying.len());
    for r in &later {
        assert!(
            r.at >= pushed_at + 5_000,
            "early by {} ms",
            pushed_at + 5_000 - r.at
        );
    }
    // The acked message's tombstone moved too: a restore does not bring it back.
    let r = env.get_path("/reStore?expire=true").await;
    r.assert_ok();
    env.assert_nothing("rs-acked", 1).await;
    env.assert_nothing("rs-flight", 1).await;
}

//! The reconciler's safety rules, each shown holding on its own: a repair
//! waits while a node's journal is behind (acks and cancels it applied in
//! Redis are not journaled yet, and must not be repaired into a
//! redelivery); rows changed within the grace period are left out; a
//! difference is reported only if a second look, both sides read again,
//! still finds it.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use crate::common::{now_ms, status, wait_until, Backend, Env};
use crate::journal_faults::{add_refusing_triggers, allow_flow_writes, refuse_flow_writes};
use crate::reconcile::{counts, holds, reconcile, reconciling_env, redis_cmd, shard, GRACE};
use serde_json::{json, Value};

backend_tests!(
    a_repair_waits_while_a_journal_is_behind,
    rows_changed_within_the_grace_period_are_left_out,
    a_difference_gone_by_the_second_look_is_not_reported,
    a_journal_falling_behind_mid_run_stops_the_repairs,
    a_refused_end_does_not_stop_the_reconciler
);

/// Lines of the server's log that say the periodic reconciler waited for a
/// journal that is behind.
fn waits_logged(env: &Env) -> usize {
    env.server
        .log_tail(5_000)
        .matches("a node's journal is behind; reconciling later")
        .count()
}

/// A message lost from Redis while the node's journal is behind (its
/// database refuses writes, so an ack and a cancel wait in the backlog and
/// in Redis): neither the periodic reconciler nor `GET
/// /admin/reconcile?repair=true` repairs anything until the journal caught
/// up; then the lost message is scheduled again, and the acked and the
/// cancelled ones never come back.
async fn a_repair_waits_while_a_journal_is_behind(b: Backend) {
    let env = Env::builder(b)
        .arg("--reconcile-interval")
        .arg("1s")
        .arg("--reconcile-grace")
        .arg(GRACE)
        .start()
        .await;
    let topic = "behind";
    let lost = env
        .push(json!({"topic": topic, "body": "lost", "delay": 60_000}))
        .await;
    let cancelled = env
        .push(json!({"topic": topic, "body": "cancelled", "delay": 4_000}))
        .await;
    let acked = env.push(json!({"topic": topic, "body": "acked"})).await;
    env.wait_scheduled(&lost).await;
    env.wait_scheduled(&cancelled).await;
    env.wait_status(&acked, status::READY).await;

    // The journal falls behind: the delivery, the ack and the cancel are
    // applied in Redis, their rows wait.
    refuse_flow_writes(&env, b);
    let got = env.receive_one(topic).await;
    assert_eq!(got.id(), acked);
    env.ack(&acked).await.assert_ok();
    let r = env.delete(&cancelled).await;
    assert!(
        r.status == 200 || r.status == 503,
        "{} {}",
        r.status,
        r.text
    );
    let what = "a repair to be refused while the journal is behind";
    let refused = wait_until(what, Duration::from_secs(15), || async {
        let r = env.get_path("/admin/reconcile?repair=true").await;
        if r.status == 409 {
            Ok(r)
        } else {
            Err(format!("{} {}", r.status, r.text))
        }
    })
    .await;
    refused.assert_error(409, "journal_behind");

    // Redis loses a message meanwhile: the periodic reconciler waits (twice
    // at least) and leaves it alone.
    let s = shard(&env, &lost);
    redis_cmd::<i64>(&env, &["HDEL", &env.keys.messages(s), &lost]);
    redis_cmd::<i64>(&env, &["ZREM", &env.keys.delay(s), &lost]);
    let before = waits_logged(&env);
    let what = "the periodic reconciler to wait twice for the journal";
    wait_until(what, Duration::from_secs(15), || async {
        let n = waits_logged(&env);
        (n >= before + 2).then_some(n)
    })
    .await;
    assert!(!holds(&env, &lost), "repaired while the journal was behind");
    env.get_path("/admin/reconcile?repair=true")
        .await
        .assert_error(409, "journal_behind");

    // The journal catches up; the next run schedules the lost message
    // again, and nothing ended comes back.
    allow_flow_writes(&env, b);
    env.wait_status(&acked, status::CONSUMED).await;
    env.wait_status(&cancelled, status::DELETED).await;
    let what = "the lost message to be scheduled again";
    wait_until(what, Duration::from_secs(15), || async {
        holds(&env, &lost).then_some(())
    })
    .await;
    let quiet_until = crate::common::now_ms() + 5_000;
    while crate::common::now_ms() < quiet_until {
        env.assert_nothing(topic, 1).await;
    }
    assert_eq!(
        env.wait_status(&acked, status::CONSUMED).await.status,
        status::CONSUMED
    );
    let report = reconcile(&env, false).await;
    assert_eq!(counts(&report), [0; 5], "{report}");
}

/// A message lost from Redis right after it was pushed is left out of a
/// reconciliation run with the server's grace period (30 s by default) and
/// counted as recent; one run with a grace period it is older than finds
/// it missing.
async fn rows_changed_within_the_grace_period_are_left_out(b: Backend) {
    let env = Env::builder(b)
        .arg("--reconcile-interval")
        .arg("0")
        .start()
        .await;
    let id = env
        .push(json!({"topic": "recent", "body": "x", "delay": 60_000}))
        .await;
    env.wait_scheduled(&id).await;
    let s = shard(&env, &id);
    redis_cmd::<i64>(&env, &["HDEL", &env.keys.messages(s), &id]);
    redis_cmd::<i64>(&env, &["ZREM", &env.keys.delay(s), &id]);

    let report = reconcile(&env, true).await;
    assert_eq!(counts(&report), [0; 5], "{report}");
    assert_eq!(report["journalRecent"], 1, "{report}");
    assert_eq!(report["journalScanned"], 0, "{report}");
    assert_eq!(report["graceMs"], 30_000, "{report}");
    assert!(!holds(&env, &id), "repaired within the grace period");

    tokio::time::sleep(Duration::from_millis(700)).await;
    let (report, _) = env.run_tool_report(&["reconcile", "--reconcile-grace", GRACE]);
    assert_eq!(counts(&report), [1, 0, 0, 0, 0], "{report}");
    assert_eq!(report["journalRecent"], 0, "{report}");
}

/// A difference put right between the reconciler's first look and its
/// second (`delayq reconcile` prints a line after each page; the message is
/// put back in its schedule as soon as the journal's page is printed) is
/// not reported. The second look comes half a second after the first;
/// a machine too busy to put it back by then gets another try.
async fn a_difference_gone_by_the_second_look_is_not_reported(b: Backend) {
    let env = reconciling_env(b).start().await;
    let id = env
        .push(json!({"topic": "second", "body": "x", "delay": 60_000}))
        .await;
    env.wait_scheduled(&id).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let delay = env.keys.delay(shard(&env, &id));
    let score: String = redis_cmd(&env, &["ZSCORE", &delay, &id]);
    let mut reports: Vec<Value> = Vec::new();
    for _ in 0..3 {
        redis_cmd::<i64>(&env, &["ZREM", &delay, &id]);
        let mut child = env
            .tool(&["reconcile", "--reconcile-grace", GRACE])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start delayq reconcile");
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let mut put_back = false;
        let mut said = String::new();
        for line in stderr.lines().map_while(Result::ok) {
            if !put_back && line.starts_with("reconcile: journal rows") {
                redis_cmd::<i64>(&env, &["ZADD", &delay, &score, &id]);
                put_back = true;
            }
            said.push_str(&line);
            said.push('\n');
        }
        let out = child.wait_with_output().expect("delayq reconcile ends");
        assert!(out.status.success(), "{said}");
        assert!(
            put_back,
            "no progress line after the journal's page:\n{said}"
        );
        let report: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
        assert_eq!(report["journalScanned"], 1, "{report}");
        if counts(&report) == [0; 5] {
            assert!(holds(&env, &id));
            return;
        }
        reports.push(report);
    }
    panic!("a difference put back before the second look was reported each time: {reports:?}");
}

/// A journal that falls behind while a run is under way (another node says
/// so after the run's first page, as its writes start failing) stops the
/// run's repairs: the check is made before each batch of repairs, not only
/// when the run starts. `delayq reconcile --repair` fails naming the node
/// and leaves the lost message alone; once the node has caught up, the
/// next run schedules it again.
async fn a_journal_falling_behind_mid_run_stops_the_repairs(b: Backend) {
    let env = reconciling_env(b).start().await;
    let lost = env
        .push(json!({"topic": "midrun", "body": "lost", "delay": 60_000}))
        .await;
    env.wait_scheduled(&lost).await;
    let s = shard(&env, &lost);
    redis_cmd::<i64>(&env, &["HDEL", &env.keys.messages(s), &lost]);
    redis_cmd::<i64>(&env, &["ZREM", &env.keys.delay(s), &lost]);
    tokio::time::sleep(Duration::from_millis(700)).await;

    let behind = env.keys.journal_behind();
    let mut child = env
        .tool(&["reconcile", "--repair", "--reconcile-grace", GRACE])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start delayq reconcile");
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut fell_behind = false;
    let mut said = String::new();
    for line in stderr.lines().map_while(Result::ok) {
        // The run found the lost message on the journal's page; its second
        // look and repair come half a second later.
        if !fell_behind && line.starts_with("reconcile: journal rows") {
            let now = now_ms().to_string();
            redis_cmd::<i64>(&env, &["ZADD", &behind, &now, "slow-node"]);
            fell_behind = true;
        }
        said.push_str(&line);
        said.push('\n');
    }
    let out = child.wait_with_output().expect("delayq reconcile ends");
    assert!(
        fell_behind,
        "no progress line after the journal's page:\n{said}"
    );
    assert!(
        !out.status.success(),
        "repaired with a journal behind: {}\n{said}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(said.contains("slow-node"), "{said}");
    assert!(!holds(&env, &lost), "repaired while a journal was behind");

    // The node caught up: the next run repairs.
    redis_cmd::<i64>(&env, &["ZREM", &behind, "slow-node"]);
    let (report, _) = env.run_tool_report(&["reconcile", "--repair", "--reconcile-grace", GRACE]);
    assert_eq!(report["missing"]["repaired"], 1, "{report}");
    assert!(holds(&env, &lost));
}

/// A change the journal refuses does not stop the periodic reconciler.
/// The database refuses every update of a message (a trigger); the message
/// is acked: Redis ends it, the journal sets the end aside, and the end
/// stays in `{P:s}:unjournaled`, found by every run and refused each time.
/// In the same run another message's end (acked in Redis by a node that
/// stopped before its journal heard) is recorded and Redis forgets it, and
/// a message whose schedule entry Redis lost is put back. A report counts
/// the refused end as unjournaled and not repaired.
async fn a_refused_end_does_not_stop_the_reconciler(b: Backend) {
    let env = Env::builder(b)
        .arg("--reconcile-interval")
        .arg("1s")
        .arg("--reconcile-grace")
        .arg(GRACE)
        .start()
        .await;
    let k = &env.keys;
    let unscheduled = env
        .push(json!({"topic": "rf-later", "body": "u", "delay": 60_000}))
        .await;
    let good = env.push(json!({"topic": "rf-good", "body": "g"})).await;
    env.wait_scheduled(&unscheduled).await;
    assert_eq!(env.receive_one("rf-good").await.id(), good);
    env.wait_status(&good, status::CONSUMING).await;

    add_refusing_triggers(&env, b);
    let poison = env.push(json!({"topic": "poison", "body": "p"})).await;
    assert_eq!(env.receive_one("poison").await.id(), poison);
    env.ack(&poison).await;
    let ps = shard(&env, &poison);
    let what = "the poison message's end to be set aside, kept in Redis";
    wait_until(what, Duration::from_secs(20), || async {
        let kept: i64 = redis_cmd(&env, &["HEXISTS", &k.unjournaled(ps), &poison]);
        let j = env.get_path("/admin/journal").await;
        let j = j.assert_ok();
        (kept == 1 && j["pending"] == 0 && j["refused"].as_u64() > Some(0)).then_some(())
    })
    .await;

    // The good message was acked in Redis by a node that stopped before
    // its journal recorded the end; the other lost its schedule entry.
    let s = shard(&env, &good);
    let now = now_ms().to_string();
    let end = format!("{}|1|{now}", status::CONSUMED);
    redis_cmd::<i64>(&env, &["HDEL", &k.messages(s), &good]);
    redis_cmd::<i64>(&env, &["ZREM", &k.inflight(s), &good]);
    redis_cmd::<i64>(&env, &["ZADD", &k.finished(s), &now, &good]);
    redis_cmd::<i64>(&env, &["HSET", &k.unjournaled(s), &good, &end]);
    let us = shard(&env, &unscheduled);
    redis_cmd::<i64>(&env, &["ZREM", &k.delay(us), &unscheduled]);

    let what = "the periodic reconciler to record the good end and put the other back";
    wait_until(what, Duration::from_secs(20), || async {
        let back: Option<f64> = redis_cmd(&env, &["ZSCORE", &k.delay(us), &unscheduled]);
        let kept: i64 = redis_cmd(&env, &["HEXISTS", &k.unjournaled(s), &good]);
        let row = env.journal.row(&good).unwrap();
        if back.is_some() && kept == 0 && row.status == status::CONSUMED {
            Ok(())
        } else {
            Err(format!(
                "put back: {}, good end kept in Redis: {}, good row: {}",
                back.is_some(),
                kept == 1,
                row.status
            ))
        }
    })
    .await;
    let kept: i64 = redis_cmd(&env, &["HEXISTS", &k.unjournaled(ps), &poison]);
    assert_eq!(kept, 1, "the refused end left Redis");
    let row = env.journal.row(&poison).unwrap();
    assert!(row.status < status::CONSUMED, "{}", row.status);
    let log = env.server.log_tail(5_000);
    assert!(!log.contains("reconciliation failed"), "{log}");
    assert!(
        log.contains("refuses some of the reconciler's repairs"),
        "{log}"
    );

    // A repair through the API goes on too, and says what it left.
    let what = "a repair run (the journal is behind a moment after each refusal)";
    let report = wait_until(what, Duration::from_secs(15), || async {
        let r = env.get_path("/admin/reconcile?repair=true").await;
        if r.status == 200 {
            Ok(r.json.clone())
        } else {
            Err(format!("{} {}", r.status, r.text))
        }
    })
    .await;
    assert_eq!(report["unjournaled"]["count"], 1, "{report}");
    assert_eq!(report["unjournaled"]["repaired"], 0, "{report}");
    assert_eq!(
        report["unjournaled"]["sample"][0]["id"].as_str(),
        Some(poison.as_str()),
        "{report}"
    );
    assert_eq!(counts(&report), [0; 5], "{report}");
}

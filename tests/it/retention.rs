//! Journal retention: Consumed and Deleted messages leave the journal with
//! their history once `--retain-finished` has passed since they finished,
//! dead letters once `--retain-dead` has, never sooner; live messages and
//! a dead letter requeued stay; `0` keeps everything.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::common::{now_ms, parse_id, status, Backend, Env, EnvBuilder};
use delayq::journal::schema::message;
use delayq::with_conn;
use diesel::prelude::*;
use serde_json::json;

backend_tests!(
    finished_messages_leave_the_journal_after_their_retention,
    nothing_leaves_with_retention_off
);

fn retaining_env(b: Backend, finished: &str, dead: &str) -> EnvBuilder {
    Env::builder(b)
        .arg("--retain-finished")
        .arg(finished)
        .arg("--retain-dead")
        .arg(dead)
        .arg("--retention-interval")
        .arg("500ms")
}

/// Pushes a message with one delivery allowed, takes it and nacks it: dead.
async fn dead_letter(env: &Env, topic: &str) -> String {
    let id = env
        .push(json!({"topic": topic, "body": "d", "maxAttempts": 1}))
        .await;
    assert_eq!(env.receive_one(topic).await.id(), id);
    env.send(env.http.post(env.url(&format!("/nack/{id}"))))
        .await
        .assert_ok();
    env.wait_status(&id, status::DEAD).await;
    id
}

/// Those of `ids` the journal still holds.
fn present(env: &Env, ids: &HashSet<String>) -> HashSet<String> {
    let wanted: Vec<i64> = ids.iter().map(|id| parse_id(id).0).collect();
    let mut conn = env.journal.conn();
    let found: Vec<i64> = wanted
        .chunks(500)
        .flat_map(|chunk| {
            with_conn!(&mut conn, c => message::table
                .filter(message::id.eq_any(chunk))
                .select(message::id)
                .load::<i64>(c))
            .expect("read the journal")
        })
        .collect();
    found.into_iter().map(|id| id.to_string()).collect()
}

/// Watches the messages `finished` (id → when it finished, how long it is
/// kept, both ms) leave the journal, every 100 ms: each must have been
/// kept that long, and all must leave within 40 s.
async fn watch_them_leave(env: &Env, finished: &HashMap<String, (i64, i64)>) {
    let mut left: HashSet<String> = finished.keys().cloned().collect();
    let deadline = Instant::now() + Duration::from_secs(40);
    while !left.is_empty() {
        assert!(
            Instant::now() < deadline,
            "{} of {} finished messages never left the journal",
            left.len(),
            finished.len()
        );
        let asked = now_ms();
        let still = present(env, &left);
        for id in left.difference(&still) {
            let (at, keep) = finished[id];
            // The server dates changes by its estimate of Redis's clock,
            // which may run a round trip ahead of the test's.
            assert!(
                asked + 50 >= at + keep,
                "{id} left the journal {} ms after it finished (kept {keep} ms)",
                asked - at
            );
        }
        left = still;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn finished_messages_leave_the_journal_after_their_retention(b: Backend) {
    let env = retaining_env(b, "2s", "4s").start().await;
    // More than one page of ended messages (pages of 500 flow rows).
    const N: usize = 1_200;
    let mut many = Vec::new();
    for part in 0..2 {
        many.extend(
            env.push_batch(
                (0..N / 2)
                    .map(|i| json!({"topic": "many", "body": format!("{part}.{i}")}))
                    .collect(),
            )
            .await,
        );
    }
    let got = env.collect("many", N, Duration::from_secs(30)).await;
    assert_eq!(got.len(), N);
    for part in many.chunks(100) {
        let r = env.post_json("/ack", &json!({ "ids": part })).await;
        assert_eq!(r.assert_ok()["acked"], part.len());
    }
    let cancelled = env
        .push(json!({"topic": "keep", "body": "x", "delay": 60_000}))
        .await;
    env.delete(&cancelled).await.assert_ok();
    let dead = dead_letter(&env, "dl").await;
    let requeued = dead_letter(&env, "dl2").await;
    // Requeued before its retention passed: live again, and kept.
    env.send(env.http.post(env.url(&format!("/dead/{requeued}/requeue"))))
        .await
        .assert_ok();
    let live = env
        .push(json!({"topic": "live", "body": "l", "delay": 120_000}))
        .await;
    let mut finished = HashMap::new();
    for (id, row) in env.wait_statuses(&many, status::CONSUMED).await {
        finished.insert(id, (row.updated_time, 2_000));
    }
    let row = env.wait_status(&cancelled, status::DELETED).await;
    finished.insert(cancelled.clone(), (row.updated_time, 2_000));
    let row = env.journal.row(&dead).expect("the dead letter");
    finished.insert(dead.clone(), (row.updated_time, 4_000));

    watch_them_leave(&env, &finished).await;
    // Their histories left with them; the live and the requeued message
    // stay, with theirs.
    let mut kept_history = 0;
    for id in [&live, &requeued] {
        let row = env.journal.row(id).expect("kept");
        assert!(row.status < status::CONSUMED, "{id}: {}", row.status);
        let history = env.journal.history(id);
        assert!(!history.is_empty(), "{id}'s history");
        kept_history += history.len() as i64;
    }
    assert_eq!(env.journal.counts(), (2, kept_history));
    let r = env.get_path(&format!("/messages/{cancelled}")).await;
    assert_eq!(r.status, 404, "{}", r.text);
    let metrics = env.get_path("/metrics").await.text;
    let purged: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("delayq_journal_purged_total "))
        .unwrap_or_else(|| panic!("no purged counter:\n{metrics}"))
        .trim()
        .parse()
        .unwrap();
    assert_eq!(purged as usize, N + 2);
    // The requeued message is delivered, and its end counts from then.
    let got = env.receive_one("dl2").await;
    assert_eq!(got.id(), requeued);
    assert_eq!(got.msg["topic"], "dl2");
}

async fn nothing_leaves_with_retention_off(b: Backend) {
    let env = retaining_env(b, "0", "0").start().await;
    let id = env.push(json!({"topic": "off", "body": "x"})).await;
    assert_eq!(env.receive_one("off").await.id(), id);
    env.ack(&id).await.assert_ok();
    let dead = dead_letter(&env, "offdl").await;
    env.wait_status(&id, status::CONSUMED).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(env.journal.row(&id).is_some());
    assert!(env.journal.row(&dead).is_some());
    let metrics = env.get_path("/metrics").await.text;
    assert!(
        !metrics.contains("delayq_journal_purged_total 1"),
        "{metrics}"
    );
}

//! Pausing a topic: nothing of it is handed out from the pause's answer
//! until the resume's; pushes, cancels, acks and other topics go on; in
//! flight messages keep their deadlines; a resume wakes waiting polls at
//! once; `GET /topics` and `/metrics` show the pause.

use std::time::{Duration, Instant};

use crate::common::{now_ms, wait_until, Backend, Env};
use serde_json::{json, Value};

backend_tests!(
    a_paused_topic_hands_nothing_out_until_resumed,
    in_flight_deadlines_run_on_while_paused,
    a_series_paused_misses_its_occurrences
);

/// The shards' paused sets follow the list when a node starts: a pause or
/// resume cut short (or a reshard) left one shard's set behind.
#[tokio::test(flavor = "multi_thread")]
async fn a_starting_node_brings_every_shard_in_line_with_the_pauses() {
    let mut env = Env::start(Backend::Sqlite).await;
    set_paused(&env, "sms", true).await;
    let mut con = env.redis.client().get_connection().unwrap();
    let keys = env.keys.clone();
    let shards = keys.shards();
    let member = |con: &mut redis::Connection, shard: u32, topic: &str| -> bool {
        redis::cmd("SISMEMBER")
            .arg(keys.paused(shard))
            .arg(topic)
            .query(con)
            .unwrap()
    };
    assert!((0..shards).all(|s| member(&mut con, s, "sms")));
    // A pause of sms cut short on shard 0; a resume of mail cut short on
    // shard 1 (listed as not paused, still in one set).
    let _: () = redis::cmd("SREM")
        .arg(env.keys.paused(0))
        .arg("sms")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SADD")
        .arg(env.keys.paused(1))
        .arg("mail")
        .query(&mut con)
        .unwrap();
    env.stop_server();
    env.start_server().await;
    assert!((0..shards).all(|s| member(&mut con, s, "sms")));
    assert!((0..shards).all(|s| !member(&mut con, s, "mail")));
}

async fn set_paused(env: &Env, topic: &str, paused: bool) -> Value {
    let verb = if paused { "pause" } else { "resume" };
    let r = env
        .post_json(&format!("/topics/{topic}/{verb}"), &json!({}))
        .await;
    let body = r.assert_ok().clone();
    assert_eq!(body["topic"], topic, "{body}");
    assert_eq!(body["paused"], paused, "{body}");
    body
}

async fn topic_view(env: &Env, topic: &str) -> Value {
    let r = env.get_path("/topics").await;
    let list = r.assert_ok()["topics"]
        .as_array()
        .unwrap_or_else(|| panic!("no topics in {}", r.text))
        .clone();
    list.into_iter()
        .find(|t| t["topic"] == topic)
        .unwrap_or_else(|| panic!("{topic} not in {}", r.text))
}

/// Waits (the node reads the pauses each second) until `/metrics` says
/// `topic` is paused, or not.
async fn wait_paused_metric(env: &Env, topic: &str, paused: bool) {
    let line = format!("delayq_topic_paused{{topic=\"{topic}\"}} 1");
    wait_until(
        "/metrics to show the pause",
        Duration::from_secs(5),
        || async {
            let text = env.get_path("/metrics").await.text;
            if text.lines().any(|l| l == line) == paused {
                Ok(())
            } else {
                Err(format!(
                    "paused {paused} wanted; {}",
                    text.lines()
                        .filter(|l| l.contains("topic_paused"))
                        .collect::<Vec<_>>()
                        .join("; ")
                ))
            }
        },
    )
    .await;
}

async fn a_paused_topic_hands_nothing_out_until_resumed(b: Backend) {
    let env = Env::start(b).await;
    // One message in flight before the pause, acked during it.
    let held = env.push(json!({"topic": "sms", "body": "held"})).await;
    assert_eq!(env.receive_one("sms").await.msg["id"], held.as_str());

    let first = set_paused(&env, "sms", true).await;
    assert_eq!(first["changed"], true, "{first}");
    let again = set_paused(&env, "sms", true).await;
    assert_eq!(again["changed"], false, "{again}");
    assert_eq!(
        again["pausedAt"], first["pausedAt"],
        "a second pause keeps the first's time"
    );

    // Pushes, cancels and acks go on; other topics are handed out.
    let due = env.push(json!({"topic": "sms", "body": "due"})).await;
    let cancelled = env
        .push(json!({"topic": "sms", "body": "cancelled", "delay": 200}))
        .await;
    env.ack(&held).await.assert_ok();
    env.push(json!({"topic": "mail", "body": "other"})).await;
    env.receive_one("mail").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    env.delete(&cancelled).await.assert_ok();

    // A poll waits its whole timeout and gets nothing.
    let began = Instant::now();
    env.assert_nothing("sms", 2).await;
    assert!(
        began.elapsed() >= Duration::from_millis(1900),
        "the poll did not wait"
    );

    let view = topic_view(&env, "sms").await;
    assert_eq!(view["paused"], true, "{view}");
    assert_eq!(view["pausedAt"], first["pausedAt"], "{view}");
    let due_time = env.message(&due).await["message"]["dueTime"]
        .as_i64()
        .unwrap();
    assert_eq!(view["oldestReadyDueTime"], due_time, "{view}");
    assert!(
        view["overdueMs"].as_i64().is_some_and(|o| o >= 2000),
        "{view}"
    );
    assert_eq!(topic_view(&env, "mail").await["paused"], false);
    wait_paused_metric(&env, "sms", true).await;

    // A long poll waiting when the topic is resumed gets the message at once.
    let poller = {
        let (http, url) = (env.http.clone(), env.url("/get/sms?timeout=20&count=10"));
        tokio::spawn(async move {
            let body: Value = http.get(url).send().await.unwrap().json().await.unwrap();
            (body, now_ms())
        })
    };
    // The poll looks again each second by itself: resumed 300 ms in, only a
    // wake-up hands the message out within 400 ms.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resumed_at = now_ms();
    let resumed = set_paused(&env, "sms", false).await;
    assert_eq!(resumed["changed"], true, "{resumed}");
    let (body, got_at) = poller.await.unwrap();
    let ids: Vec<&str> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [due.as_str()],
        "only the due message, not the cancelled one"
    );
    assert!(
        got_at - resumed_at < 400,
        "handed out {} ms after the resume",
        got_at - resumed_at
    );
    assert_eq!(set_paused(&env, "sms", false).await["changed"], false);
    wait_paused_metric(&env, "sms", false).await;
    assert_eq!(topic_view(&env, "sms").await["paused"], false);

    // Bad topics change nothing.
    let r = env.post_json("/topics/no%20spaces/pause", &json!({})).await;
    r.assert_error(400, "invalid_topic");
    assert!(env.get_path("/topics").await.assert_ok()["topics"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["paused"] == false));
}

async fn in_flight_deadlines_run_on_while_paused(b: Backend) {
    let env = Env::start(b).await;
    let id = env
        .push(json!({"topic": "gw", "body": "x", "ttl": 500}))
        .await;
    env.receive_one("gw").await;
    set_paused(&env, "gw", true).await;
    // Its ack deadline passes during the pause: it is Ready again, and
    // waits.
    wait_until(
        "the expired delivery to be Ready",
        Duration::from_secs(10),
        || async {
            let status = env.message(&id).await["message"]["status"].clone();
            if status == "Ready" {
                Ok(())
            } else {
                Err(status)
            }
        },
    )
    .await;
    env.assert_nothing("gw", 1).await;
    set_paused(&env, "gw", false).await;
    let again = env.receive_one("gw").await;
    assert_eq!(again.msg["id"], id.as_str());
    assert_eq!(again.msg["attempts"], 2, "{}", again.msg);
}

/// A recurring message's occurrences due during a pause are missed ones:
/// its `misfire` decides on resume (the default `one`: one late delivery,
/// then the first time in the future; `skip`: none).
async fn a_series_paused_misses_its_occurrences(b: Backend) {
    let env = Env::start(b).await;
    let mut series = Vec::new();
    for (topic, misfire) in [("s-one", "one"), ("s-skip", "skip")] {
        let id = env
            .push(json!({"topic": topic, "body": "x", "delay": 100,
                         "repeat": {"every": 300, "misfire": misfire}}))
            .await;
        let first = env.receive_one(topic).await;
        assert_eq!(first.msg["occurrence"]["number"], 1, "{}", first.msg);
        set_paused(&env, topic, true).await;
        env.ack(&id).await.assert_ok();
        series.push((topic, id));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for (topic, _) in &series {
        env.assert_nothing(topic, 1).await;
    }
    let resumed_at = now_ms();
    for (topic, _) in &series {
        set_paused(&env, topic, false).await;
    }
    let due = |r: &crate::common::Received| r.msg["dueTime"].as_i64().unwrap();
    // one: occurrence 2, late; then one due after the resume.
    let late = env.receive_one("s-one").await;
    assert_eq!(late.msg["occurrence"]["number"], 2, "{}", late.msg);
    assert!(due(&late) < resumed_at, "{}", late.msg);
    env.ack(&series[0].1).await.assert_ok();
    let next = env.receive_one("s-one").await;
    assert!(due(&next) >= resumed_at, "{}", next.msg);
    // skip: the first delivery after the resume is due after it.
    let next = env.receive_one("s-skip").await;
    assert!(due(&next) >= resumed_at, "{}", next.msg);
    assert!(
        next.msg["occurrence"]["number"].as_i64().unwrap() > 2,
        "{}",
        next.msg
    );
}

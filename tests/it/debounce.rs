//! `onDuplicate` on a push of a live `(topic, bizKey)`: `replace`
//! (debounce) gives the live message the push's body, due time and
//! priority and keeps its id; `extend` moves only its due time, and only
//! later; a message handed out is left alone and the answer says so; the
//! journal holds the new state, so a restore schedules it; many replaces
//! in a row leave one message, delivered once, with the last body.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{now_ms, status, Backend, Env, RedisCluster};

backend_tests!(
    replace_gives_the_live_message_the_new_body_time_and_priority,
    extend_moves_the_due_time_only_later,
    a_message_in_flight_is_left_alone,
    a_restore_schedules_the_replaced_state,
    a_burst_of_replaces_delivers_one_message_with_the_last_body
);

async fn push(env: &Env, msg: Value) -> Value {
    env.post_json("/push", &msg).await.assert_ok().clone()
}

/// The journal's body and due time of `id`.
fn journaled(env: &Env, id: &str) -> (String, i64) {
    let row = env.journal.row(id).expect("in the journal");
    (row.body.clone(), row.due_time)
}

async fn replace_gives_the_live_message_the_new_body_time_and_priority(b: Backend) {
    let env = Env::start(b).await;
    replace_round(&env).await;
}

/// One push, then a replace of it: the consumer gets the new body at the
/// new time, once, under the first id.
async fn replace_round(env: &Env) {
    let first = push(
        env,
        json!({"topic": "db", "bizKey": "cart-1", "body": "v1", "delay": 60_000}),
    )
    .await;
    assert!(first.get("duplicate").is_none(), "{first}");
    let id = first["id"].as_str().unwrap().to_string();
    let asked = now_ms();
    let second = push(
        env,
        json!({"topic": "db", "bizKey": "cart-1", "body": "v2", "delay": 800,
               "priority": 9, "onDuplicate": "replace"}),
    )
    .await;
    assert_eq!(second["id"], id.as_str(), "{second}");
    assert_eq!(second["duplicate"], true, "{second}");
    assert_eq!(second["result"], "replaced", "{second}");
    let due = second["dueTime"].as_i64().unwrap();
    assert!(
        (asked + 800..=now_ms() + 800 + crate::common::CLOCK_LEAD_MS).contains(&due),
        "{second}"
    );
    assert_eq!(journaled(env, &id), ("v2".to_string(), due));

    let got = env.receive_one("db").await;
    assert_eq!(got.id(), id);
    assert!(got.at >= due, "delivered at {} before {due}", got.at);
    assert_eq!(
        (&got.msg["body"], &got.msg["priority"], &got.msg["dueTime"]),
        (&json!("v2"), &json!(9), &json!(due)),
        "{}",
        got.msg
    );
    env.ack(&id).await.assert_ok();
    env.assert_nothing("db", 1).await;

    // The key is free once acked: the next push is a new message, and a
    // replace with nobody holding the key is a plain push.
    let fresh = push(
        env,
        json!({"topic": "db", "bizKey": "cart-1", "body": "v3", "onDuplicate": "replace"}),
    )
    .await;
    assert_ne!(fresh["id"], id.as_str());
    assert!(
        fresh.get("duplicate").is_none() && fresh.get("result").is_none(),
        "{fresh}"
    );
    let got = env.receive_one("db").await;
    assert_eq!(got.msg["body"], "v3");
    env.ack(got.id()).await.assert_ok();
    env.wait_status(got.id(), status::CONSUMED).await;
}

async fn extend_moves_the_due_time_only_later(b: Backend) {
    let env = Env::start(b).await;
    let msg = |delay: i64, on: &str| json!({"topic": "ex", "bizKey": "idle-7", "body": "b", "delay": delay, "onDuplicate": on});
    let first = push(&env, msg(1_500, "keep")).await;
    let id = first["id"].as_str().unwrap().to_string();
    let (_, due) = journaled(&env, &id);
    let later = push(&env, msg(3_000, "extend")).await;
    assert_eq!(
        (&later["id"], &later["result"]),
        (&json!(id), &json!("extended")),
        "{later}"
    );
    let extended = later["dueTime"].as_i64().unwrap();
    assert!(extended >= due + 1_400, "{later}");
    // Sooner than its time now: left as it was, and said so.
    let sooner = push(&env, msg(100, "extend")).await;
    assert_eq!(
        (&sooner["result"], &sooner["dueTime"]),
        (&json!("not_later"), &json!(extended)),
        "{sooner}"
    );
    // The body never changes with extend; keep (the default) says nothing.
    let kept = push(&env, msg(100, "keep")).await;
    assert_eq!(kept["duplicate"], true);
    assert!(kept.get("result").is_none(), "{kept}");
    assert_eq!(journaled(&env, &id), ("b".to_string(), extended));

    let got = env.receive_one("ex").await;
    assert_eq!(got.id(), id);
    assert!(
        got.at >= extended,
        "delivered at {} before {extended}",
        got.at
    );
    assert_eq!(got.msg["dueTime"], extended);

    // Without a bizKey onDuplicate has nothing to act on: refused.
    env.post_json(
        "/push",
        &json!({"topic": "ex", "body": "b", "onDuplicate": "replace"}),
    )
    .await
    .assert_error(400, "invalid_field");
    env.post_json(
        "/push",
        &json!({"topic": "ex", "bizKey": "k", "body": "b", "onDuplicate": "merge"}),
    )
    .await
    .assert_error(400, "invalid_field");
}

async fn a_message_in_flight_is_left_alone(b: Backend) {
    let env = Env::start(b).await;
    let first = push(
        &env,
        json!({"topic": "fl", "bizKey": "job-3", "body": "v1"}),
    )
    .await;
    let id = first["id"].as_str().unwrap().to_string();
    let got = env.receive_one("fl").await;
    assert_eq!(got.id(), id);
    let (_, due) = journaled(&env, &id);
    let r = push(
        &env,
        json!({"topic": "fl", "bizKey": "job-3", "body": "v2", "delay": 5_000,
               "onDuplicate": "replace"}),
    )
    .await;
    assert_eq!(
        (&r["id"], &r["result"]),
        (&json!(id), &json!("in_flight")),
        "{r}"
    );
    assert!(r.get("dueTime").is_none(), "{r}");
    // The journal says what was delivered: the first body, its time.
    assert_eq!(journaled(&env, &id), ("v1".to_string(), due));
    let shown = env.message(&id).await;
    assert_eq!(shown["message"]["body"], "v1", "{shown}");
    // An extend leaves it alone too, its time included.
    let r = push(
        &env,
        json!({"topic": "fl", "bizKey": "job-3", "body": "v3", "delay": 3_600_000,
               "onDuplicate": "extend"}),
    )
    .await;
    assert_eq!(r["result"], "in_flight", "{r}");
    assert_eq!(journaled(&env, &id), ("v1".to_string(), due));

    // A nack's retry wait, set in Redis: an extend to a time before it
    // does not cut it short, whatever the journal has heard yet.
    let nacked = env
        .send(env.http.post(env.url(&format!("/nack/{id}?delay=2500"))))
        .await;
    nacked.assert_ok();
    let retry_at = now_ms() + 2_300;
    let r = push(
        &env,
        json!({"topic": "fl", "bizKey": "job-3", "body": "v4", "delay": 500,
               "onDuplicate": "extend"}),
    )
    .await;
    assert!(
        r["dueTime"].as_i64().is_some_and(|d| d >= retry_at),
        "an extend to 500 ms answered {r}, the retry is due at {retry_at} or later"
    );
    let again = env.receive_one("fl").await;
    assert_eq!(again.id(), id);
    assert!(
        again.at >= retry_at,
        "handed out again at {}, before {retry_at}",
        again.at
    );
    assert_eq!(again.msg["body"], "v1");
    env.ack(&id).await.assert_ok();
    env.assert_nothing("fl", 1).await;
}

async fn a_restore_schedules_the_replaced_state(b: Backend) {
    let env = Env::start(b).await;
    let first = push(
        &env,
        json!({"topic": "rs", "bizKey": "k", "body": "v1", "delay": 60_000}),
    )
    .await;
    let id = first["id"].as_str().unwrap().to_string();
    let r = push(
        &env,
        json!({"topic": "rs", "bizKey": "k", "body": "v2", "delay": 1_500,
               "onDuplicate": "replace"}),
    )
    .await;
    let due = r["dueTime"].as_i64().unwrap();
    env.wait_journaled().await;
    // Redis loses everything it held; the journal brings it back.
    env.redis.wipe_schedule(&env.keys);
    let report = env.get_path("/reStore?expire=true").await;
    assert_eq!(report.assert_ok()["restored"], 1, "{}", report.text);
    let got = env.receive_one("rs").await;
    assert_eq!(got.id(), id);
    assert!(got.at >= due, "delivered at {} before {due}", got.at);
    assert_eq!(got.msg["body"], "v2", "{}", got.msg);
}

async fn a_burst_of_replaces_delivers_one_message_with_the_last_body(b: Backend) {
    let env = Env::start(b).await;
    // 20 in a row, as a user typing: each replaces the one before, the
    // time moving on each time.
    let mut ids = Vec::new();
    for i in 0..20 {
        let r = push(
            &env,
            json!({"topic": "bu", "bizKey": "search-box", "body": format!("q{i}"),
                   "delay": 700, "onDuplicate": "replace"}),
        )
        .await;
        ids.push(r["id"].as_str().unwrap().to_string());
    }
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    // Then 20 at once, from concurrent producers: one survives.
    let bodies: Vec<Value> = (0..20)
        .map(|i| {
            json!({"topic": "bu", "bizKey": "search-box-2", "body": format!("c{i}"),
                   "delay": 700, "onDuplicate": "replace"})
        })
        .collect();
    let pushes = bodies.iter().map(|b| env.post_json("/push", b));
    let answers = futures::future::join_all(pushes).await;
    let concurrent: Vec<String> = answers
        .iter()
        .map(|r| r.assert_ok()["id"].as_str().unwrap().to_string())
        .collect();
    assert!(concurrent.iter().all(|id| *id == concurrent[0]));
    // And a batch whose second message replaces its first.
    let batch = env
        .post_json(
            "/push/batch",
            &json!({"messages": [
                {"topic": "bu", "bizKey": "batch", "body": "first", "delay": 60_000},
                {"topic": "bu", "bizKey": "batch", "body": "second", "delay": 300,
                 "onDuplicate": "replace"},
            ]}),
        )
        .await;
    let batch = batch.assert_ok().clone();
    assert_eq!(batch["duplicates"], json!([1]), "{batch}");
    assert_eq!(batch["updates"][0]["index"], 1, "{batch}");
    assert_eq!(batch["updates"][0]["result"], "replaced", "{batch}");

    let got = env.collect("bu", 3, Duration::from_secs(10)).await;
    let mut bodies: Vec<(String, String)> = got
        .iter()
        .map(|r| {
            (
                r.id().to_string(),
                r.msg["body"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    bodies.sort();
    assert_eq!(got.len(), 3, "{bodies:?}");
    let by_id = |id: &str| bodies.iter().find(|(i, _)| i == id).map(|(_, b)| b.clone());
    assert_eq!(by_id(&ids[0]).as_deref(), Some("q19"));
    assert_eq!(
        by_id(batch["ids"][0].as_str().unwrap()).as_deref(),
        Some("second")
    );
    // The concurrent one: some producer's body, the journal's too.
    let c = by_id(&concurrent[0]).unwrap();
    assert!(c.starts_with('c'), "{c}");
    assert_eq!(journaled(&env, &concurrent[0]).0, c);
    for r in &got {
        env.ack(r.id()).await.assert_ok();
    }
    env.assert_nothing("bu", 1).await;
}

/// On a Redis Cluster, the record swap and the score move of a replace
/// run on the master holding the message's shard.
#[tokio::test(flavor = "multi_thread")]
async fn replace_works_on_a_redis_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = RedisCluster::start(dir.path());
    let env = Env::builder(Backend::Postgres)
        .redis_url(&cluster.url)
        .start()
        .await;
    for _ in 0..3 {
        replace_round(&env).await;
    }
}

/// A message Redis does not hold when a push replaces it (lost, here; or
/// beyond the horizon, or its push's schedule still on its way): whatever
/// schedules it from a reading of the journal older than the replace (the
/// horizon loader, a restore, the reconciler) brings the new body, at the
/// new time, not the one it read.
#[tokio::test(flavor = "multi_thread")]
async fn a_schedule_from_a_reading_before_the_replace_brings_the_new_body() {
    use delayq::redis::schedule::RedisSchedule;

    let env = Env::start(Backend::Sqlite).await;
    let con = delayq::redis::connect(&env.redis.url()).await.unwrap();
    let redis = RedisSchedule::new(con, env.keys.clone(), "test")
        .await
        .unwrap();
    let first = push(
        &env,
        json!({"topic": "old", "bizKey": "k", "body": "v1", "delay": 60_000}),
    )
    .await;
    let id = first["id"].as_str().unwrap().to_string();
    // In Redis (the journal's own Delaying row may lag on a loaded machine).
    let by = std::time::Instant::now() + Duration::from_secs(10);
    while !env.scheduled_in_redis(&id) {
        assert!(std::time::Instant::now() < by, "{id} never reached Redis");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A reading of the journal from before the replace.
    let read_at = now_ms();
    let old = env.journal.row(&id).unwrap();
    // Redis loses the message; the replace finds it absent.
    env.redis.wipe_schedule(&env.keys);
    let r = push(
        &env,
        json!({"topic": "old", "bizKey": "k", "body": "v2", "delay": 500,
               "onDuplicate": "replace"}),
    )
    .await;
    assert_eq!(r["result"], "replaced", "{r}");
    let due = r["dueTime"].as_i64().unwrap();
    // The old reading lands.
    redis
        .schedule(&[(old.message(), old.attempts)], read_at)
        .await
        .unwrap();
    let got = env.receive_one("old").await;
    assert_eq!(got.id(), id);
    assert!(got.at >= due, "delivered at {} before {due}", got.at);
    assert_eq!(
        (&got.msg["body"], &got.msg["dueTime"]),
        (&json!("v2"), &json!(due)),
        "{}",
        got.msg
    );
}

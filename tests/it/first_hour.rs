//! What a new user trips over in the first hour, each against a real
//! server: a typo in a parameter or a field never does the real thing, a
//! request names one message the way one writes it first, and an answer
//! says what happened.

use crate::common::{Backend, Env};
use serde_json::json;

/// A dead letter in topic `dl`, and the state to compare with.
async fn with_a_dead_letter(env: &Env) -> String {
    let id = env
        .push(json!({"topic": "dl", "body": "x", "maxAttempts": 1}))
        .await;
    assert_eq!(env.receive_one("dl").await.id(), id);
    let r = env
        .send(env.http.post(env.url(&format!("/nack/{id}"))))
        .await;
    assert_eq!(r.assert_ok()["result"], "dead", "{}", r.text);
    env.wait_history(&id, &["WaitPut", "Delaying", "Ready", "Consuming", "Dead"])
        .await;
    id
}

/// An unknown query parameter, or one given twice, is a 400 on every
/// route, before anything is done: `?bogus=1` beside a requeue used to
/// requeue every dead letter, and `dryrun` for `dryRun` ran a restore.
#[tokio::test(flavor = "multi_thread")]
async fn unknown_and_repeated_parameters_are_refused_on_every_route() {
    let env = Env::start(Backend::Sqlite).await;
    // A brand-new SQLite journal is made without news of a rebuild.
    let log = std::fs::read_to_string(&env.server.log).unwrap();
    assert!(!log.contains("rebuilding"), "{log}");
    let dead = with_a_dead_letter(&env).await;
    let before = env.stored();
    let post = |path: &str| env.http.post(env.url(path));
    let get = |path: &str| env.http.get(env.url(path));
    for (what, req, code) in [
        (
            "requeue ?bogus",
            post("/dead/dl/requeue?bogus=1"),
            "unknown_parameter",
        ),
        (
            "requeue id ?bogus",
            post(&format!("/dead/{dead}/requeue?bogus=1")),
            "unknown_parameter",
        ),
        (
            "requeue limit twice",
            post("/dead/dl/requeue?limit=1&limit=2"),
            "invalid_parameter",
        ),
        (
            "restore dryrun",
            get("/reStore?dryrun=true"),
            "unknown_parameter",
        ),
        (
            "restore one ?bogus",
            get(&format!("/reStore/{dead}?dryrun=1")),
            "unknown_parameter",
        ),
        (
            "delete ?bogus",
            get(&format!("/delete?id={dead}&bogus=1")),
            "unknown_parameter",
        ),
        (
            "delete id twice",
            get(&format!("/delete?id=1&id={dead}")),
            "invalid_parameter",
        ),
        (
            "get ?bogus",
            get("/get/dl?timeout=0&bogus=1"),
            "unknown_parameter",
        ),
        (
            "get timeout twice",
            get("/get/dl?timeout=0&timeout=1"),
            "invalid_parameter",
        ),
        ("topics ?bogus", get("/topics?bogus=1"), "unknown_parameter"),
        ("dead ?bogus", get("/dead/dl?bogus=1"), "unknown_parameter"),
        (
            "reconcile ?repair typo",
            get("/admin/reconcile?repiar=true"),
            "unknown_parameter",
        ),
        (
            "pause ?bogus",
            post("/topics/dl/pause?bogus=1"),
            "unknown_parameter",
        ),
        (
            "resume ?bogus",
            post("/topics/dl/resume?bogus=1"),
            "unknown_parameter",
        ),
        (
            "push ?delay",
            post("/push?delay=5").json(&json!({"topic": "dl", "body": "y"})),
            "unknown_parameter",
        ),
        (
            "message ?bogus",
            get(&format!("/messages/{dead}?bogus=1")),
            "unknown_parameter",
        ),
    ] {
        let r = env.send(req).await;
        assert_eq!(r.status, 400, "{what}: {}", r.text);
        r.assert_error(400, code);
        env.assert_unchanged(&before, what);
    }
    // The dead letter is still dead, and the good requests still work.
    let r = env.get_path("/dead/dl").await;
    assert_eq!(
        r.assert_ok()["messages"][0]["id"],
        dead.as_str(),
        "{}",
        r.text
    );
    env.get_path("/reStore?dryRun=true").await.assert_ok();
    env.get_path("/get/dl?timeout=0&count=1").await.assert_ok();
}

/// A JSON object naming a key twice is refused (last-one-wins would drop
/// what was sent), and so is a batch field that applies to no message.
#[tokio::test(flavor = "multi_thread")]
async fn repeated_keys_and_stray_batch_fields_are_refused() {
    let env = Env::start(Backend::Sqlite).await;
    let id = env
        .push(json!({"topic": "t", "body": "state", "delay": 600_000}))
        .await;
    env.wait_history(&id, &["WaitPut", "Delaying"]).await;
    let before = env.stored();
    for (what, path, body, code) in [
        (
            "delay twice",
            "/push",
            r#"{"topic": "t", "body": "x", "delay": 600000, "delay": 0}"#,
            "invalid_json",
        ),
        (
            "nested key twice",
            "/push",
            r#"{"topic": "t", "body": {"a": 1, "a": 2}}"#,
            "invalid_json",
        ),
        (
            "batch delay beside messages",
            "/push/batch",
            r#"{"delay": 600000, "messages": [{"topic": "t", "body": "x"}]}"#,
            "unknown_field",
        ),
        (
            "batch message key twice",
            "/push/batch",
            r#"{"messages": [{"topic": "t", "topic": "u", "body": "x"}]}"#,
            "invalid_json",
        ),
        (
            "cancel ids twice",
            "/cancel",
            r#"{"ids": ["1"], "ids": ["2"]}"#,
            "invalid_json",
        ),
    ] {
        let r = env.post_raw(path, "application/json", body).await;
        r.assert_error(400, code);
        assert!(
            code != "invalid_json" || r.text.contains("given twice"),
            "{what}: {}",
            r.text
        );
        env.assert_unchanged(&before, what);
    }
}

/// `{"id": ID}` names one message to reschedule or cancel, as one writes
/// it first; a bizKey that no live message holds is `not_found`, not an
/// empty list.
#[tokio::test(flavor = "multi_thread")]
async fn one_id_and_unmatched_keys_say_what_happened() {
    let env = Env::start(Backend::Sqlite).await;
    let id = env
        .push(json!({"topic": "t", "body": "x", "bizKey": "k1", "delay": 600_000}))
        .await;
    let r = env
        .post_json("/reschedule", &json!({"id": id, "delay": 900_000}))
        .await;
    let body = r.assert_ok();
    assert_eq!(body["rescheduled"], 1, "{}", r.text);
    assert_eq!(body["results"][0]["id"], id.as_str());
    let r = env
        .post_json("/reschedule", &json!({"id": id, "ids": [id], "delay": 1}))
        .await;
    r.assert_error(400, "invalid_body");
    for path in ["/reschedule", "/cancel"] {
        let mut req = json!({"topic": "t", "bizKey": "no-such-key"});
        if path == "/reschedule" {
            req["delay"] = json!(1000);
        }
        let r = env.post_json(path, &req).await;
        r.assert_error(404, "not_found");
        assert!(r.text.contains("no-such-key"), "{}", r.text);
    }
    let r = env.post_json("/cancel", &json!({"id": id})).await;
    let body = r.assert_ok();
    assert_eq!(body["deleted"], 1, "{}", r.text);
    assert_eq!(body["results"][0]["result"], "deleted");
    // A mistyped id in a requeue is neither a message nor a topic with
    // dead letters: the answer says both, rather than "requeued 0".
    let r = env.send(env.http.post(env.url("/dead/1/requeue"))).await;
    r.assert_error(404, "not_found");
    assert!(r.text.contains("no message has id 1"), "{}", r.text);
}

backend_tests!(search_pages_are_full_until_the_last);

/// The pages of a search, following `next`: each page's ids.
async fn pages(env: &Env, query: &str) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut after = String::new();
    loop {
        let r = env.get_path(&format!("/messages?{query}{after}")).await;
        let body = r.assert_ok();
        let ids = body["messages"].as_array().unwrap().iter();
        pages.push(ids.map(|m| m["id"].as_str().unwrap().to_string()).collect());
        match body["next"].as_str() {
            Some(next) => after = format!("&after={next}"),
            None => return pages,
        }
        assert!(pages.len() < 20, "{query}: {pages:?}");
    }
}

/// Search pages are full until the last and `next` is null on the last,
/// on every journal: keys that match the prefix only in another case (SQL
/// `LIKE` ignores case on SQLite and MySQL) no longer make short pages,
/// and a last page that is exactly full has no empty page after it.
async fn search_pages_are_full_until_the_last(b: Backend) {
    let env = Env::start(b).await;
    let mut matching = Vec::new();
    for key in ["A-1", "a-2", "A-3", "a-4", "a-5", "A-6", "A-7", "a-8"] {
        let id = env
            .push(json!({"topic": "s", "bizKey": key, "body": key, "delay": 600_000}))
            .await;
        if key.starts_with('A') {
            matching.push(id.clone());
        }
        env.wait_history(&id, &["WaitPut", "Delaying"]).await;
    }
    let got = pages(&env, "topic=s&bizKeyPrefix=A-&limit=2").await;
    let sizes: Vec<usize> = got.iter().map(Vec::len).collect();
    assert_eq!(sizes, [2, 2], "{got:?}");
    assert_eq!(got.concat(), matching);
    let got = pages(&env, "topic=s&bizKeyPrefix=A-&limit=3").await;
    let sizes: Vec<usize> = got.iter().map(Vec::len).collect();
    assert_eq!(sizes, [3, 1], "{got:?}");
    let got = pages(&env, "topic=s&status=Delaying&limit=4").await;
    let sizes: Vec<usize> = got.iter().map(Vec::len).collect();
    assert_eq!(sizes, [4, 4], "{got:?}");
}

/// `GET /topics` lists every topic the journal holds messages of, finished
/// ones too (until retention removes them), with their finished counts; a
/// pause tells a topic it knows from a new name.
#[tokio::test(flavor = "multi_thread")]
async fn topics_are_listed_while_the_journal_keeps_them_and_pauses_say_whether_known() {
    let env = Env::start(Backend::Sqlite).await;
    let done = env.push(json!({"topic": "done", "body": "x"})).await;
    assert_eq!(env.receive_one("done").await.id(), done);
    env.ack(&done).await.assert_ok();
    let gone = env
        .push(json!({"topic": "gone", "body": "x", "delay": 600_000}))
        .await;
    env.delete(&gone).await.assert_ok();
    crate::common::wait_until(
        "both topics listed with their finished counts",
        std::time::Duration::from_secs(10),
        || async {
            let r = env.get_path("/topics").await;
            let topics = r.assert_ok()["topics"].clone();
            let counts = |name: &str| {
                topics
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|t| t["topic"] == name)
                    .map(|t| t["counts"].clone())
            };
            match (counts("done"), counts("gone")) {
                (Some(d), Some(g)) if d["consumed"] == 1 && g["deleted"] == 1 => Ok(()),
                _ => Err(r.text.clone()),
            }
        },
    )
    .await;
    for (topic, known) in [("done", true), ("never-pushed", false)] {
        let r = env
            .send(env.http.post(env.url(&format!("/topics/{topic}/pause"))))
            .await;
        let body = r.assert_ok();
        assert_eq!(body["known"], known, "{topic}: {}", r.text);
        assert_eq!(body["paused"], true, "{topic}: {}", r.text);
    }
    // Paused ahead of its first push, the new name is known from then on.
    let r = env
        .send(env.http.post(env.url("/topics/never-pushed/pause")))
        .await;
    assert_eq!(r.assert_ok()["known"], true, "{}", r.text);
    assert_eq!(r.json["changed"], false, "{}", r.text);
}

/// Refusals say what is accepted, in the API's words: a number too large
/// to read, a cron field out of range, a null where a value or nothing
/// belongs.
#[tokio::test(flavor = "multi_thread")]
async fn refusals_say_what_is_accepted() {
    let env = Env::start(Backend::Sqlite).await;
    let r = env
        .post_raw(
            "/push",
            "application/json",
            r#"{"topic": "t", "body": "x", "delay": 18446744073709551615}"#,
        )
        .await;
    r.assert_error(400, "invalid_delay");
    assert!(
        r.text.contains("delay must be 0 to 315360000000 ms"),
        "{}",
        r.text
    );
    let r = env
        .post_json(
            "/push",
            &json!({"topic": "t", "body": "x", "repeat": {"cron": "0 25 * * *"}}),
        )
        .await;
    r.assert_error(400, "invalid_repeat");
    assert!(r.text.contains("hours are 0 to 23"), "{}", r.text);
    let id = env
        .push(json!({"topic": "t", "body": "x", "delay": 600_000}))
        .await;
    let r = env
        .post_json("/reschedule", &json!({"ids": [id], "priority": null}))
        .await;
    r.assert_error(400, "invalid_priority");
    assert!(r.text.contains("leave priority out"), "{}", r.text);
}

/// A receipt of an earlier delivery is refused before and after the
/// current holder acks (not 409 first and 200 `Consumed` later), and a
/// receipt no delivery was handed out with is not called an earlier one.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_receipt_stays_stale_and_a_made_up_one_is_named_so() {
    let env = Env::start(Backend::Sqlite).await;
    let id = env
        .push(json!({"topic": "r", "body": "x", "ttl": 300}))
        .await;
    let first = env.receive_one("r").await;
    assert_eq!(first.id(), id);
    let first = first.msg["receipt"].as_str().unwrap().to_string();
    // Not acked within its ttl: handed out again.
    let second = env.receive_one("r").await;
    assert_eq!(second.id(), id);
    let second = second.msg["receipt"].as_str().unwrap().to_string();
    assert_ne!(first, second);
    let ack = |receipt: String| {
        let env = &env;
        let id = id.clone();
        async move {
            env.send(
                env.http
                    .post(env.url(&format!("/ack/{id}?receipt={receipt}"))),
            )
            .await
        }
    };
    let r = ack(first.clone()).await;
    r.assert_error(409, "stale_delivery");
    assert!(r.text.contains("an earlier delivery"), "{}", r.text);
    let made_up = format!("7-{}", 4_000_000_000_000i64);
    let r = ack(made_up.clone()).await;
    r.assert_error(409, "stale_delivery");
    assert!(r.text.contains("names no delivery"), "{}", r.text);
    assert_eq!(ack(second.clone()).await.assert_ok()["status"], "Consumed");
    // Acking twice with the holder's receipt is fine; the earlier one
    // stays refused, before and after the journal has the ack.
    assert_eq!(ack(second).await.assert_ok()["status"], "Consumed");
    let r = ack(first.clone()).await;
    r.assert_error(409, "stale_delivery");
    env.wait_history(
        &id,
        &[
            "WaitPut",
            "Delaying",
            "Ready",
            "Consuming",
            "Ready",
            "Consuming",
            "Consumed",
        ],
    )
    .await;
    let r = ack(first).await;
    r.assert_error(409, "stale_delivery");
    assert!(r.text.contains("an earlier delivery"), "{}", r.text);
    let r = ack(made_up).await;
    r.assert_error(409, "stale_delivery");
}

/// A restore counts overdue messages Redis holds already as present (not
/// "skipped (expired)"), with or without `expire`, and `delayq restore`'s
/// progress line names every count of its report.
#[tokio::test(flavor = "multi_thread")]
async fn restore_counts_say_what_happened() {
    let env = Env::start(Backend::Sqlite).await;
    let ids = env
        .push_batch(
            (0..3)
                .map(|i| json!({"topic": "rs", "body": i.to_string()}))
                .collect(),
        )
        .await;
    env.wait_ready("rs", &ids).await;
    for query in ["", "?expire=true"] {
        let r = env.get_path(&format!("/reStore{query}")).await;
        let body = r.assert_ok();
        assert_eq!(
            (
                &body["alreadyPresent"],
                &body["skippedExpired"],
                &body["restored"]
            ),
            (&json!(3), &json!(0), &json!(0)),
            "{query}: {}",
            r.text
        );
    }
    let out = env.run_tool(&["restore"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("already present 3") && stderr.contains("beyond horizon 0"),
        "{stderr}"
    );
}

/// Right after an ack (or a delivery) is answered, `GET /messages/{id}`
/// says what Redis already did, not the journal's row of a few ms before.
#[tokio::test(flavor = "multi_thread")]
async fn the_message_view_says_what_redis_already_did() {
    let env = Env::start(Backend::Sqlite).await;
    for _ in 0..20 {
        let id = env.push(json!({"topic": "v", "body": "x"})).await;
        let got = env.receive_one("v").await;
        assert_eq!(got.id(), id);
        let m = env.message(&id).await;
        assert_eq!(
            (
                m["message"]["status"].as_str(),
                m["message"]["attempts"].as_i64()
            ),
            (Some("Consuming"), Some(1)),
            "{m}"
        );
        env.ack(&id).await.assert_ok();
        let m = env.message(&id).await;
        assert_eq!(m["message"]["status"], "Consumed", "{m}");
    }
}

backend_tests!(a_moves_history_row_says_where_it_sent_the_message);

/// A reschedule's history row carries the due time it set, on every
/// journal, and the message's `dueTime` is the new one.
async fn a_moves_history_row_says_where_it_sent_the_message(b: Backend) {
    let env = Env::start(b).await;
    let id = env
        .push(json!({"topic": "mv", "body": "x", "delay": 600_000}))
        .await;
    env.wait_history(&id, &["WaitPut", "Delaying"]).await;
    let r = env
        .post_json("/reschedule", &json!({"id": id, "delay": 900_000}))
        .await;
    let due = r.assert_ok()["results"][0]["dueTime"].as_i64().unwrap();
    let m = env
        .wait_history(&id, &["WaitPut", "Delaying", "Delaying"])
        .await;
    assert_eq!(m["history"][2]["dueTime"], due, "{m}");
    assert!(m["history"][0].get("dueTime").is_none(), "{m}");
    assert_eq!(m["message"]["dueTime"], due, "{m}");
}

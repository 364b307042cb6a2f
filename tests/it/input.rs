//! Bad input changes nothing: every malformed or out-of-contract request is
//! answered with a 4xx JSON error `{"error": code, "message": text}`, and
//! neither Redis nor the journal changes.

use crate::common::{Backend, Env, Reply};
use serde_json::{json, Value};

backend_tests!(
    bad_messages_change_nothing,
    bad_ids_and_parameters_change_nothing
);

const MAX_BODY: usize = 1024;
const TEN_YEARS_MS: i64 = 10 * 365 * 24 * 3600 * 1000;

/// A server with one message in it, and the state to compare with.
struct Fixture {
    env: Env,
    id: String,
    before: crate::common::env::Stored,
}

async fn fixture(b: Backend) -> Fixture {
    let env = Env::builder(b)
        .arg("--max-body-bytes")
        .arg(&MAX_BODY.to_string())
        .start()
        .await;
    let id = env
        .push(json!({"topic": "good", "bizKey": "bk", "body": "there is state", "delay": 600_000}))
        .await;
    // Let the asynchronous Delaying flow row land before taking the snapshot.
    env.wait_history(&id, &["WaitPut", "Delaying"]).await;
    let before = env.stored();
    assert!(!before.redis.is_empty());
    assert_eq!(before.journal, (1, 2));
    Fixture { env, id, before }
}

impl Fixture {
    #[track_caller]
    fn assert_unchanged(&self, what: &str) {
        self.env.assert_unchanged(&self.before, what);
    }
}

fn good(extra: Value) -> Value {
    let mut m = json!({"topic": "good", "body": "b"});
    for (k, v) in extra.as_object().unwrap() {
        m[k] = v.clone();
    }
    m
}

async fn bad_messages_change_nothing(b: Backend) {
    let f = fixture(b).await;
    let env = &f.env;
    let check = |what: String, r: Reply, status: u16, code: &'static str| {
        r.assert_error(status, code);
        f.assert_unchanged(&what);
    };

    // Not JSON, or not sent as JSON.
    check(
        "malformed JSON".into(),
        env.post_raw("/push", "application/json", "{\"topic\": \"good\", ")
            .await,
        400,
        "invalid_json",
    );
    check(
        "a text/plain body".into(),
        env.post_raw(
            "/push",
            "text/plain",
            json!({"topic": "good", "body": "b"}).to_string(),
        )
        .await,
        400,
        "invalid_content_type",
    );

    let cases: Vec<(&str, Value, u16, &str)> = vec![
        ("missing topic", json!({"body": "b"}), 400, "missing_topic"),
        (
            "topic with a space",
            good(json!({"topic": "a b"})),
            400,
            "invalid_topic",
        ),
        (
            "topic of 129 characters",
            good(json!({"topic": "x".repeat(129)})),
            400,
            "invalid_topic",
        ),
        (
            "empty topic",
            good(json!({"topic": ""})),
            400,
            "invalid_topic",
        ),
        (
            "topic not a string",
            good(json!({"topic": 5})),
            400,
            "invalid_topic",
        ),
        (
            "negative delay",
            good(json!({"delay": -1})),
            400,
            "invalid_delay",
        ),
        (
            "delay over 10 years",
            good(json!({"delay": TEN_YEARS_MS + 1})),
            400,
            "invalid_delay",
        ),
        (
            "delay as a float",
            good(json!({"delay": 1.5})),
            400,
            "invalid_field",
        ),
        (
            "delay as a string",
            good(json!({"delay": "100"})),
            400,
            "invalid_field",
        ),
        (
            "delay and deliverAt",
            good(json!({"delay": 100, "deliverAt": crate::common::now_ms() + 100})),
            400,
            "invalid_delay",
        ),
        (
            "deliverAt over 10 years ahead",
            good(json!({"deliverAt": crate::common::now_ms() + TEN_YEARS_MS + 60_000})),
            400,
            "invalid_delay",
        ),
        (
            "priority 300",
            good(json!({"priority": 300})),
            400,
            "invalid_priority",
        ),
        (
            "priority -1",
            good(json!({"priority": -1})),
            400,
            "invalid_priority",
        ),
        ("ttl 5", good(json!({"ttl": 5})), 400, "invalid_ttl"),
        (
            "body over the limit",
            good(json!({"body": "x".repeat(MAX_BODY + 1)})),
            413,
            "body_too_large",
        ),
        (
            "body as an object",
            good(json!({"body": {"a": 1}})),
            400,
            "invalid_body",
        ),
        (
            "missing body",
            json!({"topic": "good"}),
            400,
            "missing_body",
        ),
        (
            "empty bizKey",
            good(json!({"bizKey": ""})),
            400,
            "invalid_biz_key",
        ),
        (
            "unknown field",
            good(json!({"delayMs": 5})),
            400,
            "unknown_field",
        ),
        (
            "a message that is not an object",
            json!(["good", "b"]),
            400,
            "invalid_message",
        ),
    ];
    for (what, msg, status, code) in &cases {
        check(
            format!("push: {what}"),
            env.post_json("/push", msg).await,
            *status,
            code,
        );
    }
    // Every bad message, alone in a batch or among good ones, rejects the batch.
    for (what, msg, status, code) in &cases {
        let batch = json!({"messages": [good(json!({"topic": "other"})), msg, good(json!({"topic": "other", "body": "c"}))]});
        check(
            format!("batch: {what}"),
            env.post_json("/push/batch", &batch).await,
            *status,
            code,
        );
    }
    check(
        "empty batch".into(),
        env.post_json("/push/batch", &json!({"messages": []})).await,
        400,
        "invalid_batch",
    );
    let big: Vec<Value> = (0..1001)
        .map(|i| good(json!({"topic": "other", "body": format!("{i}")})))
        .collect();
    check(
        "batch of 1001".into(),
        env.post_json("/push/batch", &json!({"messages": big}))
            .await,
        400,
        "invalid_batch",
    );
    check(
        "batch without messages".into(),
        env.post_json("/push/batch", &json!([good(json!({}))]))
            .await,
        400,
        "invalid_batch",
    );
    check(
        "batch as text".into(),
        env.post_raw("/push/batch", "application/json", "{\"messages\": [")
            .await,
        400,
        "invalid_json",
    );

    // 15 MiB of tiny JSON values is refused before it is built: the
    // server's peak memory stays far below what parsing it would take.
    let junk = format!("[{}0]", "0,".repeat(15 << 19));
    check(
        "15 MiB of values".into(),
        env.post_raw("/push/batch", "application/json", junk).await,
        413,
        "payload_too_large",
    );
    let peak_kb = std::fs::read_to_string(format!("/proc/{}/status", env.server.pid().unwrap()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap();
    assert!(
        peak_kb < 160 * 1024,
        "peak memory {peak_kb} kB after a 15 MiB body of junk"
    );

    // None of the good messages of the rejected batches was delivered either.
    env.assert_nothing("other", 1).await;
    f.assert_unchanged("polling");

    // The limit itself is accepted.
    env.push(good(json!({"topic": "edge", "body": "x".repeat(MAX_BODY)})))
        .await;
}

async fn bad_ids_and_parameters_change_nothing(b: Backend) {
    let f = fixture(b).await;
    let env = &f.env;

    // Each id route, with an unknown id and with malformed ones.
    for (route, method) in [
        ("/delete?id=", "GET"),
        ("/ack/", "POST"),
        ("/messages/", "GET"),
        ("/reStore/", "GET"),
    ] {
        let call = |id: &str| {
            let url = env.url(&format!("{route}{id}"));
            let req = if method == "GET" {
                env.http.get(url)
            } else {
                env.http.post(url)
            };
            env.send(req)
        };
        call("12345").await.assert_error(404, "not_found");
        f.assert_unchanged(&format!("{method} {route}12345"));
        for bad in ["abc", "-5", "0", "1.5", "99999999999999999999"] {
            call(bad).await.assert_error(400, "invalid_id");
            f.assert_unchanged(&format!("{method} {route}{bad}"));
        }
    }
    // Acking a message that was never delivered is a conflict, and changes nothing.
    env.ack(&f.id).await.assert_error(409, "not_in_flight");
    f.assert_unchanged("an early ack");

    let polls = [
        ("/get/a%20b", "invalid_topic"),
        (&*format!("/get/{}", "x".repeat(129)), "invalid_topic"),
        ("/get/good?count=0", "invalid_parameter"),
        ("/get/good?count=101", "invalid_parameter"),
        ("/get/good?count=-1", "invalid_parameter"),
        ("/get/good?timeout=abc", "invalid_parameter"),
        ("/get/good?timeout=-1", "invalid_parameter"),
        ("/reStore?expire=maybe", "invalid_parameter"),
    ];
    for (path, code) in polls {
        env.get_path(path).await.assert_error(400, code);
        f.assert_unchanged(path);
    }

    // Unknown routes and methods: 404 JSON.
    for (method, path) in [
        ("GET", "/nope"),
        ("PUT", "/get/good"),
        ("GET", "/nack/12345"),
        ("GET", "/push"),
        ("DELETE", "/messages/12345"),
    ] {
        let req = env.http.request(method.parse().unwrap(), env.url(path));
        let r = env.send(req).await;
        r.assert_error(404, "no_such_route");
        f.assert_unchanged(&format!("{method} {path}"));
    }
}

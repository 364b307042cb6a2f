//! Forwarding to real brokers and a real webhook: every due message ends
//! in the broker (or was confirmed by the webhook), never before its due
//! time, and a broker restart in the middle loses nothing.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::common::brokers::{Nats, RabbitMq};
use crate::common::webhook::Hook;
use crate::common::*;
use futures::StreamExt;
use serde_json::{json, Value};

/// Messages due over the next `spread_ms`, on `topic`.
fn spread(topic: &str, n: usize, spread_ms: i64) -> Vec<Value> {
    let start = now_ms() + 500;
    (0..n)
        .map(|i| {
            json!({
                "topic": topic,
                "deliverAt": start + spread_ms * i as i64 / n as i64,
                "body": format!("{{\"n\":{i}}}"),
            })
        })
        .collect()
}

/// Pushes `messages` (each with its `deliverAt`): their ids and due times.
async fn push(env: &Env, messages: Vec<Value>) -> (Vec<String>, Vec<i64>) {
    let due = messages
        .iter()
        .map(|m| m["deliverAt"].as_i64().unwrap())
        .collect();
    (env.push_batch(messages).await, due)
}

/// Waits (up to `within`) until every id is Consumed in the journal: the
/// broker confirmed it and delayq acked it. Then checks that none was
/// handed out before its due time.
async fn wait_consumed(env: &Env, (ids, due): &(Vec<String>, Vec<i64>), within: Duration) {
    let deadline = Instant::now() + within;
    let mut left: Vec<&String> = ids.iter().collect();
    while !left.is_empty() {
        left.retain(|id| env.journal.row(id).unwrap().status != status::CONSUMED);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} messages not forwarded, e.g. {:?}; log:\n{}",
            left.len(),
            ids.len(),
            env.journal.history(left[0]),
            env.server.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (id, &due) in ids.iter().zip(due) {
        for h in env.journal.history(id) {
            if h.status == status::CONSUMING {
                assert!(
                    h.flow_time >= due,
                    "{id} handed out {} ms early",
                    due - h.flow_time
                );
            }
        }
    }
}

fn ids_of(payloads: &[Value]) -> Vec<String> {
    payloads
        .iter()
        .map(|p| {
            p["id"]
                .as_str()
                .expect("a forwarded message has its id")
                .to_string()
        })
        .collect()
}

/// How many of `ids` were handed to the forwarder (last) after `at`.
fn handed_out_after(env: &Env, ids: &[String], at: i64) -> usize {
    ids.iter()
        .filter(|id| {
            env.journal
                .history(id)
                .iter()
                .any(|h| h.status == status::CONSUMING && h.flow_time > at)
        })
        .count()
}

/// Asserts every pushed message arrived, and nothing else; returns how
/// many arrived twice (delivery is at least once).
fn assert_all_arrived(pushed: &[String], arrived: &[String]) -> usize {
    let want: HashSet<&String> = pushed.iter().collect();
    let got: HashSet<&String> = arrived.iter().collect();
    let missing: Vec<_> = want.difference(&got).collect();
    let unknown: Vec<_> = got.difference(&want).collect();
    assert!(missing.is_empty(), "lost: {missing:?}");
    assert!(unknown.is_empty(), "not pushed: {unknown:?}");
    arrived.len() - got.len()
}

#[tokio::test(flavor = "multi_thread")]
async fn rabbitmq_gets_every_message_across_a_broker_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut rabbit = RabbitMq::start(dir.path());
    let conn = connect_rabbit(&rabbit.url()).await;
    let channel = conn.create_channel().await.unwrap();
    channel
        .queue_declare(
            "orders".into(),
            lapin::options::QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            Default::default(),
        )
        .await
        .unwrap();
    drop(conn);

    let env = Env::builder(Backend::Sqlite)
        .arg("--forward")
        .arg(&format!("orders={}", rabbit.url()))
        .start()
        .await;
    let pushed = push(&env, spread("orders", 200, 6_000)).await;
    let ids = &pushed.0;
    // Some are forwarded, then the broker dies and comes back.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    rabbit.kill();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    // Counted from the restart's start: the forwarder may reconnect the
    // moment the port answers, before the broker's start-up check returns.
    let back = now_ms();
    rabbit.restart();
    wait_consumed(&env, &pushed, Duration::from_secs(90)).await;

    // Everything confirmed is in the durable queue.
    let conn = connect_rabbit(&rabbit.url()).await;
    let channel = conn.create_channel().await.unwrap();
    let mut payloads = Vec::new();
    while let Some(m) = channel
        .basic_get(
            "orders".into(),
            lapin::options::BasicGetOptions { no_ack: true },
        )
        .await
        .unwrap()
    {
        let v: Value = serde_json::from_slice(&m.delivery.data).unwrap();
        assert_eq!(v["topic"], "orders");
        assert_eq!(
            m.delivery
                .properties
                .message_id()
                .as_ref()
                .map(|s| s.to_string()),
            v["id"].as_str().map(str::to_string),
            "the AMQP message id is delayq's"
        );
        payloads.push(v);
    }
    let twice = assert_all_arrived(ids, &ids_of(&payloads));
    let after = handed_out_after(&env, ids, back);
    eprintln!(
        "rabbitmq: {} forwarded, {after} after the restart, {twice} twice",
        ids.len()
    );
    assert!(after > 0, "the forwarder reconnected after the restart");
    let body: Value = serde_json::from_str(payloads[0]["body"].as_str().unwrap()).unwrap();
    assert!(body["n"].is_u64(), "the body travels as pushed: {body}");
}

async fn connect_rabbit(url: &str) -> lapin::Connection {
    let every = Duration::from_millis(500);
    wait_every(
        "a connection to RabbitMQ",
        Duration::from_secs(60),
        every,
        || lapin::Connection::connect(url, Default::default()),
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn nats_jetstream_gets_every_message_once_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut nats = Nats::start(dir.path());
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "ORDERS".into(),
        subjects: vec!["delayq.orders".into()],
        ..Default::default()
    })
    .await
    .unwrap();

    let env = Env::builder(Backend::Sqlite)
        .arg("--forward")
        .arg(&format!("orders={}?subject=delayq.orders", nats.url()))
        .start()
        .await;
    let pushed = push(&env, spread("orders", 200, 5_000)).await;
    let ids = &pushed.0;
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    nats.kill();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    nats.restart();
    let back = now_ms();
    wait_consumed(&env, &pushed, Duration::from_secs(60)).await;

    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let mut stream = js.get_stream("ORDERS").await.unwrap();
    let stored = stream.info().await.unwrap().state.messages;
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("check".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut payloads = Vec::new();
    let mut batch = consumer
        .fetch()
        .max_messages(stored as usize)
        .expires(Duration::from_secs(5))
        .messages()
        .await
        .unwrap();
    while let Some(m) = batch.next().await {
        let m = m.unwrap();
        let v: Value = serde_json::from_slice(&m.payload).unwrap();
        let header = m.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id"));
        assert_eq!(
            header.map(|h| h.to_string()),
            v["id"].as_str().map(str::to_string)
        );
        payloads.push(v);
    }
    let twice = assert_all_arrived(ids, &ids_of(&payloads));
    assert!(
        handed_out_after(&env, ids, back) > 0,
        "reconnected after the restart"
    );
    assert_eq!(
        twice, 0,
        "JetStream drops a repeat by its Nats-Msg-Id: each message once"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn webhooks_are_signed_retried_and_end_dead_after_the_last_attempt() {
    let hook = Hook::default();
    // Every message is refused on its first try; "never" ones always.
    let port = hook
        .clone()
        .start(|_, attempt| if attempt == 1 { 500 } else { 204 })
        .await;
    let secret = "s3cret";
    let env = Env::builder(Backend::Sqlite)
        .arg("--forward")
        .arg(&format!("hooks=http://127.0.0.1:{port}/delayq"))
        .arg("--forward-secret")
        .arg(secret)
        .start()
        .await;
    let pushed = push(&env, spread("hooks", 10, 1_000)).await;
    let ids = &pushed.0;
    // Allowed one attempt: its refusal makes it dead.
    let once = env
        .push(json!({"topic": "hooks", "delay": 200, "body": "once", "maxAttempts": 1}))
        .await;
    wait_consumed(&env, &pushed, Duration::from_secs(30)).await;
    env.wait_status(&once, status::DEAD).await;

    let received = hook.received.lock().unwrap().clone();
    let mut first_try: HashMap<String, i64> = HashMap::new();
    for (at, headers, body) in &received {
        // The signature is HMAC-SHA256 of "timestamp.body" under the secret.
        let ts: i64 = headers["x-delayq-timestamp"].parse().unwrap();
        assert_eq!(
            headers["x-delayq-signature"],
            delayq::forward::signature(secret.as_bytes(), ts, body),
            "signature of {}",
            String::from_utf8_lossy(body)
        );
        let v: Value = serde_json::from_slice(body).unwrap();
        let id = v["id"].as_str().unwrap().to_string();
        assert_eq!(headers["x-delayq-id"], id);
        assert!(*at >= v["dueTime"].as_i64().unwrap() || v["attempts"] != 1);
        match first_try.get(&id) {
            None => {
                first_try.insert(id, *at);
            }
            // Tried again 1 s after the refusal, not at once.
            Some(first) => assert!(*at - first >= 1_000, "{id} retried after {} ms", at - first),
        }
    }
    let got: Vec<String> = first_try.keys().cloned().collect();
    let mut all = ids.clone();
    all.push(once.clone());
    assert_all_arrived(&all, &got);
    assert_eq!(
        received.len(),
        2 * ids.len() + 1,
        "two tries each, one for the dead one"
    );
}

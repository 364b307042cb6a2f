//! A node killed (SIGKILL) in the middle of a burst: every message handed
//! out and not acked is delivered again after its ttl, none is lost, and
//! none whose ack was answered comes back.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::common::{now_ms, status, Backend, Env};
use serde_json::json;

backend_tests!(sigkill_mid_burst_redelivers_the_unacked_and_never_the_acked);

const N: usize = 2_000;

/// One poll of up to 100 messages: (id, attempts) each.
async fn poll(env: &Env, topic: &str) -> Vec<(String, i64)> {
    let r = env
        .get_path(&format!("/get/{topic}?count=100&timeout=1"))
        .await;
    if r.status != 200 {
        return Vec::new();
    }
    r.json["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_string(),
                m["attempts"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// Acks a batch (durable: answered once committed); the ids answered
/// `consumed`.
async fn ack(env: &Env, ids: &[String]) -> Vec<String> {
    let r = env.post_json("/ack", &json!({ "ids": ids })).await;
    if r.status != 200 {
        return Vec::new();
    }
    r.json["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["result"] == "consumed")
        .map(|x| x["id"].as_str().unwrap().to_string())
        .collect()
}

async fn sigkill_mid_burst_redelivers_the_unacked_and_never_the_acked(b: Backend) {
    let mut env = Env::start(b).await;
    let due = now_ms() + 1_500;
    let mut accepted = Vec::new();
    for chunk in 0..N / 1000 {
        accepted.extend(
            env.push_batch(
                (0..1000)
                    .map(|i| {
                        json!({"topic": "burst", "body": format!("{chunk}-{i}"),
                               "deliverAt": due, "ttl": 20_000})
                    })
                    .collect(),
            )
            .await,
        );
    }
    // id → when its ack was answered (ms)
    let mut acked: HashMap<String, i64> = HashMap::new();
    // (id, attempts, received at)
    let mut deliveries: Vec<(String, i64, i64)> = Vec::new();

    // Half the burst consumed and acked; then one batch handed out and the
    // node killed before its ack.
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked.len() < N / 2 && Instant::now() < deadline {
        let got = poll(&env, "burst").await;
        let at = now_ms();
        deliveries.extend(got.iter().map(|(id, a)| (id.clone(), *a, at)));
        let ids: Vec<String> = got.into_iter().map(|(id, _)| id).collect();
        for id in ack(&env, &ids).await {
            acked.insert(id, now_ms());
        }
    }
    assert!(
        acked.len() >= N / 2,
        "only {} acked before the kill",
        acked.len()
    );
    // Their ack deadline is no earlier than the poll's sending + the ttl.
    let sent = now_ms();
    let in_hand: Vec<String> = poll(&env, "burst")
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert!(!in_hand.is_empty(), "nothing handed out at the kill");
    let killed_at = now_ms();
    env.server.kill9();
    env.start_server().await;
    eprintln!("node back {} ms after the kill", now_ms() - killed_at);

    // Everything else, until every message is acked.
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.len() < N && Instant::now() < deadline {
        let got = poll(&env, "burst").await;
        let at = now_ms();
        deliveries.extend(got.iter().map(|(id, a)| (id.clone(), *a, at)));
        let ids: Vec<String> = got.into_iter().map(|(id, _)| id).collect();
        for id in ack(&env, &ids).await {
            acked.entry(id).or_insert_with(now_ms);
        }
    }
    let all: HashSet<&String> = accepted.iter().collect();
    let done: HashSet<&String> = acked.keys().collect();
    assert_eq!(
        all.difference(&done).count(),
        0,
        "messages never delivered and acked after the kill"
    );
    // Nothing whose ack was answered came back.
    for (id, attempts, at) in &deliveries {
        if let Some(&answered) = acked.get(id) {
            assert!(
                *at <= answered,
                "{id} delivered again (attempt {attempts}) after its ack was answered"
            );
        }
    }
    // What was in hand at the kill came back as a second attempt, after
    // its ttl (20 s: longer than the node takes to come back, about 14 s
    // while it waits for its worker id) ran out, not as soon as it was back.
    for id in &in_hand {
        let again = deliveries
            .iter()
            .find(|(d, a, _)| d == id && *a >= 2)
            .unwrap_or_else(|| panic!("{id}, handed out at the kill, never came back"));
        assert!(again.2 >= killed_at, "{id} came back before the kill");
        assert!(
            again.2 >= sent + 20_000,
            "{id} came back {} ms after it was handed out, before its ttl of 20 s",
            again.2 - sent
        );
    }
    // The journal agrees: every message Consumed.
    for id in &accepted {
        assert_eq!(
            env.journal.row(id).unwrap().status,
            status::CONSUMED,
            "{id}"
        );
    }
}

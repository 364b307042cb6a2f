//! Idempotent push: `(topic, bizKey)` is unique among live messages.

use crate::common::{Backend, Env};
use serde_json::json;

backend_tests!(
    repeated_biz_key_returns_the_live_message,
    batch_with_a_repeated_biz_key,
    cancelling_frees_the_biz_key,
    keys_and_topics_compare_exactly,
);

/// On every backend, `A-1`, `a-1` and `A-1 ` are three keys, and `T` and
/// `t` two topics.
async fn keys_and_topics_compare_exactly(b: Backend) {
    let env = Env::start(b).await;
    let mut ids = Vec::new();
    for (topic, key) in [("T", "A-1"), ("T", "a-1"), ("T", "A-1 "), ("t", "A-1")] {
        let r = env
            .post_json(
                "/push",
                &json!({"topic": topic, "bizKey": key, "body": "x", "delay": 60_000}),
            )
            .await;
        let body = r.assert_ok();
        assert!(
            body.get("duplicate").is_none(),
            "{topic}/{key:?} counted as a repeat"
        );
        ids.push(body["id"].as_str().unwrap().to_string());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4);
    // The same key again is a repeat.
    let r = env
        .post_json(
            "/push",
            &json!({"topic": "T", "bizKey": "a-1", "body": "y"}),
        )
        .await;
    assert_eq!(r.assert_ok()["duplicate"], true);
}

async fn repeated_biz_key_returns_the_live_message(b: Backend) {
    let env = Env::start(b).await;
    let msg = json!({"topic": "a", "bizKey": "order-17", "body": "first", "delay": 300});
    let r = env.post_json("/push", &msg).await;
    let id = r.assert_ok()["id"].as_str().unwrap().to_string();
    assert!(
        r.json.get("duplicate").is_none(),
        "a first push is not a duplicate: {}",
        r.text
    );

    let r = env
        .post_json(
            "/push",
            &json!({"topic": "a", "bizKey": "order-17", "body": "second", "delay": 0}),
        )
        .await;
    assert_eq!(r.assert_ok(), &json!({"id": id, "duplicate": true}));

    // The same bizKey on another topic is another message.
    let other = env
        .push(json!({"topic": "b", "bizKey": "order-17", "body": "other"}))
        .await;
    assert_ne!(other, id);

    // One delivery, with the first push's body.
    let got = env.receive_one("a").await;
    assert_eq!(
        (
            got.id(),
            got.msg["body"].as_str(),
            got.msg["bizKey"].as_str()
        ),
        (id.as_str(), Some("first"), Some("order-17"))
    );
    env.assert_nothing("a", 1).await;
    assert_eq!(env.journal.rows_by_biz_key("a", "order-17").len(), 1);

    // Once consumed, the bizKey is free again: a new push is a new message.
    env.ack(&id).await.assert_ok();
    let r = env
        .post_json(
            "/push",
            &json!({"topic": "a", "bizKey": "order-17", "body": "third"}),
        )
        .await;
    let third = r.assert_ok()["id"].as_str().unwrap().to_string();
    assert_ne!(third, id);
    assert!(r.json.get("duplicate").is_none(), "{}", r.text);
    let got = env.receive_one("a").await;
    assert_eq!(
        (got.id(), got.msg["body"].as_str()),
        (third.as_str(), Some("third"))
    );
    assert_eq!(env.journal.rows_by_biz_key("a", "order-17").len(), 2);
}

async fn batch_with_a_repeated_biz_key(b: Backend) {
    let env = Env::start(b).await;
    let ids = env
        .push_batch(vec![
            json!({"topic": "a", "bizKey": "k", "body": "1"}),
            json!({"topic": "a", "body": "2"}),
            json!({"topic": "a", "bizKey": "k", "body": "3"}),
            json!({"topic": "b", "bizKey": "k", "body": "4"}),
        ])
        .await;
    assert_eq!(ids.len(), 4);
    assert_eq!(
        ids[0], ids[2],
        "the same bizKey in one batch is one message: {ids:?}"
    );
    assert!(
        ids[0] != ids[1] && ids[0] != ids[3] && ids[1] != ids[3],
        "{ids:?}"
    );

    let got = env
        .collect("a", 2, std::time::Duration::from_secs(10))
        .await;
    let mut got_ids: Vec<&str> = got.iter().map(|r| r.id()).collect();
    got_ids.sort_unstable();
    let mut want = vec![ids[0].as_str(), ids[1].as_str()];
    want.sort_unstable();
    assert_eq!(got_ids, want);
    let body = got.iter().find(|r| r.id() == ids[0]).unwrap().msg["body"].clone();
    assert_eq!(body, "1", "the first of the batch is kept");
    env.assert_nothing("a", 1).await;
    assert_eq!(env.receive_one("b").await.id(), ids[3]);

    // Each message's answer says whether it was pushed: the repeat within
    // the batch, and one repeating a live message already there.
    let r = env
        .post_json(
            "/push/batch",
            &json!({"messages": [
                {"topic": "c", "bizKey": "k", "body": "1"},
                {"topic": "c", "bizKey": "k", "body": "2"},
                {"topic": "c", "body": "3"},
            ]}),
        )
        .await;
    let first = r.assert_ok().clone();
    assert_eq!(first["duplicates"], json!([1]), "{first}");
    let r = env
        .post_json(
            "/push/batch",
            &json!({"messages": [
                {"topic": "c", "body": "4"},
                {"topic": "c", "bizKey": "k", "body": "5"},
            ]}),
        )
        .await;
    let again = r.assert_ok().clone();
    assert_eq!(again["duplicates"], json!([1]), "{again}");
    assert_eq!(again["ids"][1], first["ids"][0], "{again}");
}

async fn cancelling_frees_the_biz_key(b: Backend) {
    let env = Env::start(b).await;
    let msg = json!({"topic": "a", "bizKey": "k", "body": "first", "delay": 60_000});
    let first = env.push(msg.clone()).await;
    env.delete(&first).await.assert_ok();
    let second = env.push(msg).await;
    assert_ne!(first, second, "a cancelled message's bizKey is free again");
    assert_eq!(env.journal.rows_by_biz_key("a", "k").len(), 2);
}

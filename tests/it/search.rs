//! `GET /messages?topic=…`: messages found by bizKey, bizKey prefix or
//! status, a page at a time, keys compared exactly.

use std::time::Duration;

use crate::common::{wait_until, Backend, Env};
use serde_json::json;

backend_tests!(messages_are_found_by_biz_key_prefix_and_status);

/// The ids a search answers, following `next` to the last page.
async fn all_pages(env: &Env, query: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut after = String::new();
    loop {
        let r = env.get_path(&format!("/messages?{query}{after}")).await;
        let body = r.assert_ok();
        for m in body["messages"].as_array().unwrap() {
            ids.push(m["id"].as_str().unwrap().to_string());
        }
        match body["next"].as_str() {
            Some(next) => after = format!("&after={next}"),
            None => return ids,
        }
    }
}

async fn messages_are_found_by_biz_key_prefix_and_status(b: Backend) {
    let env = Env::start(b).await;
    let later = |key: &str| json!({"topic": "orders", "bizKey": key, "body": key, "delay": 60_000});
    let mut orders = Vec::new();
    for k in 1..=4 {
        orders.push(env.push(later(&format!("order-{k}"))).await);
    }
    env.push(later("other-1")).await;
    env.push(json!({"topic": "orders", "body": "no key", "delay": 60_000}))
        .await;
    let cheap = env.push(later("50%-off")).await;
    env.push(later("50x-off")).await;
    // order-5 in flight, order-9 consumed.
    let in_flight = env
        .push(json!({"topic": "orders", "bizKey": "order-5", "body": "5"}))
        .await;
    assert_eq!(env.receive_one("orders").await.id(), in_flight);
    orders.push(in_flight.clone());
    let done = env
        .push(json!({"topic": "orders", "bizKey": "order-9", "body": "9"}))
        .await;
    assert_eq!(env.receive_one("orders").await.id(), done);
    env.ack(&done).await.assert_ok();

    // One key: the live message holding it, with its fields.
    let r = env.get_path("/messages?topic=orders&bizKey=order-2").await;
    let found = r.assert_ok()["messages"].as_array().unwrap().clone();
    assert_eq!(found.len(), 1, "{}", r.text);
    assert_eq!(found[0]["id"], orders[1].as_str());
    assert_eq!(found[0]["bizKey"], "order-2");
    assert_eq!(found[0]["body"], "order-2");
    assert!(r.json["next"].is_null(), "{}", r.text);
    // Once the journal has its ack, a finished message holds no key; keys
    // compare exactly.
    wait_until(
        "order-9 consumed in the journal",
        Duration::from_secs(10),
        || async {
            let ids = all_pages(&env, "topic=orders&status=Consumed").await;
            if ids == [done.clone()] {
                Ok(())
            } else {
                Err(format!("{ids:?}"))
            }
        },
    )
    .await;
    for key in ["order-9", "ORDER-2", "order-2%20"] {
        let r = env
            .get_path(&format!("/messages?topic=orders&bizKey={key}"))
            .await;
        assert_eq!(r.assert_ok()["messages"], json!([]), "{key}: {}", r.text);
    }

    // A prefix, two at a time: the live ones in id order.
    assert_eq!(
        all_pages(&env, "topic=orders&bizKeyPrefix=order-&limit=2").await,
        orders
    );
    // LIKE's wildcards are plain characters.
    assert_eq!(
        all_pages(&env, "topic=orders&bizKeyPrefix=50%25").await,
        vec![cheap]
    );
    assert_eq!(
        all_pages(&env, "topic=orders&bizKeyPrefix=Order-").await,
        Vec::<String>::new()
    );

    // With a status (the journal follows Redis within moments).
    wait_until(
        "order-5 in flight in the journal",
        Duration::from_secs(10),
        || async {
            let ids = all_pages(&env, "topic=orders&bizKeyPrefix=order-&status=Consuming").await;
            if ids == [in_flight.clone()] {
                Ok(())
            } else {
                Err(format!("{ids:?}"))
            }
        },
    )
    .await;
    wait_until(
        "the eight delaying ones, three a page",
        Duration::from_secs(10),
        || async {
            let ids = all_pages(&env, "topic=orders&status=Delaying&limit=3").await;
            if ids.len() == 8 {
                Ok(())
            } else {
                Err(format!("{ids:?}"))
            }
        },
    )
    .await;

    // Bad searches say why and change nothing.
    for (query, why) in [
        ("bizKey=order-1", "topic is required"),
        ("topic=orders", "give bizKey, bizKeyPrefix or status"),
        ("topic=orders&bizKey=a&bizKeyPrefix=b", "not both"),
        ("topic=orders&status=Sleeping", "status must be one of"),
        (
            "topic=orders&bizKey=order-1&status=Consumed",
            "live messages only",
        ),
        ("topic=orders&status=Ready&limit=0", "limit"),
        ("topic=orders&status=Ready&after=x", "after"),
    ] {
        let r = env.get_path(&format!("/messages?{query}")).await;
        r.assert_error(400, "invalid_parameter");
        assert!(
            r.json["message"].as_str().unwrap().contains(why),
            "{query}: {}",
            r.text
        );
    }
    env.get_path("/messages?topic=orders&status=Ready&colour=red")
        .await
        .assert_error(400, "unknown_parameter");
    for query in ["bizKey=", "bizKeyPrefix="] {
        env.get_path(&format!("/messages?topic=orders&{query}"))
            .await
            .assert_error(400, "invalid_biz_key");
    }
    env.get_path(&format!(
        "/messages?topic=orders&bizKey={}",
        "k".repeat(257)
    ))
    .await
    .assert_error(400, "invalid_biz_key");
    let r = env
        .get_path("/messages?topic=no%20spaces&status=Ready")
        .await;
    r.assert_error(400, "invalid_topic");
}

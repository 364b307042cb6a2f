//! Cancel (`GET /delete?id=`, and `POST /cancel` by ids, bizKey or bizKey
//! prefix): every outcome is definite, and a cancelled message is never
//! delivered.

use crate::common::{now_ms, status, Backend, Env};
use serde_json::json;

backend_tests!(
    cancel_before_delivery,
    cancel_after_delivery,
    cancel_unknown_or_malformed_id,
    bulk_cancel_by_ids_and_biz_key,
    bulk_cancel_by_biz_key_prefix,
    bad_bulk_cancels_change_nothing
);

async fn results(r: &crate::common::Reply) -> Vec<String> {
    r.assert_ok()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["result"].as_str().unwrap().to_string())
        .collect()
}

async fn bulk_cancel_by_ids_and_biz_key(b: Backend) {
    let env = Env::start(b).await;
    let ids = env
        .push_batch(
            (0..4)
                .map(|i| {
                    json!({"topic": "bc", "body": i.to_string(), "delay": 60_000,
                                "bizKey": format!("order-{i}")})
                })
                .collect(),
        )
        .await;
    let handed = env.push(json!({"topic": "bc-now", "body": "x"})).await;
    assert_eq!(env.receive_one("bc-now").await.id(), handed);
    let r = env
        .post_json(
            "/cancel",
            &json!({"ids": [ids[0], ids[1], handed, "12345"]}),
        )
        .await;
    assert_eq!(
        results(&r).await,
        ["deleted", "deleted", "in_flight", "not_found"]
    );
    assert_eq!(r.assert_ok()["deleted"], 2);
    for id in &ids[..2] {
        assert_eq!(env.journal.row(id).unwrap().status, status::DELETED);
    }
    // Again: the same definite outcome, nothing changes.
    let r = env.post_json("/cancel", &json!({"ids": [ids[0]]})).await;
    assert_eq!(results(&r).await, ["deleted"]);
    // By bizKey: the live message holding it; keys compare exactly.
    let r = env
        .post_json("/cancel", &json!({"topic": "bc", "bizKey": "ORDER-2"}))
        .await;
    r.assert_error(404, "not_found");
    let r = env
        .post_json("/cancel", &json!({"topic": "bc", "bizKey": "order-2"}))
        .await;
    assert_eq!(
        r.assert_ok()["results"],
        json!([{"id": ids[2], "result": "deleted"}])
    );
    assert_eq!(env.journal.row(&ids[2]).unwrap().status, status::DELETED);
    assert!(env.journal.row(&ids[3]).unwrap().status < status::CONSUMING);
}

async fn bulk_cancel_by_biz_key_prefix(b: Backend) {
    let env = Env::start(b).await;
    // 1 200 messages of one order (more than a page), a few of others.
    let mut ids = Vec::new();
    for chunk in 0..3 {
        ids.extend(
            env.push_batch(
                (0..400)
                    .map(|i| {
                        json!({"topic": "bp", "body": "x", "delay": 60_000,
                                    "bizKey": format!("o42:{}", chunk * 400 + i)})
                    })
                    .collect(),
            )
            .await,
        );
    }
    let others = env
        .push_batch(vec![
            json!({"topic": "bp", "body": "x", "delay": 60_000, "bizKey": "o4:1"}),
            json!({"topic": "bp", "body": "x", "delay": 60_000, "bizKey": "O42:upper"}),
            json!({"topic": "bp", "body": "x", "delay": 60_000, "bizKey": "o42_x"}),
            json!({"topic": "bp-other", "body": "x", "delay": 60_000, "bizKey": "o42:9"}),
        ])
        .await;
    let r = env
        .post_json("/cancel", &json!({"topic": "bp", "bizKeyPrefix": "o42:"}))
        .await;
    assert_eq!(
        r.assert_ok(),
        &json!({"matched": 1200, "results": {"deleted": 1200}})
    );
    for id in [&ids[0], &ids[599], &ids[1199]] {
        assert_eq!(env.journal.row(id).unwrap().status, status::DELETED);
    }
    for id in &others {
        assert!(
            env.journal.row(id).unwrap().status < status::CONSUMING,
            "{id}"
        );
    }
    // `_` and `%` in a prefix are plain characters.
    let r = env
        .post_json("/cancel", &json!({"topic": "bp", "bizKeyPrefix": "o42_"}))
        .await;
    assert_eq!(r.assert_ok()["matched"], 1);
    let r = env
        .post_json("/cancel", &json!({"topic": "bp", "bizKeyPrefix": "%"}))
        .await;
    assert_eq!(r.assert_ok()["matched"], 0);
}

async fn bad_bulk_cancels_change_nothing(b: Backend) {
    let env = Env::start(b).await;
    let id = env
        .push(json!({"topic": "bb", "body": "x", "delay": 60_000, "bizKey": "k"}))
        .await;
    let too_many: Vec<String> = (0..1001).map(|i| (1000 + i).to_string()).collect();
    for body in [
        json!({}),
        json!([id]),
        json!({"ids": []}),
        json!({"ids": too_many}),
        json!({"ids": [id], "topic": "bb"}),
        json!({"topic": "bb"}),
        json!({"topic": "bb", "bizKey": "k", "bizKeyPrefix": "k"}),
        json!({"topic": "bb", "bizKeyPrefix": ""}),
        json!({"topic": "b b", "bizKey": "k"}),
        json!({"topic": "bb", "bizKey": 5}),
        json!({"topic": "bb", "key": "k"}),
    ] {
        let r = env.post_json("/cancel", &body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        assert!(r.text.contains("\"error\""), "{body}: {}", r.text);
    }
    assert!(env.journal.row(&id).unwrap().status < status::CONSUMING);
}

async fn cancel_before_delivery(b: Backend) {
    let env = Env::start(b).await;

    // Delaying: deleted, then never delivered, and Deleted in the journal.
    let delaying = env
        .push(json!({"topic": "c", "body": "delaying", "delay": 500}))
        .await;
    let due = env.journal.row(&delaying).unwrap().due_time;
    let r = env.delete(&delaying).await;
    assert_eq!(r.assert_ok(), &json!({"id": delaying, "result": "deleted"}));
    assert_eq!(env.journal.row(&delaying).unwrap().status, status::DELETED);
    // Deleting twice answers `deleted` again.
    let r = env.delete(&delaying).await;
    assert_eq!(r.assert_ok(), &json!({"id": delaying, "result": "deleted"}));

    // Ready (due, waiting for a consumer): deleted too.
    let ready = env
        .push(json!({"topic": "c", "body": "ready", "delay": 0}))
        .await;
    env.wait_ready("c", std::slice::from_ref(&ready)).await;
    let r = env.delete(&ready).await;
    assert_eq!(r.assert_ok(), &json!({"id": ready, "result": "deleted"}));
    assert_eq!(env.journal.row(&ready).unwrap().status, status::DELETED);

    // Poll past the first one's due time: neither comes.
    assert!(now_ms() < due + 1000);
    env.assert_nothing("c", 2).await;
    assert!(now_ms() > due, "the poll ended before the due time");
    for id in [&delaying, &ready] {
        let row = env.journal.row(id).unwrap();
        assert_eq!((row.status, row.attempts), (status::DELETED, 0), "{id}");
    }
}

async fn cancel_after_delivery(b: Backend) {
    let env = Env::start(b).await;
    let id = env
        .push(json!({"topic": "c", "body": "x", "ttl": 500}))
        .await;
    let got = env.receive_one("c").await;
    assert_eq!(got.id(), id);

    // Handed to a consumer, not acked: in flight, and left alone: its ack
    // deadline passes and it is delivered again.
    let r = env.delete(&id).await;
    assert_eq!(r.assert_ok(), &json!({"id": id, "result": "in_flight"}));
    assert_ne!(env.journal.row(&id).unwrap().status, status::DELETED);
    let again = env.receive_one("c").await;
    assert_eq!(
        (again.id(), again.msg["attempts"].as_i64()),
        (id.as_str(), Some(2))
    );
    let r = env.ack(&id).await;
    assert_eq!(r.assert_ok(), &json!({"id": id, "status": "Consumed"}));

    // After the ack: already consumed, and it stays consumed.
    let r = env.delete(&id).await;
    assert_eq!(
        r.assert_ok(),
        &json!({"id": id, "result": "already_consumed"})
    );
    env.wait_status(&id, status::CONSUMED).await;
}

async fn cancel_unknown_or_malformed_id(b: Backend) {
    let env = Env::start(b).await;
    let r = env.delete("12345").await;
    r.assert_error(404, "not_found");
    assert_eq!(r.json["result"], "not_found", "{}", r.text);

    for bad in ["abc", "-5", "0", "1.5", ""] {
        env.delete(bad).await.assert_error(400, "invalid_id");
    }
    env.get_path("/delete")
        .await
        .assert_error(400, "missing_id");
}

//! Cancel (`GET /delete?id=`): every outcome is definite, and a cancelled
//! message is never delivered.

#[macro_use]
mod common;

use common::{now_ms, status, Backend, Env};
use serde_json::json;

backend_tests!(
    cancel_before_delivery,
    cancel_after_delivery,
    cancel_unknown_or_malformed_id
);

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
    assert_eq!(env.journal.row(&id).unwrap().status, status::CONSUMED);
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

//! Ack deadlines: an unacked message is delivered again after its ttl; an
//! ack ends its life (idempotently); a message not yet delivered cannot be acked.

#[macro_use]
mod common;

use common::{status, Backend, Env};
use serde_json::json;

backend_tests!(
    unacked_message_is_redelivered_after_ttl,
    ack_before_delivery_is_a_conflict,
    late_ack_ends_the_message
);

async fn unacked_message_is_redelivered_after_ttl(b: Backend) {
    let env = Env::start(b).await;
    let id = env
        .push(json!({"topic": "t", "body": "x", "ttl": 500}))
        .await;

    let first = env.receive_one("t").await;
    assert_eq!(
        (first.id(), first.msg["attempts"].as_i64()),
        (id.as_str(), Some(1))
    );
    assert_eq!(first.msg["ttl"], 500);

    // Not acked: the same message comes back once its deadline passed.
    let second = env.receive_one("t").await;
    assert_eq!(
        (second.id(), second.msg["attempts"].as_i64()),
        (id.as_str(), Some(2))
    );
    assert!(
        second.at >= first.at + 500,
        "redelivered before the ack deadline: {first:?} {second:?}"
    );

    let r = env.ack(&id).await;
    assert_eq!(r.assert_ok(), &json!({"id": id, "status": "Consumed"}));
    env.assert_nothing("t", 2).await;
    let row = env.journal.row(&id).unwrap();
    assert_eq!((row.status, row.attempts), (status::CONSUMED, 2));

    // Acking again is harmless.
    let r = env.ack(&id).await;
    assert_eq!(r.assert_ok(), &json!({"id": id, "status": "Consumed"}));
    let row = env.journal.row(&id).unwrap();
    assert_eq!((row.status, row.attempts), (status::CONSUMED, 2));
}

async fn ack_before_delivery_is_a_conflict(b: Backend) {
    let env = Env::start(b).await;
    let id = env
        .push(json!({"topic": "t", "body": "x", "delay": 60_000}))
        .await;
    env.ack(&id).await.assert_error(409, "not_in_flight");
    // Nothing changed: still scheduled, and it can still be cancelled.
    assert!(env.journal.row(&id).unwrap().status < status::CONSUMING);
    let r = env.delete(&id).await;
    assert_eq!(r.assert_ok()["result"], "deleted");
    // A deleted message cannot be acked either.
    env.ack(&id).await.assert_error(409, "not_in_flight");
    env.ack("12345").await.assert_error(404, "not_found");
}

async fn late_ack_ends_the_message(b: Backend) {
    let env = Env::start(b).await;
    let id = env
        .push(json!({"topic": "late", "body": "x", "ttl": 200}))
        .await;
    assert_eq!(env.receive_one("late").await.id(), id);
    // The deadline passes and the message waits in the ready queue again;
    // the first consumer's ack still ends its life.
    env.wait_ready("late", std::slice::from_ref(&id)).await;
    let r = env.ack(&id).await;
    assert_eq!(r.assert_ok(), &json!({"id": id, "status": "Consumed"}));
    env.assert_nothing("late", 1).await;
    assert_eq!(env.journal.row(&id).unwrap().status, status::CONSUMED);
}

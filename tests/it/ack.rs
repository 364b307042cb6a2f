//! Ack deadlines: an unacked message is delivered again after its ttl; an
//! ack ends its life (idempotently); a message not yet delivered cannot be acked.
//! Batch acks (`POST /ack`) and ack-then-poll (`POST /get/{topic}`) answer a
//! result per id in one journal commit.

use crate::common::{status, wait_every, Backend, Env};
use serde_json::json;

backend_tests!(
    unacked_message_is_redelivered_after_ttl,
    ack_before_delivery_is_a_conflict,
    late_ack_ends_the_message,
    late_ack_in_a_poll_is_not_handed_out_again,
    batch_ack_answers_per_id,
    ack_and_poll_in_one_round_trip,
    bad_batch_acks_change_nothing,
    ack_is_answerable_after_a_crash_between_its_two_writes
);

/// An ack reached Redis (the record gone, its tombstone set) and the node
/// was killed before the journal recorded the delivery and the ack: the
/// journal still says Ready. The consumer's retried ack, on the restarted
/// node, is answered Consumed and the journal ends Consumed, so nothing
/// (a restore included) delivers the message again.
async fn ack_is_answerable_after_a_crash_between_its_two_writes(b: Backend) {
    use delayq::journal::schema::message;
    use diesel::prelude::*;

    let mut env = Env::start(b).await;
    let id = env.push(json!({"topic": "crash", "body": "x"})).await;
    assert_eq!(env.receive_one("crash").await.id(), id);
    env.wait_status(&id, status::CONSUMING).await;
    // The node dies; before that, the ack's Redis half ran and the journal
    // heard of neither the delivery nor the ack.
    env.server.kill9();
    let shard = env.keys.shard_of(crate::common::parse_id(&id));
    let mut con = env.redis.con();
    let _: () = redis::pipe()
        .hdel(env.keys.messages(shard), &id)
        .zrem(env.keys.inflight(shard), &id)
        .zadd(env.keys.finished(shard), &id, crate::common::now_ms())
        .query(&mut con)
        .unwrap();
    let back_to_ready = diesel::update(message::table.find(crate::common::parse_id(&id).0))
        .set((message::status.eq(status::READY), message::attempts.eq(0)));
    let n = delayq::with_conn!(&mut env.journal.conn(), c => back_to_ready.execute(c));
    assert_eq!(n.unwrap(), 1);
    env.start_server().await;

    let r = env.ack(&id).await;
    assert_eq!(r.assert_ok(), &json!({"id": id, "status": "Consumed"}));
    let row = env.wait_status(&id, status::CONSUMED).await;
    assert_eq!((row.status, row.attempts), (status::CONSUMED, 1));
    // A restore does not bring it back.
    let r = env.get_path("/reStore?expire=true").await;
    assert_eq!(r.assert_ok()["restored"], 0);
    env.assert_nothing("crash", 1).await;
}

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
    // By Redis's clock: the receipt is `ATTEMPTS-DEADLINE`, and the second
    // was handed out (its deadline less the ttl) after the first's deadline
    // (the client's receive times carry a loaded machine's delays).
    let deadline = |m: &serde_json::Value| -> i64 {
        let receipt = m["receipt"].as_str().expect("a receipt");
        receipt.split('-').nth(1).unwrap().parse().unwrap()
    };
    assert!(
        deadline(&second.msg) - 500 >= deadline(&first.msg),
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

    // The same when its retry policy scheduled it again (Delaying, not
    // Ready): it was delivered once, and that delivery's ack ends it.
    let id = env
        .push(json!({"topic": "late", "body": "y", "ttl": 200,
                     "retry": {"backoff": "fixed", "delay": 60_000}}))
        .await;
    assert_eq!(env.receive_one("late").await.id(), id);
    crate::common::wait_until(
        "the message scheduled again",
        std::time::Duration::from_secs(10),
        || async {
            let m = env.message(&id).await;
            match m["message"]["status"].as_str() {
                Some("Delaying") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let r = env.ack(&id).await;
    assert_eq!(r.assert_ok(), &json!({"id": id, "status": "Consumed"}));

    // One never handed out is not_in_flight, and the answer says where it
    // waits.
    let waiting = env
        .push(json!({"topic": "late", "body": "z", "delay": 60_000}))
        .await;
    let r = env.ack(&waiting).await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert_eq!(r.json["error"], "not_in_flight", "{}", r.text);
    assert!(r.text.contains("is Delaying"), "{}", r.text);
    let r = env.post_json("/ack", &json!({"ids": [waiting]})).await;
    assert_eq!(
        r.assert_ok()["results"][0]["status"],
        "Delaying",
        "{}",
        r.text
    );
    let r = env
        .send(env.http.post(env.url(&format!("/nack/{waiting}"))))
        .await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert!(r.text.contains("is Delaying"), "{}", r.text);
}

/// The acks of `POST /get/{topic}` run beside its poll. A message whose
/// deadline passed is ready again: whichever runs first, the ack ends it
/// and the same answer does not hand it out again.
async fn late_ack_in_a_poll_is_not_handed_out_again(b: Backend) {
    let env = Env::start(b).await;
    let ids = env
        .push_batch(
            (0..20)
                .map(|i| json!({"topic": "lap", "body": i.to_string(), "ttl": 200}))
                .collect(),
        )
        .await;
    // A poll answers with what is ready: gather all 20 deliveries.
    let mut handed = 0;
    while handed < ids.len() {
        let r = env
            .post_json("/get/lap", &json!({"count": 20, "timeout": 5}))
            .await;
        let got = r.assert_ok()["messages"].as_array().unwrap().len();
        assert!(got > 0, "not all 20 were handed out");
        handed += got;
    }
    env.wait_ready("lap", &ids).await;
    let r = env
        .post_json("/get/lap", &json!({"ack": ids, "count": 20, "timeout": 0}))
        .await;
    let body = r.assert_ok();
    assert_eq!(body["acked"], 20, "{body}");
    assert_eq!(body["messages"], json!([]), "{body}");
    env.assert_nothing("lap", 1).await;
    for id in &ids {
        env.wait_status(id, status::CONSUMED).await;
    }
}

async fn batch_ack_answers_per_id(b: Backend) {
    let env = Env::start(b).await;
    let ids = env
        .push_batch(
            (0..5)
                .map(|i| json!({"topic": "ba", "body": i.to_string()}))
                .collect(),
        )
        .await;
    let waiting = env
        .push(json!({"topic": "ba-later", "body": "x", "delay": 60_000}))
        .await;
    let got = env
        .collect("ba", 5, std::time::Duration::from_secs(5))
        .await;
    assert_eq!(got.len(), 5);
    // Three of the five, one not delivered yet, one unknown id.
    let r = env
        .post_json(
            "/ack",
            &json!({"ids": [ids[0], ids[1], ids[2], waiting, "12345"]}),
        )
        .await;
    let body = r.assert_ok();
    assert_eq!(body["acked"], 3);
    let results = body["results"].as_array().unwrap();
    let result_of = |i: usize| results[i]["result"].as_str().unwrap().to_string();
    assert_eq!(
        (0..5).map(result_of).collect::<Vec<_>>(),
        [
            "consumed",
            "consumed",
            "consumed",
            "not_in_flight",
            "not_found"
        ]
    );
    assert_eq!(results[3]["id"], waiting.as_str());
    for id in &ids[..3] {
        assert_eq!(env.journal.row(id).unwrap().status, status::CONSUMED);
    }
    // Deliveries reach the journal with the other status changes, a few
    // milliseconds after the poll's answer.
    for id in &ids[3..] {
        env.wait_status(id, status::CONSUMING).await;
    }
    assert!(env.journal.row(&waiting).unwrap().status < status::CONSUMING);
    // Acking again is harmless; numbers are accepted as ids too.
    let again = env
        .post_json(
            "/ack",
            &json!({"ids": [ids[0], ids[3].parse::<u64>().unwrap()]}),
        )
        .await;
    assert_eq!(again.assert_ok()["acked"], 2);
    assert_eq!(env.journal.row(&ids[3]).unwrap().status, status::CONSUMED);
}

async fn ack_and_poll_in_one_round_trip(b: Backend) {
    let env = Env::start(b).await;
    let first = env
        .push_batch(
            (0..3)
                .map(|i| json!({"topic": "ap", "body": i.to_string()}))
                .collect(),
        )
        .await;
    // No acks yet: plain polls, by POST (the three shards may promote a
    // millisecond apart: one poll can answer before the others are ready).
    let mut got: Vec<String> = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while got.len() < 3 && std::time::Instant::now() < deadline {
        let r = env
            .post_json("/get/ap", &json!({"count": 10, "timeout": 5}))
            .await;
        let body = r.assert_ok().clone();
        assert_eq!(body["results"], json!([]));
        got.extend(
            body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["id"].as_str().unwrap().to_string()),
        );
    }
    let mut sorted = got.clone();
    sorted.sort();
    let mut want = first.clone();
    want.sort();
    assert_eq!(sorted, want);
    // Ack those and wait for the next batch in the same request.
    let second = env
        .push(json!({"topic": "ap", "body": "next", "delay": 300}))
        .await;
    let r = env
        .post_json("/get/ap", &json!({"ack": got, "count": 10, "timeout": 5}))
        .await;
    let body = r.assert_ok();
    assert_eq!(body["acked"], 3);
    assert_eq!(body["messages"][0]["id"], second.as_str());
    assert_eq!(body["messages"][0]["status"], "Consuming");
    // Acks carried by a poll reach the journal right after the answer.
    let every = std::time::Duration::from_millis(20);
    wait_every(
        "the acks journaled",
        std::time::Duration::from_secs(5),
        every,
        || async {
            first
                .iter()
                .all(|id| env.journal.row(id).unwrap().status == status::CONSUMED)
                .then_some(())
        },
    )
    .await;
    // The last batch is acked on its own; nothing is left.
    let r = env.post_json("/ack", &json!({"ids": [second]})).await;
    assert_eq!(r.assert_ok()["acked"], 1);
    let r = env
        .post_json("/get/ap", &json!({"count": 10, "timeout": 0}))
        .await;
    assert_eq!(r.assert_ok()["messages"], json!([]));
}

async fn bad_batch_acks_change_nothing(b: Backend) {
    let env = Env::start(b).await;
    let id = env.push(json!({"topic": "bb", "body": "x"})).await;
    assert_eq!(env.receive_one("bb").await.id(), id);
    // The delivery's row is written with the other queued status changes.
    env.wait_status(&id, status::CONSUMING).await;
    let too_many: Vec<String> = (0..101).map(|i| (1000 + i).to_string()).collect();
    for (path, body, code) in [
        ("/ack", json!({}), "invalid_ids"),
        ("/ack", json!({"ids": []}), "invalid_ids"),
        ("/ack", json!({"ids": "x"}), "invalid_ids"),
        ("/ack", json!({"ids": too_many}), "invalid_ids"),
        ("/ack", json!({"ids": [id, "nope"]}), "invalid_id"),
        ("/ack", json!({"ids": [id, id]}), "invalid_ids"),
        ("/ack", json!({"ids": [id, {"a": 1}]}), "invalid_ids"),
        ("/ack", json!({"ids": [id], "extra": 1}), "unknown_field"),
        ("/ack", json!([id]), "invalid_body"),
        (
            "/get/bb",
            json!({"ack": [id], "count": 0}),
            "invalid_parameter",
        ),
        (
            "/get/bb",
            json!({"ack": [id], "timeout": 301}),
            "invalid_parameter",
        ),
        (
            "/get/bb",
            json!({"ack": [id], "count": "5"}),
            "invalid_parameter",
        ),
        ("/get/b%20b", json!({"ack": [id]}), "invalid_topic"),
        ("/get/bb", json!({"ack": [id], "wait": 1}), "unknown_field"),
    ] {
        env.post_json(path, &body).await.assert_error(400, code);
    }
    // Still in flight: none of those acked it.
    assert_eq!(env.journal.row(&id).unwrap().status, status::CONSUMING);
    let r = env.post_json("/ack", &json!({"ids": [id]})).await;
    assert_eq!(r.assert_ok()["acked"], 1);
}

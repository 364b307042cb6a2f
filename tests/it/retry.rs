//! Failed deliveries: a nack (with a delay, or by the message's retry
//! policy) or an ack deadline that passed sends a message back; after its
//! last attempt it is dead. Dead letters are listed and brought back.

use std::time::Duration;

use crate::common::{now_ms, status, Backend, Env};
use serde_json::json;

backend_tests!(
    nack_with_a_delay_delivers_again_after_it,
    nack_without_a_delay_follows_the_retry_policy,
    expired_ttl_counts_as_an_attempt_and_the_last_one_is_dead,
    batch_nack_answers_per_id,
    dead_letters_are_listed_and_requeued,
    bad_nacks_change_nothing,
    nack_right_after_its_poll_leaves_the_journal_delaying
);

async fn nack(env: &Env, id: &str, query: &str) -> crate::common::Reply {
    env.send(env.http.post(env.url(&format!("/nack/{id}{query}"))))
        .await
}

async fn nack_with_a_delay_delivers_again_after_it(b: Backend) {
    let env = Env::start(b).await;
    let id = env.push(json!({"topic": "nd", "body": "x"})).await;
    assert_eq!(env.receive_one("nd").await.id(), id);
    let before = now_ms();
    // 2 s: time for a loaded journal writer to show it Delaying first.
    let r = nack(&env, &id, "?delay=2000").await;
    let body = r.assert_ok();
    assert_eq!(
        (
            body["result"].as_str(),
            body["status"].as_str(),
            body["attempts"].as_i64()
        ),
        (Some("delaying"), Some("Delaying"), Some(1))
    );
    let due = body["dueTime"].as_i64().unwrap();
    assert!(due >= before + 2000, "due {due} before {before} + 2000");
    // The journal knows when it is due again, so a restore keeps the delay.
    let row = env.wait_status(&id, status::DELAYING).await;
    assert_eq!(row.due_time, due);
    // Not before the delay; then with its second attempt.
    let again = env.receive_one("nd").await;
    assert_eq!(
        (again.id(), again.msg["attempts"].as_i64()),
        (id.as_str(), Some(2))
    );
    assert!(again.at >= due, "delivered at {} before {due}", again.at);
    env.ack(&id).await.assert_ok();
    let row = env.wait_status(&id, status::CONSUMED).await;
    assert_eq!(row.attempts, 2);
    // Its history counts its deliveries at every step: the wait after the
    // nack and the promotion after it carry the first delivery's count.
    let history: Vec<(String, i64)> = env.message(&id).await["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["status"].as_str().unwrap().to_string(),
                h["attempts"].as_i64().unwrap(),
            )
        })
        .collect();
    let counts: Vec<(&str, i64)> = history.iter().map(|(s, a)| (s.as_str(), *a)).collect();
    let after_nack = counts
        .iter()
        .position(|&(s, a)| s == "Delaying" && a == 1)
        .unwrap_or_else(|| panic!("no Delaying after the nack: {counts:?}"));
    assert_eq!(
        &counts[after_nack..],
        &[
            ("Delaying", 1),
            ("Ready", 1),
            ("Consuming", 2),
            ("Consumed", 2)
        ],
        "{counts:?}"
    );
    // A nack of a consumed message is refused, and says why.
    nack(&env, &id, "").await.assert_error(409, "not_in_flight");
    nack(&env, "12345", "").await.assert_error(404, "not_found");
    // Without a delay and without a retry policy: ready again at once.
    let id = env.push(json!({"topic": "nd", "body": "y"})).await;
    assert_eq!(env.receive_one("nd").await.id(), id);
    let r = nack(&env, &id, "").await;
    assert_eq!(r.assert_ok()["result"], "ready");
    let again = env.receive_one("nd").await;
    assert_eq!(
        (again.id(), again.msg["attempts"].as_i64()),
        (id.as_str(), Some(2))
    );
}

/// The waits a nack's answer allows: its due time is the server's now
/// (between the request and its answer; the server's clock, Redis's, may
/// read up to 100 ms later than the test's) plus the wait. Returns the
/// least and the most that wait can be.
fn due_window(due: i64, sent: i64, answered: i64) -> (i64, i64) {
    (due - answered - 100, due - sent)
}

async fn nack_without_a_delay_follows_the_retry_policy(b: Backend) {
    let env = Env::start(b).await;
    let id = env
        .push(json!({"topic": "rp", "body": "x", "priority": 7,
                     "retry": {"backoff": "exponential", "delay": 300, "max": 700}}))
        .await;
    let mut waits = Vec::new();
    for attempt in 1..=3 {
        let got = env.receive_one("rp").await;
        assert_eq!(
            (got.id(), got.msg["attempts"].as_i64()),
            (id.as_str(), Some(attempt))
        );
        assert_eq!(got.msg["priority"], 7);
        let sent = now_ms();
        let r = nack(&env, &id, "").await;
        let answered = now_ms();
        let body = r.assert_ok();
        assert_eq!(body["result"], "delaying");
        waits.push(due_window(
            body["dueTime"].as_i64().unwrap(),
            sent,
            answered,
        ));
    }
    // 300, 600, then capped at 700.
    for ((from, to), expected) in waits.iter().zip([300, 600, 700]) {
        assert!(
            (*from..=*to).contains(&expected),
            "waits {waits:?}, expected 300, 600, 700"
        );
    }
    // A fixed policy waits the same each time; a nack's own delay wins.
    let id = env
        .push(json!({"topic": "rp2", "body": "x", "retry": {"backoff": "fixed", "delay": 250}}))
        .await;
    for _ in 0..2 {
        assert_eq!(env.receive_one("rp2").await.id(), id);
        let sent = now_ms();
        let r = nack(&env, &id, "").await;
        let answered = now_ms();
        let (from, to) = due_window(r.assert_ok()["dueTime"].as_i64().unwrap(), sent, answered);
        assert!(
            (from..=to).contains(&250),
            "fixed wait between {from} and {to}"
        );
    }
    assert_eq!(env.receive_one("rp2").await.id(), id);
    let r = nack(&env, &id, "?delay=0").await;
    assert_eq!(r.assert_ok()["result"], "ready");
    assert_eq!(env.receive_one("rp2").await.msg["attempts"], 4);
}

async fn expired_ttl_counts_as_an_attempt_and_the_last_one_is_dead(b: Backend) {
    let env = Env::start(b).await;
    let id = env
        .push(
            json!({"topic": "dd", "body": "x", "ttl": 300, "maxAttempts": 2,
                     "bizKey": "order-1"}),
        )
        .await;
    // First delivery: its ack deadline passes, a failed attempt.
    assert_eq!(env.receive_one("dd").await.msg["attempts"], 1);
    // Second and last: its deadline passes too, and it is dead.
    let second = env.receive_one("dd").await;
    assert_eq!(
        (second.id(), second.msg["attempts"].as_i64()),
        (id.as_str(), Some(2))
    );
    let row = env.wait_status(&id, status::DEAD).await;
    assert_eq!(row.attempts, 2);
    env.assert_nothing("dd", 1).await;
    // A late ack of the last delivery is refused and told why.
    let r = env.ack(&id).await;
    r.assert_error(409, "not_in_flight");
    assert!(r.text.contains("Dead"), "{}", r.text);
    // Cancelling it answers dead; its bizKey is free again.
    assert_eq!(env.delete(&id).await.assert_ok()["result"], "dead");
    let fresh = env
        .push(json!({"topic": "dd", "body": "y", "bizKey": "order-1", "delay": 60_000}))
        .await;
    assert_ne!(fresh, id);
    // A nack on the last attempt makes it dead at once.
    let id = env
        .push(json!({"topic": "dd2", "body": "x", "maxAttempts": 1}))
        .await;
    assert_eq!(env.receive_one("dd2").await.id(), id);
    let r = nack(&env, &id, "?delay=1000").await;
    assert_eq!(
        (
            r.assert_ok()["result"].as_str(),
            r.assert_ok()["status"].as_str()
        ),
        (Some("dead"), Some("Dead"))
    );
    assert_eq!(env.journal.row(&id).unwrap().status, status::DEAD);
    let history = env.history_statuses(&id).await;
    assert_eq!(
        history.last().map(String::as_str),
        Some("Dead"),
        "{history:?}"
    );
}

async fn batch_nack_answers_per_id(b: Backend) {
    let env = Env::start(b).await;
    let ids = env
        .push_batch(
            (0..3)
                .map(|i| json!({"topic": "bn", "body": i.to_string(), "maxAttempts": 5}))
                .collect(),
        )
        .await;
    let waiting = env
        .push(json!({"topic": "bn", "body": "later", "delay": 60_000}))
        .await;
    let got = env.collect("bn", 3, Duration::from_secs(5)).await;
    assert_eq!(got.len(), 3);
    let r = env
        .post_json(
            "/nack",
            &json!({"ids": [ids[0], ids[1], waiting, "12345"], "delay": 5000}),
        )
        .await;
    let body = r.assert_ok();
    assert_eq!(body["nacked"], 2);
    let results: Vec<&str> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["result"].as_str().unwrap())
        .collect();
    assert_eq!(
        results,
        ["delaying", "delaying", "not_in_flight", "not_found"]
    );
    for id in &ids[..2] {
        assert_eq!(env.journal.row(id).unwrap().status, status::DELAYING);
    }
    env.wait_status(&ids[2], status::CONSUMING).await;
    // The nacked ones are not handed out again before their delay.
    env.assert_nothing("bn", 1).await;
    // They can be cancelled while they wait.
    let r = env
        .post_json("/cancel", &json!({"ids": [ids[0], ids[2]]}))
        .await;
    let results: Vec<&str> = r.assert_ok()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["result"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["deleted", "in_flight"]);
}

async fn dead_letters_are_listed_and_requeued(b: Backend) {
    let env = Env::start(b).await;
    let ids = env
        .push_batch(
            (0..3)
                .map(|i| {
                    json!({"topic": "dl", "body": i.to_string(), "maxAttempts": 1,
                                "bizKey": format!("k{i}")})
                })
                .collect(),
        )
        .await;
    let got = env.collect("dl", 3, Duration::from_secs(5)).await;
    assert_eq!(got.len(), 3);
    let r = env.post_json("/nack", &json!({"ids": ids})).await;
    assert_eq!(r.assert_ok()["nacked"], 3);
    // Listed in id order, with their histories, two per page.
    let page = env.get_path("/dead/dl?limit=2").await;
    let page = page.assert_ok();
    let listed: Vec<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [ids[0].as_str(), ids[1].as_str()]);
    assert_eq!(page["messages"][0]["status"], "Dead");
    let statuses: Vec<&str> = page["messages"][0]["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses.last(), Some(&"Dead"), "{statuses:?}");
    let next = page["next"].as_str().unwrap();
    let rest = env
        .get_path(&format!("/dead/dl?limit=2&after={next}"))
        .await;
    assert_eq!(rest.assert_ok()["messages"][0]["id"], ids[2].as_str());
    assert_eq!(rest.assert_ok()["next"], json!(null));

    // One by id: live again, delivered with its attempts counted from 1.
    let r = env
        .send(env.http.post(env.url(&format!("/dead/{}/requeue", ids[0]))))
        .await;
    assert_eq!(r.assert_ok()["result"], "requeued");
    let again = env.receive_one("dl").await;
    assert_eq!(
        (again.id(), again.msg["attempts"].as_i64()),
        (ids[0].as_str(), Some(1))
    );
    env.ack(&ids[0]).await.assert_ok();
    // Requeueing a live message is refused.
    let r = env
        .send(env.http.post(env.url(&format!("/dead/{}/requeue", ids[0]))))
        .await;
    r.assert_error(409, "not_dead");

    // A dead message whose bizKey another live message took stays dead.
    let holder = env
        .push(json!({"topic": "dl", "body": "h", "bizKey": "k1", "delay": 60_000}))
        .await;
    // The rest of the topic at once.
    let r = env.send(env.http.post(env.url("/dead/dl/requeue"))).await;
    let body = r.assert_ok();
    assert_eq!(body["requeued"], 1);
    assert_eq!(body["skipped"][0]["result"], "biz_key_taken");
    assert_eq!(body["skipped"][0]["holder"], holder.as_str());
    let again = env.receive_one("dl").await;
    assert_eq!(again.id(), ids[2]);
    assert_eq!(env.journal.row(&ids[1]).unwrap().status, status::DEAD);
    let listed = env.get_path("/dead/dl").await;
    assert_eq!(listed.assert_ok()["messages"].as_array().unwrap().len(), 1);
}

async fn bad_nacks_change_nothing(b: Backend) {
    let env = Env::start(b).await;
    let id = env.push(json!({"topic": "bad", "body": "x"})).await;
    assert_eq!(env.receive_one("bad").await.id(), id);
    // The delivery's row is written with the other queued status changes.
    env.wait_status(&id, status::CONSUMING).await;
    for q in ["?delay=-1", "?delay=abc", "?delay=86400001", "?wait=5"] {
        let r = nack(&env, &id, q).await;
        assert_eq!(r.status, 400, "{q}: {}", r.text);
    }
    for body in [
        json!({"ids": []}),
        json!({"ids": [id], "delay": -5}),
        json!({"ids": [id, id]}),
        json!({"ids": "x"}),
        json!({"ids": [id], "later": 1}),
    ] {
        let r = env.post_json("/nack", &body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
    }
    for push in [
        json!({"topic": "bad", "body": "x", "maxAttempts": 0}),
        json!({"topic": "bad", "body": "x", "retry": {"backoff": "linear"}}),
        json!({"topic": "bad", "body": "x", "retry": {"delay": 10, "max": 5}}),
    ] {
        let r = env.post_json("/push", &push).await;
        assert_eq!(r.status, 400, "{push}: {}", r.text);
    }
    for path in ["/dead/bad%20topic", "/dead/t?limit=0", "/dead/t?after=x"] {
        let r = env.get_path(path).await;
        assert_eq!(r.status, 400, "{path}: {}", r.text);
    }
    // Still in flight, untouched.
    assert_eq!(env.journal.row(&id).unwrap().status, status::CONSUMING);
    env.ack(&id).await.assert_ok();
}

/// A nack that reaches Redis the moment its message was handed out: the
/// hand-out's Consuming and the nack's Delaying reach the journal by
/// different ways (the nack's is committed before it answers, the
/// hand-out's follows within a few ms), often stamped with the same
/// millisecond of Redis's clock. Whatever order they land in, the journal
/// ends Delaying, long before the nack's delay ends: never in flight
/// (`GET /messages/{id}`, the row). The consumer nacks the message as soon
/// as the server takes it (a poll answered, then a nack at once, takes a
/// debug build a few ms; a faster server, less): a few nacks are sent
/// meanwhile, each on its own keep-alive connection, until one is taken.
async fn nack_right_after_its_poll_leaves_the_journal_delaying(b: Backend) {
    const TRIES: usize = 40;
    const DELAY: i64 = 30_000;
    const NACKERS: usize = 2;
    let env = std::sync::Arc::new(Env::start(b).await);
    let started = now_ms();
    let mut ids = Vec::new();
    for i in 0..TRIES {
        let id = env
            .push(json!({"topic": "quick", "body": i.to_string()}))
            .await;
        env.wait_ready("quick", std::slice::from_ref(&id)).await;
        let taken = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let nackers: Vec<_> = (0..NACKERS)
            .map(|_| {
                let (env, id, taken) = (env.clone(), id.clone(), taken.clone());
                tokio::spawn(async move {
                    let client = reqwest::Client::builder().no_proxy().build().unwrap();
                    let url = env.url(&format!("/nack/{id}?delay={DELAY}"));
                    while !taken.load(std::sync::atomic::Ordering::Acquire) {
                        let r = env.send(client.post(&url)).await;
                        if r.status == 200 {
                            taken.store(true, std::sync::atomic::Ordering::Release);
                            return true;
                        }
                        r.assert_error(409, "not_in_flight");
                    }
                    false
                })
            })
            .collect();
        let got = env.poll("quick", 5, 1).await;
        assert_eq!(
            got.iter().map(|g| g.id()).collect::<Vec<_>>(),
            [id.as_str()]
        );
        let mut nacked = 0;
        for n in nackers {
            nacked += usize::from(n.await.unwrap());
        }
        assert_eq!(nacked, 1, "one nack of {id} taken");
        ids.push(id);
    }
    // The hand-outs' changes are written in the order they were made: once
    // a later hand-out is journaled, the journal caught up with these.
    let marker = env.push(json!({"topic": "marker", "body": "m"})).await;
    assert_eq!(env.receive_one("marker").await.id(), marker);
    env.wait_status(&marker, status::CONSUMING).await;
    let (mut consuming, mut misordered) = (Vec::new(), Vec::new());
    let mut same_ms = 0;
    for id in &ids {
        let history = env.journal.history(id);
        let handed = history.iter().find(|f| f.status == status::CONSUMING);
        let nacked = history
            .iter()
            .find(|f| f.status == status::DELAYING && f.attempts == 1);
        if let (Some(h), Some(n)) = (handed, nacked) {
            same_ms += usize::from(h.flow_time == n.flow_time);
        }
        let row = env.journal.row(id).expect("in the journal");
        let shown = env.message(id).await;
        if row.status != status::DELAYING || shown["message"]["status"] != "Delaying" {
            let shown = &shown["message"]["status"];
            consuming.push(format!("{id}: row {} shown {shown}", row.status));
        }
        // Its history tells it in the order it happened, in one
        // millisecond too: handed out, then nacked.
        let told: Vec<(&str, i64)> = shown["history"]
            .as_array()
            .expect("history")
            .iter()
            .map(|h| {
                (
                    h["status"].as_str().unwrap(),
                    h["attempts"].as_i64().unwrap(),
                )
            })
            .collect();
        if !told.ends_with(&[("Consuming", 1), ("Delaying", 1)]) {
            misordered.push(format!("{id}: {told:?}"));
        }
    }
    assert!(
        misordered.is_empty(),
        "{} of {TRIES} histories end out of order: {misordered:?}",
        misordered.len()
    );
    assert!(
        now_ms() < started + DELAY,
        "the check ran after the first nack's delay ended"
    );
    assert!(
        consuming.is_empty(),
        "{} of {TRIES} nacked messages not Delaying in the journal ({same_ms} nacked in the \
         millisecond of their hand-out): {consuming:?}",
        consuming.len()
    );
    eprintln!(
        "{TRIES} nacks right after their hand-out, {same_ms} in its millisecond: all Delaying"
    );
}

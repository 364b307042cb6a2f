//! `POST /reschedule`: a message not handed out yet moves to a new due time
//! or priority and keeps its id; it is never handed out before its new
//! time; one in flight or ended is left alone with an outcome that says
//! why; the journal holds the new time (a restore schedules it there).

use std::time::Duration;

use crate::common::{now_ms, status, wait_until, Backend, Env};
use serde_json::{json, Value};

backend_tests!(
    a_message_moves_and_keeps_its_id,
    a_retry_wait_is_kept_when_only_the_priority_changes,
    messages_in_flight_or_ended_are_left_alone,
    bad_reschedules_change_nothing,
    a_message_waiting_beyond_the_horizon_moves_too,
    a_message_moved_beyond_the_horizon_is_delivered_then,
    a_recurring_series_moves_as_a_whole,
    messages_acked_or_in_flight_are_never_rescheduled
);

async fn reschedule(env: &Env, body: Value) -> Value {
    let r = env.post_json("/reschedule", &body).await;
    r.assert_ok().clone()
}

fn only_result(reply: &Value) -> &Value {
    let results = reply["results"].as_array().expect("results");
    assert_eq!(results.len(), 1, "{reply}");
    &results[0]
}

async fn a_message_moves_and_keeps_its_id(b: Backend) {
    let env = Env::start(b).await;
    // Due in a minute, moved to 400 ms from now.
    let id = env
        .push(json!({"topic": "appt", "bizKey": "a-1", "body": "remind", "delay": 60_000}))
        .await;
    let asked = now_ms();
    let reply = reschedule(&env, json!({"ids": [id], "delay": 400})).await;
    let one = only_result(&reply);
    assert_eq!(
        (one["id"].as_str(), one["result"].as_str()),
        (Some(id.as_str()), Some("rescheduled"))
    );
    let due = one["dueTime"].as_i64().unwrap();
    // The server counts on its estimate of Redis's clock, which a probe's
    // round trip may put ahead of this host's (never behind: a due time
    // is late on no master); on a loaded machine, by tens of ms.
    assert!(
        (asked + 400..=now_ms() + 400 + crate::common::CLOCK_LEAD_MS).contains(&due),
        "{reply}"
    );
    assert_eq!(reply["rescheduled"], 1);
    // The journal holds the new time: a restore would schedule it there.
    assert_eq!(env.journal.row(&id).unwrap().due_time, due);
    let got = env.receive_one("appt").await;
    assert_eq!(got.id(), id);
    assert!(got.at >= due, "handed out {} ms early", due - got.at);
    assert!(got.at < due + 3000, "handed out {} ms late", got.at - due);
    assert_eq!(got.msg["dueTime"], due);
    env.ack(&id).await.assert_ok();

    // Ready (due, not taken) by bizKey, moved later: it waits again.
    let id = env
        .push(json!({"topic": "appt", "bizKey": "a-2", "body": "x"}))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let at = now_ms() + 1500;
    let reply = reschedule(
        &env,
        json!({"topic": "appt", "bizKey": "a-2", "deliverAt": at}),
    )
    .await;
    assert_eq!(only_result(&reply)["dueTime"], at, "{reply}");
    env.assert_nothing("appt", 1).await;
    let got = env.receive_one("appt").await;
    assert_eq!(got.id(), id);
    assert!(got.at >= at, "handed out {} ms early", at - got.at);
    env.ack(&id).await.assert_ok();

    // Priority alone: of two due at the same instant, the raised one first.
    let at = now_ms() + 800;
    let low = env
        .push(json!({"topic": "prio", "body": "low", "deliverAt": at}))
        .await;
    let raised = env
        .push(json!({"topic": "prio", "body": "raised", "deliverAt": at}))
        .await;
    let reply = reschedule(&env, json!({"ids": [raised], "priority": 9})).await;
    let one = only_result(&reply);
    assert_eq!(
        (one["dueTime"].as_i64(), one["priority"].as_i64()),
        (Some(at), Some(9))
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let first = env.poll("prio", 1, 1).await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].id(), raised);
    assert_eq!(env.receive_one("prio").await.id(), low);
    assert_eq!(env.journal.row(&raised).unwrap().priority, 9);

    // By prefix: every live message whose key starts with it.
    let group: Vec<String> = env
        .push_batch(
            (1..=3)
                .map(|i| json!({"topic": "grp", "bizKey": format!("grp-{i}"), "body": "g", "delay": 60_000}))
                .collect(),
        )
        .await;
    env.push(json!({"topic": "grp", "bizKey": "other", "body": "o", "delay": 60_000}))
        .await;
    let reply = reschedule(
        &env,
        json!({"topic": "grp", "bizKeyPrefix": "grp-", "delay": 200}),
    )
    .await;
    assert_eq!(reply, json!({"matched": 3, "results": {"rescheduled": 3}}));
    let got = env.collect("grp", 3, Duration::from_secs(5)).await;
    let mut got: Vec<String> = got.iter().map(|r| r.id().to_string()).collect();
    got.sort();
    let mut want = group.clone();
    want.sort();
    assert_eq!(got, want, "the three, not the other");
    // The history shows the move.
    let history = env.history_statuses(&group[0]).await;
    assert!(
        history.iter().filter(|s| *s == "Delaying").count() >= 2,
        "{history:?}"
    );
}

async fn messages_in_flight_or_ended_are_left_alone(b: Backend) {
    let env = Env::start(b).await;
    let in_flight = env.push(json!({"topic": "t", "body": "f"})).await;
    assert_eq!(env.receive_one("t").await.id(), in_flight);
    let consumed = env.push(json!({"topic": "t", "body": "c"})).await;
    assert_eq!(env.receive_one("t").await.id(), consumed);
    env.ack(&consumed).await.assert_ok();
    let deleted = env
        .push(json!({"topic": "t", "body": "d", "delay": 60_000}))
        .await;
    env.delete(&deleted).await.assert_ok();
    env.wait_status(&consumed, status::CONSUMED).await;
    let unknown = "123456789";
    let reply = reschedule(
        &env,
        json!({"ids": [in_flight, consumed, deleted, unknown], "delay": 10}),
    )
    .await;
    let results: Vec<(&str, &str)> = reply["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_str().unwrap(), r["result"].as_str().unwrap()))
        .collect();
    assert_eq!(
        results,
        [
            (in_flight.as_str(), "in_flight"),
            (consumed.as_str(), "already_consumed"),
            (deleted.as_str(), "deleted"),
            (unknown, "not_found"),
        ],
        "{reply}"
    );
    assert_eq!(reply["rescheduled"], 0);
    // The delivery in flight is untouched: its ack works.
    env.ack(&in_flight).await.assert_ok();
    // No live message holds the key: nothing to move, and the answer says so.
    env.post_json(
        "/reschedule",
        &json!({"topic": "t", "bizKey": "none", "delay": 10}),
    )
    .await
    .assert_error(404, "not_found");
}

async fn bad_reschedules_change_nothing(b: Backend) {
    let env = Env::start(b).await;
    let id = env
        .push(json!({"topic": "t", "bizKey": "k", "body": "x", "delay": 60_000, "priority": 3}))
        .await;
    let before = env.journal.row(&id).unwrap();
    for (body, code) in [
        (json!({"ids": [id]}), "invalid_delay"),
        (
            json!({"ids": [id], "delay": 1, "deliverAt": 5}),
            "invalid_delay",
        ),
        (json!({"ids": [id], "delay": -1}), "invalid_delay"),
        (json!({"ids": [id], "priority": 256}), "invalid_priority"),
        (json!({"ids": [id], "delay": 1.5}), "invalid_field"),
        (
            json!({"ids": [id], "delay": 1, "colour": "red"}),
            "unknown_field",
        ),
        (
            json!({"ids": [id], "topic": "t", "delay": 1}),
            "invalid_body",
        ),
        (json!({"topic": "t", "delay": 1}), "invalid_body"),
        (json!({"delay": 1}), "invalid_body"),
        (
            json!({"topic": "no spaces", "bizKey": "k", "delay": 1}),
            "invalid_topic",
        ),
        (
            json!({"topic": "t", "bizKey": "", "delay": 1}),
            "invalid_biz_key",
        ),
        (json!({"ids": [], "delay": 1}), "invalid_ids"),
        (
            json!({"ids": [id], "priority": 1, "series": true}),
            "invalid_body",
        ),
        (
            json!({"ids": [id], "delay": 1, "series": "yes"}),
            "invalid_body",
        ),
        (json!([1, 2]), "invalid_body"),
    ] {
        let r = env.post_json("/reschedule", &body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        assert_eq!(r.json["error"], code, "{body}: {}", r.text);
    }
    let after = env.journal.row(&id).unwrap();
    assert_eq!(
        (after.due_time, after.priority),
        (before.due_time, before.priority)
    );
    env.assert_nothing("t", 1).await;
}

async fn a_message_waiting_beyond_the_horizon_moves_too(b: Backend) {
    let env = Env::builder(b)
        .arg("--redis-horizon")
        .arg("10s")
        .start()
        .await;
    // Beyond the horizon: in the journal alone, then moved near.
    let id = env
        .push(json!({"topic": "far", "body": "x", "delay": 3_600_000}))
        .await;
    assert_eq!(env.journal.row(&id).unwrap().status, status::WAIT_PUT);
    let reply = reschedule(&env, json!({"ids": [id], "delay": 1000})).await;
    let due = only_result(&reply)["dueTime"].as_i64().unwrap();
    assert_eq!(only_result(&reply)["result"], "rescheduled");
    // Redis did not hold it: the move's score waits for whatever schedules
    // it next (here the horizon loader), which takes it and drops it.
    let shard = env
        .keys
        .shard_of(delayq::message::MessageId(id.parse().unwrap()));
    let moved: Option<String> = redis::cmd("HGET")
        .arg(env.keys.moved(shard))
        .arg(&id)
        .query(&mut env.redis.con())
        .unwrap();
    let score = moved.expect("the move's score left for the next schedule");
    assert!(
        score.starts_with(&format!("{}|", due * 256 + 255)),
        "{score}"
    );
    let got = env.collect("far", 1, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 1, "never handed out");
    assert_eq!(got[0].id(), id);
    assert!(got[0].at >= due, "handed out {} ms early", due - got[0].at);
    let left: Option<String> = redis::cmd("HGET")
        .arg(env.keys.moved(shard))
        .arg(&id)
        .query(&mut env.redis.con())
        .unwrap();
    assert_eq!(left, None, "the move's score stays behind");
}

/// Messages due within the horizon moved beyond it: one Redis holds moves
/// there; one still waiting in the journal alone (WaitPut: its push never
/// reached Redis) is listed as waiting at its new time, so the horizon
/// loader schedules it as it comes near. Both are delivered at their new
/// time, neither early nor never (the reconciler, which would find the
/// second one missing once it is near, is off).
async fn a_message_moved_beyond_the_horizon_is_delivered_then(b: Backend) {
    use delayq::journal::schema::{message, message_waiting};
    use diesel::prelude::*;
    let env = Env::builder(b)
        .arg("--redis-horizon")
        .arg("6s")
        .arg("--reconcile-interval")
        .arg("0")
        .start()
        .await;
    let held = env
        .push(json!({"topic": "hz-move", "body": "held", "delay": 5_000}))
        .await;
    let alone = env
        .push(json!({"topic": "hz-move", "body": "alone", "delay": 5_000}))
        .await;
    // Both are seen Delaying before they fall due: 5 s leaves a loaded
    // machine's journal writer time (once Ready, they never read Delaying).
    env.wait_statuses(&[held.clone(), alone.clone()], status::DELAYING)
        .await;
    // `alone` as a push that met a Redis outage leaves it: in the journal
    // alone, WaitPut, not listed (due within the horizon when pushed).
    let k = &env.keys;
    let s = k.shard_of(delayq::message::MessageId(alone.parse().unwrap()));
    let mut con = env.redis.con();
    let removed: (i64, i64) = redis::pipe()
        .cmd("HDEL")
        .arg(k.messages(s))
        .arg(&alone)
        .cmd("ZREM")
        .arg(k.delay(s))
        .arg(&alone)
        .query(&mut con)
        .unwrap();
    assert_eq!(removed, (1, 1));
    let alone_id: i64 = alone.parse().unwrap();
    let listed = |id: i64| -> i64 {
        delayq::with_conn!(&mut env.journal.conn(), c => message_waiting::table
            .filter(message_waiting::id.eq(id))
            .count()
            .get_result(c))
        .expect("read the waiting list")
    };
    delayq::with_conn!(&mut env.journal.conn(), c => diesel::update(message::table.find(alone_id))
        .set(message::status.eq(status::WAIT_PUT))
        .execute(c))
    .expect("set the row back to WaitPut");
    assert_eq!(listed(alone_id), 0);

    let due = now_ms() + 8_000;
    let reply = reschedule(&env, json!({"ids": [held, alone], "deliverAt": due})).await;
    let results = reply["results"].as_array().expect("results");
    for r in results {
        assert_eq!(
            (r["result"].as_str(), r["dueTime"].as_i64()),
            (Some("rescheduled"), Some(due)),
            "{reply}"
        );
    }
    let listed_after_move = listed(alone_id);
    assert_eq!(env.journal.row(&alone).unwrap().due_time, due);

    let got = env.collect("hz-move", 2, Duration::from_secs(20)).await;
    let mut ids: Vec<&str> = got.iter().map(|r| r.id()).collect();
    ids.sort();
    let mut want = vec![held.as_str(), alone.as_str()];
    want.sort();
    assert_eq!(
        ids, want,
        "not both delivered ({alone} listed as waiting after its move: {listed_after_move}): {got:?}"
    );
    for r in &got {
        assert!(r.at >= due, "{} handed out {} ms early", r.id(), due - r.at);
        assert_eq!(r.msg["dueTime"].as_i64(), Some(due), "{r:?}");
        env.ack(r.id()).await.assert_ok();
    }
    assert_eq!(listed(alone_id), 0, "a loaded message stays listed");
}

/// A message waiting out a failed delivery's retry keeps that wait when
/// only its priority changes (the retry time is in the delay zset's score,
/// not in its record).
async fn a_retry_wait_is_kept_when_only_the_priority_changes(b: Backend) {
    let env = Env::start(b).await;
    let id = env
        .push(json!({"topic": "rw", "body": "x", "ttl": 200, "retry": {"backoff": "fixed", "delay": 3000}}))
        .await;
    let first = env.receive_one("rw").await;
    // Its ack deadline passes: due again 3 s later.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let reply = reschedule(&env, json!({"ids": [id], "priority": 7})).await;
    let one = only_result(&reply);
    assert_eq!(one["result"], "rescheduled", "{reply}");
    let due = one["dueTime"].as_i64().unwrap();
    assert!(due >= first.at + 3000, "the retry wait was lost: {reply}");
    assert_eq!(one["priority"], 7);
    let again = env.collect("rw", 1, Duration::from_secs(10)).await;
    assert_eq!(again.len(), 1);
    assert!(
        again[0].at >= due,
        "handed out {} ms before its retry",
        due - again[0].at
    );
}

/// `series: true` moves a recurring message's whole series: the pending
/// occurrence comes at the new time as its own due time, and the next one
/// follows from it (`every`), whether Redis holds the message or it waits
/// in the journal beyond the horizon. Without it, only the pending
/// occurrence moves and the series keeps its times.
async fn a_recurring_series_moves_as_a_whole(b: Backend) {
    let env = Env::builder(b)
        .arg("--redis-horizon")
        .arg("10s")
        .start()
        .await;
    let every = 1_500;
    let near = env
        .push(json!({"topic": "rec", "body": "near", "delay": 8_000,
                     "repeat": {"every": every, "times": 2}}))
        .await;
    let far = env
        .push(json!({"topic": "rec", "body": "far", "delay": 3_600_000,
                     "repeat": {"every": every, "times": 2}}))
        .await;
    let kept = env
        .push(json!({"topic": "rec", "body": "kept", "delay": 8_000,
                     "repeat": {"every": 60_000, "times": 2}}))
        .await;
    assert_eq!(env.journal.row(&far).unwrap().status, status::WAIT_PUT);
    let at = now_ms() + 600;
    let reply = reschedule(
        &env,
        json!({"ids": [near, far], "deliverAt": at, "series": true}),
    )
    .await;
    assert_eq!(reply["rescheduled"], 2, "{reply}");
    // Only the pending occurrence of `kept` moves.
    let reply = reschedule(&env, json!({"ids": [kept], "deliverAt": at})).await;
    assert_eq!(reply["rescheduled"], 1, "{reply}");
    // The journal takes the series with the move's status change, once
    // Redis moved it (or at once, for one waiting in the journal alone).
    for id in [&near, &far] {
        wait_until(
            "the series moved in the journal",
            Duration::from_secs(10),
            || async {
                let row = env.journal.row(id).unwrap();
                match (row.due_time, row.occurrence_time) {
                    (d, Some(t)) if d == at && t == at => Ok(()),
                    other => Err(format!("{id}: {other:?}")),
                }
            },
        )
        .await;
    }
    let row = env.journal.row(&kept).unwrap();
    assert_eq!(row.due_time, at);
    assert_ne!(row.occurrence_time, Some(at), "kept's series moved");
    let kept_series = row.occurrence_time.unwrap();

    // Each occurrence, as handed out: (id, number, its own due time).
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(25);
    while seen.len() < 5 && std::time::Instant::now() < deadline {
        for got in env.poll("rec", 2, 10).await {
            let due = got.msg["occurrence"]["dueTime"].as_i64().unwrap();
            let number = got.msg["occurrence"]["number"].as_i64().unwrap();
            let due_time = got.msg["dueTime"].as_i64().unwrap();
            assert!(
                got.at >= due_time,
                "{} handed out early: {}",
                got.id(),
                got.msg
            );
            seen.push((got.id().to_string(), number, due));
            env.ack(got.id()).await.assert_ok();
        }
    }
    seen.sort();
    let mut want = vec![
        (near.clone(), 1, at),
        (near.clone(), 2, at + every),
        (far.clone(), 1, at),
        (far.clone(), 2, at + every),
        (kept.clone(), 1, kept_series),
    ];
    want.sort();
    assert_eq!(seen, want);
    // One handed out is left alone, series and all, in Redis and in the
    // journal.
    let out = env
        .push(json!({"topic": "out", "body": "o", "delay": 0, "repeat": {"every": 60_000, "times": 2}}))
        .await;
    let got = env.receive_one("out").await;
    let series_time = got.msg["occurrence"]["dueTime"].as_i64().unwrap();
    let reply = reschedule(&env, json!({"ids": [out], "delay": 5_000, "series": true})).await;
    assert_eq!(only_result(&reply)["result"], "in_flight", "{reply}");
    env.ack(&out).await.assert_ok();
    wait_until(
        "out's next occurrence in the journal",
        Duration::from_secs(10),
        || async {
            match env.journal.row(&out).unwrap().occurrence_time {
                Some(t) if t == series_time + 60_000 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    // kept's second occurrence follows its old series, a minute on.
    wait_until(
        "kept's next occurrence in the journal",
        Duration::from_secs(10),
        || async {
            match env.journal.row(&kept).unwrap().occurrence_time {
                Some(t) if t == kept_series + 60_000 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
}

/// Messages whose ack was answered (200) before a reschedule of them was
/// sent are `already_consumed`; those acked while it runs `in_flight` or
/// `already_consumed`; those in flight `in_flight`: never `rescheduled`,
/// however the move's journal read and its Redis step interleave with the
/// acks' journal writes (each request carries 900 ids in flight ahead of
/// the acked ones, so its Redis step lasts; the acks sent while it runs
/// are spread over the time the request before took). None is handed out
/// again, and no move is left in Redis for any of them.
async fn messages_acked_or_in_flight_are_never_rescheduled(b: Backend) {
    use futures::future::join_all;
    use tokio::time::Instant;

    const FRONT: usize = 900;
    const ROUNDS: usize = 8;
    /// Acked before each request, and as many while it runs.
    const EACH: usize = 25;
    let env = Env::start(b).await;
    let batch = |topic: &str, n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| json!({"topic": topic, "body": format!("{i}"), "ttl": 600_000}))
            .collect()
    };
    let front = env.push_batch(batch("front", FRONT)).await;
    let acked = env.push_batch(batch("acked", ROUNDS * 2 * EACH)).await;
    for (topic, n) in [("front", FRONT), ("acked", acked.len())] {
        let got = env.collect(topic, n, Duration::from_secs(60)).await;
        assert_eq!(got.len(), n, "{topic}: all handed out");
    }
    env.wait_statuses(&acked, status::CONSUMING).await;

    // (id, which, result, ms from its ack's answer to the request sent).
    let mut wrong: Vec<(String, &str, String, i64)> = Vec::new();
    let mut answered = std::collections::BTreeMap::<String, usize>::new();
    let mut took = Duration::from_millis(300);
    for round in acked.chunks(2 * EACH) {
        let (before, during) = round.split_at(EACH);
        for a in join_all(before.iter().map(|id| env.ack(id))).await {
            a.assert_ok();
        }
        let acked_at = now_ms();
        let mut ids = front.clone();
        ids.extend(round.iter().cloned());
        let began = Instant::now();
        let sent = now_ms();
        let (reply, ()) = tokio::join!(
            reschedule(&env, json!({"ids": ids, "delay": 60_000})),
            async {
                for (i, id) in during.iter().enumerate() {
                    tokio::time::sleep_until(began + took * i as u32 / during.len() as u32).await;
                    env.ack(id).await.assert_ok();
                }
            }
        );
        took = began.elapsed();
        let results = reply["results"].as_array().expect("results");
        assert_eq!(results.len(), ids.len(), "{reply}");
        for (i, r) in results.iter().enumerate() {
            let (which, fine): (&str, &[&str]) = if i < FRONT {
                ("in flight", &["in_flight"])
            } else if i < FRONT + EACH {
                ("acked before", &["already_consumed"])
            } else {
                ("acked while", &["in_flight", "already_consumed"])
            };
            let result = r["result"].as_str().unwrap();
            assert_eq!(r["id"], ids[i]);
            *answered.entry(result.to_string()).or_default() += 1;
            if !fine.contains(&result) {
                wrong.push((ids[i].clone(), which, result.to_string(), sent - acked_at));
            }
        }
    }
    let mut by_kind = std::collections::BTreeMap::<(&str, &str), usize>::new();
    for (_, which, result, _) in &wrong {
        *by_kind.entry((*which, result.as_str())).or_default() += 1;
    }
    assert!(
        wrong.is_empty(),
        "{} wrong answers of {} ({by_kind:?}; all answers {answered:?}), e.g. {:?}",
        wrong.len(),
        ROUNDS * (FRONT + 2 * EACH),
        &wrong[..wrong.len().min(5)]
    );
    env.wait_statuses(&acked, status::CONSUMED).await;
    env.assert_nothing("acked", 1).await;
    let mut con = env.redis.con();
    for s in 0..crate::common::SHARDS {
        let left: i64 = redis::cmd("HLEN")
            .arg(env.keys.moved(s))
            .query(&mut con)
            .unwrap();
        assert_eq!(left, 0, "moves left in shard {s} for messages Redis ended");
    }
}

/// On PostgreSQL, a message acked between the move's read of its journal
/// row and the move's update of it is `already_consumed`, even when the
/// ack's end is journaled (and Redis forgot the end it kept for the
/// journal) before the move reaches Redis. Each step is held by a database
/// lock, so the interleaving is the same on every run:
///
/// 1. L1 locks A's row (FOR SHARE): the ack's journal write of A waits on
///    it, then the move (of A, then of the other ids) waits behind it.
/// 2. L2 locks the last other id's row, so the move stays in its journal
///    transaction once past A.
/// 3. L1 commits: the ack's end reaches the journal, Redis drops its copy
///    of the end (its tombstone stays); only then does L2 commit and the
///    move go on to Redis.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_a_message_acked_while_its_move_reads_the_journal_is_not_rescheduled() {
    use diesel::connection::SimpleConnection;
    use diesel::dsl::sql;
    use diesel::prelude::*;
    use diesel::sql_types::BigInt;

    let env = Env::start(Backend::Postgres).await;
    let others = env
        .push_batch(
            (0..50)
                .map(|i| json!({"topic": "later", "body": format!("{i}"), "delay": 600_000}))
                .collect(),
        )
        .await;
    let acked = env
        .push(json!({"topic": "t", "body": "a", "ttl": 600_000}))
        .await;
    assert_eq!(env.receive_one("t").await.id(), acked);
    env.wait_status(&acked, status::CONSUMING).await;
    env.wait_statuses(&others, status::DELAYING).await;
    let pg = || PgConnection::establish(&env.journal.url).expect("connect to PostgreSQL");
    let mut monitor = pg();
    let waiting = |monitor: &mut PgConnection| -> i64 {
        diesel::select(sql::<BigInt>(
            "(SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event_type = 'Lock')",
        ))
        .get_result(monitor)
        .expect("pg_stat_activity")
    };
    let wait_for = |monitor: &mut PgConnection, n: i64, what: &str| {
        let began = std::time::Instant::now();
        while waiting(monitor) != n {
            assert!(
                began.elapsed() < Duration::from_secs(10),
                "{what}: {} sessions wait on a lock, not {n}",
                waiting(monitor)
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let last = others.last().unwrap();
    let mut l1 = pg();
    l1.batch_execute(&format!(
        "BEGIN; SELECT id FROM message WHERE id = {acked} FOR SHARE"
    ))
    .unwrap();
    let mut l2 = pg();
    l2.batch_execute(&format!(
        "BEGIN; SELECT id FROM message WHERE id = {last} FOR SHARE"
    ))
    .unwrap();

    // 1. The ack is answered; its journal write waits on L1.
    env.ack(&acked).await.assert_ok();
    wait_for(&mut monitor, 1, "the ack's journal write waits on A");
    let mut ids = vec![acked.clone()];
    ids.extend(others.iter().cloned());
    let move_all = tokio::spawn(
        env.http
            .post(env.url("/reschedule"))
            .json(&json!({"ids": ids, "delay": 60_000}))
            .send(),
    );
    wait_for(&mut monitor, 2, "the move waits on A too");

    // 3. The ack's end is journaled, and Redis forgets its copy of it.
    l1.batch_execute("COMMIT").unwrap();
    env.wait_status(&acked, status::CONSUMED).await;
    let shard = env.keys.shard_of(crate::common::parse_id(&acked));
    wait_until(
        "Redis to forget the end the journal has",
        Duration::from_secs(10),
        || async {
            let kept: bool = redis::cmd("HEXISTS")
                .arg(env.keys.unjournaled(shard))
                .arg(&acked)
                .query(&mut env.redis.con())
                .unwrap();
            if kept {
                Err("still kept".to_string())
            } else {
                Ok(())
            }
        },
    )
    .await;
    wait_for(&mut monitor, 1, "the move waits on the last id");
    l2.batch_execute("COMMIT").unwrap();

    let reply = move_all.await.unwrap().expect("the reschedule answered");
    assert_eq!(reply.status(), 200);
    let reply: Value = reply.json().await.unwrap();
    let results = reply["results"].as_array().expect("results");
    assert_eq!(
        (results[0]["id"].as_str(), results[0]["result"].as_str()),
        (Some(acked.as_str()), Some("already_consumed")),
        "{reply}"
    );
    assert_eq!(reply["rescheduled"], others.len(), "{reply}");
    let moved: bool = redis::cmd("HEXISTS")
        .arg(env.keys.moved(shard))
        .arg(&acked)
        .query(&mut env.redis.con())
        .unwrap();
    assert!(!moved, "a move is left for a message Redis ended");
    assert_eq!(env.journal.row(&acked).unwrap().status, status::CONSUMED);
}

/// What a move's Redis step answers and leaves behind, from the script
/// itself: a message in flight is left alone; one acked whose end the
/// journal has (Redis keeps its tombstone alone) is `Ended`, and nothing is
/// left for it; one Redis does not hold (on its way) gets its move left,
/// indexed by when, in keys that expire within two minutes. The schedule
/// of that message takes the move (the score, and both entries leave), and
/// moves past their two minutes leave at the next move left or the next
/// schedule looking for moves in their shard.
#[tokio::test(flavor = "multi_thread")]
async fn a_move_is_left_only_for_a_message_on_its_way_and_not_for_long() {
    use delayq::message::{Message, MessageId};
    use delayq::redis::keys::score;
    use delayq::redis::schedule::{RedisMove, RedisSchedule};

    let env = Env::start(Backend::Sqlite).await;
    let con = delayq::redis::connect(&env.redis.url()).await.unwrap();
    let redis = RedisSchedule::new(con, env.keys.clone(), "test")
        .await
        .unwrap();
    let flying = env
        .push(json!({"topic": "t", "body": "f", "ttl": 600_000}))
        .await;
    assert_eq!(env.receive_one("t").await.id(), flying);
    let acked = env.push(json!({"topic": "t", "body": "a"})).await;
    assert_eq!(env.receive_one("t").await.id(), acked);
    env.ack(&acked).await.assert_ok();
    env.wait_status(&acked, status::CONSUMED).await;
    let k = env.keys.clone();
    let mut con = env.redis.con();
    let id_of = |id: &str| crate::common::parse_id(id);
    let acked_shard = k.shard_of(id_of(&acked));
    wait_until(
        "Redis to forget the end the journal has",
        Duration::from_secs(10),
        || async {
            let kept: bool = redis::cmd("HEXISTS")
                .arg(k.unjournaled(acked_shard))
                .arg(&acked)
                .query(&mut env.redis.con())
                .unwrap();
            if kept {
                Err("still kept".to_string())
            } else {
                Ok(())
            }
        },
    )
    .await;
    let due = now_ms() + 60_000;
    let new_score = score(due, 0) as i64;
    let move_to_due =
        |id: MessageId| redis.reschedule(id, Some(due), None, (due, 0), Default::default());
    let moves_of = |con: &mut redis::Connection, shard: u32| -> Vec<String> {
        redis::cmd("HKEYS").arg(k.moved(shard)).query(con).unwrap()
    };

    assert_eq!(
        move_to_due(id_of(&flying)).await.unwrap(),
        RedisMove::InFlight
    );
    assert_eq!(move_to_due(id_of(&acked)).await.unwrap(), RedisMove::Ended);
    assert_eq!(
        moves_of(&mut con, acked_shard),
        Vec::<String>::new(),
        "a move left for a message Redis ended"
    );

    // Ids Redis never held, in one shard: messages on their way.
    let shard = 2;
    let mut absent = (1_000_i64..)
        .map(MessageId)
        .filter(|&id| k.shard_of(id) == shard);
    let (on_way, other, stale, stale2) = (
        absent.next().unwrap(),
        absent.next().unwrap(),
        absent.next().unwrap(),
        absent.next().unwrap(),
    );
    assert_eq!(move_to_due(on_way).await.unwrap(), RedisMove::Absent);
    let left: Option<String> = redis::cmd("HGET")
        .arg(k.moved(shard))
        .arg(on_way.to_string())
        .query(&mut con)
        .unwrap();
    let left = left.expect("the move left for the message on its way");
    let (score_left, at) = left.split_once('|').unwrap();
    assert_eq!(score_left, new_score.to_string());
    let indexed: Option<i64> = redis::cmd("ZSCORE")
        .arg(k.moved_at(shard))
        .arg(on_way.to_string())
        .query(&mut con)
        .unwrap();
    assert_eq!(indexed, Some(at.parse().unwrap()));
    for key in [k.moved(shard), k.moved_at(shard)] {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
        assert!((1..=120_000).contains(&ttl), "{key} expires in {ttl} ms");
    }

    // A move three minutes old, as one left before an older version's
    // hash had an index would be too: the next move left drops it.
    let plant = |con: &mut redis::Connection, id: MessageId| {
        let at = now_ms() - 180_000;
        let _: () = redis::pipe()
            .hset(k.moved(shard), id.to_string(), format!("{new_score}|{at}"))
            .zadd(k.moved_at(shard), id.to_string(), at)
            .query(con)
            .unwrap();
    };
    plant(&mut con, stale);
    assert_eq!(move_to_due(other).await.unwrap(), RedisMove::Absent);
    let mut left = moves_of(&mut con, shard);
    left.sort();
    let mut want = vec![on_way.to_string(), other.to_string()];
    want.sort();
    assert_eq!(left, want, "the stale move stays");
    let indexed: i64 = redis::cmd("ZCARD")
        .arg(k.moved_at(shard))
        .query(&mut con)
        .unwrap();
    assert_eq!(indexed, 2);

    // The schedule of the message on its way (at its old time, read from
    // the journal before the move) takes the move, and drops the stale.
    plant(&mut con, stale2);
    let message: Message = serde_json::from_value(json!({
        "id": on_way.to_string(), "topic": "way", "body": "b", "priority": 0,
        "ttl": 30_000, "delay": 5_000, "createTime": now_ms(), "dueTime": now_ms() + 5_000
    }))
    .unwrap();
    redis.schedule(&[(message, 0)], 0).await.unwrap();
    let scheduled: Option<i64> = redis::cmd("ZSCORE")
        .arg(k.delay(shard))
        .arg(on_way.to_string())
        .query(&mut con)
        .unwrap();
    assert_eq!(scheduled, Some(new_score), "scheduled at the move's time");
    assert_eq!(moves_of(&mut con, shard), vec![other.to_string()]);
    let indexed: Vec<String> = redis::cmd("ZRANGE")
        .arg(k.moved_at(shard))
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    assert_eq!(indexed, vec![other.to_string()]);
    let _: () = redis::pipe()
        .zrem(k.delay(shard), on_way.to_string())
        .hdel(k.messages(shard), on_way.to_string())
        .query(&mut con)
        .unwrap();
}

/// `delayq reshard` takes the moves left for messages on their way to
/// Redis to each message's shard under the new count (score, time and
/// index, still expiring), and drops those past their two minutes.
#[tokio::test(flavor = "multi_thread")]
async fn moves_left_for_messages_on_their_way_follow_a_reshard() {
    use delayq::message::MessageId;
    use delayq::redis::keys::{shard_of, Keys};

    let mut env = Env::builder(Backend::Sqlite)
        .arg("--redis-horizon")
        .arg("10s")
        .start()
        .await;
    // Beyond the horizon: in the journal alone, moved while Redis does
    // not hold them.
    let far = env
        .push_batch(
            (0..12)
                .map(|i| json!({"topic": "far", "body": format!("{i}"), "delay": 3_600_000}))
                .collect(),
        )
        .await;
    let reply = reschedule(&env, json!({"ids": far, "delay": 3_000_000})).await;
    assert_eq!(reply["rescheduled"], far.len(), "{reply}");
    let old = env.keys.clone();
    let mut con = env.redis.con();
    let left: Vec<(MessageId, String, i64)> = far
        .iter()
        .map(|id| {
            let s = old.shard_of(crate::common::parse_id(id));
            let (value, at): (Option<String>, Option<i64>) = redis::pipe()
                .hget(old.moved(s), id)
                .zscore(old.moved_at(s), id)
                .query(&mut con)
                .unwrap();
            (
                crate::common::parse_id(id),
                value.expect("a move left"),
                at.expect("indexed"),
            )
        })
        .collect();
    let stale = MessageId(7);
    let at = now_ms() - 180_000;
    let s = old.shard_of(stale);
    let _: () = redis::pipe()
        .hset(old.moved(s), stale.to_string(), format!("1|{at}"))
        .zadd(old.moved_at(s), stale.to_string(), at)
        .query(&mut con)
        .unwrap();
    env.stop_server();

    let out = env.run_tool(&["reshard", "--shards", "8"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let changing = left
        .iter()
        .filter(|(id, _, _)| shard_of(*id, 8) != old.shard_of(*id))
        .count();
    assert!(changing > 0, "every id keeps its shard: pick others");
    assert_eq!(report["moves"], changing, "{report}");
    assert_eq!(report["movesDropped"], 1, "{report}");
    let new = Keys::new(&env.config.key_prefix, 8);
    for (id, value, at) in &left {
        let n = new.shard_of(*id);
        let (moved, indexed, ttl): (Option<String>, Option<i64>, i64) = redis::pipe()
            .hget(new.moved(n), id.to_string())
            .zscore(new.moved_at(n), id.to_string())
            .pttl(new.moved(n))
            .query(&mut con)
            .unwrap();
        assert_eq!(moved.as_ref(), Some(value), "{id} in shard {n} of 8");
        assert_eq!(indexed, Some(*at));
        assert!(ttl > 0, "{id}'s moves never expire");
        let o = old.shard_of(*id);
        if o != n {
            let (gone, unindexed): (bool, Option<i64>) = redis::pipe()
                .hexists(old.moved(o), id.to_string())
                .zscore(old.moved_at(o), id.to_string())
                .query(&mut con)
                .unwrap();
            assert!(!gone && unindexed.is_none(), "{id} left in shard {o}");
        }
    }
    for shard in 0..8 {
        let (there, indexed): (bool, Option<i64>) = redis::pipe()
            .hexists(new.moved(shard), stale.to_string())
            .zscore(new.moved_at(shard), stale.to_string())
            .query(&mut con)
            .unwrap();
        assert!(
            !there && indexed.is_none(),
            "the stale move kept in {shard}"
        );
    }
}

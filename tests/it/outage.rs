//! Outages lose nothing that was accepted. Redis: a push during the outage
//! is refused with 503 but is durable in the journal, and a restore after
//! Redis is back delivers it exactly once. The database (a private MariaDB
//! the test kills): pushes are refused at once, delivery of what was
//! scheduled goes on, and every status change reaches the journal when it
//! is back.

use std::time::Duration;

use std::collections::HashSet;
use std::time::Instant;

use crate::common::mariadb::PrivateMariadb;
use crate::common::{random_hex, status, wait_every, wait_until, Backend, Env};
use serde_json::json;

/// The database is killed under load for 10 s, then comes back.
#[tokio::test(flavor = "multi_thread")]
async fn database_outage_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("delayq_outage_{}", random_hex(8));
    let mut mariadb = PrivateMariadb::start(dir.path(), &db);
    let env = Env::builder(Backend::Mariadb)
        .journal_url(&mariadb.url(&db))
        .start()
        .await;

    // 300 messages due over the next 1-4 s, accepted before the outage.
    let mut accepted: Vec<String> = Vec::new();
    for chunk in 0..3 {
        accepted.extend(
            env.push_batch(
                (0..100)
                    .map(|i| {
                        json!({"topic": "db", "body": format!("{chunk}-{i}"),
                                    "delay": 1000 + (chunk * 100 + i) * 10})
                    })
                    .collect(),
            )
            .await,
        );
    }
    // Consumers ack each batch in the poll for the next, all through the
    // outage.
    let consumer = {
        let (http, url) = (env.http.clone(), env.url("/get/db"));
        tokio::spawn(async move {
            // Each delivery with when it arrived.
            let mut got: Vec<(String, Instant)> = Vec::new();
            let mut ack: Vec<String> = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(40);
            while Instant::now() < deadline {
                let body = json!({"ack": ack, "count": 100, "timeout": 1});
                let Ok(resp) = http.post(&url).json(&body).send().await else {
                    continue;
                };
                if resp.status() != 200 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                let v: serde_json::Value = resp.json().await.unwrap();
                ack = v["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| m["id"].as_str().unwrap().to_string())
                    .collect();
                let now = Instant::now();
                got.extend(ack.iter().map(|id| (id.clone(), now)));
                if got.len() >= 320 && ack.is_empty() {
                    break;
                }
            }
            got
        })
    };

    tokio::time::sleep(Duration::from_millis(500)).await;
    mariadb.kill();
    let outage = Instant::now();
    // Pushes are refused, clearly and at once.
    let mut refused = 0;
    while outage.elapsed() < Duration::from_secs(10) {
        let t = Instant::now();
        let r = env
            .post_json("/push", &json!({"topic": "db", "body": "during"}))
            .await;
        r.assert_error(503, "journal_unavailable");
        assert!(
            t.elapsed() < Duration::from_millis(2500),
            "a push during the outage waited {:?}",
            t.elapsed()
        );
        refused += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(refused >= 3);
    let due_before_the_restart = accepted.clone();
    let restarted = Instant::now();
    mariadb.restart();
    // Pushes are accepted again once the node reconnects.
    let back = Instant::now();
    let mut later = Vec::new();
    while later.len() < 20 {
        let r = env
            .post_json(
                "/push",
                &json!({"topic": "db", "body": "after", "delay": 200}),
            )
            .await;
        if r.status == 200 {
            later.push(r.json["id"].as_str().unwrap().to_string());
        } else {
            assert!(
                back.elapsed() < Duration::from_secs(15),
                "pushes still refused: {}",
                r.text
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    accepted.extend(later);

    let got = consumer.await.unwrap();
    // Delivery went on through the outage: the 300 messages that fell due
    // in it were all handed out before the database came back.
    let during: HashSet<&String> = got
        .iter()
        .filter(|(_, at)| *at < restarted)
        .map(|(id, _)| id)
        .collect();
    let late: Vec<&String> = due_before_the_restart
        .iter()
        .filter(|id| !during.contains(id))
        .collect();
    assert!(
        late.is_empty(),
        "{} of the {} messages due during the outage were delivered only after it, e.g. {:?}",
        late.len(),
        due_before_the_restart.len(),
        late.first()
    );
    let got: Vec<String> = got.into_iter().map(|(id, _)| id).collect();
    let unique: HashSet<&String> = got.iter().collect();
    let accepted_set: HashSet<&String> = accepted.iter().collect();
    assert!(
        accepted_set.is_subset(&unique),
        "{} accepted messages never delivered",
        accepted_set.difference(&unique).count()
    );
    assert!(
        unique.is_subset(&accepted_set),
        "a refused push was delivered"
    );
    // The status changes made during the outage all reach the journal: every
    // accepted message ends Consumed.
    let what = "every accepted message Consumed in the journal";
    let every = Duration::from_millis(200);
    wait_every(what, Duration::from_secs(20), every, || async {
        let open: Vec<&String> = accepted
            .iter()
            .filter(|id| env.journal.row(id).map(|r| r.status) != Some(status::CONSUMED))
            .collect();
        match open.first() {
            None => Ok(()),
            Some(one) => Err(format!("{} not Consumed, e.g. {one}", open.len())),
        }
    })
    .await;
    drop(env);
}

backend_tests!(
    redis_outage_loses_nothing,
    redis_restart_is_restored_by_the_node_itself,
    prompt_retry_after_a_refused_push_is_delivered,
);

async fn redis_outage_loses_nothing(b: Backend) {
    let mut env = Env::start(b).await;
    env.wait_readiness(200).await;
    let before = env
        .push(json!({"topic": "out", "body": "before", "delay": 60_000}))
        .await;
    env.wait_scheduled(&before).await;
    assert!(env.scheduled_in_redis(&before));

    env.redis.kill();
    let r = env.wait_readiness(503).await;
    assert!(
        r.json["redis"].as_str().is_some_and(|s| s != "ok"),
        "{}",
        r.text
    );
    assert_eq!(r.json["journal"], "ok", "{}", r.text);

    let r = env
        .post_json(
            "/push",
            &json!({"topic": "out", "bizKey": "during", "body": "during", "delay": 200}),
        )
        .await;
    r.assert_error(503, "redis_unavailable");
    let rows = env.journal.rows_by_biz_key("out", "during");
    assert_eq!(
        rows.len(),
        1,
        "the refused push must still be durable in the journal"
    );
    let (row, id) = (&rows[0], rows[0].id.to_string());
    assert_eq!(
        (row.status, row.body.as_str()),
        (status::WAIT_PUT, "during")
    );
    assert!(
        r.json["message"].as_str().unwrap().contains(&id),
        "the error should name the durable id: {}",
        r.text
    );

    env.redis.restart_same_port();
    env.wait_readiness(200).await;
    let r = env.get_path("/reStore?expire=true").await;
    let report = r.assert_ok();
    // Redis came back empty: both the accepted messages are restored, by
    // this call or by the node's own restore (it notices the missing data
    // set marker within a second). When the node's restore is under way,
    // this call resumes after its cursor and finds nothing left to do.
    if report["resumedAfter"].is_null() {
        let restored =
            report["restored"].as_u64().unwrap() + report["alreadyPresent"].as_u64().unwrap();
        assert_eq!(restored, 2, "{report}");
    }
    // Whichever restore did it, the message due in a minute is back in
    // Redis's schedule, not only in the journal.
    wait_until(
        "the message due in a minute to be scheduled in Redis again",
        Duration::from_secs(10),
        || async { env.scheduled_in_redis(&before).then_some(()) },
    )
    .await;

    let got = env.collect("out", 1, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].id(), got[0].msg["body"].as_str()),
        (id.as_str(), Some("during"))
    );
    env.ack(&id).await.assert_ok();
    env.assert_nothing("out", 1).await;
    assert_eq!(env.journal.row(&id).unwrap().status, status::CONSUMED);
    assert_eq!(env.journal.rows_by_biz_key("out", "during").len(), 1);
    assert!(env.journal.row(&before).unwrap().status < status::CONSUMING);
}

/// Redis restarts empty while the node keeps running: the data set marker
/// is gone while the journal holds live messages, so (DESIGN.md, "Redis
/// layout") the node must restore from the journal by itself.
async fn redis_restart_is_restored_by_the_node_itself(b: Backend) {
    let mut env = Env::start(b).await;
    let id = env
        .push(json!({"topic": "self", "body": "kept", "delay": 1500}))
        .await;
    env.wait_scheduled(&id).await;

    env.redis.kill();
    env.wait_readiness(503).await;
    env.redis.restart_same_port();
    env.wait_readiness(200).await;

    // No manual restore: the message must still be delivered.
    let got = env.collect("self", 1, Duration::from_secs(10)).await;
    assert_eq!(
        got.iter().map(|r| r.id()).collect::<Vec<_>>(),
        [id.as_str()],
        "a message accepted before Redis restarted empty was not delivered within 10 s \
         (no restore happened; the data set marker is {:?})",
        redis::cmd("GET")
            .arg(env.keys.dataset_marker())
            .query::<Option<String>>(&mut env.redis.con())
            .unwrap()
    );
}

/// A push refused with 503 (Redis failed while the journal took it) and
/// retried at once with the same bizKey, as the 503 message advises: the
/// retry is answered 200 `duplicate`, so the message must be delivered.
async fn prompt_retry_after_a_refused_push_is_delivered(b: Backend) {
    let env = Env::start(b).await;
    // Redis refuses writes (scripts included) but keeps its data and answers PING.
    let set = |n: &str| {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("min-replicas-to-write")
            .arg(n)
            .query(&mut env.redis.con())
            .unwrap();
    };
    set("1");
    let msg = json!({"topic": "retry", "bizKey": "pay-1", "body": "once", "delay": 100});
    let r = env.post_json("/push", &msg).await;
    r.assert_error(503, "redis_unavailable");
    let row = &env.journal.rows_by_biz_key("retry", "pay-1")[0];
    assert_eq!(row.status, status::WAIT_PUT);
    set("0");

    let r = env.post_json("/push", &msg).await;
    assert_eq!(
        r.assert_ok(),
        &json!({"id": row.id.to_string(), "duplicate": true})
    );
    let got = env.collect("retry", 1, Duration::from_secs(5)).await;
    assert_eq!(
        got.len(),
        1,
        "the retried push was answered 200 but its message is not delivered \
         (journal status {})",
        env.journal.row(&row.id.to_string()).unwrap().status
    );
}

/// One single ack (or cancel) sent during the outage: what it answered,
/// and how long it took.
struct Timed {
    id: String,
    status: u16,
    json: serde_json::Value,
    took: Duration,
}

async fn timed(req: reqwest::RequestBuilder, id: String) -> Timed {
    let t = Instant::now();
    let resp = req.send().await.expect("HTTP request");
    let status = resp.status().as_u16();
    let json = resp.json().await.unwrap_or(serde_json::Value::Null);
    Timed {
        id,
        status,
        json,
        took: t.elapsed(),
    }
}

/// The database stops answering (SIGSTOP: connections stay open, queries
/// hang) while consumers ack messages in flight one request each, and among
/// them acks the journal must answer: ids delayq never issued, and messages
/// acked (and journaled) long ago. An ack of a message in flight is applied
/// in Redis and answered 200 at once, whatever waits beside it; an ack the
/// journal must answer waits for it at most a couple of seconds, then says
/// 503 `journal_unavailable` (nothing changed; sent again once the database
/// is back it gets its true outcome). Nothing acked comes back.
#[tokio::test(flavor = "multi_thread")]
async fn single_acks_answer_through_a_database_stall_beside_acks_of_unknown_ids() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("delayq_stall_{}", random_hex(8));
    let mariadb = PrivateMariadb::start(dir.path(), &db);
    let env = Env::builder(Backend::Mariadb)
        .journal_url(&mariadb.url(&db))
        .start()
        .await;
    // 40 messages to ack during the stall, 10 acked before it.
    let ids = env
        .push_batch(
            (0..50)
                .map(|i| json!({"topic": "stall", "body": format!("{i}"), "ttl": 60_000}))
                .collect(),
        )
        .await;
    let got = env.collect("stall", 50, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 50);
    let (good, old) = ids.split_at(40);
    for id in old {
        env.ack(id).await.assert_ok();
    }
    env.wait_statuses(&ids[..40], status::CONSUMING).await;
    env.wait_statuses(old, status::CONSUMED).await;
    // Redis keeps no end for the journal: an ack of an old one asks the
    // journal.
    env.wait_journaled().await;
    let unknown: Vec<String> = (0..20).map(|i| (1_000_000 + i).to_string()).collect();

    mariadb.pause();
    let stalled = Instant::now();
    let acks = {
        let (http, base) = (env.http.clone(), env.url(""));
        let (good, old, unknown) = (good.to_vec(), old.to_vec(), unknown.clone());
        tokio::spawn(async move {
            let ack = |id: &String| timed(http.post(format!("{base}/ack/{id}")), id.clone());
            let mut asking = Vec::new();
            let mut answered = Vec::new();
            // Before each good ack, now and then an ack the journal must
            // answer (sent, not awaited: another consumer's).
            let mut journal_bound = unknown.iter().chain(old.iter());
            for (i, id) in good.iter().enumerate() {
                if i % 4 != 3 {
                    if let Some(other) = journal_bound.next() {
                        asking.push(tokio::spawn(ack(other)));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                answered.push(ack(id).await);
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            let mut asked = Vec::new();
            for a in asking {
                asked.push(a.await.unwrap());
            }
            (answered, asked)
        })
    };
    // The stall lasts 8 s, longer than the acks take when nothing holds
    // them up.
    tokio::time::sleep(Duration::from_secs(8).saturating_sub(stalled.elapsed())).await;
    mariadb.resume();
    let resumed = stalled.elapsed();
    let (answered, asked) = acks.await.unwrap();

    let slowest = answered.iter().map(|a| a.took).max().unwrap();
    eprintln!(
        "stall {resumed:?}: good acks answered in at most {slowest:?}; \
         acks the journal answers in at most {:?}",
        asked.iter().map(|a| a.took).max().unwrap()
    );
    for a in &answered {
        assert_eq!(
            (a.status, a.json["status"].as_str()),
            (200, Some("Consumed")),
            "ack of {} in flight: {}",
            a.id,
            a.json
        );
    }
    let slow: Vec<(&str, Duration)> = answered
        .iter()
        .filter(|a| a.took > Duration::from_secs(1))
        .map(|a| (a.id.as_str(), a.took))
        .collect();
    assert!(
        slow.is_empty(),
        "{} of {} acks of messages in flight took over 1 s with the journal stalled, \
         e.g. {:?}",
        slow.len(),
        answered.len(),
        slow.first()
    );
    // Acks the journal must answer: a clear 503 within a few seconds, not
    // held for the whole stall.
    for a in &asked {
        assert_eq!(
            (a.status, a.json["error"].as_str()),
            (503, Some("journal_unavailable")),
            "ack of {} with the journal stalled: {}",
            a.id,
            a.json
        );
        assert!(
            a.took < Duration::from_secs(4),
            "ack of {} waited {:?} for the stalled journal",
            a.id,
            a.took
        );
    }

    // The journal back: the same acks get their true outcome.
    for id in &unknown {
        env.ack(id).await.assert_error(404, "not_found");
    }
    for id in old.iter().chain(good) {
        assert_eq!(env.ack(id).await.assert_ok()["status"], "Consumed");
    }
    // Every ack answered 200 is journaled, and nothing comes back, not
    // even from a restore.
    env.wait_statuses(&ids, status::CONSUMED).await;
    let in_flight = env.in_flight_ids();
    assert!(in_flight.is_empty(), "still in flight: {in_flight:?}");
    let r = env.get_path("/reStore?expire=true").await;
    assert_eq!(r.assert_ok()["restored"], 0, "{}", r.text);
    env.assert_nothing("stall", 1).await;
    drop(env);
}

/// Single cancels queued while the database stops answering: each is
/// answered on its own after the 2 s wait for its commit (503 `journal_unavailable`,
/// applied in Redis; the journal records it when it is back), not a few
/// seconds more for each cancel queued before it.
#[tokio::test(flavor = "multi_thread")]
async fn queued_single_cancels_answer_in_time_through_a_database_stall() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("delayq_stall_{}", random_hex(8));
    let mariadb = PrivateMariadb::start(dir.path(), &db);
    let env = Env::builder(Backend::Mariadb)
        .journal_url(&mariadb.url(&db))
        .start()
        .await;
    let ids = env
        .push_batch(
            (0..12)
                .map(|i| json!({"topic": "stall", "body": format!("{i}"), "delay": 600_000}))
                .collect(),
        )
        .await;
    for id in &ids {
        env.wait_scheduled(id).await;
    }

    mariadb.pause();
    let stalled = Instant::now();
    let cancels = {
        let (http, base) = (env.http.clone(), env.url(""));
        let ids = ids.clone();
        tokio::spawn(async move {
            let mut sent = Vec::new();
            for id in &ids {
                let req = http.get(format!("{base}/delete?id={id}"));
                sent.push(tokio::spawn(timed(req, id.clone())));
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            let mut answered = Vec::new();
            for s in sent {
                answered.push(s.await.unwrap());
            }
            answered
        })
    };
    tokio::time::sleep(Duration::from_secs(8).saturating_sub(stalled.elapsed())).await;
    mariadb.resume();
    let answered = cancels.await.unwrap();
    eprintln!(
        "queued cancels answered in at most {:?}",
        answered.iter().map(|a| a.took).max().unwrap()
    );
    for a in &answered {
        assert_eq!(
            (a.status, a.json["error"].as_str()),
            (503, Some("journal_unavailable")),
            "cancel of {} with the journal stalled: {}",
            a.id,
            a.json
        );
        // The journal's commit is waited for 2 s: a cancel that waited
        // longer waited for another's.
        assert!(
            a.took < Duration::from_secs(3),
            "cancel of {} waited {:?} with the journal stalled",
            a.id,
            a.took
        );
    }
    // Applied in Redis all the same; journaled once the database is back,
    // and a cancel sent again says so.
    for id in &ids {
        assert!(!env.scheduled_in_redis(id), "{id} still scheduled");
    }
    env.wait_statuses(&ids, status::DELETED).await;
    for id in &ids {
        assert_eq!(env.delete(id).await.assert_ok()["result"], "deleted");
    }
    drop(env);
}

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

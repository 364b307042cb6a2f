//! The journal under faults that are not plain outages: rows the database
//! refuses while it answers (a constraint or trigger an operator added), a
//! database down long enough to fill the status-change backlog, and a node
//! stopped while its database is down.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::common::mariadb::PrivateMariadb;
use crate::common::{random_hex, status, wait_every, wait_until, Backend, Env};
use delayq::with_conn;
use diesel::connection::SimpleConnection;
use serde_json::{json, Value};

backend_tests!(
    refused_rows_are_set_aside_and_the_rest_is_written,
    an_outage_of_ids_sets_nothing_aside,
    a_database_refusing_every_write_is_an_outage,
    a_retried_ack_or_cancel_journals_the_end_redis_kept
);

/// Runs SQL on the test's journal database.
fn sql(env: &Env, text: &str) {
    let mut conn = env.journal.conn();
    with_conn!(&mut conn, c => c.batch_execute(text)).expect("run SQL on the journal");
}

/// Makes the database refuse to insert messages of topic `refused` and to
/// update messages of topic `poison`.
pub(crate) fn add_refusing_triggers(env: &Env, b: Backend) {
    match b {
        Backend::Sqlite => sql(
            env,
            "CREATE TRIGGER refuse_insert BEFORE INSERT ON message WHEN NEW.topic = 'refused' \
             BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END; \
             CREATE TRIGGER refuse_update BEFORE UPDATE ON message WHEN NEW.topic = 'poison' \
             BEGIN SELECT RAISE(ABORT, 'poison row'); END;",
        ),
        Backend::Mariadb => {
            sql(
                env,
                "CREATE TRIGGER refuse_insert BEFORE INSERT ON message FOR EACH ROW \
                 BEGIN IF NEW.topic = 'refused' THEN \
                 SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by a trigger'; END IF; END",
            );
            sql(
                env,
                "CREATE TRIGGER refuse_update BEFORE UPDATE ON message FOR EACH ROW \
                 BEGIN IF NEW.topic = 'poison' THEN \
                 SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'poison row'; END IF; END",
            );
        }
        Backend::Postgres => sql(
            env,
            "CREATE FUNCTION refuse_rows() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
               IF TG_OP = 'INSERT' AND NEW.topic = 'refused' THEN RAISE EXCEPTION 'refused by a trigger'; END IF; \
               IF TG_OP = 'UPDATE' AND NEW.topic = 'poison' THEN RAISE EXCEPTION 'poison row'; END IF; \
               RETURN NEW; END $$; \
             CREATE TRIGGER refuse_rows BEFORE INSERT OR UPDATE ON message \
               FOR EACH ROW EXECUTE FUNCTION refuse_rows();",
        ),
    }
}

/// Makes the database refuse every status change (and so every push) while
/// it still answers reads: the node's journal falls behind.
pub(crate) fn refuse_flow_writes(env: &Env, b: Backend) {
    match b {
        Backend::Sqlite => sql(
            env,
            "CREATE TRIGGER no_writes BEFORE INSERT ON message_flow \
             BEGIN SELECT RAISE(ABORT, 'no writes'); END;",
        ),
        Backend::Mariadb => sql(
            env,
            "CREATE TRIGGER no_writes BEFORE INSERT ON message_flow FOR EACH ROW \
             SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'no writes'",
        ),
        Backend::Postgres => sql(
            env,
            "CREATE FUNCTION no_writes() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
               RAISE EXCEPTION 'no writes'; END $$; \
             CREATE TRIGGER no_writes BEFORE INSERT ON message_flow \
               FOR EACH ROW EXECUTE FUNCTION no_writes();",
        ),
    }
}

/// Undoes [`refuse_flow_writes`].
pub(crate) fn allow_flow_writes(env: &Env, b: Backend) {
    match b {
        Backend::Postgres => sql(env, "DROP TRIGGER no_writes ON message_flow"),
        _ => sql(env, "DROP TRIGGER no_writes"),
    }
}

async fn admin_journal(env: &Env) -> Value {
    env.get_path("/admin/journal").await.assert_ok().clone()
}

async fn refused_rows_are_set_aside_and_the_rest_is_written(b: Backend) {
    let env = Env::start(b).await;
    add_refusing_triggers(&env, b);

    // Pushes committed together: only the refused one gets the error.
    let bodies: Vec<Value> = (0..12)
        .map(|i| {
            let topic = if i == 5 { "refused" } else { "ok" };
            json!({"topic": topic, "body": format!("{i}"), "delay": 100})
        })
        .collect();
    let replies = futures::future::join_all(bodies.iter().map(|b| env.post_json("/push", b))).await;
    let mut ok = Vec::new();
    for (i, r) in replies.iter().enumerate() {
        if i == 5 {
            r.assert_error(500, "journal_refused");
        } else {
            ok.push(crate::common::id_of(r.assert_ok()).to_string());
        }
    }

    // A message whose status updates the database refuses is delivered all
    // the same; its changes are set aside, everybody else's are written.
    let poison = env
        .push(json!({"topic": "poison", "body": "p", "delay": 100}))
        .await;
    let got = env.collect("ok", ok.len(), Duration::from_secs(10)).await;
    assert_eq!(got.len(), ok.len());
    assert_eq!(env.receive_one("poison").await.id(), poison);
    for id in ok.iter().chain([&poison]) {
        env.ack(id).await;
    }
    for id in &ok {
        env.wait_status(id, status::CONSUMED).await;
    }
    let what = "the poison row to be set aside";
    let every = Duration::from_millis(200);
    let (j, refused) = wait_every(what, Duration::from_secs(20), every, || async {
        let j = admin_journal(&env).await;
        let refused: HashSet<String> = j["recentRefused"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect();
        if refused.contains(&poison) && j["pending"] == 0 {
            Ok((j, refused))
        } else {
            Err(j)
        }
    })
    .await;
    assert!(j["refused"].as_u64().unwrap() >= 1);
    assert!(
        refused.iter().all(|id| *id == poison),
        "only the poison row is set aside: {j}"
    );
    // The poison row stays as the database last took it.
    assert_eq!(env.journal.row(&poison).unwrap().status, status::WAIT_PUT);
}

/// Pushes and acks through the one-round-trip loop until `want` messages
/// came or `within` passed; returns the ids received.
async fn consume(env: &Env, topic: &str, want: usize, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    let mut ack: Vec<String> = Vec::new();
    while got.len() < want && Instant::now() < deadline {
        let r = env
            .post_json(
                &format!("/get/{topic}"),
                &json!({"ack": ack, "count": 100, "timeout": 1}),
            )
            .await;
        if r.status != 200 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        ack = r.json["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect();
        got.extend(ack.iter().cloned());
    }
    if !ack.is_empty() {
        env.post_json("/ack", &json!({"ids": ack})).await;
    }
    got
}

/// The database is down long enough to fill a small backlog: promotion
/// holds off instead of queueing without bound; the node is stopped during
/// the outage and keeps what the journal did not take in Redis; the next
/// start writes it, and every message is delivered and ends Consumed.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_backlog_holds_promotion_and_a_stop_keeps_changes_in_redis() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("delayq_backlog_{}", random_hex(8));
    let mut mariadb = PrivateMariadb::start(dir.path(), &db);
    let mut env = Env::builder(Backend::Mariadb)
        .journal_url(&mariadb.url(&db))
        .arg("--journal-backlog")
        .arg("40")
        .start()
        .await;
    let accepted = env
        .push_batch(
            (0..300)
                .map(|i| json!({"topic": "bl", "body": format!("{i}"), "delay": 3000 + i * 10}))
                .collect(),
        )
        .await;
    // Nothing is due yet and the journal holds every push's changes: the
    // backlog is empty when the database goes.
    wait_until(
        "an empty journal backlog",
        Duration::from_secs(10),
        || async {
            let j = admin_journal(&env).await;
            (j["pending"] == 0).then_some(())
        },
    )
    .await;
    mariadb.kill();
    // Through the outage every message falls due, but promotion stops once
    // 40 changes wait: each delivery queues two (Ready, Consuming), so
    // about 20 are delivered, a few more when a late scan promotes several
    // due messages at once. Without the bound all 300 would be.
    let during = consume(&env, "bl", 300, Duration::from_secs(7)).await;
    eprintln!("delivered during the outage: {}", during.len());
    assert!(
        during.len() <= 60,
        "{} of 300 delivered with the journal down and a backlog of 40",
        during.len()
    );
    let j = admin_journal(&env).await;
    assert_eq!(j["lagging"], true, "{j}");
    assert!(j["pending"].as_u64().unwrap() >= 40, "{j}");
    // The node tells the cluster its journal is behind (the leader's
    // reconciler holds off its repairs meanwhile).
    let behind: Vec<String> = redis::cmd("ZRANGE")
        .arg(env.keys.journal_behind())
        .arg(0)
        .arg(-1)
        .query(&mut env.redis.con())
        .unwrap();
    assert_eq!(behind.len(), 1, "{behind:?}");

    // Stopped with the database still down: the queued changes go to Redis.
    env.stop_server();
    let spilled: i64 = redis::cmd("LLEN")
        .arg(env.keys.journal_spill())
        .query(&mut env.redis.con())
        .unwrap();
    assert!(spilled > 0, "nothing kept in Redis at shutdown");

    mariadb.restart();
    env.start_server().await;
    let after = consume(&env, "bl", 300, Duration::from_secs(30)).await;
    let all: HashSet<&String> = during.iter().chain(after.iter()).collect();
    let want: HashSet<&String> = accepted.iter().collect();
    assert_eq!(
        want.difference(&all).count(),
        0,
        "accepted messages never delivered"
    );
    // The kept changes were written, and every message ends Consumed.
    let what = "every change written and every message Consumed";
    let every = Duration::from_millis(300);
    wait_every(what, Duration::from_secs(30), every, || async {
        let left: i64 = redis::cmd("LLEN")
            .arg(env.keys.journal_spill())
            .query(&mut env.redis.con())
            .unwrap();
        let open = accepted
            .iter()
            .filter(|id| env.journal.row(id).map(|r| r.status) != Some(status::CONSUMED))
            .count();
        let behind: i64 = redis::cmd("ZCARD")
            .arg(env.keys.journal_behind())
            .query(&mut env.redis.con())
            .unwrap();
        if left == 0 && open == 0 && behind == 0 {
            Ok(())
        } else {
            Err(format!(
                "{left} changes still in Redis, {open} messages not Consumed, {behind} nodes behind"
            ))
        }
    })
    .await;
    drop(env);
}

/// Redis flushed under a running node takes its worker-id lease with it:
/// until the node leases one again its status changes cannot be written
/// (no ids for their flow rows). They wait; none is taken for a refusal.
async fn an_outage_of_ids_sets_nothing_aside(b: Backend) {
    let env = Env::start(b).await;
    let ids = env
        .push_batch(
            (0..200)
                // Due throughout the seconds the node has no worker id.
                .map(|i| json!({"topic": "fl", "body": format!("{i}"), "delay": 500 + i * 30}))
                .collect(),
        )
        .await;
    env.redis.flushall();
    let got = consume(&env, "fl", ids.len(), Duration::from_secs(30)).await;
    let got: HashSet<&String> = got.iter().collect();
    assert!(
        ids.iter().all(|id| got.contains(id)),
        "not every message came"
    );
    for id in &ids {
        env.wait_status(id, status::CONSUMED).await;
    }
    let j = admin_journal(&env).await;
    assert_eq!(j["refused"], 0, "{j}");
}

/// A database that answers but takes no write at all (as when it is out of
/// space or read-only): an outage like any other. Pushes get 503, status
/// changes wait, nothing is set aside, and all is written once it takes
/// writes again.
async fn a_database_refusing_every_write_is_an_outage(b: Backend) {
    let env = Env::start(b).await;
    let ids = env
        .push_batch(
            (0..50)
                .map(|i| json!({"topic": "ro", "body": format!("{i}"), "delay": 800}))
                .collect(),
        )
        .await;
    for id in &ids {
        env.wait_scheduled(id).await;
    }
    refuse_flow_writes(&env, b);
    let r = env
        .post_json("/push", &json!({"topic": "ro", "body": "x"}))
        .await;
    r.assert_error(503, "journal_unavailable");
    // Delivered meanwhile; their Ready and Consuming rows wait.
    let got = env.collect("ro", ids.len(), Duration::from_secs(10)).await;
    assert_eq!(got.len(), ids.len());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let j = admin_journal(&env).await;
    assert_eq!(j["refused"], 0, "{j}");
    assert!(j["pending"].as_u64().unwrap() > 0, "{j}");
    allow_flow_writes(&env, b);
    let r = env.post_json("/ack", &json!({ "ids": ids })).await;
    assert_eq!(r.assert_ok()["acked"], ids.len());
    for id in &ids {
        env.wait_status(id, status::CONSUMED).await;
    }
    assert_eq!(admin_journal(&env).await["refused"], 0);
}

/// With the database down, a single ack still answers 200 (applied in
/// Redis, its end kept there); the batch ack, the batch nack and the
/// cancel answer 503 within a few seconds, and what they asked for is
/// applied in Redis all the same. When the database is back, the journal
/// records every one of them and an ack sent again is answered Consumed.
#[tokio::test(flavor = "multi_thread")]
async fn acks_nacks_and_cancels_while_the_database_is_down() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("delayq_down_{}", random_hex(8));
    let mut mariadb = PrivateMariadb::start(dir.path(), &db);
    let env = Env::builder(Backend::Mariadb)
        .journal_url(&mariadb.url(&db))
        .start()
        .await;
    let later = env
        .push(json!({"topic": "down", "body": "later", "delay": 60_000}))
        .await;
    env.push_batch(
        (0..3)
            .map(|i| json!({"topic": "down", "body": format!("{i}")}))
            .collect(),
    )
    .await;
    let got = env.collect("down", 3, Duration::from_secs(10)).await;
    let [single, batch, nacked] = [got[0].id(), got[1].id(), got[2].id()].map(str::to_string);
    wait_until(
        "an empty journal backlog",
        Duration::from_secs(10),
        || async { (admin_journal(&env).await["pending"] == 0).then_some(()) },
    )
    .await;
    mariadb.kill();

    let took = Instant::now();
    let r = env.ack(&single).await;
    assert_eq!(r.assert_ok()["status"], "Consumed", "{}", r.text);
    eprintln!("single ack answered in {:?}", took.elapsed());
    for (method, path, body) in [
        ("POST", "/ack".to_string(), json!({"ids": [batch]})),
        (
            "POST",
            "/nack".to_string(),
            json!({"ids": [nacked], "delay": 60_000}),
        ),
        ("GET", format!("/delete?id={later}"), Value::Null),
    ] {
        let took = Instant::now();
        let r = match method {
            "POST" => env.post_json(&path, &body).await,
            _ => env.get_path(&path).await,
        };
        let took = took.elapsed();
        eprintln!("{method} {path} answered {} in {took:?}", r.status);
        r.assert_error(503, "journal_unavailable");
        assert!(
            took < Duration::from_secs(10),
            "{method} {path} took {took:?}"
        );
    }
    // Applied in Redis all the same: nothing of the three is in flight,
    // the nacked one waits its minute, the cancelled one is gone.
    let in_flight = env.in_flight_ids();
    for id in [&single, &batch, &nacked] {
        assert!(
            !in_flight.contains(id),
            "{id} still in flight: {in_flight:?}"
        );
    }
    assert!(
        env.scheduled_in_redis(&nacked),
        "the nacked message waits its minute"
    );
    assert!(
        !env.scheduled_in_redis(&later),
        "the cancelled message is still scheduled"
    );

    mariadb.restart();
    for (id, want) in [
        (&single, status::CONSUMED),
        (&batch, status::CONSUMED),
        (&nacked, status::DELAYING),
        (&later, status::DELETED),
    ] {
        env.wait_status(id, want).await;
    }
    let r = env.ack(&batch).await;
    assert_eq!(r.assert_ok()["status"], "Consumed", "{}", r.text);
}

/// Makes the database refuse to end messages of topic `held` (Consumed or
/// Deleted), while it takes every other write.
fn refuse_ends(env: &Env, b: Backend) {
    match b {
        Backend::Sqlite => sql(
            env,
            "CREATE TRIGGER refuse_ends BEFORE UPDATE ON message \
             WHEN NEW.topic = 'held' AND NEW.status IN (4, 5) \
             BEGIN SELECT RAISE(ABORT, 'no ends'); END;",
        ),
        Backend::Mariadb => sql(
            env,
            "CREATE TRIGGER refuse_ends BEFORE UPDATE ON message FOR EACH ROW \
             BEGIN IF NEW.topic = 'held' AND NEW.status IN (4, 5) THEN \
             SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'no ends'; END IF; END",
        ),
        Backend::Postgres => sql(
            env,
            "CREATE FUNCTION refuse_ends() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
               IF NEW.topic = 'held' AND NEW.status IN (4, 5) THEN RAISE EXCEPTION 'no ends'; END IF; \
               RETURN NEW; END $$; \
             CREATE TRIGGER refuse_ends BEFORE UPDATE ON message \
               FOR EACH ROW EXECUTE FUNCTION refuse_ends();",
        ),
    }
}

/// Undoes [`refuse_ends`].
fn allow_ends(env: &Env, b: Backend) {
    match b {
        Backend::Postgres => sql(env, "DROP TRIGGER refuse_ends ON message"),
        _ => sql(env, "DROP TRIGGER refuse_ends"),
    }
}

/// Whether Redis keeps an end of `id` for the journal.
fn end_kept(env: &Env, id: &str) -> bool {
    let shard = env.keys.shard_of(crate::common::parse_id(id));
    redis::cmd("HEXISTS")
        .arg(env.keys.unjournaled(shard))
        .arg(id)
        .query(&mut env.redis.con())
        .unwrap()
}

/// An ack (single or batch) or a cancel applied in Redis whose end the
/// journal refused (set aside): Redis keeps the end for the journal. Once
/// the database takes it again, the same ack or cancel sent again finds
/// the end in Redis and records it, without a reconciler (off here), and
/// answers as the first did.
async fn a_retried_ack_or_cancel_journals_the_end_redis_kept(b: Backend) {
    let env = Env::builder(b)
        .arg("--reconcile-interval")
        .arg("0")
        .start()
        .await;
    let cancelled = env
        .push(json!({"topic": "held", "body": "c", "delay": 600_000}))
        .await;
    let ids = env
        .push_batch(
            (0..2)
                .map(|i| json!({"topic": "held", "body": format!("{i}")}))
                .collect(),
        )
        .await;
    let got = env.collect("held", 2, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 2);
    let [single, batch] = [got[0].id(), got[1].id()].map(str::to_string);
    env.wait_statuses(&ids, status::CONSUMING).await;
    env.wait_scheduled(&cancelled).await;

    refuse_ends(&env, b);
    // A single ack answers once Redis let go; its end is refused later.
    let r = env.ack(&single).await;
    assert_eq!(r.assert_ok()["status"], "Consumed", "{}", r.text);
    // The batch ack and the cancel answer once the journal has them: the
    // journal refused them.
    let r = env.post_json("/ack", &json!({ "ids": [batch] })).await;
    r.assert_error(500, "journal_refused");
    env.delete(&cancelled)
        .await
        .assert_error(500, "journal_refused");
    let what = "the three ends to be set aside";
    let every = Duration::from_millis(100);
    wait_every(what, Duration::from_secs(20), every, || async {
        let j = admin_journal(&env).await;
        let refused: HashSet<&str> = j["recentRefused"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap())
            .collect();
        if [&single, &batch, &cancelled]
            .iter()
            .all(|id| refused.contains(id.as_str()))
            && j["pending"] == 0
        {
            Ok(())
        } else {
            Err(j)
        }
    })
    .await;
    allow_ends(&env, b);
    for id in [&single, &batch, &cancelled] {
        assert!(end_kept(&env, id), "Redis keeps the end of {id}");
    }
    assert_eq!(env.journal.row(&single).unwrap().status, status::CONSUMING);
    assert_eq!(
        env.journal.row(&cancelled).unwrap().status,
        status::DELAYING
    );

    // Sent again: answered as the first time, and journaled.
    let r = env.ack(&single).await;
    assert_eq!(r.assert_ok()["status"], "Consumed", "{}", r.text);
    let r = env.post_json("/ack", &json!({ "ids": [batch] })).await;
    assert_eq!(r.assert_ok()["acked"], 1, "{}", r.text);
    let r = env.delete(&cancelled).await;
    assert_eq!(r.assert_ok()["result"], "deleted", "{}", r.text);
    env.wait_status(&single, status::CONSUMED).await;
    env.wait_status(&batch, status::CONSUMED).await;
    env.wait_status(&cancelled, status::DELETED).await;
    // Redis was told: it keeps no end for the journal any more.
    env.wait_journaled().await;
    // Acked and cancelled again: nothing changes.
    env.ack(&single).await.assert_ok();
    let r = env.delete(&cancelled).await;
    assert_eq!(r.assert_ok()["result"], "deleted", "{}", r.text);
    assert_eq!(env.journal.row(&single).unwrap().status, status::CONSUMED);
    assert_eq!(env.journal.row(&cancelled).unwrap().status, status::DELETED);

    // An end the journal has while Redis still keeps it (the node stopped
    // between the write and telling Redis): acked again, Redis forgets it,
    // and the history tells the end once.
    let row = env.journal.row(&single).unwrap();
    let shard = env.keys.shard_of(crate::common::parse_id(&single));
    let end = format!("{}|{}|{}", status::CONSUMED, row.attempts, row.updated_time);
    redis::cmd("HSET")
        .arg(env.keys.unjournaled(shard))
        .arg(&single)
        .arg(end)
        .query::<()>(&mut env.redis.con())
        .unwrap();
    let r = env.ack(&single).await;
    assert_eq!(r.assert_ok()["status"], "Consumed", "{}", r.text);
    env.wait_journaled().await;
    for id in [&single, &batch, &cancelled] {
        let ends: Vec<i16> = env
            .journal
            .flow_codes(id)
            .into_iter()
            .filter(|&s| s >= status::CONSUMED)
            .collect();
        assert_eq!(ends.len(), 1, "the history of {id} ends once: {ends:?}");
    }
    let now = env.journal.row(&single).unwrap();
    assert_eq!(
        (now.status, now.attempts, now.updated_time),
        (row.status, row.attempts, row.updated_time)
    );
}

//! Reconciliation: the journal compared with Redis message by message, with
//! Redis's data set marker intact (the case a restore never sees). Each kind
//! of difference is planted by hand, reported by `GET /admin/reconcile`,
//! repaired with `repair=true`, and gone from the next report; a server
//! with a short `--reconcile-interval` delivers every accepted message after
//! Redis lost some of its keys, without an operator, and takes out again
//! what the journal ended once Redis lost an ack's or a cancel's write (a
//! dead letter requeued meanwhile stays); `GET /admin/restore`
//! shows a restore's progress, and a restore resumes after the cursor an
//! interrupted one left; `delayq reconcile` runs as a process; `/ready`
//! warns about a Redis that may evict keys.

use std::collections::HashSet;
use std::time::Duration;

use crate::common::{now_ms, parse_id, status, wait_until, Backend, Env, SHARDS};
use delayq::journal::schema::message;
use delayq::redis::keys::score;
use delayq::redis::record;
use delayq::with_conn;
use diesel::prelude::*;
use serde_json::{json, Value};

backend_tests!(
    report_and_repair_each_kind,
    a_lost_message_in_flight_is_delivered_again,
    an_unscheduled_retry_is_put_back_at_its_retry_time,
    lost_keys_are_delivered_without_an_operator,
    lost_acks_and_cancels_are_purged_without_an_operator,
    restore_progress_and_resume,
    a_killed_restore_resumes,
    cli_reconcile
);

/// Grace of the servers and runs below: short, so the tests are quick.
pub(crate) const GRACE: &str = "500ms";

pub(crate) fn reconciling_env(b: Backend) -> crate::common::EnvBuilder {
    Env::builder(b)
        .arg("--reconcile-interval")
        .arg("0")
        .arg("--reconcile-grace")
        .arg(GRACE)
}

/// Sets a journal row's status behind the server's back.
fn set_status(env: &Env, id: &str, code: i16) {
    let mut conn = env.journal.conn();
    let n = with_conn!(&mut conn, c => diesel::update(message::table.find(parse_id(id).0))
        .set(message::status.eq(code))
        .execute(c))
    .expect("update the row");
    assert_eq!(n, 1);
}

pub(crate) fn redis_cmd<T: redis::FromRedisValue>(env: &Env, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut env.redis.con())
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

pub(crate) fn shard(env: &Env, id: &str) -> u32 {
    env.keys.shard_of(parse_id(id))
}

pub(crate) fn holds(env: &Env, id: &str) -> bool {
    redis_cmd::<i64>(env, &["HEXISTS", &env.keys.messages(shard(env, id)), id]) == 1
}

/// `GET /admin/reconcile?repair=...`, expecting 200.
pub(crate) async fn reconcile(env: &Env, repair: bool) -> Value {
    let r = env
        .get_path(&format!("/admin/reconcile?repair={repair}"))
        .await;
    r.assert_ok().clone()
}

pub(crate) fn counts(report: &Value) -> [u64; 5] {
    [
        "missing",
        "unscheduled",
        "finishedInJournal",
        "statusMismatch",
        "unknown",
    ]
    .map(|k| {
        report[k]["count"]
            .as_u64()
            .unwrap_or_else(|| panic!("{report}"))
    })
}

fn sampled(report: &Value, kind: &str) -> Vec<String> {
    report[kind]["sample"]
        .as_array()
        .unwrap_or_else(|| panic!("no sample of {kind}: {report}"))
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

/// A message handed out and then lost from Redis (its record and its
/// in-flight entry gone, as with a failover to a replica that lagged): the
/// journal still says Consuming, so the reconciler reports it missing and
/// the repair puts it back, to be delivered again.
async fn a_lost_message_in_flight_is_delivered_again(b: Backend) {
    let env = reconciling_env(b).start().await;
    let id = env
        .push(json!({"topic": "rc-lost", "body": "lost", "ttl": 60_000}))
        .await;
    let first = env.receive_one("rc-lost").await;
    assert_eq!(first.id(), id);
    env.wait_status(&id, status::CONSUMING).await;
    let k = &env.keys;
    let s = shard(&env, &id);
    redis_cmd::<i64>(&env, &["HDEL", &k.messages(s), &id]);
    redis_cmd::<i64>(&env, &["ZREM", &k.inflight(s), &id]);
    assert!(!holds(&env, &id));

    // Past the grace, then a report and a repair.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let report = reconcile(&env, false).await;
    assert_eq!(
        sampled(&report, "missing"),
        std::slice::from_ref(&id),
        "{report}"
    );
    let report = reconcile(&env, true).await;
    assert_eq!(report["missing"]["repaired"], 1, "{report}");
    assert!(holds(&env, &id), "the repair did not put the message back");
    // Delivered again long before its 60 s ttl would have run out.
    let again = env.receive_one("rc-lost").await;
    assert_eq!(again.id(), id);
    env.ack(&id).await.assert_ok();
    env.wait_status(&id, status::CONSUMED).await;
}

/// A message waiting out a nack's delay whose delay zset entry Redis lost
/// (its record kept): the record's score is still its first due time, long
/// past, while its retry time was the entry's score alone. The repair puts
/// it back at the retry time the journal holds, not at once.
async fn an_unscheduled_retry_is_put_back_at_its_retry_time(b: Backend) {
    let env = reconciling_env(b).start().await;
    let id = env.push(json!({"topic": "rc-retry", "body": "r"})).await;
    assert_eq!(env.receive_one("rc-retry").await.id(), id);
    let r = env
        .send(env.http.post(env.url(&format!("/nack/{id}?delay=5000"))))
        .await;
    let due = r.assert_ok()["dueTime"].as_i64().unwrap();
    let row = env.wait_status(&id, status::DELAYING).await;
    assert_eq!(row.due_time, due, "the journal keeps the retry time");
    let k = &env.keys;
    let s = shard(&env, &id);
    assert_eq!(redis_cmd::<i64>(&env, &["ZREM", &k.delay(s), &id]), 1);
    assert!(holds(&env, &id));

    tokio::time::sleep(Duration::from_millis(700)).await;
    let report = reconcile(&env, true).await;
    assert_eq!(
        (
            sampled(&report, "unscheduled"),
            report["unscheduled"]["repaired"].as_u64()
        ),
        (vec![id.clone()], Some(1)),
        "{report}"
    );
    // Where it was put back: its due time in the delay zset (None: handed
    // on already), shown if it comes early.
    let placed: Option<f64> = redis_cmd(&env, &["ZSCORE", &k.delay(s), &id]);
    let placed = placed.map(delayq::redis::keys::due_of_score);
    // Not handed out before its retry time; then with its second attempt.
    let got = env
        .collect(
            "rc-retry",
            1,
            Duration::from_millis((due - now_ms()).max(0) as u64 + 10_000),
        )
        .await;
    assert_eq!(got.len(), 1, "not delivered again: {got:?}");
    assert_eq!(
        (got[0].id(), got[0].msg["attempts"].as_i64()),
        (id.as_str(), Some(2))
    );
    assert!(
        got[0].at >= due,
        "handed out {} ms before its retry time (put back due at {placed:?})",
        due - got[0].at
    );
    assert_eq!(placed, Some(due), "put back at another time");
    env.ack(&id).await.assert_ok();
}

async fn report_and_repair_each_kind(b: Backend) {
    let env = reconciling_env(b).start().await;
    let missing = env
        .push(json!({"topic": "rc", "body": "missing", "delay": 8000}))
        .await;
    let unscheduled = env
        .push(json!({"topic": "rc", "body": "unscheduled", "delay": 8000}))
        .await;
    let behind = env
        .push(json!({"topic": "rc-far", "body": "behind", "delay": 60_000}))
        .await;
    let handed = env.push(json!({"topic": "rc-now", "body": "handed"})).await;
    let done = env.push(json!({"topic": "rc-done", "body": "done"})).await;
    assert_eq!(env.receive_one("rc-now").await.id(), handed);
    assert_eq!(env.receive_one("rc-done").await.id(), done);
    env.ack(&done).await.assert_ok();
    for id in [&missing, &unscheduled, &behind] {
        env.wait_history(id, &["WaitPut", "Delaying"]).await;
    }
    env.wait_status(&handed, status::CONSUMING).await;

    // A clean start.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let report = reconcile(&env, false).await;
    assert_eq!(counts(&report), [0; 5], "{report}");
    assert!(report["journalScanned"].as_u64().unwrap() >= 4, "{report}");

    // missing: record and schedule entry gone, no tombstone.
    let k = &env.keys;
    let s = shard(&env, &missing);
    redis_cmd::<i64>(&env, &["HDEL", &k.messages(s), &missing]);
    redis_cmd::<i64>(&env, &["ZREM", &k.delay(s), &missing]);
    // unscheduled: the record stays, its schedule entry is gone.
    let s = shard(&env, &unscheduled);
    redis_cmd::<i64>(&env, &["ZREM", &k.delay(s), &unscheduled]);
    // finishedInJournal: a consumed message's record is back, scheduled.
    let row = env.journal.row(&done).unwrap();
    assert_eq!(row.status, status::CONSUMED);
    let s = shard(&env, &done);
    let rec = record::encode(&row.message(), 1);
    redis_cmd::<i64>(&env, &["HSET", &k.messages(s), &done, &rec]);
    let far = (score(now_ms() + 600_000, 0) as i64).to_string();
    redis_cmd::<i64>(&env, &["ZADD", &k.delay(s), &far, &done]);
    // statusMismatch: the journal says Ready while Redis has it scheduled,
    // and Delaying while Redis has it in flight.
    set_status(&env, &behind, status::READY);
    set_status(&env, &handed, status::DELAYING);
    // unknown: a record of a message the journal never had.
    let stranger = "4242";
    let mut ghost = row.message();
    ghost.id = parse_id(stranger);
    let s = shard(&env, stranger);
    redis_cmd::<i64>(
        &env,
        &["HSET", &k.messages(s), stranger, &record::encode(&ghost, 0)],
    );

    tokio::time::sleep(Duration::from_millis(700)).await;
    let before = env.redis.snapshot();
    let report = reconcile(&env, false).await;
    assert_eq!(counts(&report), [1, 1, 1, 2, 1], "{report}");
    // `delayq reconcile` finds the same, and its last progress line says
    // what its report says (the last re-check's findings included).
    let out = env.run_tool(&["reconcile", "--reconcile-grace", GRACE]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let last = stderr
        .lines()
        .rfind(|l| l.starts_with("reconcile: "))
        .unwrap_or_default();
    assert!(
        last.contains("statusMismatch 2") && last.contains("missing 1"),
        "the last progress line: {last}\n{stderr}"
    );
    assert_eq!(sampled(&report, "missing"), std::slice::from_ref(&missing));
    assert_eq!(
        sampled(&report, "unscheduled"),
        std::slice::from_ref(&unscheduled)
    );
    assert_eq!(
        sampled(&report, "finishedInJournal"),
        std::slice::from_ref(&done)
    );
    assert_eq!(sampled(&report, "unknown"), [stranger.to_string()]);
    let mut mismatched = sampled(&report, "statusMismatch");
    mismatched.sort();
    let mut want = vec![behind.clone(), handed.clone()];
    want.sort();
    assert_eq!(mismatched, want, "{report}");
    for s in report["statusMismatch"]["sample"].as_array().unwrap() {
        let (journal, redis) = (s["journal"].as_str(), s["redis"].as_str());
        if s["id"] == behind.as_str() {
            assert_eq!((journal, redis), (Some("Ready"), Some("Delaying")), "{s}");
        } else {
            assert_eq!(
                (journal, redis),
                (Some("Delaying"), Some("Consuming")),
                "{s}"
            );
        }
    }
    assert_eq!(report["missing"]["repaired"], 0, "{report}");
    assert_eq!(env.redis.snapshot(), before, "a report changed Redis");

    // Repair.
    let report = reconcile(&env, true).await;
    assert_eq!(counts(&report), [1, 1, 1, 2, 1], "{report}");
    let repaired = [
        "missing",
        "unscheduled",
        "finishedInJournal",
        "statusMismatch",
        "unknown",
    ]
    .map(|k| report[k]["repaired"].as_u64().unwrap());
    assert_eq!(repaired, [1, 1, 1, 2, 0], "{report}");
    assert!(holds(&env, &missing) && holds(&env, &unscheduled));
    assert!(
        !holds(&env, &done),
        "the consumed message's record is still there"
    );
    let tomb: Option<f64> = redis_cmd(&env, &["ZSCORE", &k.finished(shard(&env, &done)), &done]);
    assert!(tomb.is_some(), "no tombstone for the purged message");
    assert!(holds(&env, stranger), "an unknown record was removed");
    assert_eq!(env.journal.row(&behind).unwrap().status, status::DELAYING);
    assert_eq!(env.journal.row(&handed).unwrap().status, status::CONSUMING);
    let flows = env.journal.history(&handed);
    let last = flows.last().unwrap();
    assert_eq!(
        (last.status, last.shard.as_str()),
        (status::CONSUMING, "reconcile")
    );

    // Both lost messages are delivered, when due and once.
    let got = env.collect("rc", 2, Duration::from_secs(15)).await;
    let mut ids: Vec<&str> = got.iter().map(|r| r.id()).collect();
    ids.sort();
    let mut want = vec![missing.as_str(), unscheduled.as_str()];
    want.sort();
    assert_eq!(ids, want, "{got:?}");
    for r in &got {
        assert!(r.at >= r.msg["dueTime"].as_i64().unwrap(), "early: {r:?}");
    }
    env.assert_nothing("rc", 1).await;
    env.assert_nothing("rc-done", 1).await;

    // Nothing left but the stranger, which is reported only.
    let report = reconcile(&env, false).await;
    assert_eq!(counts(&report), [0, 0, 0, 0, 1], "{report}");
}

async fn lost_keys_are_delivered_without_an_operator(b: Backend) {
    const N: usize = 48;
    let env = Env::builder(b)
        .arg("--reconcile-interval")
        .arg("1s")
        .arg("--reconcile-grace")
        .arg("1s")
        .start()
        .await;
    let messages: Vec<Value> = (0..N)
        .map(|i| json!({"topic": "heal", "body": format!("{i}"), "delay": 2500 + (i as i64 % 8) * 250}))
        .collect();
    let ids = env.push_batch(messages).await;
    for id in &ids {
        env.wait_scheduled(id).await;
    }
    let mut per_shard = [0; SHARDS as usize];
    for id in &ids {
        per_shard[shard(&env, id) as usize] += 1;
    }
    assert!(per_shard.iter().all(|&n| n > 0), "{per_shard:?}");

    // Redis loses keys, its data set marker intact: shard 0 everything,
    // shard 1 the records, shard 2 the schedule; shard 3 keeps all.
    let k = &env.keys;
    redis_cmd::<i64>(
        &env,
        &[
            "DEL",
            &k.delay(0),
            &k.messages(0),
            &k.messages(1),
            &k.delay(2),
        ],
    );
    let marker: i64 = redis_cmd(&env, &["EXISTS", &k.dataset_marker()]);
    assert_eq!(marker, 1);

    let got = env.collect("heal", N, Duration::from_secs(20)).await;
    let delivered: HashSet<&str> = got.iter().map(|r| r.id()).collect();
    assert_eq!(delivered.len(), got.len(), "delivered twice: {got:?}");
    let want: HashSet<&str> = ids.iter().map(String::as_str).collect();
    assert_eq!(delivered, want, "{} of {N} delivered", delivered.len());
    for r in &got {
        assert!(r.at >= r.msg["dueTime"].as_i64().unwrap(), "early: {r:?}");
    }
    env.assert_nothing("heal", 1).await;
    let log = env.server.log_tail(400);
    assert!(
        log.contains("the journal and Redis differed"),
        "no reconciliation in the log"
    );
}

/// Redis loses an ack's and a cancel's writes with its data set marker
/// intact (the acked message is back in flight, the cancelled one back in
/// its delay zset, neither has a tombstone) while the journal recorded
/// both ends: the periodic reconciler takes them out of Redis, leaving
/// tombstones, long before the acked one's ack deadline would hand it out
/// again.
async fn lost_acks_and_cancels_are_purged_without_an_operator(b: Backend) {
    let env = Env::builder(b)
        .arg("--reconcile-interval")
        .arg("1s")
        .arg("--reconcile-grace")
        .arg(GRACE)
        .start()
        .await;
    let topic = "rc-undone";
    let acked = env
        .push(json!({"topic": topic, "body": "acked", "ttl": 30_000}))
        .await;
    let cancelled = env
        .push(json!({"topic": topic, "body": "cancelled", "delay": 60_000}))
        .await;
    assert_eq!(env.receive_one(topic).await.id(), acked);
    env.ack(&acked).await.assert_ok();
    env.wait_scheduled(&cancelled).await;
    assert_eq!(
        env.delete(&cancelled).await.assert_ok()["result"],
        "deleted"
    );
    env.wait_status(&acked, status::CONSUMED).await;
    env.wait_status(&cancelled, status::DELETED).await;
    env.wait_journaled().await;

    // Redis loses both writes.
    let k = &env.keys;
    let a = env.journal.row(&acked).unwrap();
    let s = shard(&env, &acked);
    let deadline = (now_ms() + 30_000).to_string();
    redis_cmd::<i64>(&env, &["ZREM", &k.finished(s), &acked]);
    redis_cmd::<i64>(
        &env,
        &[
            "HSET",
            &k.messages(s),
            &acked,
            &record::encode(&a.message(), 1),
        ],
    );
    redis_cmd::<i64>(&env, &["ZADD", &k.inflight(s), &deadline, &acked]);
    let c = env.journal.row(&cancelled).unwrap();
    let s = shard(&env, &cancelled);
    let due = (score(c.due_time, 0) as i64).to_string();
    redis_cmd::<i64>(&env, &["ZREM", &k.finished(s), &cancelled]);
    redis_cmd::<i64>(
        &env,
        &[
            "HSET",
            &k.messages(s),
            &cancelled,
            &record::encode(&c.message(), 0),
        ],
    );
    redis_cmd::<i64>(&env, &["ZADD", &k.delay(s), &due, &cancelled]);
    assert!(holds(&env, &acked) && holds(&env, &cancelled));

    let what = "the periodic reconciler to take both out of Redis";
    wait_until(what, Duration::from_secs(15), || async {
        let left: Vec<&String> = [&acked, &cancelled]
            .into_iter()
            .filter(|id| holds(&env, id))
            .collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("still in Redis: {left:?}"))
        }
    })
    .await;
    for id in [&acked, &cancelled] {
        let s = shard(&env, id);
        let tomb: Option<f64> = redis_cmd(&env, &["ZSCORE", &k.finished(s), id]);
        assert!(tomb.is_some(), "no tombstone for {id}");
        let in_flight: Option<f64> = redis_cmd(&env, &["ZSCORE", &k.inflight(s), id]);
        assert!(in_flight.is_none(), "{id} still in flight");
    }
    assert_eq!(env.journal.row(&acked).unwrap().status, status::CONSUMED);
    assert_eq!(env.journal.row(&cancelled).unwrap().status, status::DELETED);
    env.assert_nothing(topic, 1).await;
    let log = env.server.log_tail(1_000);
    assert!(
        log.contains("the journal and Redis differed"),
        "no reconciliation in the log"
    );
}

/// A dead letter Redis still holds (finishedInJournal) and requeued between
/// the reconciler's second look and its purge is live again: the repair
/// reads the journal once more right before purging and leaves it. The
/// requeue is made while the repair is held: PostgreSQL keeps the row of
/// another message, whose end the same repair records first, locked by
/// the test.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_letter_requeued_during_a_repair_is_not_purged() {
    use diesel::connection::SimpleConnection;
    use diesel::dsl::sql;
    use diesel::sql_types::BigInt;

    let env = reconciling_env(Backend::Postgres).start().await;
    let k = &env.keys;
    // A dead letter, back in Redis (as a copy a promoted replica held).
    let dead = env
        .push(json!({"topic": "rc-dead", "body": "d", "maxAttempts": 1}))
        .await;
    assert_eq!(env.receive_one("rc-dead").await.id(), dead);
    let r = env
        .send(env.http.post(env.url(&format!("/nack/{dead}?delay=1000"))))
        .await;
    assert_eq!(r.assert_ok()["status"], "Dead", "{}", r.text);
    env.wait_status(&dead, status::DEAD).await;
    env.wait_journaled().await;
    let row = env.journal.row(&dead).unwrap();
    let s = shard(&env, &dead);
    let far = (score(now_ms() + 600_000, 0) as i64).to_string();
    redis_cmd::<i64>(&env, &["ZREM", &k.finished(s), &dead]);
    redis_cmd::<i64>(
        &env,
        &[
            "HSET",
            &k.messages(s),
            &dead,
            &record::encode(&row.message(), 1),
        ],
    );
    redis_cmd::<i64>(&env, &["ZADD", &k.delay(s), &far, &dead]);
    // A message cancelled in Redis by a node that stopped before its
    // journal heard: its end is recorded by the same repair, before the
    // purge.
    let ended = env
        .push(json!({"topic": "rc-dead", "body": "e", "delay": 60_000}))
        .await;
    env.wait_scheduled(&ended).await;
    let e = shard(&env, &ended);
    let now = now_ms().to_string();
    let end = format!("{}|0|{now}", status::DELETED);
    redis_cmd::<i64>(&env, &["HDEL", &k.messages(e), &ended]);
    redis_cmd::<i64>(&env, &["ZREM", &k.delay(e), &ended]);
    redis_cmd::<i64>(&env, &["ZADD", &k.finished(e), &now, &ended]);
    redis_cmd::<i64>(&env, &["HSET", &k.unjournaled(e), &ended, &end]);
    tokio::time::sleep(Duration::from_millis(700)).await;

    let pg = || PgConnection::establish(&env.journal.url).expect("connect to PostgreSQL");
    let mut lock = pg();
    lock.batch_execute(&format!(
        "BEGIN; SELECT id FROM message WHERE id = {} FOR UPDATE",
        parse_id(&ended).0
    ))
    .unwrap();
    let mut monitor = pg();
    let waiting = "(SELECT count(*) FROM pg_stat_activity \
                   WHERE wait_event_type = 'Lock' AND datname = current_database())";
    let repair = env.get_path("/admin/reconcile?repair=true");
    let requeue = async {
        let began = std::time::Instant::now();
        while diesel::select(sql::<BigInt>(waiting))
            .get_result::<i64>(&mut monitor)
            .expect("pg_stat_activity")
            == 0
        {
            assert!(
                began.elapsed() < Duration::from_secs(10),
                "the repair never waited for the locked row"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let r = env
            .post_json(&format!("/dead/{dead}/requeue"), &json!({}))
            .await;
        r.assert_ok();
        lock.batch_execute("ROLLBACK").unwrap();
        r
    };
    let (report, requeued) = tokio::join!(repair, requeue);
    let report = report.assert_ok().clone();
    eprintln!("requeue: {}", requeued.text);
    assert_eq!(report["unjournaled"]["repaired"], 1, "{report}");
    assert_eq!(report["finishedInJournal"]["count"], 1, "{report}");
    assert_eq!(report["finishedInJournal"]["repaired"], 0, "{report}");
    assert_eq!(env.journal.row(&ended).unwrap().status, status::DELETED);
    assert!(
        env.journal.row(&dead).unwrap().status < status::CONSUMED,
        "not requeued"
    );
    assert!(holds(&env, &dead), "the requeued dead letter was purged");
    let tomb: Option<f64> = redis_cmd(&env, &["ZSCORE", &k.finished(s), &dead]);
    assert!(tomb.is_none(), "the requeued dead letter has a tombstone");
}

async fn restore_progress_and_resume(b: Backend) {
    const N: usize = 3000;
    let env = reconciling_env(b).start().await;
    // The start-up restore of the new, empty Redis.
    let r = env.get_path("/admin/restore").await;
    let p = r.assert_ok();
    assert_eq!(
        (p["running"].as_bool(), p["scanned"].as_u64()),
        (Some(false), Some(0)),
        "{p}"
    );
    assert!(p["finishedAt"].as_i64().is_some(), "{p}");
    assert!(p["resumable"].is_null(), "{p}");

    let mut ids = Vec::new();
    for chunk in 0..N / 1000 {
        let batch: Vec<Value> = (0..1000)
            .map(|i| json!({"topic": "prog", "body": format!("{chunk}-{i}"), "delay": 600_000}))
            .collect();
        ids.extend(env.push_batch(batch).await);
    }
    for id in ids.iter().step_by(999) {
        env.wait_scheduled(id).await;
    }
    env.wait_scheduled(ids.last().unwrap()).await;
    env.redis.wipe_schedule(&env.keys);

    let started = now_ms();
    let report = env.get_path("/reStore?expire=true").await;
    assert_eq!(report.assert_ok()["restored"], N as u64, "{}", report.text);
    let r = env.get_path("/admin/restore").await;
    let p = r.assert_ok();
    let mut sorted: Vec<i64> = ids.iter().map(|i| parse_id(i).0).collect();
    sorted.sort();
    assert_eq!(p["running"], false, "{p}");
    assert_eq!(
        (p["scanned"].as_u64(), p["restored"].as_u64()),
        (Some(N as u64), Some(N as u64)),
        "{p}"
    );
    assert_eq!(p["alreadyPresent"], 0, "{p}");
    assert!(p["startedAt"].as_i64().unwrap() >= started, "{p}");
    assert!(
        p["finishedAt"].as_i64().unwrap() >= p["startedAt"].as_i64().unwrap(),
        "{p}"
    );
    assert!(p["ratePerSecond"].as_f64().unwrap() > 0.0, "{p}");
    assert_eq!(p["cursor"].as_i64(), Some(*sorted.last().unwrap()), "{p}");
    assert!(
        p["resumable"].is_null(),
        "a finished restore left its cursor: {p}"
    );
    assert!(env.server.log_tail(100).contains("restore finished"));

    // A restore interrupted after the first 1000 rows left its cursor; the
    // keys were lost meanwhile. Run again, it resumes after the cursor...
    env.redis.wipe_schedule(&env.keys);
    let cursor = sorted[999];
    let key = env.keys.restore_cursor();
    let now = now_ms().to_string();
    redis_cmd::<i64>(
        &env,
        &[
            "HSET",
            &key,
            "after",
            &cursor.to_string(),
            "expire",
            "1",
            "startedAt",
            &now,
            "updatedAt",
            &now,
        ],
    );
    let r = env.get_path("/admin/restore").await;
    assert_eq!(r.assert_ok()["resumable"]["after"], cursor, "{}", r.text);
    let (report, stderr) = env.run_tool_report(&["restore", "--expire"]);
    assert_eq!(report["resumedAfter"], cursor, "{report}");
    assert_eq!(
        (report["scanned"].as_u64(), report["restored"].as_u64()),
        (Some(2000), Some(2000)),
        "{report}"
    );
    assert!(stderr.contains("restore:"), "{stderr}");
    let left: i64 = redis_cmd(&env, &["EXISTS", &key]);
    assert_eq!(left, 0, "the cursor outlived its restore");
    // ...and the reconciler finds the 1000 below it and schedules them.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let report = reconcile(&env, true).await;
    assert_eq!(report["missing"]["count"], 1000, "{report}");
    assert_eq!(report["missing"]["repaired"], 1000, "{report}");
    assert_eq!(
        report["missing"]["sample"].as_array().unwrap().len(),
        20,
        "{report}"
    );
    let mut pipe = redis::pipe();
    for id in &ids {
        pipe.hexists(env.keys.messages(shard(&env, id)), id);
    }
    let back: Vec<bool> = pipe.query(&mut env.redis.con()).unwrap();
    assert!(back.iter().all(|&b| b), "not every message is back");
}

/// A `delayq restore` killed (SIGKILL) after its first page leaves its
/// cursor in Redis; the next restore starts after it, and every message is
/// back.
async fn a_killed_restore_resumes(b: Backend) {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    const N: usize = 30_000;
    let env = reconciling_env(b).start().await;
    let mut ids = Vec::with_capacity(N);
    for chunk in 0..N / 1000 {
        let batch: Vec<Value> = (0..1000)
            .map(|i| json!({"topic": "kill", "body": format!("{chunk}-{i}"), "delay": 600_000}))
            .collect();
        ids.extend(env.push_batch(batch).await);
    }
    env.wait_scheduled(ids.last().unwrap()).await;
    env.redis.wipe_schedule(&env.keys);

    let mut child = env
        .tool(&["restore", "--expire"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run delayq restore");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    loop {
        let line = lines
            .next()
            .expect("delayq restore ended before its first page")
            .unwrap();
        if line.starts_with("restore: scanned") {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let cursor: Option<String> = redis_cmd(&env, &["HGET", &env.keys.restore_cursor(), "after"]);
    let cursor: i64 = cursor
        .expect("the killed restore left no cursor")
        .parse()
        .unwrap();
    let mut sorted: Vec<i64> = ids.iter().map(|i| parse_id(i).0).collect();
    sorted.sort();
    let done = sorted.iter().filter(|&&id| id <= cursor).count();
    assert!((2000..N).contains(&done), "cursor after {done} of {N} rows");

    let (report, _) = env.run_tool_report(&["restore", "--expire"]);
    assert_eq!(report["resumedAfter"], cursor, "{report}");
    assert_eq!(
        report["scanned"].as_u64(),
        Some((N - done) as u64),
        "{report}"
    );
    let mut pipe = redis::pipe();
    for id in &ids {
        pipe.hexists(env.keys.messages(shard(&env, id)), id);
    }
    let back: Vec<bool> = pipe.query(&mut env.redis.con()).unwrap();
    assert_eq!(
        back.iter().filter(|&&b| b).count(),
        N,
        "not every message is back"
    );
}

async fn cli_reconcile(b: Backend) {
    let env = reconciling_env(b).start().await;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(
            env.push(json!({"topic": "clirc", "body": format!("{i}"), "delay": 60_000}))
                .await,
        );
    }
    for id in &ids {
        env.wait_scheduled(id).await;
    }
    let lost = &ids[1];
    let s = shard(&env, lost);
    redis_cmd::<i64>(&env, &["HDEL", &env.keys.messages(s), lost]);
    redis_cmd::<i64>(&env, &["ZREM", &env.keys.delay(s), lost]);
    tokio::time::sleep(Duration::from_millis(700)).await;

    let reconcile = ["reconcile", "--reconcile-grace", GRACE];
    let (report, stderr) = env.run_tool_report(&reconcile);
    assert_eq!(counts(&report), [1, 0, 0, 0, 0], "{report}");
    assert_eq!(report["repair"], "none", "{report}");
    assert_eq!(report["missing"]["repaired"], 0, "{report}");
    assert_eq!(report["journalScanned"], 3, "{report}");
    assert!(stderr.contains("reconcile: journal rows"), "{stderr}");
    assert!(!holds(&env, lost));

    let (report, _) = env.run_tool_report(&["reconcile", "--repair", "--reconcile-grace", GRACE]);
    assert_eq!(report["repair"], "all", "{report}");
    assert_eq!(report["missing"]["repaired"], 1, "{report}");
    assert!(holds(&env, lost));
    // The router of the command recorded it Delaying again.
    env.wait_history(lost, &["WaitPut", "Delaying", "Delaying"])
        .await;

    let (report, _) = env.run_tool_report(&reconcile);
    assert_eq!(counts(&report), [0; 5], "{report}");
}

/// In a cluster the leader reconciles, the standby does not, and what Redis
/// lost is delivered.
#[tokio::test(flavor = "multi_thread")]
async fn the_cluster_leader_reconciles() {
    use crate::common::cluster::Cluster;

    let c = Cluster::builder()
        .arg("--reconcile-interval")
        .arg("1s")
        .arg("--reconcile-grace")
        .arg("1s")
        .start()
        .await;
    let owners = c
        .wait_scanners(&[0, 1], Duration::from_secs(30), |_| true)
        .await;
    let leader = Cluster::index_of(&owners[0]);
    let standby = 1 - leader;
    // The standby takes pushes once it holds a worker id lease (its /ready).
    c.wait_ready(standby, Duration::from_secs(30)).await;
    let messages: Vec<Value> = (0..24)
        .map(|i| json!({"topic": "lead", "body": format!("{i}"), "delay": 3000 + i * 50}))
        .collect();
    let ids = c.push_batch(standby, messages).await;
    let deadline = now_ms() + 10_000;
    while ids
        .iter()
        .any(|id| c.journal.row(id).unwrap().status == status::WAIT_PUT)
    {
        assert!(now_ms() < deadline, "not scheduled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let k = &c.keys;
    let _: () = redis::cmd("DEL")
        .arg(k.delay(0))
        .arg(k.messages(0))
        .arg(k.delay(1))
        .query(&mut c.redis.con())
        .unwrap();

    let want: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let mut got: Vec<String> = Vec::new();
    let deadline = now_ms() + 20_000;
    while got.len() < ids.len() && now_ms() < deadline {
        for r in c.poll(standby, "lead", 1, 100).await {
            assert!(r.at >= r.msg["dueTime"].as_i64().unwrap(), "early: {r:?}");
            got.push(r.id().to_string());
        }
    }
    let delivered: HashSet<&str> = got.iter().map(String::as_str).collect();
    assert_eq!(delivered.len(), got.len(), "delivered twice: {got:?}");
    assert_eq!(delivered, want);
    let said = |i: usize| {
        c.node(i)
            .log_tail(1000)
            .contains("the journal and Redis differed")
    };
    assert!(said(leader), "the leader did not reconcile");
    assert!(!said(standby), "the standby reconciled");
}

/// `/ready` names a Redis that may evict keys, and stays 200; the start-up
/// log warns too.
#[tokio::test(flavor = "multi_thread")]
async fn ready_warns_about_eviction() {
    let mut env = Env::start(Backend::Sqlite).await;
    let r = env.wait_readiness(200).await;
    assert_eq!(r.json["redisMaxmemoryPolicy"], "noeviction", "{}", r.text);
    assert_eq!(r.json["warnings"], json!([]), "{}", r.text);

    redis_cmd::<()>(&env, &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let r = env.get_path("/ready").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["redisMaxmemoryPolicy"], "allkeys-lru", "{}", r.text);
    let warnings = r.json["warnings"].as_array().unwrap();
    assert!(
        warnings.len() == 1 && warnings[0].as_str().unwrap().contains("noeviction"),
        "{}",
        r.text
    );

    env.stop_server();
    env.start_server().await;
    assert!(
        env.server.log_tail(100).contains("may evict keys"),
        "no eviction warning at start-up"
    );
}

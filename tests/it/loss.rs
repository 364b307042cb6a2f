//! Redis loses its last writes and keeps its data set marker (an older
//! snapshot restored, an AOF `everysec` crash, a replica promoted before it
//! caught up): the journal's committed ends are authoritative, so nothing
//! acked or cancelled before the loss is handed out again, and what was
//! live still is.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::common::{status, Backend, Env};
use serde_json::json;

backend_tests!(redis_restarted_from_an_older_snapshot_brings_back_no_end);

/// 40 messages handed out and 40 due in a few seconds; Redis saves a
/// snapshot; then all 40 are acked and 20 of the others cancelled, and the
/// journal has every end. Redis is killed and started again from the
/// snapshot (its marker is in it, so no restore runs): none of the acked
/// or cancelled messages is handed out again, and the 20 others are.
async fn redis_restarted_from_an_older_snapshot_brings_back_no_end(b: Backend) {
    let mut env = Env::start(b).await;
    // A short ttl: a revived delivery comes back soon after the restart.
    let handed: Vec<String> = env
        .push_batch(
            (0..40)
                .map(|i| json!({"topic": "loss", "body": format!("h{i}"), "delay": 0, "ttl": 1000}))
                .collect(),
        )
        .await;
    let later: Vec<String> = env
        .push_batch(
            (0..40)
                .map(|i| json!({"topic": "loss", "body": format!("l{i}"), "delay": 6000}))
                .collect(),
        )
        .await;
    // 20 more ready for a topic nobody polls yet.
    let ready: Vec<String> = env
        .push_batch(
            (0..20)
                .map(|i| json!({"topic": "loss-ready", "body": format!("r{i}"), "delay": 0}))
                .collect(),
        )
        .await;
    let got = env.collect("loss", 40, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 40, "{got:?}");
    env.wait_ready("loss-ready", &ready).await;
    let _: () = redis::cmd("SAVE").query(&mut env.redis.con()).unwrap();

    for id in &handed {
        env.ack(id).await.assert_ok();
    }
    let (cancelled, kept) = later.split_at(20);
    for id in cancelled {
        let r = env.delete(id).await;
        assert_eq!(r.assert_ok()["result"], "deleted", "{}", r.text);
    }
    for id in &ready {
        let r = env.delete(id).await;
        assert_eq!(r.assert_ok()["result"], "deleted", "{}", r.text);
    }
    env.wait_statuses(&handed, status::CONSUMED).await;
    env.wait_statuses(cancelled, status::DELETED).await;
    env.wait_statuses(&ready, status::DELETED).await;

    env.redis.kill();
    env.redis.restart_same_port();
    let restarted = Instant::now();
    // The ready ones are back in their queue at once: poll right away.
    let mut early = Vec::new();
    while restarted.elapsed() < Duration::from_secs(2) {
        let r = env.get_path("/get/loss-ready?timeout=1&count=100").await;
        if r.status == 200 {
            for m in r.json["messages"].as_array().unwrap() {
                early.push(m["id"].as_str().unwrap().to_string());
            }
        }
    }
    assert!(
        early.is_empty(),
        "{} messages cancelled while ready before Redis lost its last writes were handed out \
         again: {early:?}",
        early.len()
    );
    env.wait_readiness(200).await;

    // Every revived delivery's ttl is over by now, and the later ones
    // fall due within the next few seconds: collect for 10 s.
    let mut seen: Vec<String> = Vec::new();
    while restarted.elapsed() < Duration::from_secs(10) {
        for r in env.poll("loss", 1, 100).await {
            env.ack(r.id()).await;
            seen.push(r.id().to_string());
        }
    }
    let ended: HashSet<&String> = handed.iter().chain(cancelled).collect();
    let back: Vec<&String> = seen.iter().filter(|id| ended.contains(id)).collect();
    assert!(
        back.is_empty(),
        "{} messages acked or cancelled before Redis lost its last writes were handed out \
         again: {back:?}",
        back.len()
    );
    let seen: HashSet<&String> = seen.iter().collect();
    let lost: Vec<&String> = kept.iter().filter(|id| !seen.contains(id)).collect();
    assert!(lost.is_empty(), "live messages never handed out: {lost:?}");
    // The journal keeps every end.
    env.wait_statuses(&handed, status::CONSUMED).await;
    env.wait_statuses(cancelled, status::DELETED).await;
}

/// A restore frozen between reading a page of the journal and writing it
/// to Redis (a stopped process, a paused machine) for longer than the
/// tombstones last must not bring back a message acked meanwhile: the
/// write of so old a reading is refused. (Tombstones last 2 s here
/// instead of two minutes, the freeze 4 s.)
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_frozen_past_the_tombstones_brings_back_no_ack() {
    let env = Env::builder(Backend::Sqlite)
        .env("DELAYQ_FAULTS", "tombstone_ms=2000,restore_frozen=4000")
        .start()
        .await;
    let id = env
        .push(json!({"topic": "frozen", "body": "once", "delay": 0, "ttl": 60000}))
        .await;
    let got = env.receive_one("frozen").await;
    assert_eq!(got.id(), id);
    // The restore reads the message (Consuming) and freezes; meanwhile it
    // is acked, and its tombstone expires.
    let restore = {
        let url = env.url("/reStore?expire=true");
        let http = env.http.clone();
        tokio::spawn(async move { http.get(url).send().await.unwrap().status().as_u16() })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.ack(&id).await.assert_ok();
    env.wait_status(&id, status::CONSUMED).await;
    let status = restore.await.unwrap();
    let again = env.collect("frozen", 1, Duration::from_secs(3)).await;
    assert!(
        again.is_empty(),
        "a message acked while a restore was frozen came back (restore answered {status}): {again:?}"
    );
    assert_eq!(env.journal.row(&id).unwrap().status, status::CONSUMED);
}

/// Redis comes back from a snapshot older than the journal's retention:
/// a message it holds that ended long ago has no journal row any more
/// (retention removed it). Created before the retention, it is taken out
/// like an ended one; a record the journal lacks that is newer (the
/// journal may have lost the row) is left alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_record_older_than_the_retention_is_not_handed_out_after_a_loss() {
    use crate::reconcile::redis_cmd;
    use delayq::message::MessageId;
    use delayq::redis::keys::score;
    use delayq::redis::record;

    let env = Env::start(Backend::Sqlite).await;
    let id = env
        .push(json!({"topic": "old", "body": "x", "delay": 600_000}))
        .await;
    env.wait_scheduled(&id).await;
    let row = env.journal.row(&id).unwrap();
    let k = env.keys.clone();
    let now = crate::common::now_ms();
    // Ended 30 days ago, its row gone with the journal's 7 days; and one
    // created now whose row the journal lacks.
    let old = MessageId::first_at(now - 30 * 86_400_000);
    let new = MessageId::first_at(now);
    for ghost in [old, new] {
        let mut m = row.message();
        m.id = ghost;
        m.due_time = now;
        let s = k.shard_of(ghost);
        let (g, rec) = (ghost.to_string(), record::encode(&m, 0));
        redis_cmd::<i64>(&env, &["HSET", &k.messages(s), &g, &rec]);
        let sc = (score(now, 0) as i64).to_string();
        redis_cmd::<i64>(&env, &["ZADD", &k.delay(s), &sc, &g]);
    }
    // Another data set serves every shard now (as after a loss).
    for s in 0..k.shards() {
        redis_cmd::<i64>(&env, &["DEL", &k.applied(s)]);
    }
    let got: Vec<String> = env
        .collect("old", 2, Duration::from_secs(5))
        .await
        .iter()
        .map(|r| r.id().to_string())
        .collect();
    assert_eq!(
        got,
        [new.to_string()],
        "only the newer record the journal lacks is handed out"
    );
}

/// One Redis loses delayq's scripts between two commands of a pipeline (a
/// `SCRIPT FLUSH` landing between two reads of a large pipeline): the
/// commands before it ran, the script calls after it answered NOSCRIPT
/// and did not. The scripts are loaded again and only the calls that did
/// not run are sent again, so nothing in the pipeline runs twice (red
/// with the whole pipeline sent again: the counter read 2).
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_lost_the_scripts_mid_pipeline_runs_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let server = crate::common::Redis::start(dir.path());
    let mut con = delayq::redis::conn::connect(&server.url()).await.unwrap();
    let scripts = delayq::redis::scripts::Scripts::new(false);
    scripts.load(&mut con).await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.con())
        .unwrap();
    // What the server saw: INCR ran, then the call of a flushed script.
    let mut pipe = redis::pipe();
    pipe.cmd("INCR").arg("counter");
    pipe.cmd("EVALSHA")
        .arg(scripts.probe.get_hash())
        .arg(1)
        .arg("applied");
    let (counted, probed): (i64, Vec<redis::Value>) =
        scripts.run_pipe("probe", &mut con, &pipe).await.unwrap();
    assert_eq!(counted, 1);
    assert_eq!(
        probed.len(),
        4,
        "the probe ran once the scripts were back: {probed:?}"
    );
    let counter: i64 = redis::cmd("GET")
        .arg("counter")
        .query(&mut server.con())
        .unwrap();
    assert_eq!(counter, 1, "a command before the lost script ran twice");
}

/// Acks Redis applied and answered while the journal was slow to write
/// them (a transaction holds the messages' rows, so the node's status
/// changes wait), then Redis restarts from a snapshot taken before the
/// acks. The fenced shard waits for the node to write what it queued
/// before it re-applies the journal's ends, so no acked message is handed
/// out again (red when the walk does not wait: every one came back once
/// its ttl ran out).
#[tokio::test(flavor = "multi_thread")]
async fn acks_the_journal_had_not_written_when_redis_lost_them_stay_acked() {
    use diesel::connection::SimpleConnection;
    use diesel::{Connection, PgConnection};
    let mut env = Env::start(Backend::Postgres).await;
    let handed: Vec<String> = env
        .push_batch(
            (0..20)
                .map(|i| json!({"topic": "lag", "body": format!("a{i}"), "delay": 0, "ttl": 1000}))
                .collect(),
        )
        .await;
    let got = env.collect("lag", 20, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 20, "{got:?}");
    env.wait_statuses(&handed, status::CONSUMING).await;
    let _: () = redis::cmd("SAVE").query(&mut env.redis.con()).unwrap();

    let mut lock = PgConnection::establish(&env.journal.url).expect("connect to PostgreSQL");
    lock.batch_execute(&format!(
        "BEGIN; SELECT id FROM message WHERE id IN ({}) FOR UPDATE",
        handed.join(",")
    ))
    .unwrap();
    for id in &handed {
        let r = env.ack(id).await;
        assert_eq!(r.assert_ok()["status"], "Consumed", "{}", r.text);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let unwritten = env
        .journal
        .rows(&handed)
        .iter()
        .filter(|r| r.status == status::CONSUMING)
        .count();
    assert_eq!(
        unwritten, 20,
        "the acks reached the journal through the lock"
    );

    env.redis.kill();
    env.redis.restart_same_port();
    let restarted = Instant::now();
    // The journal writes again 4 s after the restart: the fence has been
    // seen by then, and every ttl has run out.
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(4)).await;
        lock.batch_execute("ROLLBACK").unwrap();
    });
    let mut seen: Vec<String> = Vec::new();
    while restarted.elapsed() < Duration::from_secs(10) {
        let r = env.get_path("/get/lag?timeout=1&count=100").await;
        if r.status == 200 {
            for m in r.json["messages"].as_array().unwrap() {
                seen.push(m["id"].as_str().unwrap().to_string());
            }
        }
    }
    release.await.unwrap();
    let back: HashSet<&String> = seen.iter().collect();
    assert!(
        back.is_empty(),
        "{} messages acked before Redis lost its last writes were handed out again ({} times): {back:?}",
        back.len(),
        seen.len()
    );
    env.wait_statuses(&handed, status::CONSUMED).await;
}

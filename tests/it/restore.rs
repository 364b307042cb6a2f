//! Restore: Redis rebuilt from the journal, by `GET /reStore`, by
//! `GET /reStore/{id}`, by `delayq restore` (after the schedule's keys were
//! deleted but the data set marker survived, which a node cannot notice),
//! and by the server itself at start-up when Redis lost its data set. Never
//! a duplicate delivery.

use std::time::Duration;

use crate::common::{now_ms, sleep_until_ms, status, wait_every, Backend, Env};
use serde_json::{json, Value};

backend_tests!(
    restore_all_after_redis_wipe,
    restore_one_after_redis_wipe,
    cli_restore,
    startup_restores_a_wiped_redis,
    restore_beside_acks_revives_nothing
);

async fn restore_all_after_redis_wipe(b: Backend) {
    let env = Env::start(b).await;
    // No consumer: A falls due and waits, B is far in the future.
    let a = env
        .push(json!({"topic": "r", "body": "A", "delay": 300}))
        .await;
    let b_id = env
        .push(json!({"topic": "r", "body": "B", "delay": 60_000}))
        .await;
    env.wait_ready("r", std::slice::from_ref(&a)).await;
    sleep_until_ms(env.journal.row(&a).unwrap().due_time + 700).await;
    env.redis.wipe_schedule(&env.keys);

    // expire=false leaves the overdue A out.
    let r = env.get_path("/reStore?expire=false").await;
    let report = r.assert_ok();
    assert_eq!(
        (
            report["restored"].as_u64(),
            report["skippedExpired"].as_u64()
        ),
        (Some(1), Some(1)),
        "{report}"
    );
    assert_eq!(report["alreadyPresent"], 0, "{report}");
    env.assert_nothing("r", 2).await;

    // expire=true brings A back; B is there already.
    let r = env.get_path("/reStore?expire=true").await;
    let report = r.assert_ok();
    assert_eq!(
        (
            report["restored"].as_u64(),
            report["alreadyPresent"].as_u64()
        ),
        (Some(1), Some(1)),
        "{report}"
    );
    assert_eq!(report["skippedExpired"], 0, "{report}");
    let got = env.receive_one("r").await;
    assert_eq!(
        (got.id(), got.msg["body"].as_str()),
        (a.as_str(), Some("A"))
    );

    // Again: nothing new, and A (in flight, not acked) is not delivered twice.
    let r = env.get_path("/reStore?expire=true").await;
    let report = r.assert_ok();
    assert_eq!(report["restored"], 0, "{report}");
    assert!(report["alreadyPresent"].as_u64().unwrap() >= 1, "{report}");
    env.assert_nothing("r", 1).await;
    env.ack(&a).await.assert_ok();
    assert_eq!(env.journal.row(&b_id).unwrap().status, status::DELAYING);
}

async fn restore_one_after_redis_wipe(b: Backend) {
    let env = Env::start(b).await;
    let id = env
        .push(json!({"topic": "r1", "body": "one", "delay": 300}))
        .await;
    let other = env
        .push(json!({"topic": "r1", "body": "other", "delay": 300}))
        .await;
    env.wait_scheduled(&id).await;
    env.redis.wipe_schedule(&env.keys);

    let r = env.get_path(&format!("/reStore/{id}")).await;
    let report = r.assert_ok();
    assert_eq!(
        (report["id"].as_str(), report["restored"].as_u64()),
        (Some(id.as_str()), Some(1)),
        "{report}"
    );
    // Only that one message comes back.
    let got = env.receive_one("r1").await;
    assert_eq!(got.id(), id);
    assert!(got.at >= got.msg["dueTime"].as_i64().unwrap());
    env.assert_nothing("r1", 1).await;
    assert!(env.journal.row(&other).unwrap().status < status::CONSUMING);

    env.get_path("/reStore/12345")
        .await
        .assert_error(404, "not_found");
    env.get_path("/reStore/abc")
        .await
        .assert_error(400, "invalid_id");
}

async fn cli_restore(b: Backend) {
    let env = Env::start(b).await;
    let mut ids = Vec::new();
    for (i, delay) in [0, 300, 1200].into_iter().enumerate() {
        ids.push(
            env.push(json!({"topic": "cli", "body": format!("m{i}"), "delay": delay}))
                .await,
        );
    }
    for id in &ids {
        env.wait_scheduled(id).await;
    }
    env.redis.wipe_schedule(&env.keys);
    // The running node's fence finds the wiped shards' `applied` keys gone,
    // re-applies the journal's ends and writes them again: wait for that
    // (CI saw it land between the two snapshots below on a loaded machine).
    let shards = env.keys.shards();
    let applied_keys: Vec<String> = (0..shards).map(|s| env.keys.applied(s)).collect();
    wait_every(
        "the node to re-apply the journal's ends to the wiped shards",
        Duration::from_secs(15),
        Duration::from_millis(50),
        || async {
            let applied: u32 = redis::cmd("EXISTS")
                .arg(&applied_keys)
                .query(&mut env.redis.con())
                .unwrap();
            if applied == shards {
                Ok(())
            } else {
                Err(format!("{applied} of {shards} shards re-applied"))
            }
        },
    )
    .await;

    // A dry run counts and writes nothing. (The running node writes its
    // shards' epochs again after the wipe, whenever its scans find them
    // gone: those keys are the node's, not the dry run's.)
    let not_epochs = |mut snap: std::collections::BTreeMap<String, _>| {
        snap.retain(|k: &String, _| !k.ends_with(":epoch"));
        snap
    };
    let before = not_epochs(env.redis.snapshot());
    let flows_before = env.journal.counts();
    let report = env.run_tool_report(&["restore", "--expire", "--dry-run"]).0;
    assert_eq!(
        (report["restored"].as_u64(), report["dryRun"].as_bool()),
        (Some(3), Some(true)),
        "{report}"
    );
    assert_eq!(
        not_epochs(env.redis.snapshot()),
        before,
        "a dry run wrote to Redis"
    );
    assert_eq!(
        env.journal.counts(),
        flows_before,
        "a dry run wrote to the journal"
    );
    env.assert_nothing("cli", 1).await;

    // The real one: the running server then delivers every message once.
    let started = now_ms();
    let report = env.run_tool_report(&["restore", "--expire"]).0;
    assert_eq!(
        (report["restored"].as_u64(), report["dryRun"].as_bool()),
        (Some(3), Some(false)),
        "{report}"
    );
    let got = env.collect("cli", 3, Duration::from_secs(10)).await;
    let mut got_ids: Vec<String> = got.iter().map(|r| r.id().to_string()).collect();
    got_ids.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(got_ids, want, "{got:?}");
    for r in &got {
        assert!(
            r.at >= r.msg["dueTime"].as_i64().unwrap(),
            "delivered early: {r:?}"
        );
        assert!(
            r.at - started < 6_000,
            "delivered {} ms after the restore",
            r.at - started
        );
    }
    env.assert_nothing("cli", 1).await;

    // Restoring again adds nothing.
    let report = env.run_tool_report(&["restore", "--expire"]).0;
    assert_eq!(
        (
            report["restored"].as_u64(),
            report["alreadyPresent"].as_u64()
        ),
        (Some(0), Some(3)),
        "{report}"
    );
    env.assert_nothing("cli", 1).await;
}

async fn startup_restores_a_wiped_redis(b: Backend) {
    let mut env = Env::start(b).await;
    let id = env
        .push(json!({"topic": "boot", "body": "survivor", "delay": 1000}))
        .await;
    let gone = env
        .push(json!({"topic": "boot", "body": "deleted", "delay": 1000}))
        .await;
    env.delete(&gone).await.assert_ok();
    env.wait_scheduled(&id).await;
    env.stop_server();
    env.redis.flushall();
    assert_eq!(env.redis.dbsize(), 0);

    env.start_server().await;
    let marker: Option<String> = redis::cmd("GET")
        .arg(env.keys.dataset_marker())
        .query(&mut env.redis.con())
        .unwrap();
    assert!(
        marker.is_some(),
        "the new server did not set the data set marker"
    );
    let got = env.receive_one("boot").await;
    assert_eq!(
        (got.id(), got.msg["body"].as_str()),
        (id.as_str(), Some("survivor"))
    );
    assert!(
        got.at >= got.msg["dueTime"].as_i64().unwrap(),
        "delivered early: {got:?}"
    );
    env.assert_nothing("boot", 1).await;
    assert!(
        env.server
            .log_tail(200)
            .contains("restored it from the journal"),
        "no restore in the log"
    );
}

/// Restores running while consumers ack: a restore reads a journal page in
/// which a message is still live, the consumer acks it (Redis forgets it at
/// once, the journal a moment later), then the restore writes the page to
/// Redis. The ack's tombstone keeps the message from coming back.
async fn restore_beside_acks_revives_nothing(b: Backend) {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicBool, Ordering};

    const N: usize = 600;
    let env = Env::start(b).await;
    let messages: Vec<Value> = (0..N)
        .map(|i| json!({"topic": "race", "body": format!("{i}")}))
        .collect();
    env.push_batch(messages).await;

    let done = AtomicBool::new(false);
    let restores = async {
        let mut runs = 0;
        while !done.load(Ordering::Relaxed) {
            env.get_path("/reStore?expire=true").await.assert_ok();
            runs += 1;
        }
        runs
    };
    let consume = async {
        let mut acked: HashSet<String> = HashSet::new();
        let mut revived = Vec::new();
        let deadline = now_ms() + 30_000;
        while acked.len() < N && now_ms() < deadline {
            for got in env.poll("race", 1, 20).await {
                let id = got.id().to_string();
                if acked.contains(&id) {
                    revived.push(id.clone());
                }
                env.ack(&id).await.assert_ok();
                acked.insert(id);
            }
        }
        // Anything still to come would be a revived message.
        tokio::time::sleep(Duration::from_millis(300)).await;
        done.store(true, Ordering::Relaxed);
        (acked, revived)
    };
    let (runs, (acked, mut revived)) = tokio::join!(restores, consume);
    revived.extend(
        env.poll("race", 2, 100)
            .await
            .iter()
            .map(|r| r.id().to_string()),
    );
    assert_eq!(acked.len(), N, "every message delivered and acked");
    assert!(runs > 1, "restores ran beside the consumer ({runs})");
    assert!(
        revived.is_empty(),
        "acked messages delivered again: {revived:?}"
    );
}

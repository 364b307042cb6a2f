//! The Redis horizon (`--redis-horizon`): a message due beyond it waits in
//! the journal alone, costs Redis nothing, and is scheduled by its shard's
//! owner as it comes near, in time to be delivered when due. Cancel, a
//! repeated bizKey, restore and reconcile treat it as the live message it
//! is; a deposed owner's page cannot schedule it.

use std::time::Duration;

use crate::common::{assert_woken, jitter_ms, now_ms, sleep_until_ms, status, Backend, Env};
use crate::reconcile::{counts, holds, reconcile, reconciling_env};
use serde_json::json;

backend_tests!(
    waiting_messages_cost_redis_nothing_and_arrive_on_time,
    a_waiting_message_is_cancelled_and_found_by_its_biz_key,
    restore_and_reconcile_leave_waiting_messages_in_the_journal,
    turning_the_horizon_off_loads_what_waits
);

/// How many messages the journal lists as waiting.
fn listed(env: &Env) -> i64 {
    use delayq::journal::schema::message_waiting;
    use diesel::prelude::*;
    delayq::with_conn!(&mut env.journal.conn(), c => message_waiting::table.count().get_result(c))
        .expect("count the waiting list")
}

/// Short, so the tests are quick: a message pushed 6 s ahead waits in the
/// journal for about 3 s.
const HORIZON: &str = "3s";

async fn waiting_messages_cost_redis_nothing_and_arrive_on_time(b: Backend) {
    let env = Env::builder(b)
        .arg("--redis-horizon")
        .arg(HORIZON)
        .start()
        .await;
    let start = now_ms() + 6_000;
    let messages: Vec<_> = (0..12)
        .map(|i| {
            json!({"topic": "far", "body": format!("f{i}"), "priority": i % 3,
                   "deliverAt": start + i as i64 * 150 + jitter_ms(100) as i64})
        })
        .collect();
    let ids = env.push_batch(messages).await;
    let near = env
        .push(json!({"topic": "near", "body": "n", "delay": 200}))
        .await;
    // Answered once durable, listed as waiting; nothing of them in Redis.
    assert_eq!(listed(&env), ids.len() as i64);
    for id in &ids {
        assert!(!holds(&env, id), "{id} is in Redis before it came near");
        assert_eq!(env.journal.row(id).unwrap().status, status::WAIT_PUT);
    }
    assert!(holds(&env, &near) || env.journal.row(&near).unwrap().status != status::WAIT_PUT);
    assert_eq!(env.receive_one("near").await.id(), near);

    let got = env.collect("far", ids.len(), Duration::from_secs(15)).await;
    let mut seen: Vec<String> = got.iter().map(|r| r.id().to_string()).collect();
    seen.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(seen, want, "every waiting message delivered once");
    let lateness: Vec<i64> = got
        .iter()
        .map(|r| r.at - r.msg["dueTime"].as_i64().unwrap())
        .collect();
    assert_woken(&lateness, 9, "messages loaded from the journal");
    for r in &got {
        env.ack(r.id()).await.assert_ok();
    }
    env.wait_history(
        &ids[0],
        &["WaitPut", "Delaying", "Ready", "Consuming", "Consumed"],
    )
    .await;
    env.assert_nothing("far", 1).await;
    assert_eq!(listed(&env), 0, "loaded messages are off the waiting list");
}

async fn a_waiting_message_is_cancelled_and_found_by_its_biz_key(b: Backend) {
    let env = Env::builder(b)
        .arg("--redis-horizon")
        .arg(HORIZON)
        .start()
        .await;
    let due = now_ms() + 6_000;
    let push = |key: &str| json!({"topic": "w", "body": key, "bizKey": key, "deliverAt": due});
    let one = env.push(push("k1")).await;
    let two = env.push(push("k2")).await;
    let kept = env.push(push("k3")).await;
    // A repeated bizKey answers with the waiting message, still waiting.
    assert_eq!(env.push(push("k1")).await, one);
    assert!(!holds(&env, &one));

    assert_eq!(
        env.delete(&one).await.assert_ok()["result"],
        "deleted",
        "a waiting message cancelled by id"
    );
    let r = env
        .post_json("/cancel", &json!({"topic": "w", "bizKey": "k2"}))
        .await;
    assert_eq!(
        r.assert_ok()["results"][0]["result"],
        "deleted",
        "{}",
        r.text
    );
    for id in [&one, &two] {
        assert_eq!(env.journal.row(id).unwrap().status, status::DELETED);
    }
    // The bizKey is free again once its message was cancelled.
    let again = env.push(push("k1")).await;
    assert_ne!(again, one);

    sleep_until_ms(due).await;
    let got = env.collect("w", 3, Duration::from_secs(5)).await;
    let mut ids: Vec<&str> = got.iter().map(|r| r.id()).collect();
    ids.sort();
    let mut want = vec![kept.as_str(), again.as_str()];
    want.sort();
    assert_eq!(ids, want, "the cancelled ones never came");
    for id in [&one, &two] {
        assert_eq!(env.journal.row(id).unwrap().status, status::DELETED);
        assert!(!holds(&env, id));
    }
}

async fn restore_and_reconcile_leave_waiting_messages_in_the_journal(b: Backend) {
    // The default horizon (1 h).
    let env = reconciling_env(b).start().await;
    let far: Vec<String> = env
        .push_batch(
            (0..5)
                .map(|i| json!({"topic": "rh", "body": format!("far{i}"), "delay": 7_200_000}))
                .collect(),
        )
        .await;
    let near: Vec<String> = env
        .push_batch(
            (0..3)
                .map(|i| json!({"topic": "rh", "body": format!("near{i}"), "delay": 60_000}))
                .collect(),
        )
        .await;
    for id in &near {
        env.wait_scheduled(id).await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let report = reconcile(&env, false).await;
    assert_eq!(counts(&report), [0; 5], "{report}");
    assert_eq!(
        report["journalScanned"], 3,
        "the waiting messages are not looked for in Redis: {report}"
    );

    env.redis.wipe_schedule(&env.keys);
    let r = env.get_path("/reStore?expire=true").await;
    let report = r.assert_ok();
    assert_eq!(
        (
            report["restored"].as_u64(),
            report["beyondHorizon"].as_u64()
        ),
        (Some(3), Some(5)),
        "{report}"
    );
    for id in &far {
        assert!(!holds(&env, id), "{id} restored into Redis");
        assert_eq!(env.journal.row(id).unwrap().status, status::WAIT_PUT);
    }
    for id in &near {
        assert!(holds(&env, id), "{id} not restored");
    }
}

async fn turning_the_horizon_off_loads_what_waits(b: Backend) {
    let mut env = Env::builder(b)
        .arg("--redis-horizon")
        .arg("1m")
        .start()
        .await;
    let ids = env
        .push_batch(
            (0..5)
                .map(|i| json!({"topic": "off", "body": format!("o{i}"), "delay": 600_000}))
                .collect(),
        )
        .await;
    assert_eq!(listed(&env), 5);
    assert!(ids.iter().all(|id| !holds(&env, id)));
    env.stop_server();
    let args = &mut env.config.extra_args;
    let at = args.iter().position(|a| a == "--redis-horizon").unwrap();
    args[at + 1] = "0".into();
    env.start_server().await;
    for id in &ids {
        env.wait_scheduled(id).await;
        assert!(holds(&env, id), "{id} still waits with the horizon off");
    }
    crate::common::wait_until(
        "the waiting list to empty",
        Duration::from_secs(10),
        || async {
            match listed(&env) {
                0 => Ok(()),
                n => Err(n),
            }
        },
    )
    .await;
}

/// The loader schedules with the epoch its node owns the shard with: once
/// a newer owner raised the shard's epoch, an old page is refused whole.
#[tokio::test(flavor = "multi_thread")]
async fn a_deposed_owners_page_is_refused() {
    use delayq::error::RedisError;
    use delayq::message::Message;
    use delayq::redis::keys::Keys;
    use delayq::redis::schedule::{RedisSchedule, Scheduled};

    let env = Env::start(Backend::Sqlite).await;
    let keys = Keys::new(&format!("fence{}", crate::common::random_hex(6)), 4);
    let con = delayq::redis::connect(&env.redis.url()).await.unwrap();
    let redis = RedisSchedule::new(con, keys.clone(), "test").await.unwrap();
    let due = now_ms() + 60_000;
    let message = |id: i64| -> (Message, i32) {
        let m = serde_json::from_value(json!({
            "id": id.to_string(), "topic": "fence", "body": "b", "priority": 0,
            "ttl": 30_000, "delay": 60_000, "createTime": now_ms(), "dueTime": due
        }))
        .expect("a message");
        (m, 0)
    };
    let shard = 1;
    let ids: Vec<i64> = (1_000..)
        .filter(|&i| keys.shard_of(delayq::message::MessageId(i)) == shard)
        .take(2)
        .collect();
    let mut con = env.redis.con();
    let _: () = redis::cmd("SET")
        .arg(keys.epoch(shard))
        .arg(7)
        .query(&mut con)
        .unwrap();

    let stale = redis.schedule_fenced(shard, 6, 0, &[message(ids[0])]).await;
    assert!(
        matches!(stale, Err(RedisError::StaleEpoch { stored: 7, .. })),
        "{stale:?}"
    );
    let held: i64 = redis::cmd("HLEN")
        .arg(keys.messages(shard))
        .query(&mut con)
        .unwrap();
    assert_eq!(held, 0, "a refused page scheduled nothing");

    let current = redis
        .schedule_fenced(shard, 7, 0, &[message(ids[0]), message(ids[1])])
        .await
        .unwrap();
    assert!(
        current.iter().all(|s| matches!(s, Scheduled::Added { .. })),
        "{current:?}"
    );
    let _: () = redis::cmd("DEL")
        .arg(keys.epoch(shard))
        .arg(keys.messages(shard))
        .arg(keys.delay(shard))
        .query(&mut con)
        .unwrap();
}

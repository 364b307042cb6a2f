//! Delivery: messages arrive after their delay and never before, waiting
//! consumers are answered as soon as something is ready, and messages due at
//! the same instant come out highest priority first, then in arrival order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::{assert_woken, id_of, jitter_ms, now_ms, Backend, Env};
use serde_json::json;

backend_tests!(
    delivery_is_never_early,
    waiting_poll_returns_when_ready,
    same_due_time_goes_by_priority_then_arrival,
    concurrent_consumers_get_each_message_once,
    a_poll_looks_past_ready_entries_without_a_record,
);

async fn delivery_is_never_early(b: Backend) {
    let env = Env::start(b).await;
    let topic = "orders.sms";
    let mut pushed = HashMap::new();
    for (i, delay) in [200, 1500, 600, 1000, 350].into_iter().enumerate() {
        let id = env
            .push(json!({"topic": topic, "body": format!("m{i}"), "delay": delay}))
            .await;
        pushed.insert(id, Some(delay));
    }
    let at = now_ms() + 800;
    let id = env
        .push(json!({"topic": topic, "body": "at", "deliverAt": at}))
        .await;
    pushed.insert(id.clone(), None);
    // A deliverAt in the past is due at once: its delay is 0.
    let past = env
        .push(json!({"topic": topic, "body": "past", "deliverAt": now_ms() - 5000}))
        .await;
    pushed.insert(past, Some(0));

    let got = env
        .collect(topic, pushed.len(), Duration::from_secs(15))
        .await;
    let mut seen = Vec::new();
    for r in &got {
        let m = &r.msg;
        let id = r.id().to_string();
        assert!(!seen.contains(&id), "{id} delivered twice: {got:?}");
        let delay = pushed
            .get(&id)
            .unwrap_or_else(|| panic!("unexpected message {m}"));
        let (create, due) = (
            m["createTime"].as_i64().unwrap(),
            m["dueTime"].as_i64().unwrap(),
        );
        match delay {
            Some(d) => assert_eq!(due, create + d, "dueTime of {m}"),
            None => assert_eq!(due, at, "dueTime of the deliverAt message {m}"),
        }
        assert_eq!(m["delay"].as_i64().unwrap(), due - create, "{m}");
        assert!(r.at >= due, "delivered {} ms early: {m}", due - r.at);
        assert_eq!(
            (
                m["status"].as_str(),
                m["attempts"].as_i64(),
                m["topic"].as_str()
            ),
            (Some("Consuming"), Some(1), Some(topic))
        );
        seen.push(id);
    }
    assert_eq!(
        seen.len(),
        pushed.len(),
        "not every message arrived within 15 s: {got:?}"
    );

    for id in &seen {
        let r = env.ack(id).await;
        assert_eq!(r.assert_ok(), &json!({"id": id, "status": "Consumed"}));
    }
    env.assert_nothing(topic, 1).await;
}

async fn waiting_poll_returns_when_ready(b: Backend) {
    let env = Env::start(b).await;
    // An idle poll answers an empty list when its timeout passes.
    let started = Instant::now();
    let r = env.get_path("/get/idle?timeout=1&count=10").await;
    assert_eq!(r.assert_ok(), &json!({"messages": []}));
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "idle poll returned after {:?}",
        started.elapsed()
    );

    // A poll waiting before the push returns the message as soon as it is
    // due (not at its next look, once a second).
    let env = std::sync::Arc::new(env);
    let mut lateness = Vec::new();
    for _ in 0..8 {
        let e = env.clone();
        let poll = tokio::spawn(async move { e.poll("wake", 20, 10).await });
        tokio::time::sleep(Duration::from_millis(300 + jitter_ms(1_000))).await;
        let id = env
            .push(json!({"topic": "wake", "body": "b", "delay": 300}))
            .await;
        let got = poll.await.unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].id(), id);
        lateness.push(got[0].at - got[0].msg["dueTime"].as_i64().unwrap());
        env.ack(&id).await.assert_ok();
    }
    assert_woken(&lateness, 6, "waiting polls");
}

async fn same_due_time_goes_by_priority_then_arrival(b: Backend) {
    let env = Env::start(b).await;
    let due = now_ms() + 1000;
    let priorities = [17, 200, 3, 255, 0, 128, 99, 42];
    let mut ids = Vec::new();
    for p in priorities {
        ids.push(
            env.push(
                json!({"topic": "prio", "body": format!("p{p}"), "priority": p, "deliverAt": due}),
            )
            .await,
        );
    }
    let mut same = Vec::new();
    for i in 0..5 {
        same.push(
            env.push(
                json!({"topic": "fifo", "body": format!("f{i}"), "priority": 7, "deliverAt": due}),
            )
            .await,
        );
    }
    let shards: std::collections::HashSet<u32> = ids
        .iter()
        .map(|id| env.keys.shard_of(crate::common::parse_id(id)))
        .collect();
    assert!(
        shards.len() > 1,
        "all messages landed in one shard; the test proves nothing"
    );

    crate::common::sleep_until_ms(due + 500).await;
    env.wait_ready("prio", &ids).await;
    env.wait_ready("fifo", &same).await;

    // A poll for fewer than are ready takes the first across all shards
    // (the three highest priorities), and the next poll the rest.
    let mut got = env.poll("prio", 5, 3).await;
    assert_eq!(got.len(), 3, "{got:?}");
    got.extend(env.poll("prio", 5, 10).await);
    let order: Vec<i64> = got
        .iter()
        .map(|r| r.msg["priority"].as_i64().unwrap())
        .collect();
    let mut expected: Vec<i64> = priorities.iter().map(|&p| p as i64).collect();
    expected.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(order, expected, "{got:?}");
    assert!(got.iter().all(|r| r.msg["dueTime"] == due));

    let got = env.poll("fifo", 5, 10).await;
    let order: Vec<&str> = got.iter().map(|r| id_of(&r.msg)).collect();
    assert_eq!(
        order, same,
        "same due time and priority must come in arrival (id) order"
    );
}

async fn concurrent_consumers_get_each_message_once(b: Backend) {
    let env = std::sync::Arc::new(Env::start(b).await);

    // `count` is a maximum: 101 ready messages come out as 100, then 1.
    let batch: Vec<_> = (0..101)
        .map(|i| json!({"topic": "cap", "body": format!("{i}")}))
        .collect();
    let ids = env.push_batch(batch).await;
    env.wait_ready("cap", &ids).await;
    assert_eq!(env.poll("cap", 5, 100).await.len(), 100);
    assert_eq!(env.poll("cap", 5, 100).await.len(), 1);

    // Four consumers waiting on one topic share 120 messages: each is
    // delivered to exactly one of them.
    let pushed_all = std::sync::Arc::new(AtomicBool::new(false));
    let mut consumers = Vec::new();
    for _ in 0..4 {
        let (e, pushed_all) = (env.clone(), pushed_all.clone());
        consumers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline {
                // Every message is due within 1 s of the push: an empty
                // 2 s poll begun after it means the others took the rest.
                let after_push = pushed_all.load(Ordering::SeqCst);
                let batch = e.poll("shared", 2, 7).await;
                if batch.is_empty() && after_push {
                    break;
                }
                got.extend(batch.into_iter().map(|r| r.id().to_string()));
            }
            got
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let batch: Vec<_> = (0..120)
        .map(|i| json!({"topic": "shared", "body": format!("{i}"), "delay": 300 + (i % 5) * 100}))
        .collect();
    let mut pushed = env.push_batch(batch).await;
    pushed_all.store(true, Ordering::SeqCst);
    let mut got = Vec::new();
    for c in consumers {
        got.extend(c.await.unwrap());
    }
    got.sort();
    pushed.sort();
    let mut unique = got.clone();
    unique.dedup();
    assert_eq!(unique.len(), got.len(), "a message went to two consumers");
    assert_eq!(got, pushed, "not every message was delivered");
}

/// Ready-queue entries whose record is gone (a hand-edited Redis, a crash
/// of an older node between two writes) are dropped by the poll that meets
/// them, and the poll goes on to the messages behind them at once.
async fn a_poll_looks_past_ready_entries_without_a_record(b: Backend) {
    let env = Env::start(b).await;
    let id = env.push(json!({"topic": "gap", "body": "real"})).await;
    env.wait_ready("gap", std::slice::from_ref(&id)).await;
    let mut con = env.redis.con();
    // Entries of no message, ahead of the real one in every shard's queue.
    for shard in 0..env.keys.shards() {
        for k in 0..30 {
            let _: () = redis::cmd("ZADD")
                .arg(env.keys.ready(shard, "gap"))
                .arg(0)
                .arg(format!("{}", 100 + shard * 100 + k))
                .query(&mut con)
                .unwrap();
        }
    }
    let began = Instant::now();
    let got = env.poll("gap", 5, 10).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].id(), id);
    assert!(
        began.elapsed() < Duration::from_millis(800),
        "the poll waited {:?} for a message that was ready",
        began.elapsed()
    );
}

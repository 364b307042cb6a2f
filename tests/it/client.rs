//! The Rust client (`delayq-client`) against a real server: typed pushes
//! and cancels round-trip; a `Consumer` handles every message once with
//! bounded concurrency and acks it, nacks with a delay when its handler asks,
//! rides out a server restart with backoff, and on shutdown lets its running
//! handlers finish and acks them before it returns.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::common::{now_ms, status, wait_every, Backend, Env};
use delayq_client::{
    CancelOutcome, Client, Consumer, ConsumerStats, Dst, DuplicateOutcome, Error, ErrorCode,
    MessageId, MessageView, NewMessage, OnDuplicate, Outcome, Repeat, Reschedule,
    RescheduleOutcome, RetryRequest, Search,
};
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

backend_tests!(
    pushes_and_cancels_round_trip,
    a_consumer_handles_every_message_once_and_acks_it,
    retry_later_brings_the_message_back_not_before_its_delay,
    a_consumer_rides_out_a_server_restart,
    shutdown_lets_running_handlers_finish_and_acks_them
);

fn client(env: &Env) -> Client {
    Client::new(&env.url("")).expect("a client of the test server")
}

/// Every delivery a handler saw, by message id, in order.
type Seen = Arc<Mutex<HashMap<MessageId, Vec<MessageView>>>>;

/// A consumer running in its own task until [`Running::stop`].
struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<ConsumerStats, Error>>,
}

impl Running {
    fn start<H, F>(consumer: Consumer, handler: H) -> Running
    where
        H: Fn(MessageView) -> F + Send + Sync + 'static,
        F: std::future::Future<Output = Outcome> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(consumer.run(handler, async {
            let _ = stopped.await;
        }));
        Running { stop, task }
    }

    async fn stop(self) -> ConsumerStats {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the consumer stops within 30 s")
            .expect("the consumer task")
            .expect("the consumer ends without an error")
    }
}

/// Waits (up to 30 s) until `done` holds for what the handlers saw.
async fn wait_seen(
    seen: &Seen,
    what: &str,
    done: impl Fn(&HashMap<MessageId, Vec<MessageView>>) -> bool,
) {
    let every = Duration::from_millis(20);
    wait_every(what, Duration::from_secs(30), every, || async {
        let seen = seen.lock().unwrap();
        if done(&seen) {
            Ok(())
        } else {
            Err(format!("handlers saw {} messages", seen.len()))
        }
    })
    .await
}

/// Pushes `n` messages to `topic` due after `delay`.
async fn push_n(client: &Client, topic: &str, n: usize, delay: Duration) -> Vec<MessageId> {
    let messages: Vec<NewMessage> = (0..n)
        .map(|i| NewMessage::new(topic, format!("m{i}")).delay(delay))
        .collect();
    client.push_batch(&messages).await.expect("push_batch")
}

async fn pushes_and_cancels_round_trip(b: Backend) {
    let env = Env::start(b).await;
    let client = client(&env);

    // Every field arrives as sent.
    let order = NewMessage::new("orders", r#"{"order":42}"#)
        .delay(Duration::from_secs(600))
        .priority(7)
        .ttl(Duration::from_secs(5))
        .max_attempts(3)
        .biz_key("order-42")
        .retry(RetryRequest::exponential(
            Duration::from_secs(1),
            Duration::from_secs(10),
        ));
    let pushed = client.push(&order).await.unwrap();
    assert!(!pushed.duplicate);
    let shown = env.message(&pushed.id.to_string()).await;
    let m = &shown["message"];
    assert_eq!(m["body"], r#"{"order":42}"#);
    assert_eq!(m["bizKey"], "order-42");
    assert_eq!(m["priority"], 7);
    assert_eq!(m["ttl"], 5000);
    assert_eq!(m["delay"], 600_000);
    assert_eq!(m["maxAttempts"], 3);
    assert_eq!(
        m["retry"],
        json!({"backoff": "exponential", "delay": 1000, "max": 10000})
    );
    assert!(env.journal.row(&pushed.id.to_string()).is_some());

    // The same live bizKey answers the same id.
    let again = client.push(&order).await.unwrap();
    assert_eq!((again.id, again.duplicate), (pushed.id, true));
    assert_eq!(again.result, None);
    // With onDuplicate the live message takes the new body (debounce), or
    // only a later time.
    let mut changed = order.clone().on_duplicate(OnDuplicate::Replace);
    changed.body = r#"{"order":43}"#.into();
    let replaced = client.push(&changed).await.unwrap();
    assert_eq!(
        (replaced.id, replaced.duplicate, replaced.result),
        (pushed.id, true, Some(DuplicateOutcome::Replaced))
    );
    let shown = env.message(&pushed.id.to_string()).await;
    assert_eq!(shown["message"]["body"], r#"{"order":43}"#);
    assert_eq!(shown["message"]["dueTime"], replaced.due_time.unwrap());
    let sooner = client
        .push(
            &order
                .clone()
                .delay(Duration::from_secs(1))
                .on_duplicate(OnDuplicate::Extend),
        )
        .await
        .unwrap();
    assert_eq!(sooner.result, Some(DuplicateOutcome::NotLater));
    assert_eq!(sooner.due_time, replaced.due_time);

    // deliverAt and repeat.
    let at = now_ms() + 120_000;
    let at_time = SystemTime::UNIX_EPOCH + Duration::from_millis(at as u64);
    let series = NewMessage::new("orders", "tick")
        .deliver_at(at_time)
        .repeat(Repeat::every(Duration::from_secs(60)).times(3));
    let series = client.push(&series).await.unwrap().id;
    let shown = env.message(&series.to_string()).await;
    assert_eq!(shown["message"]["dueTime"], at);
    assert_eq!(
        shown["message"]["repeat"],
        json!({"every": 60000, "times": 3})
    );

    // A batch: ids in order, each in the journal.
    let batch = push_n(&client, "orders", 3, Duration::from_secs(600)).await;
    assert_eq!(batch.iter().collect::<HashSet<_>>().len(), 3);
    for (i, id) in batch.iter().enumerate() {
        let shown = env.message(&id.to_string()).await;
        assert_eq!(shown["message"]["body"], format!("m{i}"));
    }

    // Cancel one by id (again: still deleted), an unknown id, then the rest
    // in bulk.
    assert_eq!(
        client.cancel(batch[0]).await.unwrap(),
        CancelOutcome::Deleted
    );
    assert_eq!(
        client.cancel(batch[0]).await.unwrap(),
        CancelOutcome::Deleted
    );
    env.wait_status(&batch[0].to_string(), status::DELETED)
        .await;
    assert_eq!(
        client.cancel(MessageId(1)).await.unwrap(),
        CancelOutcome::NotFound
    );
    let bulk = client.cancel_ids(&batch[1..]).await.unwrap();
    assert_eq!(bulk.deleted, 2);
    let results: Vec<_> = bulk.results.iter().map(|r| (r.id, r.result)).collect();
    assert_eq!(
        results,
        vec![
            (batch[1], CancelOutcome::Deleted),
            (batch[2], CancelOutcome::Deleted)
        ]
    );

    // By bizKey, and by bizKey prefix.
    let by_key = client.cancel_biz_key("orders", "order-42").await.unwrap();
    assert_eq!(by_key.deleted, 1);
    assert_eq!(by_key.results[0].id, pushed.id);
    env.wait_status(&pushed.id.to_string(), status::DELETED)
        .await;
    // Again: no live message holds the key now, and the error says so.
    let err = client
        .cancel_biz_key("orders", "order-42")
        .await
        .unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(404), Some(&delayq_client::ErrorCode::NotFound)),
        "{err}"
    );
    let group: Vec<NewMessage> = (1..=3)
        .map(|i| {
            NewMessage::new("orders", "g")
                .delay(Duration::from_secs(600))
                .biz_key(format!("group-7-{i}"))
        })
        .collect();
    client.push_batch(&group).await.unwrap();
    let by_prefix = client
        .cancel_biz_key_prefix("orders", "group-7-")
        .await
        .unwrap();
    assert_eq!(by_prefix.matched, 3);
    assert_eq!(by_prefix.count(CancelOutcome::Deleted.as_str()), 3);

    // Refusals carry the server's code and message, and are not retryable.
    let err = client
        .push(&NewMessage::new("no spaces", "x"))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400));
    assert_eq!(err.code(), Some(&ErrorCode::InvalidTopic));
    assert!(!err.is_retryable());
    assert!(matches!(&err, Error::Api { message, .. } if !message.is_empty()));
    let err = client.push_batch(&[]).await.unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::InvalidBatch));
    let err = client.ack_one(series).await.unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(409), Some(&ErrorCode::NotInFlight))
    );

    // Pause and resume; the topic list says so.
    let paused = client.pause("orders").await.unwrap();
    assert!(paused.paused && paused.changed && paused.paused_at.is_some());
    assert!(!client.pause("orders").await.unwrap().changed);
    let list = client.topics().await.unwrap();
    let orders = list.topics.iter().find(|t| t.topic == "orders").unwrap();
    assert!(orders.paused, "{orders:?}");
    assert_eq!(orders.paused_at, paused.paused_at);
    let resumed = client.resume("orders").await.unwrap();
    assert!(!resumed.paused && resumed.changed && resumed.paused_at.is_none());
    let list = client.topics().await.unwrap();
    assert!(list.topics.iter().all(|t| !t.paused), "{list:?}");
    let err = client.pause("no spaces").await.unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::InvalidTopic));

    // The forecast: a message 30 min ahead, in the second 20-minute bucket.
    client
        .push(&NewMessage::new("forecast", "f").delay(Duration::from_secs(1_800)))
        .await
        .unwrap();
    let f = client
        .forecast(Some("forecast"), "20m", "1h")
        .await
        .unwrap();
    assert_eq!(f.topic.as_deref(), Some("forecast"));
    let counts: Vec<u64> = f.buckets.iter().map(|b| b.count).collect();
    assert_eq!(counts, vec![0, 1, 0], "{f:?}");
    assert!(f.exact, "{f:?}");
    let all = client.forecast(None, "1h", "2h").await.unwrap();
    assert!(all.topic.is_none() && all.buckets.len() == 2, "{all:?}");
    let err = client.forecast(None, "0s", "1h").await.unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::InvalidParameter));

    // Ordered groups: one of group "a" handed out at a time; the next
    // once it is acked.
    let a1 = client
        .push(&NewMessage::new("grouped", "a1").group("a"))
        .await
        .unwrap();
    let a2 = client
        .push(
            &NewMessage::new("grouped", "a2")
                .group("a")
                .delay(Duration::from_millis(5)),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let got = client
        .poll("grouped", &[], 10, Duration::from_secs(2))
        .await
        .unwrap()
        .messages;
    let ids: Vec<MessageId> = got.iter().map(|m| m.id).collect();
    assert_eq!(ids, vec![a1.id], "{got:?}");
    assert_eq!(got[0].group.as_deref(), Some("a"));
    let deliveries: Vec<delayq_client::Delivery> = got.iter().map(Into::into).collect();
    let next = client
        .poll("grouped", &deliveries, 10, Duration::from_secs(5))
        .await
        .unwrap()
        .messages;
    let ids: Vec<MessageId> = next.iter().map(|m| m.id).collect();
    assert_eq!(ids, vec![a2.id], "{next:?}");
    let deliveries: Vec<delayq_client::Delivery> = next.iter().map(Into::into).collect();
    client.ack(&deliveries).await.unwrap();
    let err = client
        .push(&NewMessage::new("grouped", "x").group(""))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::InvalidGroup));

    // Found by bizKey (any characters, sent encoded) and by prefix.
    let odd = client
        .push(
            &NewMessage::new("orders", "odd")
                .biz_key("find&me=1 %/é")
                .delay(Duration::from_secs(600)),
        )
        .await
        .unwrap();
    let found = client
        .find_biz_key("orders", "find&me=1 %/é")
        .await
        .unwrap();
    assert_eq!(found.map(|m| m.id), Some(odd.id));
    assert!(client
        .find_biz_key("orders", "find&me=1")
        .await
        .unwrap()
        .is_none());
    let page = client
        .search(
            "orders",
            &Search::BizKeyPrefix {
                prefix: "find&",
                status: None,
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        page.messages.iter().map(|m| m.id).collect::<Vec<_>>(),
        [odd.id]
    );
    assert!(page.next.is_none());

    // RescheduleEach: by id to a new time, by bizKey to a new priority.
    let moved = client
        .reschedule_ids(&[odd.id], &Reschedule::delay(Duration::from_secs(100)))
        .await
        .unwrap();
    assert_eq!(moved.rescheduled, 1);
    let one = &moved.results[0];
    assert_eq!(
        (one.id, one.result),
        (odd.id, RescheduleOutcome::Rescheduled)
    );
    let due = one.due_time.unwrap();
    assert!(
        (now_ms() + 95_000..=now_ms() + 100_000).contains(&due),
        "{due}"
    );
    let raised = client
        .reschedule_biz_key("orders", "find&me=1 %/é", &Reschedule::priority_only(200))
        .await
        .unwrap();
    assert_eq!(raised.results[0].priority, Some(200));
    assert_eq!(raised.results[0].due_time, Some(due));
    let none = client
        .reschedule_ids(&[MessageId(1)], &Reschedule::delay(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(none.results[0].result, RescheduleOutcome::NotFound);
    let err = client
        .reschedule_ids(&[odd.id], &Reschedule::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::InvalidDelay));

    // Local wall-clock times: Berlin's 02:30 on the day its clock jumps
    // over it is refused unless the rule says which instant it means.
    let gap =
        NewMessage::new("orders", "local").deliver_at_local("2027-03-28T02:30:00", "Europe/Berlin");
    let err = client.push(&gap).await.unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::InvalidDelay), "{err}");
    let later = client.push(&gap.clone().dst(Dst::Later)).await.unwrap().id;
    let shown = env.message(&later.to_string()).await;
    // 03:30 +02:00.
    assert_eq!(shown["message"]["dueTime"], 1_806_197_400_000_i64);
    let moved = client
        .reschedule_ids(
            &[later],
            &Reschedule::local("2027-10-31T02:30:00", "Europe/Berlin", Dst::Earlier),
        )
        .await
        .unwrap();
    // 02:30 +02:00, the fold's first pass.
    assert_eq!(moved.results[0].due_time, Some(1_824_942_600_000));
    let err = client
        .reschedule_ids(
            &[later],
            &Reschedule::local("2027-10-31T02:30:00", "Europe/Berlin", Dst::Reject),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&ErrorCode::InvalidDelay), "{err}");
}

async fn a_consumer_handles_every_message_once_and_acks_it(b: Backend) {
    const N: usize = 60;
    let env = Env::start(b).await;
    let client = client(&env);
    let ids = push_n(&client, "work", N, Duration::from_millis(500)).await;

    let seen: Seen = Arc::default();
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let consumer = Consumer::new(client.clone(), "work")
        .concurrency(4)
        .poll_timeout(Duration::from_secs(1));
    let handler = {
        let (seen, running, most) = (seen.clone(), running.clone(), most.clone());
        move |msg: MessageView| {
            let (seen, running, most) = (seen.clone(), running.clone(), most.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                seen.lock().unwrap().entry(msg.id).or_default().push(msg);
                running.fetch_sub(1, Ordering::SeqCst);
                Outcome::Ack
            }
        }
    };
    let consumer = Running::start(consumer, handler);
    wait_seen(&seen, "every message handled", |s| s.len() == N).await;
    let stats = consumer.stop().await;

    let seen = seen.lock().unwrap().clone();
    for id in &ids {
        let deliveries = &seen[id];
        assert_eq!(
            deliveries.len(),
            1,
            "{id} was handled {} times",
            deliveries.len()
        );
        assert_eq!(deliveries[0].attempts, 1);
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        (2..=4).contains(&most),
        "{most} handlers ran at once with concurrency 4"
    );
    assert_eq!((stats.received, stats.acked), (N as u64, N as u64));
    assert_eq!((stats.refused, stats.errors, stats.unsettled), (0, 0, 0));
    for id in &ids {
        env.wait_status(&id.to_string(), status::CONSUMED).await;
    }
}

async fn retry_later_brings_the_message_back_not_before_its_delay(b: Backend) {
    const DELAY: Duration = Duration::from_millis(1500);
    let env = Env::start(b).await;
    let client = client(&env);
    let ids = push_n(&client, "later", 3, Duration::ZERO).await;

    // Per id: when the handler asked to retry later, and the deliveries.
    let asked: Arc<Mutex<HashMap<MessageId, i64>>> = Arc::default();
    let seen: Seen = Arc::default();
    let handler = {
        let (asked, seen) = (asked.clone(), seen.clone());
        move |msg: MessageView| {
            let (asked, seen) = (asked.clone(), seen.clone());
            async move {
                let id = msg.id;
                let first = msg.attempts == 1;
                seen.lock().unwrap().entry(id).or_default().push(msg);
                if first {
                    asked.lock().unwrap().insert(id, now_ms());
                    Outcome::RetryAfter(DELAY)
                } else {
                    Outcome::Ack
                }
            }
        }
    };
    let received_at: Arc<Mutex<HashMap<MessageId, i64>>> = Arc::default();
    let handler = {
        let received_at = received_at.clone();
        move |msg: MessageView| {
            if msg.attempts > 1 {
                received_at.lock().unwrap().insert(msg.id, now_ms());
            }
            handler(msg)
        }
    };
    let consumer = Consumer::new(client, "later")
        .concurrency(2)
        .poll_timeout(Duration::from_secs(1));
    let consumer = Running::start(consumer, handler);
    wait_seen(&seen, "each message delivered twice", |s| {
        s.len() == ids.len() && s.values().all(|d| d.len() == 2)
    })
    .await;
    let stats = consumer.stop().await;

    let asked = asked.lock().unwrap().clone();
    let received_at = received_at.lock().unwrap().clone();
    let seen = seen.lock().unwrap().clone();
    for id in &ids {
        let deliveries = &seen[id];
        let (first, second) = (&deliveries[0], &deliveries[1]);
        assert_eq!((first.attempts, second.attempts), (1, 2));
        let waited = received_at[id] - asked[id];
        assert!(
            waited >= DELAY.as_millis() as i64,
            "{id} came back {waited} ms after its handler asked for {DELAY:?}"
        );
        env.wait_status(&id.to_string(), status::CONSUMED).await;
        let codes = env.journal.flow_codes(&id.to_string());
        let handed = codes.iter().position(|c| *c == status::CONSUMING).unwrap();
        assert_eq!(
            codes[handed + 1],
            status::DELAYING,
            "the nack sent {id} back to Delaying: {codes:?}"
        );
    }
    assert_eq!((stats.received, stats.nacked, stats.acked), (6, 3, 3));
}

async fn a_consumer_rides_out_a_server_restart(b: Backend) {
    let mut env = Env::start(b).await;
    let client = client(&env);
    let before = push_n(&client, "steady", 20, Duration::ZERO).await;

    let seen: Seen = Arc::default();
    let handler = {
        let seen = seen.clone();
        move |msg: MessageView| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().entry(msg.id).or_default().push(msg);
                Outcome::Ack
            }
        }
    };
    let consumer = Consumer::new(client.clone(), "steady")
        .concurrency(2)
        .poll_timeout(Duration::from_secs(1))
        .backoff(Duration::from_millis(50), Duration::from_secs(1));
    let consumer = Running::start(consumer, handler);
    wait_seen(&seen, "the first 20 handled", |s| s.len() == 20).await;

    // Down for a while: the consumer's polls fail and it backs off.
    let down = Instant::now();
    env.stop_server();
    tokio::time::sleep(Duration::from_secs(3)).await;
    env.start_server_same_port().await;
    let down_for = down.elapsed();
    let after = push_n(&client, "steady", 20, Duration::from_millis(300)).await;
    wait_seen(&seen, "all 40 handled", |s| s.len() == 40).await;
    let stats = consumer.stop().await;

    for id in before.iter().chain(&after) {
        assert!(
            seen.lock().unwrap().contains_key(id),
            "{id} was not delivered"
        );
        env.wait_status(&id.to_string(), status::CONSUMED).await;
    }
    // Backing off from 50 ms to 1 s: about one try a second once the wait
    // has grown, for the poll and for the acks in hand; not a spin.
    assert!(
        stats.errors >= 1,
        "the consumer saw the server go: {stats:?}"
    );
    let most = 10 + 2 * down_for.as_secs();
    assert!(
        stats.errors <= most,
        "{} failed requests in {down_for:?} down: {stats:?}",
        stats.errors
    );
}

async fn shutdown_lets_running_handlers_finish_and_acks_them(b: Backend) {
    let env = Env::start(b).await;
    let client = client(&env);
    let ids = push_n(&client, "slow", 8, Duration::ZERO).await;

    let started: Arc<Mutex<HashSet<MessageId>>> = Arc::default();
    let finished: Arc<Mutex<HashSet<MessageId>>> = Arc::default();
    let handler = {
        let (started, finished) = (started.clone(), finished.clone());
        move |msg: MessageView| {
            let (started, finished) = (started.clone(), finished.clone());
            async move {
                started.lock().unwrap().insert(msg.id);
                tokio::time::sleep(Duration::from_millis(1500)).await;
                finished.lock().unwrap().insert(msg.id);
                Outcome::Ack
            }
        }
    };
    let consumer = Consumer::new(client, "slow")
        .concurrency(4)
        .poll_timeout(Duration::from_secs(1));
    let consumer = Running::start(consumer, handler);
    let every = Duration::from_millis(10);
    wait_every(
        "4 handlers to start",
        Duration::from_secs(30),
        every,
        || async { (started.lock().unwrap().len() >= 4).then_some(()) },
    )
    .await;
    assert!(finished.lock().unwrap().is_empty());
    let stats = consumer.stop().await;

    // Every handler started ran to its end and its ack was committed before
    // the consumer returned; the rest were never handed out.
    let (started, finished) = (
        started.lock().unwrap().clone(),
        finished.lock().unwrap().clone(),
    );
    assert_eq!(started, finished);
    assert_eq!(stats.received, started.len() as u64);
    assert_eq!((stats.acked, stats.unsettled), (started.len() as u64, 0));
    for id in &ids {
        let row = env.journal.row(&id.to_string()).unwrap();
        if started.contains(id) {
            assert_eq!(row.status, status::CONSUMED, "{id}");
        } else {
            assert_ne!(row.status, status::CONSUMING, "{id} was left in flight");
        }
    }
}

/// An address that takes connections and never answers (a frozen node: its
/// kernel still accepts them) costs a bounded wait, and the client moves on
/// to its next address: a push is answered "timed out" after the client's
/// timeout, and a consumer whose first poll went there receives the
/// message from the next address once that poll's timeout + 3 s passed.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_moves_on_from_an_address_that_does_not_answer() {
    let env = Env::start(Backend::Sqlite).await;
    // Listening, never accepting nor reading: requests are never answered.
    let frozen = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let frozen_url = format!("http://{}", frozen.local_addr().unwrap());
    let build = || {
        Client::builder(&frozen_url)
            .also(&env.url(""))
            .timeout(Duration::from_secs(1))
            .build()
            .unwrap()
    };

    let client = build();
    let began = Instant::now();
    let err = client
        .push(&NewMessage::new("moves", "first"))
        .await
        .expect_err("the frozen address answered");
    assert!(
        matches!(
            err,
            Error::Http {
                what: "timed out",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        began.elapsed() < Duration::from_secs(3),
        "the push waited {:?}",
        began.elapsed()
    );
    assert_eq!(client.url(), env.url(""), "the client did not move on");
    let id = client
        .push(&NewMessage::new("moves", "second"))
        .await
        .expect("the next address takes the push")
        .id;

    let seen: Seen = Arc::default();
    let handler = {
        let seen = seen.clone();
        move |msg: MessageView| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().entry(msg.id).or_default().push(msg);
                Outcome::Ack
            }
        }
    };
    let began = Instant::now();
    let consumer = Consumer::new(build(), "moves")
        .poll_timeout(Duration::from_secs(1))
        .backoff(Duration::from_millis(50), Duration::from_secs(1));
    let consumer = Running::start(consumer, handler);
    wait_seen(&seen, "the message handled", |s| s.contains_key(&id)).await;
    let waited = began.elapsed();
    let stats = consumer.stop().await;
    assert_eq!(stats.errors, 1, "one poll timed out: {stats:?}");
    assert!(
        waited < Duration::from_secs(9),
        "the consumer waited {waited:?} for the frozen address"
    );
    env.wait_status(&id.to_string(), status::CONSUMED).await;
}

/// Kills the child process when dropped (a panicking test leaves nothing
/// running).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The README's consumer in Python (its standard library only), run as
/// written against a server: it receives what is pushed and acks it.
#[tokio::test(flavor = "multi_thread")]
async fn the_readmes_python_consumer_receives_and_acks() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let code = readme
        .split("```python\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("a Python block in the README");
    assert!(
        code.contains("http://127.0.0.1:7070"),
        "the block names no server"
    );
    let env = Env::start(Backend::Sqlite).await;
    let code = code.replace("http://127.0.0.1:7070", &env.url(""));
    let ids = push_n(&client(&env), "sms", 5, Duration::from_millis(300)).await;
    let out = tempfile::NamedTempFile::new().unwrap();
    let child = std::process::Command::new("python3")
        .arg("-c")
        .arg(&code)
        .env("PYTHONUNBUFFERED", "1")
        .stdout(out.reopen().unwrap())
        .spawn()
        .expect("python3 runs");
    let _child = KillOnDrop(child);
    for id in &ids {
        env.wait_status(&id.to_string(), status::CONSUMED).await;
    }
    let printed = std::fs::read_to_string(out.path()).unwrap();
    for id in &ids {
        assert!(
            printed.contains(&id.to_string()),
            "{id} not printed: {printed}"
        );
    }
}

//! The journal: a push is durable when it is answered, and every status
//! change leaves a flow row (visible in `GET /messages/{id}` and in the
//! `message_flow` table).

use std::time::Duration;

use crate::common::{now_ms, status, wait_until, Backend, Env};
use serde_json::{json, Value};

backend_tests!(
    push_is_durable_when_answered,
    batch_is_durable_when_answered,
    flow_rows_for_every_transition,
    flow_order_for_messages_due_at_once
);

async fn push_is_durable_when_answered(b: Backend) {
    let env = Env::start(b).await;
    let before = now_ms();
    let id = env
        .push(json!({"topic": "dur", "bizKey": "k1", "body": "{\"order\": 17}", "delay": 5000, "priority": 9, "ttl": 1234}))
        .await;
    let after = now_ms();
    // Read at once, no waiting: the row must be there.
    let row = env
        .journal
        .row(&id)
        .expect("no journal row right after the push was answered");
    assert_eq!(row.topic, "dur");
    assert_eq!(row.biz_key.as_deref(), Some("k1"));
    assert_eq!(row.body, "{\"order\": 17}");
    assert_eq!((row.priority, row.ttl, row.delay_ms), (9, 1234, 5000));
    assert!(
        (before..=after).contains(&row.create_time),
        "create_time {} not in [{before}, {after}]",
        row.create_time
    );
    assert_eq!(row.due_time, row.create_time + 5000);
    assert!(row.status <= status::DELAYING, "status {}", row.status);
    assert!(!env.journal.history(&id).is_empty(), "no WaitPut flow row");

    let view = env.message(&id).await;
    let m = &view["message"];
    assert_eq!(
        (
            m["id"].as_str(),
            m["dueTime"].as_i64(),
            m["priority"].as_i64()
        ),
        (Some(id.as_str()), Some(row.due_time), Some(9))
    );
}

async fn batch_is_durable_when_answered(b: Backend) {
    let env = Env::start(b).await;
    let messages: Vec<Value> = (0..50)
        .map(|i| json!({"topic": format!("batch{}", i % 3), "body": format!("body-{i}"), "delay": 10_000 + i, "priority": i % 7, "ttl": 1000 + i}))
        .collect();
    let ids = env.push_batch(messages.clone()).await;
    assert_eq!(ids.len(), 50);
    let mut conn_rows = Vec::new();
    for id in &ids {
        conn_rows.push(
            env.journal
                .row(id)
                .unwrap_or_else(|| panic!("{id} not durable when the batch was answered")),
        );
    }
    for (i, (row, sent)) in conn_rows.iter().zip(&messages).enumerate() {
        assert_eq!(row.id.to_string(), ids[i]);
        assert_eq!(row.topic, sent["topic"].as_str().unwrap());
        assert_eq!(row.body, sent["body"].as_str().unwrap());
        assert_eq!(row.priority as i64, sent["priority"].as_i64().unwrap());
        assert_eq!(row.ttl, sent["ttl"].as_i64().unwrap());
        assert_eq!(
            row.due_time,
            row.create_time + sent["delay"].as_i64().unwrap()
        );
    }
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 50, "ids must be distinct");

    // Bodies of 9 MB in all: written in more than one statement (at most
    // 8 MiB of bodies each), every byte as sent.
    let big: Vec<Value> = (0..10)
        .map(|i| {
            let body = format!("{i}\u{e9}\"'\\{}", "x".repeat(900_000 + i));
            json!({"topic": "big", "bizKey": format!("big-{i}"), "body": body, "delay": 60_000})
        })
        .collect();
    let ids = env.push_batch(big.clone()).await;
    assert_eq!(ids.len(), 10);
    for (id, sent) in ids.iter().zip(&big) {
        let row = env
            .journal
            .row(id)
            .expect("a big message durable when answered");
        assert_eq!(row.body, sent["body"].as_str().unwrap());
        assert_eq!(row.biz_key.as_deref(), sent["bizKey"].as_str());
    }
}

/// Checks every history entry names where the change happened.
fn assert_flow_details(doc: &Value) {
    for h in doc["history"].as_array().unwrap() {
        for field in ["shard", "nodeId", "host"] {
            assert!(
                h[field].as_str().is_some_and(|s| !s.is_empty()),
                "empty {field} in {h}"
            );
        }
        assert!(h["time"].as_i64().is_some_and(|t| t > 0), "{h}");
    }
}

async fn flow_rows_for_every_transition(b: Backend) {
    let env = Env::start(b).await;

    // push → consume → ack
    let id = env
        .push(json!({"topic": "flow", "body": "x", "delay": 200}))
        .await;
    assert_eq!(env.receive_one("flow").await.id(), id);
    env.ack(&id).await.assert_ok();
    let doc = env
        .wait_history(
            &id,
            &["WaitPut", "Delaying", "Ready", "Consuming", "Consumed"],
        )
        .await;
    assert_flow_details(&doc);
    assert_eq!(
        (
            doc["message"]["status"].as_str(),
            doc["message"]["attempts"].as_i64()
        ),
        (Some("Consumed"), Some(1))
    );
    let rows = env.journal.history(&id);
    let codes: Vec<i16> = rows.iter().map(|f| f.status).collect();
    assert_eq!(
        codes,
        [
            status::WAIT_PUT,
            status::DELAYING,
            status::READY,
            status::CONSUMING,
            status::CONSUMED
        ]
    );
    assert!(rows.iter().all(|f| f.message_id.to_string() == id
        && f.node_id == "test-node-1"
        && !f.host.is_empty()));
    assert!(
        rows.windows(2).all(|w| w[0].flow_time <= w[1].flow_time),
        "flow times go back: {rows:?}"
    );

    // cancelled
    let cancelled = env
        .push(json!({"topic": "flow", "body": "c", "delay": 60_000}))
        .await;
    env.delete(&cancelled).await.assert_ok();
    let doc = env
        .wait_history(&cancelled, &["WaitPut", "Delaying", "Deleted"])
        .await;
    assert_flow_details(&doc);
    assert_eq!(
        env.journal.flow_codes(&cancelled),
        [status::WAIT_PUT, status::DELAYING, status::DELETED]
    );

    // redelivered after its ack deadline
    let again = env
        .push(json!({"topic": "flow2", "body": "r", "ttl": 300}))
        .await;
    assert_eq!(env.receive_one("flow2").await.id(), again);
    let second = env.receive_one("flow2").await;
    assert_eq!(
        (second.id(), second.msg["attempts"].as_i64()),
        (again.as_str(), Some(2))
    );
    env.ack(&again).await.assert_ok();
    let doc = env
        .wait_history(
            &again,
            &[
                "WaitPut",
                "Delaying",
                "Ready",
                "Consuming",
                "Ready",
                "Consuming",
                "Consumed",
            ],
        )
        .await;
    assert_flow_details(&doc);
    let consuming: Vec<i64> = doc["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["status"] == "Consuming")
        .map(|h| h["attempts"].as_i64().unwrap())
        .collect();
    assert_eq!(consuming, [1, 2]);
    let row = env.journal.row(&again).unwrap();
    assert_eq!((row.status, row.attempts), (status::CONSUMED, 2));
}

async fn flow_order_for_messages_due_at_once(b: Backend) {
    let env = Env::start(b).await;
    let messages: Vec<Value> = (0..200)
        .map(|i| json!({"topic": "now", "body": format!("{i}")}))
        .collect();
    let ids = env.push_batch(messages).await;
    let got = env
        .collect("now", ids.len(), std::time::Duration::from_secs(15))
        .await;
    assert_eq!(got.len(), ids.len());
    for r in &got {
        env.ack(r.id()).await.assert_ok();
    }
    // An ack is answered once Redis applied it; its Consumed row follows
    // in the journal's next batch. Wait for every message's five rows,
    // then check their order.
    let all = wait_until(
        "every message's five flow rows",
        Duration::from_secs(15),
        || async {
            let codes: Vec<(String, Vec<i16>)> = ids
                .iter()
                .map(|id| (id.clone(), env.journal.flow_codes(id)))
                .collect();
            let short = codes.iter().filter(|(_, c)| c.len() < 5).count();
            if short == 0 {
                Ok(codes)
            } else {
                Err(format!("{short} of {} have fewer", ids.len()))
            }
        },
    )
    .await;
    let bad: Vec<_> = all.iter().filter(|(_, c)| c != &[0, 1, 2, 3, 4]).collect();
    assert!(
        bad.is_empty(),
        "{} of {} messages have flow rows out of order, e.g. {:?}",
        bad.len(),
        ids.len(),
        &bad[..bad.len().min(3)]
    );
}

/// On PostgreSQL, a push whose bizKey another writer commits between the
/// push's check and its insert, and whose holder is then cancelled before
/// the push reads it, takes the key: the refused insert is tried again, not
/// answered as a refusal. Each step is held by a database lock, so the
/// interleaving is the same on every run:
///
/// 1. W holds a new row of key `k0` uncommitted; the push P (`k0`, `k`)
///    finds neither key live and waits on W at its insert of `k0`.
/// 2. Meanwhile a message H takes `k` and commits; L locks H (FOR SHARE)
///    and the cancel C of H waits on L.
/// 3. W rolls back: P's insert of `k` is refused by H, and P's read of H's
///    holder queues behind C. L commits, C ends H (freeing `k`) and
///    commits, and P's read finds no holder.
#[test]
fn postgres_push_whose_key_holder_ends_before_it_is_read() {
    use std::sync::Arc;

    use delayq::journal::connection::JournalConn;
    use delayq::journal::models::NewMessage;
    use delayq::journal::schema::message;
    use delayq::journal::store::{self, InsertOutcome, NodeInfo};
    use delayq::message::{IdGenerator, Message, MessageId};
    use diesel::connection::SimpleConnection;
    use diesel::dsl::sql;
    use diesel::prelude::*;
    use diesel::sql_types::{BigInt, Integer};

    use crate::common::Journal;

    let dir = tempfile::tempdir().expect("tempdir");
    let journal = Journal::create(Backend::Postgres, dir.path());
    journal.conn().run_migrations().expect("migrate");
    let pg = || PgConnection::establish(&journal.url).expect("connect to PostgreSQL");
    let ids = Arc::new(IdGenerator::new(7));
    let now = now_ms();
    let msg = |key: &str| Message {
        id: ids.next_id().expect("an id"),
        topic: "t".into(),
        biz_key: Some(key.into()),
        group: None,
        body: key.into(),
        priority: 0,
        ttl: 30_000,
        delay: 600_000,
        create_time: now,
        due_time: now + 600_000,
        max_attempts: 16,
        retry: None,
        repeat: None,
        occurrence: None,
    };
    let blocked_on = |monitor: &mut PgConnection, pid: i32, event: &str| {
        let query = format!(
            "(SELECT count(*) FROM pg_stat_activity WHERE pid = {pid} \
             AND wait_event_type = 'Lock' AND wait_event = '{event}')"
        );
        let began = std::time::Instant::now();
        while diesel::select(sql::<BigInt>(&query))
            .get_result::<i64>(monitor)
            .expect("pg_stat_activity")
            == 0
        {
            assert!(
                began.elapsed() < Duration::from_secs(10),
                "session {pid} never waited on a {event} lock"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let mut monitor = pg();

    // 1. W holds k0; P waits on it.
    let mut w = pg();
    w.batch_execute("BEGIN").unwrap();
    let held = msg("k0");
    diesel::insert_into(message::table)
        .values(NewMessage::waiting(&held))
        .execute(&mut w)
        .expect("W's row");
    let mut p_conn = pg();
    let p_pid: i32 = diesel::select(sql::<Integer>("pg_backend_pid()"))
        .get_result(&mut p_conn)
        .unwrap();
    let pushed = vec![msg("k0"), msg("k")];
    let push = {
        let (ids, pushed) = (ids.clone(), pushed.clone());
        std::thread::spawn(move || {
            let node = NodeInfo {
                node_id: "n".into(),
                host: "h".into(),
            };
            let shard = |_: MessageId| Arc::<str>::from("shard");
            store::insert_messages(
                &mut JournalConn::Postgres(p_conn),
                &ids,
                &node,
                &shard,
                &pushed,
                &[false, false],
                None,
            )
        })
    };
    blocked_on(&mut monitor, p_pid, "transactionid");

    // 2. H takes k; L locks H; C's cancel of H waits on L.
    let holder = msg("k");
    diesel::insert_into(message::table)
        .values(NewMessage::waiting(&holder))
        .execute(&mut pg())
        .expect("H");
    let mut l = pg();
    l.batch_execute(&format!(
        "BEGIN; SELECT id FROM message WHERE id = {} FOR SHARE",
        holder.id.0
    ))
    .unwrap();
    let mut c_conn = pg();
    let c_pid: i32 = diesel::select(sql::<Integer>("pg_backend_pid()"))
        .get_result(&mut c_conn)
        .unwrap();
    let cancel = {
        let id = holder.id.0;
        std::thread::spawn(move || {
            c_conn
                .batch_execute(&format!(
                    "BEGIN; UPDATE message SET status = 5, live_biz_key = NULL WHERE id = {id}; COMMIT"
                ))
                .expect("C's cancel")
        })
    };
    blocked_on(&mut monitor, c_pid, "transactionid");

    // 3. W gives k0 up; P is refused k and queues behind C to read H.
    w.batch_execute("ROLLBACK").unwrap();
    blocked_on(&mut monitor, p_pid, "tuple");
    l.batch_execute("COMMIT").unwrap();
    cancel.join().expect("cancel thread");

    let outcomes = push
        .join()
        .expect("push thread")
        .expect("the push takes the freed key");
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, InsertOutcome::Inserted)),
        "{outcomes:?}"
    );
    let live: Vec<(String, i64)> = message::table
        .filter(message::live_biz_key.is_not_null())
        .select((message::biz_key.assume_not_null(), message::id))
        .order(message::biz_key)
        .load(&mut pg())
        .unwrap();
    assert_eq!(
        live,
        vec![("k".into(), pushed[1].id.0), ("k0".into(), pushed[0].id.0)]
    );
}

/// Two writers (two nodes' journals) commit batches of status changes over
/// the same 200 messages at once, each batch in two groups that take the
/// rows in the other order: the rows are locked in id order first, so
/// neither waits for the other in a circle (red without it: PostgreSQL and
/// MariaDB answered "deadlock detected" within a few rounds, and the
/// journal fell seconds behind in the fault checker).
#[test]
fn concurrent_batches_over_the_same_rows_never_deadlock() {
    for b in [Backend::Postgres, Backend::Mariadb] {
        batches_over_the_same_rows(b);
    }
}

fn batches_over_the_same_rows(b: Backend) {
    use std::sync::Arc;

    use delayq::journal::store::{self, NodeInfo, StatusChange};
    use delayq::message::{IdGenerator, Message, MessageId};

    use crate::common::Journal;

    let dir = tempfile::tempdir().expect("tempdir");
    let journal = Arc::new(Journal::create(b, dir.path()));
    journal.conn().run_migrations().expect("migrate");
    let ids = Arc::new(IdGenerator::new(9));
    let node = NodeInfo {
        node_id: "n".into(),
        host: "h".into(),
    };
    let now = now_ms();
    let msgs: Vec<Message> = (0..200)
        .map(|i| Message {
            id: ids.next_id().expect("an id"),
            topic: "t".into(),
            biz_key: None,
            group: None,
            body: format!("m{i}"),
            priority: 0,
            ttl: 30_000,
            delay: 0,
            create_time: now,
            due_time: now,
            max_attempts: 1_000,
            retry: None,
            repeat: None,
            occurrence: None,
        })
        .collect();
    let shard = |_: MessageId| Arc::<str>::from("shard");
    store::insert_messages(
        &mut journal.conn(),
        &ids,
        &node,
        &shard,
        &msgs,
        &vec![false; msgs.len()],
        None,
    )
    .expect("the messages");
    let all: Arc<Vec<MessageId>> = Arc::new(msgs.iter().map(|m| m.id).collect());
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (journal, ids, all) = (journal.clone(), ids.clone(), all.clone());
            std::thread::spawn(move || {
                let node = NodeInfo {
                    node_id: format!("n{w}"),
                    host: "h".into(),
                };
                let mut conn = journal.conn();
                for round in 0..30 {
                    let at = now + 1 + round;
                    let s: Arc<str> = "shard".into();
                    // Writer 0: the first half handed out, the second
                    // half promoted; writer 1 the other way round.
                    let changes: Vec<StatusChange> = all
                        .iter()
                        .enumerate()
                        .map(|(i, &id)| {
                            if (i < 100) == (w == 0) {
                                StatusChange::handed_out(id, round as i32 + 1, at, s.clone())
                            } else {
                                StatusChange::promoted(id, at, s.clone())
                            }
                        })
                        .collect();
                    store::apply_changes(&mut conn, &ids, &node, &changes)
                        .unwrap_or_else(|e| panic!("{b:?} writer {w}, round {round}: {e}"));
                }
            })
        })
        .collect();
    for t in writers {
        t.join().expect("a writer");
    }
}

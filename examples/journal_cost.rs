//! What a status change costs the journal, alone: the CPU time of the thread
//! that writes them, per change, on a real database.
//!
//!   cargo run --release --example journal_cost -- [DATABASE_URL] [MESSAGES]
//!
//! DATABASE_URL defaults to a SQLite file in a fresh temporary directory; a
//! `mysql://…/DB` URL must name an empty database the example may fill.
//! MESSAGES (default 20,000) are inserted as pushes insert them (batches of
//! 500), then live through the changes of a burst as the node writes them,
//! in batches of up to 2,000: Delaying (scheduled), Ready (promoted), then
//! per poll of 100 their Consuming and, a poll later, their Consumed.
//! Prints one JSON line: per phase, changes, CPU µs per change, wall ms.

use std::sync::Arc;
use std::time::Instant;

use delayq::journal::connection::{JournalConn, JournalUrl};
use delayq::journal::store::{apply_changes, insert_messages};
use delayq::journal::{NodeInfo, StatusChange};
use delayq::message::{now_ms, IdGenerator, Message};

fn thread_cpu_us() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a timespec the call fills in.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e6 + ts.tv_nsec as f64 / 1e3
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = args
        .next()
        .unwrap_or_else(|| format!("sqlite://{}/journal.db", dir.path().display()));
    let count: usize = args.next().map_or(20_000, |n| n.parse().expect("MESSAGES"));
    let mut conn =
        JournalConn::establish(&JournalUrl::parse(&url).expect("DATABASE_URL")).expect("connect");
    conn.run_migrations().expect("migrations");
    let ids = IdGenerator::new(1);
    let node = NodeInfo {
        node_id: "journal-cost".into(),
        host: "localhost".into(),
    };
    let shard: Arc<str> = "dq:{0}:inflight".into();
    let names = |_| shard.clone();
    let now = now_ms();
    let messages: Vec<Message> = (0..count)
        .map(|i| Message {
            id: ids.next_id().expect("an id"),
            topic: "cost".into(),
            biz_key: None,
            group: None,
            body: format!("{i:0100}"),
            priority: 0,
            ttl: 30_000,
            delay: 1_000,
            create_time: now,
            due_time: now + 1_000,
            max_attempts: 16,
            retry: None,
            repeat: None,
            occurrence: None,
        })
        .collect();

    let mut phases = Vec::new();
    let mut phase = |name: &str, n: usize, run: &mut dyn FnMut()| {
        let (cpu, wall) = (thread_cpu_us(), Instant::now());
        run();
        let us = (thread_cpu_us() - cpu) / n as f64;
        phases.push(format!(
            "\"{name}\":{{\"rows\":{n},\"cpu_us_each\":{us:.2},\"wall_ms\":{}}}",
            wall.elapsed().as_millis()
        ));
    };
    phase("insert", count, &mut || {
        for chunk in messages.chunks(500) {
            insert_messages(&mut conn, &ids, &node, &names, chunk, &[], None).expect("insert");
        }
    });
    let at = now + 1;
    let scheduled: Vec<StatusChange> = messages
        .iter()
        .map(|m| StatusChange::scheduled(m.id, at, shard.clone()))
        .collect();
    let promoted: Vec<StatusChange> = messages
        .iter()
        .map(|m| StatusChange::promoted(m.id, at + 1000, shard.clone()))
        .collect();
    // A burst: each poll of 100 hands its messages out and acks the previous poll's.
    let mut burst = Vec::with_capacity(2 * count);
    let polls: Vec<&[Message]> = messages.chunks(100).collect();
    for (p, poll) in polls.iter().enumerate() {
        let t = at + 1000 + p as i64;
        burst.extend(
            poll.iter()
                .map(|m| StatusChange::handed_out(m.id, 1, t, shard.clone())),
        );
        if p > 0 {
            burst.extend(
                polls[p - 1]
                    .iter()
                    .map(|m| StatusChange::consumed(m.id, 1, t, shard.clone())),
            );
        }
    }
    if let Some(last) = polls.last() {
        let t = at + 1000 + polls.len() as i64;
        burst.extend(
            last.iter()
                .map(|m| StatusChange::consumed(m.id, 1, t, shard.clone())),
        );
    }
    for (name, changes) in [
        ("delaying", &scheduled),
        ("ready", &promoted),
        ("consuming_consumed", &burst),
    ] {
        phase(name, changes.len(), &mut || {
            for batch in changes.chunks(2000) {
                apply_changes(&mut conn, &ids, &node, batch).expect("changes");
            }
        });
    }
    println!("{{{}}}", phases.join(","));
}

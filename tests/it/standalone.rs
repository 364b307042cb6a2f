//! Standalone nodes sharing a Redis and a journal: one node per key prefix,
//! and worker ids that never collide with a tool run beside it.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{wait_every, Backend, Env, SHARDS};
use serde_json::json;

fn worker_of(id: i64) -> i64 {
    (id >> 12) & 1023
}

async fn a_second_standalone_node_is_refused(b: Backend) {
    let env = Env::start(b).await;
    let id = env
        .push(json!({"topic": "solo", "body": "x", "delay": 0}))
        .await;
    let log = env.dir.path().join("second.log");
    let mut second = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .arg("serve")
        .args([
            "--bind",
            &format!("127.0.0.1:{}", crate::common::free_port()),
        ])
        .args(["--redis-url", &env.config.redis_url])
        .args(["--database-url", &env.config.database_url])
        .args(["--key-prefix", &env.config.key_prefix])
        .args(["--shards", &SHARDS.to_string()])
        .args(["--node-id", "intruder"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // It waits for the first node's lease to lapse, then gives up.
    // Meanwhile the first node serves as before.
    let what = "the second standalone node to give up";
    let every = Duration::from_millis(500);
    let status = wait_every(what, Duration::from_secs(40), every, || {
        std::future::ready(second.try_wait().unwrap())
    })
    .await;
    assert!(!status.success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("another standalone delayq node ('test-node-1')"),
        "unclear refusal:\n{text}"
    );
    // The first node still scans and delivers.
    assert_eq!(env.receive_one("solo").await.id(), id);
    let late = env
        .push(json!({"topic": "solo", "body": "y", "delay": 200}))
        .await;
    assert_eq!(env.receive_one("solo").await.id(), late);
}

async fn a_restore_beside_a_node_uses_its_own_worker_id(b: Backend) {
    let env = Env::start(b).await;
    let mut pushed = Vec::new();
    for i in 0..5 {
        pushed.push(
            env.push(json!({"topic": "wk", "body": format!("m{i}"), "delay": 60_000}))
                .await,
        );
    }
    for id in &pushed {
        env.wait_scheduled(id).await;
    }
    let node_worker = worker_of(pushed[0].parse().unwrap());
    env.redis.wipe_schedule(&env.keys);
    let out = env.run_tool(&["restore", "--node-id", "restorer"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The restore's flow rows carry ids of a worker the node does not hold.
    let rows: Vec<i64> = pushed
        .iter()
        .flat_map(|id| env.journal.history(id))
        .filter(|f| f.node_id == "restorer")
        .map(|f| f.id)
        .collect();
    assert_eq!(
        rows.len(),
        pushed.len(),
        "one Delaying row per restored message"
    );
    for r in rows {
        assert_ne!(worker_of(r), node_worker);
        assert!(
            (1008..=1023).contains(&worker_of(r)),
            "worker {}",
            worker_of(r)
        );
    }
    // Ids keep flowing from the node.
    let again = env.push(json!({"topic": "wk", "body": "after"})).await;
    assert_eq!(worker_of(again.parse().unwrap()), node_worker);
}

/// The thread that journals the status changes no caller waits for runs at
/// `--journal-nice` (10 by default); the rest of the node keeps its priority.
async fn background_journal_writes_run_at_a_lower_priority(b: Backend) {
    let env = Env::start(b).await;
    let pid = env.server.pid().expect("node running");
    let mut seen = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let path = task.unwrap().path();
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        // pid (comm) state ... : fields after the comm's closing parenthesis;
        // nice is the 19th field of the line, the 17th after the comm.
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let comm = head
            .split_once('(')
            .map(|(_, c)| c.to_string())
            .unwrap_or_default();
        let nice: i32 = rest.split_whitespace().nth(16).unwrap().parse().unwrap();
        seen.push((comm, nice));
    }
    // The node may have been started niced itself: compare with its own.
    let own: i32 = {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let rest = stat.rsplit_once(')').unwrap().1;
        rest.split_whitespace().nth(16).unwrap().parse().unwrap()
    };
    let changes: Vec<_> = seen
        .iter()
        .filter(|(c, _)| c == "journal-changes")
        .collect();
    assert_eq!(changes.len(), 1, "{seen:?}");
    assert_eq!(changes[0].1, own.max(10), "{seen:?}");
    assert!(
        seen.iter()
            .filter(|(c, _)| c != "journal-changes")
            .all(|(_, n)| *n == own),
        "{seen:?}"
    );
    // It still writes: a delivery and its ack reach the journal.
    let id = env.push(json!({"topic": "nice", "body": "x"})).await;
    assert_eq!(env.receive_one("nice").await.id(), id);
    env.ack(&id).await.assert_ok();
    env.wait_status(&id, crate::common::status::CONSUMED).await;
}

backend_tests!(
    a_second_standalone_node_is_refused,
    a_restore_beside_a_node_uses_its_own_worker_id,
    background_journal_writes_run_at_a_lower_priority
);

/// SIGTERM while a long poll waits: the poll answers `{"messages": []}` at
/// once (not a connection cut after the server's grace period), and the
/// node exits soon after.
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_answers_waiting_polls_at_once() {
    let mut env = Env::start(Backend::Sqlite).await;
    let (http, url) = (env.http.clone(), env.url("/get/quiet?timeout=20"));
    let poll = tokio::spawn(async move {
        let r = http
            .get(url)
            .send()
            .await
            .expect("an answer, not a cut connection");
        let status = r.status().as_u16();
        let body: serde_json::Value = r.json().await.expect("a JSON answer");
        (status, body)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let began = std::time::Instant::now();
    env.server.signal("TERM");
    let (status, body) = tokio::time::timeout(Duration::from_secs(3), poll)
        .await
        .expect("the waiting poll answered within 3 s of SIGTERM")
        .unwrap();
    assert_eq!((status, body), (200, json!({"messages": []})));
    let exit = tokio::task::block_in_place(|| env.server.stop());
    assert!(exit.is_some_and(|s| s.success()), "{exit:?}");
    assert!(
        began.elapsed() < Duration::from_secs(4),
        "the node took {:?} to exit",
        began.elapsed()
    );
}

/// SIGTERM the moment the node first answers: a graceful stop (exit 0),
/// never the process killed by the signal's default action. Seen red with
/// the signals caught only once the stop task first ran, after the node
/// listened ("exited with signal: 15 (SIGTERM)").
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_signal_as_soon_as_the_node_answers_is_graceful() {
    for _ in 0..3 {
        let mut env = Env::start(Backend::Sqlite).await;
        let exit = tokio::task::block_in_place(|| env.server.stop());
        assert!(
            exit.is_some_and(|s| s.success()),
            "{exit:?}:\n{}",
            env.server.log_tail(20)
        );
    }
}

/// A clean stop on a network journal exits 0 however soon it comes, 40
/// times over. libpq and the MySQL client link OpenSSL, whose exit handler
/// frees its tables; a journal pool's thread still opening a connection
/// then crashed the process ("exited with signal: 11 (SIGSEGV)", 3 stops
/// in 20 on PostgreSQL over TLS). Seen red with the process ended by a
/// return from `main`.
async fn stops_exit_cleanly_again_and_again(b: Backend) {
    let mut env = Env::start(b).await;
    for _ in 0..40 {
        tokio::task::block_in_place(|| env.stop_server());
        env.start_server().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn stops_exit_cleanly_again_and_again_on_postgres() {
    stops_exit_cleanly_again_and_again(Backend::Postgres).await
}

#[tokio::test(flavor = "multi_thread")]
async fn stops_exit_cleanly_again_and_again_on_mariadb() {
    stops_exit_cleanly_again_and_again(Backend::Mariadb).await
}

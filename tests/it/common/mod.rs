//! Fixtures for the end-to-end tests: every test starts its own redis-server,
//! its own journal database (SQLite file or MariaDB database) and its own
//! delayq server process, and tears them all down when it ends.
//!
//! - [`Backend`] picks the journal; [`backend_tests!`] runs a test on both.
//! - [`Redis`] (`redis_server.rs`) is a private `redis-server` child process
//!   on a free port.
//! - [`Journal`] (`journal.rs`) is the journal database, with direct
//!   (diesel) reads.
//! - [`Server`] (`server.rs`) is a `delayq serve` child process.
//! - [`Env`] (`env.rs`) ties them together, runs the command-line tools on
//!   them and waits for the server; its HTTP helpers are in `http.rs`.
//! - [`wait_until`] (`wait.rs`) waits, with a deadline, for any condition.
//! - `cluster`, `brokers`, `mariadb`, `tls`, `webhook`, `proxy`, `browser`:
//!   ZooKeeper ensembles and nginx, RabbitMQ and NATS, a private MariaDB,
//!   certificates, a webhook receiver, a TCP proxy and Chromium.
//!
//! Nothing here mocks anything: the server talks to a real Redis and a real
//! database, and the tests look into both to check what the server did.

#![allow(dead_code)]

pub mod brokers;
pub mod browser;
pub mod cluster;
pub mod env;
pub mod http;
pub mod journal;
pub mod mariadb;
pub mod proxy;
pub mod redis_cluster;
pub mod redis_server;
pub mod server;
pub mod tls;
pub mod wait;
pub mod webhook;

use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

pub use env::{Env, EnvBuilder};
pub use http::{id_of, Received, Reply};
pub use journal::{parse_id, status, Backend, Journal};
pub use redis_cluster::RedisCluster;
pub use redis_server::{Redis, Snapshot};
pub use server::{Server, ServerConfig};
pub use wait::{wait_every, wait_every_blocking, wait_until};

/// Shards every test server runs with.
pub const SHARDS: u32 = 4;
/// Tries at starting a process on a free port before giving up.
const START_ATTEMPTS: usize = 5;

/// Runs each named `async fn NAME(b: Backend)` once per journal backend:
/// `NAME::sqlite`, `NAME::mariadb` and `NAME::postgres`. Attributes written before a name
/// (e.g. `#[ignore = "..."]`) apply to both.
#[allow(unused_macros)]
macro_rules! backend_tests {
    ($($(#[$attr:meta])* $name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])*
            async fn sqlite() {
                super::$name($crate::common::Backend::Sqlite).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])*
            async fn mariadb() {
                super::$name($crate::common::Backend::Mariadb).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])*
            async fn postgres() {
                super::$name($crate::common::Backend::Postgres).await
            }
        }
    )*};
}

/// How far ahead of this host's clock the server's estimate of Redis's
/// clock may run: a reading's round trip counts as if Redis answered at
/// once (so a due time computed from it is late on no master, never
/// early), and on a loaded machine a round trip takes tens of ms.
pub const CLOCK_LEAD_MS: i64 = 250;

/// Epoch milliseconds, as the server counts them.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Asserts that deliveries (their lateness in ms past their due times)
/// were woken when due, not found by a look once a second: none early, and
/// at least `need` of them within 250 ms. A look once a second finds each
/// within 250 ms one time in four, so `need` of them by chance is rare
/// (under 1 % for 6 of 8 or 5 of 6), as long as the deliveries do not keep
/// step with the look (space them by [`jitter_ms`]); a loaded machine
/// makes one or two woken deliveries late, not most.
#[track_caller]
pub fn assert_woken(lateness: &[i64], need: usize, what: &str) {
    assert!(
        lateness.iter().all(|l| *l >= 0),
        "{what}: early: {lateness:?}"
    );
    let prompt = lateness.iter().filter(|l| **l < 250).count();
    assert!(
        prompt >= need,
        "{what}: {prompt} of {} within 250 ms of their due time (at least {need} expected): {lateness:?}",
        lateness.len()
    );
}

/// A random number of milliseconds below `max`.
pub fn jitter_ms(max: u64) -> u64 {
    u64::from_str_radix(&random_hex(12), 16).expect("hex") % max
}

/// A random lowercase hex string of `n` characters (n ≤ 32).
pub fn random_hex(n: usize) -> String {
    uuid::Uuid::new_v4().simple().to_string()[..n].to_string()
}

/// A free TCP port on 127.0.0.1 (free when asked; callers retry on a clash).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral port")
        .local_addr()
        .unwrap()
        .port()
}

/// Where ports are reserved, shared with `cluster/zk` (which picks its
/// ensembles' ports the same way).
const PORT_RESERVATIONS: &str = "delayq-zk-ports";

/// A free loopback port for a service the test stops and starts again on
/// the same port. It lies below the kernel's ephemeral range (32768 and
/// up), so no outgoing connection or port-0 listener of another process
/// takes it while the service is down, and it is reserved (a file named
/// after it, claimed atomically, holding this process's id) for as long as
/// this test runs, so no other test takes it while the service is down,
/// however long the run.
pub fn reserved_port() -> u16 {
    let dir = std::env::temp_dir().join(PORT_RESERVATIONS);
    std::fs::create_dir_all(&dir).unwrap();
    for _ in 0..500 {
        let port = 10_000 + (u32::from_str_radix(&random_hex(6), 16).unwrap() % 22_000) as u16;
        let file = dir.join(port.to_string());
        // Stale: its owner is gone, or it is older than 6 hours, or it
        // names no owner (a claim being written) and is older than 10
        // minutes.
        let age = std::fs::metadata(&file)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok());
        let owner: Option<u32> = std::fs::read_to_string(&file)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        let older = |secs| age.is_some_and(|a| a > Duration::from_secs(secs));
        let stale = older(6 * 3600)
            || match owner {
                Some(pid) => !Path::new(&format!("/proc/{pid}")).exists(),
                None => older(600),
            };
        if stale {
            let _ = std::fs::remove_file(&file);
        }
        let claimed = std::fs::File::options()
            .write(true)
            .create_new(true)
            .open(&file)
            .is_ok();
        if claimed && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            let _ = std::fs::write(&file, std::process::id().to_string());
            return port;
        }
    }
    panic!("no free port found between 10000 and 31999");
}

/// The last `lines` lines of a log file, for failure reports.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| format!("<cannot read {}: {e}>", path.display()));
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Sleeps until the wall clock reaches `epoch_ms`.
pub async fn sleep_until_ms(epoch_ms: i64) {
    let wait = epoch_ms - now_ms();
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
}

//! Fixtures for the end-to-end tests: every test starts its own redis-server,
//! its own journal database (SQLite file or MariaDB database) and its own
//! delayq server process, and tears them all down when it ends.
//!
//! - [`Backend`] picks the journal; [`backend_tests!`] runs a test on both.
//! - [`Redis`] is a private `redis-server` child process on a free port.
//! - [`Journal`] is the journal database, with direct (diesel) reads.
//! - [`Server`] is a `delayq serve` child process.
//! - [`Env`] ties them together and holds the HTTP helpers.
//!
//! Nothing here mocks anything: the server talks to a real Redis and a real
//! database, and the tests look into both to check what the server did.

#![allow(dead_code)]

pub mod brokers;
pub mod browser;
pub mod cluster;
pub mod mariadb;
pub mod proxy;
pub mod tls;
pub mod webhook;

use std::collections::BTreeMap;
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use delayq::journal::connection::{JournalConn, JournalUrl};
use delayq::journal::models::{FlowRow, MessageRow};
use delayq::journal::schema::{message, message_flow};
use delayq::journal::store;
use delayq::message::MessageId;
use delayq::redis::keys::Keys;
use delayq::with_conn;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use serde_json::{json, Value};
use tempfile::TempDir;

/// Shards every test server runs with.
pub const SHARDS: u32 = 4;
const START_ATTEMPTS: usize = 5;
const HEALTH_WAIT: Duration = Duration::from_secs(30);
const STOP_WAIT: Duration = Duration::from_secs(15);

/// Runs each named `async fn NAME(b: Backend)` once per journal backend:
/// `NAME::sqlite` and `NAME::mariadb`. Attributes written before a name
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
        }
    )*};
}

/// Epoch milliseconds, as the server counts them.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
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

/// The last `lines` lines of a log file, for failure reports.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| format!("<cannot read {}: {e}>", path.display()));
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Sends SIGTERM, waits up to `wait`, then kills. Returns the exit status.
fn terminate(child: &mut Child, wait: Duration) -> Option<ExitStatus> {
    if let Ok(Some(status)) = child.try_wait() {
        return Some(status);
    }
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "process {} did not stop within {wait:?} of SIGTERM; killing it",
        child.id()
    );
    let _ = child.kill();
    child.wait().ok()
}

// ---------------------------------------------------------------------------
// Journal backends
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Mariadb,
}

fn mysql_base_url() -> String {
    std::env::var("DELAYQ_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://delayq:delayq@127.0.0.1:3306".to_string())
        .trim_end_matches('/')
        .to_string()
}

/// The test's own journal database: a SQLite file in the test's directory,
/// or a fresh MariaDB database `delayq_test_<hex>` dropped at the end.
pub struct Journal {
    /// The URL the server is given.
    pub url: String,
    parsed: JournalUrl,
    mysql_db: Option<String>,
}

impl Journal {
    pub fn create(backend: Backend, dir: &Path) -> Journal {
        match backend {
            Backend::Sqlite => {
                let url = format!("sqlite://{}", dir.join("journal.db").display());
                Journal {
                    parsed: JournalUrl::parse(&url).unwrap(),
                    url,
                    mysql_db: None,
                }
            }
            Backend::Mariadb => {
                let name = format!("delayq_test_{}", random_hex(16));
                admin_mysql(&format!("CREATE DATABASE {name}"));
                let url = format!("{}/{name}", mysql_base_url());
                Journal {
                    parsed: JournalUrl::parse(&url).unwrap(),
                    url,
                    mysql_db: Some(name),
                }
            }
        }
    }

    pub fn conn(&self) -> JournalConn {
        JournalConn::establish(&self.parsed)
            .unwrap_or_else(|e| panic!("connect to the journal {}: {e}", self.url))
    }

    /// The message row, read directly from the journal.
    pub fn row(&self, id: &str) -> Option<MessageRow> {
        store::find(&mut self.conn(), parse_id(id)).expect("read the message row")
    }

    /// The message's flow rows, oldest first.
    pub fn history(&self, id: &str) -> Vec<FlowRow> {
        store::find_with_history(&mut self.conn(), parse_id(id))
            .expect("read the flow rows")
            .map(|(_, history)| history)
            .unwrap_or_default()
    }

    /// Status codes of the message's flow rows, oldest first.
    pub fn flow_codes(&self, id: &str) -> Vec<i16> {
        self.history(id).iter().map(|f| f.status).collect()
    }

    /// Rows of `message` and of `message_flow`.
    pub fn counts(&self) -> (i64, i64) {
        let mut conn = self.conn();
        with_conn!(&mut conn, c => {
            let m: i64 = message::table.count().get_result(c).expect("count messages");
            let f: i64 = message_flow::table.count().get_result(c).expect("count flow rows");
            (m, f)
        })
    }

    /// Flow rows of `status` written by `node` at or after `since` (ms).
    pub fn flow_rows_by(&self, node: &str, status: i16, since: i64) -> i64 {
        let mut conn = self.conn();
        with_conn!(&mut conn, c => message_flow::table
            .filter(message_flow::node_id.eq(node))
            .filter(message_flow::status.eq(status))
            .filter(message_flow::flow_time.ge(since))
            .count()
            .get_result(c)
            .expect("count flow rows"))
    }

    /// Every message row of a topic with this bizKey.
    pub fn rows_by_biz_key(&self, topic: &str, biz_key: &str) -> Vec<MessageRow> {
        let mut conn = self.conn();
        with_conn!(&mut conn, c => message::table
            .filter(message::topic.eq(topic))
            .filter(message::biz_key.eq(biz_key))
            .select(MessageRow::as_select())
            .load(c)
            .expect("read messages by bizKey"))
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        if let Some(name) = &self.mysql_db {
            admin_mysql(&format!("DROP DATABASE IF EXISTS {name}"));
        }
    }
}

/// Runs one statement as the test user on the `delayq` database.
fn admin_mysql(sql: &str) {
    let url = JournalUrl::Mysql(format!("{}/delayq", mysql_base_url()));
    let mut conn = JournalConn::establish(&url)
        .unwrap_or_else(|e| panic!("connect to MariaDB ({}): {e}", mysql_base_url()));
    with_conn!(&mut conn, c => c.batch_execute(sql)).unwrap_or_else(|e| panic!("{sql}: {e}"));
}

pub fn parse_id(id: &str) -> MessageId {
    id.parse().unwrap_or_else(|e| panic!("bad id {id}: {e}"))
}

// ---------------------------------------------------------------------------
// Redis
// ---------------------------------------------------------------------------

/// A private, non-persistent redis-server child process.
pub struct Redis {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

/// Every key with its type and full content, to compare before and after.
pub type Snapshot = BTreeMap<String, (String, Vec<String>)>;

impl Redis {
    pub fn start(dir: &Path) -> Redis {
        for _ in 0..START_ATTEMPTS {
            let mut r = Redis {
                port: free_port(),
                dir: dir.to_path_buf(),
                child: None,
            };
            if r.spawn() {
                return r;
            }
        }
        panic!(
            "could not start redis-server after {START_ATTEMPTS} attempts; log:\n{}",
            tail(&dir.join("redis.log"), 30)
        );
    }

    /// Starts redis-server on `self.port`; false when it exits at once
    /// (the port was taken).
    fn spawn(&mut self) -> bool {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.dir.join("redis.log"))
            .unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn redis-server (is it installed?)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.as_mut().unwrap().try_wait() {
                self.child = None;
                return false;
            }
            if let Ok(mut con) = self.client().get_connection() {
                if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        false
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    pub fn con(&self) -> redis::Connection {
        self.client()
            .get_connection()
            .expect("connect to the test's redis-server")
    }

    /// Wipes every key (this Redis belongs to the test alone).
    pub fn flushall(&self) {
        let _: () = redis::cmd("FLUSHALL").query(&mut self.con()).unwrap();
    }

    /// Deletes every key of the schedule but keeps the data set marker, as
    /// an operator deleting keys would: the node cannot tell, and only a
    /// restore brings the messages back.
    pub fn wipe_schedule(&self, keys: &Keys) {
        let mut con = self.con();
        let doomed: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{{{}:*", keys.prefix()))
            .query(&mut con)
            .unwrap();
        if !doomed.is_empty() {
            let _: () = redis::cmd("DEL").arg(doomed).query(&mut con).unwrap();
        }
        let marker: i64 = redis::cmd("EXISTS")
            .arg(keys.dataset_marker())
            .query(&mut con)
            .unwrap();
        assert_eq!(marker, 1, "the data set marker should survive the wipe");
    }

    pub fn dbsize(&self) -> i64 {
        redis::cmd("DBSIZE").query(&mut self.con()).unwrap()
    }

    /// Kills the redis-server process (an outage); its data is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a new, empty redis-server on the same port.
    pub fn restart_same_port(&mut self) {
        assert!(self.child.is_none(), "redis-server is still running");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.spawn() {
            assert!(
                Instant::now() < deadline,
                "could not restart redis-server on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut con = self.con();
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
        let mut out = Snapshot::new();
        for key in keys {
            // The node's own lease bookkeeping: how far ahead its worker id
            // is reserved moves forward every few seconds, whatever the
            // requests did.
            if key.contains("}:worker-reserved:") {
                continue;
            }
            let kind: String = redis::cmd("TYPE").arg(&key).query(&mut con).unwrap();
            let content: Vec<String> = match kind.as_str() {
                "zset" => redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query(&mut con)
                    .unwrap(),
                "hash" => {
                    let map: BTreeMap<String, String> =
                        redis::cmd("HGETALL").arg(&key).query(&mut con).unwrap();
                    map.into_iter().flat_map(|(k, v)| [k, v]).collect()
                }
                "string" => vec![redis::cmd("GET").arg(&key).query(&mut con).unwrap()],
                "list" => redis::cmd("LRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query(&mut con)
                    .unwrap(),
                "set" => {
                    let mut m: Vec<String> =
                        redis::cmd("SMEMBERS").arg(&key).query(&mut con).unwrap();
                    m.sort();
                    m
                }
                other => vec![format!("<{other}>")],
            };
            out.insert(key, (kind, content));
        }
        out
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if std::thread::panicking() && self.child.is_some() {
            eprintln!(
                "---- redis-server log tail ----\n{}",
                tail(&self.dir.join("redis.log"), 10)
            );
        }
        self.kill();
    }
}

// ---------------------------------------------------------------------------
// The delayq server
// ---------------------------------------------------------------------------

/// What a server is started with.
#[derive(Clone)]
pub struct ServerConfig {
    pub redis_url: String,
    pub database_url: String,
    pub key_prefix: String,
    pub extra_args: Vec<String>,
    pub log_dir: PathBuf,
    /// Environment variables of this server's process alone.
    pub env: Vec<(String, String)>,
}

/// A `delayq serve` child process.
pub struct Server {
    pub port: u16,
    pub log: PathBuf,
    child: Option<Child>,
}

impl Server {
    pub async fn start(cfg: &ServerConfig, generation: usize) -> Server {
        Server::start_on(cfg, generation, None).await
    }

    /// Starts a server on `port`, or on a free port when none is given.
    pub async fn start_on(cfg: &ServerConfig, generation: usize, port: Option<u16>) -> Server {
        let log = cfg.log_dir.join(format!("delayq-{generation}.log"));
        for attempt in 0..START_ATTEMPTS {
            if port.is_some() && attempt > 0 {
                // The port's last listener may take a moment to let go.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            let port = port.unwrap_or_else(free_port);
            let file = File::options()
                .create(true)
                .append(true)
                .open(&log)
                .unwrap();
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_delayq"));
            cmd.arg("serve")
                .args(["--bind", &format!("127.0.0.1:{port}")])
                .args(["--redis-url", &cfg.redis_url])
                .args(["--database-url", &cfg.database_url])
                .args(["--key-prefix", &cfg.key_prefix]);
            if !cfg.extra_args.iter().any(|a| a == "--shards") {
                cmd.args(["--shards", &SHARDS.to_string()]);
            }
            if !cfg.extra_args.iter().any(|a| a == "--node-id") {
                cmd.args(["--node-id", &format!("test-node-{generation}")]);
            }
            let child = cmd
                .args(&cfg.extra_args)
                .env("RUST_LOG", "info,delayq=debug")
                .envs(cfg.env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .stdout(file.try_clone().unwrap())
                .stderr(file)
                .spawn()
                .expect("spawn delayq");
            let mut server = Server {
                port,
                log: log.clone(),
                child: Some(child),
            };
            match server.wait_healthy().await {
                Ok(()) => return server,
                Err(status) => {
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    if attempt + 1 < START_ATTEMPTS && text.contains("cannot listen") {
                        eprintln!("port {port} was taken ({status}); trying another");
                        continue;
                    }
                    panic!("delayq did not start ({status}); log:\n{}", tail(&log, 40));
                }
            }
        }
        unreachable!()
    }

    /// Waits for `GET /health` = 200; Err when the process exits first or
    /// the wait times out.
    async fn wait_healthy(&mut self) -> Result<(), String> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let url = format!("http://127.0.0.1:{}/health", self.port);
        let deadline = Instant::now() + HEALTH_WAIT;
        loop {
            if let Ok(Some(status)) = self.child.as_mut().unwrap().try_wait() {
                self.child = None;
                return Err(format!("exited with {status}"));
            }
            if let Ok(r) = http.get(&url).send().await {
                if r.status() == 200 {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(format!("no healthy answer within {HEALTH_WAIT:?}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGKILL: the process dies at once, without any clean-up.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends a signal by name (STOP, CONT, ...).
    pub fn signal(&self, sig: &str) {
        if let Some(pid) = self.pid() {
            let ok = Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(pid.to_string())
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "kill -{sig} {pid} failed");
        }
    }

    /// SIGTERM, and wait for the process to end.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        self.child
            .take()
            .and_then(|mut c| terminate(&mut c, STOP_WAIT))
    }

    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- delayq server log tail ({}) ----\n{}",
                self.log.display(),
                self.log_tail(60)
            );
        }
        self.stop();
    }
}

// ---------------------------------------------------------------------------
// The environment of one test
// ---------------------------------------------------------------------------

/// An HTTP answer: status and JSON body (`Value::Null` when it is not JSON).
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub json: Value,
    pub text: String,
}

impl Reply {
    /// Asserts the status and the JSON error code, and that the body is an
    /// error document `{"error": string, "message": string}`.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "status of {}", self.text);
        assert_eq!(self.json["error"], code, "error code of {}", self.text);
        assert!(
            self.json["message"].as_str().is_some_and(|m| !m.is_empty()),
            "error body without a message: {}",
            self.text
        );
    }

    #[track_caller]
    pub fn assert_ok(&self) -> &Value {
        assert_eq!(self.status, 200, "expected 200, got {}", self.text);
        &self.json
    }
}

/// A delivered message with the time (epoch ms) the consumer received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub at: i64,
    pub msg: Value,
}

impl Received {
    pub fn id(&self) -> &str {
        id_of(&self.msg)
    }
}

pub fn id_of(msg: &Value) -> &str {
    msg["id"]
        .as_str()
        .unwrap_or_else(|| panic!("message without a string id: {msg}"))
}

pub struct EnvBuilder {
    backend: Backend,
    extra_args: Vec<String>,
    journal_url: Option<String>,
}

impl EnvBuilder {
    /// Journals to this MySQL/MariaDB URL (a database the test set up)
    /// instead of a fresh database on the shared server.
    pub fn journal_url(mut self, url: &str) -> Self {
        self.journal_url = Some(url.to_string());
        self
    }

    pub fn arg(mut self, a: &str) -> Self {
        self.extra_args.push(a.to_string());
        self
    }

    pub async fn start(self) -> Env {
        let dir = tempfile::Builder::new()
            .prefix("delayq-e2e-")
            .tempdir()
            .expect("tempdir");
        let journal = match &self.journal_url {
            Some(url) => Journal {
                url: url.clone(),
                parsed: JournalUrl::parse(url).unwrap(),
                mysql_db: None,
            },
            None => Journal::create(self.backend, dir.path()),
        };
        let redis = Redis::start(dir.path());
        let prefix = format!("t{}", random_hex(8));
        let config = ServerConfig {
            redis_url: redis.url(),
            database_url: journal.url.clone(),
            key_prefix: prefix.clone(),
            extra_args: self.extra_args,
            log_dir: dir.path().to_path_buf(),
            env: Vec::new(),
        };
        let server = Server::start(&config, 1).await;
        let http = reqwest::Client::builder()
            .no_proxy()
            // No idle connections: the server's graceful stop then never
            // waits for a keep-alive connection to time out.
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        Env {
            server,
            redis,
            journal,
            http,
            keys: Keys::new(&prefix, SHARDS),
            config,
            generation: 1,
            dir,
        }
    }
}

/// One test's world. Fields drop in order: the server stops first, then
/// Redis, then the journal database is dropped, then the directory.
pub struct Env {
    pub server: Server,
    pub redis: Redis,
    pub journal: Journal,
    pub http: reqwest::Client,
    pub keys: Keys,
    pub config: ServerConfig,
    generation: usize,
    pub dir: TempDir,
}

impl Env {
    pub async fn start(backend: Backend) -> Env {
        Env::builder(backend).start().await
    }

    pub fn builder(backend: Backend) -> EnvBuilder {
        EnvBuilder {
            backend,
            extra_args: Vec::new(),
            journal_url: None,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.server.port, path)
    }

    /// Stops the server (SIGTERM) and checks it exited cleanly.
    pub fn stop_server(&mut self) {
        let status = self.server.stop().expect("the server was running");
        assert!(
            status.success(),
            "delayq exited with {status}; log:\n{}",
            self.server.log_tail(40)
        );
    }

    /// Starts a new server on the same Redis, journal and key prefix.
    pub async fn start_server(&mut self) {
        self.generation += 1;
        self.server = Server::start(&self.config, self.generation).await;
    }

    /// Starts a new server as [`Env::start_server`] does, on the port the
    /// last one listened on: clients that knew the old one find it again.
    pub async fn start_server_same_port(&mut self) {
        self.generation += 1;
        let port = self.server.port;
        self.server = Server::start_on(&self.config, self.generation, Some(port)).await;
    }

    async fn reply(resp: reqwest::Response) -> Reply {
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("read the response body");
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply { status, json, text }
    }

    pub async fn send(&self, req: reqwest::RequestBuilder) -> Reply {
        Env::reply(req.send().await.expect("HTTP request")).await
    }

    pub async fn get_path(&self, path: &str) -> Reply {
        self.send(self.http.get(self.url(path))).await
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Reply {
        self.send(self.http.post(self.url(path)).json(body)).await
    }

    pub async fn post_raw(&self, path: &str, content_type: &str, body: impl Into<String>) -> Reply {
        let req = self
            .http
            .post(self.url(path))
            .header("Content-Type", content_type)
            .body(body.into());
        self.send(req).await
    }

    /// `POST /push`, expecting 200; returns the id.
    pub async fn push(&self, msg: Value) -> String {
        let r = self.post_json("/push", &msg).await;
        id_of(r.assert_ok()).to_string()
    }

    /// `POST /push/batch`, expecting 200; returns the ids.
    pub async fn push_batch(&self, messages: Vec<Value>) -> Vec<String> {
        let r = self
            .post_json("/push/batch", &json!({ "messages": messages }))
            .await;
        r.assert_ok()["ids"]
            .as_array()
            .unwrap_or_else(|| panic!("no ids in {}", r.text))
            .iter()
            .map(|v| v.as_str().expect("ids are strings").to_string())
            .collect()
    }

    /// One long poll `GET /get/{topic}?timeout=S&count=N`, expecting 200.
    pub async fn poll(&self, topic: &str, timeout_s: u64, count: usize) -> Vec<Received> {
        let r = self
            .get_path(&format!("/get/{topic}?timeout={timeout_s}&count={count}"))
            .await;
        let at = now_ms();
        let list = r.assert_ok()["messages"]
            .as_array()
            .unwrap_or_else(|| panic!("no messages in {}", r.text))
            .clone();
        list.into_iter().map(|msg| Received { at, msg }).collect()
    }

    /// Long-polls until `n` messages arrived or `within` passed.
    pub async fn collect(&self, topic: &str, n: usize, within: Duration) -> Vec<Received> {
        let deadline = Instant::now() + within;
        let mut got = Vec::new();
        while got.len() < n && Instant::now() < deadline {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .as_secs()
                .clamp(1, 5);
            got.extend(self.poll(topic, left, 100).await);
        }
        got
    }

    /// Long-polls until one message arrives (within 10 s) and returns it.
    pub async fn receive_one(&self, topic: &str) -> Received {
        let got = self.collect(topic, 1, Duration::from_secs(10)).await;
        assert_eq!(
            got.len(),
            1,
            "expected exactly one message on {topic}, got {got:?}"
        );
        got.into_iter().next().unwrap()
    }

    /// Asserts that a poll of `timeout_s` seconds returns nothing.
    pub async fn assert_nothing(&self, topic: &str, timeout_s: u64) {
        let got = self.poll(topic, timeout_s, 100).await;
        assert!(
            got.is_empty(),
            "expected no message on {topic}, got {got:?}"
        );
    }

    pub async fn ack(&self, id: &str) -> Reply {
        self.send(self.http.post(self.url(&format!("/ack/{id}"))))
            .await
    }

    pub async fn delete(&self, id: &str) -> Reply {
        self.get_path(&format!("/delete?id={id}")).await
    }

    /// `GET /messages/{id}`, expecting 200.
    /// Waits (up to 5 s) until Redis keeps no end for the journal (every
    /// ack and cancel answered so far is journaled, and Redis was told).
    pub async fn wait_journaled(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let left: i64 = (0..SHARDS)
                .map(|s| {
                    redis::cmd("HLEN")
                        .arg(self.keys.unjournaled(s))
                        .query::<i64>(&mut self.redis.con())
                        .unwrap()
                })
                .sum();
            if left == 0 {
                return;
            }
            assert!(Instant::now() < deadline, "{left} ends never journaled");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `GET /messages/{id}`, with the server's read or admin token when it
    /// has one.
    pub async fn message(&self, id: &str) -> Value {
        let mut req = self.http.get(self.url(&format!("/messages/{id}")));
        if let Some(token) = self.reader_token() {
            req = req.bearer_auth(token);
        }
        self.send(req).await.assert_ok().clone()
    }

    /// The token the server's body-reading routes take, if it has one.
    pub fn reader_token(&self) -> Option<String> {
        let args = &self.config.extra_args;
        ["--read-token", "--admin-token"].iter().find_map(|flag| {
            args.iter()
                .position(|a| a == flag)
                .and_then(|i| args.get(i + 1).cloned())
        })
    }

    /// Status names of the message's history, as `GET /messages/{id}` shows it.
    pub async fn history_statuses(&self, id: &str) -> Vec<String> {
        let m = self.message(id).await;
        m["history"]
            .as_array()
            .expect("history")
            .iter()
            .map(|h| h["status"].as_str().unwrap().to_string())
            .collect()
    }

    /// Polls `GET /messages/{id}` (up to 5 s) until its history shows
    /// exactly `expected`; returns the message document.
    pub async fn wait_history(&self, id: &str, expected: &[&str]) -> Value {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let m = self.message(id).await;
            let got: Vec<&str> = m["history"]
                .as_array()
                .expect("history")
                .iter()
                .map(|h| h["status"].as_str().unwrap())
                .collect();
            if got == expected {
                return m;
            }
            assert!(
                Instant::now() < deadline,
                "history of {id} is {got:?}, expected {expected:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (up to 10 s) until the journal row of `id` has status `code`.
    pub async fn wait_status(&self, id: &str, code: i16) -> MessageRow {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let row = self.journal.row(id).expect("the message is in the journal");
            if row.status == code {
                return row;
            }
            assert!(
                Instant::now() < deadline,
                "journal status of {id} is {}, expected {code}",
                row.status
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (up to 10 s) until the journal shows `id` scheduled (no longer WaitPut).
    pub async fn wait_scheduled(&self, id: &str) -> MessageRow {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let row = self.journal.row(id).expect("the message is in the journal");
            if row.status != status::WAIT_PUT {
                return row;
            }
            assert!(
                Instant::now() < deadline,
                "{id} is still WaitPut in the journal"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Ids in the ready queues of `topic`, over every shard.
    pub fn ready_ids(&self, topic: &str) -> Vec<String> {
        let mut con = self.redis.con();
        (0..SHARDS)
            .flat_map(|s| {
                redis::cmd("ZRANGE")
                    .arg(self.keys.ready(s, topic))
                    .arg(0)
                    .arg(-1)
                    .query::<Vec<String>>(&mut con)
                    .unwrap()
            })
            .collect()
    }

    /// Waits (up to 10 s) until `ids` are all in the ready queues of `topic`.
    pub async fn wait_ready(&self, topic: &str, ids: &[String]) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ready = self.ready_ids(topic);
            if ids.iter().all(|id| ready.contains(id)) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not all of {ids:?} became ready on {topic}: {ready:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits (up to 10 s) until `GET /ready` answers `status`.
    pub async fn wait_readiness(&self, status: u16) -> Reply {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = self.get_path("/ready").await;
            if r.status == status {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "/ready keeps answering {}: {}",
                r.status,
                r.text
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Sleeps until the wall clock reaches `epoch_ms`.
pub async fn sleep_until_ms(epoch_ms: i64) {
    let wait = epoch_ms - now_ms();
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
}

/// Journal status codes.
pub mod status {
    pub const WAIT_PUT: i16 = 0;
    pub const DELAYING: i16 = 1;
    pub const READY: i16 = 2;
    pub const CONSUMING: i16 = 3;
    pub const CONSUMED: i16 = 4;
    pub const DELETED: i16 = 5;
    pub const DEAD: i16 = 6;
}

//! One test's world, [`Env`]: its own Redis, journal and `delayq serve`,
//! the command-line tools run against them, and the waits for what the
//! server does in its own time. The HTTP helpers are in `http.rs`.

use std::collections::HashMap;
use std::process::{Command, Output};
use std::time::Duration;

use delayq::journal::models::MessageRow;
use delayq::redis::keys::Keys;
use serde_json::Value;
use tempfile::TempDir;

use super::{
    random_hex, status, wait_every, wait_until, Backend, Journal, Redis, Reply, Server,
    ServerConfig, SHARDS,
};

/// How an [`Env`] starts: [`Env::builder`], then flags, then `start`.
pub struct EnvBuilder {
    backend: Backend,
    extra_args: Vec<String>,
    envs: Vec<(String, String)>,
    journal_url: Option<String>,
    redis_url: Option<String>,
}

impl EnvBuilder {
    /// Journals to this MySQL/MariaDB URL (a database the test set up)
    /// instead of a fresh database on the shared server.
    pub fn journal_url(mut self, url: &str) -> Self {
        self.journal_url = Some(url.to_string());
        self
    }

    /// Schedules in the Redis at this URL (a Redis Cluster the test
    /// started, say) instead of the env's own redis-server, which is then
    /// left idle.
    pub fn redis_url(mut self, url: &str) -> Self {
        self.redis_url = Some(url.to_string());
        self
    }

    /// An environment variable of the server's process.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.envs.push((key.to_string(), value.to_string()));
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
            Some(url) => Journal::at(url),
            None => Journal::create(self.backend, dir.path()),
        };
        let redis = Redis::start(dir.path());
        let prefix = format!("t{}", random_hex(8));
        let config = ServerConfig {
            redis_url: self.redis_url.clone().unwrap_or_else(|| redis.url()),
            database_url: journal.url.clone(),
            key_prefix: prefix.clone(),
            extra_args: self.extra_args,
            log_dir: dir.path().to_path_buf(),
            env: self.envs,
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
            envs: Vec::new(),
            journal_url: None,
            redis_url: None,
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

    /// `delayq ARGS...` (a subcommand and its own flags) run on this env's
    /// Redis, key prefix, shard count and journal, each given as a flag
    /// unless `args` gives it or the subcommand takes none: `reshard`'s
    /// `--shards` is the count it moves to, and it reads no journal;
    /// `migrate` takes the journal alone. Not run yet: the caller may add
    /// environment variables or pipes. The `DELAYQ_*` variables of the
    /// test's own environment are not passed on: the flags say it all.
    pub fn tool(&self, args: &[&str]) -> Command {
        let sub = args.first().copied().unwrap_or_default();
        let given = |flag: &str| {
            args.iter()
                .any(|a| *a == flag || a.starts_with(&format!("{flag}=")))
        };
        let shards = SHARDS.to_string();
        let mut flags: Vec<(&str, &str)> = Vec::new();
        if sub != "migrate" {
            flags.push(("--redis-url", &self.config.redis_url));
            flags.push(("--key-prefix", &self.config.key_prefix));
        }
        if sub != "reshard" {
            flags.push(("--database-url", &self.config.database_url));
            if sub != "migrate" {
                flags.push(("--shards", &shards));
            }
        }
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_delayq"));
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("DELAYQ_") {
                cmd.env_remove(k);
            }
        }
        cmd.args(args);
        for (flag, value) in flags {
            if !given(flag) {
                cmd.args([flag, value]);
            }
        }
        cmd
    }

    /// Runs [`Env::tool`] to its end; its exit status and output.
    pub fn run_tool(&self, args: &[&str]) -> Output {
        self.tool(args)
            .output()
            .unwrap_or_else(|e| panic!("run delayq {}: {e}", args.join(" ")))
    }

    /// Runs [`Env::tool`], expecting success and a report of one JSON line
    /// on stdout: the report and what it wrote to stderr.
    pub fn run_tool_report(&self, args: &[&str]) -> (Value, String) {
        let out = self.run_tool(args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            out.status.success(),
            "delayq {} failed ({}):\n{stdout}\n{stderr}",
            args.join(" "),
            out.status
        );
        let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(
            lines.len(),
            1,
            "expected one JSON line on stdout, got:\n{stdout}"
        );
        let report = serde_json::from_str(lines[0])
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", lines[0]));
        (report, stderr)
    }

    /// Waits (up to 5 s) until Redis keeps no end for the journal (every
    /// ack and cancel answered so far is journaled, and Redis was told).
    pub async fn wait_journaled(&self) {
        let left = || async {
            let left: i64 = (0..SHARDS)
                .map(|s| {
                    redis::cmd("HLEN")
                        .arg(self.keys.unjournaled(s))
                        .query::<i64>(&mut self.redis.con())
                        .unwrap()
                })
                .sum();
            if left == 0 {
                Ok(())
            } else {
                Err(format!("{left} ends not journaled"))
            }
        };
        let every = Duration::from_millis(20);
        wait_every("every end journaled", Duration::from_secs(5), every, left).await
    }

    /// Polls `GET /messages/{id}` (up to 5 s) until its history shows
    /// exactly `expected`; returns the message document.
    pub async fn wait_history(&self, id: &str, expected: &[&str]) -> Value {
        let what = format!("the history of {id} to be {expected:?}");
        wait_until(&what, Duration::from_secs(5), || async {
            let m = self.message(id).await;
            let got: Vec<&str> = m["history"]
                .as_array()
                .expect("history")
                .iter()
                .map(|h| h["status"].as_str().unwrap())
                .collect();
            if got == expected {
                Ok(m)
            } else {
                Err(format!("{got:?}"))
            }
        })
        .await
    }

    /// Waits (up to 10 s) until the journal rows of all `ids` have status
    /// `code`, looking at them all at once (a look a message takes longer
    /// than a short retention once there are thousands); their rows by id.
    pub async fn wait_statuses(&self, ids: &[String], code: i16) -> HashMap<String, MessageRow> {
        let what = format!("the journal status of {} messages to be {code}", ids.len());
        wait_until(&what, Duration::from_secs(10), || async {
            let rows = self.journal.rows(ids);
            let done: HashMap<String, MessageRow> = rows
                .into_iter()
                .filter(|r| r.status == code)
                .map(|r| (r.id.to_string(), r))
                .collect();
            if done.len() == ids.len() {
                Ok(done)
            } else {
                Err(format!("{} of {} there", done.len(), ids.len()))
            }
        })
        .await
    }

    /// Waits (up to 10 s) until the journal row of `id` has status `code`.
    pub async fn wait_status(&self, id: &str, code: i16) -> MessageRow {
        let what = format!("the journal status of {id} to be {code}");
        wait_until(&what, Duration::from_secs(10), || async {
            let row = self.journal.row(id).expect("the message is in the journal");
            if row.status == code {
                Ok(row)
            } else {
                Err(format!("status {}", row.status))
            }
        })
        .await
    }

    /// Waits (up to 10 s) until the journal shows `id` scheduled (no longer WaitPut).
    pub async fn wait_scheduled(&self, id: &str) -> MessageRow {
        let what = format!("{id} to be scheduled (no longer WaitPut in the journal)");
        wait_until(&what, Duration::from_secs(10), || async {
            let row = self.journal.row(id).expect("the message is in the journal");
            (row.status != status::WAIT_PUT).then_some(row)
        })
        .await
    }

    /// What the test's Redis and journal hold now (every key, the row
    /// counts), to show later that a request changed nothing.
    pub fn stored(&self) -> Stored {
        Stored {
            redis: self.redis.snapshot(),
            journal: self.journal.counts(),
        }
    }

    /// Redis and the journal hold what they held at `before`.
    #[track_caller]
    pub fn assert_unchanged(&self, before: &Stored, what: &str) {
        assert_eq!(
            self.redis.snapshot(),
            before.redis,
            "Redis changed after {what}"
        );
        assert_eq!(
            self.journal.counts(),
            before.journal,
            "the journal changed after {what}"
        );
    }

    /// Whether Redis schedules `id`: it is in some shard's delay zset.
    pub fn scheduled_in_redis(&self, id: &str) -> bool {
        let mut con = self.redis.con();
        (0..SHARDS).any(|s| {
            redis::cmd("ZSCORE")
                .arg(self.keys.delay(s))
                .arg(id)
                .query::<Option<f64>>(&mut con)
                .ok()
                .flatten()
                .is_some()
        })
    }

    /// Ids handed out and not acked yet (the in-flight zsets), over every
    /// shard.
    pub fn in_flight_ids(&self) -> Vec<String> {
        let mut con = self.redis.con();
        (0..SHARDS)
            .flat_map(|s| {
                redis::cmd("ZRANGE")
                    .arg(self.keys.inflight(s))
                    .arg(0)
                    .arg(-1)
                    .query::<Vec<String>>(&mut con)
                    .unwrap()
            })
            .collect()
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
        let what = format!("all of {ids:?} to become ready on {topic}");
        let every = Duration::from_millis(20);
        wait_every(&what, Duration::from_secs(10), every, || async {
            let ready = self.ready_ids(topic);
            if ids.iter().all(|id| ready.contains(id)) {
                Ok(())
            } else {
                Err(format!("ready: {ready:?}"))
            }
        })
        .await
    }

    /// Waits (up to 10 s) until `GET /ready` answers `status`.
    pub async fn wait_readiness(&self, status: u16) -> Reply {
        let what = format!("/ready to answer {status}");
        let every = Duration::from_millis(100);
        wait_every(&what, Duration::from_secs(10), every, || async {
            let r = self.get_path("/ready").await;
            if r.status == status {
                Ok(r)
            } else {
                Err(format!("{}: {}", r.status, r.text))
            }
        })
        .await
    }
}

/// Redis's keys and the journal's row counts at one moment (see
/// [`Env::stored`]).
pub struct Stored {
    pub redis: super::Snapshot,
    /// (messages, flow rows)
    pub journal: (i64, i64),
}

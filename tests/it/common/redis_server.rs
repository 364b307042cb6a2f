//! A private, non-persistent redis-server per test, and what the tests
//! read from it.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use delayq::redis::keys::Keys;

use super::{reserved_port, tail, wait_every_blocking, START_ATTEMPTS};

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
                port: reserved_port(),
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
            // Ready when the server on the port is this child, not merely
            // when the port answers.
            let pid = format!("process_id:{}", self.child.as_ref().unwrap().id());
            if let Ok(mut con) = self.client().get_connection() {
                let info = redis::cmd("INFO").arg("server").query::<String>(&mut con);
                if info.is_ok_and(|i| i.lines().any(|l| l.trim() == pid)) {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        false
    }

    /// Where `SAVE` writes its snapshot (and a restart reads it).
    pub fn dump_path(&self) -> PathBuf {
        self.dir.join("dump.rdb")
    }

    /// Makes this server a replica of the one on `127.0.0.1:master`.
    pub fn replicate(&self, master: u16) {
        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(master)
            .query(&mut self.con())
            .expect("REPLICAOF");
    }

    /// Promotes this replica to a master of its own (`REPLICAOF NO ONE`:
    /// a new replication id; what its master takes from now on is not
    /// here).
    pub fn promote(&self) {
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut self.con())
            .expect("REPLICAOF NO ONE");
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
        let what = format!("redis-server to start again on port {}", self.port);
        let every = Duration::from_millis(200);
        wait_every_blocking(&what, Duration::from_secs(10), every, || {
            self.spawn().then_some(())
        });
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut con = self.con();
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
        let mut out = Snapshot::new();
        for key in keys {
            // The node's own lease bookkeeping: how far ahead its worker id
            // is reserved moves forward every few seconds, whatever the
            // requests did.
            // And its word, each second, that it runs; and the fences'
            // asks to write queued status changes, answered a moment later.
            if key.contains("}:worker-reserved:")
                || key.ends_with("}:alive")
                || key.ends_with("}:flush-asked")
                || key.ends_with("}:flushed")
            {
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
                // A key gone since KEYS listed it (a lease that lapsed, a
                // lock let go) is left out, as if KEYS had not seen it.
                "none" => continue,
                "string" => match redis::cmd("GET").arg(&key).query(&mut con).unwrap() {
                    Some(value) => vec![value],
                    None => continue,
                },
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

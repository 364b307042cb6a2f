//! Fixtures for the cluster tests: a real ZooKeeper ensemble and nginx,
//! started and stopped by the project's own scripts (`cluster/zk`,
//! `cluster/nginx`), and several `delayq serve` processes sharing one Redis
//! and one MariaDB journal. Nodes are killed (SIGKILL), paused (SIGSTOP)
//! and resumed for real.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use delayq::redis::keys::Keys;
use serde_json::{json, Value};
use tempfile::TempDir;

use super::{
    id_of, now_ms, random_hex, wait_every, Backend, Journal, Received, Redis, Reply, Server,
    ServerConfig,
};

/// The project's cluster scripts.
pub fn scripts() -> PathBuf {
    std::env::var_os("DELAYQ_CLUSTER_SCRIPTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster"))
}

pub fn script(name: &str, args: &[&str]) -> String {
    script_env(name, args, &[])
}

/// [`script`], with these environment variables (for what it starts).
pub fn script_env(name: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new("bash")
        .arg(scripts().join(name))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("run cluster/{name}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "cluster/{name} {args:?} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A ZooKeeper ensemble of this test's own.
pub struct ZkEnsemble {
    dir: PathBuf,
    pub connect: String,
}

impl ZkEnsemble {
    pub fn start(dir: &Path, servers: usize, tick_ms: u64) -> ZkEnsemble {
        let dir = dir.join("zk");
        let d = dir.to_str().unwrap().to_string();
        let out = script(
            "zk",
            &[
                "start",
                &d,
                "--servers",
                &servers.to_string(),
                "--tick-ms",
                &tick_ms.to_string(),
            ],
        );
        let connect = out
            .lines()
            .rev()
            .find(|l| l.contains(':'))
            .expect("cluster/zk start prints the connect string")
            .trim()
            .to_string();
        ZkEnsemble { dir, connect }
    }

    fn run(&self, args: &[&str]) -> String {
        let mut all = vec![args[0], self.dir.to_str().unwrap()];
        all.extend_from_slice(&args[1..]);
        script("zk", &all)
    }

    pub fn kill(&self, n: usize) {
        self.run(&["kill", &n.to_string()]);
    }

    pub fn start_one(&self, n: usize) {
        self.run(&["start-one", &n.to_string()]);
    }

    /// Starts every server that is down, and waits until all serve.
    pub fn start_all(&self) {
        self.run(&["start"]);
    }

    pub fn pause(&self, n: usize) {
        self.run(&["pause", &n.to_string()]);
    }

    pub fn resume(&self, n: usize) {
        self.run(&["resume", &n.to_string()]);
    }

    /// The number of the server that leads the ensemble.
    pub fn leader(&self) -> usize {
        self.run(&["leader"])
            .trim()
            .parse()
            .expect("cluster/zk leader prints a number")
    }
}

impl Drop for ZkEnsemble {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(scripts().join("zk"))
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}

/// nginx round-robin in front of some nodes.
pub struct Nginx {
    dir: PathBuf,
    pub port: u16,
}

impl Nginx {
    pub fn start(dir: &Path, upstreams: &[u16]) -> Nginx {
        let dir = dir.join("nginx");
        for _ in 0..5 {
            let port = super::free_port();
            let mut args = vec![
                "start".to_string(),
                dir.to_str().unwrap().to_string(),
                port.to_string(),
            ];
            args.extend(upstreams.iter().map(|p| format!("127.0.0.1:{p}")));
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = Command::new("bash")
                .arg(scripts().join("nginx"))
                .args(&refs)
                .output()
                .unwrap();
            if out.status.success() {
                return Nginx { dir, port };
            }
            eprintln!(
                "cluster/nginx start failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        panic!("could not start nginx");
    }

    /// Waits until `cluster/nginx-watch` has every upstream in rotation.
    pub async fn wait_all_in_rotation(&self, within: Duration) {
        let every = Duration::from_millis(100);
        wait_every("every node in nginx's rotation", within, every, || async {
            let out = self.out_of_rotation();
            if out.is_empty() {
                Ok(())
            } else {
                Err(format!("{out:?} out of rotation"))
            }
        })
        .await;
    }

    /// Stops `cluster/nginx-watch` (the test started it): the rotation
    /// stays as it last wrote it, and nginx is never reloaded again.
    pub fn stop_watch(&self) {
        let pid = std::fs::read_to_string(self.dir.join("watch.pid")).unwrap_or_default();
        let pid = pid.trim();
        assert!(!pid.is_empty(), "no watch.pid in {}", self.dir.display());
        let _ = Command::new("kill").args(["-TERM", pid]).status();
        let gone = || !Path::new(&format!("/proc/{pid}")).exists();
        for _ in 0..50 {
            if gone() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("cluster/nginx-watch (pid {pid}) did not stop");
    }

    /// The upstreams `cluster/nginx-watch` has taken out of rotation.
    pub fn out_of_rotation(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("upstreams.conf"))
            .unwrap_or_default()
            .lines()
            // Each node's first line (the second is its `backup` line).
            .filter(|l| l.trim_end().ends_with(" down;") && !l.contains(" backup "))
            .map(|l| l.split_whitespace().nth(1).unwrap_or_default().to_string())
            .collect()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(scripts().join("nginx"))
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}

pub struct ClusterBuilder {
    nodes: usize,
    mode: &'static str,
    shards: u32,
    session_ms: u64,
    zk_servers: usize,
    /// ZooKeeper's tickTime: the servers grant sessions of 2 to 40 ticks.
    zk_tick_ms: u64,
    extra_args: Vec<String>,
    /// (node, offset): nodes whose wall clock runs off.
    skews: Vec<(usize, String)>,
    /// Environment variables of every node's process.
    envs: Vec<(String, String)>,
    backend: Backend,
    /// A Redis (a Redis Cluster, say) the test started, instead of the
    /// cluster's own redis-server.
    redis_url: Option<String>,
    /// Each node reaches Redis, the journal and each ZooKeeper server
    /// through proxies of its own ([`Cluster::links`]), to be cut or hung.
    proxied: bool,
}

impl ClusterBuilder {
    /// Node `i` runs with its wall clock `offset` off (`+5s`, `-5s`; see
    /// [`Cluster::skew_clock`]).
    pub fn skew_clock(mut self, i: usize, offset: &str) -> Self {
        self.skews.push((i, offset.to_string()));
        self
    }

    /// An environment variable of every node's process; `{dir}` and
    /// `{node}` in the value stand for the cluster's directory and the
    /// node's number.
    pub fn env_all(mut self, key: &str, value: &str) -> Self {
        self.envs.push((key.to_string(), value.to_string()));
        self
    }

    /// One more argument for every node's `delayq serve`.
    pub fn arg(mut self, a: &str) -> Self {
        self.extra_args.push(a.to_string());
        self
    }

    /// The journal's database (MariaDB by default).
    pub fn backend(mut self, b: Backend) -> Self {
        self.backend = b;
        self
    }

    /// Schedules in the Redis at this URL (a Redis Cluster the test
    /// started).
    pub fn redis_url(mut self, url: &str) -> Self {
        self.redis_url = Some(url.to_string());
        self
    }

    /// Each node reaches its services through proxies of its own.
    pub fn proxied(mut self) -> Self {
        self.proxied = true;
        self
    }

    pub fn mode(mut self, mode: &'static str) -> Self {
        self.mode = mode;
        self
    }

    pub fn nodes(mut self, n: usize) -> Self {
        self.nodes = n;
        self
    }

    /// ZooKeeper's tickTime (default 500 ms): `cluster/zk` lets the servers
    /// grant sessions of 2 to 40 ticks, whatever a node asks for.
    pub fn zk_tick_ms(mut self, ms: u64) -> Self {
        self.zk_tick_ms = ms;
        self
    }

    pub fn session_ms(mut self, ms: u64) -> Self {
        self.session_ms = ms;
        self
    }

    pub fn shards(mut self, n: u32) -> Self {
        self.shards = n;
        self
    }

    pub async fn start(self) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("delayq-cluster-")
            .tempdir()
            .expect("tempdir");
        // tickTime 500 ms by default: sessions from 1 s to 20 s.
        let zk = ZkEnsemble::start(dir.path(), self.zk_servers, self.zk_tick_ms);
        let redis = Redis::start(dir.path());
        let journal = Journal::create(self.backend, dir.path());
        let prefix = format!("c{}", random_hex(8));
        let chroot = format!("/delayq-test-{}", random_hex(8));
        let http = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let mut c = Cluster {
            nodes: Vec::new(),
            nginx: None,
            configs: Vec::new(),
            restarts: Vec::new(),
            zk,
            redis,
            journal,
            http,
            links: Vec::new(),
            keys: Keys::new(&prefix, self.shards),
            session_ms: self.session_ms,
            dir,
        };
        for i in 0..self.nodes {
            let mut redis_url = self.redis_url.clone().unwrap_or_else(|| c.redis.url());
            let mut database_url = c.journal.url.clone();
            let mut zk_connect = c.zk.connect.clone();
            if self.proxied {
                let links = NodeLinks::start(
                    (self.redis_url.is_none()).then_some(c.redis.port),
                    &database_url,
                    &zk_connect,
                );
                if let Some(p) = &links.redis {
                    redis_url = format!("redis://127.0.0.1:{}/0", p.port);
                }
                database_url = links.database_url(&database_url);
                zk_connect = links
                    .zookeeper
                    .iter()
                    .map(|p| format!("127.0.0.1:{}", p.port))
                    .collect::<Vec<_>>()
                    .join(",");
                c.links.push(links);
            }
            let cfg = ServerConfig {
                redis_url,
                database_url,
                key_prefix: prefix.clone(),
                extra_args: vec![
                    "--zookeeper".into(),
                    format!("{zk_connect}{chroot}"),
                    "--mode".into(),
                    self.mode.into(),
                    "--zk-session-timeout".into(),
                    format!("{}ms", self.session_ms),
                    "--shards".into(),
                    self.shards.to_string(),
                    "--node-id".into(),
                    Cluster::node_name(i),
                ]
                .into_iter()
                .chain(self.extra_args.iter().cloned())
                .collect(),
                log_dir: c.dir.path().to_path_buf(),
                env: Vec::new(),
            };
            c.configs.push(cfg);
            c.restarts.push(0);
            c.nodes.push(None);
            for (_, offset) in self.skews.iter().filter(|(n, _)| *n == i) {
                c.skew_clock(i, offset);
            }
            // `{dir}` and `{node}` in a value: the cluster's directory and
            // the node's number.
            let dir = c.dir.path().display().to_string();
            for (k, v) in &self.envs {
                let v = v.replace("{dir}", &dir).replace("{node}", &i.to_string());
                c.set_env(i, k, &v);
            }
            c.start_node(i).await;
        }
        c
    }
}

/// A cluster of delayq nodes. Fields drop in order: nodes, nginx, the
/// ensemble, Redis, the journal database, the directory.
pub struct Cluster {
    pub nodes: Vec<Option<Server>>,
    pub nginx: Option<Nginx>,
    configs: Vec<ServerConfig>,
    restarts: Vec<usize>,
    pub zk: ZkEnsemble,
    pub redis: Redis,
    pub journal: Journal,
    pub http: reqwest::Client,
    /// Each node's proxies to its services (with [`ClusterBuilder::proxied`]).
    pub links: Vec<NodeLinks>,
    pub keys: Keys,
    pub session_ms: u64,
    pub dir: TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A paused node would sit out its SIGTERM.
        for s in self.nodes.iter().flatten() {
            s.signal("CONT");
        }
    }
}

impl Cluster {
    /// Two nodes, active-standby, 4 shards, 3 s sessions, 3 ZooKeeper servers.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder {
            nodes: 2,
            mode: "active-standby",
            shards: 4,
            session_ms: 3_000,
            zk_servers: 3,
            zk_tick_ms: 500,
            extra_args: Vec::new(),
            skews: Vec::new(),
            envs: Vec::new(),
            backend: Backend::Mariadb,
            redis_url: None,
            proxied: false,
        }
    }

    pub fn node_name(i: usize) -> String {
        format!("node-{i}")
    }

    pub fn session(&self) -> Duration {
        Duration::from_millis(self.session_ms)
    }

    pub async fn start_node(&mut self, i: usize) {
        self.restarts[i] += 1;
        let generation = 100 * (i + 1) + self.restarts[i];
        self.nodes[i] = Some(Server::start(&self.configs[i], generation).await);
    }

    /// Another process with node `i`'s settings (its node id too) on a
    /// port of its own, as a second copy started by mistake would be.
    pub async fn start_twin(&self, i: usize) -> Server {
        Server::start(&self.configs[i], 900 + i).await
    }

    /// Node `i` reaches Redis at `url` from its next start on (through a
    /// [`super::proxy::Proxy`], say).
    pub fn set_redis_url(&mut self, i: usize, url: &str) {
        self.configs[i].redis_url = url.to_string();
    }

    /// Sets an environment variable of node `i`'s process, from its next
    /// start on.
    pub fn set_env(&mut self, i: usize, key: &str, value: &str) {
        self.configs[i].env.retain(|(k, _)| k != key);
        self.configs[i]
            .env
            .push((key.to_string(), value.to_string()));
    }

    /// Node `i`'s process runs with its wall clock `offset` off
    /// (libfaketime, realtime only: its monotonic clock runs true), from
    /// its next start on.
    pub fn skew_clock(&mut self, i: usize, offset: &str) {
        let lib = [
            "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
            "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        ]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("libfaketime is installed (scripts/test installs the faketime package)");
        self.set_env(i, "LD_PRELOAD", lib);
        self.set_env(i, "FAKETIME", offset);
        self.set_env(i, "FAKETIME_DONT_FAKE_MONOTONIC", "1");
    }

    pub fn node(&self, i: usize) -> &Server {
        self.nodes[i].as_ref().expect("the node runs")
    }

    pub fn kill9(&mut self, i: usize) {
        if let Some(mut s) = self.nodes[i].take() {
            s.kill9();
        }
    }

    pub fn stop(&mut self, i: usize) {
        if let Some(mut s) = self.nodes[i].take() {
            let status = s.stop().expect("the node was running");
            assert!(
                status.success(),
                "node {i} exited with {status}:\n{}",
                s.log_tail(40)
            );
        }
    }

    pub fn port(&self, i: usize) -> u16 {
        self.node(i).port
    }

    pub fn url(&self, i: usize, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.port(i), path)
    }

    pub fn start_nginx(&mut self, nodes: &[usize]) -> u16 {
        let ports: Vec<u16> = nodes.iter().map(|&i| self.port(i)).collect();
        let n = Nginx::start(self.dir.path(), &ports);
        let port = n.port;
        self.nginx = Some(n);
        port
    }

    pub async fn send(&self, req: reqwest::RequestBuilder) -> Reply {
        let resp = req.send().await.expect("HTTP request");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("read the response body");
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply { status, json, text }
    }

    pub async fn get(&self, i: usize, path: &str) -> Reply {
        self.send(self.http.get(self.url(i, path))).await
    }

    pub async fn post(&self, i: usize, path: &str, body: &Value) -> Reply {
        self.send(self.http.post(self.url(i, path)).json(body))
            .await
    }

    /// `POST /push` to node `i`, expecting 200; returns the id.
    pub async fn push(&self, i: usize, msg: Value) -> String {
        let r = self.post(i, "/push", &msg).await;
        id_of(r.assert_ok()).to_string()
    }

    pub async fn push_batch(&self, i: usize, messages: Vec<Value>) -> Vec<String> {
        let r = self
            .post(i, "/push/batch", &json!({ "messages": messages }))
            .await;
        r.assert_ok()["ids"]
            .as_array()
            .unwrap_or_else(|| panic!("no ids in {}", r.text))
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    }

    /// One long poll on node `i`; an error (the node died) is an empty answer.
    pub async fn poll(&self, i: usize, topic: &str, timeout_s: u64, count: usize) -> Vec<Received> {
        let url = self.url(
            i,
            &format!("/get/{topic}?timeout={timeout_s}&count={count}"),
        );
        let Ok(resp) = self.http.get(url).send().await else {
            return Vec::new();
        };
        let at = now_ms();
        let Ok(v) = resp.json::<Value>().await else {
            return Vec::new();
        };
        v["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|msg| Received { at, msg })
            .collect()
    }

    pub async fn ack(&self, i: usize, id: &str) -> Reply {
        self.send(self.http.post(self.url(i, &format!("/ack/{id}"))))
            .await
    }

    /// Waits until `GET /ready` of node `i` answers 200 (a member in good
    /// standing, with a worker id).
    pub async fn wait_ready(&self, i: usize, within: Duration) {
        let what = format!("node {i} to be ready");
        wait_every(&what, within, Duration::from_millis(100), || async {
            let r = self.http.get(self.url(i, "/ready")).send().await;
            r.is_ok_and(|r| r.status() == 200).then_some(())
        })
        .await
    }

    /// Waits until node `i` names the leader (a node is ready before it
    /// has seen the election); returns the leader's id.
    pub async fn wait_leader(&self, i: usize, within: Duration) -> String {
        let what = format!("node {i} to see a leader");
        wait_every(&what, within, Duration::from_millis(100), || async {
            self.admin(i).await["leader"].as_str().map(str::to_string)
        })
        .await
    }

    /// `GET /admin/cluster` of node `i`.
    pub async fn admin(&self, i: usize) -> Value {
        self.get(i, "/admin/cluster").await.assert_ok().clone()
    }

    /// Node ids scanning each shard, as the nodes `alive` report it.
    pub async fn scanners(&self, alive: &[usize]) -> Vec<Vec<String>> {
        let mut out = vec![Vec::new(); self.keys.shards() as usize];
        for &i in alive {
            let Ok(r) = self.http.get(self.url(i, "/admin/cluster")).send().await else {
                continue;
            };
            let Ok(v) = r.json::<Value>().await else {
                continue;
            };
            for s in v["shards"].as_array().cloned().unwrap_or_default() {
                if s["scanningHere"].as_bool() == Some(true) {
                    out[s["shard"].as_u64().unwrap() as usize]
                        .push(v["node"].as_str().unwrap().to_string());
                }
            }
        }
        out
    }

    /// Waits until every shard is scanned by exactly one of `alive`, and
    /// the scanners satisfy `ok`; returns them.
    pub async fn wait_scanners(
        &self,
        alive: &[usize],
        within: Duration,
        ok: impl Fn(&[Vec<String>]) -> bool,
    ) -> Vec<String> {
        let ok = &ok;
        wait_every(
            "the shards to settle",
            within,
            Duration::from_millis(100),
            || async {
                let s = self.scanners(alive).await;
                if s.iter().all(|v| v.len() == 1) && ok(&s) {
                    Ok(s.into_iter().map(|mut v| v.remove(0)).collect())
                } else {
                    Err(format!("{s:?}"))
                }
            },
        )
        .await
    }

    /// The index of the node with this id.
    pub fn index_of(name: &str) -> usize {
        name.strip_prefix("node-").unwrap().parse().unwrap()
    }
}

/// One node's proxies: to the cluster's own Redis (none for a Redis the
/// test started), to the journal's database and to each ZooKeeper server.
pub struct NodeLinks {
    pub redis: Option<super::proxy::Proxy>,
    pub database: super::proxy::Proxy,
    pub zookeeper: Vec<super::proxy::Proxy>,
}

impl NodeLinks {
    fn start(redis_port: Option<u16>, database_url: &str, zk_connect: &str) -> NodeLinks {
        use super::proxy::Proxy;
        let port_of = |hostport: &str| -> u16 {
            hostport
                .rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("no port in {hostport:?}"))
        };
        NodeLinks {
            redis: redis_port.map(Proxy::start),
            database: Proxy::start(port_of(Self::db_hostport(database_url))),
            zookeeper: zk_connect
                .split(',')
                .map(|hp| Proxy::start(port_of(hp)))
                .collect(),
        }
    }

    /// `scheme://user:pass@HOST:PORT/db` → its `HOST:PORT`.
    fn db_hostport(url: &str) -> &str {
        let rest = url.split_once('@').map_or(url, |(_, r)| r);
        rest.split('/').next().unwrap_or(rest)
    }

    fn database_url(&self, url: &str) -> String {
        url.replacen(
            Self::db_hostport(url),
            &format!("127.0.0.1:{}", self.database.port),
            1,
        )
    }
}

//! A Redis Cluster of the test's own (3 masters, each with a replica),
//! started and stopped by the project's script `cluster/redis-cluster`.
//! Servers are killed (SIGKILL) and started again for real.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::cluster::{script, script_env};
use super::wait_every_blocking;

pub struct RedisCluster {
    dir: PathBuf,
    /// `redis+cluster://H:P,…`, every server (masters and replicas).
    pub url: String,
}

/// One server as `cluster/redis-cluster status` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterServer {
    pub n: usize,
    pub port: u16,
    pub role: String,
}

impl RedisCluster {
    pub fn start(dir: &Path) -> RedisCluster {
        Self::start_env(dir, &[])
    }

    /// A cluster whose servers run with these environment variables.
    pub fn start_env(dir: &Path, env: &[(&str, &str)]) -> RedisCluster {
        let dir = dir.join("redis-cluster");
        let url = script_env("redis-cluster", &["start", dir.to_str().unwrap()], env)
            .trim()
            .to_string();
        assert!(url.starts_with("redis+cluster://"), "{url}");
        RedisCluster { dir, url }
    }

    /// A cluster whose servers' wall clocks can be offset while they run
    /// ([`Self::skew_clock`]), by a shim loaded with LD_PRELOAD
    /// (clock_shim.c, built here with the system's C compiler).
    pub fn start_skewable(dir: &Path) -> RedisCluster {
        let shim = build_clock_shim(dir);
        Self::start_env(dir, &[("LD_PRELOAD", shim.to_str().unwrap())])
    }

    /// Offsets server `n`'s wall clock by `ms` (it reads the offset again
    /// within a second; a cluster started with [`Self::start_skewable`]).
    pub fn skew_clock(&self, n: usize, ms: i64) {
        std::fs::write(self.dir.join(format!("r{n}/clock-skew-ms")), ms.to_string()).unwrap();
    }

    /// A cluster that speaks TLS alone (clients, bus, replication) with
    /// this server certificate, key and CA, its servers presenting the
    /// client certificate to each other; its URL is `rediss+cluster://`.
    pub fn start_tls(dir: &Path, pki: &super::tls::Pki) -> RedisCluster {
        let dir = dir.join("redis-cluster");
        let path = |p: &Path| p.to_str().unwrap().to_string();
        let url = script(
            "redis-cluster",
            &[
                "start",
                dir.to_str().unwrap(),
                "--tls",
                &path(&pki.server_cert),
                &path(&pki.server_key),
                &path(&pki.ca),
                "--tls-client",
                &path(&pki.client_cert),
                &path(&pki.client_key),
            ],
        )
        .trim()
        .to_string();
        assert!(url.starts_with("rediss+cluster://"), "{url}");
        RedisCluster { dir, url }
    }

    fn d(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    pub fn status(&self) -> Vec<ClusterServer> {
        script("redis-cluster", &["status", self.d()])
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                ClusterServer {
                    n: f[0].parse().unwrap(),
                    port: f[1].parse().unwrap(),
                    role: f[2].to_string(),
                }
            })
            .collect()
    }

    /// Server `n`'s own connection (not following redirects).
    pub fn con(&self, n: usize) -> redis::Connection {
        let port = self.status()[n - 1].port;
        redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_connection()
            .unwrap()
    }

    /// The masters that hold at least one key, by server number.
    pub fn masters_with_keys(&self) -> Vec<usize> {
        self.status()
            .into_iter()
            .filter(|s| s.role == "master")
            .filter(|s| {
                let n: i64 = redis::cmd("DBSIZE").query(&mut self.con(s.n)).unwrap();
                n > 0
            })
            .map(|s| s.n)
            .collect()
    }

    /// SIGKILLs server `n`.
    pub fn kill(&self, n: usize) {
        script("redis-cluster", &["kill", self.d(), &n.to_string()]);
    }

    /// SIGSTOPs server `n`: it hangs, its connections stay open.
    pub fn pause(&self, n: usize) {
        script("redis-cluster", &["pause", self.d(), &n.to_string()]);
    }

    /// SIGCONTs server `n`.
    pub fn resume(&self, n: usize) {
        script("redis-cluster", &["resume", self.d(), &n.to_string()]);
    }

    /// Starts server `n` again (it rejoins, as a replica if it was failed
    /// over), and waits until the cluster serves every slot.
    pub fn start_one(&self, n: usize) {
        script("redis-cluster", &["start-one", self.d(), &n.to_string()]);
        self.wait_ok();
    }

    /// Waits until every slot has a master (after a failover, say).
    pub fn wait_ok(&self) {
        script("redis-cluster", &["wait", self.d()]);
    }

    /// Waits until server `n` is a replica: its master was failed over to.
    pub fn wait_role(&self, n: usize, role: &str) {
        wait_every_blocking(
            &format!("server {n} of the Redis Cluster to be a {role}"),
            Duration::from_secs(30),
            Duration::from_millis(200),
            || (self.status()[n - 1].role == role).then_some(()),
        );
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(super::cluster::scripts().join("redis-cluster"))
            .args(["stop", self.d()])
            .status();
    }
}

/// Builds clock_shim.c into `dir` (with the system's C compiler): a library
/// for LD_PRELOAD that offsets a process's wall clock by the milliseconds
/// in a file, read again each second.
pub fn build_clock_shim(dir: &Path) -> std::path::PathBuf {
    let shim = dir.join("clock_shim.so");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/common/clock_shim.c");
    let out = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&shim)
        .arg(&source)
        .arg("-ldl")
        .output()
        .expect("run cc (the C compiler) to build the clock shim");
    assert!(
        out.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    shim
}

//! `delayq serve` as a child process of the test.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::{reserved_port, tail, SHARDS, START_ATTEMPTS};

const HEALTH_WAIT: Duration = Duration::from_secs(30);
const STOP_WAIT: Duration = Duration::from_secs(15);

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
            let port = port.unwrap_or_else(reserved_port);
            let file = File::options()
                .create(true)
                .append(true)
                .open(&log)
                .unwrap();
            // DELAYQ_TEST_BIN: another build of delayq (an older revision,
            // to show what the fault checker finds in it).
            let bin = std::env::var("DELAYQ_TEST_BIN")
                .unwrap_or_else(|_| env!("CARGO_BIN_EXE_delayq").to_string());
            let mut cmd = Command::new(bin);
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

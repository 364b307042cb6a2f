//! Message brokers for the forwarding tests, each a private child process
//! on free loopback ports with its data in the test's directory: a
//! RabbitMQ node (`rabbitmq-server`, with its own epmd) and a NATS server
//! with JetStream (`nats-server -js`). Both can be killed and started
//! again on the same ports with the same data, as a broker restart.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{reserved_port, tail};

const RABBITMQ_START: Duration = Duration::from_secs(90);

fn log_file(path: &Path) -> (File, File) {
    let f = File::options()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    (f.try_clone().unwrap(), f)
}

fn accepts(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
        .is_ok()
}

/// Whether the server on `port` answers as itself: after `hello` (sent
/// when not empty), what it says within a second names `name`. A port that
/// merely accepts may be another test's listener.
fn answers_as(port: u16, hello: &[u8], name: &str) -> bool {
    use std::io::{Read, Write};
    let addr = ([127, 0, 0, 1], port).into();
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if !hello.is_empty() && s.write_all(hello).is_err() {
        return false;
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut said = Vec::new();
    let mut chunk = [0u8; 4096];
    while Instant::now() < deadline {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => said.extend_from_slice(&chunk[..n]),
        }
        if said.windows(name.len()).any(|w| w == name.as_bytes()) {
            return true;
        }
    }
    false
}

/// Kills a child started in its own session, with everything it started.
///
/// The group is signalled with kill(2), not `kill -9 -PGID`: Debian 12's
/// procps-ng `kill` reads that as pid -1 and kills every process it may,
/// the test runner and CI with it.
fn kill_group(child: &mut Child) {
    let pgid = libc::pid_t::try_from(child.id()).expect("a pid fits pid_t");
    if pgid > 1 {
        // SAFETY: kill(2) with a negative pid only sends a signal, to the
        // group this child leads; no memory is involved.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A RabbitMQ node of the test's own.
pub struct RabbitMq {
    pub port: u16,
    /// The TLS listener's port, when started with [`RabbitMq::start_tls`].
    pub tls_port: Option<u16>,
    dist_port: u16,
    epmd_port: u16,
    dir: PathBuf,
    name: String,
    child: Option<Child>,
}

impl RabbitMq {
    pub fn start(dir: &Path) -> RabbitMq {
        RabbitMq::start_with(dir, None)
    }

    /// Also a TLS listener serving `cert`, which asks every client for a
    /// certificate signed by `ca`.
    pub fn start_tls(dir: &Path, ca: &Path, cert: &Path, key: &Path) -> RabbitMq {
        RabbitMq::start_with(dir, Some((ca, cert, key)))
    }

    fn start_with(dir: &Path, tls: Option<(&Path, &Path, &Path)>) -> RabbitMq {
        let dir = dir.join("rabbitmq");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("enabled_plugins"), "[].\n").unwrap();
        let tls_port = tls.map(|(ca, cert, key)| {
            let port = reserved_port();
            std::fs::write(
                dir.join("rabbitmq.conf"),
                format!(
                    "listeners.ssl.default = {port}\n\
                     ssl_options.cacertfile = {}\n\
                     ssl_options.certfile = {}\n\
                     ssl_options.keyfile = {}\n\
                     ssl_options.verify = verify_peer\n\
                     ssl_options.fail_if_no_peer_cert = true\n",
                    ca.display(),
                    cert.display(),
                    key.display()
                ),
            )
            .unwrap();
            port
        });
        let mut r = RabbitMq {
            port: reserved_port(),
            tls_port,
            dist_port: reserved_port(),
            epmd_port: reserved_port(),
            name: format!("dqtest{}@localhost", super::random_hex(8)),
            dir,
            child: None,
        };
        r.spawn();
        r
    }

    /// `amqp://` URL of the default vhost (guest may log in over loopback).
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    fn spawn(&mut self) {
        let (out, err) = log_file(&self.dir.join("out.log"));
        let d = |p: &str| self.dir.join(p);
        let mut cmd = Command::new("setsid");
        cmd.arg("/usr/lib/rabbitmq/bin/rabbitmq-server")
            .env("HOME", &self.dir)
            .env("ERL_EPMD_PORT", self.epmd_port.to_string())
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODENAME", &self.name)
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}",
            )
            .env("RABBITMQ_MNESIA_BASE", d("mnesia"))
            // A VM killed mid-start writes its crash dump here, not into
            // the checkout the test runs in.
            .env("ERL_CRASH_DUMP", d("erl_crash.dump"))
            .env("RABBITMQ_LOG_BASE", d("log"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", d("enabled_plugins"))
            .env("RABBITMQ_CONFIG_FILE", d("rabbitmq"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", d("advanced.config"))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        self.child = Some(
            cmd.spawn()
                .expect("start rabbitmq-server (is it installed?)"),
        );
        let deadline = Instant::now() + RABBITMQ_START;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.as_mut().unwrap().try_wait() {
                panic!(
                    "rabbitmq-server exited ({status}):\n{}",
                    tail(&self.dir.join("out.log"), 40)
                );
            }
            // AMQP's protocol header is answered with Connection.Start,
            // whose server properties carry the cluster's name: this
            // node's.
            let id = self.name.split('@').next().unwrap_or_default();
            if answers_as(self.port, b"AMQP\x00\x00\x09\x01", id)
                && self.tls_port.is_none_or(accepts)
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "rabbitmq-server did not listen within {RABBITMQ_START:?}:\n{}",
            tail(&self.dir.join("out.log"), 40)
        );
    }

    /// kill -9 of the node (and its epmd): its data stays on disk.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_group(&mut c);
        }
        // The Erlang VM runs apart from the script that started it: find it
        // by its home, the test's own directory.
        let home = format!("-home {} ", self.dir.display());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Command::new("pkill")
            .args(["-9", "-f", "--", &home])
            .status()
            .is_ok_and(|s| s.success())
        {
            assert!(Instant::now() < deadline, "RabbitMQ ({home}) does not die");
            std::thread::sleep(Duration::from_millis(100));
        }
        while accepts(self.port) {
            assert!(
                Instant::now() < deadline,
                "RabbitMQ still listens after kill -9"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = Command::new("epmd")
            .arg("-kill")
            .env("ERL_EPMD_PORT", self.epmd_port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// Starts the node again on the same ports with the same data.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for RabbitMq {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A NATS server with JetStream, of the test's own.
pub struct Nats {
    pub port: u16,
    /// `--name`: what its INFO line calls it.
    name: String,
    dir: PathBuf,
    /// `--tls --tlscert CERT --tlskey KEY`: TLS alone.
    tls: Option<(PathBuf, PathBuf)>,
    child: Option<Child>,
}

impl Nats {
    pub fn start(dir: &Path) -> Nats {
        Nats::start_with(dir, None)
    }

    /// A server that speaks TLS alone, serving `cert`.
    pub fn start_tls(dir: &Path, cert: &Path, key: &Path) -> Nats {
        Nats::start_with(dir, Some((cert.to_path_buf(), key.to_path_buf())))
    }

    fn start_with(dir: &Path, tls: Option<(PathBuf, PathBuf)>) -> Nats {
        let dir = dir.join("nats");
        std::fs::create_dir_all(&dir).unwrap();
        let mut n = Nats {
            port: reserved_port(),
            name: format!("dqtest{}", super::random_hex(8)),
            dir,
            tls,
            child: None,
        };
        n.spawn();
        n
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let (out, err) = log_file(&self.dir.join("out.log"));
        let mut cmd = Command::new("nats-server");
        cmd.args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-js"])
            .args(["--name", &self.name])
            .arg("-sd")
            .arg(self.dir.join("store"));
        if let Some((cert, key)) = &self.tls {
            cmd.arg("--tls")
                .arg("--tlscert")
                .arg(cert)
                .arg("--tlskey")
                .arg(key);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("start nats-server (is it installed?)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        // The server greets every connection with an INFO line that
        // carries its name (in plain text, TLS or not).
        let named = format!("\"server_name\":\"{}\"", self.name);
        while Instant::now() < deadline {
            if answers_as(self.port, b"", &named) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "nats-server did not listen:\n{}",
            tail(&self.dir.join("out.log"), 40)
        );
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A listener that is not the broker (another test's, on a port it took
/// meanwhile) accepts connections, and is still not taken for the broker.
#[test]
fn another_listener_on_the_port_is_not_the_broker() {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let _ = s.and_then(|mut s| s.write_all(b"INFO {\"server_name\":\"someone\"}\r\n"));
        }
    });
    assert!(accepts(port));
    assert!(!answers_as(port, b"", "\"server_name\":\"dqtest0\""));
    assert!(answers_as(port, b"", "\"server_name\":\"someone\""));
}

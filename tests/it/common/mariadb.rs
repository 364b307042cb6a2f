//! A private MariaDB server (its own data directory and port) for tests
//! that stop the database: the shared one is never touched.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{reserved_port, wait_every_blocking};

pub struct PrivateMariadb {
    pub port: u16,
    dir: PathBuf,
    /// More `mariadbd` options (TLS files).
    args: Vec<String>,
    child: Option<Child>,
}

impl PrivateMariadb {
    /// Initialises a data directory under `dir`, starts the server and
    /// creates database `db` with user `delayq`/`delayq`.
    pub fn start(dir: &Path, db: &str) -> PrivateMariadb {
        PrivateMariadb::start_with(dir, db, &[])
    }

    /// As [`PrivateMariadb::start`], with more `mariadbd` options.
    pub fn start_with(dir: &Path, db: &str, args: &[String]) -> PrivateMariadb {
        let dir = dir.join("mariadb");
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new("mariadb-install-db")
            .args(["--no-defaults", "--user=root", "--skip-test-db"])
            .arg("--auth-root-authentication-method=normal")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .output()
            .expect("run mariadb-install-db (installed by scripts/test)");
        assert!(
            out.status.success(),
            "mariadb-install-db failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut m = PrivateMariadb {
            port: reserved_port(),
            dir,
            args: args.to_vec(),
            child: None,
        };
        m.launch();
        m.sql(&format!(
            "CREATE DATABASE {db}; CREATE USER 'delayq'@'%' IDENTIFIED BY 'delayq'; \
             GRANT ALL ON {db}.* TO 'delayq'@'%';"
        ));
        m
    }

    pub fn url(&self, db: &str) -> String {
        format!("mysql://delayq:delayq@127.0.0.1:{}/{db}", self.port)
    }

    fn sql(&self, sql: &str) {
        let out = Command::new("mariadb")
            .args(["--no-defaults", "-uroot", "-h127.0.0.1"])
            .arg(format!("-P{}", self.port))
            .args(["-e", sql])
            .output()
            .expect("run the mariadb client");
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Asks the server `sql` as root in plain text, without column names;
    /// its output when it answered.
    fn ask(&self, sql: &str) -> Option<String> {
        let out = Command::new("mariadb")
            .args([
                "--no-defaults",
                "--skip-ssl",
                "-uroot",
                "-h127.0.0.1",
                "-N",
                "-B",
            ])
            .arg(format!("-P{}", self.port))
            .args(["-e", sql])
            .stderr(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// TLS handshakes the server accepted so far (this question itself is
    /// asked in plain text, so it counts none).
    pub fn ssl_accepts(&self) -> u64 {
        let text = self
            .ask("SHOW GLOBAL STATUS LIKE 'Ssl_accepts'")
            .unwrap_or_default();
        text.split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("Ssl_accepts: {text}"))
    }

    /// Whether the server answering on the port is this one (it names this
    /// test's data directory), not merely whether the port answers.
    fn alive(&self) -> bool {
        self.ask("SELECT @@datadir")
            .is_some_and(|dir| Path::new(dir.trim()) == self.dir.join("data"))
    }

    fn launch(&mut self) {
        assert!(self.child.is_none(), "the private MariaDB is running");
        let log = std::fs::File::create(self.dir.join("server.log")).unwrap();
        let child = Command::new("mariadbd")
            .args(["--no-defaults", "--user=root", "--bind-address=127.0.0.1"])
            .arg(format!("--port={}", self.port))
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!("--socket={}", self.dir.join("sock").display()))
            .arg(format!("--pid-file={}", self.dir.join("pid").display()))
            .args(["--skip-log-bin", "--innodb-buffer-pool-size=32M"])
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start mariadbd");
        self.child = Some(child);
        let what = format!(
            "the private MariaDB to answer (see {})",
            self.dir.join("server.log").display()
        );
        let every = Duration::from_millis(100);
        wait_every_blocking(&what, Duration::from_secs(30), every, || {
            self.alive().then_some(())
        });
    }

    /// Kills the server (SIGKILL: an outage, not a shutdown).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Freezes the server (SIGSTOP): its connections stay open and every
    /// query on them hangs until [`PrivateMariadb::resume`], as with a
    /// database that stopped answering (a stall, a network partition).
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: libc::c_int) {
        let child = self.child.as_ref().expect("the private MariaDB is running");
        // SAFETY: kill(2) on this test's own child process.
        let r = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
        assert_eq!(r, 0, "signal {sig} to the private MariaDB");
    }

    /// Starts it again on the same data and port.
    pub fn restart(&mut self) {
        self.launch();
    }
}

impl Drop for PrivateMariadb {
    fn drop(&mut self) {
        self.kill();
    }
}

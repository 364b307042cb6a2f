//! What an operator handles around a node: `delayq --version` and
//! `GET /health` name the git revision of the build; a config file gives
//! settings, under the `DELAYQ_*` variables and the flags, and a bad one is
//! refused before anything starts; `delayq restore` and `delayq reconcile`
//! show a progress bar on a terminal and plain lines in a pipe, with the
//! same one-line JSON report on stdout either way.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{free_port, random_hex, tail, Backend, Env, Journal, Redis};
use delayq::redis::keys::Keys;
use serde_json::{json, Value};

backend_tests!(tool_progress_on_a_terminal_and_in_a_pipe);

/// `program` without the `DELAYQ_*` variables of the test's environment.
fn command(program: &str) -> Command {
    let mut cmd = Command::new(program);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("DELAYQ_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

fn delayq() -> Command {
    command(env!("CARGO_BIN_EXE_delayq"))
}

/// The checkout's revision as the build names it.
fn git_revision() -> String {
    Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

#[test]
fn version_names_the_git_revision() {
    let out = delayq().arg("--version").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!(
            "delayq {} (git {})",
            env!("CARGO_PKG_VERSION"),
            git_revision()
        )
    );
}

/// A `delayq serve` started by the test itself (the fixture's server gives
/// every setting as a flag, which would hide the file).
struct Node {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Node {
    async fn start(dir: &Path, name: &str, port: u16, args: &[&str], env: &[(&str, &str)]) -> Node {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = delayq()
            .arg("serve")
            .args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        let mut node = Node { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = node.child.try_wait().unwrap() {
                panic!("{name} exited with {status}:\n{}", tail(&node.log, 30));
            }
            if node.get("/health").await.is_some() {
                return node;
            }
            assert!(
                Instant::now() < deadline,
                "{name} did not answer on port {port}:\n{}",
                tail(&node.log, 30)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn get(&self, path: &str) -> Option<Value> {
        let r = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .get(format!("http://127.0.0.1:{}{path}", self.port))
            .send()
            .await
            .ok()?;
        if !r.status().is_success() {
            return None;
        }
        r.json().await.ok()
    }

    /// Node id, shard count, and whether Redis holds the data set marker
    /// of `prefix` with that many shards.
    async fn settings(&self, redis: &Redis, prefix: &str) -> (String, usize, bool) {
        let c = self
            .get("/admin/cluster")
            .await
            .expect("GET /admin/cluster");
        let shards = c["shards"].as_array().unwrap().len();
        let marker = Keys::new(prefix, shards as u32).dataset_marker();
        let held: bool = redis::cmd("EXISTS")
            .arg(marker)
            .query(&mut redis.con())
            .unwrap();
        (c["node"].as_str().unwrap().to_string(), shards, held)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_config_file_under_variables_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let redis = Redis::start(dir.path());
    let journal = Journal::create(Backend::Sqlite, dir.path());
    let port = free_port();
    let file = dir.path().join("delayq.toml");
    std::fs::write(
        &file,
        format!(
            "# a node's settings\n\
             bind = \"127.0.0.1:{port}\"\n\
             redis-url = \"{}\"\n\
             database_url = \"{}\"\n\
             key-prefix = \"file\"\n\
             shards = 3\n\
             node-id = \"from-file\"\n\
             reconcile-interval = 0\n",
            redis.url(),
            journal.url
        ),
    )
    .unwrap();
    let path = file.to_str().unwrap();

    // The file alone.
    let node = Node::start(dir.path(), "file", port, &["--config", path], &[]).await;
    assert_eq!(
        node.settings(&redis, "file").await,
        ("from-file".to_string(), 3, true)
    );
    let health = node.get("/health").await.unwrap();
    assert_eq!(
        health,
        json!({"status": "ok", "version": env!("CARGO_PKG_VERSION"), "revision": git_revision()})
    );
    let log = std::fs::read_to_string(&node.log).unwrap();
    let serving = log.lines().find(|l| l.contains("delayq serving")).unwrap();
    assert!(serving.contains(&git_revision()), "{serving}");
    drop(node);

    // Named by DELAYQ_CONFIG; variables win over the file.
    let node = Node::start(
        dir.path(),
        "env",
        port,
        &[],
        &[
            ("DELAYQ_CONFIG", path),
            ("DELAYQ_KEY_PREFIX", "env"),
            ("DELAYQ_SHARDS", "5"),
        ],
    )
    .await;
    assert_eq!(
        node.settings(&redis, "env").await,
        ("from-file".to_string(), 5, true)
    );
    drop(node);

    // Flags win over both.
    let flag_port = free_port();
    let bind = format!("127.0.0.1:{flag_port}");
    let node = Node::start(
        dir.path(),
        "flags",
        flag_port,
        &[
            "--config",
            path,
            "--bind",
            &bind,
            "--key-prefix",
            "flag",
            "--shards",
            "2",
            "--node-id",
            "from-flag",
        ],
        &[("DELAYQ_KEY_PREFIX", "env"), ("DELAYQ_SHARDS", "5")],
    )
    .await;
    assert_eq!(
        node.settings(&redis, "flag").await,
        ("from-flag".to_string(), 2, true)
    );
}

/// `delayq --config FILE ARGS...` run with a file holding `text` (None: no
/// such file): it must stop with exit code 2 before doing anything, and
/// its stderr name the file and each of `wanted`.
fn refused(text: Option<&str>, args: &[&str], wanted: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    if let Some(t) = text {
        std::fs::write(&file, t).unwrap();
    }
    let out: Output = delayq()
        .arg("--config")
        .arg(&file)
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text:?} {args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{:?}", out.stdout);
    assert!(stderr.contains(file.to_str().unwrap()), "{stderr}");
    for w in wanted {
        assert!(stderr.contains(w), "{text:?}: no `{w}` in: {stderr}");
    }
}

#[test]
fn bad_config_files_are_refused() {
    refused(
        Some("shards = 4\nsharts = 3\n"),
        &["serve"],
        &["unknown key `sharts`"],
    );
    refused(
        Some("shards = 4\n\nbind = 127.0.0.1:7070\n"),
        &["serve"],
        &["line 3", "not valid TOML"],
    );
    refused(None, &["serve"], &["cannot read"]);
    refused(
        Some("bind = \"127.0.0.1:7070\"\n"),
        &["restore"],
        &["`bind` does not apply to `delayq restore`"],
    );
    refused(Some("repair = true\n"), &["reconcile"], &["--repair"]);
    // A value its flag refuses names the key.
    refused(
        Some("shards = 0\n"),
        &["serve"],
        &["--shards", "key `shards`"],
    );
}

/// `1234567` as indicatif shows a count: `1,234,567`.
fn human(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The report: stdout's one line, a JSON object with exactly `keys`.
fn report(stdout: &str, keys: &[&str]) -> Value {
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one JSON line, got:\n{stdout}");
    let v: Value = serde_json::from_str(lines[0]).unwrap();
    let got: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(got, keys, "{v}");
    v
}

/// Runs the tool with stderr on a pseudo-terminal (`script`): its report
/// and what the terminal showed.
fn on_a_terminal(env: &Env, args: &[&str]) -> (String, String) {
    let quote = |s: &std::ffi::OsStr| format!("'{}'", s.to_str().unwrap().replace('\'', r"'\''"));
    let out_file = env.dir.path().join("report.json");
    let tool = env.tool(args);
    let line: Vec<String> = std::iter::once(tool.get_program())
        .chain(tool.get_args())
        .map(quote)
        .collect();
    let shell = format!(
        "stty cols 120 rows 40; {} > {}",
        line.join(" "),
        quote(out_file.as_os_str())
    );
    let out = command("script")
        .args(["-qec", &shell, "/dev/null"])
        .env("TERM", "xterm")
        .stdin(Stdio::null())
        .output()
        .expect("run script (util-linux)");
    let screen = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{:?}: {screen}", out.status);
    (std::fs::read_to_string(out_file).unwrap(), screen)
}

/// Runs the tool with stderr piped: its report and its stderr.
fn in_a_pipe(env: &Env, args: &[&str]) -> (String, String) {
    let out = env.run_tool(args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8_lossy(&out.stdout).to_string(), stderr)
}

const RESTORE_KEYS: &[&str] = &[
    "scanned",
    "restored",
    "alreadyPresent",
    "skippedExpired",
    "skippedFinished",
    "beyondHorizon",
    "dryRun",
    "resumedAfter",
    "elapsedMs",
];

const RECONCILE_KEYS: &[&str] = &[
    "repair",
    "journalScanned",
    "journalRecent",
    "redisScanned",
    "missing",
    "unscheduled",
    "finishedInJournal",
    "unknown",
    "statusMismatch",
    "unjournaled",
    "graceMs",
    "startedAt",
    "elapsedMs",
];

async fn tool_progress_on_a_terminal_and_in_a_pipe(b: Backend) {
    const N: u64 = 3_000;
    let env = Env::start(b).await;
    let mut ids = Vec::new();
    for _ in 0..N / 1000 {
        let batch = (0..1000)
            .map(|i| json!({"topic": "ops", "body": format!("m{i}"), "delay": 600_000}))
            .collect();
        ids.extend(env.push_batch(batch).await);
    }
    env.wait_scheduled(ids.last().unwrap()).await;
    let restore = ["restore"];

    // A terminal: a bar over every live row, no plain lines.
    env.redis.wipe_schedule(&env.keys);
    let (stdout, screen) = on_a_terminal(&env, &restore);
    let r = report(&stdout, RESTORE_KEYS);
    assert_eq!(r["restored"], N, "{r}");
    let bar = format!("{}/{} rows", human(N), human(N));
    for shown in ["restore", &bar, "/s", "ETA", "restored 3000", "\x1b["] {
        assert!(
            screen.contains(shown),
            "no `{shown}` on the terminal:\n{screen}"
        );
    }
    assert!(!screen.contains("restore: scanned"), "{screen}");

    // Resuming after an interrupted restore's cursor: the bar counts the
    // rows after it.
    env.redis.wipe_schedule(&env.keys);
    let mut sorted: Vec<i64> = ids.iter().map(|i| i.parse().unwrap()).collect();
    sorted.sort();
    let cursor = sorted[999];
    let now = crate::common::now_ms();
    let _: () = redis::cmd("HSET")
        .arg(env.keys.restore_cursor())
        .arg(&[
            ("after", cursor),
            ("expire", 0),
            ("startedAt", now),
            ("updatedAt", now),
        ])
        .query(&mut env.redis.con())
        .unwrap();
    let (stdout, screen) = on_a_terminal(&env, &restore);
    let r = report(&stdout, RESTORE_KEYS);
    assert_eq!(
        (r["resumedAfter"].as_i64(), r["scanned"].as_u64()),
        (Some(cursor), Some(2000)),
        "{r}"
    );
    assert!(screen.contains("2,000/2,000 rows"), "{screen}");

    // A pipe: plain lines, no bar.
    env.redis.wipe_schedule(&env.keys);
    let (stdout, stderr) = in_a_pipe(&env, &restore);
    let r = report(&stdout, RESTORE_KEYS);
    assert_eq!(r["restored"], N, "{r}");
    assert!(
        stderr.contains(&format!("restore: scanned {N} restored {N}")),
        "{stderr}"
    );
    assert!(
        !stderr.contains("ETA") && !stderr.contains("\x1b["),
        "{stderr}"
    );

    // The same for reconcile: its bar counts journal rows and Redis records.
    let reconcile = ["reconcile"];
    let (stdout, screen) = on_a_terminal(&env, &reconcile);
    let r = report(&stdout, RECONCILE_KEYS);
    let read = ["journalScanned", "journalRecent", "redisScanned"]
        .iter()
        .map(|k| r[k].as_u64().unwrap())
        .sum::<u64>();
    assert_eq!(read, 2 * N, "{r}");
    let bar = format!("{}/{} rows", human(read), human(read));
    for shown in ["reconcile", &bar, "ETA", "missing 0"] {
        assert!(
            screen.contains(shown),
            "no `{shown}` on the terminal:\n{screen}"
        );
    }
    assert!(!screen.contains("reconcile: journal rows"), "{screen}");
    let (stdout, stderr) = in_a_pipe(&env, &reconcile);
    report(&stdout, RECONCILE_KEYS);
    assert!(stderr.contains("reconcile: journal rows"), "{stderr}");
    assert!(
        !stderr.contains("ETA") && !stderr.contains("\x1b["),
        "{stderr}"
    );
}

/// `delayq serve ARGS...` with a bad setting: it stops with exit code 2
/// (clap's) or 1 (at start) before serving, and its stderr says each of
/// `wanted`; within `within`.
fn refused_at_start(args: &[&str], wanted: &[&str], within: Duration) {
    let began = Instant::now();
    let out: Output = delayq().arg("serve").args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(1 | 2)),
        "{args:?}: {:?} {stderr}",
        out.status
    );
    for w in wanted {
        assert!(stderr.contains(w), "{args:?}: no `{w}` in: {stderr}");
    }
    assert!(
        began.elapsed() < within,
        "{args:?} took {:?}",
        began.elapsed()
    );
}

/// Settings a new user gets wrong are refused at start with what is wrong,
/// not accepted silently or retried forever.
#[test]
fn bad_settings_are_refused_at_start() {
    let quick = Duration::from_secs(10);
    refused_at_start(&["--admin-token", ""], &["--admin-token", "empty"], quick);
    refused_at_start(&["--read-token", ""], &["--read-token", "empty"], quick);
    // A token with a newline (read from a file) is refused without
    // repeating the secret.
    refused_at_start(
        &["--admin-token", "s3cret\n"],
        &["--admin-token", "white space"],
        quick,
    );
    let out = delayq()
        .args(["serve", "--admin-token", "s3cret\n"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("s3cret"));
    refused_at_start(
        &["--reconcile-grace", "0"],
        &["--reconcile-grace", "above 0"],
        quick,
    );
    refused_at_start(
        &["--max-body-bytes", "20000000"],
        &["--max-body-bytes", "15728640"],
        quick,
    );
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/j.db", dir.path().display());
    refused_at_start(
        &[
            "--redis-url",
            "foo://127.0.0.1:6379",
            "--database-url",
            &db,
            "--bind",
            &format!("127.0.0.1:{}", free_port()),
        ],
        &["--redis-url", "foo://"],
        quick,
    );
}

/// A flag that is wrong on its face is a usage error (exit 2) before
/// anything starts: no journal file is made, nothing is written to Redis.
#[test]
fn bad_flags_exit_2_before_anything_starts() {
    let home = tempfile::tempdir().unwrap();
    let redis = Redis::start(home.path());
    for bad in [
        &["--workers", "0"][..],
        &["--workers", "many"],
        &["--admin-token="],
        &["--read-token", " s3cret"],
        &["--topic-limit", "a=1/s", "--topic-limit", "a=concurrency=2"],
        &["--topic-limit", "a=1/s a=2/s"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("j.db");
        let prefix = format!("t{}", random_hex(6));
        let out: Output = delayq()
            .arg("serve")
            .args(["--database-url", &format!("sqlite://{}", db.display())])
            .args(["--redis-url", &redis.url()])
            .args(["--key-prefix", &prefix])
            .args(["--bind", &format!("127.0.0.1:{}", free_port())])
            .args(bad)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {stderr}");
        assert!(!stderr.contains("s3cret"), "{bad:?}: {stderr}");
        assert!(!db.exists(), "{bad:?} made the journal file: {stderr}");
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("*{prefix}*"))
            .query(&mut redis.con())
            .unwrap();
        assert!(keys.is_empty(), "{bad:?} wrote to Redis: {keys:?}");
    }
}

/// The flags of `delayq serve --help` and the README's table of them are
/// the same set, with the same defaults where both give one, and the
/// admin token's help names every route the README says it protects.
/// Each flag of `delayq SUB --help` and its help text (up to the next flag).
fn help_flags(sub: &str) -> std::collections::BTreeMap<String, String> {
    let out = delayq().args([sub, "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{help}");
    let mut flags: std::collections::BTreeMap<String, String> = Default::default();
    let mut current: Option<String> = None;
    for line in help.lines() {
        let t = line.trim_start();
        let indent = line.len() - t.len();
        let flag = t
            .strip_prefix("-")
            .and_then(|_| t.split([',', ' ']).find(|w| w.starts_with("--")));
        match flag {
            Some(f) if indent <= 6 => {
                let name = f.split(['=', '<']).next().unwrap().to_string();
                flags.insert(name.clone(), t.to_string());
                current = Some(name);
            }
            _ => {
                if let Some(c) = &current {
                    let text = flags.get_mut(c).unwrap();
                    text.push(' ');
                    text.push_str(t);
                }
            }
        }
    }
    flags
}

/// The README's table of flags: each flag and its default cell, and each
/// subcommand's row.
fn readme_flags() -> (
    std::collections::BTreeMap<String, String>,
    std::collections::BTreeMap<String, String>,
) {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let table = readme
        .split("| command / flag | default | meaning |")
        .nth(1)
        .expect("the README's flag table");
    let mut flags = std::collections::BTreeMap::new();
    let mut commands = std::collections::BTreeMap::new();
    let rows = table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter(|l| l.starts_with("| `"));
    for row in rows {
        let cells: Vec<&str> = row.split(" | ").collect();
        let (names, default) = (cells[0].trim_start_matches("| "), cells[1]);
        if let Some(command) = names.strip_prefix("`delayq ") {
            let sub = command.split([' ', '`']).next().unwrap().to_string();
            commands.insert(sub, row.to_string());
            continue;
        }
        for name in names.split(", ") {
            let name = name.trim_matches('`');
            if name.starts_with("--") {
                flags.insert(name.to_string(), default.to_string());
            }
        }
    }
    (flags, commands)
}

/// Every subcommand's flags are in the README's table (in its own row or
/// as a flag of `serve`'s), and the help of each says what the flag does
/// there: `reshard --shards` is the count to move to, with no default.
#[test]
fn every_subcommands_help_matches_the_readme() {
    let (documented, commands) = readme_flags();
    for sub in ["migrate", "restore", "reconcile", "reshard"] {
        let row = commands
            .get(sub)
            .unwrap_or_else(|| panic!("no row for delayq {sub}"));
        for flag in help_flags(sub).keys() {
            if ["--help", "--version"].contains(&flag.as_str()) {
                continue;
            }
            assert!(
                documented.contains_key(flag) || row.contains(flag.as_str()),
                "delayq {sub} {flag} is not in the README's table"
            );
        }
    }
    let shards = &help_flags("reshard")["--shards"];
    assert!(
        shards.contains("move the data set to") && !shards.contains("[default:"),
        "delayq reshard --shards: {shards}"
    );
    let serve = help_flags("serve");
    let limit = &serve["--topic-limit"];
    assert!(
        limit.contains("TOPIC=concurrency=M") && !limit.contains("TOPIC= "),
        "--topic-limit: {limit}"
    );
    assert!(
        serve["--advertise"].contains("https://"),
        "{}",
        serve["--advertise"]
    );
}

#[test]
fn serve_help_matches_the_readme() {
    let flags = help_flags("serve");
    let default_of = |text: &str| {
        text.split("[default: ")
            .nth(1)
            .map(|d| d.split(']').next().unwrap().to_string())
    };
    let (documented, _) = readme_flags();
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let shown: Vec<&String> = flags
        .keys()
        .filter(|f| !["--help", "--version"].contains(&f.as_str()))
        .collect();
    let missing: Vec<&&String> = shown
        .iter()
        .filter(|f| !documented.contains_key(**f))
        .collect();
    assert!(
        missing.is_empty(),
        "serve flags not in the README's table: {missing:?}"
    );
    let extra: Vec<&String> = documented
        .keys()
        .filter(|f| !flags.contains_key(*f) && f.as_str() != "--config")
        .collect();
    assert!(
        extra.is_empty(),
        "the README's table has flags serve does not: {extra:?}"
    );
    for (flag, text) in &flags {
        let (Some(help_default), Some(readme)) = (default_of(text), documented.get(flag)) else {
            continue;
        };
        // The README words some defaults ("cores", "none"): those say more
        // than a value can.
        if !(readme.starts_with('`') && readme.ends_with('`') && readme.matches('`').count() == 2) {
            continue;
        }
        assert_eq!(
            readme.trim_matches('`'),
            help_default,
            "{flag}: the README says {readme}, --help [default: {help_default}]"
        );
    }
    let admin = &flags["--admin-token"];
    for route in [
        "/admin/*",
        "/delete",
        "/cancel",
        "/reschedule",
        "/dead/.../requeue",
        "/topics/.../pause",
        "/topics/.../resume",
        "/reStore*",
        "GET /topics",
    ] {
        assert!(
            admin.contains(route),
            "--admin-token's help leaves out {route}: {admin}"
        );
        assert!(
            readme.contains(&format!("`{route}`")),
            "the README leaves out {route}"
        );
    }
}

/// A wrong password or a database that does not exist is refused at once,
/// with what to check, not retried for the start-up wait.
#[test]
fn a_refused_login_to_the_journal_is_not_retried() {
    use crate::common::journal::{mysql_base_url, postgres_base_url};
    let wrong_password = |base: String| {
        let (scheme, rest) = base.split_once("://").unwrap();
        let (user, host) = rest.split_once('@').unwrap();
        let name = user.split(':').next().unwrap();
        format!("{scheme}://{name}:not-the-password@{host}/delayq")
    };
    for url in [
        wrong_password(postgres_base_url()),
        format!("{}/no_such_database_{}", postgres_base_url(), random_hex(4)),
        wrong_password(mysql_base_url()),
        format!("{}/no_such_database_{}", mysql_base_url(), random_hex(4)),
    ] {
        let began = Instant::now();
        let out = delayq()
            .args(["migrate", "--database-url", &url])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{url}: {stderr}");
        assert!(
            stderr.contains("waiting does not mend that"),
            "{url}: {stderr}"
        );
        assert!(!stderr.contains("not-the-password"), "{url}: {stderr}");
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "{url}: refused after {:?}",
            began.elapsed()
        );
    }
}

//! Transactional enqueue: the application writes messages into an outbox
//! table of its own database (PostgreSQL or MariaDB), in its own
//! transactions; a node pushes each committed row once and deletes it. A
//! row of a rolled-back transaction is never delivered, and a node killed
//! between its push and its delete pushes nothing twice.

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use delayq::journal::connection::{JournalConn, JournalUrl};
use delayq::with_conn;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};
use serde_json::{json, Value};

use crate::common::{wait_until, Backend, Env, Journal};

backend_tests!(committed_rows_are_pushed_once_rolled_back_rows_never);

/// The application's own database: a fresh PostgreSQL or MariaDB database,
/// dropped with the test.
struct App {
    db: Journal,
    _dir: tempfile::TempDir,
}

#[derive(QueryableByName, Debug)]
#[allow(dead_code)] // the id is shown when an assertion fails
struct OutboxRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Nullable<Text>)]
    error: Option<String>,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

impl App {
    fn create(backend: Backend) -> App {
        let dir = tempfile::tempdir().unwrap();
        App {
            db: Journal::create(backend, dir.path()),
            _dir: dir,
        }
    }

    fn conn(&self) -> JournalConn {
        JournalConn::establish(&JournalUrl::parse(&self.db.url).unwrap()).unwrap()
    }

    /// `delayq outbox install`: its report.
    fn install(&self) -> Value {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_delayq"));
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("DELAYQ_") {
                cmd.env_remove(k);
            }
        }
        let out = cmd
            .args(["outbox", "install", "--database-url", &self.db.url])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "outbox install: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Inserts `messages` into the outbox in one transaction of the
    /// application's, committed or rolled back.
    fn insert(&self, messages: &[Value], commit: bool) {
        let mut conn = self.conn();
        let texts: Vec<String> = messages.iter().map(Value::to_string).collect();
        let sql = insert_sql(&conn);
        let r: Result<(), diesel::result::Error> = with_conn!(&mut conn, c => c.transaction(|c| {
            for t in &texts {
                diesel::sql_query(sql).bind::<Text, _>(t).execute(c)?;
            }
            if commit {
                Ok(())
            } else {
                Err(diesel::result::Error::RollbackTransaction)
            }
        }));
        match r {
            Ok(()) => assert!(commit),
            Err(diesel::result::Error::RollbackTransaction) => assert!(!commit),
            Err(e) => panic!("insert into the outbox: {e}"),
        }
    }

    /// The rows left in the outbox: id and error.
    fn rows(&self) -> Vec<OutboxRow> {
        let mut conn = self.conn();
        with_conn!(&mut conn, c => diesel::sql_query("SELECT id, error FROM delayq_outbox ORDER BY id").load(c))
            .unwrap()
    }
}

/// The Rust client's insert of one outbox row, for the database `conn`
/// is on.
fn insert_sql(conn: &JournalConn) -> &'static str {
    match conn {
        JournalConn::Postgres(_) => delayq_client::outbox::INSERT_POSTGRES,
        _ => delayq_client::outbox::INSERT_MYSQL,
    }
}

/// Rows the journal records as pushed from an outbox.
fn done_rows(journal: &Journal) -> i64 {
    let mut conn = journal.conn();
    let n: Vec<Count> = with_conn!(&mut conn, c => diesel::sql_query(
        "SELECT CAST(count(*) AS BIGINT) AS n FROM outbox_done").load(c))
    .or_else(|_| {
        with_conn!(&mut conn, c => diesel::sql_query(
            "SELECT CAST(count(*) AS SIGNED) AS n FROM outbox_done").load(c))
    })
    .unwrap();
    n[0].n
}

/// Polls `topic` until nothing comes for two seconds; acks everything,
/// and counts each body.
async fn drain(env: &Env, topic: &str) -> HashMap<String, usize> {
    let mut bodies = HashMap::new();
    loop {
        let got = env.poll(topic, 2, 100).await;
        if got.is_empty() {
            return bodies;
        }
        for r in got {
            *bodies
                .entry(r.msg["body"].as_str().unwrap().to_string())
                .or_insert(0) += 1;
            env.ack(r.id()).await.assert_ok();
        }
    }
}

/// The application's database beside a journal on `b`: PostgreSQL, or
/// MariaDB beside a MariaDB journal.
fn app_for(b: Backend) -> Backend {
    match b {
        Backend::Mariadb => Backend::Mariadb,
        Backend::Sqlite | Backend::Postgres => Backend::Postgres,
    }
}

async fn committed_rows_are_pushed_once_rolled_back_rows_never(b: Backend) {
    let app = App::create(app_for(b));
    let first = app.install();
    assert_eq!(first["created"], true, "{first}");
    let again = app.install();
    assert_eq!(again["created"], false, "{again}");
    assert_eq!(
        again["source"], first["source"],
        "an install keeps the outbox's id"
    );
    let env = Env::builder(b)
        .arg("--outbox-url")
        .arg(&app.db.url)
        .start()
        .await;

    app.insert(
        &[
            json!({"topic": "ob", "body": "a"}),
            json!({"topic": "ob", "body": "b", "delay": 300, "bizKey": "k"}),
            json!({"topic": "ob", "body": "c", "priority": 5}),
        ],
        true,
    );
    app.insert(
        &[
            json!({"topic": "ob", "body": "rolled back 1"}),
            json!({"topic": "ob", "body": "rolled back 2"}),
        ],
        false,
    );
    // A row made by the Rust client's outbox_row, inserted with its SQL.
    let row = delayq_client::outbox::outbox_row(
        &delayq_client::NewMessage::new("ob", "from the client")
            .delay(Duration::from_millis(200))
            .biz_key("client-row")
            .priority(3),
    )
    .unwrap();
    let mut conn = app.conn();
    let sql = insert_sql(&conn);
    with_conn!(&mut conn, c => diesel::sql_query(sql).bind::<Text, _>(&row).execute(c)).unwrap();
    let replace = delayq_client::NewMessage::new("ob", "r")
        .biz_key("client-row")
        .on_duplicate(delayq_client::OnDuplicate::Replace);
    assert!(matches!(
        delayq_client::outbox::outbox_row(&replace),
        Err(delayq_client::Error::Outbox { .. })
    ));
    // A row the node cannot push is marked and left for the application.
    app.insert(
        &[json!({"topic": "ob", "body": "x", "colour": "red"})],
        true,
    );
    // A transaction held open across the node's passes, then rolled back;
    // another, then committed.
    let held = |commit: bool, body: &'static str| {
        let url = app.db.url.clone();
        std::thread::spawn(move || {
            let mut conn = JournalConn::establish(&JournalUrl::parse(&url).unwrap()).unwrap();
            let sql = insert_sql(&conn);
            let text = json!({"topic": "ob", "body": body}).to_string();
            with_conn!(&mut conn, c => {
                c.batch_execute("BEGIN").unwrap();
                diesel::sql_query(sql).bind::<Text, _>(&text).execute(c).unwrap();
                // Several of the node's passes (every 100 ms) see the table
                // meanwhile.
                std::thread::sleep(Duration::from_millis(700));
                c.batch_execute(if commit { "COMMIT" } else { "ROLLBACK" }).unwrap();
            });
        })
    };
    let (rolled, committed) = (
        held(false, "held, rolled back"),
        held(true, "held, committed"),
    );
    rolled.join().unwrap();
    committed.join().unwrap();

    let bodies = drain(&env, "ob").await;
    let want: HashMap<String, usize> = ["a", "b", "c", "held, committed", "from the client"]
        .iter()
        .map(|b| (b.to_string(), 1))
        .collect();
    assert_eq!(bodies, want, "each committed row once, no rolled-back row");

    let left = app.rows();
    assert_eq!(left.len(), 1, "only the refused row stays: {left:?}");
    let error = left[0].error.as_deref().unwrap_or_default();
    assert!(
        error.starts_with("unknown_field:") && error.contains("colour"),
        "{error}"
    );
    // The records of the rows go once their delete committed.
    wait_until("the records forgotten", Duration::from_secs(10), || async {
        (done_rows(&env.journal) == 0).then_some(())
    })
    .await;
    let metrics = env.get_path("/metrics").await;
    assert!(
        metrics.text.contains("delayq_outbox_pushed_total 5"),
        "{}",
        metrics.text
    );
    assert!(metrics.text.contains("delayq_outbox_refused_total 1"));
    assert!(metrics.text.contains("delayq_outbox_oldest_seconds "));
}

/// A node is killed (SIGKILL, by itself) after its push of a batch is
/// durable and before it deletes the rows; the next node finds the rows
/// recorded as pushed, deletes them and pushes nothing again.
/// A node on `app`'s outbox that kills itself once its push of `bodies`
/// (on `topic`) is durable, before it deletes their rows: the env, the
/// node dead.
async fn killed_after_push(b: Backend, app: &App, topic: &str, bodies: &[String]) -> Env {
    let mut env = Env::builder(b)
        .arg("--outbox-url")
        .arg(&app.db.url)
        .env("DELAYQ_FAULTS", "outbox_stop_after_push")
        .start()
        .await;
    let messages: Vec<Value> = bodies
        .iter()
        .map(|body| json!({"topic": topic, "body": body}))
        .collect();
    app.insert(&messages, true);
    // The push is durable (the rows' record with it), then the node dies.
    let n = bodies.len() as i64;
    wait_until(
        "the journal's record of the rows",
        Duration::from_secs(20),
        || async { (done_rows(&env.journal) == n).then_some(()) },
    )
    .await;
    wait_until("the node to stop", Duration::from_secs(10), || async {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", env.server.pid()?)).ok()?;
        stat.split_whitespace()
            .nth(2)
            .filter(|s| *s == "Z")
            .map(|_| ())
    })
    .await;
    env.server.kill9();
    env.config.env.retain(|(k, _)| k != "DELAYQ_FAULTS");
    env
}

async fn a_node_stopped_between_push_and_delete_pushes_nothing_twice(b: Backend) {
    let app = App::create(app_for(b));
    app.install();
    let bodies: Vec<String> = (0..20).map(|i| format!("m{i}")).collect();
    let mut env = killed_after_push(b, &app, "obk", &bodies).await;
    assert_eq!(app.rows().len(), 20, "the rows were not deleted");
    env.start_server().await;
    wait_until("the outbox emptied", Duration::from_secs(20), || async {
        app.rows().is_empty().then_some(())
    })
    .await;
    let bodies = drain(&env, "obk").await;
    assert_eq!(bodies.len(), 20, "{bodies:?}");
    assert!(
        bodies.values().all(|n| *n == 1),
        "a row pushed twice: {bodies:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_stopped_between_push_and_delete_pushes_nothing_twice_postgres() {
    a_node_stopped_between_push_and_delete_pushes_nothing_twice(Backend::Postgres).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_stopped_between_push_and_delete_pushes_nothing_twice_mariadb() {
    a_node_stopped_between_push_and_delete_pushes_nothing_twice(Backend::Mariadb).await
}

/// The application commits and rolls back transactions of rows all along
/// while the node is killed (SIGKILL) twice mid-ingestion: every committed
/// row is delivered once, no rolled-back row ever.
async fn kill_9_mid_ingestion_loses_and_doubles_nothing(b: Backend) {
    let app = App::create(app_for(b));
    app.install();
    let mut env = Env::builder(b)
        .arg("--outbox-url")
        .arg(&app.db.url)
        .arg("--outbox-batch")
        .arg("20")
        .start()
        .await;
    let url = app.db.url.clone();
    let writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let still = writing.clone();
    // Transactions of 10 rows, one in four rolled back, until told to stop.
    let writer = std::thread::spawn(move || {
        let app = App {
            db: Journal::at(&url),
            _dir: tempfile::tempdir().unwrap(),
        };
        let mut committed = Vec::new();
        let mut t = 0;
        while still.load(std::sync::atomic::Ordering::Acquire) {
            let commit = t % 4 != 3;
            let bodies: Vec<String> = (0..10).map(|i| format!("t{t}-{i}")).collect();
            let msgs: Vec<Value> = bodies
                .iter()
                .map(|body| json!({"topic": "obx", "body": body}))
                .collect();
            app.insert(&msgs, commit);
            if commit {
                committed.extend(bodies);
            }
            t += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
        committed
    });
    let start = Instant::now();
    for k in 1..=2 {
        // Killed while rows are being committed, taken and pushed.
        let before = env.journal.rows_of_topic("obx").len();
        wait_until(
            "rows pushed since the node started",
            Duration::from_secs(20),
            || async {
                let n = env.journal.rows_of_topic("obx").len();
                (n > before + 30)
                    .then_some(())
                    .ok_or(format!("{n} messages, {before} before"))
            },
        )
        .await;
        env.server.kill9();
        eprintln!("kill -9 number {k}, {:?} in", start.elapsed());
        env.start_server().await;
    }
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    writing.store(false, std::sync::atomic::Ordering::Release);
    let committed = writer.join().unwrap();
    wait_until("the outbox emptied", Duration::from_secs(30), || async {
        let left = app.rows().len();
        (left == 0).then_some(()).ok_or(format!("{left} rows left"))
    })
    .await;
    let bodies = drain(&env, "obx").await;
    let doubled: Vec<_> = bodies.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "rows pushed twice: {doubled:?}");
    let missing: Vec<_> = committed
        .iter()
        .filter(|b| !bodies.contains_key(*b))
        .collect();
    assert!(
        missing.is_empty(),
        "committed rows never delivered: {missing:?}"
    );
    assert_eq!(bodies.len(), committed.len(), "rolled-back rows delivered");
    eprintln!("{} rows committed and delivered once", committed.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_mid_ingestion_loses_and_doubles_nothing_postgres() {
    kill_9_mid_ingestion_loses_and_doubles_nothing(Backend::Postgres).await
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_mid_ingestion_loses_and_doubles_nothing_mariadb() {
    kill_9_mid_ingestion_loses_and_doubles_nothing(Backend::Mariadb).await
}

/// The journal's record of a row goes once the row's delete committed; a
/// record left behind (its pass cut short, its row gone since) goes with
/// retention's rounds, once the longer of `--retain-finished` and
/// `--retain-dead` passed.
#[tokio::test(flavor = "multi_thread")]
async fn records_of_pushed_rows_are_forgotten() {
    let app = App::create(Backend::Postgres);
    app.install();
    let env = Env::builder(Backend::Sqlite)
        .arg("--outbox-url")
        .arg(&app.db.url)
        .arg("--retain-finished")
        .arg("1s")
        .arg("--retain-dead")
        .arg("2s")
        .arg("--retention-interval")
        .arg("500ms")
        .start()
        .await;
    // A record left behind, an hour old.
    let mut conn = env.journal.conn();
    with_conn!(&mut conn, c => diesel::sql_query(
        "INSERT INTO outbox_done (source, row_id, row_created, message_id, done_time) \
         VALUES ('elsewhere', 1, 1, 1, 1)").execute(c))
    .unwrap();
    app.insert(&[json!({"topic": "obr", "body": "r"})], true);
    assert_eq!(drain(&env, "obr").await.len(), 1);
    wait_until("every record gone", Duration::from_secs(15), || async {
        let n = done_rows(&env.journal);
        (n == 0).then_some(()).ok_or(format!("{n} records"))
    })
    .await;
}

/// A row the journal's database will not store (a NUL in its body, which
/// PostgreSQL's text refuses) is marked refused; the rows beside it in the
/// same pass are pushed.
#[tokio::test(flavor = "multi_thread")]
async fn a_row_the_journal_refuses_is_marked_and_the_others_go() {
    let app = App::create(Backend::Postgres);
    app.install();
    let env = Env::builder(Backend::Postgres)
        .arg("--outbox-url")
        .arg(&app.db.url)
        .start()
        .await;
    app.insert(
        &[
            json!({"topic": "obp", "body": "before"}),
            json!({"topic": "obp", "body": "nul \u{0000} inside"}),
            json!({"topic": "obp", "body": "after"}),
        ],
        true,
    );
    let bodies = drain(&env, "obp").await;
    let want: HashMap<String, usize> = [("before".to_string(), 1), ("after".to_string(), 1)]
        .into_iter()
        .collect();
    assert_eq!(bodies, want);
    let left = app.rows();
    assert_eq!(left.len(), 1, "{left:?}");
    let error = left[0].error.as_deref().unwrap_or_default();
    assert!(error.starts_with("journal_refused:"), "{error}");
}

/// Rows whose ids were used before (the table truncated with its sequence
/// restarted) while records of the earlier rows were left behind (a node
/// killed after its push) are new rows: pushed, not taken for done.
#[tokio::test(flavor = "multi_thread")]
async fn a_row_id_used_again_is_a_new_row() {
    let app = App::create(Backend::Postgres);
    app.install();
    let first: Vec<String> = (0..5).map(|i| format!("first {i}")).collect();
    let mut env = killed_after_push(Backend::Postgres, &app, "obi", &first).await;
    let mut conn = app.conn();
    with_conn!(&mut conn, c => c.batch_execute("TRUNCATE delayq_outbox RESTART IDENTITY")).unwrap();
    // Rows of another millisecond than the first ones.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let second: Vec<Value> = (0..5)
        .map(|i| json!({"topic": "obi", "body": format!("second {i}")}))
        .collect();
    app.insert(&second, true);
    env.start_server().await;
    let bodies = drain(&env, "obi").await;
    let want: HashMap<String, usize> = (0..5)
        .flat_map(|i| [format!("first {i}"), format!("second {i}")])
        .map(|b| (b, 1))
        .collect();
    assert_eq!(bodies, want);
}

/// `delayq outbox install` refuses a table of the name that is not an
/// outbox, and says so; it changes nothing there.
#[test]
fn install_refuses_a_table_that_is_not_an_outbox() {
    let app = App::create(Backend::Postgres);
    let mut conn = app.conn();
    with_conn!(&mut conn, c => c.batch_execute(
        "CREATE TABLE delayq_outbox (id BIGINT PRIMARY KEY, payload TEXT); \
         INSERT INTO delayq_outbox VALUES (1, 'mine')"))
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(["outbox", "install", "--database-url", &app.db.url])
        .env_remove("DELAYQ_OUTBOX_URL")
        .env_remove("DELAYQ_OUTBOX_TABLE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("is not an outbox"), "{stderr}");
    let n: Vec<Count> = with_conn!(&mut conn, c => diesel::sql_query(
        "SELECT count(*)::bigint AS n FROM delayq_outbox WHERE payload = 'mine'").load(c))
    .unwrap();
    assert_eq!(n[0].n, 1);
    // No trigger put on it, no companion table made.
    let n: Vec<Count> = with_conn!(&mut conn, c => diesel::sql_query(
        "SELECT (SELECT count(*) FROM pg_trigger WHERE tgname = 'delayq_outbox_notify') \
              + (SELECT count(*) FROM pg_tables WHERE tablename = 'delayq_outbox_source') AS n").load(c))
    .unwrap();
    assert_eq!(n[0].n, 0);
}

/// While the journal takes no write (read-only), rows wait in the outbox,
/// unrefused, and the age of the oldest shows it; once it takes writes
/// again they are pushed, each once.
#[tokio::test(flavor = "multi_thread")]
async fn rows_wait_out_a_journal_that_takes_no_write() {
    let app = App::create(Backend::Postgres);
    app.install();
    let env = Env::builder(Backend::Postgres)
        .arg("--outbox-url")
        .arg(&app.db.url)
        .start()
        .await;
    assert!(env.journal.set_read_only(true));
    app.insert(
        &[
            json!({"topic": "obo", "body": "one"}),
            json!({"topic": "obo", "body": "two"}),
        ],
        true,
    );
    wait_until(
        "the oldest row shown waiting",
        Duration::from_secs(20),
        || async {
            let text = env.get_path("/metrics").await.text;
            let age = text
                .lines()
                .find_map(|l| l.strip_prefix("delayq_outbox_oldest_seconds "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0);
            (age > 2.0).then_some(()).ok_or(format!("oldest {age} s"))
        },
    )
    .await;
    let left = app.rows();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.iter().all(|r| r.error.is_none()), "refused: {left:?}");
    assert!(env.journal.set_read_only(false));
    // The passes back off while they fail (up to 10 s between tries).
    wait_until("the rows pushed", Duration::from_secs(30), || async {
        app.rows().is_empty().then_some(())
    })
    .await;
    let bodies = drain(&env, "obo").await;
    let want: HashMap<String, usize> = [("one".to_string(), 1), ("two".to_string(), 1)]
        .into_iter()
        .collect();
    assert_eq!(bodies, want);
}

//! The test's journal database: which backend, direct (diesel) reads of
//! what the server wrote, and the journal's status codes.

use std::path::Path;

use delayq::journal::connection::{JournalConn, JournalUrl};
use delayq::journal::models::{FlowRow, MessageRow};
use delayq::journal::schema::{message, message_flow};
use delayq::journal::store;
use delayq::message::MessageId;
use delayq::with_conn;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;

use super::random_hex;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Mariadb,
    Postgres,
}

pub fn mysql_base_url() -> String {
    std::env::var("DELAYQ_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://delayq:delayq@127.0.0.1:3306".to_string())
        .trim_end_matches('/')
        .to_string()
}

pub fn postgres_base_url() -> String {
    std::env::var("DELAYQ_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://delayq:delayq@127.0.0.1:5432".to_string())
        .trim_end_matches('/')
        .to_string()
}

/// A database of the test's own, dropped with it.
enum Owned {
    Mysql(String),
    Postgres(String),
}

/// The test's own journal database: a SQLite file in the test's directory,
/// or a fresh MariaDB or PostgreSQL database `delayq_test_<hex>` dropped at
/// the end.
pub struct Journal {
    /// The URL the server is given.
    pub url: String,
    parsed: JournalUrl,
    owned: Option<Owned>,
}

impl Journal {
    pub fn create(backend: Backend, dir: &Path) -> Journal {
        match backend {
            Backend::Sqlite => {
                let url = format!("sqlite://{}", dir.join("journal.db").display());
                Journal {
                    parsed: JournalUrl::parse(&url).unwrap(),
                    url,
                    owned: None,
                }
            }
            Backend::Mariadb => {
                let name = format!("delayq_test_{}", random_hex(16));
                admin_mysql(&format!("CREATE DATABASE {name}"));
                let url = format!("{}/{name}", mysql_base_url());
                Journal {
                    parsed: JournalUrl::parse(&url).unwrap(),
                    url,
                    owned: Some(Owned::Mysql(name)),
                }
            }
            Backend::Postgres => {
                let name = format!("delayq_test_{}", random_hex(16));
                admin_postgres(&format!("CREATE DATABASE {name}"));
                let url = format!("{}/{name}", postgres_base_url());
                Journal {
                    parsed: JournalUrl::parse(&url).unwrap(),
                    url,
                    owned: Some(Owned::Postgres(name)),
                }
            }
        }
    }

    /// A journal the test set up itself at `url` (a database of its own
    /// server, say): left as it is at the end.
    pub fn at(url: &str) -> Journal {
        Journal {
            url: url.to_string(),
            parsed: JournalUrl::parse(url).unwrap(),
            owned: None,
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

    /// The rows of those of `ids` in the journal, read at once.
    pub fn rows(&self, ids: &[String]) -> Vec<MessageRow> {
        let ids: Vec<i64> = ids.iter().map(|id| parse_id(id).0).collect();
        let mut conn = self.conn();
        with_conn!(&mut conn, c => ids
            .chunks(500)
            .flat_map(|chunk| {
                message::table
                    .filter(message::id.eq_any(chunk))
                    .select(MessageRow::as_select())
                    .load(c)
                    .expect("read message rows")
            })
            .collect())
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
    /// Every message of `topic`.
    pub fn rows_of_topic(&self, topic: &str) -> Vec<MessageRow> {
        let mut conn = self.conn();
        with_conn!(&mut conn, c => message::table
            .filter(message::topic.eq(topic))
            .select(MessageRow::as_select())
            .load(c)
            .expect("read messages by topic"))
    }

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

impl Journal {
    /// Whether [`Journal::set_read_only`] works here (a database of the
    /// test's own; on MariaDB once [`Journal::prepare_refusal`] ran).
    pub fn can_refuse_writes(&self) -> bool {
        self.owned.is_some()
    }

    /// MariaDB, whose read-only switch is the whole server's (shared with
    /// other tests): a trigger on every table of the test's database
    /// refuses each insert, update and delete while the one row of a
    /// MEMORY table says so. Created once, before faults (a trigger
    /// created later would wait for every open transaction, a partitioned
    /// node's too); the switch is that row, and a MEMORY table's row
    /// waits for no transaction. Nothing elsewhere.
    pub fn prepare_refusal(&self) {
        let Some(Owned::Mysql(_)) = &self.owned else {
            return;
        };
        #[derive(diesel::QueryableByName)]
        struct Table {
            #[diesel(sql_type = diesel::sql_types::Text)]
            t: String,
        }
        let mut conn = self.conn();
        let JournalConn::Mysql(c) = &mut conn else {
            unreachable!("a MariaDB journal")
        };
        let run = |c: &mut diesel::MysqlConnection, sql: &str| {
            c.batch_execute(sql)
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
        };
        run(
            c,
            "CREATE TABLE test_refuse (refuse TINYINT NOT NULL) ENGINE=MEMORY",
        );
        run(c, "INSERT INTO test_refuse VALUES (0)");
        let tables: Vec<Table> = diesel::sql_query(
            "SELECT table_name AS t FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE' \
             AND table_name NOT IN ('test_refuse', '__diesel_schema_migrations')",
        )
        .load(c)
        .expect("list the journal's tables");
        for Table { t } in tables {
            for op in ["INSERT", "UPDATE", "DELETE"] {
                run(
                    c,
                    &format!(
                        "CREATE TRIGGER `refuse_{}_{}` BEFORE {op} ON `{t}` FOR EACH ROW \
                         IF (SELECT refuse FROM test_refuse LIMIT 1) = 1 THEN \
                         SIGNAL SQLSTATE '45000' \
                         SET MESSAGE_TEXT = 'the database refuses writes (a test fault)'; \
                         END IF",
                        t,
                        op.to_lowercase()
                    ),
                );
            }
        }
    }

    /// Whether the database takes a write now (the node's own probe: a
    /// flow row inserted and rolled back).
    pub fn takes_writes(&self) -> bool {
        store::probe_write(&mut self.conn()).is_ok()
    }

    /// The database (the test's own) refuses every write, or takes them
    /// again. PostgreSQL: its new sessions start read-only, and its
    /// sessions open now are closed, so the node's pool opens new ones.
    /// MariaDB: the switch [`Journal::prepare_refusal`] made. False on
    /// SQLite.
    pub fn set_read_only(&self, on: bool) -> bool {
        if let Some(Owned::Mysql(_)) = &self.owned {
            let sql = format!("UPDATE test_refuse SET refuse = {}", u8::from(on));
            with_conn!(&mut self.conn(), c => c.batch_execute(&sql))
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            return true;
        }
        let Some(Owned::Postgres(name)) = &self.owned else {
            return false;
        };
        admin_postgres(&if on {
            format!("ALTER DATABASE {name} SET default_transaction_read_only = on")
        } else {
            format!("ALTER DATABASE {name} RESET default_transaction_read_only")
        });
        // The test role's sessions (an autovacuum worker on the database
        // is the server's, and not the test's to end).
        admin_postgres(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{name}' AND pid <> pg_backend_pid() \
             AND usename = current_user"
        ));
        true
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        match &self.owned {
            Some(Owned::Mysql(name)) => admin_mysql(&format!("DROP DATABASE IF EXISTS {name}")),
            // A server's pool may still hold a session a moment after it
            // stopped: those are closed with the database.
            Some(Owned::Postgres(name)) => {
                admin_postgres(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            }
            None => {}
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

/// Runs one statement as the test role on the `delayq` database.
fn admin_postgres(sql: &str) {
    let url = JournalUrl::Postgres(format!("{}/delayq", postgres_base_url()));
    let mut conn = JournalConn::establish(&url)
        .unwrap_or_else(|e| panic!("connect to PostgreSQL ({}): {e}", postgres_base_url()));
    with_conn!(&mut conn, c => c.batch_execute(sql)).unwrap_or_else(|e| panic!("{sql}: {e}"));
}

pub fn parse_id(id: &str) -> MessageId {
    id.parse().unwrap_or_else(|e| panic!("bad id {id}: {e}"))
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

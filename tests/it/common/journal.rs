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

fn mysql_base_url() -> String {
    std::env::var("DELAYQ_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://delayq:delayq@127.0.0.1:3306".to_string())
        .trim_end_matches('/')
        .to_string()
}

fn postgres_base_url() -> String {
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
    pub fn is_postgres(&self) -> bool {
        matches!(self.owned, Some(Owned::Postgres(_)))
    }

    /// PostgreSQL (a database of the test's own): the database refuses
    /// writes (its new sessions start read-only, and its sessions open now
    /// are closed, so the node's pool opens new ones), or takes them again
    /// (the same way). False elsewhere: MariaDB's read-only switch is the
    /// whole server's, shared with other tests.
    pub fn set_read_only(&self, on: bool) -> bool {
        let Some(Owned::Postgres(name)) = &self.owned else {
            return false;
        };
        admin_postgres(&if on {
            format!("ALTER DATABASE {name} SET default_transaction_read_only = on")
        } else {
            format!("ALTER DATABASE {name} RESET default_transaction_read_only")
        });
        admin_postgres(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{name}' AND pid <> pg_backend_pid()"
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

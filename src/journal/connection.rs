//! Connections to the journal database: MySQL/MariaDB or SQLite, chosen by
//! the URL, pooled with r2d2. Every query is written once with diesel's
//! generic DSL and run on either backend through [`with_conn!`].

use std::path::Path;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::mysql::MysqlConnection;
use diesel::sqlite::SqliteConnection;
use diesel::{Connection, ConnectionError};
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};

use crate::error::JournalError;

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// A journal URL, checked: `sqlite://PATH` or `mysql://USER:PASS@HOST:PORT/DB`.
#[derive(Debug, Clone, PartialEq)]
pub enum JournalUrl {
    Sqlite(String),
    Mysql(String),
}

impl JournalUrl {
    pub fn parse(url: &str) -> Result<Self, JournalError> {
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(JournalError::Config(format!(
                    "'{url}' names no file: use sqlite://PATH"
                )));
            }
            Ok(JournalUrl::Sqlite(path.to_string()))
        } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
            Ok(JournalUrl::Mysql(url.replacen("mariadb://", "mysql://", 1)))
        } else {
            Err(JournalError::Config(format!(
                "unsupported journal URL '{}': use sqlite://PATH or mysql://USER:PASS@HOST:PORT/DB",
                redact(url)
            )))
        }
    }

    /// How many writers may commit at once: SQLite has a single writer.
    pub fn parallel_writers(&self) -> usize {
        match self {
            JournalUrl::Sqlite(_) => 1,
            JournalUrl::Mysql(_) => 2,
        }
    }
}

/// The URL with its password hidden, for logs and errors.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let cred = &url[s + 3..at];
            match cred.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..s + 3], &cred[..c], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

pub enum JournalConn {
    Mysql(MysqlConnection),
    Sqlite(SqliteConnection),
}

/// Runs `$body` with `$c` bound to the concrete connection, whichever it is.
#[macro_export]
macro_rules! with_conn {
    ($conn:expr, $c:ident => $body:expr) => {
        match $conn {
            $crate::journal::connection::JournalConn::Mysql($c) => $body,
            $crate::journal::connection::JournalConn::Sqlite($c) => $body,
        }
    };
}

impl JournalConn {
    pub fn establish(url: &JournalUrl) -> Result<Self, ConnectionError> {
        match url {
            JournalUrl::Mysql(u) => Ok(JournalConn::Mysql(MysqlConnection::establish(u)?)),
            JournalUrl::Sqlite(path) => {
                if let Some(dir) = Path::new(path)
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty())
                {
                    std::fs::create_dir_all(dir).map_err(|e| {
                        ConnectionError::BadConnection(format!(
                            "cannot create {}: {e}",
                            dir.display()
                        ))
                    })?;
                }
                let mut c = SqliteConnection::establish(path)?;
                // WAL lets readers run beside the writer; FULL makes every
                // commit reach the disk before a push is answered.
                c.batch_execute(
                    "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA busy_timeout = 10000;",
                )
                .map_err(ConnectionError::CouldntSetupConfiguration)?;
                Ok(JournalConn::Sqlite(c))
            }
        }
    }

    pub fn run_migrations(&mut self) -> Result<usize, JournalError> {
        let applied = with_conn!(self, c => c.run_pending_migrations(MIGRATIONS).map(|v| v.len()))
            .map_err(|e| JournalError::Migration(e.to_string()))?;
        Ok(applied)
    }
}

pub struct Manager {
    url: JournalUrl,
}

impl r2d2::ManageConnection for Manager {
    type Connection = JournalConn;
    type Error = ConnectionError;

    fn connect(&self) -> Result<JournalConn, ConnectionError> {
        JournalConn::establish(&self.url)
    }

    fn is_valid(&self, conn: &mut JournalConn) -> Result<(), ConnectionError> {
        with_conn!(conn, c => c.batch_execute("SELECT 1"))
            .map_err(ConnectionError::CouldntSetupConfiguration)
    }

    fn has_broken(&self, _conn: &mut JournalConn) -> bool {
        false
    }
}

pub type Pool = r2d2::Pool<Manager>;

/// A pool that does not fail when the database is down at start-up: its
/// connections are made (and remade) when first needed.
pub fn pool(url: &JournalUrl, size: u32) -> Pool {
    r2d2::Pool::builder()
        .max_size(size)
        .min_idle(Some(0))
        .connection_timeout(Duration::from_secs(3))
        .test_on_check_out(true)
        .build_unchecked(Manager { url: url.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        assert_eq!(
            JournalUrl::parse("sqlite://data/x.db").unwrap(),
            JournalUrl::Sqlite("data/x.db".into())
        );
        assert_eq!(
            JournalUrl::parse("sqlite:///abs/x.db").unwrap(),
            JournalUrl::Sqlite("/abs/x.db".into())
        );
        assert!(matches!(
            JournalUrl::parse("mysql://u:p@h:1/d").unwrap(),
            JournalUrl::Mysql(_)
        ));
        assert!(JournalUrl::parse("postgres://x").is_err());
        assert!(JournalUrl::parse("sqlite://").is_err());
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact("mysql://u:secret@h:1/d"), "mysql://u:***@h:1/d");
        assert_eq!(redact("sqlite://x.db"), "sqlite://x.db");
    }
}

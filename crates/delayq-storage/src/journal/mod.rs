//! The journal's storage: every accepted message and every status change, in
//! SQLite, MySQL/MariaDB or PostgreSQL, so Redis can be rebuilt from it.
//!
//! This module is the storage layer only (connections, schema, queries,
//! migrations). The handle the rest of delayq writes through, with its group
//! commit and flow batching, is the server's `actors::journal::Journal`.

pub mod connection;
pub mod models;
pub mod schema;
pub mod store;
pub mod tls;

use std::time::Duration;

use crate::error::JournalError;
use crate::journal::connection::{JournalConn, JournalUrl};
pub use store::{DeleteDeadOutcome, InsertOutcome, NodeInfo, RequeueOutcome, StatusChange};

/// Whether a connection error is the database refusing who delayq says it
/// is or what it asks for: a wrong password, an unknown user or database.
/// Waiting does not mend it.
pub fn refused_login(error: &str) -> bool {
    [
        // PostgreSQL
        "password authentication failed",
        "no pg_hba.conf entry",
        "does not exist",
        // MySQL and MariaDB
        "Access denied for user",
        "Unknown database",
    ]
    .iter()
    .any(|s| error.contains(s))
}

/// Runs the embedded migrations, waiting up to `wait` for the database to
/// answer. Nodes of a cluster start together on a fresh database: when a
/// migration fails because another node is running it (MySQL's DDL is not
/// transactional, so a half-applied one shows as "already exists"), it is
/// tried again until the other node has recorded it.
pub fn migrate(url: &JournalUrl, wait: Duration) -> Result<usize, JournalError> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        match JournalConn::establish(url) {
            Ok(mut conn) => match conn.run_migrations() {
                Err(JournalError::Migration(e)) if std::time::Instant::now() < deadline => {
                    tracing::warn!(error = %e, "journal migration failed (another node migrating?); retrying");
                    std::thread::sleep(Duration::from_millis(500));
                }
                other => return other,
            },
            // A certificate delayq does not trust, or a server without the
            // TLS the URL asks for, is not mended by waiting.
            Err(e) if crate::tls::settled_refusal(&e.to_string()) => {
                return Err(JournalError::Connection(e))
            }
            // Nor is a wrong password or a database that does not exist.
            Err(e) if refused_login(&e.to_string()) => {
                return Err(JournalError::Connection(diesel::ConnectionError::BadConnection(format!(
                    "{e} (the database refused the URL's user, password or database name; waiting does not mend that: check the URL, or create the database and user as the book's operating chapter shows (docs/src/operating.md, The journal's databases))"
                ))))
            }
            Err(e) if std::time::Instant::now() < deadline => {
                tracing::warn!(error = %e, "journal database not reachable yet; retrying");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => return Err(JournalError::Connection(e)),
        }
    }
}

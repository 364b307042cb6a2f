//! Connections to the journal database: MySQL/MariaDB, PostgreSQL or
//! SQLite, chosen by the URL, pooled with r2d2. Every query is written once with diesel's
//! generic DSL and run on either backend through [`crate::with_conn!`].

use std::path::Path;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::mysql::MysqlConnection;
use diesel::pg::PgConnection;
use diesel::sqlite::SqliteConnection;
use diesel::{Connection, ConnectionError};
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};

use crate::error::JournalError;

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations");

/// A journal URL, checked: `sqlite://PATH`, `mysql://USER:PASS@HOST:PORT/DB`
/// or `postgres://USER:PASS@HOST:PORT/DB`.
#[derive(Clone, PartialEq)]
pub enum JournalUrl {
    Sqlite(String),
    Mysql(String),
    Postgres(String),
}

/// Shown without its password.
impl std::fmt::Debug for JournalUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JournalUrl::Sqlite(p) => f.debug_tuple("Sqlite").field(p).finish(),
            JournalUrl::Mysql(u) => f
                .debug_tuple("Mysql")
                .field(&crate::redact::url(u))
                .finish(),
            JournalUrl::Postgres(u) => f
                .debug_tuple("Postgres")
                .field(&crate::redact::url(u))
                .finish(),
        }
    }
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
            // An ssl_mode the client library cannot honour is refused here,
            // at start.
            super::tls::mysql_url(url)
                .map_err(|e| JournalError::Config(format!("{}: {e:#}", crate::redact::url(url))))?;
            Ok(JournalUrl::Mysql(url.replacen("mariadb://", "mysql://", 1)))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            // libpq reads the rest (sslmode=verify-full, sslrootcert=…)
            // itself.
            Ok(JournalUrl::Postgres(url.to_string()))
        } else {
            Err(JournalError::Config(format!(
                "unsupported journal URL '{}': use sqlite://PATH, mysql://USER:PASS@HOST:PORT/DB \
                 or postgres://USER:PASS@HOST:PORT/DB",
                crate::redact::url(url)
            )))
        }
    }

    /// How many writers may commit at once: SQLite has a single writer.
    pub fn parallel_writers(&self) -> usize {
        match self {
            JournalUrl::Sqlite(_) => 1,
            JournalUrl::Mysql(_) | JournalUrl::Postgres(_) => 2,
        }
    }
}

pub enum JournalConn {
    Mysql(MysqlConnection),
    Postgres(PgConnection),
    Sqlite(SqliteConnection),
}

/// Runs `$body` with `$c` bound to the concrete connection, whichever it is.
#[macro_export]
macro_rules! with_conn {
    ($conn:expr, $c:ident => $body:expr) => {
        match $conn {
            $crate::journal::connection::JournalConn::Mysql($c) => $body,
            $crate::journal::connection::JournalConn::Postgres($c) => $body,
            $crate::journal::connection::JournalConn::Sqlite($c) => $body,
        }
    };
}

impl JournalConn {
    pub fn establish(url: &JournalUrl) -> Result<Self, ConnectionError> {
        match url {
            JournalUrl::Mysql(u) => {
                let library_url = super::tls::mysql_url(u)
                    .map_err(|e| ConnectionError::BadConnection(format!("{e:#}")))?;
                let mut c = MysqlConnection::establish(&library_url).map_err(|e| match e {
                    ConnectionError::BadConnection(m) => {
                        ConnectionError::BadConnection(crate::tls::explain(&m))
                    }
                    other => other,
                })?;
                if super::tls::mysql_requires_tls(u) {
                    require_tls(&mut c)?;
                }
                Ok(JournalConn::Mysql(c))
            }
            JournalUrl::Postgres(u) => Ok(JournalConn::Postgres(PgConnection::establish(u)?)),
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
                // commit reach the disk before a push is answered. A batch of
                // 2,000 status changes dirties more pages than SQLite's
                // default 2 MB cache holds (it then spills them to the WAL
                // mid-transaction and reads them back): 32 MB a connection,
                // and reads through a memory map rather than a read() a page.
                c.batch_execute(
                    "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA busy_timeout = 10000; \
                     PRAGMA cache_size = -32768; PRAGMA mmap_size = 268435456; PRAGMA temp_store = MEMORY;",
                )
                .map_err(ConnectionError::CouldntSetupConfiguration)?;
                Ok(JournalConn::Sqlite(c))
            }
        }
    }

    pub fn run_migrations(&mut self) -> Result<usize, JournalError> {
        if let JournalConn::Postgres(c) = self {
            mediumtext_on_postgres(c)?;
        }
        let applied = with_conn!(self, c => c.run_pending_migrations(MIGRATIONS).map(|v| v.len()))
            .map_err(|e| JournalError::Migration(e.to_string()))?;
        match self {
            JournalConn::Mysql(c) => exact_keys_on_mysql(c)?,
            JournalConn::Postgres(c) => exact_keys_on_postgres(c)?,
            // Only faster, never required: a rebuild that fails (the disk
            // full, another process rebuilding) leaves the tables as they
            // were, and the next start tries again.
            JournalConn::Sqlite(c) => {
                if let Err(e) = rowid_keys_on_sqlite(c) {
                    tracing::warn!(error = %e, "journal: the tables keep their separate id index for now");
                }
            }
        }
        Ok(applied)
    }
}

#[derive(diesel::QueryableByName)]
struct SessionStatus {
    #[diesel(sql_type = diesel::sql_types::Text, column_name = "Value")]
    value: String,
}

/// With `ssl_mode=required` or `verify_ca`, a session the server let
/// through in plain text is closed rather than used.
fn require_tls(c: &mut MysqlConnection) -> Result<(), ConnectionError> {
    use diesel::RunQueryDsl;
    let cipher: Vec<SessionStatus> = diesel::sql_query("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .load(c)
        .map_err(ConnectionError::CouldntSetupConfiguration)?;
    match cipher.first() {
        Some(s) if !s.value.is_empty() => Ok(()),
        _ => Err(ConnectionError::BadConnection(
            "the database server accepted the connection without TLS, and the journal URL's ssl_mode requires it"
                .into(),
        )),
    }
}

#[derive(diesel::QueryableByName)]
struct SchemaSql {
    #[diesel(sql_type = diesel::sql_types::Text)]
    sql: String,
}

/// The key as the migrations declare it, and as SQLite makes it the rowid.
const BIGINT_KEY: &str = "id BIGINT NOT NULL PRIMARY KEY";
const ROWID_KEY: &str = "id INTEGER NOT NULL PRIMARY KEY";

/// SQLite stores a table whose key is declared `BIGINT PRIMARY KEY` by a
/// hidden rowid, with a unique index on the key beside it: every insert,
/// and every update by id, goes through both. Declared `INTEGER PRIMARY
/// KEY` the id is the rowid itself (64 bits, as a Snowflake needs). The
/// migrations are one SQL text for both backends (MySQL's INTEGER has 32
/// bits), so this SQLite-only step runs after them and rebuilds `message`
/// and `message_flow` once, with their indexes, one transaction a table; it
/// does nothing once they have it. The rebuild copies every row: on a
/// journal of millions it takes a while, once, and up to three times the
/// table's size on disk meanwhile (the copy, and the WAL).
fn rowid_keys_on_sqlite(c: &mut SqliteConnection) -> Result<(), JournalError> {
    use diesel::sql_types::Text;
    use diesel::RunQueryDsl;
    for table in ["message", "message_flow"] {
        let create: Vec<SchemaSql> =
            diesel::sql_query("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?")
                .bind::<Text, _>(table)
                .load(c)?;
        let Some(create) = create.first().filter(|t| t.sql.contains(BIGINT_KEY)) else {
            continue;
        };
        let indexes: Vec<SchemaSql> = diesel::sql_query(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL",
        )
        .bind::<Text, _>(table)
        .load(c)?;
        let named = format!("CREATE TABLE {table} ");
        if !create.sql.starts_with(&named) {
            // Written by some other tool (a quoted name): left as it is.
            tracing::warn!(
                table,
                "journal: table text not as the migrations write it; not rebuilt"
            );
            continue;
        }
        let rebuilt = create.sql.replacen(BIGINT_KEY, ROWID_KEY, 1).replacen(
            &named,
            &format!("CREATE TABLE {table}_rowid "),
            1,
        );
        // A journal just made by the migrations has nothing to copy: the
        // rebuild is part of making it, not news.
        let rows: Vec<SchemaSql> =
            diesel::sql_query(format!("SELECT 'x' AS sql FROM {table} LIMIT 1")).load(c)?;
        if rows.is_empty() {
            tracing::debug!(
                table,
                "journal: the new table gets its id as SQLite's rowid"
            );
        } else {
            tracing::info!(
                table,
                "journal: rebuilding the table with its id as SQLite's rowid (once)"
            );
        }
        c.transaction(|c| {
            c.batch_execute(&rebuilt)?;
            c.batch_execute(&format!(
                "INSERT INTO {table}_rowid SELECT * FROM {table}; \
                 DROP TABLE {table}; \
                 ALTER TABLE {table}_rowid RENAME TO {table};"
            ))?;
            for index in &indexes {
                c.batch_execute(&index.sql)?;
            }
            Ok::<_, diesel::result::Error>(())
        })?;
    }
    Ok(())
}

#[derive(diesel::QueryableByName)]
struct Collation {
    #[diesel(sql_type = diesel::sql_types::Text)]
    name: String,
}

/// Topics and bizKeys compare byte for byte, as on SQLite: `A-1`, `a-1` and
/// `A-1 ` are three keys. MySQL's and MariaDB's default collations ignore
/// case, and their `_bin` ones still ignore trailing spaces, so the key
/// columns get a binary collation without padding (MariaDB's
/// `utf8mb4_nopad_bin`, MySQL 8's `utf8mb4_0900_bin`). The migrations are
/// one SQL text for both backends; this MySQL-only step runs after them and
/// does nothing once the columns have it.
fn exact_keys_on_mysql(c: &mut MysqlConnection) -> Result<(), JournalError> {
    use diesel::RunQueryDsl;
    let available: Vec<Collation> = diesel::sql_query(
        "SELECT COLLATION_NAME AS name FROM information_schema.COLLATIONS \
         WHERE COLLATION_NAME IN ('utf8mb4_nopad_bin', 'utf8mb4_0900_bin') ORDER BY COLLATION_NAME DESC",
    )
    .load(c)?;
    let target = available
        .first()
        .map_or("utf8mb4_bin", |c| c.name.as_str())
        .to_string();
    let current: Vec<Collation> = diesel::sql_query(
        "SELECT COALESCE(COLLATION_NAME, '') AS name FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'message' \
         AND COLUMN_NAME IN ('topic', 'biz_key', 'live_biz_key')",
    )
    .load(c)?;
    if !current.is_empty() && current.iter().all(|col| col.name == target) {
        return Ok(());
    }
    tracing::info!(collation = %target, "journal: topic and bizKey columns compare exactly from now on");
    c.batch_execute(&format!(
        "ALTER TABLE message \
         MODIFY topic VARCHAR(128) CHARACTER SET utf8mb4 COLLATE {target} NOT NULL, \
         MODIFY biz_key VARCHAR(256) CHARACTER SET utf8mb4 COLLATE {target} NULL, \
         MODIFY live_biz_key VARCHAR(256) CHARACTER SET utf8mb4 COLLATE {target} NULL"
    ))?;
    Ok(())
}

/// The migrations are one SQL text for every backend, and name a body's
/// type `MEDIUMTEXT` (MySQL's `TEXT` holds 64 KB; SQLite takes any type
/// name). PostgreSQL has no such type: this step, before the migrations,
/// names its `text` so once per database (a domain, dropped by nothing).
fn mediumtext_on_postgres(c: &mut PgConnection) -> Result<(), JournalError> {
    c.batch_execute(
        "DO $$ BEGIN \
           IF NOT EXISTS (SELECT 1 FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace \
                          WHERE t.typname = 'mediumtext' AND n.nspname = current_schema()) THEN \
             CREATE DOMAIN mediumtext AS text; \
           END IF; \
         END $$",
    )?;
    Ok(())
}

/// Topics and bizKeys compare and sort byte for byte, as on SQLite.
/// PostgreSQL's `=` is exact under any deterministic collation, but its
/// order (a bizKey prefix's pages, the topic list) and the use of the
/// `(topic, live_biz_key)` index for a prefix follow the database's
/// collation (`en_US.UTF-8` sorts `a-1` before `A-2` and ignores
/// punctuation first): the key columns get the `C` collation. Runs after
/// the migrations, and does nothing once the columns have it.
fn exact_keys_on_postgres(c: &mut PgConnection) -> Result<(), JournalError> {
    use diesel::RunQueryDsl;
    let current: Vec<Collation> = diesel::sql_query(
        "SELECT COALESCE(collation_name, '') AS name FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = 'message' \
         AND column_name IN ('topic', 'biz_key', 'live_biz_key')",
    )
    .load(c)?;
    if !current.is_empty() && current.iter().all(|col| col.name == "C") {
        return Ok(());
    }
    tracing::info!("journal: topic and bizKey columns compare and sort byte for byte from now on");
    c.batch_execute(
        "ALTER TABLE message \
         ALTER COLUMN topic TYPE VARCHAR(128) COLLATE \"C\", \
         ALTER COLUMN biz_key TYPE VARCHAR(256) COLLATE \"C\", \
         ALTER COLUMN live_biz_key TYPE VARCHAR(256) COLLATE \"C\"",
    )?;
    Ok(())
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
        .connection_timeout(Duration::from_secs(1))
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
        assert!(matches!(
            JournalUrl::parse("postgres://u:p@h:1/d").unwrap(),
            JournalUrl::Postgres(_)
        ));
        assert!(matches!(
            JournalUrl::parse("postgresql://u:p@h:1/d?sslmode=verify-full").unwrap(),
            JournalUrl::Postgres(_)
        ));
        assert!(!format!(
            "{:?}",
            JournalUrl::parse("postgres://u:secret@h:1/d").unwrap()
        )
        .contains("secret"));
        assert!(JournalUrl::parse("pg://x").is_err());
        assert!(JournalUrl::parse("sqlite://").is_err());
        assert!(JournalUrl::parse("mysql://u:p@h:1/d?ssl_mode=verify_identity").is_err());
        let url = JournalUrl::parse("mysql://u:secret@h:1/d").unwrap();
        assert!(!format!("{url:?}").contains("secret"));
    }
}

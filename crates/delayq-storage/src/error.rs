//! The storage floor's errors: [`JournalError`] (the database) and
//! [`RedisError`] (Redis: the schedule and its scripts), each with what it
//! knows of its own store (a deadlock to retry, a refusal not to).

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("journal database error: {0}")]
    Database(#[from] diesel::result::Error),
    #[error("journal database unreachable: {0}")]
    Pool(#[from] r2d2::Error),
    #[error("cannot connect to the journal database: {0}")]
    Connection(#[from] diesel::ConnectionError),
    #[error("journal migration failed: {0}")]
    Migration(String),
    #[error("bad journal configuration: {0}")]
    Config(String),
    #[error("journal unavailable: {0}")]
    Unavailable(String),
    /// The actor in front of the journal did not answer.
    #[error("journal actor unreachable: {0}")]
    Mailbox(String),
    /// The database answers, yet refuses these rows (a constraint, a
    /// trigger): retrying will not help.
    #[error("the journal database refused the write: {0}")]
    Refused(String),
}

impl JournalError {
    /// The database answered and refused the statement itself (a
    /// constraint, a trigger, a value it will not take): trying the same
    /// rows again will not help. Not a refusal: connection trouble, a
    /// deadlock or a busy database, a missing worker id, an unreachable
    /// actor.
    pub fn is_refusal(&self) -> bool {
        use diesel::result::{DatabaseErrorKind, Error};
        match self {
            JournalError::Refused(_) => true,
            JournalError::Database(Error::DatabaseError(kind, info)) => {
                let transient = ["gone away", "Lost connection", "locked", "busy", "timeout"];
                !matches!(
                    kind,
                    DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::SerializationFailure
                ) && !self.is_deadlock()
                    && !transient.iter().any(|t| info.message().contains(t))
            }
            _ => false,
        }
    }

    /// The database rolled this transaction back to break a deadlock (or a
    /// serialization conflict): running it again is the cure.
    ///
    /// diesel names a serialization failure (PostgreSQL's SQLSTATE 40001,
    /// MySQL's error 1213) but not PostgreSQL's deadlock (40P01), which it
    /// reports as an unknown error: that one is known by its message.
    pub fn is_deadlock(&self) -> bool {
        use diesel::result::{DatabaseErrorKind, Error};
        match self {
            JournalError::Database(Error::DatabaseError(
                DatabaseErrorKind::SerializationFailure,
                _,
            )) => true,
            JournalError::Database(Error::DatabaseError(_, info)) => {
                let message = info.message();
                // MySQL/MariaDB; PostgreSQL's deadlock and serialization
                // failure.
                [
                    "Deadlock found",
                    "deadlock detected",
                    "could not serialize access",
                ]
                .iter()
                .any(|m| message.contains(m))
            }
            _ => false,
        }
    }
}

impl From<delayq_domain::ids::NoWorkerId> for JournalError {
    fn from(e: delayq_domain::ids::NoWorkerId) -> Self {
        JournalError::Unavailable(e.to_string())
    }
}

/// What went wrong with Redis: a command or script failed, a record did
/// not read, a scan was fenced off, or the actor in front of it was gone.
#[derive(Debug, thiserror::Error)]
pub enum RedisError {
    #[error("redis error: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("redis holds a record delayq cannot read: {0}")]
    BadRecord(String),
    /// Redis holds a higher epoch for the shard (`stored`) than the
    /// caller's.
    #[error("shard {shard} is fenced by a higher epoch ({stored}) than this owner's")]
    StaleEpoch { shard: u32, stored: i64 },
    /// What the caller meant to schedule was read too long ago (the
    /// process was frozen since, say): nothing was written; read again.
    #[error("refused to schedule what was read from the journal {age_ms} ms ago (this process may have been stopped meanwhile); read again")]
    StaleReading { age_ms: i64 },
    /// The actor in front of Redis did not answer.
    #[error("router unreachable: {0}")]
    Mailbox(String),
}

#[cfg(test)]
mod tests {
    use super::JournalError;
    use diesel::result::{DatabaseErrorKind, Error};

    fn database(kind: DatabaseErrorKind, message: &str) -> JournalError {
        JournalError::Database(Error::DatabaseError(kind, Box::new(message.to_string())))
    }

    #[test]
    fn deadlocks_and_serialization_failures_are_retried_not_refused() {
        for e in [
            // MySQL/MariaDB (error 1213, which diesel names).
            database(
                DatabaseErrorKind::SerializationFailure,
                "Deadlock found when trying to get lock; try restarting transaction",
            ),
            // PostgreSQL's deadlock (40P01): diesel does not name it.
            database(DatabaseErrorKind::Unknown, "deadlock detected"),
            // PostgreSQL's serialization failure (40001).
            database(
                DatabaseErrorKind::SerializationFailure,
                "could not serialize access due to concurrent update",
            ),
            database(
                DatabaseErrorKind::Unknown,
                "could not serialize access due to read/write dependencies among transactions",
            ),
        ] {
            assert!(e.is_deadlock(), "{e}");
            assert!(!e.is_refusal(), "{e}");
        }
    }

    #[test]
    fn constraints_are_refused_not_retried() {
        for e in [
            database(
                DatabaseErrorKind::UniqueViolation,
                "duplicate key value violates unique constraint \"ux_message_live_biz_key\"",
            ),
            database(
                DatabaseErrorKind::CheckViolation,
                "new row for relation \"message\" violates check constraint",
            ),
        ] {
            assert!(!e.is_deadlock(), "{e}");
            assert!(e.is_refusal(), "{e}");
        }
    }
}

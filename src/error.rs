//! Error policy.
//!
//! - Each layer has one `thiserror` enum: [`JournalError`] (database),
//!   [`ShardError`] (Redis and the shard actors), `ApiError` (HTTP, in
//!   `api::error`, which knows the others; nothing here knows HTTP). Lower
//!   errors convert into higher ones with `From`; `anyhow` is used only in
//!   `main` and start-up code, where an error ends the process.
//! - `ApiError` is what clients see: every variant maps to one HTTP status
//!   and one stable `error` code, rendered as `{"error": code, "message": text}`.
//!   Bad input is a 4xx and is rejected before anything is written.
//! - An outage (Redis, database) is a 503 with a code naming the service. A
//!   message is accepted (200) only once it is durable in the journal; status
//!   changes already accepted are queued and retried, never dropped.
//! - Messages for operators go to the log with the error's own text; secrets
//!   (database passwords) are redacted before they reach an error.

use serde::Serialize;

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
    #[error("journal actor unreachable: {0}")]
    Mailbox(#[from] actix::MailboxError),
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
    pub fn is_deadlock(&self) -> bool {
        use diesel::result::{DatabaseErrorKind, Error};
        match self {
            JournalError::Database(Error::DatabaseError(
                DatabaseErrorKind::SerializationFailure,
                _,
            )) => true,
            JournalError::Database(Error::DatabaseError(_, info)) => {
                info.message().contains("Deadlock found")
            }
            _ => false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("redis error: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("redis holds a record delayq cannot read: {0}")]
    BadRecord(String),
    /// Redis holds a higher epoch for the shard (`stored`) than the
    /// caller's.
    #[error("shard {shard} is fenced by a higher epoch ({stored}) than this owner's")]
    StaleEpoch { shard: u32, stored: i64 },
    #[error("router unreachable: {0}")]
    Mailbox(#[from] actix::MailboxError),
}

/// Declares [`ErrorCode`]: each code's variant and the name clients see.
macro_rules! error_codes {
    ($($variant:ident = $name:literal,)*) => {
        /// The stable `error` codes of the API: what a client branches on.
        /// One enum, so a code is never spelled two ways.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($variant,)*
        }

        impl ErrorCode {
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $name,)*
                }
            }
        }
    };
}

error_codes! {
    BizKeyTaken = "biz_key_taken",
    BodyTooLarge = "body_too_large",
    Forbidden = "forbidden",
    Internal = "internal",
    InvalidBatch = "invalid_batch",
    InvalidBizKey = "invalid_biz_key",
    InvalidBody = "invalid_body",
    InvalidCancel = "invalid_cancel",
    InvalidContentType = "invalid_content_type",
    InvalidDelay = "invalid_delay",
    InvalidField = "invalid_field",
    InvalidId = "invalid_id",
    InvalidIds = "invalid_ids",
    InvalidJson = "invalid_json",
    InvalidMaxAttempts = "invalid_max_attempts",
    InvalidMessage = "invalid_message",
    InvalidParameter = "invalid_parameter",
    InvalidPath = "invalid_path",
    InvalidPriority = "invalid_priority",
    InvalidReceipt = "invalid_receipt",
    InvalidRepeat = "invalid_repeat",
    InvalidRetry = "invalid_retry",
    InvalidShard = "invalid_shard",
    InvalidTopic = "invalid_topic",
    InvalidTtl = "invalid_ttl",
    JournalBehind = "journal_behind",
    JournalRefused = "journal_refused",
    JournalUnavailable = "journal_unavailable",
    MissingBody = "missing_body",
    MissingId = "missing_id",
    MissingTo = "missing_to",
    MissingTopic = "missing_topic",
    NoSuchNode = "no_such_node",
    NoSuchRoute = "no_such_route",
    NoSuchShard = "no_such_shard",
    NodeStalled = "node_stalled",
    NodeUnavailable = "node_unavailable",
    NotDead = "not_dead",
    NotFound = "not_found",
    NotInFlight = "not_in_flight",
    NotPossible = "not_possible",
    PayloadTooLarge = "payload_too_large",
    RedisUnavailable = "redis_unavailable",
    StaleDelivery = "stale_delivery",
    Unauthorized = "unauthorized",
    UnknownField = "unknown_field",
    UnknownParameter = "unknown_parameter",
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl utoipa::PartialSchema for ErrorCode {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(ErrorCode::ALL.iter().map(|c| c.as_str())))
            .description(Some("What went wrong, for a client to branch on"))
            .into()
    }
}

impl utoipa::ToSchema for ErrorCode {}

impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_are_distinct_snake_case_names() {
        let names: std::collections::HashSet<&str> =
            ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), ErrorCode::ALL.len());
        for n in names {
            assert!(
                !n.is_empty() && n.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{n}"
            );
        }
    }
}

//! Error policy.
//!
//! - Each layer has one `thiserror` enum: [`JournalError`] (database),
//!   [`ShardError`] (Redis and the shard actors), [`ApiError`] (HTTP). Lower
//!   errors convert into higher ones with `From`; `anyhow` is used only in
//!   `main` and start-up code, where an error ends the process.
//! - [`ApiError`] is what clients see: every variant maps to one HTTP status
//!   and one stable `error` code, rendered as `{"error": code, "message": text}`.
//!   Bad input is a 4xx and is rejected before anything is written.
//! - An outage (Redis, database) is a 503 with a code naming the service. A
//!   message is accepted (200) only once it is durable in the journal; status
//!   changes already accepted are queued and retried, never dropped.
//! - Messages for operators go to the log with the error's own text; secrets
//!   (database passwords) are redacted before they reach an error.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
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
    #[error("shard {0} is owned by a newer epoch elsewhere")]
    StaleEpoch(u32),
    #[error("router unreachable: {0}")]
    Mailbox(#[from] actix::MailboxError),
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed or breaks a rule of the contract.
    #[error("{message}")]
    Invalid { code: &'static str, message: String },
    #[error("{message}")]
    TooLarge { code: &'static str, message: String },
    #[error("{message}")]
    NotFound { code: &'static str, message: String },
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    #[error("this route needs an 'Authorization: Bearer TOKEN' header with the admin token")]
    Unauthorized,
    #[error("{0}")]
    RedisUnavailable(String),
    #[error("{0}")]
    JournalUnavailable(String),
    /// This node cannot take pushes right now (no worker id lease, not a
    /// cluster member in good standing).
    #[error("{0}")]
    NodeUnavailable(String),
    #[error("{0}")]
    JournalRefused(String),
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    pub fn invalid(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::Invalid {
            code,
            message: message.into(),
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Invalid { code, .. }
            | ApiError::TooLarge { code, .. }
            | ApiError::NotFound { code, .. }
            | ApiError::Conflict { code, .. } => code,
            ApiError::Unauthorized => "unauthorized",
            ApiError::RedisUnavailable(_) => "redis_unavailable",
            ApiError::JournalUnavailable(_) => "journal_unavailable",
            ApiError::NodeUnavailable(_) => "node_unavailable",
            ApiError::JournalRefused(_) => "journal_refused",
            ApiError::Internal(_) => "internal",
        }
    }
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
    message: String,
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::Invalid { .. } => StatusCode::BAD_REQUEST,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::RedisUnavailable(_)
            | ApiError::JournalUnavailable(_)
            | ApiError::NodeUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::JournalRefused(_) | ApiError::Internal(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    fn error_response(&self) -> HttpResponse {
        HttpResponse::build(self.status_code()).json(ErrorBody {
            error: self.code(),
            message: self.to_string(),
        })
    }
}

impl From<crate::message::Invalid> for ApiError {
    fn from(e: crate::message::Invalid) -> Self {
        if e.code == "body_too_large" {
            ApiError::TooLarge {
                code: e.code,
                message: e.message,
            }
        } else {
            ApiError::Invalid {
                code: e.code,
                message: e.message,
            }
        }
    }
}

impl From<JournalError> for ApiError {
    fn from(e: JournalError) -> Self {
        if let JournalError::Refused(_) = e {
            tracing::error!(error = %e, "the journal refused a write; answered with 500");
            return ApiError::JournalRefused(e.to_string());
        }
        tracing::warn!(error = %e, "journal error answered with 503");
        ApiError::JournalUnavailable(e.to_string())
    }
}

impl From<ShardError> for ApiError {
    fn from(e: ShardError) -> Self {
        match e {
            ShardError::BadRecord(m) => ApiError::Internal(m),
            other => {
                tracing::warn!(error = %other, "redis error answered with 503");
                ApiError::RedisUnavailable(other.to_string())
            }
        }
    }
}

impl From<crate::queue::QueueError> for ApiError {
    fn from(e: crate::queue::QueueError) -> Self {
        use crate::queue::QueueError as Q;
        match e {
            Q::Redis(e) => e.into(),
            Q::Journal(e) => e.into(),
            Q::NoWorkerId(e) => e.into(),
            Q::NotScheduled(m) => ApiError::RedisUnavailable(m),
            Q::NotFound(id) => ApiError::NotFound {
                code: "not_found",
                message: format!("no message {id}"),
            },
        }
    }
}

impl From<crate::ids::NoWorkerId> for ApiError {
    fn from(e: crate::ids::NoWorkerId) -> Self {
        ApiError::NodeUnavailable(e.to_string())
    }
}

impl From<crate::ids::NoWorkerId> for JournalError {
    fn from(e: crate::ids::NoWorkerId) -> Self {
        JournalError::Unavailable(e.to_string())
    }
}

impl From<crate::cluster::ClusterError> for ApiError {
    fn from(e: crate::cluster::ClusterError) -> Self {
        use crate::cluster::ClusterError as C;
        match e {
            C::NotPossible(m) => ApiError::Conflict {
                code: "not_possible",
                message: m,
            },
            C::NoSuchNode(n) => ApiError::NotFound {
                code: "no_such_node",
                message: format!("no live node '{n}'"),
            },
            C::NoSuchShard(s) => ApiError::NotFound {
                code: "no_such_shard",
                message: format!("no shard {s}"),
            },
            other => ApiError::NodeUnavailable(other.to_string()),
        }
    }
}

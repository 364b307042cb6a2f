//! What clients see when a request fails: [`ApiError`], one HTTP status
//! and one stable code per variant, rendered as `{"error": code,
//! "message": text}` ([`ErrorBody`]); the errors of the layers below
//! become one with `From` (see [`crate::error`] for the policy).

pub use crate::error::ErrorBody;
use crate::error::{ErrorCode, JournalError, RedisError};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed or breaks a rule of the contract.
    #[error("{message}")]
    Invalid { code: ErrorCode, message: String },
    #[error("{message}")]
    TooLarge { code: ErrorCode, message: String },
    #[error("{message}")]
    NotFound { code: ErrorCode, message: String },
    #[error("{message}")]
    Conflict { code: ErrorCode, message: String },
    #[error("this route needs an 'Authorization: Bearer TOKEN' header with the admin token")]
    Unauthorized,
    /// A route that shows message bodies: the read token does too.
    #[error("this route needs an 'Authorization: Bearer TOKEN' header with the read token (--read-token) or the admin token")]
    UnauthorizedReader,
    /// Refused whoever asks: the dashboard's actions when it is read-only,
    /// or from another site.
    #[error("{message}")]
    Forbidden { code: ErrorCode, message: String },
    #[error("{0}")]
    RedisUnavailable(String),
    #[error("{0}")]
    JournalUnavailable(String),
    /// This node cannot take pushes right now (no worker id lease, not a
    /// cluster member in good standing).
    #[error("{0}")]
    NodeUnavailable(String),
    /// This node has just resumed from a stall and refuses the requests it
    /// found waiting (see [`crate::stall`]).
    #[error("{0}")]
    Stalled(String),
    #[error("{0}")]
    JournalRefused(String),
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    pub fn invalid(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError::Invalid {
            code,
            message: message.into(),
        }
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            ApiError::Invalid { code, .. }
            | ApiError::TooLarge { code, .. }
            | ApiError::NotFound { code, .. }
            | ApiError::Conflict { code, .. }
            | ApiError::Forbidden { code, .. } => code.clone(),
            ApiError::Unauthorized | ApiError::UnauthorizedReader => ErrorCode::Unauthorized,
            ApiError::RedisUnavailable(_) => ErrorCode::RedisUnavailable,
            ApiError::JournalUnavailable(_) => ErrorCode::JournalUnavailable,
            ApiError::NodeUnavailable(_) => ErrorCode::NodeUnavailable,
            ApiError::Stalled(_) => ErrorCode::NodeStalled,
            ApiError::JournalRefused(_) => ErrorCode::JournalRefused,
            ApiError::Internal(_) => ErrorCode::Internal,
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::Invalid { .. } => StatusCode::BAD_REQUEST,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::Unauthorized | ApiError::UnauthorizedReader => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::RedisUnavailable(_)
            | ApiError::JournalUnavailable(_)
            | ApiError::NodeUnavailable(_)
            | ApiError::Stalled(_) => StatusCode::SERVICE_UNAVAILABLE,
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
        if e.code == ErrorCode::BodyTooLarge {
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

impl From<RedisError> for ApiError {
    fn from(e: RedisError) -> Self {
        match e {
            RedisError::BadRecord(m) => ApiError::Internal(m),
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
            Q::Stalled(m) => ApiError::Stalled(m),
            Q::NotFound(id) => ApiError::NotFound {
                code: ErrorCode::NotFound,
                message: format!("no message {id}"),
            },
            e @ Q::JournalBehind(_) => ApiError::Conflict {
                code: ErrorCode::JournalBehind,
                message: e.to_string(),
            },
        }
    }
}

impl From<crate::ids::NoWorkerId> for ApiError {
    fn from(e: crate::ids::NoWorkerId) -> Self {
        ApiError::NodeUnavailable(e.to_string())
    }
}

impl From<crate::cluster::ClusterError> for ApiError {
    fn from(e: crate::cluster::ClusterError) -> Self {
        use crate::cluster::ClusterError as C;
        match e {
            C::NotPossible(m) => ApiError::Conflict {
                code: ErrorCode::NotPossible,
                message: m,
            },
            C::NoSuchNode(n) => ApiError::NotFound {
                code: ErrorCode::NoSuchNode,
                message: format!("no live node '{n}'"),
            },
            C::NoSuchShard(s) => ApiError::NotFound {
                code: ErrorCode::NoSuchShard,
                message: format!("no shard {s}"),
            },
            other => ApiError::NodeUnavailable(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_answers_its_status_and_code() {
        let e = ApiError::invalid(ErrorCode::InvalidTopic, "x");
        assert_eq!(e.code(), ErrorCode::InvalidTopic);
        assert_eq!(e.error_response().status(), StatusCode::BAD_REQUEST);
        let e = ApiError::Stalled("resumed".into());
        assert_eq!(e.code(), ErrorCode::NodeStalled);
        assert_eq!(e.error_response().status(), StatusCode::SERVICE_UNAVAILABLE);
    }
}

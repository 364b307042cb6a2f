//! Errors: what the server refused, with its `{"error", "message"}`, and
//! what went wrong on the way to it.
//!
//! [`Error::is_retryable`] tells the two kinds apart that matter to a
//! caller: an outage (no connection, a timeout, a 5xx or 429), worth trying
//! again after a wait, and a refusal of the request itself, which would be
//! refused again.

/// Declares [`ErrorCode`]: each code's variant and the name the server sends.
macro_rules! error_codes {
    ($($variant:ident = $name:literal,)*) => {
        /// The server's stable `error` codes: what a caller branches on. A
        /// code this client does not know is kept as [`ErrorCode::Other`].
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $($variant,)*
            Other(String),
        }

        impl ErrorCode {
            pub fn as_str(&self) -> &str {
                match self {
                    $(ErrorCode::$variant => $name,)*
                    ErrorCode::Other(code) => code,
                }
            }
        }

        impl From<&str> for ErrorCode {
            fn from(code: &str) -> Self {
                match code {
                    $($name => ErrorCode::$variant,)*
                    other => ErrorCode::Other(other.to_string()),
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
    // From the shipped nginx: the node did not answer in time (504).
    NoAnswer = "no_answer",
    // From the shipped nginx: no node answered (502).
    NoNode = "no_node",
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

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with an error document.
    #[error("{method} {path}: {status} {code}: {message}")]
    Api {
        method: &'static str,
        path: String,
        status: u16,
        code: ErrorCode,
        message: String,
    },
    /// An error status without delayq's error document (a proxy in between,
    /// a server that is not delayq).
    #[error("{method} {path}: HTTP {status}: {body}")]
    Status {
        method: &'static str,
        path: String,
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// No answer: no connection, a timeout, a connection closed early.
    /// `what` says which; the error's source says how.
    #[error("{method} {path}: {what}")]
    Http {
        method: &'static str,
        path: String,
        what: &'static str,
        #[source]
        source: reqwest::Error,
    },
    /// A 2xx answer this client cannot read.
    #[error("{method} {path}: unexpected answer: {reason}")]
    Decode {
        method: &'static str,
        path: String,
        reason: String,
    },
    /// The base URL given to the client is not an http(s) URL.
    #[error("bad delayq URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    /// A CA file given with `tls_ca_file` cannot be used.
    #[error("CA file {path:?}: {reason}")]
    Tls {
        path: std::path::PathBuf,
        reason: String,
    },
}

/// What [`Error::Http`] says when the server's certificate is not signed
/// by a CA the client trusts: a setting to mend, not an outage.
pub const UNTRUSTED: &str =
    "the server's certificate is not trusted (give its CA with ClientBuilder::tls_ca_file)";

/// Whether the request failed on a certificate the client does not trust.
pub(crate) fn untrusted_certificate(e: &reqwest::Error) -> bool {
    let mut source: Option<&dyn std::error::Error> = Some(e);
    while let Some(s) = source {
        let text = s.to_string();
        if text.contains("invalid peer certificate") || text.contains("UnknownIssuer") {
            return true;
        }
        source = s.source();
    }
    false
}

impl Error {
    /// The server's error code, when it sent one.
    pub fn code(&self) -> Option<&ErrorCode> {
        match self {
            Error::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The HTTP status, when the server (or a proxy) answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } | Error::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// An outage rather than a refusal: no answer, a 5xx (503 while Redis or
    /// the journal is down), 429 or 408. The same request may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Http { what, .. } => *what != UNTRUSTED,
            Error::Api { status, .. } | Error::Status { status, .. } => {
                *status >= 500 || *status == 429 || *status == 408
            }
            Error::Decode { .. } | Error::Url { .. } | Error::Tls { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_ones_are_kept() {
        for name in ["not_in_flight", "journal_unavailable", "invalid_topic"] {
            let code = ErrorCode::from(name);
            assert!(!matches!(code, ErrorCode::Other(_)), "{name}");
            assert_eq!(code.as_str(), name);
        }
        assert_eq!(
            ErrorCode::from("new_code"),
            ErrorCode::Other("new_code".into())
        );
    }

    #[test]
    fn outages_are_retryable_refusals_are_not() {
        let api = |status| Error::Api {
            method: "POST",
            path: "/push".into(),
            status,
            code: ErrorCode::from("x"),
            message: String::new(),
        };
        assert!(api(503).is_retryable());
        assert!(api(500).is_retryable());
        assert!(api(429).is_retryable());
        assert!(!api(400).is_retryable());
        assert!(!api(409).is_retryable());
    }
}

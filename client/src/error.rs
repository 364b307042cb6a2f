//! Errors: what the server refused, with its `{"error", "message"}`, and
//! what went wrong on the way to it.
//!
//! [`Error::is_retryable`] tells the two kinds apart that matter to a
//! caller: an outage (no connection, a timeout, a 5xx or 429), worth trying
//! again after a wait, and a refusal of the request itself, which would be
//! refused again.

/// The server's stable `error` codes (and those of the nginx shipped in
/// front of a cluster): what a caller branches on. A code this client does
/// not know is kept as [`ErrorCode::Other`]. The server's own definition,
/// from `delayq-proto`.
pub use delayq_proto::ErrorCode;

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
    /// A message that cannot be an outbox row (see [`crate::outbox`]).
    #[error("not an outbox row: {reason}")]
    Outbox { reason: String },
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
            Error::Decode { .. } | Error::Url { .. } | Error::Tls { .. } | Error::Outbox { .. } => {
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

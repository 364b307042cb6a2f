//! The error document: a stable code and a sentence for people.

use serde::{Deserialize, Serialize};

/// Declares [`ErrorCode`]: each code's variant and its name on the wire,
/// those the delayq server sends and those of the nginx shipped in front
/// of it.
macro_rules! error_codes {
    (
        server { $($variant:ident = $name:literal,)* }
        proxy { $($(#[$doc:meta])* $pvariant:ident = $pname:literal,)* }
    ) => {
        /// The stable `error` codes of the API: what a client branches on.
        /// A code this version does not know is kept as [`ErrorCode::Other`].
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $($variant,)*
            $($(#[$doc])* $pvariant,)*
            /// A code this version does not know (a newer server).
            Other(String),
        }

        impl ErrorCode {
            /// Every code the delayq server sends, in name order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The codes of the nginx shipped in front of a cluster
            /// (`cluster/nginx`), sent when no node answers.
            pub const PROXY: &'static [ErrorCode] = &[$(ErrorCode::$pvariant,)*];

            /// The name on the wire: `invalid_topic`, `not_in_flight`, ...
            pub fn as_str(&self) -> &str {
                match self {
                    $(ErrorCode::$variant => $name,)*
                    $(ErrorCode::$pvariant => $pname,)*
                    ErrorCode::Other(code) => code,
                }
            }
        }

        impl From<&str> for ErrorCode {
            fn from(code: &str) -> Self {
                match code {
                    $($name => ErrorCode::$variant,)*
                    $($pname => ErrorCode::$pvariant,)*
                    other => ErrorCode::Other(other.to_string()),
                }
            }
        }
    };
}

error_codes! {
    server {
        BizKeyTaken = "biz_key_taken",
        BodyTooLarge = "body_too_large",
        Forbidden = "forbidden",
        HttpsRequired = "https_required",
        Internal = "internal",
        InvalidBatch = "invalid_batch",
        InvalidBizKey = "invalid_biz_key",
        InvalidBody = "invalid_body",
        InvalidCancel = "invalid_cancel",
        InvalidContentType = "invalid_content_type",
        InvalidDelay = "invalid_delay",
        InvalidField = "invalid_field",
        InvalidGroup = "invalid_group",
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
    proxy {
        /// The node did not answer in time (504).
        NoAnswer = "no_answer",
        /// No node answered (502).
        NoNode = "no_node",
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let code = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(ErrorCode::from(&*code))
    }
}

/// Every error answer: a stable code and a sentence for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub error: ErrorCode,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn codes_are_distinct_snake_case_names_that_read_back() {
        let all: Vec<&ErrorCode> = ErrorCode::ALL.iter().chain(ErrorCode::PROXY).collect();
        let names: std::collections::HashSet<&str> = all.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), all.len());
        for code in all {
            let name = code.as_str();
            assert!(
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{name}"
            );
            assert_eq!(&ErrorCode::from(name), code);
            assert_eq!(serde_json::to_value(code).unwrap(), json!(name));
        }
    }

    #[test]
    fn unknown_codes_are_kept() {
        let code: ErrorCode = serde_json::from_value(json!("new_code")).unwrap();
        assert_eq!(code, ErrorCode::Other("new_code".into()));
        assert_eq!(code.as_str(), "new_code");
        let body: ErrorBody =
            serde_json::from_str(r#"{"error": "not_in_flight", "message": "m"}"#).unwrap();
        assert_eq!(body.error, ErrorCode::NotInFlight);
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({"error": "not_in_flight", "message": "m"})
        );
    }
}

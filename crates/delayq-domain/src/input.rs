//! The rules every field a producer sends must pass before anything is
//! written: the limits, whole numbers, topics, and [`Invalid`], the
//! refusal with its code. The message ([`crate::message`]) and its retry
//! and repeat rules are read with them.

use serde_json::Value;

use delayq_proto::ErrorCode;

/// Longest accepted delay: ten years, in milliseconds.
pub const MAX_DELAY_MS: i64 = 10 * 365 * 24 * 3600 * 1000;
/// Default time a consumer has to ack a message.
pub const DEFAULT_TTL_MS: i64 = 30_000;
/// Accepted ack deadlines: 100 ms to one day.
pub const MIN_TTL_MS: i64 = 100;
pub const MAX_TTL_MS: i64 = 24 * 3600 * 1000;
pub const MAX_TOPIC_LEN: usize = 128;
pub const MAX_BIZ_KEY_LEN: usize = 256;

/// Why a producer's message was refused: a stable code and a sentence.
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid {
    pub code: ErrorCode,
    pub message: String,
}

pub(crate) fn invalid(code: ErrorCode, message: impl Into<String>) -> Invalid {
    Invalid {
        code,
        message: message.into(),
    }
}

pub fn valid_topic(topic: &str) -> bool {
    !topic.is_empty()
        && topic.len() <= MAX_TOPIC_LEN
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
}

/// A JSON number that is a whole number: `5` and `5.0` alike. JSON does not
/// tell them apart (nor does JSON Schema's `integer`), and clients that
/// compute a delay or a count in floating point send `5.0`. A fractional
/// number, or one a float cannot hold exactly (beyond 2^53), is not one.
pub fn whole_number(v: &Value) -> Option<i64> {
    const EXACT: f64 = (1u64 << 53) as f64;
    let Value::Number(n) = v else { return None };
    n.as_i64().or_else(|| {
        let f = n.as_f64()?;
        (f.fract() == 0.0 && f.abs() <= EXACT).then_some(f as i64)
    })
}

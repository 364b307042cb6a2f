//! What happens after a failed delivery (a nack without a delay, or an ack
//! deadline that passed): the message's retry policy and its attempt limit.
//!
//! The rule itself runs inside Redis (see `lua/retry.lua`), on the header of
//! the message's record; [`delay_after`] is the same rule in
//! Rust, for tests and documentation, and [`header`] is how a
//! policy is written into that header.

use serde_json::Value;

use crate::input::{whole_number, Invalid};
use delayq_proto::ErrorCode;
pub use delayq_proto::{Backoff, RetryPolicy, DEFAULT_MAX_ATTEMPTS};

pub const MAX_MAX_ATTEMPTS: i32 = 1000;
/// A `retry` without `delay` waits this long before the second delivery.
pub const DEFAULT_RETRY_DELAY_MS: i64 = 1_000;
/// A `retry` without `max` never waits longer than this.
pub const DEFAULT_RETRY_MAX_MS: i64 = 3_600_000;
/// The longest wait a policy (or a nack) may ask for: one day.
pub const MAX_RETRY_MS: i64 = 24 * 3600 * 1000;

/// The wait (ms) before delivery `attempts + 1`, after delivery
/// `attempts` (1 or more) failed. Without a policy: none, the message
/// is ready again at once.
pub fn delay_after(policy: Option<&RetryPolicy>, attempts: i32) -> i64 {
    let Some(p) = policy else { return 0 };
    match p.backoff {
        Backoff::Fixed => p.delay.min(p.max),
        Backoff::Exponential => {
            let doublings = (attempts.max(1) - 1).min(40) as u32;
            p.delay.saturating_mul(1i64 << doublings).min(p.max)
        }
    }
}

/// The policy as the record header carries it for the scripts:
/// `maxAttempts,kind,delay,max`, kind `n` (none), `f` or `e`.
pub fn header(policy: Option<&RetryPolicy>, max_attempts: i32) -> String {
    match policy {
        None => format!("{max_attempts},n,0,0"),
        Some(p) => {
            let kind = match p.backoff {
                Backoff::Fixed => 'f',
                Backoff::Exponential => 'e',
            };
            format!("{max_attempts},{kind},{},{}", p.delay, p.max)
        }
    }
}

fn invalid(message: String) -> Invalid {
    Invalid {
        code: ErrorCode::InvalidRetry,
        message,
    }
}

fn ms_field(
    obj: &serde_json::Map<String, Value>,
    name: &str,
    default: i64,
) -> Result<i64, Invalid> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => match whole_number(v) {
            Some(ms) if (0..=MAX_RETRY_MS).contains(&ms) => Ok(ms),
            _ => Err(invalid(format!(
                "retry.{name} must be 0 to {MAX_RETRY_MS} ms (one day), got {v}"
            ))),
        },
    }
}

/// Checks `retry` on a push.
pub fn parse_policy(value: &Value) -> Result<Option<RetryPolicy>, Invalid> {
    let obj = match value {
        Value::Null => return Ok(None),
        Value::Object(obj) => obj,
        _ => {
            return Err(invalid(
                "retry must be an object: {\"backoff\": \"fixed\"|\"exponential\", \"delay\": ms, \"max\": ms}".into(),
            ))
        }
    };
    if let Some(k) = obj
        .keys()
        .find(|k| !["backoff", "delay", "max"].contains(&k.as_str()))
    {
        return Err(invalid(format!(
            "unknown field 'retry.{k}'; retry has backoff, delay, max"
        )));
    }
    let backoff = match obj.get("backoff") {
        None | Some(Value::Null) => Backoff::Exponential,
        Some(Value::String(s)) if s == "fixed" => Backoff::Fixed,
        Some(Value::String(s)) if s == "exponential" => Backoff::Exponential,
        Some(other) => {
            return Err(invalid(format!(
                "retry.backoff must be \"fixed\" or \"exponential\", got {other}"
            )))
        }
    };
    let delay = ms_field(obj, "delay", DEFAULT_RETRY_DELAY_MS)?;
    let max = ms_field(obj, "max", DEFAULT_RETRY_MAX_MS.max(delay))?;
    if max < delay {
        return Err(invalid(format!(
            "retry.max ({max} ms) is below retry.delay ({delay} ms)"
        )));
    }
    Ok(Some(RetryPolicy {
        backoff,
        delay,
        max,
    }))
}

/// Checks `maxAttempts` on a push.
pub fn parse_max_attempts(value: Option<&Value>) -> Result<i32, Invalid> {
    match value {
        None | Some(Value::Null) => Ok(DEFAULT_MAX_ATTEMPTS),
        Some(v) => match whole_number(v) {
            Some(n) if (1..=MAX_MAX_ATTEMPTS as i64).contains(&n) => Ok(n as i32),
            _ => Err(Invalid {
                code: ErrorCode::InvalidMaxAttempts,
                message: format!("maxAttempts must be 1 to {MAX_MAX_ATTEMPTS}, got {v}"),
            }),
        },
    }
}

/// Where a failed delivery (a nack, or an ack deadline that passed) left a
/// message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Ready again at once.
    Ready,
    /// Scheduled again, due at this time (ms).
    Delaying { due: i64 },
    /// That was its last attempt.
    Dead,
    /// A recurring message whose series was cancelled during this
    /// delivery: it ends here.
    Stopped,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn waits_grow_and_cap() {
        let e = parse_policy(&json!({"delay": 100, "max": 1000}))
            .unwrap()
            .unwrap();
        let waits: Vec<i64> = (1..=6).map(|a| delay_after(Some(&e), a)).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(delay_after(Some(&e), 1000), 1000);
        let f = parse_policy(&json!({"backoff": "fixed", "delay": 250}))
            .unwrap()
            .unwrap();
        assert_eq!(delay_after(Some(&f), 9), 250);
        assert_eq!(delay_after(None, 3), 0);
    }

    #[test]
    fn defaults_and_header() {
        let p = parse_policy(&json!({})).unwrap().unwrap();
        assert_eq!(
            p,
            RetryPolicy {
                backoff: Backoff::Exponential,
                delay: DEFAULT_RETRY_DELAY_MS,
                max: DEFAULT_RETRY_MAX_MS
            }
        );
        assert_eq!(header(Some(&p), 3), "3,e,1000,3600000");
        assert_eq!(header(None, 16), "16,n,0,0");
        assert_eq!(parse_policy(&Value::Null).unwrap(), None);
        assert_eq!(parse_max_attempts(None).unwrap(), DEFAULT_MAX_ATTEMPTS);
    }

    #[test]
    fn refuses_bad_policies() {
        for bad in [
            json!(5),
            json!({"backoff": "linear"}),
            json!({"delay": -1}),
            json!({"delay": 1.5}),
            json!({"delay": 2000, "max": 1000}),
            json!({"max": MAX_RETRY_MS + 1}),
            json!({"tries": 3}),
        ] {
            assert_eq!(
                parse_policy(&bad).unwrap_err().code,
                ErrorCode::InvalidRetry,
                "{bad}"
            );
        }
        for bad in [json!(0), json!(1001), json!("3"), json!(2.5)] {
            assert!(parse_max_attempts(Some(&bad)).is_err(), "{bad}");
        }
    }
}

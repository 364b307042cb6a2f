//! Reading the values scripts and commands reply with.

use redis::Value;

use crate::error::RedisError;
use crate::message::{MessageId, Status};

pub fn ids_and_topics(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(items) => items.clone(),
        _ => Vec::new(),
    }
}

pub fn text(v: &Value) -> Result<String, RedisError> {
    redis::from_redis_value_ref::<String>(v).map_err(|e| RedisError::BadRecord(e.to_string()))
}

pub fn opt_score(v: &Value) -> Option<f64> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        Value::Int(i) => Some(*i as f64),
        Value::Double(d) => Some(*d),
        _ => None,
    }
}

/// The time a script ran (Redis's clock, ms), its reply's last element;
/// `default` when it is not there.
pub fn ran_at(reply: &mut Vec<Value>, default: i64) -> i64 {
    reply
        .pop()
        .and_then(|v| opt_score(&v))
        .map_or(default, |t| t as i64)
}

/// The status a script's place name (`in_flight`, `ready`, `delaying`)
/// stands for.
pub fn place_status(place: &str) -> Status {
    match place {
        "in_flight" => Status::Consuming,
        "delaying" => Status::Delaying,
        _ => Status::Ready,
    }
}

pub fn parse_id(v: &Value) -> Result<MessageId, RedisError> {
    text(v)?
        .parse()
        .map_err(|e: crate::ids::BadMessageId| RedisError::BadRecord(e.to_string()))
}

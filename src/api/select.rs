//! Which messages a bulk request names, for the routes that act on many
//! (`POST /cancel`, `POST /reschedule`): `{"ids": [...]}`, `{"id": ID}`
//! (one, as one writes it first), `{"topic",
//! "bizKey"}` (the live message holding the key) or `{"topic",
//! "bizKeyPrefix"}` (every live message whose key starts with it).

use serde_json::{Map, Value};

use super::parse::{batch_ids, check_topic};
use crate::api::error::ApiError;
use crate::error::ErrorCode;
use crate::message::{MessageId, MAX_BIZ_KEY_LEN};

/// The fields a selector is made of.
pub const FIELDS: [&str; 5] = ["ids", "id", "topic", "bizKey", "bizKeyPrefix"];

const USAGE: &str =
    "give {\"ids\": [...]}, {\"id\": ID}, {\"topic\", \"bizKey\"} or {\"topic\", \"bizKeyPrefix\"}";

pub enum Selector<'a> {
    Ids(Vec<MessageId>),
    BizKey { topic: &'a str, key: &'a str },
    Prefix { topic: &'a str, prefix: &'a str },
}

fn string_field<'a>(
    body: &'a Map<String, Value>,
    field: &str,
) -> Result<Option<&'a str>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ApiError::invalid(
            ErrorCode::InvalidField,
            format!("{field} must be a string, got {other}"),
        )),
    }
}

fn check_key(k: &str, field: &str) -> Result<(), ApiError> {
    if k.is_empty() || k.chars().count() > MAX_BIZ_KEY_LEN {
        Err(ApiError::invalid(
            ErrorCode::InvalidBizKey,
            format!("{field} must be 1 to {MAX_BIZ_KEY_LEN} characters"),
        ))
    } else {
        Ok(())
    }
}

/// The body as a JSON object holding only `fields` (`expected` words
/// them for the error), or the 400 that says why not.
pub fn object_of<'a>(
    body: &'a Value,
    fields: &[&str],
    expected: &str,
) -> Result<&'a Map<String, Value>, ApiError> {
    let Some(body) = body.as_object() else {
        return Err(ApiError::invalid(
            ErrorCode::InvalidBody,
            "the request body must be a JSON object",
        ));
    };
    if let Some(unknown) = body.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(ApiError::invalid(
            ErrorCode::UnknownField,
            format!("unknown field {unknown:?}; expected {expected}"),
        ));
    }
    Ok(body)
}

/// Reads the selector of `body` (whose other fields the caller checked):
/// up to `max_ids` ids, or a valid topic with a bizKey or a prefix. A body
/// that names none of them, or more than one, is refused with `usage`.
pub fn selector<'a>(
    body: &'a Map<String, Value>,
    max_ids: usize,
    usage: ErrorCode,
) -> Result<Selector<'a>, ApiError> {
    let topic = string_field(body, "topic")?;
    let key = string_field(body, "bizKey")?;
    let prefix = string_field(body, "bizKeyPrefix")?;
    match (body.get("ids"), body.get("id")) {
        (None, None) => {}
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                usage,
                "give id (one message) or ids (a list), not both",
            ))
        }
        (ids, id) => {
            if topic.is_some() || key.is_some() || prefix.is_some() {
                return Err(ApiError::invalid(usage, USAGE));
            }
            return Ok(Selector::Ids(match (ids, id) {
                (Some(ids), _) => batch_ids("ids", Some(ids), 1..=max_ids)?,
                (_, one) => batch_ids(
                    "id",
                    one.map(|v| Value::Array(vec![v.clone()])).as_ref(),
                    1..=1,
                )?,
            }));
        }
    }
    let Some(topic) = topic else {
        return Err(ApiError::invalid(usage, USAGE));
    };
    check_topic(topic)?;
    match (key, prefix) {
        (Some(key), None) => {
            check_key(key, "bizKey")?;
            Ok(Selector::BizKey { topic, key })
        }
        (None, Some(prefix)) => {
            check_key(prefix, "bizKeyPrefix")?;
            Ok(Selector::Prefix { topic, prefix })
        }
        _ => Err(ApiError::invalid(usage, USAGE)),
    }
}

/// The 404 of a request by bizKey that no live message holds.
pub fn no_holder(topic: &str, key: &str) -> ApiError {
    ApiError::NotFound {
        code: ErrorCode::NotFound,
        message: format!("no live message of topic {topic} holds bizKey {key:?}"),
    }
}

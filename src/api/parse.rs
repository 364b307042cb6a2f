//! A request's fields read one way for every route: ids, receipts,
//! topics, batches of ids or deliveries, and query parameters, each
//! refused with a 400 naming the field.

use std::collections::HashMap;

use actix_web::web;

use crate::api::error::ApiError;
use crate::error::ErrorCode;
use crate::message::MessageId;

pub(super) type Query = web::Query<HashMap<String, String>>;

pub(super) fn parse_id(raw: &str) -> Result<MessageId, ApiError> {
    raw.parse().map_err(|e: crate::ids::BadMessageId| {
        ApiError::invalid(ErrorCode::InvalidId, e.to_string())
    })
}

/// The ids of a batch request: a list of message ids (strings or numbers),
/// as many as `count` allows, no repeats.
pub(super) fn batch_ids(
    field: &str,
    value: Option<&serde_json::Value>,
    count: std::ops::RangeInclusive<usize>,
) -> Result<Vec<MessageId>, ApiError> {
    let (min, max) = (*count.start(), *count.end());
    let Some(value) = value else {
        return if min == 0 {
            Ok(Vec::new())
        } else {
            Err(ApiError::invalid(
                ErrorCode::InvalidIds,
                format!("{field} is required: a list of {min} to {max} message ids"),
            ))
        };
    };
    let Some(list) = value.as_array() else {
        return Err(ApiError::invalid(
            ErrorCode::InvalidIds,
            format!("{field} must be a list of message ids"),
        ));
    };
    if !count.contains(&list.len()) {
        return Err(ApiError::invalid(
            ErrorCode::InvalidIds,
            format!(
                "{field} must hold {min} to {max} message ids, not {}",
                list.len()
            ),
        ));
    }
    let mut ids = Vec::with_capacity(list.len());
    let mut seen = std::collections::HashSet::with_capacity(list.len());
    for v in list {
        let text = match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => match crate::message::whole_number(v) {
                Some(id) => id.to_string(),
                None => n.to_string(),
            },
            other => {
                return Err(ApiError::invalid(
                    ErrorCode::InvalidIds,
                    format!("{field} holds {other}, which is not a message id"),
                ))
            }
        };
        let id = parse_id(&text)?;
        if !seen.insert(id) {
            return Err(ApiError::invalid(
                ErrorCode::InvalidIds,
                format!("{field} names message {id} twice"),
            ));
        }
        ids.push(id);
    }
    Ok(ids)
}

/// A list of deliveries to ack or nack (`field` of a request body): each
/// element a message id (as [`batch_ids`] reads it), or
/// `{"id": ID, "receipt": RECEIPT}` naming the delivery by the receipt it
/// was handed out with. Each message once.
pub(super) fn batch_deliveries(
    field: &str,
    value: Option<&serde_json::Value>,
    count: std::ops::RangeInclusive<usize>,
) -> Result<Vec<(MessageId, Option<crate::message::Receipt>)>, ApiError> {
    let Some(serde_json::Value::Array(list)) = value else {
        return Ok(batch_ids(field, value, count)?
            .into_iter()
            .map(|id| (id, None))
            .collect());
    };
    let mut plain = Vec::with_capacity(list.len());
    let mut receipts = Vec::with_capacity(list.len());
    for v in list {
        match v {
            serde_json::Value::Object(o) => {
                if let Some(unknown) = o.keys().find(|k| *k != "id" && *k != "receipt") {
                    return Err(ApiError::invalid(
                        ErrorCode::InvalidIds,
                        format!("{field} holds an object with {unknown:?}; give {{\"id\", \"receipt\"}}"),
                    ));
                }
                let Some(id) = o.get("id") else {
                    return Err(ApiError::invalid(
                        ErrorCode::InvalidIds,
                        format!("{field} holds an object without \"id\""),
                    ));
                };
                plain.push(id.clone());
                receipts.push(match o.get("receipt") {
                    None => None,
                    Some(serde_json::Value::String(r)) => Some(parse_receipt(r)?),
                    Some(other) => {
                        return Err(ApiError::invalid(
                            ErrorCode::InvalidReceipt,
                            format!("a receipt is a string as handed out, not {other}"),
                        ))
                    }
                });
            }
            other => {
                plain.push(other.clone());
                receipts.push(None);
            }
        }
    }
    let ids = batch_ids(field, Some(&serde_json::Value::Array(plain)), count)?;
    Ok(ids.into_iter().zip(receipts).collect())
}

/// A receipt as handed out with a delivery.
pub(super) fn parse_receipt(text: &str) -> Result<crate::message::Receipt, ApiError> {
    text.parse()
        .map_err(|e: String| ApiError::invalid(ErrorCode::InvalidReceipt, e))
}

pub(super) fn check_topic(topic: &str) -> Result<(), ApiError> {
    if crate::message::valid_topic(topic) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            ErrorCode::InvalidTopic,
            format!(
                "topic must be 1 to {} characters of A-Z a-z 0-9 . _ : -",
                crate::message::MAX_TOPIC_LEN
            ),
        ))
    }
}

pub(super) fn bool_param(
    q: &HashMap<String, String>,
    name: &str,
    default: bool,
) -> Result<bool, ApiError> {
    match q.get(name).map(String::as_str) {
        None => Ok(default),
        Some("true") | Some("1") => Ok(true),
        Some("false") | Some("0") => Ok(false),
        Some(other) => Err(ApiError::invalid(
            ErrorCode::InvalidParameter,
            format!("{name} must be true or false, got '{other}'"),
        )),
    }
}

pub(super) fn int_param(
    q: &HashMap<String, String>,
    name: &str,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, ApiError> {
    match q.get(name) {
        None => Ok(default),
        Some(raw) => match raw.parse::<u64>() {
            Ok(v) if range.contains(&v) => Ok(v),
            _ => Err(ApiError::invalid(
                ErrorCode::InvalidParameter,
                format!(
                    "{name} must be a whole number from {} to {}, got '{raw}'",
                    range.start(),
                    range.end()
                ),
            )),
        },
    }
}

//! Cancelling: one message (`GET /delete?id=`) or many (`POST /cancel` by
//! ids, by bizKey, or by bizKey prefix). Every id gets a definite outcome.

use actix_web::{web, HttpRequest, HttpResponse};
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};

use super::body::JsonBody;
use super::{parse_id, AppState, Query};
use crate::actors::journal::LiveByBizKey;
use crate::error::ApiError;
use crate::journal::StatusChange;
use crate::message::{now_ms, MessageId, Status, MAX_BIZ_KEY_LEN};
use crate::redis::schedule::CancelResult;

/// Most ids in one `POST /cancel`.
pub const MAX_CANCEL_IDS: usize = 1_000;
/// Journal rows read per page when cancelling by bizKey prefix.
const PREFIX_PAGE: i64 = 500;
/// Cancels in flight at once within one request.
const CONCURRENCY: usize = 32;

/// What cancelling one message did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// Cancelled now, or before. A recurring message handed out when its
    /// series is cancelled counts too: that delivery is its last.
    Deleted,
    /// Handed to a consumer: left alone (it ends with the consumer's ack,
    /// or comes back after its ttl and can be cancelled then).
    InFlight,
    AlreadyConsumed,
    Dead,
    NotFound,
}

impl CancelOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CancelOutcome::Deleted => "deleted",
            CancelOutcome::InFlight => "in_flight",
            CancelOutcome::AlreadyConsumed => "already_consumed",
            CancelOutcome::Dead => "dead",
            CancelOutcome::NotFound => "not_found",
        }
    }
}

/// Cancels one message in Redis and, where Redis does not hold it, asks
/// the journal how its life went. Returns the outcome and, when it was
/// cancelled now, its delivery count for the journal.
async fn cancel_in_redis(
    state: &AppState,
    id: MessageId,
) -> Result<(CancelOutcome, Option<i32>), ApiError> {
    let redis = &state.redis;
    Ok(match redis.cancel(id, false).await? {
        CancelResult::InFlight => (CancelOutcome::InFlight, None),
        // A recurring message in flight: that delivery is its last.
        CancelResult::Deleted { attempts } | CancelResult::Stopped { attempts } => {
            (CancelOutcome::Deleted, Some(attempts))
        }
        // Redis does not hold it: the journal knows how its life ended.
        CancelResult::Absent => match state.journal.find(id).await? {
            None => (CancelOutcome::NotFound, None),
            Some((row, _)) => match row.status() {
                Status::Consumed => (CancelOutcome::AlreadyConsumed, None),
                Status::Deleted => (CancelOutcome::Deleted, None),
                Status::Dead => (CancelOutcome::Dead, None),
                Status::Consuming => (CancelOutcome::InFlight, None),
                // Live, yet not in Redis: its push has not reached Redis yet
                // (or met an outage), or Redis lost it. Cancel again with a
                // tombstone, so neither that push nor a restore brings it back.
                Status::WaitPut | Status::Delaying | Status::Ready => {
                    match redis.cancel(id, true).await? {
                        CancelResult::InFlight => (CancelOutcome::InFlight, None),
                        CancelResult::Deleted { attempts } | CancelResult::Stopped { attempts } => {
                            (CancelOutcome::Deleted, Some(attempts))
                        }
                        CancelResult::Absent => (CancelOutcome::Deleted, Some(row.attempts)),
                    }
                }
            },
        },
    })
}

/// Cancels messages, a few at a time, and answers once the journal
/// committed every one cancelled now (one commit for all of them).
pub async fn cancel_many(
    state: &AppState,
    ids: &[MessageId],
) -> Result<Vec<CancelOutcome>, ApiError> {
    let results: Vec<Result<(CancelOutcome, Option<i32>), ApiError>> = stream::iter(ids)
        .map(|&id| cancel_in_redis(state, id))
        .buffered(CONCURRENCY)
        .collect()
        .await;
    let keys = state.redis.keys();
    let now = now_ms();
    let mut outcomes = Vec::with_capacity(ids.len());
    let mut changes = Vec::new();
    let mut first_error = None;
    for (&id, r) in ids.iter().zip(results) {
        match r {
            Ok((outcome, attempts)) => {
                if let Some(attempts) = attempts {
                    changes.push(StatusChange {
                        id,
                        status: Status::Deleted,
                        attempts: Some(attempts),
                        at: now,
                        due: None,
                        shard: keys.delay(keys.shard_of(id)).into(),
                        occurrence: None,
                    });
                }
                outcomes.push(outcome);
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    // What was cancelled in Redis reaches the journal even when another id
    // met an outage; cancelling again finds each one finished.
    state.journal.record_durable(changes).await?;
    match first_error {
        Some(e) => Err(e),
        None => Ok(outcomes),
    }
}

/// `GET /delete?id=ID`: cancel one message.
pub async fn delete(
    state: web::Data<AppState>,
    req: HttpRequest,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    let raw = q
        .get("id")
        .ok_or_else(|| ApiError::invalid("missing_id", "give the message id: /delete?id=ID"))?;
    let id = parse_id(raw)?;
    match cancel_many(&state, &[id]).await?[0] {
        // An unknown id is a client error (404), still with a definite result.
        CancelOutcome::NotFound => Ok(HttpResponse::NotFound().json(json!({
            "error": "not_found",
            "message": format!("no message {id}"),
            "id": id,
            "result": "not_found",
        }))),
        outcome => Ok(HttpResponse::Ok().json(json!({ "id": id, "result": outcome.as_str() }))),
    }
}

fn string_field<'a>(
    body: &'a serde_json::Map<String, Value>,
    field: &str,
) -> Result<Option<&'a str>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ApiError::invalid(
            "invalid_field",
            format!("{field} must be a string, got {other}"),
        )),
    }
}

fn report(ids: &[MessageId], outcomes: &[CancelOutcome]) -> Value {
    let deleted = outcomes
        .iter()
        .filter(|o| **o == CancelOutcome::Deleted)
        .count();
    let results: Vec<Value> = ids
        .iter()
        .zip(outcomes)
        .map(|(id, o)| json!({ "id": id, "result": o.as_str() }))
        .collect();
    json!({ "deleted": deleted, "results": results })
}

/// `POST /cancel`: `{"ids": [...]}` (1 to 1000), `{"topic", "bizKey"}` (the
/// live message holding that key) or `{"topic", "bizKeyPrefix"}` (every live
/// message whose key starts with it). Ids and bizKey answer a result per id;
/// a prefix answers counts per outcome.
pub async fn cancel(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: JsonBody,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    let Some(body) = body.as_object() else {
        return Err(ApiError::invalid(
            "invalid_body",
            "the request body must be a JSON object",
        ));
    };
    let fields = ["ids", "topic", "bizKey", "bizKeyPrefix"];
    if let Some(unknown) = body.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(ApiError::invalid(
            "unknown_field",
            format!(
                "unknown field {unknown:?}; expected ids, or topic with bizKey or bizKeyPrefix"
            ),
        ));
    }
    let topic = string_field(body, "topic")?;
    let key = string_field(body, "bizKey")?;
    let prefix = string_field(body, "bizKeyPrefix")?;
    let usage = "give {\"ids\": [...]}, {\"topic\", \"bizKey\"} or {\"topic\", \"bizKeyPrefix\"}";
    if body.contains_key("ids") {
        if topic.is_some() || key.is_some() || prefix.is_some() {
            return Err(ApiError::invalid("invalid_cancel", usage));
        }
        let ids = super::batch_ids("ids", body.get("ids"), 1..=MAX_CANCEL_IDS)?;
        let outcomes = cancel_many(&state, &ids).await?;
        return Ok(HttpResponse::Ok().json(report(&ids, &outcomes)));
    }
    let Some(topic) = topic else {
        return Err(ApiError::invalid("invalid_cancel", usage));
    };
    super::check_topic(topic)?;
    let check_key = |k: &str, field: &str| {
        if k.is_empty() || k.chars().count() > MAX_BIZ_KEY_LEN {
            Err(ApiError::invalid(
                "invalid_biz_key",
                format!("{field} must be 1 to {MAX_BIZ_KEY_LEN} characters"),
            ))
        } else {
            Ok(())
        }
    };
    match (key, prefix) {
        (Some(key), None) => {
            check_key(key, "bizKey")?;
            let (rows, _) = state
                .journal
                .live_by_biz_key(LiveByBizKey::Exact {
                    topic: topic.to_string(),
                    key: key.to_string(),
                })
                .await?;
            let ids: Vec<MessageId> = rows.iter().map(|r| MessageId(r.id)).collect();
            let outcomes = cancel_many(&state, &ids).await?;
            Ok(HttpResponse::Ok().json(report(&ids, &outcomes)))
        }
        (None, Some(prefix)) => {
            check_key(prefix, "bizKeyPrefix")?;
            let mut counts = serde_json::Map::new();
            let mut matched = 0;
            let mut after = 0;
            loop {
                let (rows, next) = state
                    .journal
                    .live_by_biz_key(LiveByBizKey::Prefix {
                        topic: topic.to_string(),
                        prefix: prefix.to_string(),
                        after,
                        limit: PREFIX_PAGE,
                    })
                    .await?;
                let ids: Vec<MessageId> = rows.iter().map(|r| MessageId(r.id)).collect();
                matched += ids.len();
                for o in cancel_many(&state, &ids).await? {
                    let n = counts.entry(o.as_str()).or_insert(json!(0));
                    *n = json!(n.as_u64().unwrap_or(0) + 1);
                }
                match next {
                    Some(n) => after = n,
                    None => break,
                }
            }
            Ok(HttpResponse::Ok().json(json!({ "matched": matched, "results": counts })))
        }
        _ => Err(ApiError::invalid("invalid_cancel", usage)),
    }
}

//! `POST /reschedule`: messages not handed out yet move to a new due time
//! and/or priority and keep their ids. The rules are in
//! [`crate::queue::reschedule`].

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::Value;

use super::body::JsonBody;
use super::schema::{
    CancelCounts, RescheduleEach, RescheduleOne, RescheduleReply, RescheduleRequest,
};
use super::AppState;
use crate::api::error::{ApiError, ErrorBody};
use crate::error::ErrorCode;
use crate::message::{now_ms, parse_new_schedule, MessageId, MAX_BIZ_KEY_LEN};
use crate::queue::reschedule::{self, MoveOutcome, NewSchedule};

pub const MAX_RESCHEDULE_IDS: usize = 1_000;

const FIELDS: &[&str] = &[
    "ids",
    "topic",
    "bizKey",
    "bizKeyPrefix",
    "delay",
    "deliverAt",
    "priority",
];

fn string_field<'a>(
    body: &'a serde_json::Map<String, Value>,
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

fn report(ids: &[MessageId], outcomes: &[MoveOutcome]) -> RescheduleReply {
    let results: Vec<RescheduleOne> = ids
        .iter()
        .zip(outcomes)
        .map(|(id, o)| {
            let (due_time, priority) = match o {
                MoveOutcome::Rescheduled { due, priority } => (Some(*due), Some(*priority)),
                _ => (None, None),
            };
            RescheduleOne {
                id: *id,
                result: o.as_str(),
                due_time,
                priority,
            }
        })
        .collect();
    let rescheduled = results.iter().filter(|r| r.due_time.is_some()).count();
    RescheduleReply::Each(RescheduleEach {
        rescheduled,
        results,
    })
}

/// `POST /reschedule`: `{"ids": [...]}`, `{"topic", "bizKey"}` or
/// `{"topic", "bizKeyPrefix"}` with `delay` or `deliverAt` and/or
/// `priority`. A message keeps its id, body and attempts; one handed out
/// is left alone (`in_flight`).
#[utoipa::path(
    post,
    path = "/reschedule",
    tag = "produce",
    request_body = RescheduleRequest,
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "By ids or bizKey: a result per message; by prefix: how many matched and the count per outcome", body = RescheduleReply),
        (status = 400, description = "A bad body, id, topic, key, time or priority", body = ErrorBody),
        (status = 401, description = "The admin token is set and was not given", body = ErrorBody),
        (status = 413, description = "The request is too large", body = ErrorBody),
        (status = 503, description = "Redis or the journal unavailable: the messages not answered for may have moved; send it again", body = ErrorBody),
    ),
)]
pub async fn reschedule(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: JsonBody,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    let Some(body) = body.as_object() else {
        return Err(ApiError::invalid(
            ErrorCode::InvalidBody,
            "the request body must be a JSON object",
        ));
    };
    if let Some(unknown) = body.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(ApiError::invalid(
            ErrorCode::UnknownField,
            format!(
                "unknown field {unknown:?}; expected ids, or topic with bizKey or bizKeyPrefix, and delay or deliverAt and/or priority"
            ),
        ));
    }
    let (due, priority) = parse_new_schedule(body, now_ms())?;
    let to = NewSchedule { due, priority };
    let topic = string_field(body, "topic")?;
    let key = string_field(body, "bizKey")?;
    let prefix = string_field(body, "bizKeyPrefix")?;
    let usage = "give {\"ids\": [...]}, {\"topic\", \"bizKey\"} or {\"topic\", \"bizKeyPrefix\"}";
    if body.contains_key("ids") {
        if topic.is_some() || key.is_some() || prefix.is_some() {
            return Err(ApiError::invalid(ErrorCode::InvalidBody, usage));
        }
        let ids = super::batch_ids("ids", body.get("ids"), 1..=MAX_RESCHEDULE_IDS)?;
        let outcomes = reschedule::reschedule_many(&state.queue, &ids, to).await?;
        return Ok(HttpResponse::Ok().json(report(&ids, &outcomes)));
    }
    let Some(topic) = topic else {
        return Err(ApiError::invalid(ErrorCode::InvalidBody, usage));
    };
    super::check_topic(topic)?;
    let check_key = |k: &str, field: &str| {
        if k.is_empty() || k.chars().count() > MAX_BIZ_KEY_LEN {
            Err(ApiError::invalid(
                ErrorCode::InvalidBizKey,
                format!("{field} must be 1 to {MAX_BIZ_KEY_LEN} characters"),
            ))
        } else {
            Ok(())
        }
    };
    match (key, prefix) {
        (Some(key), None) => {
            check_key(key, "bizKey")?;
            let (ids, outcomes): (Vec<MessageId>, Vec<MoveOutcome>) =
                reschedule::reschedule_biz_key(&state.queue, topic, key, to)
                    .await?
                    .into_iter()
                    .unzip();
            Ok(HttpResponse::Ok().json(report(&ids, &outcomes)))
        }
        (None, Some(prefix)) => {
            check_key(prefix, "bizKeyPrefix")?;
            let (matched, counts) =
                reschedule::reschedule_biz_key_prefix(&state.queue, topic, prefix, to).await?;
            Ok(
                HttpResponse::Ok().json(RescheduleReply::Counts(CancelCounts {
                    matched: matched as u64,
                    results: counts,
                })),
            )
        }
        _ => Err(ApiError::invalid(ErrorCode::InvalidBody, usage)),
    }
}

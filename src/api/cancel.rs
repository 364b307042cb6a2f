//! Cancelling's routes: one message (`GET /delete?id=`) or many (`POST
//! /cancel` by ids, by bizKey, or by bizKey prefix). The rules are in
//! [`crate::queue::cancel`].

use actix_web::{web, HttpRequest, HttpResponse};
use delayq_proto as proto;
use serde_json::Value;

use super::body::JsonBody;
use super::schema::{
    CancelCounts, CancelEach, CancelOne, CancelReply, CancelRequest, DeleteNotFound,
};
use super::{parse_id, AppState, Query};
use crate::api::error::ApiError;
use crate::api::error::ErrorBody;
use crate::error::ErrorCode;
use crate::message::{MessageId, MAX_BIZ_KEY_LEN};
use crate::queue::cancel::{self, CancelOutcome};

/// Most ids in one `POST /cancel`.
pub const MAX_CANCEL_IDS: usize = 1_000;

/// `GET /delete?id=ID`: cancel one message.
#[utoipa::path(
    get,
    path = "/delete",
    tag = "cancel",
    params(("id" = MessageId, Query)),
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "A definite outcome: `deleted`, `in_flight` (handed to a consumer: left alone), `already_consumed` or `dead`", body = CancelOne),
        (status = 400, description = "No id, or a bad one", body = ErrorBody),
        (status = 401, description = "The admin token is set and was not given", body = ErrorBody),
        (status = 403, description = "From another site, as the browser says (`forbidden`): this route changes data", body = ErrorBody),
        (status = 404, description = "No such message (`not_found`, with the id and result)", body = DeleteNotFound),
        (status = 503, description = "Redis or the journal unavailable", body = ErrorBody),
    ),
)]
pub async fn delete(
    state: web::Data<AppState>,
    req: HttpRequest,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    super::refuse_cross_site(&req)?;
    let raw = q.get("id").ok_or_else(|| {
        ApiError::invalid(ErrorCode::MissingId, "give the message id: /delete?id=ID")
    })?;
    let id = parse_id(raw)?;
    match state.queue.cancel_one(id).await? {
        // An unknown id is a client error (404), still with a definite result.
        CancelOutcome::NotFound => Ok(HttpResponse::NotFound().json(DeleteNotFound {
            error: ErrorCode::NotFound,
            message: format!("no message {id}"),
            id,
            result: proto::CancelOutcome::NotFound,
        })),
        outcome => Ok(HttpResponse::Ok().json(CancelOne {
            id,
            result: outcome.into(),
        })),
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
            ErrorCode::InvalidField,
            format!("{field} must be a string, got {other}"),
        )),
    }
}

fn report(ids: &[MessageId], outcomes: &[CancelOutcome]) -> CancelReply {
    let deleted = outcomes
        .iter()
        .filter(|o| **o == CancelOutcome::Deleted)
        .count();
    let results = ids
        .iter()
        .zip(outcomes)
        .map(|(id, o)| CancelOne {
            id: *id,
            result: (*o).into(),
        })
        .collect();
    CancelReply::Each(CancelEach { deleted, results })
}

/// `POST /cancel`: `{"ids": [...]}` (1 to 1000), `{"topic", "bizKey"}` (the
/// live message holding that key) or `{"topic", "bizKeyPrefix"}` (every live
/// message whose key starts with it). Ids and bizKey answer a result per id;
/// a prefix answers counts per outcome.
#[utoipa::path(
    post,
    path = "/cancel",
    tag = "cancel",
    request_body = CancelRequest,
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "By ids or bizKey: a result per message; by prefix: how many matched and the count per outcome", body = CancelReply),
        (status = 400, description = "A bad body, id, topic or key", body = ErrorBody),
        (status = 401, description = "The admin token is set and was not given", body = ErrorBody),
        (status = 413, description = "The request is too large", body = ErrorBody),
        (status = 503, description = "Redis or the journal unavailable", body = ErrorBody),
    ),
)]
pub async fn cancel(
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
    let fields = ["ids", "topic", "bizKey", "bizKeyPrefix"];
    if let Some(unknown) = body.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(ApiError::invalid(
            ErrorCode::UnknownField,
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
            return Err(ApiError::invalid(ErrorCode::InvalidCancel, usage));
        }
        let ids = super::batch_ids("ids", body.get("ids"), 1..=MAX_CANCEL_IDS)?;
        let outcomes = cancel::cancel_many(&state.queue, &ids).await?;
        return Ok(HttpResponse::Ok().json(report(&ids, &outcomes)));
    }
    let Some(topic) = topic else {
        return Err(ApiError::invalid(ErrorCode::InvalidCancel, usage));
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
            let (ids, outcomes): (Vec<MessageId>, Vec<CancelOutcome>) =
                cancel::cancel_biz_key(&state.queue, topic, key)
                    .await?
                    .into_iter()
                    .unzip();
            Ok(HttpResponse::Ok().json(report(&ids, &outcomes)))
        }
        (None, Some(prefix)) => {
            check_key(prefix, "bizKeyPrefix")?;
            let (matched, counts) =
                cancel::cancel_biz_key_prefix(&state.queue, topic, prefix).await?;
            Ok(HttpResponse::Ok().json(CancelReply::Counts(CancelCounts {
                matched: matched as u64,
                results: counts,
            })))
        }
        _ => Err(ApiError::invalid(ErrorCode::InvalidCancel, usage)),
    }
}

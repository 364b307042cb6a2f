//! Producers: push one or a batch.

use actix_web::{web, HttpResponse};
use serde_json::Value;

use super::body::JsonBody;
use super::schema::{DuplicateUpdate, PushBatchReply, PushBatchRequest, PushReply, PushRequest};
use super::state::AppState;
use crate::api::error::ApiError;
use crate::api::error::ErrorBody;
use crate::error::ErrorCode;
use crate::message::{now_ms, parse_draft};

pub const MAX_BATCH: usize = 1_000;

/// `POST /push`: answered once the message is durable in the journal.
#[utoipa::path(
    post,
    path = "/push",
    tag = "produce",
    request_body = PushRequest,
    responses(
        (status = 200, description = "Accepted and durable; a live message of the topic with the same bizKey answers its own id", body = PushReply),
        (status = 400, description = "The message breaks a rule; nothing was written", body = ErrorBody),
        (status = 413, description = "The request or the message body is too large (`payload_too_large`, `body_too_large`)", body = ErrorBody),
        (status = 500, description = "The journal database refused the row (`journal_refused`)", body = ErrorBody),
        (status = 503, description = "Journal, Redis or the node's worker id unavailable", body = ErrorBody),
    ),
)]
pub async fn push(state: web::Data<AppState>, body: JsonBody) -> Result<HttpResponse, ApiError> {
    let now = now_ms();
    let draft = parse_draft(&body, state.max_body, now)?;
    let accepted = state.queue.push(vec![draft]).await?;
    let answer = accepted[0].replaced.map(|r| r.answer());
    Ok(HttpResponse::Ok().json(PushReply {
        id: accepted[0].id,
        duplicate: !accepted[0].fresh,
        result: answer.map(|a| a.0),
        due_time: answer.and_then(|a| a.1),
    }))
}

/// `POST /push/batch`: all durable, or none accepted.
#[utoipa::path(
    post,
    path = "/push/batch",
    tag = "produce",
    request_body = PushBatchRequest,
    responses(
        (status = 200, description = "Accepted and durable, ids in the order pushed", body = PushBatchReply),
        (status = 400, description = "A message breaks a rule (named by its index); nothing was written", body = ErrorBody),
        (status = 413, description = "The request or a message body is too large", body = ErrorBody),
        (status = 500, description = "The journal database refused a row (`journal_refused`)", body = ErrorBody),
        (status = 503, description = "Journal, Redis or the node's worker id unavailable", body = ErrorBody),
    ),
)]
pub async fn push_batch(
    state: web::Data<AppState>,
    body: JsonBody,
) -> Result<HttpResponse, ApiError> {
    if let Some(stray) = body
        .as_object()
        .and_then(|o| o.keys().find(|k| *k != "messages"))
    {
        return Err(ApiError::invalid(
            ErrorCode::UnknownField,
            format!(
                "unknown field {stray:?} beside \"messages\": a batch is {{\"messages\": [message, ...]}}, and each message carries its own fields (delay, ttl, ...)"
            ),
        ));
    }
    let list = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            ApiError::invalid(
                ErrorCode::InvalidBatch,
                "a batch is {\"messages\": [message, ...]}",
            )
        })?;
    if list.is_empty() || list.len() > MAX_BATCH {
        return Err(ApiError::invalid(
            ErrorCode::InvalidBatch,
            format!(
                "a batch holds 1 to {MAX_BATCH} messages, got {}",
                list.len()
            ),
        ));
    }
    let now = now_ms();
    let mut drafts = Vec::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        drafts.push(parse_draft(v, state.max_body, now).map_err(|mut e| {
            e.message = format!("messages[{i}]: {}", e.message);
            ApiError::from(e)
        })?);
    }
    let accepted = state.queue.push(drafts).await?;
    let duplicates = accepted
        .iter()
        .enumerate()
        .filter(|(_, a)| !a.fresh)
        .map(|(i, _)| i)
        .collect();
    let updates = accepted
        .iter()
        .enumerate()
        .filter_map(|(index, a)| {
            let (result, due_time) = a.replaced?.answer();
            Some(DuplicateUpdate {
                index,
                result,
                due_time,
            })
        })
        .collect();
    let ids = accepted.into_iter().map(|a| a.id).collect();
    Ok(HttpResponse::Ok().json(PushBatchReply {
        ids,
        duplicates,
        updates,
    }))
}

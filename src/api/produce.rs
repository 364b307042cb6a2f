//! Producers: push one or a batch.

use actix_web::{web, HttpResponse};
use serde_json::{json, Value};

use super::body::JsonBody;
use super::AppState;
use crate::error::ApiError;
use crate::error::ErrorCode;
use crate::message::{now_ms, parse_draft};

pub const MAX_BATCH: usize = 1_000;

pub async fn push(state: web::Data<AppState>, body: JsonBody) -> Result<HttpResponse, ApiError> {
    let now = now_ms();
    let draft = parse_draft(&body, state.max_body, now)?;
    let accepted = state
        .queue
        .accept(vec![draft.into_message(state.ids.next_id()?, now)])
        .await?;
    let mut reply = json!({ "id": accepted[0].id });
    if !accepted[0].fresh {
        reply["duplicate"] = json!(true);
    }
    Ok(HttpResponse::Ok().json(reply))
}

pub async fn push_batch(
    state: web::Data<AppState>,
    body: JsonBody,
) -> Result<HttpResponse, ApiError> {
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
    let mut messages = Vec::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        let draft = parse_draft(v, state.max_body, now).map_err(|mut e| {
            e.message = format!("messages[{i}]: {}", e.message);
            ApiError::from(e)
        })?;
        messages.push(draft.into_message(state.ids.next_id()?, now));
    }
    let ids: Vec<_> = state
        .queue
        .accept(messages)
        .await?
        .into_iter()
        .map(|a| a.id)
        .collect();
    Ok(HttpResponse::Ok().json(json!({ "ids": ids })))
}

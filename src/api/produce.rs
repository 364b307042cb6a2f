//! Producers: push one or a batch.

use std::collections::HashSet;

use actix_web::{web, HttpResponse};
use serde_json::{json, Value};

use super::body::JsonBody;
use super::AppState;
use crate::actors::router::Schedule;
use crate::error::{ApiError, ShardError};
use crate::journal::InsertOutcome;
use crate::message::{now_ms, parse_draft, Message, MessageId, Status};

pub const MAX_BATCH: usize = 1_000;

pub async fn push(state: web::Data<AppState>, body: JsonBody) -> Result<HttpResponse, ApiError> {
    let now = now_ms();
    let draft = parse_draft(&body, state.max_body, now)?;
    let (ids, fresh) = accept(&state, vec![draft.into_message(state.ids.next_id()?, now)]).await?;
    let mut reply = json!({ "id": ids[0] });
    if !fresh[0] {
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
            ApiError::invalid("invalid_batch", "a batch is {\"messages\": [message, ...]}")
        })?;
    if list.is_empty() || list.len() > MAX_BATCH {
        return Err(ApiError::invalid(
            "invalid_batch",
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
    let (ids, _) = accept(&state, messages).await?;
    Ok(HttpResponse::Ok().json(json!({ "ids": ids })))
}

/// Makes messages durable, then schedules them. Returns each message's id
/// (the live one's for a repeated bizKey) and whether it is new.
async fn accept(
    state: &AppState,
    messages: Vec<Message>,
) -> Result<(Vec<MessageId>, Vec<bool>), ApiError> {
    let outcomes = state.journal.insert(messages.clone()).await?;
    let mut ids = Vec::with_capacity(messages.len());
    let mut fresh = Vec::with_capacity(messages.len());
    let mut to_schedule = Vec::new();
    let mut seen = HashSet::new();
    for (m, outcome) in messages.into_iter().zip(outcomes) {
        match outcome {
            InsertOutcome::Inserted => {
                ids.push(m.id);
                fresh.push(true);
                seen.insert(m.id);
                to_schedule.push((m, 0));
            }
            InsertOutcome::Duplicate(row) => {
                ids.push(MessageId(row.id));
                fresh.push(false);
                // A live message still WaitPut may never have reached Redis
                // (its push met an outage): schedule it again. Scheduling is
                // idempotent (Redis keeps a message it holds as it is), and a
                // message acked or cancelled is no longer live, so this never
                // brings a finished message back.
                if row.status() == Status::WaitPut && seen.insert(MessageId(row.id)) {
                    to_schedule.push((row.message(), row.attempts));
                }
            }
        }
    }
    if to_schedule.is_empty() {
        return Ok((ids, fresh));
    }
    let scheduled = state
        .router
        .send(Schedule(to_schedule.clone()))
        .await
        .map_err(ShardError::from);
    // The router records the scheduled messages Delaying.
    match scheduled.and_then(|r| r) {
        Ok(_) => Ok((ids, fresh)),
        Err(e) => {
            tracing::warn!(error = %e, count = to_schedule.len(), "messages journaled but not scheduled");
            let list: Vec<String> = to_schedule.iter().map(|(m, _)| m.id.to_string()).collect();
            Err(ApiError::RedisUnavailable(format!(
                "{e}; message(s) {} are durable in the journal (WaitPut) and are scheduled by the next restore, \
                 or by pushing again with the same bizKey",
                list.join(",")
            )))
        }
    }
}

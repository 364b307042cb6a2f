//! Dead letters: messages that used their last attempt. Listed per topic
//! with their histories, and brought back one by one or per topic.

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};

use super::{check_topic, int_param, AppState, Query};
use crate::error::ApiError;
use crate::error::ErrorCode;
use crate::journal::RequeueOutcome;
use crate::message::{valid_topic, MessageId};
use crate::queue::dead;

/// Most dead messages listed, or brought back, by one request.
const MAX_LIST: u64 = 1_000;
const MAX_REQUEUE: u64 = 10_000;
const PAGE: i64 = 500;

fn after_param(q: &Query) -> Result<i64, ApiError> {
    match q.get("after") {
        None => Ok(0),
        Some(raw) => raw.parse::<MessageId>().map(|id| id.0).map_err(|e| {
            ApiError::invalid(
                ErrorCode::InvalidParameter,
                format!("after must be a message id: {e}"),
            )
        }),
    }
}

/// `GET /dead/{topic}?limit=N&after=ID`: dead messages of a topic in id
/// order (limit 1–1000, default 100), each with its history; `next` is the
/// `after` of the next page, null on the last.
pub async fn list(
    state: web::Data<AppState>,
    topic: web::Path<String>,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    let topic = topic.into_inner();
    check_topic(&topic)?;
    let limit = int_param(&q, "limit", 100, 1..=MAX_LIST)? as i64;
    let after = after_param(&q)?;
    let page = state.journal.dead_page(&topic, after, limit).await?;
    let next = (page.len() as i64 == limit)
        .then(|| page.last().map(|(r, _)| MessageId(r.id)))
        .flatten();
    let messages: Vec<Value> = page
        .into_iter()
        .map(|(row, history)| {
            let mut v = json!(row.view());
            v["history"] = json!(history);
            v
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({ "messages": messages, "next": next })))
}

/// Requeues one message; its result as the routes answer it.
async fn requeue_one(state: &AppState, id: MessageId) -> Result<Value, ApiError> {
    Ok(match dead::requeue(&state.queue, id).await? {
        RequeueOutcome::Requeued(row) => {
            json!({ "id": id, "result": "requeued", "status": row.status() })
        }
        RequeueOutcome::NotDead(status) => {
            json!({ "id": id, "result": "not_dead", "status": status })
        }
        RequeueOutcome::NotFound => json!({ "id": id, "result": "not_found" }),
        RequeueOutcome::BizKeyTaken(holder) => json!({
            "id": id,
            "result": "biz_key_taken",
            "holder": MessageId(holder),
        }),
    })
}

/// `POST /dead/{id}/requeue` and `POST /dead/{topic}/requeue?limit=N`: a
/// dead message (or up to `limit` of a topic's, default and most 10 000)
/// becomes live again, due at once, its attempts counted from 0. A target
/// that is a message id is one message; otherwise, or when no message has
/// that id, it is a topic.
pub async fn requeue(
    state: web::Data<AppState>,
    req: HttpRequest,
    target: web::Path<String>,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    let target = target.into_inner();
    if let Ok(id) = target.parse::<MessageId>() {
        let r = requeue_one(&state, id).await?;
        match r["result"].as_str() {
            Some("requeued") => return Ok(HttpResponse::Ok().json(r)),
            Some("not_dead") => {
                return Err(ApiError::Conflict {
                    code: ErrorCode::NotDead,
                    message: format!(
                        "message {id} is {} and not dead",
                        r["status"].as_str().unwrap_or("live")
                    ),
                })
            }
            Some("biz_key_taken") => {
                return Err(ApiError::Conflict {
                    code: ErrorCode::BizKeyTaken,
                    message: format!(
                        "message {id}'s bizKey belongs to live message {} now",
                        r["holder"].as_str().unwrap_or("?")
                    ),
                })
            }
            // No such message: the target may be a topic of digits.
            _ if !valid_topic(&target) => {
                return Err(ApiError::NotFound {
                    code: ErrorCode::NotFound,
                    message: format!("no message {id}"),
                })
            }
            _ => {}
        }
    }
    check_topic(&target)?;
    let limit = int_param(&q, "limit", MAX_REQUEUE, 1..=MAX_REQUEUE)? as usize;
    let (mut requeued, mut skipped, mut after) = (0usize, Vec::new(), 0i64);
    'pages: loop {
        let page = state.journal.dead_page(&target, after, PAGE).await?;
        let full = page.len() as i64 == PAGE;
        for (row, _) in page {
            if requeued + skipped.len() >= limit {
                break 'pages;
            }
            after = row.id;
            let r = requeue_one(&state, MessageId(row.id)).await?;
            if r["result"] == "requeued" {
                requeued += 1;
            } else {
                skipped.push(r);
            }
        }
        if !full {
            break;
        }
    }
    let more = !state.journal.dead_page(&target, after, 1).await?.is_empty();
    Ok(HttpResponse::Ok().json(json!({
        "topic": target,
        "requeued": requeued,
        "skipped": skipped,
        "more": more,
    })))
}

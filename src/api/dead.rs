//! Dead letters: messages that used their last attempt. Listed per topic
//! with their histories, and brought back one by one or per topic.

use actix_web::{web, HttpRequest, HttpResponse};

use super::parse::{check_topic, int_param, Query};
use super::schema::{DeadMessage, DeadPage, RequeueOne, RequeueReply, RequeueResult, RequeueTopic};
use super::state::AppState;
use crate::api::error::ApiError;
use crate::api::error::ErrorBody;
use crate::error::ErrorCode;
use crate::journal::RequeueOutcome;
use crate::message::{valid_topic, MessageId};
use crate::queue::dead;

/// Most dead messages listed, or brought back, by one request.
const MAX_LIST: u64 = 1_000;
const MAX_REQUEUE: u64 = 10_000;

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
#[utoipa::path(
    get,
    path = "/dead/{topic}",
    tag = "dead",
    params(
        ("topic" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,128}$", example = "sms"),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 1000, description = "Page size (default 100)"),
        ("after" = Option<MessageId>, Query, description = "The `next` of the previous page"),
    ),
    security((), ("readToken" = []), ("adminToken" = [])),
    responses(
        (status = 200, description = "Dead messages of the topic in id order, each with its history", body = DeadPage),
        (status = 400, description = "A bad topic or parameter", body = ErrorBody),
        (status = 401, description = "A read or admin token is set and was not given", body = ErrorBody),
        (status = 503, description = "The journal unavailable", body = ErrorBody),
    ),
)]
pub async fn list(
    state: web::Data<AppState>,
    req: HttpRequest,
    topic: web::Path<String>,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    state.require_reader(&req)?;
    let topic = topic.into_inner();
    check_topic(&topic)?;
    let limit = int_param(&q, "limit", 100, 1..=MAX_LIST)? as i64;
    let after = after_param(&q)?;
    // One more than a page tells whether there is another.
    let mut page = state.queue.dead_page(&topic, after, limit + 1).await?;
    let next = (page.len() as i64 > limit)
        .then(|| {
            page.truncate(limit as usize);
            page.last().map(|(r, _)| MessageId(r.id))
        })
        .flatten();
    let messages = page
        .into_iter()
        .map(|(row, history)| DeadMessage {
            message: row.view(),
            history: history.iter().map(|f| f.entry()).collect(),
        })
        .collect();
    Ok(HttpResponse::Ok().json(DeadPage { messages, next }))
}

/// One message's requeue as the routes answer it.
fn requeue_view(id: MessageId, outcome: RequeueOutcome) -> RequeueOne {
    let one = |result, status, holder| RequeueOne {
        id,
        result,
        status,
        holder,
    };
    match outcome {
        RequeueOutcome::Requeued(row) => one(RequeueResult::Requeued, Some(row.status()), None),
        RequeueOutcome::NotDead(status) => one(RequeueResult::NotDead, Some(status), None),
        RequeueOutcome::NotFound => one(RequeueResult::NotFound, None, None),
        RequeueOutcome::BizKeyTaken(holder) => {
            one(RequeueResult::BizKeyTaken, None, Some(MessageId(holder)))
        }
    }
}

/// `POST /dead/{id}/requeue` and `POST /dead/{topic}/requeue?limit=N`: a
/// dead message (or up to `limit` of a topic's, default and most 10 000)
/// becomes live again, due at once, its attempts counted from 0. A target
/// that is a message id is one message; otherwise, or when no message has
/// that id, it is a topic.
#[utoipa::path(
    post,
    path = "/dead/{target}/requeue",
    tag = "dead",
    params(
        ("target" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,128}$", description = "A message id when such a message exists, else a topic"),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 10000, description = "A topic: most messages requeued (default 10 000)"),
    ),
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "One message: requeued. A topic: how many were requeued, those skipped and why, and whether more are left", body = RequeueReply),
        (status = 400, description = "A bad target or parameter", body = ErrorBody),
        (status = 401, description = "The admin token is set and was not given", body = ErrorBody),
        (status = 404, description = "No such message (a target that can only be an id), or a target of digits that is neither a message's id nor a topic with dead letters", body = ErrorBody),
        (status = 409, description = "The message is not dead (`not_dead`), or a live message holds its bizKey (`biz_key_taken`)", body = ErrorBody),
        (status = 503, description = "Redis or the journal unavailable", body = ErrorBody),
    ),
)]
pub async fn requeue(
    state: web::Data<AppState>,
    req: HttpRequest,
    target: web::Path<String>,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    let target = target.into_inner();
    if let Ok(id) = target.parse::<MessageId>() {
        let r = requeue_view(id, dead::requeue(&state.queue, id).await?);
        match r.result {
            RequeueResult::Requeued => return Ok(HttpResponse::Ok().json(RequeueReply::One(r))),
            RequeueResult::NotDead => {
                return Err(ApiError::Conflict {
                    code: ErrorCode::NotDead,
                    message: format!(
                        "message {id} is {} and not dead",
                        r.status.map_or("live".to_string(), |s| s.to_string())
                    ),
                })
            }
            RequeueResult::BizKeyTaken => {
                return Err(ApiError::Conflict {
                    code: ErrorCode::BizKeyTaken,
                    message: format!(
                        "message {id}'s bizKey belongs to live message {} now",
                        r.holder.map_or("?".to_string(), |h| h.to_string())
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
    let run = dead::requeue_topic(&state.queue, &target, limit).await?;
    // A target of digits named no message; as a topic it holds no dead
    // letter either: most likely a mistyped id, so say both.
    if run.done == 0 && run.skipped.is_empty() && target.parse::<MessageId>().is_ok() {
        return Err(ApiError::NotFound {
            code: ErrorCode::NotFound,
            message: format!(
                "no message has id {target}, and no dead letter has topic {target} (a target of digits is an id when such a message exists, else a topic)"
            ),
        });
    }
    let skipped = run
        .skipped
        .into_iter()
        .map(|(id, o)| requeue_view(id, o))
        .collect();
    Ok(HttpResponse::Ok().json(RequeueReply::Topic(RequeueTopic {
        topic: target,
        requeued: run.done,
        skipped,
        more: run.more,
    })))
}

//! Topics: every topic with its counts and whether it is paused; pausing
//! and resuming one, for the whole cluster (see
//! [`crate::redis::schedule::RedisSchedule::pause`]).

use actix_web::{web, HttpRequest, HttpResponse};
use delayq_proto::{PauseState, TopicList};

use super::parse::check_topic;
use super::state::AppState;
use crate::api::error::{ApiError, ErrorBody};

/// `GET /topics`: every topic with messages in the journal, live or
/// finished within retention (a topic whose messages were all consumed is
/// listed until `--retain-finished` removes them), and every paused or
/// rate-limited topic, in name order, with its counts by status (a few
/// seconds old at most), its pause, its limit and the oldest message
/// waiting ready. The counts read at most 5,000 (topic, status)
/// rows in name order (`queue::read::MAX_ROWS`): past them (`cut`) the
/// later topics are left out,
/// but for paused or limited ones, listed with zero counts.
#[utoipa::path(
    get,
    path = "/topics",
    tag = "topics",
    security((), ("readToken" = []), ("adminToken" = [])),
    responses(
        (status = 200, description = "Every topic, in name order", body = TopicList),
        (status = 401, description = "A read or admin token is set and was not given", body = ErrorBody),
        (status = 503, description = "Redis or the journal unavailable", body = ErrorBody),
    ),
)]
pub async fn list(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    state.require_reader(&req)?;
    Ok(HttpResponse::Ok().json(state.queue.topic_list().await?))
}

/// `POST /topics/{topic}/pause`: nothing of the topic is handed out or
/// forwarded, on any node, from the answer on until it is resumed.
/// Pushes, cancels, acks and nacks keep working; due messages wait ready;
/// messages in flight keep their ack deadlines.
#[utoipa::path(
    post,
    path = "/topics/{topic}/pause",
    tag = "topics",
    params(("topic" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,128}$", example = "sms")),
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "The topic is paused (`changed`: by this call; `known`: false for a topic with no message in the journal, which is paused all the same, ahead of its first push)", body = PauseState),
        (status = 400, description = "A bad topic", body = ErrorBody),
        (status = 401, description = "The admin token is set and was not given", body = ErrorBody),
        (status = 503, description = "Redis unavailable: the pause may be partly applied; call again", body = ErrorBody),
    ),
)]
pub async fn pause(
    state: web::Data<AppState>,
    req: HttpRequest,
    topic: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    let topic = topic.into_inner();
    check_topic(&topic)?;
    // Known before the pause: a topic paused ahead of its first push is
    // known once paused.
    let known = state.queue.topic_known(&topic).await?;
    let (at, changed) = state.queue.pause(&topic).await?;
    Ok(HttpResponse::Ok().json(PauseState {
        topic,
        paused: true,
        paused_at: Some(at),
        changed,
        known,
    }))
}

/// `POST /topics/{topic}/resume`: the topic is handed out again; long
/// polls waiting on it, on every node, look at once.
#[utoipa::path(
    post,
    path = "/topics/{topic}/resume",
    tag = "topics",
    params(("topic" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,128}$", example = "sms")),
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "The topic is not paused (`changed`: it was until this call)", body = PauseState),
        (status = 400, description = "A bad topic", body = ErrorBody),
        (status = 401, description = "The admin token is set and was not given", body = ErrorBody),
        (status = 503, description = "Redis unavailable: the resume may be partly applied; call again", body = ErrorBody),
    ),
)]
pub async fn resume(
    state: web::Data<AppState>,
    req: HttpRequest,
    topic: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    let topic = topic.into_inner();
    check_topic(&topic)?;
    let changed = state.queue.resume(&topic).await?;
    let known = changed || state.queue.topic_known(&topic).await?;
    Ok(HttpResponse::Ok().json(PauseState {
        topic,
        paused: false,
        paused_at: None,
        changed,
        known,
    }))
}

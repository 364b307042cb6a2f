//! Topics: every topic with its counts and whether it is paused; pausing
//! and resuming one, for the whole cluster (see
//! [`crate::redis::schedule::RedisSchedule::pause`]).

use actix_web::{web, HttpRequest, HttpResponse};
use delayq_proto::{Forecast, PauseState, TopicList};

use super::parse::{check_topic, Query};
use super::state::AppState;
use crate::api::error::{ApiError, ErrorBody};
use crate::error::ErrorCode;

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

/// The `bucket` and `span` of a forecast request: bucket width and bucket
/// count.
fn forecast_range(q: &Query) -> Result<(i64, usize), ApiError> {
    use crate::queue::forecast::MAX_BUCKETS;
    let invalid = |m: String| ApiError::invalid(ErrorCode::InvalidParameter, m);
    let duration = |name: &str, default: &str| -> Result<i64, ApiError> {
        let raw = q.get(name).map_or(default, String::as_str);
        crate::config::parse_duration(raw)
            .map(|d| d.as_millis().min(i64::MAX as u128) as i64)
            .map_err(|e| invalid(format!("{name}: {e}")))
    };
    let bucket = duration("bucket", "1m")?;
    let span = duration("span", "24h")?;
    if bucket < 1_000 {
        return Err(invalid(format!(
            "bucket must be at least 1s, not {bucket} ms"
        )));
    }
    if span > 366 * 86_400_000 {
        return Err(invalid("span must be at most 366d".into()));
    }
    if bucket > span {
        return Err(invalid(format!(
            "bucket ({bucket} ms) must be at most the span ({span} ms)"
        )));
    }
    let buckets = (span + bucket - 1) / bucket;
    if buckets > MAX_BUCKETS {
        return Err(invalid(format!(
            "span / bucket must be at most {MAX_BUCKETS} buckets, not {buckets}: give a wider bucket or a shorter span"
        )));
    }
    Ok((bucket, buckets as usize))
}

/// `GET /forecast`: how many messages of every topic fall due per bucket
/// from now over the span: exact counts of what Redis holds (ZCOUNT per
/// shard and bucket) and of what waits in the journal beyond the Redis
/// horizon (up to 200,000 rows; `journalCountedUntil` says where a
/// count stopped). Recurring series count their next occurrence only.
#[utoipa::path(
    get,
    path = "/forecast",
    tag = "topics",
    params(
        ("bucket" = Option<String>, Query, description = "Bucket width: 1s to the span (e.g. 30s, 1m, 1h); default 1m", example = "1m"),
        ("span" = Option<String>, Query, description = "How far ahead: up to 366d and 2,000 buckets; default 24h", example = "24h"),
    ),
    security((), ("readToken" = []), ("adminToken" = [])),
    responses(
        (status = 200, description = "The counts per bucket", body = Forecast),
        (status = 400, description = "A bad bucket or span", body = ErrorBody),
        (status = 401, description = "A read or admin token is set and was not given", body = ErrorBody),
        (status = 503, description = "Redis or the journal unavailable", body = ErrorBody),
    ),
)]
pub async fn forecast_all(
    state: web::Data<AppState>,
    req: HttpRequest,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    state.require_reader(&req)?;
    let (bucket, buckets) = forecast_range(&q)?;
    Ok(HttpResponse::Ok().json(state.queue.forecast(None, bucket, buckets).await?))
}

/// `GET /topics/{topic}/forecast`: the same for one topic. Redis's delay
/// zsets hold every topic, so the topic's share of a bucket is read from
/// its messages' records: every one when the bucket holds few, else about
/// 20,000 in all at random ranks, and that bucket's count is an estimate
/// with its 95 % interval (`low`, `high`). The journal's part is exact.
#[utoipa::path(
    get,
    path = "/topics/{topic}/forecast",
    tag = "topics",
    params(
        ("topic" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,128}$", example = "sms"),
        ("bucket" = Option<String>, Query, description = "Bucket width: 1s to the span (e.g. 30s, 1m, 1h); default 1m", example = "1m"),
        ("span" = Option<String>, Query, description = "How far ahead: up to 366d and 2,000 buckets; default 24h", example = "24h"),
    ),
    security((), ("readToken" = []), ("adminToken" = [])),
    responses(
        (status = 200, description = "The topic's counts per bucket", body = Forecast),
        (status = 400, description = "A bad topic, bucket or span", body = ErrorBody),
        (status = 401, description = "A read or admin token is set and was not given", body = ErrorBody),
        (status = 503, description = "Redis or the journal unavailable", body = ErrorBody),
    ),
)]
pub async fn forecast(
    state: web::Data<AppState>,
    req: HttpRequest,
    topic: web::Path<String>,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    state.require_reader(&req)?;
    check_topic(&topic)?;
    let (bucket, buckets) = forecast_range(&q)?;
    Ok(HttpResponse::Ok().json(state.queue.forecast(Some(&topic), bucket, buckets).await?))
}

//! Topics: every topic with its counts and whether it is paused; pausing
//! and resuming one, for the whole cluster (see
//! [`crate::redis::schedule::RedisSchedule::pause`]).

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use actix_web::{web, HttpRequest, HttpResponse};
use delayq_proto::{PauseState, TopicCounts, TopicList, TopicView};

use super::{check_topic, AppState};
use crate::api::error::{ApiError, ErrorBody};
use crate::message::{now_ms, Status};

/// `GET /topics`: every topic with messages in the journal, live or
/// finished within retention (a topic whose messages were all consumed is
/// listed until `--retain-finished` removes them), and every paused or
/// rate-limited topic, in name order, with its counts by status (a few
/// seconds old at most), its pause, its limit and the oldest message
/// waiting ready. The counts read at most [`MAX_ROWS`] (topic, status)
/// rows in name order: past them (`cut`) the later topics are left out,
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
    Ok(HttpResponse::Ok().json(topic_list(&state).await?))
}

/// Most (topic, status) rows the counts read.
pub const MAX_ROWS: i64 = 5_000;
/// How long a count is shown before it is read again.
const COUNTS_FRESH: Duration = Duration::from_secs(2);

/// Messages per status, by topic.
pub type Counts = BTreeMap<String, TopicCounts>;

static CACHE: LazyLock<Mutex<Option<(Instant, Counts, bool)>>> = LazyLock::new(Default::default);

/// Counts per topic, as `GET /topics` and the dashboard show them: one
/// grouped count of the journal over its `(status, topic, id)` index, at
/// most [`MAX_ROWS`] rows (and whether it was cut there), kept for
/// [`COUNTS_FRESH`] so that dashboards refreshing together run it once.
pub async fn topic_counts(state: &AppState) -> Result<(Counts, bool), ApiError> {
    if let Some((at, counts, cut)) = &*CACHE.lock().unwrap_or_else(|p| p.into_inner()) {
        if at.elapsed() < COUNTS_FRESH {
            return Ok((counts.clone(), *cut));
        }
    }
    let rows = state.queue.journal.topic_counts(MAX_ROWS).await?;
    let cut = rows.len() as i64 == MAX_ROWS;
    let mut counts = Counts::new();
    for (topic, status, n) in rows {
        let c = counts.entry(topic).or_default();
        if let Some(s) = Status::from_code(status) {
            if let Some(count) = count_of(c, s) {
                *count += n;
            }
        }
    }
    *CACHE.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), counts.clone(), cut));
    Ok((counts, cut))
}

/// A topic's count of messages in `status` (none for `Unknown`, which
/// the journal never holds).
pub fn count_of(c: &mut TopicCounts, status: Status) -> Option<&mut i64> {
    Some(match status {
        Status::WaitPut => &mut c.waiting,
        Status::Delaying => &mut c.delaying,
        Status::Ready => &mut c.ready,
        Status::Consuming => &mut c.in_flight,
        Status::Dead => &mut c.dead,
        Status::Consumed => &mut c.consumed,
        Status::Deleted => &mut c.deleted,
        Status::Unknown => return None,
    })
}

/// The topics as `GET /topics` and the dashboard show them.
pub async fn topic_list(state: &AppState) -> Result<TopicList, ApiError> {
    let (counts, cut) = topic_counts(state).await?;
    let paused = state.queue.redis.paused_topics().await?;
    let mut names: Vec<&str> = counts.keys().map(String::as_str).collect();
    names.extend(paused.keys().map(String::as_str));
    let limits = state.queue.redis.limits();
    names.extend(limits.keys().map(String::as_str));
    names.sort_unstable();
    names.dedup();
    let oldest = state.queue.redis.oldest_ready(&names).await?;
    let now = now_ms();
    let topics = names
        .iter()
        .zip(oldest)
        .map(|(&topic, due)| {
            let paused_at = paused.get(topic).copied();
            TopicView {
                topic: topic.to_string(),
                counts: counts.get(topic).cloned().unwrap_or_default(),
                paused: paused_at.is_some(),
                paused_at,
                limit_per_second: limits.get(topic).map(|l| l.per_second).filter(|&n| n > 0),
                limit_concurrency: limits.get(topic).map(|l| l.concurrency).filter(|&n| n > 0),
                oldest_ready_due_time: due,
                overdue_ms: due.map(|d| (now - d).max(0)),
            }
        })
        .collect();
    Ok(TopicList { topics, cut })
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
    let known = known(&state, &topic).await?;
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
    let known = changed || known(&state, &topic).await?;
    Ok(HttpResponse::Ok().json(PauseState {
        topic,
        paused: false,
        paused_at: None,
        changed,
        known,
    }))
}

/// Whether `topic` is known: the journal holds a message of it, or it is
/// paused or limited.
async fn known(state: &AppState, topic: &str) -> Result<bool, ApiError> {
    Ok(state.queue.redis.limits().contains_key(topic)
        || state.queue.redis.paused_topics().await?.contains_key(topic)
        || state.queue.journal.topic_known(topic).await?)
}

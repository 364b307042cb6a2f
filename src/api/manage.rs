//! Restore, inspection and health.

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};

use super::parse::{bool_param, parse_id, Query};
use super::schema::{HealthReply, MessageReply, ReadyReply, RestoreOneReply};
use super::state::AppState;
use crate::api::error::ApiError;
use crate::api::error::ErrorBody;
use crate::error::ErrorCode;
use crate::message::MessageId;
use crate::redis::inspect::evicts;
use crate::restore::RestoreReport;

/// `GET /reStore?expire=true|false`: rebuild Redis from the journal.
#[utoipa::path(
    get,
    path = "/reStore",
    tag = "inspect",
    params(
        ("expire" = Option<bool>, Query, description = "Also restore messages whose due time passed (delivered at once); default false"),
        ("dryRun" = Option<bool>, Query, description = "Count only; default false"),
    ),
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "Every live message of the journal is in Redis again; the counts", body = RestoreReport),
        (status = 400, description = "A bad parameter", body = ErrorBody),
        (status = 401, description = "The admin token is set and was not given", body = ErrorBody),
        (status = 403, description = "From another site, as the browser says (`forbidden`): this route changes data", body = ErrorBody),
        (status = 503, description = "Redis or the journal unavailable", body = ErrorBody),
    ),
)]
pub async fn restore_all(
    state: web::Data<AppState>,
    req: HttpRequest,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    super::state::refuse_cross_site(&req)?;
    let expire = bool_param(&q, "expire", false)?;
    let dry_run = bool_param(&q, "dryRun", false)?;
    let report = state.restorer().all(expire, dry_run, |_| {}).await?;
    tracing::info!(?report, expire, "restore from the journal finished");
    Ok(HttpResponse::Ok().json(report))
}

/// `GET /reStore/{id}?expire=true|false`: the same for one message.
#[utoipa::path(
    get,
    path = "/reStore/{id}",
    tag = "inspect",
    params(
        ("id" = MessageId, Path),
        ("expire" = Option<bool>, Query, description = "Restore it even when its due time passed (delivered at once); default true"),
    ),
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "The counts, and the message's status", body = RestoreOneReply),
        (status = 400, description = "A bad id or parameter", body = ErrorBody),
        (status = 401, description = "The admin token is set and was not given", body = ErrorBody),
        (status = 403, description = "From another site, as the browser says (`forbidden`): this route changes data", body = ErrorBody),
        (status = 404, description = "No such message", body = ErrorBody),
        (status = 503, description = "Redis or the journal unavailable", body = ErrorBody),
    ),
)]
pub async fn restore_one(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    super::state::refuse_cross_site(&req)?;
    let id = parse_id(&id)?;
    let expire = bool_param(&q, "expire", true)?;
    let (report, status) = state.restorer().one(id, expire).await?;
    Ok(HttpResponse::Ok().json(RestoreOneReply { report, id, status }))
}

/// `GET /messages/{id}`: the message, its status and its flow history.
#[utoipa::path(
    get,
    path = "/messages/{id}",
    tag = "inspect",
    security((), ("readToken" = []), ("adminToken" = [])),
    params(("id" = MessageId, Path)),
    responses(
        (status = 200, description = "The message, its status and its history", body = MessageReply),
        (status = 400, description = "A bad id", body = ErrorBody),
        (status = 401, description = "A read or admin token is set and was not given", body = ErrorBody),
        (status = 404, description = "No such message", body = ErrorBody),
        (status = 503, description = "The journal unavailable", body = ErrorBody),
    ),
)]
pub async fn message(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    state.require_reader(&req)?;
    let id = parse_id(&id)?;
    match state.queue.inspect(id).await? {
        None => Err(ApiError::NotFound {
            code: ErrorCode::NotFound,
            message: format!("no message {id}"),
        }),
        Some(m) => Ok(HttpResponse::Ok().json(MessageReply {
            message: m.message,
            updated_time: m.row.updated_time,
            status_from: m.status_from.into(),
            history: m.history.iter().map(|f| f.entry()).collect(),
        })),
    }
}

/// `GET /health`: the process answers, with the version it runs and the git
/// revision it was built from.
#[utoipa::path(
    get,
    path = "/health",
    tag = "health",
    responses((status = 200, description = "The process answers, with its version and git revision", body = HealthReply)),
)]
pub async fn health() -> HttpResponse {
    HttpResponse::Ok().json(HealthReply {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        revision: crate::GIT_REVISION.into(),
    })
}

/// Ready when Redis and the journal answer and the node is a cluster
/// member in good standing (a live session and a worker id).
///
/// A Redis that may evict keys (`maxmemory-policy` other than
/// `noeviction`) is a warning, not a reason for 503: the node works, the
/// reconciler schedules again what an eviction drops, and a node behind a
/// load balancer should not drop out over a setting. `redisMaxmemoryPolicy`
/// shows the policy (null when Redis's CONFIG is disabled) and `warnings`
/// says what to change.
#[utoipa::path(
    get,
    path = "/ready",
    tag = "health",
    responses(
        (status = 200, description = "Ready; `warnings` may still say what to change", body = ReadyReply),
        (status = 503, description = "Not ready: the fields say what is wrong", body = ReadyReply),
    ),
)]
pub async fn ready(state: web::Data<AppState>) -> HttpResponse {
    let crate::queue::read::Probe {
        redis,
        journal,
        maxmemory_policy: policy,
    } = state.queue.probe().await;
    let mut warnings = Vec::new();
    if let Some(p) = policy.as_deref().filter(|p| evicts(p)) {
        warnings.push(format!(
            "Redis's maxmemory-policy is {p}: it may evict keys, losing scheduled messages until the reconciler schedules them again; set it to noeviction"
        ));
    }
    let show = |r: Result<(), String>| r.map_or_else(|e| e, |_| "ok".to_string());
    let view = state.cluster.view();
    // A member whose worker-id lease lapsed (not confirmed in time) takes
    // no pushes until it is confirmed again.
    let member = view.in_good_standing() && state.queue.worker().is_some();
    let unscannable = crate::actors::health::unscannable();
    let stalled = crate::stall::stalled();
    let ok =
        redis.is_ok() && journal.is_ok() && member && unscannable.is_empty() && stalled.is_none();
    let body = ReadyReply {
        redis: show(redis),
        journal: show(journal),
        cluster: if member {
            "ok".to_string()
        } else {
            format!(
                "not a member in good standing (session {:?}, worker id {:?}, lease confirmed: {})",
                view.session,
                view.worker_id,
                state.queue.worker().is_some()
            )
        },
        mode: view.mode.into(),
        leader: view.leader,
        scanning: view.owned.len(),
        shards: if unscannable.is_empty() {
            "ok".to_string()
        } else {
            unscannable
                .iter()
                .map(|(s, d, why)| {
                    format!(
                        "shard {s} cannot be scanned for {:.1} s ({why})",
                        d.as_secs_f64()
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        },
        process: stalled.unwrap_or_else(|| "ok".to_string()),
        redis_maxmemory_policy: policy,
        warnings,
    };
    if ok {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

/// Refuses every request but `/health`, `/ready` and `/metrics` with 503
/// `node_stalled` while [`crate::stall::stalled`] says this process has
/// just resumed from a stall: what waited in its sockets meanwhile was
/// given up by its senders, and may have been sent to another node.
pub async fn refuse_when_stalled(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    if !matches!(req.path(), "/health" | "/ready" | "/metrics") {
        if let Some(why) = crate::stall::stalled() {
            let refused = ApiError::Stalled(why).error_response();
            return Ok(req.into_response(refused).map_into_right_body());
        }
    }
    Ok(next.call(req).await?.map_into_left_body())
}

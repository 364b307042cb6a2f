//! Restore, inspection and health.

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::json;

use super::{bool_param, parse_id, AppState, Query};
use crate::error::ApiError;
use crate::error::ErrorCode;
use crate::redis::inspect::evicts;

/// `GET /reStore?expire=true|false`: rebuild Redis from the journal.
pub async fn restore_all(
    state: web::Data<AppState>,
    req: HttpRequest,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    let expire = bool_param(&q, "expire", false)?;
    let dry_run = bool_param(&q, "dryRun", false)?;
    let report = state.restorer().all(expire, dry_run, |_| {}).await?;
    tracing::info!(?report, expire, "restore from the journal finished");
    Ok(HttpResponse::Ok().json(report))
}

/// `GET /reStore/{id}?expire=true|false`: the same for one message.
pub async fn restore_one(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    let id = parse_id(&id)?;
    let expire = bool_param(&q, "expire", true)?;
    let (report, status) = state.restorer().one(id, expire).await?;
    let mut body = serde_json::to_value(&report).map_err(|e| ApiError::Internal(e.to_string()))?;
    body["id"] = json!(id);
    body["status"] = json!(status);
    Ok(HttpResponse::Ok().json(body))
}

/// `GET /messages/{id}`: the message, its status and its flow history.
pub async fn message(
    state: web::Data<AppState>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&id)?;
    match state.journal.find(id).await? {
        None => Err(ApiError::NotFound {
            code: ErrorCode::NotFound,
            message: format!("no message {id}"),
        }),
        Some((row, history)) => Ok(HttpResponse::Ok().json(json!({
            "message": row.view(),
            "updatedTime": row.updated_time,
            "history": history,
        }))),
    }
}

/// `GET /health`: the process answers, with the version it runs and the git
/// revision it was built from.
pub async fn health() -> HttpResponse {
    HttpResponse::Ok().json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "revision": crate::GIT_REVISION,
    }))
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
pub async fn ready(state: web::Data<AppState>) -> HttpResponse {
    let (redis, journal, policy) = futures::join!(
        state.redis.ping(),
        state.journal.ping(),
        state.redis.maxmemory_policy()
    );
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
    let member = view.in_good_standing() && state.ids.worker().is_some();
    let ok = redis.is_ok() && journal.is_ok() && member;
    let body = json!({
        "redis": show(redis.map_err(|e| e.to_string())),
        "journal": show(journal.map_err(|e| e.to_string())),
        "cluster": if member { "ok".to_string() } else {
            format!("not a member in good standing (session {:?}, worker id {:?}, lease confirmed: {})", view.session, view.worker_id, state.ids.worker().is_some())
        },
        "mode": view.mode,
        "leader": view.leader,
        "scanning": view.owned.len(),
        "redisMaxmemoryPolicy": policy,
        "warnings": warnings,
    });
    if ok {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

//! The admin routes (behind the admin token when one is set): what the
//! cluster looks like, shard moves, the journal compared with Redis, and
//! restore progress.

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::json;

use super::parse::{bool_param, Query};
use super::schema::{AssignmentReply, ClusterReply, RestoreState};
use super::state::AppState;
use crate::actors::journal::BacklogView;
use crate::api::error::ApiError;
use crate::api::error::ErrorBody;
use crate::error::ErrorCode;
use crate::reconcile::ReconcileReport;

/// `GET /admin/journal`: status changes waiting to be written, whether
/// promotion is held back for them, and the changes the database refused.
#[utoipa::path(
    get,
    path = "/admin/journal",
    tag = "admin",
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "The journal's queue", body = BacklogView),
        (status = 401, description = "The admin token is set and was not given", body = ErrorBody),
    ),
)]
pub async fn journal(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    Ok(HttpResponse::Ok().json(state.queue.journal_backlog()))
}
use crate::reconcile::Repair;

/// `GET /admin/cluster`: mode, leader, live nodes, and per shard its owner
/// (in the assignment and in fact), epoch and counts.
#[utoipa::path(
    get,
    path = "/admin/cluster",
    tag = "admin",
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "The cluster as this node sees it", body = ClusterReply),
        (status = 401, description = "The admin token is set and was not given", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ),
)]
pub async fn cluster(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    Ok(HttpResponse::Ok().json(super::views::cluster_view(&state).await?))
}

/// `POST /admin/rebalance`: spread the shards evenly over the live nodes.
/// Each moved shard is handed off gracefully: its old owner finishes its
/// batch and lets go before the new owner raises the epoch and starts.
#[utoipa::path(
    post,
    path = "/admin/rebalance",
    tag = "admin",
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "The new assignment", body = AssignmentReply),
        (status = 401, description = "The admin token is set and was not given", body = ErrorBody),
        (status = 409, description = "Not possible in this mode (`not_possible`)", body = ErrorBody),
        (status = 503, description = "ZooKeeper unavailable, or this node is not a member in good standing", body = ErrorBody),
    ),
)]
pub async fn rebalance(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    let assignment = state.cluster.rebalance().await?;
    Ok(HttpResponse::Ok().json(AssignmentReply { assignment }))
}

/// `POST /admin/shards/{shard}/move?to=NODE`: move one shard to the node
/// named.
#[utoipa::path(
    post,
    path = "/admin/shards/{shard}/move",
    tag = "admin",
    params(
        ("shard" = u32, Path, description = "0 to shards − 1"),
        ("to" = String, Query, min_length = 1, description = "The node to move it to"),
    ),
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "The new assignment", body = AssignmentReply),
        (status = 400, description = "A bad shard number, or no `to`", body = ErrorBody),
        (status = 401, description = "The admin token is set and was not given", body = ErrorBody),
        (status = 404, description = "No such shard (`no_such_shard`) or live node (`no_such_node`)", body = ErrorBody),
        (status = 409, description = "Not possible in this mode (`not_possible`)", body = ErrorBody),
        (status = 503, description = "ZooKeeper unavailable, or this node is not a member in good standing", body = ErrorBody),
    ),
)]
pub async fn move_shard(
    state: web::Data<AppState>,
    req: HttpRequest,
    shard: web::Path<String>,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    let shard: u32 = shard.parse().map_err(|_| {
        ApiError::invalid(
            ErrorCode::InvalidShard,
            format!("'{shard}' is not a shard number"),
        )
    })?;
    if shard >= state.queue.shards() {
        return Err(crate::cluster::ClusterError::NoSuchShard(shard).into());
    }
    let to = q.get("to").filter(|t| !t.is_empty()).ok_or_else(|| {
        ApiError::invalid(
            ErrorCode::MissingTo,
            "name the node: /admin/shards/{shard}/move?to=NODE",
        )
    })?;
    let assignment = state.cluster.move_shard(shard, to.clone()).await?;
    Ok(HttpResponse::Ok().json(AssignmentReply { assignment }))
}

/// `GET /admin/reconcile?repair=false|true`: the journal compared with
/// Redis message by message ([`crate::reconcile`]); with `repair=true`
/// every difference but `unknown` is put right.
#[utoipa::path(
    get,
    path = "/admin/reconcile",
    tag = "admin",
    params(("repair" = Option<bool>, Query, description = "Put every kind of difference but `unknown` right; default false")),
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "The differences found, per kind (and repaired)", body = ReconcileReport),
        (status = 400, description = "A bad parameter", body = ErrorBody),
        (status = 401, description = "The admin token is set and was not given", body = ErrorBody),
        (status = 403, description = "From another site, as the browser says (`forbidden`): this route changes data", body = ErrorBody),
        (status = 409, description = "A repair while a node's journal is behind Redis (`journal_behind`)", body = ErrorBody),
        (status = 503, description = "Redis or the journal unavailable", body = ErrorBody),
    ),
)]
pub async fn reconcile(
    state: web::Data<AppState>,
    req: HttpRequest,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    let repair = if bool_param(&q, "repair", false)? {
        super::state::refuse_cross_site(&req)?;
        Repair::All
    } else {
        Repair::None
    };
    let report = state.reconciler.run(repair, |_| {}).await?;
    tracing::info!(
        differences = report.differences(),
        ?repair,
        elapsed_ms = report.elapsed_ms,
        "reconciliation on request finished"
    );
    Ok(HttpResponse::Ok().json(report))
}

/// `GET /admin/restore`: this node's current or last restore (null fields
/// when it ran none), and the cursor of an interrupted restore a new one
/// would resume after (`resumable`, from Redis, whichever node left it).
#[utoipa::path(
    get,
    path = "/admin/restore",
    tag = "admin",
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "This node's current or last restore, and a resumable cursor", body = RestoreState),
        (status = 401, description = "The admin token is set and was not given", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ),
)]
pub async fn restore(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    let mut body = match state.restore_status.get() {
        Some(p) => serde_json::to_value(p).map_err(|e| ApiError::Internal(e.to_string()))?,
        None => json!({
            "running": false,
            "startedAt": null,
            "finishedAt": null,
        }),
    };
    body["resumable"] = json!(state.queue.restore_cursor().await?);
    Ok(HttpResponse::Ok().json(body))
}

//! `GET /metrics` and the middleware counting every request by its route
//! pattern (see [`crate::metrics`]).

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{web, HttpResponse};

use super::state::AppState;
use crate::metrics::{metrics, RequestLabels, RouteLabels, CONTENT_TYPE};

/// `GET /metrics`: every metric in the OpenMetrics text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    responses((
        status = 200,
        description = "Every metric of this node, in the OpenMetrics text format (see the book's operating chapter, Metrics: docs/src/operating.md)",
        content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8",
        body = String,
    )),
)]
pub async fn scrape(state: web::Data<AppState>) -> HttpResponse {
    let view = state.cluster.view();
    let m = metrics();
    m.node_state(
        state.queue.journal_pending(),
        view.session.name(),
        view.is_leader(),
        view.nodes.len(),
        &view.owned,
    );
    HttpResponse::Ok()
        .content_type(CONTENT_TYPE)
        .body(m.encode())
}

/// Counts and times each request under its route pattern (`/ack/{id}`,
/// not the path), so ids and topics in paths add no series; a path no
/// route matches counts as `unmatched`.
pub async fn count_requests(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let began = Instant::now();
    let method = req.method().as_str().to_string();
    let res = next.call(req).await?;
    let route = res
        .request()
        .match_pattern()
        .unwrap_or_else(|| "unmatched".to_string());
    let m = metrics();
    m.http_seconds
        .get_or_create(&RouteLabels {
            route: route.clone(),
            method: method.clone(),
        })
        .observe(began.elapsed().as_secs_f64());
    m.http_requests
        .get_or_create(&RequestLabels {
            route,
            method,
            status: res.status().as_u16(),
        })
        .inc();
    Ok(res)
}

//! The cluster: nodes, leader, and each shard's owner, epoch and counts
//! (what `GET /admin/cluster` answers); rebalancing and moving a shard.

use std::collections::HashMap;
use std::fmt::Write;

use actix_web::{web, HttpRequest, HttpResponse};

use super::auth::check_action;
use super::html::{duration, esc, time};
use super::layout;
use super::response::{back_with, UiError};
use crate::api::error::ApiError;
use crate::api::state::AppState;
use crate::api::views::cluster_view;

type Form = web::Form<HashMap<String, String>>;

/// `GET /ui/cluster`.
pub async fn page(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse, UiError> {
    let viewer = viewer!(state, req);
    let c = cluster_view(&state).await?;
    let leader = c.leader.clone().unwrap_or_default();
    let mut nodes = String::new();
    for n in &c.nodes {
        let mut tags = String::new();
        if n.id == leader {
            tags.push_str(r#" <span class="badge leader">leader</span>"#);
        }
        if n.id == c.node {
            tags.push_str(r#" <span class="badge here">this node</span>"#);
        }
        let _ = write!(
            nodes,
            r#"<tr><td class="mono">{}{tags}</td><td class="mono">{}</td><td>{}</td><td>{}</td><td class="num">{}</td></tr>"#,
            esc(&n.id),
            esc(&n.address),
            time(n.start_time),
            esc(&n.version),
            c.shards
                .iter()
                .filter(|s| s.owner.as_deref() == Some(&n.id))
                .count(),
        );
    }
    if c.nodes.is_empty() {
        nodes.push_str(r#"<tr><td colspan="5" class="empty">No live nodes seen.</td></tr>"#);
    }
    let now = crate::message::now_ms();
    let mut shards = String::new();
    for s in &c.shards {
        let mut choose = String::new();
        if viewer.may_act() && c.nodes.len() > 1 {
            let mut options = String::new();
            for n in c.nodes.iter().filter(|n| Some(&n.id) != s.owner.as_ref()) {
                let _ = write!(options, r#"<option value="{0}">{0}</option>"#, esc(&n.id));
            }
            choose = format!(
                r#"<form method="post" action="/ui/cluster/shards/{}/move" class="inline" data-confirm="Move shard {} to the chosen node?">{}<select name="to" aria-label="Node">{options}</select> <button type="submit" class="small">Move</button></form>"#,
                s.shard,
                s.shard,
                viewer.csrf_input()
            );
        }
        let overdue = s
            .oldest_overdue
            .map_or(String::new(), |due| duration(now - due));
        let _ = write!(
            shards,
            r#"<tr><td class="num">{}</td><td class="mono">{}</td><td>{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{overdue}</td><td>{choose}</td></tr>"#,
            s.shard,
            s.owner.as_deref().map_or("none".to_string(), esc),
            if s.scanning_here { "yes" } else { "" },
            s.epoch,
            s.delaying,
            s.ready,
            s.in_flight,
        );
    }
    let rebalance = if c.nodes.len() > 1 {
        viewer.button(
            "/ui/cluster/rebalance",
            "Rebalance",
            "primary",
            &[],
            Some("Spread the shards evenly over the live nodes?"),
        )
    } else {
        String::new()
    };
    let body = format!(
        r#"<h1>Cluster</h1>
<p class="sub">Mode <b>{mode}</b> · session <b>{session}</b> · leader <b id="leader">{leader}</b> · this node <b id="node">{node}</b>{standing} · worker id <b>{worker}</b></p>
<div class="actions">{rebalance}</div>
<h2>Nodes</h2>
<table class="grid" id="nodes"><thead><tr><th>Node</th><th>Address</th><th>Started (UTC)</th><th>Version</th><th class="num">Shards</th></tr></thead><tbody>{nodes}</tbody></table>
<h2>Shards</h2>
<table class="grid" id="shards"><thead><tr><th class="num">Shard</th><th>Owner</th><th>Scanned here</th><th class="num">Epoch</th><th class="num">Delaying</th><th class="num">Ready</th><th class="num">In flight</th><th class="num">Overdue</th><th></th></tr></thead><tbody>{shards}</tbody></table>"#,
        mode = esc(&c.mode),
        session = esc(&serde_json::to_value(c.session)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default()),
        leader = esc(c.leader.as_deref().unwrap_or("none")),
        node = esc(&c.node),
        standing = if c.in_good_standing {
            ""
        } else {
            r#" <span class="badge s-dead">not in good standing</span>"#
        },
        worker = c.worker_id.map_or("none".to_string(), |w| w.to_string()),
    );
    Ok(layout::page(&viewer, "Cluster", "/ui/cluster", &body))
}

/// `POST /ui/cluster/rebalance`.
pub async fn rebalance(
    state: web::Data<AppState>,
    req: HttpRequest,
    form: Form,
) -> Result<HttpResponse, UiError> {
    check_action(&state, &req, &form)?;
    Ok(match state.cluster.rebalance().await {
        Ok(_) => back_with(
            "/ui/cluster",
            "done",
            "Shards rebalanced over the live nodes.",
        ),
        Err(e) => back_with("/ui/cluster", "error", &ApiError::from(e).to_string()),
    })
}

/// `POST /ui/cluster/shards/{shard}/move` with `to`.
pub async fn move_shard(
    state: web::Data<AppState>,
    req: HttpRequest,
    shard: web::Path<u32>,
    form: Form,
) -> Result<HttpResponse, UiError> {
    check_action(&state, &req, &form)?;
    let shard = shard.into_inner();
    let Some(to) = form.get("to").filter(|t| !t.is_empty()) else {
        return Ok(back_with(
            "/ui/cluster",
            "error",
            "Choose the node to move the shard to.",
        ));
    };
    if shard >= state.queue.shards() {
        return Ok(back_with(
            "/ui/cluster",
            "error",
            &format!("There is no shard {shard}."),
        ));
    }
    Ok(match state.cluster.move_shard(shard, to.clone()).await {
        Ok(_) => back_with(
            "/ui/cluster",
            "done",
            &format!("Shard {shard} moves to {to}."),
        ),
        Err(e) => back_with("/ui/cluster", "error", &ApiError::from(e).to_string()),
    })
}

//! Read models the JSON API and the dashboard both show, composed from
//! the queue's reads (`queue::read`) and the cluster's view: each is built
//! here once, and the handlers of both render it.

use super::schema::{ClusterReply, ShardView};
use super::state::AppState;
use crate::api::error::ApiError;

/// The cluster as this node sees it, with each shard's counts from Redis
/// (`GET /admin/cluster`, and the dashboard's cluster page).
pub async fn cluster_view(state: &AppState) -> Result<ClusterReply, ApiError> {
    let view = state.cluster.view();
    let counts = state.queue.shard_counts().await;
    let mut shards = Vec::with_capacity(counts.len());
    for (shard, c) in counts.into_iter().enumerate() {
        let c = c?;
        let scanning_here = view.owned.iter().find(|(s, _)| *s as usize == shard);
        shards.push(ShardView {
            shard,
            owner: view.assignment.get(shard).cloned().flatten(),
            scanning_here: scanning_here.is_some(),
            owner_epoch: scanning_here.map(|(_, e)| *e),
            epoch: c.epoch,
            delaying: c.delaying,
            ready: c.ready,
            in_flight: c.in_flight,
            oldest_overdue: c.oldest_overdue,
        });
    }
    Ok(ClusterReply {
        in_good_standing: view.in_good_standing(),
        mode: view.mode.into(),
        node: view.node_id,
        session: view.session,
        leader: view.leader,
        worker_id: view.worker_id,
        session_timeout_ms: view.session_timeout_ms,
        permit_ms: view.permit_ms,
        nodes: view.nodes,
        shards,
        clock: crate::clock::view(),
    })
}

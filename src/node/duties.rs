//! A serving node's background duties: the eviction check, the journal's
//! lag published for other nodes, the periodic reconciliation, and
//! watching that Redis still holds the data set. (The clock probe and the
//! fences after a possible loss of Redis's writes are
//! [`crate::reconcile::fence`]'s.)

use std::time::Duration;

use crate::actors::journal::Journal;
use crate::cluster::ClusterHandle;
use crate::queue::QueueError;
use crate::reconcile::{Reconciler, Repair};
use crate::redis::inspect::evicts;
use crate::redis::schedule::RedisSchedule;
use crate::restore::Restorer;
use crate::retention::Retention;

use super::spill::replay_spill;

/// Warns when Redis may evict keys: a dropped key loses messages while the
/// data set marker survives, so only the reconciler would bring them back.
pub(super) async fn check_eviction(redis: &RedisSchedule) {
    match redis.inspect().maxmemory_policy().await {
        Some(p) if evicts(&p) => tracing::warn!(
            maxmemory_policy = %p,
            "Redis may evict keys under memory pressure (maxmemory-policy is not noeviction): \
             an evicted key loses scheduled messages until the reconciler schedules them again; \
             set maxmemory-policy noeviction"
        ),
        Some(_) => {}
        None => tracing::info!(
            "cannot read Redis's maxmemory-policy (CONFIG is disabled); make sure it is noeviction"
        ),
    }
}

/// Every node says in Redis, each second, that it runs (see `delayq
/// reshard`) and whether its journal is behind
/// (see [`Journal::behind`]): acks and cancels it applied in Redis may not
/// be in the journal yet, so the journal's live rows cannot be trusted to
/// be live.
pub(super) async fn publish_journal_behind(
    redis: RedisSchedule,
    journal: Journal,
    node_id: String,
) {
    loop {
        if let Err(e) = redis
            .journal_sync()
            .say_journal_behind(&node_id, journal.behind())
            .await
        {
            tracing::debug!(error = %e, "cannot publish whether the journal is behind");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// How often a node looks for an ask to write its queued status changes.
const FLUSH_ASK_EVERY: Duration = Duration::from_millis(200);

/// Answers the asks of a node re-applying the journal's ends to a fenced
/// shard (see `reconcile::fence`): once this node's status changes queued
/// when it read the ask are written (acks and cancels it applied to the
/// Redis that lost them among them), it says so in Redis. Until the
/// journal answers, it does not.
pub(super) async fn answer_flush_asks(redis: RedisSchedule, journal: Journal, node_id: String) {
    loop {
        tokio::time::sleep(FLUSH_ASK_EVERY).await;
        let asked = match redis.journal_sync().flush_ask_of(&node_id).await {
            Ok((asked, answered)) if asked > answered => asked,
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the asks to write queued status changes");
                continue;
            }
        };
        // Every change applied in Redis by now, however long the journal
        // takes; a journal shutting down answers nothing.
        if let Err(e) = journal.written_up_to_now().await {
            tracing::debug!(error = %e, "cannot write the queued status changes a fenced shard waits for");
            continue;
        }
        if let Err(e) = redis.journal_sync().say_flushed(&node_id, asked).await {
            tracing::debug!(error = %e, "cannot say the queued status changes are written");
        }
    }
}

/// Reads the paused topics each second into `delayq_topic_paused` (so a
/// scrape never waits for Redis).
pub(super) async fn watch_paused(redis: RedisSchedule) {
    loop {
        match redis.topics().paused_topics().await {
            Ok(paused) => crate::metrics::metrics().paused_topics(paused.keys()),
            Err(e) => tracing::debug!(error = %e, "cannot read the paused topics"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Reads how many messages of each topic fall due within the next hour,
/// every 15 s, into `delayq_topic_due_next_hour` (so a scrape never waits
/// for it): on the leader alone (standalone: the node), so the cluster
/// reads it once and a sum over nodes counts each message once.
pub(super) async fn watch_due_next_hour(queue: crate::queue::Queue, cluster: ClusterHandle) {
    let none = std::collections::BTreeMap::new();
    loop {
        if cluster.is_leader() {
            match queue.due_next_hour().await {
                Ok(counts) => crate::metrics::metrics().due_next_hour(&counts),
                Err(e) => tracing::debug!(error = %e, "cannot read the next hour's forecast"),
            }
        } else {
            crate::metrics::metrics().due_next_hour(&none);
        }
        tokio::time::sleep(Duration::from_secs(15)).await;
    }
}

/// Sleeps `every`, and again while this node does not lead: the turns of
/// a duty of the leader alone.
async fn leader_turn(cluster: &ClusterHandle, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        if cluster.is_leader() {
            return;
        }
    }
}

/// Every `every`, the leader compares the journal with Redis, schedules
/// again what Redis lost with its data set marker intact and takes out
/// what the journal ended (see [`crate::reconcile`]). While the marker is missing the data set watch
/// restores everything instead.
pub(super) async fn reconcile_periodically(
    reconciler: Reconciler,
    cluster: ClusterHandle,
    every: Duration,
) {
    loop {
        leader_turn(&cluster, every).await;
        if !matches!(
            reconciler.redis.ownership().has_dataset_marker().await,
            Ok(true)
        ) {
            continue;
        }
        // A message a node acked or cancelled in Redis while its journal was
        // down still looks live in the journal, and once its tombstone is
        // gone, missing from Redis: repairing it would deliver it again.
        match reconciler.redis.journal_sync().journals_behind().await {
            Ok(nodes) if nodes.is_empty() => {}
            Ok(nodes) => {
                tracing::info!(?nodes, "a node's journal is behind; reconciling later");
                continue;
            }
            Err(_) => continue,
        }
        tracing::debug!("reconciling the journal with Redis");
        let ran = reconciler.run(Repair::Delivery, |_| {}).await;
        if let Ok(r) = &ran {
            // For the dashboard, whichever node serves it.
            let kept = serde_json::json!({"node": cluster.view().node_id, "at": crate::message::now_ms(), "report": r});
            if let Err(e) = reconciler
                .redis
                .records()
                .save_reconciled(&kept.to_string())
                .await
            {
                tracing::debug!(error = %e, "cannot keep the reconciliation's report for the dashboard");
            }
        }
        match ran {
            Ok(r) if r.is_clean() => tracing::debug!(
                journal_scanned = r.journal_scanned,
                redis_scanned = r.redis_scanned,
                elapsed_ms = r.elapsed_ms,
                "reconciled: the journal and Redis agree"
            ),
            Ok(r) => tracing::warn!(
                missing = r.missing.count,
                rescheduled = r.missing.repaired,
                unscheduled = r.unscheduled.count,
                put_back = r.unscheduled.repaired,
                finished_in_journal = r.finished_in_journal.count,
                purged = r.finished_in_journal.repaired,
                status_mismatch = r.status_mismatch.count,
                unknown = r.unknown.count,
                unjournaled = r.unjournaled.count,
                journaled = r.unjournaled.repaired,
                elapsed_ms = r.elapsed_ms,
                "reconciled: the journal and Redis differed; messages Redis lost are scheduled again \
                 and those the journal ended are taken out of Redis \
                 (GET /admin/reconcile?repair=true puts the rest right)"
            ),
            Err(QueueError::JournalBehind(nodes)) => {
                tracing::info!(?nodes, "a node's journal is behind; reconciling later")
            }
            Err(e) => tracing::warn!(error = %e, "reconciliation failed; trying again next time"),
        }
    }
}

/// How often a node checks that Redis still holds its data set.
const DATASET_CHECK: Duration = Duration::from_secs(1);

/// Restores every live message from the journal when Redis has no dataset
/// marker (a new Redis, or one that lost its data), then sets the marker.
pub(super) async fn ensure_dataset(restorer: &Restorer, node_id: &str) -> anyhow::Result<()> {
    if restorer.redis.ownership().has_dataset_marker().await? {
        return Ok(());
    }
    let report = restorer
        .all(true, false, |_| {})
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if report.restored > 0 {
        tracing::warn!(
            restored = report.restored,
            "Redis held no delayq data set; restored it from the journal"
        );
    }
    restorer
        .redis
        .ownership()
        .set_dataset_marker(node_id)
        .await?;
    Ok(())
}

/// Redis may lose its data while the node runs (a restart without
/// persistence, a flush): notice it and rebuild from the journal. A duty of
/// the leader alone, so one node restores.
pub(super) async fn watch_dataset(restorer: Restorer, node_id: String, cluster: ClusterHandle) {
    let mut every = tokio::time::interval(DATASET_CHECK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if !cluster.is_leader() {
            continue;
        }
        if let Err(e) = ensure_dataset(&restorer, &node_id).await {
            tracing::warn!(error = %e, "cannot check or restore the Redis data set; retrying");
        }
        replay_spill(&restorer.redis, &restorer.journal, &node_id).await;
    }
}

/// Every `every`, the leader removes from the journal the finished messages
/// it no longer keeps (see [`crate::retention`]).
pub(super) async fn retain_periodically(
    retention: Retention,
    cluster: ClusterHandle,
    every: Duration,
) {
    loop {
        leader_turn(&cluster, every).await;
        match retention.run().await {
            Ok(p) if p.purged > 0 => tracing::info!(
                purged = p.purged,
                ended = p.ended,
                "removed finished messages from the journal"
            ),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "journal retention failed; trying again next time")
            }
        }
    }
}

//! The journal spill: status changes the journal did not take before
//! shutdown, kept in Redis (`{P}:journal-spill`) and written by the next
//! node.

use std::time::Duration;

use crate::actors::journal::Journal;
use crate::redis::schedule::{LeaseOp, RedisSchedule};
use crate::redis::spill as spill_list;

/// Spilled status changes written per journal commit.
const SPILL_PAGE: isize = 500;

/// Keeps status changes the journal did not take before shutdown in Redis
/// (`{P}:journal-spill`), for the next node to write. Only when Redis too is
/// unreachable are they lost, and then each is logged.
pub(super) async fn spill(redis: &RedisSchedule, changes: &[crate::journal::StatusChange]) {
    if changes.is_empty() {
        return;
    }
    let lines: Vec<String> = changes.iter().map(|c| c.to_json()).collect();
    let mut con = redis.connection();
    let key = redis.keys().journal_spill();
    match spill_list::push(&mut con, &key, &lines, SPILL_PAGE as usize).await {
        Ok(()) => tracing::warn!(
            changes = changes.len(),
            "the journal did not take every status change before shutdown; kept in Redis for the next node to write"
        ),
        Err(e) => {
            tracing::error!(error = %e, changes = changes.len(), "neither the journal nor Redis took these status changes at shutdown");
            for line in &lines {
                tracing::error!(change = %line, "status change not journaled");
            }
        }
    }
}

/// Writes status changes a stopped node kept in Redis to the journal, a
/// page at a time, removing each page once committed.
pub(super) async fn replay_spill(redis: &RedisSchedule, journal: &Journal, node_id: &str) {
    let key = redis.keys().journal_spill();
    let mut con = redis.connection();
    let empty = spill_list::len(&mut con, &key)
        .await
        .map_or(true, |n| n == 0);
    if empty {
        return;
    }
    // One node at a time: two reading the same page and each trimming it
    // would trim a page nobody wrote.
    let lock = format!("{key}:lock");
    match redis
        .lease(
            LeaseOp::Acquire,
            &lock,
            node_id,
            SPILL_LOCK.as_millis() as u64,
        )
        .await
    {
        Ok((true, _)) => {}
        _ => return,
    }
    replay_spill_pages(redis, journal, &key).await;
    let _ = redis.lease(LeaseOp::Release, &lock, node_id, 0).await;
}

/// How long one node may hold the right to write spilled changes.
const SPILL_LOCK: Duration = Duration::from_secs(60);

async fn replay_spill_pages(redis: &RedisSchedule, journal: &Journal, key: &str) {
    let mut con = redis.connection();
    loop {
        let page: Vec<String> = match spill_list::first(&mut con, key, SPILL_PAGE).await {
            Ok(p) => p,
            Err(_) => return,
        };
        if page.is_empty() {
            return;
        }
        let changes: Vec<_> = page
            .iter()
            .filter_map(|l| {
                let change = crate::journal::StatusChange::from_json(l);
                if change.is_none() {
                    tracing::error!(line = %l, "a status change kept in Redis cannot be read; dropped");
                }
                change
            })
            .collect();
        if let Err(e) = journal.record_durable(changes).await {
            tracing::warn!(error = %e, "cannot write status changes kept in Redis yet; retrying later");
            return;
        }
        let trimmed = spill_list::drop_first(&mut con, key, page.len()).await;
        if trimmed.is_err() {
            return;
        }
        tracing::info!(
            changes = page.len(),
            "wrote status changes a stopped node kept in Redis to the journal"
        );
    }
}

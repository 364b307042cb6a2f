//! The journal spill: status changes the journal did not take before
//! shutdown, kept in Redis (`{P}:journal-spill`) and written by the next
//! node.

use std::time::Duration;

use crate::actors::journal::Journal;
use crate::faults;
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
    // would trim a page nobody wrote. The lock is renewed while a page is
    // written, and a page is removed only while the lock is still held.
    let lock = format!("{key}:lock");
    let lock_ms = spill_lock().as_millis() as u64;
    match redis
        .ownership()
        .lease(LeaseOp::Acquire, &lock, node_id, lock_ms)
        .await
    {
        Ok((true, _)) => {}
        _ => return,
    }
    replay_spill_pages(redis, journal, &key, &lock, node_id).await;
    let _ = redis
        .ownership()
        .lease(LeaseOp::Release, &lock, node_id, 0)
        .await;
}

/// How long one node may hold the right to write spilled changes without
/// renewing it (`spill_lock_ms=MS` in a test).
const SPILL_LOCK: Duration = Duration::from_secs(60);

fn spill_lock() -> Duration {
    faults::millis("spill_lock_ms").map_or(SPILL_LOCK, Duration::from_millis)
}

/// Spilled changes read per page (`spill_page=N` in a test).
fn spill_page() -> isize {
    faults::millis("spill_page").map_or(SPILL_PAGE, |n| n.max(1) as isize)
}

async fn replay_spill_pages(
    redis: &RedisSchedule,
    journal: &Journal,
    key: &str,
    lock: &str,
    node_id: &str,
) {
    let mut con = redis.connection();
    let lock_ms = spill_lock().as_millis() as u64;
    loop {
        let page: Vec<String> = match spill_list::first(&mut con, key, spill_page()).await {
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
        let write = async {
            faults::pause_here("spill_page_slow").await;
            journal.record_durable(changes).await
        };
        match renewing(redis, lock, node_id, lock_ms, write).await {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                tracing::warn!(error = %e, "cannot write status changes kept in Redis yet; retrying later");
                return;
            }
            None => {
                tracing::warn!("lost the right to write status changes kept in Redis; another node writes them");
                return;
            }
        }
        match redis
            .journal_sync()
            .trim_spill(lock, key, node_id, page.len())
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!("lost the right to write status changes kept in Redis; another node writes them");
                return;
            }
            Err(_) => return,
        }
        tracing::info!(
            changes = page.len(),
            "wrote status changes a stopped node kept in Redis to the journal"
        );
    }
}

/// Runs `work` while renewing the lock `lock` every third of its time;
/// None when the lock was lost meanwhile (the work is then abandoned).
async fn renewing<T>(
    redis: &RedisSchedule,
    lock: &str,
    holder: &str,
    lock_ms: u64,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::pin!(work);
    let mut every = tokio::time::interval(Duration::from_millis((lock_ms / 3).max(1)));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        tokio::select! {
            done = &mut work => return Some(done),
            _ = every.tick() => {
                if let Ok((false, _)) = redis.ownership().lease(LeaseOp::Renew, lock, holder, lock_ms).await {
                    return None;
                }
            }
        }
    }
}

//! Faults a test can switch on in a real process, to show that a guard
//! holds (or, switched on to plant a bug, that a checker catches it).
//!
//! `DELAYQ_FAULTS` holds names separated by commas; each is looked up by
//! the code path it breaks. Unset in production: [`on`] then costs one
//! read of a value computed once.
//!
//! | name | effect |
//! |---|---|
//! | `zk_delete_owner_fails` | the first delete of a shard's owner node in a hand-off fails (as a ZooKeeper error would) |
//! | `ignore_permit` | a shard's scan runs without a valid permit (membership not confirmed lately): the epoch in Redis alone fences a paused old owner |
//! | `sync_paused_slow` | a starting node waits 600 ms after reading the paused topics and again after bringing the shards in line (a slow node, to show that a pause made meanwhile is not undone) |
//! | `ignore_receipts` | acks and nacks are applied as if they carried no receipt (a planted bug: a late consumer's ack or nack then touches the next delivery) |

use std::sync::LazyLock;

static FAULTS: LazyLock<Vec<String>> = LazyLock::new(|| {
    std::env::var("DELAYQ_FAULTS")
        .unwrap_or_default()
        .split(',')
        .map(|f| f.trim().to_string())
        .filter(|f| !f.is_empty())
        .collect()
});

/// Whether the fault `name` is switched on in this process.
pub fn on(name: &str) -> bool {
    !FAULTS.is_empty() && FAULTS.iter().any(|f| f == name)
}

static FIRED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Whether the fault `name` is switched on and has not fired yet in this
/// process (it fires once).
pub fn once(name: &str) -> bool {
    if !on(name) {
        return false;
    }
    let mut fired = FIRED.lock().unwrap_or_else(|p| p.into_inner());
    if fired.iter().any(|f| f == name) {
        return false;
    }
    fired.push(name.to_string());
    true
}

/// Waits 600 ms where the fault `name` is switched on (a slow step).
pub async fn pause_here(name: &str) {
    if on(name) {
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    }
}

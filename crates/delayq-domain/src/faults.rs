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
//! | `zk_resume_check_fails` | the first resume after a reconnection fails at its second owner-node check (as a connection lost again would) |
//! | `ignore_permit` | a shard's scan runs without a valid permit (membership not confirmed lately): the epoch in Redis alone fences a paused old owner |
//! | `tombstone_ms=MS` | tombstones (and so the oldest reading schedule.lua takes, half of it) last MS instead of two minutes, so a test can outlast them |
//! | `restore_frozen=MS` | a restore waits MS after reading each page of the journal (a process frozen mid-restore) |
//! | `sync_paused_slow` | a starting node waits 600 ms after reading the paused topics and again after bringing the shards in line (a slow node, to show that a pause made meanwhile is not undone) |
//! | `spill_lock_ms=MS` | the lock of a journal spill replay lasts MS instead of a minute (renewed every third of it) |
//! | `spill_page=N` | a journal spill replay reads N changes per page instead of 500 |
//! | `spill_page_slow=MS` | a journal spill replay waits MS before writing each page (a slow journal) |
//! | `outbox_stop_after_push` | the outbox ingester kills its own process (SIGKILL) right after a push of rows is durable, before it deletes them (a node killed at the worst moment) |
//! | `ignore_receipts` | acks and nacks are applied as if they carried no receipt (a planted bug: a late consumer's ack or nack then touches the next delivery) |
//! | `plant_early` | a pushed message's due time is computed 400 ms early (a planted bug, for the fault checker) |
//! | `plant_lost` | one message in 16 handed out is acked instead (a planted bug: it never reaches a consumer) |
//! | `plant_revived` | one ack in 8 of a message in flight is answered Consumed and not applied (a planted bug: the message comes back after its ttl) |
//! | `plant_answer` | one cancel in 2 is answered `deleted` and not applied (a planted bug: a waiting message is delivered after it) |
//! | `plant_grouped` | a message of an ordered group gets an id of any shard instead of its group's (a planted bug: its group's messages spread over shards, each keeping a turn of its own, and two of a group are handed out at once) |
//! | `plant_stale_body` | a push with `onDuplicate: "replace"` moves the live message's due time and priority in Redis but leaves its body (a planted bug: the answer says `replaced` and the old body is delivered) |

use std::sync::LazyLock;

static FAULTS: LazyLock<Vec<String>> = LazyLock::new(|| {
    std::env::var("DELAYQ_FAULTS")
        .unwrap_or_default()
        .split(',')
        .map(|f| f.trim().to_string())
        .filter(|f| !f.is_empty())
        .collect()
});

/// Whether the fault `name` is switched on in this process (`name`, or
/// `name=VALUE`).
pub fn on(name: &str) -> bool {
    value(name).is_some()
}

/// The fault `name`'s value: `Some("")` for `name`, `Some(VALUE)` for
/// `name=VALUE`, None when it is off.
fn value(name: &str) -> Option<&'static str> {
    if FAULTS.is_empty() {
        return None;
    }
    FAULTS.iter().find_map(|f| match f.split_once('=') {
        Some((n, v)) if n == name => Some(v),
        None if f == name => Some(""),
        _ => None,
    })
}

/// The fault `name`'s value in milliseconds (`name=MS`), when it is on
/// with one.
pub fn millis(name: &str) -> Option<u64> {
    value(name).and_then(|v| v.parse().ok())
}

/// Whether the planted bug `name` is on and strikes the message `id`:
/// one message in `one_in`, chosen by a hash of its id (so every node
/// strikes the same ones).
pub fn strikes(name: &str, id: i64, one_in: u64) -> bool {
    on(name)
        && (id as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(17)
            .is_multiple_of(one_in)
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

/// Waits where the fault `name` is switched on (a slow step, a process
/// frozen): `name=MS` milliseconds, 600 for `name` alone.
pub async fn pause_here(name: &str) {
    if on(name) {
        let ms = millis(name).unwrap_or(600);
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

//! Whether the shards this node owns can be scanned, for `GET /ready`,
//! `/metrics` and the log.
//!
//! A shard actor says after each scan whether it went through. An owned
//! shard whose scans keep failing (Redis refuses its epoch, or Redis
//! errors) for longer than [`UNSCANNABLE_AFTER`] makes `/ready` answer 503
//! naming it, and `delayq_shard_unscannable` 1: nothing of that shard is
//! being delivered. The log says so at most once per [`LOG_EVERY`] per
//! shard and kind, with how many lines it left out, so a shard that cannot
//! be scanned never floods the log.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an owned shard's scans may keep failing before the node is
/// not ready.
pub const UNSCANNABLE_AFTER: Duration = Duration::from_secs(3);
/// One log line per shard and kind this often at most.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

#[derive(Default)]
struct State {
    /// Shards whose scans fail: since when, and why.
    failing: BTreeMap<u32, (Instant, &'static str)>,
    /// (shard, kind) → when last logged, lines left out since.
    logged: BTreeMap<(u32, &'static str), (Instant, u64)>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut State) -> T) -> T {
    let mut g = STATE.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(State::default))
}

/// A scan of `shard` went through.
pub fn scan_ok(shard: u32) {
    let was = with(|s| s.failing.remove(&shard).is_some());
    if was {
        crate::metrics::metrics().set_unscannable(shard, false);
        tracing::info!(shard, "the shard is scanned again");
    }
}

/// A scan of `shard` failed (`why`).
pub fn scan_failed(shard: u32, why: &'static str) {
    let since = with(|s| s.failing.entry(shard).or_insert((Instant::now(), why)).0);
    if since.elapsed() >= UNSCANNABLE_AFTER {
        crate::metrics::metrics().set_unscannable(shard, true);
    }
}

/// This node no longer owns `shard`.
pub fn forget(shard: u32) {
    if with(|s| s.failing.remove(&shard).is_some()) {
        crate::metrics::metrics().set_unscannable(shard, false);
    }
}

/// Owned shards whose scans have failed for longer than
/// [`UNSCANNABLE_AFTER`]: (shard, for how long, why).
pub fn unscannable() -> Vec<(u32, Duration, &'static str)> {
    let list: Vec<_> = with(|s| {
        s.failing
            .iter()
            .map(|(&shard, &(since, why))| (shard, since.elapsed(), why))
            .filter(|(_, d, _)| *d >= UNSCANNABLE_AFTER)
            .collect()
    });
    for (shard, _, _) in &list {
        crate::metrics::metrics().set_unscannable(*shard, true);
    }
    list
}

/// Whether a line of `kind` about `shard` may be logged now; if so, how
/// many were left out since the last one.
pub fn may_log(shard: u32, kind: &'static str) -> Option<u64> {
    with(|s| match s.logged.get_mut(&(shard, kind)) {
        None => {
            s.logged.insert((shard, kind), (Instant::now(), 0));
            Some(0)
        }
        Some(e) if e.0.elapsed() >= LOG_EVERY => {
            let left_out = e.1;
            *e = (Instant::now(), 0);
            Some(left_out)
        }
        Some(e) => {
            e.1 += 1;
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_are_limited() {
        assert_eq!(may_log(900, "x"), Some(0));
        for _ in 0..50 {
            assert_eq!(may_log(900, "x"), None);
        }
        assert_eq!(may_log(901, "x"), Some(0));
    }

    #[test]
    fn failing_shards_are_reported_after_a_while() {
        scan_failed(910, "stale epoch");
        assert!(unscannable().iter().all(|(s, _, _)| *s != 910));
        scan_ok(910);
        assert!(unscannable().iter().all(|(s, _, _)| *s != 910));
    }
}

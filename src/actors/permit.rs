//! The shards' scan permit: the cluster side grants it, the shard actors
//! check it before every scan.

use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Permission to scan, confirmed by the membership side with a round trip
/// to ZooKeeper (or the standalone lease's renewal in Redis) and valid for
/// a fraction of the session (or lease) time after that round trip was
/// sent. Shard actors do not scan without it, so a process paused past its
/// session (SIGSTOP, a stall) scans nothing when it resumes, not even
/// before it learns that its session expired; the epoch check in Redis
/// backs this up.
#[derive(Clone, Default, Debug)]
pub struct Permit(Arc<Mutex<Option<Instant>>>);

impl Permit {
    /// A permit that never lapses (tools and tests that own their shards).
    pub fn forever() -> Permit {
        Permit(Arc::new(Mutex::new(Some(
            Instant::now() + std::time::Duration::from_secs(100 * 365 * 24 * 3600),
        ))))
    }

    pub fn extend(&self, until: Instant) {
        let mut p = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *p = Some(p.map_or(until, |cur| cur.max(until)));
    }

    pub fn revoke(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    pub fn valid(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|until| Instant::now() < until)
    }
}

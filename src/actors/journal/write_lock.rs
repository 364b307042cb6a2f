//! SQLite's one writer at a time, shared by the JournalActor's threads,
//! with pushes going first.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// SQLite's one writer at a time, with pushes first: a producer waits for
/// its commit, while the status changes of deliveries can wait a little.
#[derive(Default)]
pub struct WriteLock {
    lock: Mutex<()>,
    /// Writers (pushes, changes a caller waits for) waiting for the lock.
    waiting: AtomicUsize,
}

/// How long background status changes let waiting pushes go first before
/// they take the lock in turn, so a stream of pushes cannot starve them.
const YIELD_TO_PUSHES: Duration = Duration::from_millis(50);

impl WriteLock {
    pub(super) fn first(&self) -> MutexGuard<'_, ()> {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        guard
    }

    pub(super) fn after_pushes(&self) -> MutexGuard<'_, ()> {
        let until = std::time::Instant::now() + YIELD_TO_PUSHES;
        loop {
            let guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            if self.waiting.load(Ordering::Acquire) == 0 || std::time::Instant::now() >= until {
                return guard;
            }
            drop(guard);
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

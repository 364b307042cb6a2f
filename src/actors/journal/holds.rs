//! Operations holding status changes Redis applied and the journal has not
//! been given yet (an ack batch between its Redis round and its queueing,
//! while it looks up the ids Redis does not hold). A fence's flush waits
//! for those that began before it: their changes then are queued, and the
//! queue's own wait covers them.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

#[derive(Default)]
pub(super) struct Holds {
    next: AtomicU64,
    open: Mutex<BTreeSet<u64>>,
    released: Notify,
}

/// Held from before an operation changes Redis until its status changes
/// are queued for the journal (dropped then, or when the operation is).
pub struct Hold {
    holds: Arc<Holds>,
    seq: u64,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.holds
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.seq);
        self.holds.released.notify_waiters();
    }
}

impl Holds {
    pub(super) fn hold(self: &Arc<Self>) -> Hold {
        let seq = self.next.fetch_add(1, Ordering::AcqRel);
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(seq);
        Hold {
            holds: self.clone(),
            seq,
        }
    }

    /// Waits until every hold taken before this call is released.
    pub(super) async fn released_before_now(&self) {
        let mark = self.next.load(Ordering::Acquire);
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            let oldest = self
                .open
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .first()
                .copied();
            if oldest.is_none_or(|s| s >= mark) {
                return;
            }
            released.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_wait_ends_when_the_holds_before_it_are_released_not_later_ones() {
        let holds = Arc::new(Holds::default());
        let first = holds.hold();
        let waiting = {
            let holds = holds.clone();
            tokio::spawn(async move { holds.released_before_now().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let later = holds.hold();
        assert!(!waiting.is_finished(), "ended with an earlier hold open");
        drop(first);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("still waiting for a hold taken after it")
            .unwrap();
        drop(later);
    }
}

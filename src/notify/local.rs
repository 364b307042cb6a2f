//! Long polls waiting per topic. A long poll waits on its topic's
//! [`Notify`]; the shard actors (and notices from other nodes) notify a
//! topic as soon as messages of it became ready, so a waiting consumer is
//! answered without a polling interval.
//!
//! The map holds weak references: an entry lives while some long poll holds
//! its topic's `Notify`, and entries nobody holds are dropped as the map
//! grows, so polling many made-up topic names does not grow it for good. A
//! waiter holds its `Arc`, so dropping a dead entry never loses a wake-up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

#[derive(Clone, Default)]
pub struct Topics {
    inner: Arc<Mutex<Map>>,
}

#[derive(Default)]
struct Map {
    topics: HashMap<String, Weak<Notify>>,
    /// Size after the last sweep of dead entries; the next sweep runs when
    /// the map has doubled.
    swept_at: usize,
}

impl Topics {
    /// The `Notify` of `topic`, for a long poll to wait on while it holds it.
    pub fn topic(&self, topic: &str) -> Arc<Notify> {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.topics.get(topic).and_then(Weak::upgrade) {
            return n;
        }
        let n = Arc::new(Notify::new());
        map.topics.insert(topic.to_string(), Arc::downgrade(&n));
        if map.topics.len() > 2 * map.swept_at.max(512) {
            map.topics.retain(|_, w| w.strong_count() > 0);
            map.swept_at = map.topics.len();
        }
        n
    }

    /// Wakes every waiting long poll (after notices may have been lost).
    pub fn notify_all(&self) {
        let all: Vec<Arc<Notify>> = self
            .inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .topics
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for n in all {
            n.notify_waiters();
        }
    }

    /// Wakes every long poll waiting on `topic`.
    pub fn notify(&self, topic: &str) {
        let notify = self
            .inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .topics
            .get(topic)
            .and_then(Weak::upgrade);
        if let Some(n) = notify {
            n.notify_waiters();
        }
    }

    /// Topics in the map (for tests of its bound).
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .topics
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_lives_while_a_poll_holds_it() {
        let t = Topics::default();
        let held = t.topic("kept");
        for i in 0..10_000 {
            drop(t.topic(&format!("made-up-{i}")));
        }
        assert!(t.len() <= 2 * 512 + 1, "dead entries swept: {}", t.len());
        assert!(Arc::ptr_eq(&held, &t.topic("kept")), "a held entry stays");
    }

    #[tokio::test]
    async fn notify_wakes_a_waiting_poll() {
        let t = Topics::default();
        let n = t.topic("a");
        let woken = n.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        t.notify("a");
        tokio::time::timeout(std::time::Duration::from_secs(1), woken)
            .await
            .expect("woken");
    }
}

//! Waiting consumers. A long poll waits on its topic's [`Notify`]; the shard
//! actors notify a topic as soon as they move messages into its ready
//! queues, so a waiting consumer is answered without a polling interval;
//! messages made ready on another node arrive as notices over Redis
//! pub/sub ([`crate::redis::pubsub`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

#[derive(Clone, Default)]
pub struct Waiters {
    topics: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
}

impl Waiters {
    pub fn topic(&self, topic: &str) -> Arc<Notify> {
        let mut map = self.topics.lock().expect("waiters poisoned");
        map.entry(topic.to_string()).or_default().clone()
    }

    /// Wakes every waiting consumer (after notices may have been lost).
    pub fn notify_all(&self) {
        let all: Vec<Arc<Notify>> = self
            .topics
            .lock()
            .expect("waiters poisoned")
            .values()
            .cloned()
            .collect();
        for n in all {
            n.notify_waiters();
        }
    }

    /// Wakes every consumer waiting on `topic`.
    pub fn notify(&self, topic: &str) {
        let notify = self
            .topics
            .lock()
            .expect("waiters poisoned")
            .get(topic)
            .cloned();
        if let Some(n) = notify {
            n.notify_waiters();
        }
    }
}

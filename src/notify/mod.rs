//! Wake-ups: one notifier, reached two ways.
//!
//! Two things must wake early rather than at their next safety scan:
//! - a shard's scanner, when a message arrives due before its next wake-up
//!   ([`Notice::Due`]);
//! - consumers long-polling a topic, when messages of it became ready
//!   ([`Notice::Ready`]).
//!
//! On the node that made the change, the notice goes straight to its
//! target ([`local`]: the router wakes its shard actor; the shard actor wakes
//! the topic's long polls). For every other node, the Lua script that made
//! the change publishes the same notice on a Redis channel in the same
//! atomic step, and [`redis`] hands what arrives to the same [`Notifier`].
//! Pub/sub loses what is sent while a subscriber is disconnected, so after
//! each (re)subscription the notifier wakes every shard and every long poll
//! once ([`Notice::Resubscribed`]); beyond that, a shard sleeps at most 1 s
//! and a long poll looks again every second.

pub mod local;
pub mod notice;
pub mod redis;

use actix::Recipient;

use crate::redis::keys::Keys;
pub use local::Topics;
pub use notice::{Notice, Touch, WakeAll};

/// Where notices go on this node: the router (which owns the shard actors)
/// and the long polls waiting per topic.
#[derive(Clone)]
pub struct Notifier {
    topics: Topics,
    touch: Recipient<Touch>,
    wake_all: Recipient<WakeAll>,
}

impl Notifier {
    pub fn new(topics: Topics, touch: Recipient<Touch>, wake_all: Recipient<WakeAll>) -> Self {
        Notifier {
            topics,
            touch,
            wake_all,
        }
    }

    pub fn notify(&self, notice: Notice) {
        match notice {
            Notice::Due { shard, at_ms } => self.touch.do_send(Touch { shard, at_ms }),
            Notice::Ready { topic } => self.topics.notify(&topic),
            Notice::Resubscribed => {
                self.wake_all.do_send(WakeAll);
                self.topics.notify_all();
            }
        }
    }

    /// Subscribes to the Redis channels of `keys` for the life of the
    /// process and passes what other nodes publish to [`Notifier::notify`].
    pub fn listen_redis(&self, url: String, keys: Keys, node: String) {
        let me = self.clone();
        actix::spawn(redis::run(url, keys, node, move |n| me.notify(n)));
    }
}

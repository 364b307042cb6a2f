//! The Redis way in: notices other nodes' scripts publish.
//!
//! A node subscribes to every shard's wake channel and to the ready channel
//! of its key prefix (see [`crate::redis::keys`]); the scripts publish on
//! them (schedule.lua when a message is due before everything its shard
//! held, tick.lua when messages became ready). After every (re)subscription
//! the subscriber reports [`Notice::Resubscribed`].

use std::time::Duration;

use futures::StreamExt;

use super::Notice;
use crate::redis::keys::Keys;

/// Parses one channel message; `None` for one of this node's own ready
/// notices (it woke its consumers directly) or anything malformed.
pub fn parse(keys: &Keys, node: &str, channel: &str, payload: &str) -> Vec<Notice> {
    if channel == keys.ready_channel() {
        let Some((from, topics)) = payload.split_once('|') else {
            return Vec::new();
        };
        if from == node {
            return Vec::new();
        }
        return topics
            .split(',')
            .filter(|t| !t.is_empty())
            .map(|t| Notice::Ready {
                topic: t.to_string(),
            })
            .collect();
    }
    let shard = channel
        .strip_suffix(":wake")
        .and_then(|c| c.strip_prefix(&format!("{{{}:", keys.prefix())))
        .and_then(|c| c.strip_suffix('}'))
        .and_then(|s| s.parse::<u32>().ok())
        .filter(|s| *s < keys.shards());
    match (shard, payload.parse::<i64>()) {
        (Some(shard), Ok(at_ms)) => vec![Notice::Due { shard, at_ms }],
        _ => Vec::new(),
    }
}

/// Subscribes and hands every notice to `on_notice`, for the life of the
/// process; reconnects (with backoff) whenever the connection drops.
pub async fn run(url: String, keys: Keys, node: String, mut on_notice: impl FnMut(Notice)) {
    let mut channels: Vec<String> = (0..keys.shards()).map(|s| keys.wake_channel(s)).collect();
    channels.push(keys.ready_channel());
    let mut backoff = Duration::from_millis(100);
    loop {
        let subscribed = async {
            let client = crate::redis::client(url.as_str())?;
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channels).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        match tokio::time::timeout(Duration::from_secs(5), subscribed).await {
            Ok(Ok(pubsub)) => {
                backoff = Duration::from_millis(100);
                on_notice(Notice::Resubscribed);
                let mut stream = pubsub.into_on_message();
                while let Some(msg) = stream.next().await {
                    let payload: String = msg.get_payload().unwrap_or_default();
                    for n in parse(&keys, &node, msg.get_channel_name(), &payload) {
                        on_notice(n);
                    }
                }
                tracing::warn!("Redis pub/sub connection closed; resubscribing");
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot subscribe to Redis wake-ups; retrying")
            }
            Err(_) => tracing::warn!("subscribing to Redis wake-ups timed out; retrying"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_wake_and_ready_notices() {
        let k = Keys::new("dq", 8);
        assert_eq!(
            parse(&k, "n1", "{dq:3}:wake", "1700000000123"),
            vec![Notice::Due {
                shard: 3,
                at_ms: 1_700_000_000_123
            }]
        );
        assert!(
            parse(&k, "n1", "{dq:9}:wake", "1").is_empty(),
            "no such shard"
        );
        assert!(parse(&k, "n1", "{other:3}:wake", "1").is_empty());
        assert_eq!(
            parse(&k, "n1", "{dq}:ready", "n2|a,b.c"),
            vec![
                Notice::Ready { topic: "a".into() },
                Notice::Ready {
                    topic: "b.c".into()
                }
            ]
        );
        assert!(parse(&k, "n1", "{dq}:ready", "n1|a").is_empty(), "our own");
    }
}

//! The Redis way in: notices other nodes' scripts publish.
//!
//! A node subscribes to every shard's wake and ready channels (see
//! [`crate::redis::keys`]; sharded channels on a Redis Cluster); the
//! scripts publish on them (schedule.lua when a message is due before everything its shard
//! held, tick.lua when messages became ready). After every (re)subscription
//! the subscriber reports [`Notice::Resubscribed`].

use std::time::Duration;

use futures::StreamExt;

use redis::{PushKind, Value};

use super::notice::Notice;
use crate::redis::conn::{cluster_client, slot_ranges, Target};
use crate::redis::keys::Keys;

/// Parses one channel message; `None` for one of this node's own ready
/// notices (it woke its consumers directly) or anything malformed.
pub fn parse(keys: &Keys, node: &str, channel: &str, payload: &str) -> Vec<Notice> {
    let shard_of = |suffix: &str| {
        channel
            .strip_suffix(suffix)
            .and_then(|c| c.strip_prefix(&format!("{{{}:", keys.prefix())))
            .and_then(|c| c.strip_suffix('}'))
            .and_then(|s| s.parse::<u32>().ok())
            .filter(|s| *s < keys.shards())
    };
    if shard_of(":ready").is_some() {
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
    match (shard_of(":wake"), payload.parse::<i64>()) {
        (Some(shard), Ok(at_ms)) => vec![Notice::Due { shard, at_ms }],
        _ => Vec::new(),
    }
}

/// Subscribes and hands every notice to `on_notice`, for the life of the
/// process; reconnects (with backoff) whenever the connection drops.
pub async fn run(url: String, keys: Keys, node: String, mut on_notice: impl FnMut(Notice)) {
    let channels: Vec<String> = (0..keys.shards())
        .flat_map(|s| [keys.wake_channel(s), keys.ready_channel(s)])
        .collect();
    // Each shard's wake and ready channels, side by side.
    if let Ok(Target::Cluster { seeds, tls }) = Target::parse(&url) {
        return run_sharded(&seeds, tls, &channels, &keys, &node, on_notice).await;
    }
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

/// How often a cluster subscriber asks which master serves each shard's
/// channels.
const TOPOLOGY_CHECK: Duration = Duration::from_secs(1);

/// On a Redis Cluster: SSUBSCRIBE to every shard's channels, each on the
/// master of its slot. The subscription is made anew, and that counts as
/// [`Notice::Resubscribed`] (notices sent meanwhile may be lost), when a
/// node drops the connection, when Redis unsubscribes a channel (its slot
/// moved), and when the cluster names another master for a shard's slot
/// than the one subscribed to: a master that hangs instead of dying is
/// failed over while the subscriber's connection to it stays open and
/// silent, so that is looked at every [`TOPOLOGY_CHECK`].
async fn run_sharded(
    seeds: &[String],
    tls: bool,
    channels: &[String],
    keys: &Keys,
    node: &str,
    mut on_notice: impl FnMut(Notice),
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let subscribed = async {
            let mut con = cluster_client(seeds, tls, Some(tx))?
                .get_async_connection()
                .await?;
            let mut slots = Vec::new();
            // One call per shard: a call's channels must share a slot.
            for pair in channels.chunks(2) {
                slots.push(
                    redis::cmd("CLUSTER")
                        .arg("KEYSLOT")
                        .arg(&pair[0])
                        .query_async::<i64>(&mut con)
                        .await?,
                );
                con.ssubscribe(pair).await?;
            }
            let masters = masters_of(&mut con, &slots).await?;
            Ok::<_, redis::RedisError>((con, slots, masters))
        };
        let why = match tokio::time::timeout(Duration::from_secs(10), subscribed).await {
            Ok(Ok((mut con, slots, masters))) => {
                backoff = Duration::from_millis(100);
                on_notice(Notice::Resubscribed);
                let mut check = tokio::time::interval(TOPOLOGY_CHECK);
                check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                check.tick().await;
                loop {
                    tokio::select! {
                        push = rx.recv() => match push.map(|p| (p.kind, p.data)) {
                            None => break "the connection closed".to_string(),
                            Some((PushKind::SMessage, data)) => {
                                let text = |v: Option<&Value>| match v {
                                    Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                                    _ => String::new(),
                                };
                                let (channel, payload) = (text(data.first()), text(data.get(1)));
                                for n in parse(keys, node, &channel, &payload) {
                                    on_notice(n);
                                }
                            }
                            Some((PushKind::Disconnection, _)) => {
                                break "a node dropped the connection".to_string()
                            }
                            Some((PushKind::SUnsubscribe, _)) => {
                                break "Redis unsubscribed a channel (its slot moved)".to_string()
                            }
                            Some(_) => {}
                        },
                        _ = check.tick() => {
                            // A node that does not answer at once (a hung
                            // one) is skipped: the next look asks another.
                            let look = masters_of(&mut con, &slots);
                            if let Ok(Ok(now)) = tokio::time::timeout(Duration::from_millis(500), look).await {
                                if now != masters {
                                    break "a shard's slot is served by another master".to_string();
                                }
                            }
                        }
                    }
                }
            }
            Ok(Err(e)) => format!("cannot subscribe: {e}"),
            Err(_) => "subscribing timed out".to_string(),
        };
        tracing::warn!(why, "subscribing to the Redis Cluster's wake-ups again");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// The address of the master serving each of `slots`, as the node the
/// client asks (CLUSTER SLOTS) sees it.
async fn masters_of(
    con: &mut redis::cluster_async::ClusterConnection,
    slots: &[i64],
) -> redis::RedisResult<Vec<Option<String>>> {
    let reply: Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(con).await?;
    Ok(slot_masters(&reply, slots))
}

/// The `host:port` of the master of each of `slots` in a CLUSTER SLOTS reply.
fn slot_masters(reply: &Value, slots: &[i64]) -> Vec<Option<String>> {
    let ranges = slot_ranges(reply);
    slots
        .iter()
        .map(|s| {
            ranges
                .iter()
                .find(|r| r.first <= *s && *s <= r.last)
                .map(|r| format!("{}:{}", r.host, r.port))
        })
        .collect()
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
            parse(&k, "n1", "{dq:7}:ready", "n2|a,b.c"),
            vec![
                Notice::Ready { topic: "a".into() },
                Notice::Ready {
                    topic: "b.c".into()
                }
            ]
        );
        assert!(
            parse(&k, "n1", "{dq:7}:ready", "n1|a").is_empty(),
            "our own"
        );
        assert!(
            parse(&k, "n1", "{dq:8}:ready", "n2|a").is_empty(),
            "no such shard"
        );
    }

    #[test]
    fn reads_the_master_of_each_slot() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("h", 1),
                node("h", 4),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node("h", 2)]),
        ]);
        assert_eq!(
            slot_masters(&reply, &[0, 5460, 5461, 16383]),
            vec![
                Some("h:1".to_string()),
                Some("h:1".to_string()),
                Some("h:2".to_string()),
                Some("h:2".to_string())
            ]
        );
        assert_eq!(slot_masters(&Value::Nil, &[3]), vec![None]);
    }
}

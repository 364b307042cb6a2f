//! Rate limits per topic (`--topic-limit TOPIC=N/s`): at most N messages
//! of the topic are handed out per second, across every node and consumer
//! and forwarder, counted in Redis by a token bucket the claim scripts
//! spend from in the same step as they claim (limit.lua). The bucket holds
//! at most a second's worth, so after a quiet spell a burst of up to N goes
//! out at once, then N a second. A poll the limit holds back waits for the
//! next token rather than answering early and empty.
//!
//! On one Redis the topic has one bucket. On a Redis Cluster each shard has
//! its own, at N ÷ shards a second (a script touches one slot), so the
//! limit is never exceeded, and is reached while the topic's messages
//! spread over the shards, as their ids make them do (a shard with none
//! leaves its share unused). There a limit must be at least one a second
//! per shard.

use std::collections::BTreeMap;
use std::str::FromStr;

/// The most a limit may be: beyond it a limit means nothing here.
pub const MAX_PER_SECOND: u32 = 1_000_000;

/// One `TOPIC=N/s`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicLimit {
    pub topic: String,
    pub per_second: u32,
}

impl FromStr for TopicLimit {
    type Err = String;

    fn from_str(s: &str) -> Result<TopicLimit, String> {
        let (topic, rate) = s
            .split_once('=')
            .ok_or_else(|| format!("'{s}' is not a topic limit: TOPIC=N/s (say sms=200/s)"))?;
        if !crate::message::valid_topic(topic) {
            return Err(format!(
                "'{topic}' is not a topic: 1 to 128 characters of A-Z a-z 0-9 . _ : -"
            ));
        }
        let n = rate
            .strip_suffix("/s")
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|n| (1..=MAX_PER_SECOND).contains(n))
            .ok_or_else(|| {
                format!(
                    "'{rate}' is not a rate: N/s, N a whole number from 1 to {MAX_PER_SECOND} (say 200/s)"
                )
            })?;
        Ok(TopicLimit {
            topic: topic.to_string(),
            per_second: n,
        })
    }
}

/// The limits by topic; a topic given twice is refused.
pub fn by_topic(limits: &[TopicLimit]) -> Result<BTreeMap<String, u32>, String> {
    let mut out = BTreeMap::new();
    for l in limits {
        if out.insert(l.topic.clone(), l.per_second).is_some() {
            return Err(format!("--topic-limit names {} twice", l.topic));
        }
    }
    Ok(out)
}

/// On a Redis Cluster each shard's bucket fills at N ÷ shards a second and
/// holds at least one token: a limit below one a second per shard would
/// let a token a shard out at once, more than N. Refused.
pub fn check_on_cluster(limits: &BTreeMap<String, u32>, shards: u32) -> Result<(), String> {
    match limits.iter().find(|(_, n)| **n < shards) {
        Some((topic, n)) => Err(format!(
            "--topic-limit {topic}={n}/s: on a Redis Cluster a limit must be at least the shard count ({shards}/s), each shard counting its share"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_as_documented() {
        assert_eq!(
            "sms=200/s".parse::<TopicLimit>(),
            Ok(TopicLimit {
                topic: "sms".into(),
                per_second: 200
            })
        );
        for bad in [
            "sms",
            "sms=200",
            "sms=0/s",
            "sms=1.5/s",
            "sms=-1/s",
            "no space=1/s",
            "=1/s",
            "sms=2000000/s",
        ] {
            assert!(bad.parse::<TopicLimit>().is_err(), "{bad}");
        }
        let twice = ["a=1/s", "a=2/s"].map(|s| s.parse().unwrap());
        assert!(by_topic(&twice).is_err());
        let low = by_topic(&["a=7/s".parse().unwrap()]).unwrap();
        assert!(check_on_cluster(&low, 8).is_err());
        assert!(check_on_cluster(&low, 7).is_ok());
    }
}

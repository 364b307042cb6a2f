//! Rate limits per topic (`--topic-limit TOPIC=N/s`): at most N messages
//! of the topic are handed out per second, across every node and consumer
//! and forwarder, counted in Redis by a token bucket the claim scripts
//! spend from in the same step as they claim (limit.lua). The bucket holds
//! at most a second's worth, so after a quiet spell a burst of up to N goes
//! out at once, then N a second. A poll the limit holds back waits for the
//! next token rather than answering early and empty.
//!
//! `TOPIC=N/s,concurrency=M` (or `TOPIC=concurrency=M` alone) also caps
//! the messages of the topic handed out and not yet acked at M. Redis
//! keeps each shard's hand-outs of the topic in a zset beside the
//! in-flight zset (`{P:s}:busy:TOPIC`, id → ack deadline): the claim
//! scripts add what they hand out, an ack, a nack or a recurring ack takes
//! its delivery out, and a delivery whose deadline passed leaves by its
//! score, so a claim counts the held ones in two calls. A poll the cap
//! holds back looks again every [`BUSY_RECHECK_MS`]. What ends a delivery
//! otherwise (a repair that removes a finished message) leaves its place
//! taken until its deadline: the cap is never exceeded, at worst not used
//! to the full for a ttl.
//!
//! On one Redis the topic has one bucket. On a Redis Cluster each shard has
//! its own, at N ÷ shards a second (a script touches one slot), so the
//! limit is never exceeded, and is reached while the topic's messages
//! spread over the shards, as their ids make them do (a shard with none
//! leaves its share unused), and each shard's hand-outs are capped at its
//! share of M (M ÷ shards, the remainder to the first shards). A poll
//! leaves a shard whose share is spent out of its next look, and waits
//! only when every shard with messages is held back. There a
//! limit must be at least one a second, and one in flight, per shard.

use std::collections::BTreeMap;
use std::str::FromStr;

/// The most a limit may be: beyond it a limit means nothing here.
pub const MAX_PER_SECOND: u32 = 1_000_000;
/// The most a concurrency cap may be.
pub const MAX_CONCURRENCY: u32 = 100_000;
/// How often a poll held back by a topic's concurrency cap looks again.
pub const BUSY_RECHECK_MS: u64 = 20;

/// A topic's limits; 0: none of that kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limit {
    /// Messages handed out a second.
    pub per_second: u32,
    /// Messages handed out and not yet acked.
    pub concurrency: u32,
}

/// One `TOPIC=N/s`, `TOPIC=N/s,concurrency=M` or `TOPIC=concurrency=M`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicLimit {
    pub topic: String,
    pub limit: Limit,
}

const FORMS: &str =
    "TOPIC=N/s, TOPIC=N/s,concurrency=M or TOPIC=concurrency=M (say sms=200/s,concurrency=20)";

fn rate(part: &str) -> Result<u32, String> {
    part.strip_suffix("/s")
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|n| (1..=MAX_PER_SECOND).contains(n))
        .ok_or_else(|| {
            format!("'{part}' is not a rate: N/s, N a whole number from 1 to {MAX_PER_SECOND} (say 200/s)")
        })
}

fn concurrency(part: &str) -> Result<u32, String> {
    part.strip_prefix("concurrency=")
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|n| (1..=MAX_CONCURRENCY).contains(n))
        .ok_or_else(|| {
            format!(
                "'{part}' is not a concurrency cap: concurrency=M, M a whole number from 1 to {MAX_CONCURRENCY} (say concurrency=20)"
            )
        })
}

impl FromStr for TopicLimit {
    type Err = String;

    fn from_str(s: &str) -> Result<TopicLimit, String> {
        let (topic, rest) = s
            .split_once('=')
            .ok_or_else(|| format!("'{s}' is not a topic limit: {FORMS}"))?;
        if !crate::input::valid_topic(topic) {
            return Err(format!(
                "'{topic}' is not a topic: 1 to 128 characters of A-Z a-z 0-9 . _ : -"
            ));
        }
        let mut limit = Limit::default();
        let parts: Vec<&str> = rest.split(',').collect();
        match parts.as_slice() {
            [only] if only.starts_with("concurrency=") => limit.concurrency = concurrency(only)?,
            [r] => limit.per_second = rate(r)?,
            [r, c] => {
                limit.per_second = rate(r)?;
                limit.concurrency = concurrency(c)?;
            }
            _ => return Err(format!("'{s}' is not a topic limit: {FORMS}")),
        }
        Ok(TopicLimit {
            topic: topic.to_string(),
            limit,
        })
    }
}

/// The limits by topic; a topic given twice is refused.
pub fn by_topic(limits: &[TopicLimit]) -> Result<BTreeMap<String, Limit>, String> {
    let mut out = BTreeMap::new();
    for l in limits {
        if out.insert(l.topic.clone(), l.limit).is_some() {
            return Err(format!("--topic-limit names {} twice", l.topic));
        }
    }
    Ok(out)
}

/// On a Redis Cluster each shard's bucket fills at N ÷ shards a second and
/// holds at least one token: a limit below one a second per shard would
/// let a token a shard out at once, more than N. A concurrency cap below
/// one a shard would leave some shard none. Both refused.
pub fn check_on_cluster(limits: &BTreeMap<String, Limit>, shards: u32) -> Result<(), String> {
    for (topic, l) in limits {
        if l.per_second > 0 && l.per_second < shards {
            return Err(format!(
                "--topic-limit {topic}={}/s: on a Redis Cluster a limit must be at least the shard count ({shards}/s), each shard counting its share",
                l.per_second
            ));
        }
        if l.concurrency > 0 && l.concurrency < shards {
            return Err(format!(
                "--topic-limit {topic}: concurrency={} is below the shard count ({shards}): on a Redis Cluster each shard caps its share",
                l.concurrency
            ));
        }
    }
    Ok(())
}

/// Shard `shard`'s share of a concurrency cap on a Redis Cluster: M ÷
/// shards, one more for the first M mod shards, so the shares add up to M.
pub fn concurrency_share(cap: u32, shard: u32, shards: u32) -> u32 {
    if cap == 0 {
        return 0;
    }
    cap / shards + u32::from(shard < cap % shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(per_second: u32, concurrency: u32) -> Limit {
        Limit {
            per_second,
            concurrency,
        }
    }

    #[test]
    fn limits_read_as_documented() {
        let read = |s: &str| s.parse::<TopicLimit>().map(|l| (l.topic, l.limit));
        assert_eq!(read("sms=200/s"), Ok(("sms".into(), limit(200, 0))));
        assert_eq!(
            read("sms=200/s,concurrency=20"),
            Ok(("sms".into(), limit(200, 20)))
        );
        assert_eq!(read("sms=concurrency=3"), Ok(("sms".into(), limit(0, 3))));
        for bad in [
            "sms",
            "sms=200",
            "sms=0/s",
            "sms=1.5/s",
            "sms=-1/s",
            "no space=1/s",
            "=1/s",
            "sms=2000000/s",
            "sms=200/s,",
            "sms=200/s,concurrency=0",
            "sms=200/s,concurrency=100001",
            "sms=200/s,concurrency=x",
            "sms=concurrency=2,200/s",
            "sms=200/s,concurrency=2,concurrency=3",
            "sms=concurrency=",
        ] {
            assert!(bad.parse::<TopicLimit>().is_err(), "{bad}");
        }
        let twice = ["a=1/s", "a=concurrency=2"].map(|s| s.parse().unwrap());
        assert!(by_topic(&twice).is_err());
        let low = by_topic(&["a=7/s".parse().unwrap()]).unwrap();
        assert!(check_on_cluster(&low, 8).is_err());
        assert!(check_on_cluster(&low, 7).is_ok());
        let few = by_topic(&["a=100/s,concurrency=3".parse().unwrap()]).unwrap();
        assert!(check_on_cluster(&few, 4).is_err());
        assert!(check_on_cluster(&few, 3).is_ok());
    }

    #[test]
    fn concurrency_shares_add_up() {
        for (cap, shards) in [(10, 4), (8, 8), (9, 8), (10_000, 7), (0, 4)] {
            let shares: Vec<u32> = (0..shards)
                .map(|s| concurrency_share(cap, s, shards))
                .collect();
            assert_eq!(shares.iter().sum::<u32>(), cap, "{cap} over {shards}");
            let (lo, hi) = (shares.iter().min(), shares.iter().max());
            assert!(hi.unwrap() - lo.unwrap() <= 1, "{shares:?}");
        }
    }
}

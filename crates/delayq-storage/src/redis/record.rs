//! The value stored for a message in its shard's hash, each field once:
//!
//! `topic|ttl|attempts|score|maxAttempts,backoff,delay,max[,r]|~C,delay,B,E[,gG]|` then
//! G bytes of group (a message of an ordered group only), B bytes of
//! bizKey, E bytes of extra (JSON of the retry policy, series and
//! occurrence, only those the message has) and the body. The scripts read
//! the group with one anchored pattern (`group_of` in group.lua).
//!
//! The header (the first five fields) is what the scripts read, with one
//! anchored pattern, and all they change: moving a message needs only its
//! topic, handing it out its ttl and attempts, returning it to the ready
//! queue its score, deciding what a failed delivery leads to its attempt
//! limit and retry policy (see [`crate::retry::header`] for the fifth field).
//! A recurring message's fifth field ends in `,r` (acking it moves it on to
//! its next occurrence, see advance.lua), or `,x` once its series was
//! cancelled while an occurrence was handed out (that delivery is its last).
//! Topics cannot hold `|`.
//!
//! What the header holds is not repeated: the id is the hash field, the due
//! time and priority are the score (so a message sent back by a failed
//! delivery shows the due time of its next attempt), the topic, ttl and
//! attempt limit are header fields. `C` is the create time less the
//! millisecond in the id (the same or a few ms apart for an id delayq
//! made), `B` is `-` for no bizKey.
//!
//! Older records carry the whole message as JSON after the fifth field
//! (`{…}`), or after the score (from before the fifth field existed); both
//! are still read.

use serde::{Deserialize, Serialize};

use crate::message::{Message, MessageId};
use crate::redis::keys::{due_of_score, score};
use crate::repeat::{Occurrence, Repeat};
use crate::retry::RetryPolicy;

/// What few messages have, carried as JSON only when present.
#[derive(Default, Serialize, Deserialize)]
struct Extra {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retry: Option<RetryPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    repeat: Option<Repeat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    occurrence: Option<Occurrence>,
}

pub fn encode(msg: &Message, attempts: i32) -> String {
    let extra = if msg.retry.is_none() && msg.repeat.is_none() && msg.occurrence.is_none() {
        String::new()
    } else {
        serde_json::to_string(&Extra {
            retry: msg.retry,
            repeat: msg.repeat.clone(),
            occurrence: msg.occurrence,
        })
        .expect("a message's extra fields always serialize")
    };
    let biz_len = msg
        .biz_key
        .as_ref()
        .map_or_else(|| "-".to_string(), |k| k.len().to_string());
    let biz = msg.biz_key.as_deref().unwrap_or("");
    let group = msg.group.as_deref().unwrap_or("");
    let group_len = msg
        .group
        .as_ref()
        .map_or_else(String::new, |g| format!(",g{}", g.len()));
    let mut out =
        String::with_capacity(64 + group.len() + biz.len() + extra.len() + msg.body.len());
    out.push_str(&format!(
        "{}|{}|{}|{}|{}{}|~{},{},{},{}{}|",
        msg.topic,
        msg.ttl,
        attempts,
        score(msg.due_time, msg.priority) as i64,
        crate::retry::header(msg.retry.as_ref(), msg.max_attempts),
        if msg.repeat.is_some() { ",r" } else { "" },
        msg.create_time - id_ms(msg.id),
        msg.delay,
        biz_len,
        extra.len(),
        group_len,
    ));
    out.push_str(group);
    out.push_str(biz);
    out.push_str(&extra);
    out.push_str(&msg.body);
    out
}

/// Splits the record of message `id` into (attempts, message).
pub fn decode(id: MessageId, record: &str) -> Result<(i32, Message), String> {
    let mut parts = record.splitn(5, '|');
    let (topic, ttl, attempts, score, rest) = (
        parts.next().unwrap_or(""),
        parts.next(),
        parts.next(),
        parts.next(),
        parts
            .next()
            .ok_or_else(|| "record has no message".to_string())?,
    );
    let attempts = attempts
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| "record has no attempts".to_string())?;
    if rest.starts_with('{') {
        return json(rest).map(|m| (attempts, m));
    }
    let (policy, tail) = rest
        .split_once('|')
        .ok_or_else(|| "record has no message".to_string())?;
    let Some(tail) = tail.strip_prefix('~') else {
        return json(tail).map(|m| (attempts, m));
    };
    let bad = |what: &str| format!("record has a bad {what}");
    let (lengths, data) = tail.split_once('|').ok_or_else(|| bad("field list"))?;
    let fields: Vec<&str> = lengths.split(',').collect();
    let (create_time, delay, biz_len, extra_len, group_len) = match fields[..] {
        [c, d, b, e] => (c, d, b, e, None),
        [c, d, b, e, g] => {
            let len = g
                .strip_prefix('g')
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| bad("group length"))?;
            (c, d, b, e, Some(len))
        }
        _ => return Err(bad("field list")),
    };
    let (group, data) = match group_len {
        None => (None, data),
        Some(n) => match (data.get(..n), data.get(n..)) {
            (Some(g), Some(rest)) => (Some(g.to_string()), rest),
            _ => return Err(bad("length")),
        },
    };
    let create_time = id_ms(id) + create_time.parse::<i64>().map_err(|_| bad("create time"))?;
    let delay: i64 = delay.parse().map_err(|_| bad("delay"))?;
    let biz_len: Option<usize> = match biz_len {
        "-" => None,
        n => Some(n.parse().map_err(|_| bad("bizKey length"))?),
    };
    let extra_len: usize = extra_len.parse().map_err(|_| bad("extra length"))?;
    let biz_end = biz_len.unwrap_or(0);
    let extra_end = biz_end + extra_len;
    let (biz, extra, body) = match (
        data.get(..biz_end),
        data.get(biz_end..extra_end),
        data.get(extra_end..),
    ) {
        (Some(b), Some(e), Some(body)) => (b, e, body),
        _ => return Err(bad("length")),
    };
    let extra: Extra = if extra.is_empty() {
        Extra::default()
    } else {
        serde_json::from_str(extra).map_err(|e| format!("record holds bad extra fields: {e}"))?
    };
    let score: i64 = score
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("score"))?;
    let max_attempts = policy
        .split(',')
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| bad("attempt limit"))?;
    Ok((
        attempts,
        Message {
            id,
            topic: topic.to_string(),
            biz_key: biz_len.map(|_| biz.to_string()),
            group,
            body: body.to_string(),
            priority: (255 - score.rem_euclid(256)) as u8,
            ttl: ttl.and_then(|t| t.parse().ok()).ok_or_else(|| bad("ttl"))?,
            delay,
            create_time,
            due_time: due_of_score(score as f64),
            max_attempts,
            retry: extra.retry,
            repeat: extra.repeat,
            occurrence: extra.occurrence,
        },
    ))
}

/// The millisecond a Snowflake id was made in.
fn id_ms(id: MessageId) -> i64 {
    (id.0 >> 22) + MessageId::EPOCH_MS
}

fn json(text: &str) -> Result<Message, String> {
    serde_json::from_str(text).map_err(|e| format!("record holds a bad message: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::Backoff;

    fn message() -> Message {
        Message {
            id: MessageId(99),
            topic: "a:b".into(),
            biz_key: Some("k|1 ü".into()),
            group: None,
            body: "x|y\n{\"z\":1} ~,|é".into(),
            priority: 9,
            ttl: 1000,
            delay: 5,
            create_time: 10,
            due_time: 15,
            max_attempts: 3,
            retry: None,
            repeat: None,
            occurrence: None,
        }
    }

    #[test]
    fn round_trips_bodies_and_keys_with_separators() {
        let msg = message();
        let rec = encode(&msg, 2);
        let c = 10 - MessageId::EPOCH_MS;
        assert!(rec.starts_with(&format!("a:b|1000|2|{}|3,n,0,0|~{c},5,", 15 * 256 + 246)));
        // An id delayq made holds its create time.
        let made = Message {
            id: MessageId::first_at(1_795_000_000_123),
            create_time: 1_795_000_000_125,
            ..msg.clone()
        };
        assert!(encode(&made, 0).contains("|~2,5,"));
        assert_eq!(decode(made.id, &encode(&made, 0)).unwrap(), (0, made));
        assert_eq!(decode(msg.id, &rec).unwrap(), (2, msg.clone()));
        let none = Message {
            biz_key: None,
            body: String::new(),
            priority: 255,
            ..msg.clone()
        };
        assert_eq!(decode(none.id, &encode(&none, 0)).unwrap(), (0, none));
        let empty_key = Message {
            biz_key: Some(String::new()),
            ..msg
        };
        assert_eq!(
            decode(empty_key.id, &encode(&empty_key, 1)).unwrap(),
            (1, empty_key)
        );
        assert!(decode(MessageId(1), "t|1|x").is_err());
    }

    #[test]
    fn carries_what_few_messages_have() {
        let msg = Message {
            retry: Some(RetryPolicy {
                backoff: Backoff::Exponential,
                delay: 100,
                max: 5_000,
            }),
            occurrence: Some(Occurrence {
                number: 3,
                due_time: 15,
            }),
            repeat: Some(serde_json::from_str(r#"{"every": 60000, "times": 5}"#).unwrap()),
            ..message()
        };
        let rec = encode(&msg, 1);
        assert!(rec.contains(",r|~"), "{rec}");
        assert_eq!(decode(msg.id, &rec).unwrap(), (1, msg));
    }

    #[test]
    fn carries_a_group_after_the_field_list() {
        let msg = Message {
            group: Some("cust|7 ü,g3".into()),
            ..message()
        };
        let rec = encode(&msg, 1);
        let c = 10 - MessageId::EPOCH_MS;
        assert!(
            rec.contains(&format!("|~{c},5,6,0,g12|cust|7 ü,g3k|1 ü")),
            "{rec}"
        );
        assert_eq!(decode(msg.id, &rec).unwrap(), (1, msg.clone()));
        let both = Message {
            retry: Some(RetryPolicy {
                backoff: Backoff::Fixed,
                delay: 100,
                max: 100,
            }),
            biz_key: None,
            ..msg
        };
        assert_eq!(decode(both.id, &encode(&both, 0)).unwrap(), (0, both));
        assert!(decode(MessageId(1), "t|1|0|5|3,n,0,0|~0,0,-,0,g9|ab").is_err());
    }

    #[test]
    fn a_message_sent_back_shows_its_next_due_time() {
        // retry.lua rewrites the score alone.
        let msg = message();
        let rec = encode(&msg, 1).replacen(
            &format!("|{}|", 15 * 256 + 246),
            &format!("|{}|", 40 * 256 + 246),
            1,
        );
        let (_, back) = decode(msg.id, &rec).unwrap();
        assert_eq!((back.due_time, back.priority), (40, 9));
    }

    #[test]
    fn reads_the_older_json_records() {
        let msg = message();
        let json = serde_json::to_string(&msg).unwrap();
        let with_policy = format!("a:b|1000|2|{}|3,n,0,0|{json}", 15 * 256 + 246);
        assert_eq!(decode(msg.id, &with_policy).unwrap(), (2, msg.clone()));
        let before_policy = format!("a:b|1000|2|{}|{json}", 15 * 256 + 246);
        assert_eq!(decode(msg.id, &before_policy).unwrap(), (2, msg));
    }
}

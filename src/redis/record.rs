//! The value stored for a message in its shard's hash:
//! `topic|ttl|attempts|score|maxAttempts,backoff,delay,max[,r]|JSON`, where
//! JSON is the [`Message`] (see [`RetryPolicy::header`] for the fifth field).
//! A recurring message's fifth field ends in `,r` (acking it moves it on to
//! its next occurrence, see advance.lua), or `,x` once its series was
//! cancelled while an occurrence was handed out (that delivery is its last).
//!
//! The scripts read the header with one anchored pattern and never parse the
//! JSON: moving a message needs only its topic, handing it out its ttl and
//! attempts, returning it to the ready queue its score, deciding what a
//! failed delivery leads to its attempt limit and retry policy. Topics cannot
//! hold `|`. Records written before the fifth field existed go straight from
//! the score to the JSON; the scripts read them with the defaults.

use crate::message::Message;
use crate::redis::keys::score;
use crate::retry::RetryPolicy;

pub fn encode(msg: &Message, attempts: i32) -> String {
    let json = serde_json::to_string(msg).expect("a message always serializes");
    format!(
        "{}|{}|{}|{}|{}{}|{}",
        msg.topic,
        msg.ttl,
        attempts,
        score(msg.due_time, msg.priority) as i64,
        RetryPolicy::header(msg.retry.as_ref(), msg.max_attempts),
        if msg.repeat.is_some() { ",r" } else { "" },
        json
    )
}

/// Splits a record into (attempts, message).
pub fn decode(record: &str) -> Result<(i32, Message), String> {
    let mut parts = record.splitn(5, '|');
    let (_topic, _ttl, attempts, _score, rest) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts
            .next()
            .ok_or_else(|| "record has no message".to_string())?,
    );
    let json = if rest.starts_with('{') {
        rest
    } else {
        rest.split_once('|')
            .map(|(_, json)| json)
            .ok_or_else(|| "record has no message".to_string())?
    };
    let attempts = attempts
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| "record has no attempts".to_string())?;
    let msg = serde_json::from_str(json).map_err(|e| format!("record holds a bad message: {e}"))?;
    Ok((attempts, msg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::MessageId;

    #[test]
    fn round_trips_bodies_with_separators() {
        let msg = Message {
            id: MessageId(99),
            topic: "a:b".into(),
            biz_key: Some("k|1".into()),
            body: "x|y\n{\"z\":1}".into(),
            priority: 9,
            ttl: 1000,
            delay: 5,
            create_time: 10,
            due_time: 15,
            max_attempts: 3,
            retry: None,
            repeat: None,
            occurrence: None,
        };
        let rec = encode(&msg, 2);
        assert!(rec.starts_with(&format!("a:b|1000|2|{}|3,n,0,0|", 15 * 256 + 246)));
        assert_eq!(decode(&rec).unwrap(), (2, msg.clone()));
        assert!(decode("t|1|x").is_err());
        // A record from before the retry field.
        let json = serde_json::to_string(&msg).unwrap();
        let old = format!("a:b|1000|2|{}|{json}", 15 * 256 + 246);
        assert_eq!(decode(&old).unwrap(), (2, msg));
    }
}

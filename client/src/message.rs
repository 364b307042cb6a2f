//! Messages: [`NewMessage`], what a producer pushes, and [`Message`], what a
//! consumer receives, with their ids, statuses and policies.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// A message id: a 64-bit Snowflake given by the server, sent as a decimal
/// string in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MessageId(pub u64);

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The text is not a message id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a message id (a positive decimal number)")]
pub struct BadMessageId(pub String);

impl FromStr for MessageId {
    type Err = BadMessageId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.parse::<u64>() {
            Ok(v) if v > 0 && !s.starts_with('+') => Ok(MessageId(v)),
            _ => Err(BadMessageId(s.to_string())),
        }
    }
}

impl Serialize for MessageId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MessageId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Number(u64),
        }
        match Raw::deserialize(d)? {
            Raw::Text(s) => s.parse().map_err(serde::de::Error::custom),
            Raw::Number(n) => Ok(MessageId(n)),
        }
    }
}

/// Where a message is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Status {
    /// Accepted, not yet scheduled.
    WaitPut,
    /// Waiting for its due time.
    Delaying,
    /// Due, waiting for a consumer.
    Ready,
    /// Handed to a consumer; its ack deadline runs.
    Consuming,
    Consumed,
    /// Cancelled before delivery.
    Deleted,
    /// Gave up after `maxAttempts` deliveries.
    Dead,
    /// A status this client does not know (a newer server).
    #[serde(other)]
    Unknown,
}

/// What a producer pushes: the topic and body, and the optional fields, set
/// with the builder methods.
///
/// ```
/// use std::time::Duration;
/// use delayq_client::{NewMessage, Retry};
///
/// let reminder = NewMessage::new("sms", r#"{"order":42}"#)
///     .delay(Duration::from_secs(20 * 60))
///     .biz_key("order-42-reminder")
///     .priority(5)
///     .max_attempts(5)
///     .retry(Retry::exponential(Duration::from_secs(10), Duration::from_secs(600)));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewMessage {
    topic: String,
    body: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    delay: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deliver_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    biz_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry: Option<Retry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    repeat: Option<Repeat>,
}

impl NewMessage {
    /// A message for `topic` (`[A-Za-z0-9._:-]{1,128}`), due at once unless
    /// a delay or a delivery time is set. The body is opaque text; JSON is
    /// welcome.
    pub fn new(topic: impl Into<String>, body: impl Into<String>) -> Self {
        NewMessage {
            topic: topic.into(),
            body: body.into(),
            delay: None,
            deliver_at: None,
            priority: None,
            ttl: None,
            max_attempts: None,
            biz_key: None,
            retry: None,
            repeat: None,
        }
    }

    /// Due this long after the server accepts it (up to 10 years; sent in
    /// whole milliseconds). Replaces a [`deliver_at`](Self::deliver_at).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(millis(delay));
        self.deliver_at = None;
        self
    }

    /// Due at this time (a time past is now). Replaces a
    /// [`delay`](Self::delay).
    pub fn deliver_at(mut self, at: SystemTime) -> Self {
        self.deliver_at = Some(epoch_ms(at));
        self.delay = None;
        self
    }

    /// 0 to 255 (default 0): higher first among messages due at the same
    /// instant.
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = Some(priority);
        self
    }

    /// How long a consumer has to ack a delivery before it counts as failed
    /// (100 ms to 1 day; default 30 s).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(millis(ttl));
        self
    }

    /// Deliveries before the message is `Dead` (1 to 1000; default 16).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// The producer's key: while a message of this topic with this key is
    /// live, pushing it again answers that message's id (an idempotent push).
    pub fn biz_key(mut self, key: impl Into<String>) -> Self {
        self.biz_key = Some(key.into());
        self
    }

    /// The wait before the next delivery after a nack without a delay or an
    /// expired ack deadline (none: ready again at once).
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = Some(retry);
        self
    }

    /// Makes it a recurring message: one delivery per occurrence.
    pub fn repeat(mut self, repeat: Repeat) -> Self {
        self.repeat = Some(repeat);
        self
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }
}

/// How a retry's wait grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backoff {
    /// The same wait after every failure.
    Fixed,
    /// `delay`, twice that, four times..., up to `max`.
    Exponential,
}

/// `retry`: the wait before the delivery after a failed one. Waits are
/// milliseconds on the wire, each at most one day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retry {
    pub backoff: Backoff,
    /// Milliseconds.
    pub delay: u64,
    /// Milliseconds; the server's default (1 h, or `delay` when longer) when
    /// not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
}

impl Retry {
    /// The same wait after every failure.
    pub fn fixed(delay: Duration) -> Self {
        Retry {
            backoff: Backoff::Fixed,
            delay: millis(delay),
            max: None,
        }
    }

    /// `delay` after the first failure, doubling up to `max`.
    pub fn exponential(delay: Duration, max: Duration) -> Self {
        Retry {
            backoff: Backoff::Exponential,
            delay: millis(delay),
            max: Some(millis(max)),
        }
    }
}

/// `repeat`: a recurring message, by interval or by cron, optionally bounded
/// by a number of occurrences or an end time.
///
/// ```
/// use std::time::Duration;
/// use delayq_client::Repeat;
///
/// let every_20_min_3_times = Repeat::every(Duration::from_secs(1200)).times(3);
/// let weekdays_at_9 = Repeat::cron("0 9 * * 1-5").tz("Asia/Shanghai");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repeat {
    /// Milliseconds between occurrences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<u64>,
    /// 5 fields (minute hour day month weekday) or 6 (seconds first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The IANA zone of `cron` (UTC when not given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u64>,
    /// Epoch milliseconds: no occurrence due after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
    /// What occurrences missed while the series fell behind come to:
    /// `"one"` (the server's default: one late catch-up, then the first
    /// time in the future), `"all"` (each, back to back) or `"skip"`
    /// (none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misfire: Option<String>,
}

impl Repeat {
    pub fn every(interval: Duration) -> Self {
        Repeat {
            every: Some(millis(interval)),
            cron: None,
            tz: None,
            times: None,
            until: None,
            misfire: None,
        }
    }

    pub fn cron(expression: impl Into<String>) -> Self {
        Repeat {
            every: None,
            cron: Some(expression.into()),
            tz: None,
            times: None,
            until: None,
            misfire: None,
        }
    }

    /// The zone of a cron series, e.g. `Asia/Shanghai`.
    pub fn tz(mut self, zone: impl Into<String>) -> Self {
        self.tz = Some(zone.into());
        self
    }

    /// `n` occurrences in all.
    pub fn times(mut self, n: u64) -> Self {
        self.times = Some(n);
        self
    }

    /// No occurrence due after this time.
    pub fn until(mut self, end: SystemTime) -> Self {
        self.until = Some(epoch_ms(end));
        self
    }

    /// The misfire policy: `"one"`, `"all"` or `"skip"`.
    pub fn misfire(mut self, policy: impl Into<String>) -> Self {
        self.misfire = Some(policy.into());
        self
    }
}

/// Which occurrence of its series a recurring message is at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Occurrence {
    /// 1 for the first.
    pub number: u64,
    /// Epoch milliseconds.
    pub due_time: i64,
}

/// A message as the server shows it: a delivery to a consumer, or an
/// inspection. Times are epoch milliseconds, durations milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub id: MessageId,
    pub topic: String,
    #[serde(default)]
    pub biz_key: Option<String>,
    pub body: String,
    #[serde(default)]
    pub priority: u8,
    #[serde(default)]
    pub ttl: u64,
    #[serde(default)]
    pub delay: i64,
    #[serde(default)]
    pub create_time: i64,
    /// When it was due: as pushed, or after a failed delivery, the time of
    /// this delivery's retry.
    #[serde(default)]
    pub due_time: i64,
    #[serde(default)]
    pub max_attempts: u32,
    #[serde(default)]
    pub retry: Option<Retry>,
    #[serde(default)]
    pub repeat: Option<Repeat>,
    /// The occurrence a recurring message's delivery is.
    #[serde(default)]
    pub occurrence: Option<Occurrence>,
    pub status: Status,
    /// Deliveries so far, this one included.
    #[serde(default)]
    pub attempts: u32,
    /// The receipt naming this delivery: acks and nacks that carry it
    /// apply to this delivery alone (one that outlived its ttl, the message
    /// handed to another consumer since, is refused as `stale_delivery`).
    #[serde(default)]
    pub receipt: Option<String>,
}

impl Message {
    /// This delivery, to ack or nack with its receipt.
    pub fn delivery(&self) -> Delivery {
        Delivery {
            id: self.id,
            receipt: self.receipt.clone(),
        }
    }
}

/// One delivery of a message, as acks and nacks name it: the message's id
/// and the receipt it was handed out with (without one, an ack or nack
/// applies to whatever delivery of the message is current).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Delivery {
    pub id: MessageId,
    pub receipt: Option<String>,
}

impl From<MessageId> for Delivery {
    fn from(id: MessageId) -> Self {
        Delivery { id, receipt: None }
    }
}

impl Serialize for Delivery {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.receipt {
            None => self.id.serialize(s),
            Some(r) => {
                use serde::ser::SerializeMap;
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("id", &self.id)?;
                m.serialize_entry("receipt", r)?;
                m.end()
            }
        }
    }
}

/// Milliseconds of a duration, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(crate) fn epoch_ms(at: SystemTime) -> u64 {
    millis(at.duration_since(UNIX_EPOCH).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_are_decimal_strings() {
        let id: MessageId = serde_json::from_value(json!("382745980652486656")).unwrap();
        assert_eq!(id, MessageId(382745980652486656));
        assert_eq!(
            serde_json::to_value(id).unwrap(),
            json!("382745980652486656")
        );
        assert_eq!(
            serde_json::from_value::<MessageId>(json!(7)).unwrap(),
            MessageId(7)
        );
        for bad in ["", "0", "-1", "+5", "1e3", "x"] {
            assert!(bad.parse::<MessageId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_new_message_sends_only_what_was_set() {
        let m = NewMessage::new("sms", "hi");
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({"topic": "sms", "body": "hi"})
        );
        let m = NewMessage::new("sms", "hi")
            .deliver_at(UNIX_EPOCH + Duration::from_millis(1_800_000_000_000))
            .delay(Duration::from_millis(1500))
            .priority(3)
            .ttl(Duration::from_secs(5))
            .max_attempts(2)
            .biz_key("k")
            .retry(Retry::fixed(Duration::from_millis(250)))
            .repeat(Repeat::every(Duration::from_secs(60)).times(3));
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({
                "topic": "sms", "body": "hi", "delay": 1500, "priority": 3, "ttl": 5000,
                "maxAttempts": 2, "bizKey": "k",
                "retry": {"backoff": "fixed", "delay": 250},
                "repeat": {"every": 60000, "times": 3},
            })
        );
        let at = NewMessage::new("t", "b")
            .delay(Duration::from_secs(1))
            .deliver_at(UNIX_EPOCH + Duration::from_millis(42));
        assert_eq!(
            serde_json::to_value(&at).unwrap(),
            json!({"topic": "t", "body": "b", "deliverAt": 42})
        );
    }

    #[test]
    fn a_delivery_reads_with_unknown_fields_and_statuses() {
        let m: Message = serde_json::from_value(json!({
            "id": "9", "topic": "t", "body": "b", "priority": 1, "ttl": 30000,
            "delay": 0, "createTime": 1, "dueTime": 2, "maxAttempts": 16,
            "status": "Consuming", "attempts": 1, "somethingNew": true,
        }))
        .unwrap();
        assert_eq!(
            (m.id, m.status, m.attempts),
            (MessageId(9), Status::Consuming, 1)
        );
        let s: Status = serde_json::from_value(json!("Frozen")).unwrap();
        assert_eq!(s, Status::Unknown);
    }
}

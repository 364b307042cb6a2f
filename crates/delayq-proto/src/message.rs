//! The message on the wire: its id, its status, its retry policy and
//! series, the message itself and the view of it the API answers with.
//! The server checks what a producer sends and keeps the rules (due times,
//! retries, occurrences) in `delayq-domain`; these are the shapes alone.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// A 64-bit Snowflake id: 41 bits of milliseconds since [`MessageId::EPOCH_MS`],
/// 10 bits of worker id, 12 bits of sequence. Sent as a decimal string in JSON
/// because JavaScript numbers cannot hold 64 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MessageId(pub i64);

impl MessageId {
    /// 2024-01-01T00:00:00Z.
    pub const EPOCH_MS: i64 = 1_704_067_200_000;

    /// The lowest id minted at epoch millisecond `ms` (any worker): ids
    /// below it were minted earlier.
    pub fn first_at(ms: i64) -> MessageId {
        MessageId((ms - Self::EPOCH_MS).max(0) << 22)
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The text is not a message id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadMessageId(pub String);

impl fmt::Display for BadMessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "'{}' is not a message id (a positive 64-bit decimal number)",
            self.0
        )
    }
}

impl std::error::Error for BadMessageId {}

impl FromStr for MessageId {
    type Err = BadMessageId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.parse::<i64>() {
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

/// Read from the decimal string the server sends, or from a number (as
/// an application may have stored one).
impl<'de> Deserialize<'de> for MessageId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw<'a> {
            #[serde(borrow)]
            Text(std::borrow::Cow<'a, str>),
            Number(i64),
        }
        match Raw::deserialize(d)? {
            Raw::Text(s) => s.parse().map_err(serde::de::Error::custom),
            Raw::Number(n) if n > 0 => Ok(MessageId(n)),
            Raw::Number(n) => Err(serde::de::Error::custom(BadMessageId(n.to_string()))),
        }
    }
}

/// What a message id looks like in JSON and in a path: a positive 64-bit
/// decimal number without sign or leading zeros.
pub const ID_PATTERN: &str = "^[1-9][0-9]{0,18}$";

/// A message's place in its life, with the numeric code the journal stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Status {
    /// Accepted, not yet scheduled.
    WaitPut = 0,
    /// Waiting for its due time.
    Delaying = 1,
    /// Due, waiting for a consumer.
    Ready = 2,
    /// Handed to a consumer; its ack deadline runs.
    Consuming = 3,
    Consumed = 4,
    /// Cancelled before delivery.
    Deleted = 5,
    /// Gave up after `maxAttempts` deliveries.
    Dead = 6,
    /// A status this reader does not know (a newer server's). The server
    /// never sends, stores or takes it.
    #[serde(other)]
    Unknown = -1,
}

impl Status {
    /// The statuses the server has, in code order.
    pub const ALL: [Status; 7] = [
        Status::WaitPut,
        Status::Delaying,
        Status::Ready,
        Status::Consuming,
        Status::Consumed,
        Status::Deleted,
        Status::Dead,
    ];

    pub fn code(self) -> i16 {
        self as i16
    }

    pub fn from_code(code: i16) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.code() == code)
    }

    /// Consumed, Deleted and Dead end a message's life: nothing moves it again
    /// and restore leaves it out.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Consumed | Status::Deleted | Status::Dead)
    }

    /// Codes of the terminal statuses; everything below is live.
    pub const FIRST_TERMINAL_CODE: i16 = 4;
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// How a retry's wait grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Backoff {
    /// The same wait after every failure.
    Fixed,
    /// `delay`, then twice that, four times..., up to `max`.
    Exponential,
}

/// `retry` on a push: how long to wait before the next delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RetryPolicy {
    pub backoff: Backoff,
    /// The wait (ms) after the first failed delivery.
    pub delay: i64,
    /// The longest wait (ms).
    pub max: i64,
}

/// `repeat` on a push: a recurring message, by interval or by cron,
/// optionally bounded by a number of occurrences or an end time.
// E.g. Repeat::every(Duration::from_secs(1200)).times(3), or
// Repeat::cron("0 9 * * 1-5").tz("Asia/Shanghai"). (The doc comment is the
// OpenAPI document's description.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Repeat {
    /// Ms between occurrences (100 ms … 10 years).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "utoipa",
        schema(minimum = 100, maximum = 315_360_000_000_i64)
    )]
    pub every: Option<i64>,
    /// 5 fields (minute hour day month weekday) or 6 (seconds first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(max_length = 128, example = "*/20 * * * *"))]
    pub cron: Option<String>,
    /// IANA time zone of `cron` (default UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(example = "Asia/Shanghai"))]
    pub tz: Option<String>,
    /// Occurrences in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 1, maximum = 1_000_000_000))]
    pub times: Option<i64>,
    /// No occurrence after this epoch time (ms): from now to 100 years ahead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 0))]
    pub until: Option<i64>,
    /// What occurrences missed while the series fell behind come to:
    /// `one` (default) delivers the waiting one once, late; `all` every
    /// missed one back to back; `skip` none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(example = "one"))]
    pub misfire: Option<Misfire>,
}

impl Repeat {
    /// Every `interval` (whole milliseconds) after the first occurrence.
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

    /// A cron series: 5 fields (minute hour day month weekday) or 6
    /// (seconds first), in UTC unless [`tz`](Self::tz) says otherwise.
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

    /// The IANA zone of a cron series, e.g. `Asia/Shanghai`.
    pub fn tz(mut self, zone: impl Into<String>) -> Self {
        self.tz = Some(zone.into());
        self
    }

    /// `n` occurrences in all.
    pub fn times(mut self, n: i64) -> Self {
        self.times = Some(n);
        self
    }

    /// No occurrence due after this time.
    pub fn until(mut self, end: SystemTime) -> Self {
        self.until = Some(epoch_ms(end));
        self
    }

    /// What missed occurrences come to.
    pub fn misfire(mut self, policy: Misfire) -> Self {
        self.misfire = Some(policy);
        self
    }

    /// The misfire policy in force: the one given, or `one`.
    pub fn misfire_policy(&self) -> Misfire {
        self.misfire.unwrap_or_default()
    }
}

/// What a recurring message's missed occurrences come to: an occurrence is
/// missed when the one after it is due before it is handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Misfire {
    /// One catch-up delivery, then the first time in the future.
    #[default]
    One,
    /// Every missed occurrence, back to back.
    All,
    /// None: the first time in the future.
    Skip,
    /// A policy this reader does not know (a newer server's); never sent,
    /// and what it means here is left to the server.
    #[serde(other, skip_serializing)]
    Unknown,
}

/// What a push whose `(topic, bizKey)` a live message holds does to that
/// message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum OnDuplicate {
    /// Nothing: the live message's id is answered (`"duplicate": true`).
    #[default]
    Keep,
    /// Debounce: the live message takes this push's body, due time and
    /// priority, keeping its id; one handed out already is left alone.
    Replace,
    /// Only its due time moves, and only later.
    Extend,
    /// A value this reader does not know (a newer server's); never sent.
    #[serde(other, skip_serializing)]
    Unknown,
}

/// Which instant a local wall-clock time means when the zone's clock jumps
/// over it (a gap) or passes it twice (a fold), as JavaScript's `Temporal`
/// names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Dst {
    /// Refuse the time (400 `invalid_delay`, the answer naming both
    /// readings).
    #[default]
    Reject,
    /// The earlier instant: a fold's first pass; a gap time read with the
    /// offset after the jump (Berlin's 02:30 on its spring day is 01:30
    /// +01:00).
    Earlier,
    /// The later instant: a fold's second pass; a gap time read with the
    /// offset before the jump (03:30 +02:00).
    Later,
    /// A rule this reader does not know (a newer server's); never sent.
    #[serde(other, skip_serializing)]
    Unknown,
}

/// Which occurrence of its series a recurring message is at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Occurrence {
    /// 1 for the first.
    pub number: i32,
    /// When this occurrence is due by the series (a retry after a failed
    /// delivery moves the message's `dueTime`, not this).
    pub due_time: i64,
}

/// The message as producers and consumers see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub id: MessageId,
    pub topic: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub biz_key: Option<String>,
    /// Its ordered group within the topic: at most one message of a group
    /// is handed out and not yet ended at a time, and the group's
    /// messages go out in due order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub body: String,
    #[cfg_attr(feature = "utoipa", schema(maximum = 255))]
    pub priority: u8,
    pub ttl: i64,
    pub delay: i64,
    pub create_time: i64,
    /// When the message is due: as pushed, or, after a failed delivery
    /// sent it back to `Delaying`, when it is delivered again.
    pub due_time: i64,
    /// Deliveries before it is `Dead`.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: i32,
    /// The wait before a delivery after a failed one; none: ready at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// A recurring message's series.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<Repeat>,
    /// The occurrence of its series a recurring message is at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurrence: Option<Occurrence>,
}

/// Deliveries before a message is `Dead`, unless the push says otherwise.
pub const DEFAULT_MAX_ATTEMPTS: i32 = 16;

fn default_max_attempts() -> i32 {
    DEFAULT_MAX_ATTEMPTS
}

/// A message together with where it is in its life, as the API shows it:
/// a delivery to a consumer, or an inspection.
// Its fields are the message's (it dereferences to `Message`) and these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MessageView {
    #[serde(flatten)]
    pub message: Message,
    pub status: Status,
    /// Deliveries so far (a delivery counts itself).
    pub attempts: i32,
    /// On a hand-out: the receipt naming this delivery, to ack or nack it
    /// with (a later delivery of the same message has another). Opaque
    /// text: `ATTEMPTS-DEADLINE[-OCCURRENCE]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(example = "1-1795320984364"))]
    pub receipt: Option<String>,
}

impl std::ops::Deref for MessageView {
    type Target = Message;

    fn deref(&self) -> &Message {
        &self.message
    }
}

/// Whole milliseconds of a duration, saturating.
pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Epoch milliseconds of a time (0 before the epoch).
pub fn epoch_ms(at: SystemTime) -> i64 {
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
        for bad in ["", "0", "-1", "+5", "1e3", "x", "9223372036854775808"] {
            assert!(bad.parse::<MessageId>().is_err(), "{bad}");
        }
        assert_eq!(
            serde_json::from_value::<MessageId>(json!(7)).unwrap(),
            MessageId(7)
        );
        assert!(serde_json::from_value::<MessageId>(json!(0)).is_err());
    }

    #[test]
    fn a_view_reads_with_unknown_fields_and_statuses() {
        let m: MessageView = serde_json::from_value(json!({
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
        assert_eq!(Status::from_code(-1), None);
        let r: Repeat = serde_json::from_value(json!({"every": 1000, "misfire": "later"})).unwrap();
        assert_eq!(r.misfire, Some(Misfire::Unknown));
        assert_eq!(Status::from_code(6), Some(Status::Dead));
    }
}

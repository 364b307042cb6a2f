//! Messages: [`NewMessage`], what a producer pushes, and [`MessageView`],
//! what a consumer receives and an inspection shows, with their ids,
//! statuses and policies. The shapes the server sends are the server's
//! own, from the `delayq-proto` crate; this module adds the builder of a
//! push and [`Delivery`], what an ack or nack names.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

pub use delayq_proto::{
    Backoff, BadMessageId, Message, MessageId, MessageView, Misfire, Occurrence, Repeat,
    RetryPolicy, Status,
};

/// What a producer pushes: the topic and body, and the optional fields, set
/// with the builder methods.
///
/// ```
/// use std::time::Duration;
/// use delayq_client::{NewMessage, RetryPolicy};
///
/// let reminder = NewMessage::new("sms", r#"{"order":42}"#)
///     .delay(Duration::from_secs(20 * 60))
///     .biz_key("order-42-reminder")
///     .priority(5)
///     .max_attempts(5)
///     .retry(RetryPolicy::exponential(Duration::from_secs(10), Duration::from_secs(600)));
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
    retry: Option<RetryPolicy>,
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
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
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

/// One delivery of a message, as acks and nacks name it: the message's id
/// and the receipt it was handed out with (without one, an ack or nack
/// applies to whatever delivery of the message is current).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Delivery {
    pub id: MessageId,
    pub receipt: Option<String>,
}

impl From<&MessageView> for Delivery {
    /// This delivery, to ack or nack with its receipt.
    fn from(m: &MessageView) -> Self {
        Delivery {
            id: m.id,
            receipt: m.receipt.clone(),
        }
    }
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
            .retry(RetryPolicy::fixed(Duration::from_millis(250)))
            .repeat(Repeat::every(Duration::from_secs(60)).times(3));
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({
                "topic": "sms", "body": "hi", "delay": 1500, "priority": 3, "ttl": 5000,
                "maxAttempts": 2, "bizKey": "k",
                "retry": {"backoff": "fixed", "delay": 250, "max": 250},
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
}

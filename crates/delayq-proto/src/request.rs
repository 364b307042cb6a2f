//! What a producer sends: a message to push ([`PushRequest`], with its
//! builder) and its retry policy as a push gives it ([`RetryRequest`]:
//! every field optional, the server's defaults for the rest). A recurring
//! message's series is [`Repeat`] itself.
//!
//! The server reads a push field by field (for errors that name the
//! field), with the same rules these types describe in the OpenAPI
//! document; clients build and send them.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::message::{
    epoch_ms, millis, Backoff, Dst, MessageId, MessageView, OnDuplicate, Repeat, RetryPolicy,
};

/// A message to push. Unknown fields are refused, so a typo does not
/// silently mean something else.
///
/// ```
/// use std::time::Duration;
/// use delayq_proto::{PushRequest, RetryRequest};
///
/// let reminder = PushRequest::new("sms", r#"{"order":42}"#)
///     .delay(Duration::from_secs(20 * 60))
///     .biz_key("order-42-reminder")
///     .priority(5)
///     .max_attempts(5)
///     .retry(RetryRequest::exponential(Duration::from_secs(10), Duration::from_secs(600)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PushRequest {
    /// Where it is delivered.
    #[cfg_attr(
        feature = "utoipa",
        schema(pattern = "^[A-Za-z0-9._:-]{1,128}$", example = "sms")
    )]
    pub topic: String,
    /// The producer's business key: unique per topic among live messages;
    /// pushing it again answers the live message's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(min_length = 1, max_length = 256))]
    pub biz_key: Option<String>,
    /// Its ordered group (same rules as `bizKey`): within the topic, one
    /// message of a group at a time is handed out and not yet ended, and
    /// the group's messages go out in due order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(min_length = 1, max_length = 256))]
    pub group: Option<String>,
    /// The payload (JSON text welcome), at most the server's
    /// `--max-body-bytes` (1 MiB by default) or 413 `body_too_large`.
    pub body: String,
    /// Delivered this many ms from now (0 … 10 years); not with `deliverAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 0, maximum = 315_360_000_000_i64))]
    pub delay: Option<i64>,
    /// Delivered at this epoch time (ms); in the past means now; at most 10
    /// years ahead. Not with `delay`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 0))]
    pub deliver_at: Option<i64>,
    /// A local wall-clock time, `YYYY-MM-DDTHH:MM:SS` (seconds and `.fff`
    /// optional, no offset), read in `tz`: delivered then. Not with `delay`
    /// or `deliverAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "utoipa",
        schema(
            example = "2027-03-28T09:00:00",
            pattern = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?$"
        )
    )]
    pub deliver_at_local: Option<String>,
    /// The IANA zone `deliverAtLocal` is read in (e.g. `Europe/Berlin`);
    /// only with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(example = "Europe/Berlin"))]
    pub tz: Option<String>,
    /// Which instant `deliverAtLocal` means when the clock jumps over it or
    /// passes it twice (default `reject`: a 400 naming both readings);
    /// only with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<Dst>,
    /// Higher first among messages due at the same instant (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 0, maximum = 255))]
    pub priority: Option<i64>,
    /// With `bizKey`: what this push does to a live message holding the key
    /// (default `keep`: nothing, its id answered). `replace` gives it this
    /// push's body, due time and priority; `extend` moves only its due
    /// time, and only later. A message handed out is left alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_duplicate: Option<OnDuplicate>,
    /// Ms a consumer has to ack (default 30 000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 100, maximum = 86_400_000))]
    pub ttl: Option<i64>,
    /// Deliveries before the message is `Dead` (default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 1, maximum = 1000))]
    pub max_attempts: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<crate::schema::RepeatRequest>))]
    pub repeat: Option<Repeat>,
}

impl PushRequest {
    /// A message for `topic` (`[A-Za-z0-9._:-]{1,128}`), due at once unless
    /// a delay or a delivery time is set. The body is opaque text; JSON is
    /// welcome.
    pub fn new(topic: impl Into<String>, body: impl Into<String>) -> Self {
        PushRequest {
            topic: topic.into(),
            biz_key: None,
            group: None,
            body: body.into(),
            delay: None,
            deliver_at: None,
            deliver_at_local: None,
            tz: None,
            dst: None,
            priority: None,
            on_duplicate: None,
            ttl: None,
            max_attempts: None,
            retry: None,
            repeat: None,
        }
    }

    /// Due this long after the server accepts it (up to 10 years; sent in
    /// whole milliseconds). Replaces a [`deliver_at`](Self::deliver_at).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.clear_when();
        self.delay = Some(millis(delay));
        self
    }

    /// Due at this time (a time past is now). Replaces a
    /// [`delay`](Self::delay).
    pub fn deliver_at(mut self, at: SystemTime) -> Self {
        self.clear_when();
        self.deliver_at = Some(epoch_ms(at));
        self
    }

    /// Due at a local wall-clock time (`"2027-03-28T09:00:00"`, no offset)
    /// in an IANA zone (`"Europe/Berlin"`), read by the server at the push.
    /// A time the zone's clock jumps over or passes twice is refused unless
    /// [`dst`](Self::dst) says which instant it means. Replaces a delay or
    /// a delivery time.
    pub fn deliver_at_local(mut self, wall: impl Into<String>, tz: impl Into<String>) -> Self {
        self.clear_when();
        self.deliver_at_local = Some(wall.into());
        self.tz = Some(tz.into());
        self
    }

    /// With [`deliver_at_local`](Self::deliver_at_local): which instant a
    /// time in a daylight-saving gap or fold means.
    pub fn dst(mut self, dst: Dst) -> Self {
        self.dst = Some(dst);
        self
    }

    fn clear_when(&mut self) {
        self.delay = None;
        self.deliver_at = None;
        self.deliver_at_local = None;
        self.tz = None;
        self.dst = None;
    }

    /// 0 to 255 (default 0): higher first among messages due at the same
    /// instant.
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = Some(priority.into());
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
        self.max_attempts = Some(attempts.into());
        self
    }

    /// The producer's key: while a message of this topic with this key is
    /// live, pushing it again answers that message's id (an idempotent push).
    pub fn biz_key(mut self, key: impl Into<String>) -> Self {
        self.biz_key = Some(key.into());
        self
    }

    /// Its ordered group: within the topic, one message of the group at a
    /// time is handed out (the next once it is acked, dead or cancelled),
    /// in due order.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// With [`biz_key`](Self::biz_key): what this push does to a live
    /// message holding the key ([`OnDuplicate::Replace`] to debounce).
    pub fn on_duplicate(mut self, on: OnDuplicate) -> Self {
        self.on_duplicate = Some(on);
        self
    }

    /// The wait before the next delivery after a nack without a delay or an
    /// expired ack deadline (none: ready again at once).
    pub fn retry(mut self, retry: impl Into<RetryRequest>) -> Self {
        self.retry = Some(retry.into());
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

/// The wait before a delivery after a failed one (a nack without a delay,
/// or an ack deadline that passed). `max` must not be below `delay`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RetryRequest {
    /// Default exponential.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,
    /// Ms after the first failure (default 1 000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 0, maximum = 86_400_000))]
    pub delay: Option<i64>,
    /// The longest wait, ms (default 1 hour, or `delay` when longer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 0, maximum = 86_400_000))]
    pub max: Option<i64>,
}

impl RetryRequest {
    /// The same wait after every failure (whole milliseconds, at most a
    /// day).
    pub fn fixed(delay: Duration) -> Self {
        RetryRequest {
            backoff: Some(Backoff::Fixed),
            delay: Some(millis(delay)),
            max: None,
        }
    }

    /// `delay` after the first failure, doubling up to `max`.
    pub fn exponential(delay: Duration, max: Duration) -> Self {
        RetryRequest {
            backoff: Some(Backoff::Exponential),
            delay: Some(millis(delay)),
            max: Some(millis(max)),
        }
    }
}

/// A policy as a message carries it, sent back as it is.
impl From<RetryPolicy> for RetryRequest {
    fn from(p: RetryPolicy) -> Self {
        RetryRequest {
            backoff: Some(p.backoff),
            delay: Some(p.delay),
            max: Some(p.max),
        }
    }
}

/// One delivery of a message, as acks and nacks name it: the message's id
/// and the receipt it was handed out with (without one, an ack or nack
/// applies to whatever delivery of the message is current). Sent as the
/// id alone, or `{"id", "receipt"}`.
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

impl<'de> Deserialize<'de> for Delivery {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Id(MessageId),
            Receipt {
                id: MessageId,
                receipt: Option<String>,
            },
        }
        Ok(match Raw::deserialize(d)? {
            Raw::Id(id) => Delivery { id, receipt: None },
            Raw::Receipt { id, receipt } => Delivery { id, receipt },
        })
    }
}

/// `POST /push/batch`: all durable, or none accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PushBatchRequest {
    #[cfg_attr(feature = "utoipa", schema(min_items = 1, max_items = 1000))]
    pub messages: Vec<PushRequest>,
}

/// `POST /ack` and `POST /cancel` by ids: each id once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AckRequest {
    #[cfg_attr(
        feature = "utoipa",
        schema(value_type = BTreeSet<crate::schema::DeliveryInput>, min_items = 1, max_items = 100)
    )]
    pub ids: Vec<Delivery>,
}

/// `POST /nack`: each id once; without `delay`, by each message's retry
/// policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NackRequest {
    #[cfg_attr(
        feature = "utoipa",
        schema(value_type = BTreeSet<crate::schema::DeliveryInput>, min_items = 1, max_items = 100)
    )]
    pub ids: Vec<Delivery>,
    /// Ms until the messages are delivered again (0: ready at once; at most
    /// one day).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 0, maximum = 86_400_000))]
    pub delay: Option<i64>,
}

/// `POST /get/{topic}`: ack the previous batch and poll the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AckAndGetRequest {
    /// Deliveries to ack first (each message once): ids, or
    /// `{"id", "receipt"}`.
    #[serde(default)]
    #[cfg_attr(
        feature = "utoipa",
        schema(value_type = BTreeSet<crate::schema::DeliveryInput>, max_items = 100)
    )]
    pub ack: Vec<Delivery>,
    /// Most messages to hand out (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 1, maximum = 100))]
    pub count: Option<i64>,
    /// Seconds to wait for one (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 0, maximum = 300))]
    pub timeout: Option<i64>,
}

/// `POST /cancel`: by ids, by bizKey, or by bizKey prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum CancelRequest {
    Ids(CancelIds),
    Id(CancelId),
    BizKey(CancelBizKey),
    Prefix(CancelPrefix),
}

/// Cancel these messages (1 to 1000, each once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CancelIds {
    #[cfg_attr(
        feature = "utoipa",
        schema(value_type = BTreeSet<crate::schema::IdInput>, min_items = 1, max_items = 1000)
    )]
    pub ids: Vec<MessageId>,
}

/// Cancel one message (as `{"ids": [ID]}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CancelId {
    #[cfg_attr(feature = "utoipa", schema(value_type = crate::schema::IdInput))]
    pub id: MessageId,
}

/// Cancel the live message of a topic holding this bizKey.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CancelBizKey {
    #[cfg_attr(feature = "utoipa", schema(pattern = "^[A-Za-z0-9._:-]{1,128}$"))]
    pub topic: String,
    #[cfg_attr(feature = "utoipa", schema(min_length = 1, max_length = 256))]
    pub biz_key: String,
}

/// Cancel every live message of a topic whose bizKey starts with this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CancelPrefix {
    #[cfg_attr(feature = "utoipa", schema(pattern = "^[A-Za-z0-9._:-]{1,128}$"))]
    pub topic: String,
    #[cfg_attr(feature = "utoipa", schema(min_length = 1, max_length = 256))]
    pub biz_key_prefix: String,
}

/// `POST /reschedule`: which messages (`ids`, `id`, or `topic` with `bizKey` or
/// `bizKeyPrefix`) and where to (`delay`, `deliverAt` or `deliverAtLocal`
/// with `tz`, and/or `priority`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RescheduleRequest {
    /// 1 to 1000 message ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "utoipa",
        schema(value_type = Option<BTreeSet<crate::schema::IdInput>>, min_items = 1, max_items = 1000)
    )]
    pub ids: Option<Vec<MessageId>>,
    /// One message id (as `ids` with one); not beside `ids`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<crate::schema::IdInput>))]
    pub id: Option<MessageId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(pattern = "^[A-Za-z0-9._:-]{1,128}$"))]
    pub topic: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(min_length = 1, max_length = 256))]
    pub biz_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(min_length = 1, max_length = 256))]
    pub biz_key_prefix: Option<String>,
    /// ms from now, 0 to 10 years.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 0, maximum = 315_360_000_000_i64))]
    pub delay: Option<i64>,
    /// Epoch ms; in the past means now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 0))]
    pub deliver_at: Option<i64>,
    /// A local wall-clock time, `YYYY-MM-DDTHH:MM:SS` (seconds and `.fff`
    /// optional, no offset), read in `tz`: delivered then. Not with `delay`
    /// or `deliverAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "utoipa",
        schema(
            example = "2027-03-28T09:00:00",
            pattern = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?$"
        )
    )]
    pub deliver_at_local: Option<String>,
    /// The IANA zone `deliverAtLocal` is read in (e.g. `Europe/Berlin`);
    /// only with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(example = "Europe/Berlin"))]
    pub tz: Option<String>,
    /// Which instant `deliverAtLocal` means when the clock jumps over it or
    /// passes it twice (default `reject`: a 400 naming both readings);
    /// only with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<Dst>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 0, maximum = 255))]
    pub priority: Option<i64>,
    /// A recurring message's whole series moves: the occurrences after the
    /// pending one follow from its new time (`every` from it, `cron` from
    /// its first time after it). Needs a new time; a message
    /// that is not recurring moves as without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<bool>,
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use serde_json::json;

    use super::*;

    #[test]
    fn a_delivery_is_an_id_or_an_id_with_its_receipt() {
        let bare = Delivery::from(MessageId(9));
        assert_eq!(serde_json::to_value(&bare).unwrap(), json!("9"));
        let held = Delivery {
            id: MessageId(9),
            receipt: Some("1-5".into()),
        };
        assert_eq!(
            serde_json::to_value(&held).unwrap(),
            json!({"id": "9", "receipt": "1-5"})
        );
        for d in [bare, held] {
            let back: Delivery = serde_json::from_value(serde_json::to_value(&d).unwrap()).unwrap();
            assert_eq!(back, d);
        }
    }

    #[test]
    fn a_push_sends_only_what_was_set() {
        let m = PushRequest::new("sms", "hi");
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({"topic": "sms", "body": "hi"})
        );
        let m = PushRequest::new("sms", "hi")
            .deliver_at(UNIX_EPOCH + Duration::from_millis(1_800_000_000_000))
            .delay(Duration::from_millis(1500))
            .priority(3)
            .ttl(Duration::from_secs(5))
            .max_attempts(2)
            .biz_key("k")
            .retry(RetryRequest::fixed(Duration::from_millis(250)))
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
        let back: PushRequest = serde_json::from_value(serde_json::to_value(&m).unwrap()).unwrap();
        assert_eq!(back, m);
        let at = PushRequest::new("t", "b")
            .delay(Duration::from_secs(1))
            .deliver_at(UNIX_EPOCH + Duration::from_millis(42));
        assert_eq!(
            serde_json::to_value(&at).unwrap(),
            json!({"topic": "t", "body": "b", "deliverAt": 42})
        );
        // A local time replaces an instant, and the reverse.
        let local = at
            .clone()
            .deliver_at_local("2027-03-28T02:30:00", "Europe/Berlin")
            .dst(Dst::Later);
        assert_eq!(
            serde_json::to_value(&local).unwrap(),
            json!({"topic": "t", "body": "b", "deliverAtLocal": "2027-03-28T02:30:00",
                   "tz": "Europe/Berlin", "dst": "later"})
        );
        assert_eq!(
            serde_json::to_value(local.delay(Duration::from_millis(5))).unwrap(),
            json!({"topic": "t", "body": "b", "delay": 5})
        );
        assert!(serde_json::from_value::<PushRequest>(
            json!({"topic": "t", "body": "b", "dealy": 5})
        )
        .is_err());
    }
}

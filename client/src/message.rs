//! Messages: [`NewMessage`], what a producer pushes, and [`MessageView`],
//! what a consumer receives and an inspection shows, with their ids,
//! statuses and policies. The shapes the server sends are the server's
//! own, from the `delayq-proto` crate; this module adds the builder of a
//! push and [`Delivery`], what an ack or nack names.

pub use delayq_proto::{
    Backoff, BadMessageId, Delivery, Dst, Message, MessageId, MessageView, Misfire, Occurrence,
    OnDuplicate, PushRequest, Repeat, RetryPolicy, RetryRequest, Status,
};

/// What a producer pushes: the topic and body, and the optional fields, set
/// with the builder methods (the server's own [`PushRequest`]).
///
/// ```
/// use std::time::Duration;
/// use delayq_client::{NewMessage, RetryRequest};
///
/// let reminder = NewMessage::new("sms", r#"{"order":42}"#)
///     .delay(Duration::from_secs(20 * 60))
///     .biz_key("order-42-reminder")
///     .priority(5)
///     .max_attempts(5)
///     .retry(RetryRequest::exponential(Duration::from_secs(10), Duration::from_secs(600)));
/// ```
pub type NewMessage = PushRequest;

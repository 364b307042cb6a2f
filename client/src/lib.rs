//! A client of delayq's HTTP API: typed pushes and
//! cancels, and a [`Consumer`] that long-polls a topic, runs a handler per
//! message with bounded concurrency, and acks each batch in the request
//! that fetches the next.
//!
//! Push a message due in two seconds, and consume its topic until Ctrl-C
//! (`examples/quickstart.rs`):
//!
//! ```no_run
#![doc = include_str!("../examples/quickstart.rs")]
//! ```
//!
//! # Layout
//!
//! - [`client`]: [`Client`], one method per route: [`Client::push`],
//!   [`Client::push_batch`], [`Client::cancel`] and the bulk cancels, and
//!   the consumer's own [`Client::poll`], [`Client::ack`], [`Client::nack`];
//!   [`Client::topics`], [`Client::pause`] and [`Client::resume`];
//!   [`Client::find_biz_key`] and [`Client::search`];
//!   [`Client::reschedule_ids`] and [`Client::reschedule_biz_key`].
//! - [`message`]: [`NewMessage`] (a builder of what is pushed: delay or
//!   delivery time, priority, ttl, attempts, bizKey, [`RetryRequest`], [`Repeat`]),
//!   [`MessageView`] (what is delivered), [`MessageId`], [`Status`].
//! - [`consumer`]: [`Consumer`], the poll / handle / ack loop, its
//!   backoff (exponential, jittered) and shutdown; a handler answers an
//!   [`Outcome`].
//! - [`reply`]: the server's answers: [`PushReply`], [`AckAndPollReply`], a result per
//!   id for acks, nacks and cancels.
//! - [`outbox`]: [`outbox::outbox_row`], a message as the `message` column
//!   of a row the application inserts into its outbox table, in its own
//!   transaction (transactional enqueue).
//! - [`error`]: [`Error`], carrying the server's [`ErrorCode`] and message;
//!   [`Error::is_retryable`] tells an outage from a refusal.
//!
//! [`ErrorCode`] and the outcomes ([`AckOutcome`], [`NackOutcome`],
//! [`CancelOutcome`]) are the server's own definitions, from the
//! `delayq-proto` crate both build on, re-exported here.
//!
//! The client speaks plain HTTP/1.1 with keep-alive (reqwest, no TLS):
//! delayq is meant to sit behind a load balancer on a private network.

mod backoff;
pub mod client;
pub mod consumer;
pub mod error;
pub mod message;
pub mod outbox;
pub mod reply;

pub use client::{Client, ClientBuilder, Reschedule, Search};
pub use consumer::{Consumer, ConsumerStats, Outcome};
pub use delayq_proto::{Forecast, ForecastBucket, PauseState, TopicCounts, TopicList, TopicView};
pub use error::{Error, ErrorCode};
// `message::Message` (the bare message, without its status and receipt)
// is left out here on purpose: a delivery is a `MessageView`.
pub use message::{
    Backoff, Delivery, Dst, MessageId, MessageView, Misfire, NewMessage, Occurrence, OnDuplicate,
    PushRequest, Repeat, RetryPolicy, RetryRequest, Status,
};
pub use reply::{
    AckAndPollReply, AckOutcome, AckResult, CancelEach, CancelOne, CancelOutcome, DuplicateOutcome,
    DuplicateUpdate, MessagePage, NackOutcome, NackResult, PrefixCounts, PushReply, RescheduleEach,
    RescheduleOne, RescheduleOutcome,
};

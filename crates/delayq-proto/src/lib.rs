//! The JSON shapes delayq's server and its Rust client (`delayq-client`)
//! share: one definition, so a code or an outcome is never spelled two ways.
//!
//! - [`ErrorCode`] and [`ErrorBody`]: the `{"error": code, "message": text}`
//!   document of every refusal, with the codes' snake_case names.
//! - [`AckOutcome`], [`NackOutcome`], [`CancelOutcome`]: the `result` of one
//!   message in the answers to acks, nacks and cancels.
//! - [`TopicList`], [`PauseState`]: `GET /topics` and the answers to
//!   pausing and resuming a topic.
//! - [`MessageId`], [`Status`], [`Message`] and [`MessageView`] (what a
//!   consumer is handed and an inspection shows), with a message's
//!   [`RetryPolicy`] and [`Repeat`] series.
//! - The answers to pushes, polls, acks, nacks, cancels, reschedules and
//!   searches ([`PushReply`], [`AckAndPollReply`], [`AckResult`], …).
//! - What a producer sends: [`PushRequest`] (with its builder) and
//!   [`RetryRequest`].
//! - [`ClockView`]: the cluster's clock as `GET /admin/cluster` shows it,
//!   with its [`Member`]s and this node's [`Session`].
//! - What restores ([`RestoreReport`], [`RestoreProgress`]) and
//!   reconciliations ([`ReconcileReport`]) report, and the journal's queue
//!   ([`BacklogView`]).
//!
//! This crate knows nothing of HTTP frameworks, Redis, databases or async
//! runtimes: serde alone, and utoipa behind the `utoipa` feature for the
//! server's OpenAPI document. Readers are forgiving: a code or an outcome
//! a newer server sends reads as [`ErrorCode::Other`] or an `Unknown`
//! outcome rather than failing. (The admin answers' enums, [`Session`]
//! and [`Repair`], take only the names this version sends.)

mod clock;
mod cluster;
mod error;
mod journal;
mod message;
mod outcome;
mod reconcile;
mod reply;
mod request;
#[cfg(feature = "utoipa")]
pub mod schema;
mod topic;

pub use clock::{ClockView, MasterClock};
pub use cluster::{Member, Session};
pub use error::{ErrorBody, ErrorCode};
pub use journal::{
    BacklogView, HistoryEntry, Refused, RestoreCursor, RestoreProgress, RestoreReport,
};
pub use message::{
    epoch_ms, millis, Backoff, BadMessageId, Message, MessageId, MessageView, Misfire, Occurrence,
    Repeat, RetryPolicy, Status, DEFAULT_MAX_ATTEMPTS, ID_PATTERN,
};
pub use outcome::{AckOutcome, CancelOutcome, NackOutcome};
pub use reconcile::{Difference, ReconcileReport, Repair, Sample};
pub use reply::{
    AckAndPollReply, AckBatchReply, AckResult, CancelEach, CancelOne, MessagePage, NackBatchReply,
    NackResult, PollReply, PrefixCounts, PushBatchReply, PushReply, RescheduleEach, RescheduleOne,
    RescheduleOutcome,
};
pub use request::{
    AckAndGetRequest, AckRequest, CancelBizKey, CancelId, CancelIds, CancelPrefix, CancelRequest,
    Delivery, NackRequest, PushBatchRequest, PushRequest, RescheduleRequest, RetryRequest,
};
pub use topic::{PauseState, TopicCounts, TopicList, TopicView};

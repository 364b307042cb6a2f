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
//! - [`MessageReply`]: a message and its history, as an inspection shows
//!   it; [`DeadPage`] and the answers to requeueing dead letters
//!   ([`RequeueReply`]).
//! - [`HealthReply`], [`ReadyReply`]: `GET /health` and `GET /ready`.
//! - The admin routes' answers: the cluster ([`ClusterReply`], with its
//!   [`Member`]s, [`Session`] and [`ClockView`]), shard moves
//!   ([`AssignmentReply`]), restores ([`RestoreReport`], [`RestoreState`]),
//!   the journal's queue ([`BacklogView`]) and reconciliations
//!   ([`ReconcileReport`]).
//!
//! This crate knows nothing of HTTP frameworks, Redis, databases or async
//! runtimes: serde alone, and utoipa behind the `utoipa` feature for the
//! server's OpenAPI document. Readers are forgiving: a code or an outcome
//! a newer server sends reads as [`ErrorCode::Other`] or an `Unknown`
//! outcome rather than failing. (The health and admin answers' enums,
//! [`Session`], [`Repair`] and [`RequeueResult`], take only the names this
//! version sends.)

mod clock;
mod cluster;
mod dead;
mod error;
mod health;
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
pub use cluster::{AssignmentReply, ClusterReply, Member, Session, ShardView};
pub use dead::{DeadMessage, DeadPage, RequeueOne, RequeueReply, RequeueResult, RequeueTopic};
pub use error::{ErrorBody, ErrorCode};
pub use health::{HealthReply, ReadyReply};
pub use journal::{
    BacklogView, HistoryEntry, MessageReply, Refused, RestoreCursor, RestoreOneReply,
    RestoreProgress, RestoreReport, RestoreState,
};
pub use message::{
    epoch_ms, millis, Backoff, BadMessageId, Dst, Message, MessageId, MessageView, Misfire,
    Occurrence, OnDuplicate, Repeat, RetryPolicy, Status, DEFAULT_MAX_ATTEMPTS, ID_PATTERN,
};
pub use outcome::{AckOutcome, CancelOutcome, NackOutcome};
pub use reconcile::{Difference, ReconcileReport, Repair, Sample};
pub use reply::{
    AckAndPollReply, AckBatchReply, AckReply, AckResult, CancelEach, CancelOne, CancelReply,
    DeleteNotFound, DuplicateOutcome, DuplicateUpdate, MessagePage, NackBatchReply, NackResult,
    PollReply, PrefixCounts, PushBatchReply, PushReply, RescheduleEach, RescheduleOne,
    RescheduleOutcome, RescheduleReply,
};
pub use request::{
    AckAndGetRequest, AckRequest, CancelBizKey, CancelId, CancelIds, CancelPrefix, CancelRequest,
    Delivery, NackRequest, PushBatchRequest, PushRequest, RescheduleRequest, RetryRequest,
};
pub use topic::{
    Forecast, ForecastBucket, GroupCounts, PauseState, TopicCounts, TopicList, TopicView,
};

//! The API's request and response bodies as types, for the OpenAPI
//! document ([`super::openapi`]).
//!
//! Responses are these types: the handlers build them and serialize them,
//! so the document shows what is sent. Requests are read as bytes and
//! checked by hand (see `body.rs` and [`crate::message::parse_draft`]), for
//! error messages that name the field; their types here describe what the
//! handlers accept, with the same bounds, and are never built.
//!
//! What the Rust client reads too comes from `delayq-proto` ([`proto`]):
//! the error document and codes, and each message's outcome in the
//! answers to acks, nacks and cancels.

use delayq_proto as proto;
pub use delayq_proto::schema::{DeliveryInput, IdInput, RepeatRequest};
pub use delayq_proto::{
    AckAndGetRequest, AckAndPollReply, AckBatchReply, AckRequest, AckResult, CancelEach, CancelOne,
    CancelRequest, MessagePage, NackBatchReply, NackRequest, NackResult, PollReply, PrefixCounts,
    PushBatchReply, PushBatchRequest, PushReply, PushRequest, RescheduleEach, RescheduleOne,
    RescheduleRequest, RetryRequest,
};
use serde::Serialize;
use utoipa::ToSchema;

use crate::cluster::{Member, Session};
use crate::error::ErrorCode;
use crate::message::{MessageId, MessageView, Status};
use crate::redis::inspect::RestoreCursor;
use crate::repeat::Occurrence;
use crate::restore::RestoreReport;

/// What a topic looks like (the same rule as [`crate::message::valid_topic`]).
pub const TOPIC_PATTERN: &str = "^[A-Za-z0-9._:-]{1,128}$";

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------

/// `POST /ack/{id}`: consumed, or (a recurring message) waiting for its
/// next occurrence.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AckReply {
    pub id: MessageId,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_occurrence: Option<Occurrence>,
}

/// `GET /delete?id=` of an unknown id: an error with a definite result.
#[derive(Serialize, ToSchema)]
pub struct DeleteNotFound {
    pub error: ErrorCode,
    pub message: String,
    pub id: MessageId,
    pub result: proto::CancelOutcome,
}

/// `POST /cancel`: a result per id (by ids or bizKey), or counts per
/// outcome (by prefix).
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum CancelReply {
    Each(CancelEach),
    Counts(PrefixCounts),
}

/// By ids or bizKey: a result per message; by prefix: how many matched and
/// the count per outcome.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum RescheduleReply {
    Each(RescheduleEach),
    Counts(PrefixCounts),
}

/// A dead letter with its history.
#[derive(Serialize, ToSchema)]
pub struct DeadMessage {
    #[serde(flatten)]
    pub message: MessageView,
    pub history: Vec<proto::HistoryEntry>,
}

/// `GET /dead/{topic}`: a page of dead letters in id order.
#[derive(Serialize, ToSchema)]
pub struct DeadPage {
    pub messages: Vec<DeadMessage>,
    /// The `after` of the next page; null on the last.
    pub next: Option<MessageId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RequeueResult {
    Requeued,
    NotDead,
    NotFound,
    /// A live message holds its bizKey now (`holder`).
    BizKeyTaken,
}

/// One dead message's requeue.
#[derive(Serialize, ToSchema)]
pub struct RequeueOne {
    pub id: MessageId,
    pub result: RequeueResult,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<MessageId>,
}

/// `POST /dead/{topic}/requeue`.
#[derive(Serialize, ToSchema)]
pub struct RequeueTopic {
    pub topic: String,
    pub requeued: usize,
    /// Dead messages left dead, with why.
    pub skipped: Vec<RequeueOne>,
    /// More dead messages are left after `limit`.
    pub more: bool,
}

/// `POST /dead/{target}/requeue`: one message, or a topic's.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum RequeueReply {
    One(RequeueOne),
    Topic(RequeueTopic),
}

/// `GET /reStore/{id}`: the restore's counts, and the message's status.
#[derive(Serialize, ToSchema)]
pub struct RestoreOneReply {
    #[serde(flatten)]
    pub report: RestoreReport,
    pub id: MessageId,
    pub status: Status,
}

/// `GET /messages/{id}`: the message and its history from the flow table.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageReply {
    /// Its status and attempts as Redis has them when Redis knows more
    /// than the journal (a change the journal has not written yet, a few
    /// ms behind): what an ack or a delivery already did.
    pub message: MessageView,
    /// When its journal row last changed (epoch ms).
    pub updated_time: i64,
    /// Where `status` comes from: `redis` (ahead of the journal) or
    /// `journal`. The history is the journal's.
    pub status_from: &'static str,
    /// Oldest first.
    pub history: Vec<proto::HistoryEntry>,
}

#[derive(Serialize, ToSchema)]
pub struct HealthReply {
    #[schema(example = "ok")]
    pub status: &'static str,
    /// The version of delayq this node runs.
    #[schema(example = "0.1.0")]
    pub version: &'static str,
    /// The git revision it was built from (`unknown` without git).
    #[schema(example = "0c76ed1c7286")]
    pub revision: &'static str,
}

/// `GET /ready`: each dependency, `ok` or what is wrong.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadyReply {
    pub redis: String,
    pub journal: String,
    pub cluster: String,
    /// `standalone`, `active-standby` or `multi-active`.
    pub mode: &'static str,
    pub leader: Option<String>,
    /// Shards this node scans.
    pub scanning: usize,
    /// Owned shards whose scans keep failing (`ok` when none): nothing of
    /// theirs is delivered.
    pub shards: String,
    /// `ok`, or how long this process did not run when it has just resumed
    /// from a stall (it refuses requests meanwhile; see the book's
    /// operating chapter, "A frozen node").
    pub process: String,
    /// Redis's `maxmemory-policy`; null when its CONFIG command is disabled.
    pub redis_maxmemory_policy: Option<String>,
    pub warnings: Vec<String>,
}

/// One shard in `GET /admin/cluster`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardView {
    pub shard: usize,
    /// The node the leader assigned it to.
    pub owner: Option<String>,
    pub scanning_here: bool,
    /// The epoch this node scans it under, when it does.
    pub owner_epoch: Option<i64>,
    /// The fencing epoch stored in Redis (0: none yet).
    pub epoch: i64,
    pub delaying: i64,
    pub ready: i64,
    pub in_flight: i64,
    /// Due time of the earliest scheduled message, when already due.
    pub oldest_overdue: Option<i64>,
}

/// `GET /admin/cluster`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterReply {
    pub mode: &'static str,
    pub node: String,
    pub session: Session,
    pub leader: Option<String>,
    pub in_good_standing: bool,
    pub worker_id: Option<u16>,
    /// The ZooKeeper session timeout the servers granted (ms); null
    /// standalone.
    pub session_timeout_ms: Option<u64>,
    /// How long a confirmed session lets this node scan (ms): a third of
    /// the granted timeout.
    pub permit_ms: Option<u64>,
    pub nodes: Vec<Member>,
    pub shards: Vec<ShardView>,
    /// This node's wall clock against the cluster's (Redis's).
    pub clock: crate::clock::ClockView,
}

/// The leader's assignment: per shard, its node.
#[derive(Serialize, ToSchema)]
pub struct AssignmentReply {
    pub assignment: Vec<Option<String>>,
}

/// `GET /admin/restore`: this node's current or last restore (only
/// `running`, `startedAt` and `finishedAt`, null, when it ran none), and
/// the cursor of an interrupted restore a new one would resume after.
#[allow(dead_code)] // described, not built: the handler adds `resumable` to RestoreProgress
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreState {
    running: bool,
    expire: Option<bool>,
    dry_run: Option<bool>,
    scanned: Option<u64>,
    restored: Option<u64>,
    already_present: Option<u64>,
    skipped_expired: Option<u64>,
    skipped_finished: Option<u64>,
    rate_per_second: Option<f64>,
    started_at: Option<i64>,
    finished_at: Option<i64>,
    cursor: Option<i64>,
    resumed_after: Option<i64>,
    error: Option<String>,
    resumable: Option<RestoreCursor>,
}

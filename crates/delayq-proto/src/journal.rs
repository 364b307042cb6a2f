//! What the API shows of the journal: a message's history (`GET
//! /messages/{id}`), where a restore from it stands (`GET /reStore`, `GET
//! /admin/restore`), and the status changes waiting to be written to it
//! (`GET /admin/journal`).

use serde::{Deserialize, Serialize};

use crate::message::{MessageId, MessageView, Status};

/// One status change of a message, as its history shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    pub status: Status,
    pub attempts: i32,
    pub time: i64,
    pub shard: String,
    pub node_id: String,
    pub host: String,
    /// The due time this change set (a reschedule, a retry's wait, a next
    /// occurrence); absent for other changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_time: Option<i64>,
}

/// A restore's place in the journal, kept in Redis while it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RestoreCursor {
    /// Every live message with an id up to this one was restored.
    pub after: i64,
    pub expire: bool,
    /// When the restore that wrote it started (ms).
    pub started_at: i64,
    /// When it wrote it (ms).
    pub updated_at: i64,
}

/// `GET /messages/{id}`: the message and its history from the flow table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
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
    pub status_from: String,
    /// Oldest first.
    pub history: Vec<HistoryEntry>,
}

// What a restore did (`GET /reStore`, and `delayq restore`). No doc
// comment: the OpenAPI document has never described it. `beyondHorizon`'s
// description names a module of the server; the document shows the text
// as it is.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RestoreReport {
    /// Live messages read from the journal.
    pub scanned: u64,
    /// Added back to Redis (with `dryRun`: would be added).
    pub restored: u64,
    /// Redis held them already.
    pub already_present: u64,
    /// Due time passed and `expire` was false.
    pub skipped_expired: u64,
    /// Acked or cancelled in Redis moments ago; the journal is catching up.
    pub skipped_finished: u64,
    /// Listed as waiting in the journal, due beyond the Redis horizon: left
    /// there (not read), scheduled as they come near (see
    /// [`crate::horizon`]; one cancelled while waiting is counted until its
    /// due time).
    pub beyond_horizon: u64,
    pub dry_run: bool,
    /// Started after this id: an interrupted restore's cursor.
    pub resumed_after: Option<i64>,
    pub elapsed_ms: u64,
}

/// A restore as `GET /admin/restore` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RestoreProgress {
    pub running: bool,
    pub expire: bool,
    pub dry_run: bool,
    pub scanned: u64,
    pub restored: u64,
    pub already_present: u64,
    pub skipped_expired: u64,
    pub skipped_finished: u64,
    /// Journal rows read per second, so far.
    pub rate_per_second: f64,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    /// The last id done: the restore resumes after it.
    pub cursor: i64,
    pub resumed_after: Option<i64>,
    /// Why it stopped, when it failed.
    pub error: Option<String>,
}

/// `GET /reStore/{id}`: the restore's counts, and the message's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RestoreOneReply {
    #[serde(flatten)]
    pub report: RestoreReport,
    pub id: MessageId,
    pub status: Status,
}

/// `GET /admin/restore`: this node's current or last restore (only
/// `running`, `startedAt` and `finishedAt`, null, when it ran none), and
/// the cursor of an interrupted restore a new one would resume after.
// The server writes it as a [`RestoreProgress`] with `resumable` added.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RestoreState {
    pub running: bool,
    pub expire: Option<bool>,
    pub dry_run: Option<bool>,
    pub scanned: Option<u64>,
    pub restored: Option<u64>,
    pub already_present: Option<u64>,
    pub skipped_expired: Option<u64>,
    pub skipped_finished: Option<u64>,
    pub rate_per_second: Option<f64>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub cursor: Option<i64>,
    pub resumed_after: Option<i64>,
    pub error: Option<String>,
    pub resumable: Option<RestoreCursor>,
}

/// A status change the database refused while it answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Refused {
    pub id: MessageId,
    pub status: Status,
    pub attempts: Option<i32>,
    pub at: i64,
    pub error: String,
    pub refused_at: i64,
}

/// The journal's queue, as `GET /admin/journal` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct BacklogView {
    pub pending: usize,
    pub limit: usize,
    pub lagging: bool,
    pub refused: u64,
    pub recent_refused: Vec<Refused>,
}

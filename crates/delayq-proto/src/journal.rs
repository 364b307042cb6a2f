//! What the API shows of the journal: a message's history, and where a
//! restore from it stands.

use serde::{Deserialize, Serialize};

use crate::message::Status;

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

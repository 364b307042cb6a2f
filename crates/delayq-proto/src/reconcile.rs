//! `GET /admin/reconcile`: the journal compared with Redis, message by
//! message, and what was put right. The kinds of difference and the rule
//! that finds them are the server's (`reconcile`); this is the report.

use serde::{Deserialize, Serialize};

use crate::message::{MessageId, Status};

/// What a reconciliation puts right.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub enum Repair {
    /// Report only.
    None,
    /// What keeps messages from being delivered (`missing`,
    /// `unscheduled`) or would bring an ended one back (`unjournaled`,
    /// `finishedInJournal`).
    Delivery,
    /// Every kind but `unknown`.
    All,
}

/// One kind of difference: how many, how many were repaired, and the first
/// few.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Difference {
    pub count: u64,
    pub repaired: u64,
    pub sample: Vec<Sample>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    pub id: MessageId,
    /// The journal's status, where it has the row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal: Option<Status>,
    /// Where Redis holds it, as a status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis: Option<Status>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReconcileReport {
    pub repair: Repair,
    /// Live journal rows compared (older than the grace period).
    pub journal_scanned: u64,
    /// Live journal rows left out: changed within the grace period.
    pub journal_recent: u64,
    /// Records of Redis's message hashes walked.
    pub redis_scanned: u64,
    pub missing: Difference,
    pub unscheduled: Difference,
    pub finished_in_journal: Difference,
    pub unknown: Difference,
    pub status_mismatch: Difference,
    pub unjournaled: Difference,
    pub grace_ms: u64,
    pub started_at: i64,
    pub elapsed_ms: u64,
}

impl ReconcileReport {
    /// No difference of any kind.
    pub fn is_clean(&self) -> bool {
        self.differences() == 0
    }

    pub fn differences(&self) -> u64 {
        self.missing.count
            + self.unscheduled.count
            + self.finished_in_journal.count
            + self.unknown.count
            + self.status_mismatch.count
            + self.unjournaled.count
    }
}

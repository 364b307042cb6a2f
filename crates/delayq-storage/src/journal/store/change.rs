//! A status change of one message, the node that wrote it, and the flow
//! row (the message's history) made from it.

use std::sync::Arc;

use crate::journal::models::NewFlow;
use crate::message::{MessageId, Status};
use crate::redis::schedule::AfterFailure;
use crate::repeat::Occurrence;

/// Where a status change happened, written on every flow row.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub node_id: String,
    pub host: String,
}

/// One status change of one message.
#[derive(Debug, Clone)]
pub struct StatusChange {
    pub id: MessageId,
    pub status: Status,
    /// The delivery count after this change, when it changed.
    pub attempts: Option<i32>,
    pub at: i64,
    /// Set when a failed delivery (a nack, an ack deadline that passed)
    /// made this change: when the message is due again (`at` when it is
    /// ready at once). The journal's `due_time` takes it, so a restore
    /// schedules the message for its next attempt.
    pub due: Option<i64>,
    /// The zset key (or actor) that made the change; shared, not copied,
    /// by the many changes of one shard.
    pub shard: Arc<str>,
    /// Set when an ack moved a recurring message on to this occurrence
    /// (status Delaying, `due` its due time, attempts 0). The row takes it
    /// unless it is at this occurrence or a later one already.
    pub occurrence: Option<Occurrence>,
    /// Set when a reschedule moved a recurring message's whole series
    /// (Redis having moved it): the occurrence it moved, and that
    /// occurrence's new due time by the series. The row takes it unless it
    /// is at a later occurrence already.
    pub series: Option<Occurrence>,
    /// An end Redis kept for the journal (`{P:s}:unjournaled`), recorded
    /// again by the ack or cancel that found it there. The journal may
    /// have it already (written, and Redis not told yet): then the row
    /// keeps its end and no second flow row is written.
    pub kept: bool,
}

impl StatusChange {
    /// A message accepted: WaitPut, at its creation time.
    pub fn waiting(id: MessageId, at: i64, shard: Arc<str>) -> StatusChange {
        StatusChange::plain(id, Status::WaitPut, None, at, shard)
    }

    /// A message written into its shard's delay zset (pushed, restored).
    pub fn scheduled(id: MessageId, at: i64, shard: Arc<str>) -> StatusChange {
        StatusChange::plain(id, Status::Delaying, None, at, shard)
    }

    /// A due message moved to its topic's ready queue by a scan.
    pub fn promoted(id: MessageId, at: i64, shard: Arc<str>) -> StatusChange {
        StatusChange::plain(id, Status::Ready, None, at, shard)
    }

    /// A message handed out for its `attempts`-th delivery.
    pub fn handed_out(id: MessageId, attempts: i32, at: i64, shard: Arc<str>) -> StatusChange {
        StatusChange::plain(id, Status::Consuming, Some(attempts), at, shard)
    }

    /// A delivery acked (or a missed occurrence of a series ended).
    pub fn consumed(id: MessageId, attempts: i32, at: i64, shard: Arc<str>) -> StatusChange {
        StatusChange::plain(id, Status::Consumed, Some(attempts), at, shard)
    }

    /// A message cancelled (or a dead one deleted): Deleted.
    pub fn deleted(id: MessageId, attempts: i32, at: i64, shard: Arc<str>) -> StatusChange {
        StatusChange::plain(id, Status::Deleted, Some(attempts), at, shard)
    }

    /// An end Redis kept for the journal, found by an ack or a cancel (see
    /// [`StatusChange::kept`]).
    pub fn kept_end(
        id: MessageId,
        status: Status,
        attempts: i32,
        at: i64,
        shard: Arc<str>,
    ) -> StatusChange {
        StatusChange {
            kept: true,
            ..StatusChange::plain(id, status, Some(attempts), at, shard)
        }
    }

    /// An end Redis recorded (acked, cancelled, dead) that the journal has
    /// not heard of yet.
    pub fn ended(
        id: MessageId,
        status: Status,
        attempts: i32,
        at: i64,
        shard: Arc<str>,
    ) -> StatusChange {
        StatusChange::plain(id, status, Some(attempts), at, shard)
    }

    /// A failed delivery (a nack, an ack deadline that passed) and where it
    /// left the message: due again at once (`at`) or after the retry delay.
    pub fn failed(
        id: MessageId,
        then: AfterFailure,
        attempts: i32,
        at: i64,
        shard: Arc<str>,
    ) -> StatusChange {
        StatusChange {
            due: Some(match then {
                AfterFailure::Delaying { due } => due,
                _ => at,
            }),
            ..StatusChange::plain(id, then.status(), Some(attempts), at, shard)
        }
    }

    /// A recurring message moved on to its `next` occurrence, due at `due`,
    /// with no attempts counted.
    pub fn moved_on(
        id: MessageId,
        next: Occurrence,
        due: i64,
        at: i64,
        shard: Arc<str>,
    ) -> StatusChange {
        StatusChange {
            due: Some(due),
            occurrence: Some(next),
            ..StatusChange::plain(id, Status::Delaying, Some(0), at, shard)
        }
    }

    /// A dead message brought back: Delaying, due at once, no attempts
    /// counted.
    pub fn requeued(id: MessageId, at: i64, shard: Arc<str>) -> StatusChange {
        StatusChange {
            due: Some(at),
            ..StatusChange::plain(id, Status::Delaying, Some(0), at, shard)
        }
    }

    /// The journal's row put right by the reconciler: the status Redis
    /// holds, with Redis's delivery count and due time.
    pub fn corrected(
        id: MessageId,
        status: Status,
        attempts: i32,
        at: i64,
        due: Option<i64>,
        shard: Arc<str>,
    ) -> StatusChange {
        StatusChange {
            due,
            ..StatusChange::plain(id, status, Some(attempts), at, shard)
        }
    }

    /// A change with no due time and no occurrence.
    fn plain(
        id: MessageId,
        status: Status,
        attempts: Option<i32>,
        at: i64,
        shard: Arc<str>,
    ) -> StatusChange {
        StatusChange {
            id,
            status,
            attempts,
            at,
            due: None,
            shard,
            occurrence: None,
            series: None,
            kept: false,
        }
    }

    /// The change as JSON, to keep outside the process (see `crate::node`'s spill).
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "id": self.id,
            "status": self.status.code(),
            "attempts": self.attempts,
            "at": self.at,
            "due": self.due,
            "shard": &*self.shard,
            "occurrence": self.occurrence,
            "series": self.series,
            "kept": self.kept,
        })
        .to_string()
    }

    pub fn from_json(text: &str) -> Option<StatusChange> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        Some(StatusChange {
            id: v["id"].as_str()?.parse().ok()?,
            status: Status::from_code(v["status"].as_i64()? as i16)?,
            attempts: v["attempts"].as_i64().map(|a| a as i32),
            at: v["at"].as_i64()?,
            due: v["due"].as_i64(),
            shard: v["shard"].as_str()?.into(),
            occurrence: serde_json::from_value(v["occurrence"].clone()).ok(),
            series: serde_json::from_value(v["series"].clone()).ok(),
            kept: v["kept"].as_bool().unwrap_or(false),
        })
    }
}

pub(super) fn new_flow<'a>(id: MessageId, node: &'a NodeInfo, c: &'a StatusChange) -> NewFlow<'a> {
    NewFlow {
        id: id.0,
        message_id: c.id.0,
        status: c.status.code(),
        attempts: c.attempts.unwrap_or(0),
        flow_time: c.at,
        shard: &c.shard,
        node_id: &node.node_id,
        host: &node.host,
        due_time: c.due,
    }
}

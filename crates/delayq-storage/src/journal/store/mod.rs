//! The journal's queries, written once for every backend. Each function is
//! synchronous and runs on the JournalActor's threads.
//!
//! [`write`]: inserting messages and applying status changes; [`read`]:
//! messages, their histories and pages of them; [`dead`]: dead letters
//! brought back or deleted; [`health`]: whether the database answers and
//! takes writes. This module holds what they share: the status change, the
//! node that wrote it, and the flow row made from it.

mod batch;
pub mod dead;
pub mod health;
mod moves;
mod packed;
pub mod read;
pub mod retention;
pub mod write;

pub use dead::{dead_page, delete_dead, requeue_dead, DeleteDeadOutcome, RequeueOutcome};
pub use health::{ping, probe_write};
pub use moves::{move_messages, JournalMove};
pub use read::{
    count_live, count_waiting_beyond, find, find_with_history, full_pages, live_by_biz_key,
    live_by_biz_key_prefix, live_page, live_states, rows_of, states_of, topic_counts, topic_known,
    topic_page, waiting_page, RowState,
};
pub use write::{apply_changes, insert_messages, unlist_waiting};

use std::sync::Arc;

use diesel::prelude::*;

use crate::journal::models::{MessageRow, NewFlow};
use crate::journal::schema::message;
use crate::message::{MessageId, Status};
use crate::redis::schedule::AfterFailure;
use crate::repeat::Occurrence;

/// Rows per INSERT statement: well under SQLite's bound-variable limit.
const INSERT_CHUNK: usize = 500;
/// Bytes of message bodies per INSERT statement (a statement takes at least
/// one message, whatever its size): 500 messages of 1 MiB would make one
/// value of half a gigabyte on SQLite and pass MySQL's `max_allowed_packet`.
const INSERT_BYTES: usize = 8 << 20;

/// Consecutive runs of `items`, each at most [`INSERT_CHUNK`] long and,
/// past its first item, at most [`INSERT_BYTES`] by `size`.
fn insert_chunks<T>(items: &[T], size: impl Fn(&T) -> usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        let n = size(item);
        if i > start && (i - start == INSERT_CHUNK || bytes + n > INSERT_BYTES) {
            out.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += n;
    }
    if start < items.len() {
        out.push(start..items.len());
    }
    out
}

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

#[derive(Debug, Clone)]
pub enum InsertOutcome {
    /// Durable, status WaitPut.
    Inserted,
    /// `(topic, bizKey)` belongs to this live message already.
    Duplicate(Box<MessageRow>),
}

fn new_flow<'a>(id: MessageId, node: &'a NodeInfo, c: &'a StatusChange) -> NewFlow<'a> {
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

fn is_unique_violation(e: &diesel::result::Error) -> bool {
    matches!(
        e,
        diesel::result::Error::DatabaseError(diesel::result::DatabaseErrorKind::UniqueViolation, _)
    )
}

/// The live message holding `(topic, bizKey)`, as last committed. On MySQL
/// a plain read inside a transaction sees the snapshot taken at its first
/// read, from before the other writer committed; a locking read sees the
/// commit (PostgreSQL's reads see each statement's, and a locking read
/// waits for a writer still holding the row). SQLite has one writer at a
/// time, so a plain read sees it.
trait LiveHolder {
    fn live_holder(&mut self, topic: &str, key: &str) -> QueryResult<Option<MessageRow>>;
}

/// MySQL and PostgreSQL: a locking read.
macro_rules! locking_live_holder {
    ($($conn:ty),*) => {$(
        impl LiveHolder for $conn {
            fn live_holder(&mut self, topic: &str, key: &str) -> QueryResult<Option<MessageRow>> {
                message::table
                    .filter(message::topic.eq(topic))
                    .filter(message::live_biz_key.eq(key))
                    .select(MessageRow::as_select())
                    .for_update()
                    .first(self)
                    .optional()
            }
        }
    )*};
}

locking_live_holder!(diesel::mysql::MysqlConnection, diesel::pg::PgConnection);

impl LiveHolder for diesel::sqlite::SqliteConnection {
    fn live_holder(&mut self, topic: &str, key: &str) -> QueryResult<Option<MessageRow>> {
        message::table
            .filter(message::topic.eq(topic))
            .filter(message::live_biz_key.eq(key))
            .select(MessageRow::as_select())
            .first(self)
            .optional()
    }
}

fn live_holder<C: LiveHolder>(
    c: &mut C,
    topic: &str,
    key: &str,
) -> QueryResult<Option<MessageRow>> {
    c.live_holder(topic, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_chunks_bound_rows_and_bytes() {
        let sizes = |v: &[usize]| insert_chunks(v, |n| *n);
        assert_eq!(sizes(&[]), Vec::<std::ops::Range<usize>>::new());
        assert_eq!(sizes(&[1; 1201]), vec![0..500, 500..1000, 1000..1201]);
        let big = INSERT_BYTES;
        assert_eq!(sizes(&[big + 1, 1]), vec![0..1, 1..2]);
        assert_eq!(sizes(&[big / 2, big / 2, 1]), vec![0..2, 2..3]);
        assert_eq!(sizes(&[1, big, 1]), vec![0..1, 1..2, 2..3]);
    }
}

//! What inserting rows shares: statements of bounded size, and the live
//! holder of a bizKey a row collides with.

use diesel::prelude::*;

use crate::journal::models::MessageRow;
use crate::journal::schema::message;

/// Rows per INSERT statement: well under SQLite's bound-variable limit.
pub(super) const INSERT_CHUNK: usize = 500;
/// Bytes of message bodies per INSERT statement (a statement takes at least
/// one message, whatever its size): 500 messages of 1 MiB would make one
/// value of half a gigabyte on SQLite and pass MySQL's `max_allowed_packet`.
const INSERT_BYTES: usize = 8 << 20;

/// Consecutive runs of `items`, each at most [`INSERT_CHUNK`] long and,
/// past its first item, at most [`INSERT_BYTES`] by `size`.
pub(super) fn insert_chunks<T>(
    items: &[T],
    size: impl Fn(&T) -> usize,
) -> Vec<std::ops::Range<usize>> {
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

#[derive(Debug, Clone)]
pub enum InsertOutcome {
    /// Durable, status WaitPut.
    Inserted,
    /// `(topic, bizKey)` belongs to this live message already.
    Duplicate(Box<MessageRow>),
    /// Its outbox row was pushed before, as this message: the insert that
    /// did it committed (see [`OutboxRows`]). Nothing was written.
    OutboxDone(i64),
}

/// The rows of an application's outbox table that the messages of one
/// insert come from, one row per message, in order. The insert records
/// each row in `outbox_done` in its own transaction, and a row recorded
/// there already is not inserted again: a row is pushed once, whenever the
/// node that pushed it stopped.
#[derive(Debug, Clone)]
pub struct OutboxRows {
    /// The outbox's id (given by `delayq outbox install`).
    pub source: String,
    /// Its rows' ids.
    pub rows: Vec<i64>,
    /// Their `created_at`: a record of the same id and another time is
    /// of an earlier row that had the id (the table's sequence restarted).
    pub created: Vec<i64>,
    /// These rows' records point at a message that ended before the push
    /// could be answered with it (a bizKey's holder acked meanwhile): they
    /// are replaced, and the rows pushed as new messages.
    pub again: bool,
}

impl OutboxRows {
    /// The subset at `at` (indexes into `rows`), to push again.
    pub fn again(&self, at: &[usize]) -> OutboxRows {
        OutboxRows {
            source: self.source.clone(),
            rows: at.iter().map(|&i| self.rows[i]).collect(),
            created: at.iter().map(|&i| self.created[i]).collect(),
            again: true,
        }
    }
}

pub(super) fn is_unique_violation(e: &diesel::result::Error) -> bool {
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
pub(super) trait LiveHolder {
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

pub(super) fn live_holder<C: LiveHolder>(
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

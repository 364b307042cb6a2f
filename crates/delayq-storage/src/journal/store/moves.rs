//! Rescheduling in the journal: a live message's due time and priority
//! change in its row (and in the waiting list when it waits there: a row
//! still WaitPut is listed at its new time if it was not), so a restore or
//! the horizon loader schedules it at its new time. Its status is left alone (the
//! hand-outs and acks that change it are Redis's); the move's flow row
//! comes with the status change Redis's answer makes (see
//! [`crate::queue::reschedule`]).

use diesel::prelude::*;

use crate::error::JournalError;
use crate::journal::connection::JournalConn;
use crate::journal::schema::{message, message_waiting};
use crate::message::{MessageId, Status};
use crate::with_conn;

/// What the journal held of a message asked to move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalMove {
    /// Live, in this status: moved; now due then, with that priority.
    Moved {
        status: Status,
        due: i64,
        priority: i32,
        /// A recurring message's occurrence, as the row holds it.
        occurrence: Option<i32>,
    },
    /// Live, in this status, asked to move only later and due then already
    /// (or later): left as it was.
    Kept {
        status: Status,
        due: i64,
        priority: i32,
    },
    /// Ended (Consumed, Deleted, Dead): left alone.
    Ended(Status),
    NotFound,
}

/// A live message's row as a replacement found it: what [`unreplace`]
/// puts back when Redis had handed the message out meanwhile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowBefore {
    pub body: String,
    pub due: i64,
    pub priority: i32,
}

/// What a push's `onDuplicate` changes in the live message holding its
/// key: the body (`replace`), the due time (only later for `extend`), the
/// priority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replacement {
    pub body: Option<String>,
    pub due: i64,
    pub priority: Option<i32>,
    pub only_later: bool,
}

/// A row about to move: status, due time, priority, occurrence.
type MoveRow = (i16, i64, i32, Option<i32>);

/// The row of a message about to move, read so that it stays as read until
/// the update: `Moved` means the row was live when it moved. MySQL and
/// PostgreSQL read it locking: an end another writer committed is seen
/// (MySQL's plain read would see the transaction's first snapshot), and
/// one still being written is waited for (PostgreSQL's plain read would
/// not wait, and the update after it would then find the row ended and
/// move nothing). SQLite has one writer at a time, so a plain read holds.
trait MoveRead {
    fn move_read(&mut self, id: i64) -> QueryResult<Option<MoveRow>>;
}

macro_rules! locking_move_read {
    ($($conn:ty),*) => {$(
        impl MoveRead for $conn {
            fn move_read(&mut self, id: i64) -> QueryResult<Option<MoveRow>> {
                message::table
                    .filter(message::id.eq(id))
                    .select(MOVE_ROW)
                    .for_update()
                    .first(self)
                    .optional()
            }
        }
    )*};
}

locking_move_read!(diesel::mysql::MysqlConnection, diesel::pg::PgConnection);

impl MoveRead for diesel::sqlite::SqliteConnection {
    fn move_read(&mut self, id: i64) -> QueryResult<Option<MoveRow>> {
        message::table
            .filter(message::id.eq(id))
            .select(MOVE_ROW)
            .first(self)
            .optional()
    }
}

const MOVE_ROW: (
    message::status,
    message::due_time,
    message::priority,
    message::occurrence,
) = (
    message::status,
    message::due_time,
    message::priority,
    message::occurrence,
);

/// One row's move inside a transaction (`$c`): read locking, then its due
/// time, priority and body changed when live (`$only_later`: the due time
/// only when later than the row's), and its waiting-list entry moved.
/// Gives the move and, when it changed the row, the row as it was.
macro_rules! move_row {
    ($c:expr, $id:expr, $due:expr, $priority:expr, $body:expr, $only_later:expr, $want_before:expr) => {{
        let (c, id, due, priority, body, only_later, want_before): (
            _,
            MessageId,
            Option<i64>,
            Option<i32>,
            Option<&str>,
            bool,
            bool,
        ) = (
            &mut *$c,
            $id,
            $due,
            $priority,
            $body,
            $only_later,
            $want_before,
        );
        let row = c.move_read(id.0)?;
        // The row's body as it was, when the caller changes it or asks.
        let live = row.is_some_and(|r| !Status::from_code(r.0).is_some_and(Status::is_terminal));
        let old_body: Option<String> = if live && (body.is_some() || want_before) {
            Some(
                message::table
                    .filter(message::id.eq(id.0))
                    .select(message::body)
                    .first(c)?,
            )
        } else {
            None
        };
        match row {
            None => (JournalMove::NotFound, None),
            Some((code, _, _, _)) if !live => (
                JournalMove::Ended(Status::from_code(code).unwrap_or(Status::WaitPut)),
                None,
            ),
            Some((code, old_due, old_priority, _))
                if only_later
                    && due.is_some_and(|d| d <= old_due)
                    && priority.is_none()
                    && body.is_none() =>
            {
                let before = old_body.map(|body| RowBefore {
                    body,
                    due: old_due,
                    priority: old_priority,
                });
                (
                    JournalMove::Kept {
                        status: Status::from_code(code).unwrap_or(Status::WaitPut),
                        due: old_due,
                        priority: old_priority,
                    },
                    before,
                )
            }
            Some((code, old_due, old_priority, occurrence)) => {
                let status = Status::from_code(code).unwrap_or(Status::WaitPut);
                let due = match due {
                    Some(d) if only_later => Some(d.max(old_due)),
                    d => d,
                };
                let live = message::table
                    .filter(message::id.eq(id.0))
                    .filter(message::status.lt(Status::FIRST_TERMINAL_CODE));
                let before = old_body;
                if let Some(b) = body {
                    diesel::update(live).set(message::body.eq(b)).execute(c)?;
                }
                match (due, priority) {
                    (Some(d), Some(p)) => diesel::update(live)
                        .set((message::due_time.eq(d), message::priority.eq(p)))
                        .execute(c)?,
                    (Some(d), None) => diesel::update(live)
                        .set(message::due_time.eq(d))
                        .execute(c)?,
                    (None, Some(p)) => diesel::update(live)
                        .set(message::priority.eq(p))
                        .execute(c)?,
                    (None, None) => 0,
                };
                if let Some(d) = due {
                    let listed =
                        diesel::update(message_waiting::table.filter(message_waiting::id.eq(id.0)))
                            .set(message_waiting::due_time.eq(d))
                            .execute(c)?;
                    // Waiting and not listed (a push due near whose schedule
                    // never reached Redis): listed at its new time, so the
                    // horizon loader schedules it as it comes near (at once
                    // when it is near already); the move alone leaves its
                    // score in Redis for whatever schedules it next, and
                    // nothing else would. One Redis holds already is left as
                    // it is by the loader's schedule.
                    if listed == 0 && status == Status::WaitPut {
                        diesel::insert_into(message_waiting::table)
                            .values((
                                message_waiting::due_time.eq(d),
                                message_waiting::id.eq(id.0),
                            ))
                            .execute(c)?;
                    }
                }
                let before = before.map(|body| RowBefore {
                    body,
                    due: old_due,
                    priority: old_priority,
                });
                (
                    JournalMove::Moved {
                        status,
                        due: due.unwrap_or(old_due),
                        priority: priority.unwrap_or(old_priority),
                        occurrence,
                    },
                    before,
                )
            }
        }
    }};
}

/// Moves each of `ids` that is live to `due` and/or `priority` (`None`
/// keeps it), in one transaction. A series moved as a whole takes its new
/// time by the series with the status change that Redis's answer makes
/// (`StatusChange::series`), not here: one handed out meanwhile keeps its
/// series.
pub fn move_messages(
    conn: &mut JournalConn,
    ids: &[MessageId],
    due: Option<i64>,
    priority: Option<i32>,
) -> Result<Vec<JournalMove>, JournalError> {
    with_conn!(conn, c => c.transaction(|c| {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.push(move_row!(c, *id, due, priority, None::<&str>, false, false).0);
        }
        Ok::<_, diesel::result::Error>(out)
    }))
    .map_err(JournalError::from)
}

/// Replaces what `r` names in the live message `id` (a push's
/// `onDuplicate`), in one transaction: its move, and the row as it was
/// (for [`unreplace`]; also when nothing changed).
pub fn replace_message(
    conn: &mut JournalConn,
    id: MessageId,
    r: &Replacement,
) -> Result<(JournalMove, Option<RowBefore>), JournalError> {
    with_conn!(conn, c => c.transaction(|c| {
        Ok::<_, diesel::result::Error>(move_row!(
            c,
            id,
            Some(r.due),
            r.priority,
            r.body.as_deref(),
            r.only_later,
            true
        ))
    }))
    .map_err(JournalError::from)
}

/// Puts back a replaced row (`before`) when Redis had handed the message
/// out meanwhile, if the row is still live and still as the replacement
/// left it (`wrote`: its body, due time, priority). Whether it was put
/// back.
pub fn unreplace(
    conn: &mut JournalConn,
    id: MessageId,
    wrote: &RowBefore,
    before: &RowBefore,
) -> Result<bool, JournalError> {
    with_conn!(conn, c => c.transaction(|c| {
        let n = diesel::update(
            message::table
                .filter(message::id.eq(id.0))
                .filter(message::status.lt(Status::FIRST_TERMINAL_CODE))
                .filter(message::body.eq(&wrote.body))
                .filter(message::due_time.eq(wrote.due))
                .filter(message::priority.eq(wrote.priority)),
        )
        .set((
            message::body.eq(&before.body),
            message::due_time.eq(before.due),
            message::priority.eq(before.priority),
        ))
        .execute(c)?;
        if n > 0 {
            diesel::update(message_waiting::table.filter(message_waiting::id.eq(id.0)))
                .set(message_waiting::due_time.eq(before.due))
                .execute(c)?;
        }
        Ok::<_, diesel::result::Error>(n > 0)
    }))
    .map_err(JournalError::from)
}

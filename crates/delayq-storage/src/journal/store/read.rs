//! Reading the journal: one message with its history, keyset pages of live
//! messages (restore, reconciler), a topic's messages, and bizKey lookups.

use diesel::prelude::*;

use crate::error::JournalError;
use crate::journal::connection::JournalConn;
use crate::journal::models::{FlowRow, MessageRow};
use crate::journal::schema::{message, message_flow, message_waiting};
use crate::message::{MessageId, Status};
use crate::with_conn;

use super::insert::INSERT_CHUNK;

pub fn find(conn: &mut JournalConn, id: MessageId) -> Result<Option<MessageRow>, JournalError> {
    Ok(with_conn!(conn, c => message::table
        .find(id.0)
        .select(MessageRow::as_select())
        .first(c)
        .optional())?)
}

/// A message and its history as of one moment: both read in one
/// transaction (one snapshot), so a batch committed between the two reads
/// cannot show a history ahead of the message's status.
pub fn find_with_history(
    conn: &mut JournalConn,
    id: MessageId,
) -> Result<Option<(MessageRow, Vec<FlowRow>)>, JournalError> {
    Ok(with_conn!(conn, c => c.transaction(|c| {
        let Some(row) = message::table
            .find(id.0)
            .select(MessageRow::as_select())
            .first(c)
            .optional()?
        else {
            return Ok(None);
        };
        let history = message_flow::table
            .filter(message_flow::message_id.eq(id.0))
            .order((
                message_flow::flow_time.asc(),
                message_flow::attempts.asc(),
                // A delivery's hand-out before its end in one millisecond.
                message_flow::status.ne(Status::Consuming.code()).asc(),
                message_flow::status.asc(),
                message_flow::id.asc(),
            ))
            .select(FlowRow::as_select())
            .load(c)?;
        Ok::<_, diesel::result::Error>(Some((row, history)))
    }))?)
}

/// Live messages (not Consumed, Deleted or Dead) with ids above `after`, in
/// id order: one keyset page of a restore. With `far_from`, messages still
/// waiting in the journal alone (WaitPut) due after it are left out: they
/// are scheduled as they come within the Redis horizon.
pub fn live_page(
    conn: &mut JournalConn,
    after: i64,
    limit: i64,
    far_from: Option<i64>,
) -> Result<Vec<MessageRow>, JournalError> {
    let far_from = far_from.unwrap_or(i64::MAX);
    Ok(with_conn!(conn, c => message::table
        .filter(message::id.gt(after))
        .filter(message::status.lt(Status::FIRST_TERMINAL_CODE))
        .filter(
            message::status
                .ne(Status::WaitPut.code())
                .or(message::due_time.le(far_from)),
        )
        .order(message::id.asc())
        .limit(limit)
        .select(MessageRow::as_select())
        .load(c))?)
}

/// How many live messages have ids above `after`: what a restore or a
/// reconciliation from there will read (an index-only count, over
/// `(status, id)`).
pub fn count_live(conn: &mut JournalConn, after: i64) -> Result<u64, JournalError> {
    let n: i64 = with_conn!(conn, c => message::table
        .filter(message::id.gt(after))
        .filter(message::status.lt(Status::FIRST_TERMINAL_CODE))
        .count()
        .get_result(c))?;
    Ok(n as u64)
}

/// How many messages are listed as waiting due after `far_from` (a range
/// of the list's key; one cancelled while waiting stays listed, and
/// counted, until its due time comes).
pub fn count_waiting_beyond(conn: &mut JournalConn, far_from: i64) -> Result<u64, JournalError> {
    let n: i64 = with_conn!(conn, c => message_waiting::table
        .filter(message_waiting::due_time.gt(far_from))
        .count()
        .get_result(c))?;
    Ok(n as u64)
}

/// The messages listed as waiting, due by `due_until`, after
/// `(due_time, id)` in that order: one page of the horizon loader, as
/// `(due_time, id)`.
pub fn waiting_page(
    conn: &mut JournalConn,
    after: (i64, i64),
    due_until: i64,
    limit: i64,
) -> Result<Vec<(i64, i64)>, JournalError> {
    let (due, id) = after;
    Ok(with_conn!(conn, c => message_waiting::table
        .filter(message_waiting::due_time.le(due_until))
        .filter(
            message_waiting::due_time
                .gt(due)
                .or(message_waiting::due_time.eq(due).and(message_waiting::id.gt(id))),
        )
        .order((message_waiting::due_time.asc(), message_waiting::id.asc()))
        .limit(limit)
        .select((message_waiting::due_time, message_waiting::id))
        .load(c))?)
}

/// One page of the waiting list joined with the messages, for the
/// forecast: `(due_time, id, status, topic)` of the listed messages due
/// before `until`, after `(due_time, id)` in that order. Ended ones are
/// listed until their due time comes near (see `waiting_page`): the caller
/// skips them, and counts them as read.
pub fn waiting_scan_page(
    conn: &mut JournalConn,
    after: (i64, i64),
    until: i64,
    limit: i64,
) -> Result<Vec<(i64, i64, i16, String)>, JournalError> {
    let (due, id) = after;
    Ok(with_conn!(conn, c => message_waiting::table
        .inner_join(message::table.on(message::id.eq(message_waiting::id)))
        // The first condition alone bounds the index range.
        .filter(message_waiting::due_time.ge(due))
        .filter(message_waiting::due_time.lt(until))
        .filter(
            message_waiting::due_time
                .gt(due)
                .or(message_waiting::due_time.eq(due).and(message_waiting::id.gt(id))),
        )
        .order((message_waiting::due_time.asc(), message_waiting::id.asc()))
        .limit(limit)
        .select((message_waiting::due_time, message_waiting::id, message::status, message::topic))
        .load(c))?)
}

/// What the reconciler reads of a message row: enough to tell where Redis
/// should hold it, without its body.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = message)]
pub struct RowState {
    pub id: i64,
    pub topic: String,
    pub status: i16,
    pub updated_time: i64,
    pub due_time: i64,
    pub ttl: i64,
}

impl RowState {
    pub fn status(&self) -> Status {
        Status::from_code(self.status).unwrap_or(Status::WaitPut)
    }
}

/// Live messages with ids above `after`, in id order, without their bodies:
/// one keyset page of a reconciliation; with the id to go on after (None
/// at the end).
pub fn live_states(
    conn: &mut JournalConn,
    after: i64,
    limit: i64,
    far_from: Option<i64>,
) -> Result<(Vec<RowState>, Option<i64>), JournalError> {
    let far_from = far_from.unwrap_or(i64::MAX);
    let rows: Vec<RowState> = with_conn!(conn, c => message::table
        .filter(message::id.gt(after))
        .filter(message::status.lt(Status::FIRST_TERMINAL_CODE))
        .filter(
            message::status
                .ne(Status::WaitPut.code())
                .or(message::due_time.le(far_from)),
        )
        .order(message::id.asc())
        .limit(limit)
        .select(RowState::as_select())
        .load(c))?;
    let next = (rows.len() as i64 == limit).then(|| rows.last().map_or(after, |r| r.id));
    Ok((rows, next))
}

/// The rows of these ids the journal holds, whatever their status.
pub fn states_of(conn: &mut JournalConn, ids: &[i64]) -> Result<Vec<RowState>, JournalError> {
    let mut out = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(INSERT_CHUNK) {
        let rows: Vec<RowState> = with_conn!(conn, c => message::table
            .filter(message::id.eq_any(chunk))
            .select(RowState::as_select())
            .load(c))?;
        out.extend(rows);
    }
    Ok(out)
}

/// The whole rows of these ids the journal holds.
pub fn rows_of(conn: &mut JournalConn, ids: &[i64]) -> Result<Vec<MessageRow>, JournalError> {
    let mut out = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(INSERT_CHUNK) {
        let rows: Vec<MessageRow> = with_conn!(conn, c => message::table
            .filter(message::id.eq_any(chunk))
            .select(MessageRow::as_select())
            .load(c))?;
        out.extend(rows);
    }
    Ok(out)
}

/// Messages of a topic in one status with ids above `after`, in id order
/// (the `(status, topic, id)` index): one page of the dashboard's topic view.
pub fn topic_page(
    conn: &mut JournalConn,
    topic: &str,
    status: Status,
    after: i64,
    limit: i64,
) -> Result<Vec<MessageRow>, JournalError> {
    Ok(with_conn!(conn, c => message::table
        .filter(message::status.eq(status.code()))
        .filter(message::topic.eq(topic))
        .filter(message::id.gt(after))
        .order(message::id.asc())
        .limit(limit)
        .select(MessageRow::as_select())
        .load(c))?)
}

/// How many messages each topic has in each status (finished ones until
/// retention removes them): `(topic, status code, count)`, topics in name
/// order, at most `limit` rows. An index-only count over `(status, topic,
/// id)`: it reads one index entry per message kept.
pub fn topic_counts(
    conn: &mut JournalConn,
    limit: i64,
) -> Result<Vec<(String, i16, i64)>, JournalError> {
    Ok(with_conn!(conn, c => message::table
        .group_by((message::topic, message::status))
        .select((message::topic, message::status, diesel::dsl::count_star()))
        .order((message::topic.asc(), message::status.asc()))
        .limit(limit)
        .load::<(String, i16, i64)>(c))?)
}

/// Whether the journal holds any message of `topic` (an index lookup).
pub fn topic_known(conn: &mut JournalConn, topic: &str) -> Result<bool, JournalError> {
    Ok(with_conn!(conn, c => diesel::select(diesel::dsl::exists(
        message::table.filter(message::topic.eq(topic))
    ))
    .get_result::<bool>(c))?)
}

/// One page of the live messages of a topic whose bizKey starts with
/// `prefix` (in `status` when given), ids above `after`, in id order; with
/// the id to continue after when there may be more.
pub fn live_by_biz_key_prefix(
    conn: &mut JournalConn,
    topic: &str,
    prefix: &str,
    status: Option<Status>,
    after: i64,
    limit: i64,
) -> Result<(Vec<MessageRow>, Option<i64>), JournalError> {
    let mut pattern = String::with_capacity(prefix.len() + 1);
    for ch in prefix.chars() {
        if matches!(ch, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(ch);
    }
    pattern.push('%');
    let statuses: Vec<i16> = match status {
        Some(s) => vec![s.code()],
        None => (0..Status::FIRST_TERMINAL_CODE).collect(),
    };
    // LIKE ignores case on MySQL's default collations and on SQLite for
    // ASCII: rows whose key only matches with another case are dropped,
    // and reading goes on until the page is full or the topic ends, so
    // pages are full until the last and `next` is none on the last.
    let want = limit as usize + 1;
    let (mut rows, mut from) = (Vec::with_capacity(want), after);
    loop {
        let batch: Vec<MessageRow> = with_conn!(conn, c => message::table
            .filter(message::topic.eq(topic))
            .filter(message::live_biz_key.like(&pattern).escape('\\'))
            .filter(message::status.eq_any(&statuses))
            .filter(message::id.gt(from))
            .order(message::id.asc())
            .limit(want as i64)
            .select(MessageRow::as_select())
            .load(c))?;
        let ended = batch.len() < want;
        from = batch.last().map_or(from, |r| r.id);
        rows.extend(batch.into_iter().filter(|r| {
            r.live_biz_key
                .as_deref()
                .is_some_and(|k| k.starts_with(prefix))
        }));
        if ended || rows.len() >= want {
            break;
        }
    }
    Ok(full_pages(rows, limit))
}

/// A page of at most `limit` rows of `rows` (read with one more than
/// `limit` when there are more), and the id to continue after: none when
/// this is the last page.
pub fn full_pages(mut rows: Vec<MessageRow>, limit: i64) -> (Vec<MessageRow>, Option<i64>) {
    if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        let next = rows.last().map(|r| r.id);
        (rows, next)
    } else {
        (rows, None)
    }
}

/// The live message holding `(topic, bizKey)`, if any.
pub fn live_by_biz_key(
    conn: &mut JournalConn,
    topic: &str,
    key: &str,
) -> Result<Option<MessageRow>, JournalError> {
    Ok(with_conn!(conn, c => message::table
        .filter(message::topic.eq(topic))
        .filter(message::live_biz_key.eq(key))
        .select(MessageRow::as_select())
        .first(c)
        .optional())?)
}

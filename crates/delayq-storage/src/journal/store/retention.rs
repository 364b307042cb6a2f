//! Retention: messages finished long enough ago leave the journal, with
//! their history (see the server's `retention`).
//!
//! Finished messages are found through the flow rows that ended them: flow
//! ids are Snowflakes minted when the row is written, so walking
//! `message_flow` by its primary key walks time, and a cursor that only
//! moves forward reads each flow row once. Nothing is added to the path of
//! a push or a status change: no index, no column.

use std::collections::HashSet;

use diesel::prelude::*;

use crate::error::JournalError;
use crate::journal::connection::JournalConn;
use crate::journal::schema::{message, message_flow, outbox_done};
use crate::with_conn;

/// Messages that one of `statuses` ended, from the flow rows with ids in
/// `(after, below)`, in flow id order, `limit` flow rows at most: their ids,
/// and where the next page starts (None: everything below `below` is read).
pub fn ended_page(
    conn: &mut JournalConn,
    after: i64,
    below: i64,
    statuses: &[i16],
    limit: i64,
) -> Result<(Vec<i64>, Option<i64>), JournalError> {
    let rows: Vec<(i64, i64)> = with_conn!(conn, c => message_flow::table
        .filter(message_flow::id.gt(after))
        .filter(message_flow::id.lt(below))
        .filter(message_flow::status.eq_any(statuses))
        .order(message_flow::id.asc())
        .limit(limit)
        .select((message_flow::id, message_flow::message_id))
        .load(c))?;
    let next = if (rows.len() as i64) < limit {
        None
    } else {
        rows.last().map(|(id, _)| *id)
    };
    Ok((rows.into_iter().map(|(_, m)| m).collect(), next))
}

/// Deletes, with their flow rows, the messages among `ids` whose status is
/// still one of `statuses` and whose last change is older than `before`
/// (epoch ms): a message brought back meanwhile (a dead letter requeued)
/// is kept. Returns how many messages were deleted.
///
/// The messages go first; the flow rows of those no longer there follow,
/// in the same transaction. Every statement takes a list of ids (a
/// subquery in a DELETE makes MariaDB read the whole flow table), and no
/// lock is needed: a message deleted cannot come back, one kept keeps its
/// history.
pub fn purge(
    conn: &mut JournalConn,
    ids: &[i64],
    statuses: &[i16],
    before: i64,
) -> Result<u64, JournalError> {
    if ids.is_empty() {
        return Ok(0);
    }
    let n = with_conn!(conn, c => c.transaction(|c| {
        let deleted = diesel::delete(
            message::table
                .filter(message::id.eq_any(ids))
                .filter(message::status.eq_any(statuses))
                .filter(message::updated_time.lt(before)),
        )
        .execute(c)?;
        if deleted == 0 {
            return Ok(0);
        }
        let kept: HashSet<i64> = message::table
            .filter(message::id.eq_any(ids))
            .select(message::id)
            .load::<i64>(c)?
            .into_iter()
            .collect();
        let gone: Vec<i64> = ids.iter().copied().filter(|id| !kept.contains(id)).collect();
        diesel::delete(message_flow::table.filter(message_flow::message_id.eq_any(&gone)))
            .execute(c)?;
        Ok::<_, diesel::result::Error>(deleted)
    }))?;
    Ok(n as u64)
}

/// Deletes the records of outbox rows pushed before `before` (epoch ms): a
/// record matters only while its row may still be in the outbox (its node
/// stopped between the push and the delete, seconds). Returns how many.
pub fn purge_outbox_done(conn: &mut JournalConn, before: i64) -> Result<u64, JournalError> {
    let n = with_conn!(conn, c => diesel::delete(
        outbox_done::table.filter(outbox_done::done_time.lt(before)),
    )
    .execute(c))?;
    Ok(n as u64)
}

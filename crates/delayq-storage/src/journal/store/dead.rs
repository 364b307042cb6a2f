//! Dead letters: a topic's dead messages, one brought back to life, or its
//! life ended as Deleted.

use std::collections::HashMap;
use std::sync::Arc;

use diesel::prelude::*;

use crate::error::JournalError;
use crate::journal::connection::JournalConn;
use crate::journal::models::{FlowRow, MessageRow};
use crate::journal::schema::{message, message_flow};
use crate::message::{IdGenerator, MessageId, Status};
use crate::with_conn;

use super::change::{new_flow, NodeInfo, StatusChange};
use super::insert::{is_unique_violation, live_holder};

/// Dead messages of a topic with ids above `after`, in id order, each with
/// its history.
pub fn dead_page(
    conn: &mut JournalConn,
    topic: &str,
    after: i64,
    limit: i64,
) -> Result<Vec<(MessageRow, Vec<FlowRow>)>, JournalError> {
    let rows: Vec<MessageRow> = with_conn!(conn, c => message::table
        .filter(message::status.eq(Status::Dead.code()))
        .filter(message::topic.eq(topic))
        .filter(message::id.gt(after))
        .order(message::id.asc())
        .limit(limit)
        .select(MessageRow::as_select())
        .load(c))?;
    let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
    let flows: Vec<FlowRow> = with_conn!(conn, c => message_flow::table
        .filter(message_flow::message_id.eq_any(&ids))
        .order((
            message_flow::message_id.asc(),
            message_flow::flow_time.asc(),
            message_flow::attempts.asc(),
            message_flow::status.ne(Status::Consuming.code()).asc(),
            message_flow::status.asc(),
            message_flow::id.asc(),
        ))
        .select(FlowRow::as_select())
        .load(c))?;
    let mut by_id: HashMap<i64, Vec<FlowRow>> = HashMap::new();
    for f in flows {
        by_id.entry(f.message_id).or_default().push(f);
    }
    Ok(rows
        .into_iter()
        .map(|r| {
            let h = by_id.remove(&r.id).unwrap_or_default();
            (r, h)
        })
        .collect())
}

/// The row of message `id` in transaction `c` when it is Dead; else
/// `Err(None)` when there is none, `Err(Some(status))` when it is not dead.
/// A macro: the body runs on each backend's connection (`with_conn!`).
macro_rules! dead_row {
    ($c:expr, $id:expr) => {
        match message::table
            .find($id.0)
            .select(MessageRow::as_select())
            .first($c)
            .optional()?
        {
            None => Err(None),
            Some(row) if row.status() != Status::Dead => Err(Some(row.status())),
            Some(row) => Ok(row),
        }
    };
}

/// What bringing a dead message back did.
#[derive(Debug, Clone)]
pub enum RequeueOutcome {
    /// Delaying again, due at once, attempts counted from 0: the row as it
    /// is now.
    Requeued(Box<MessageRow>),
    /// Not dead: its status.
    NotDead(Status),
    NotFound,
    /// Another live message holds its `(topic, bizKey)` now: that one's id.
    BizKeyTaken(i64),
}

/// Turns a dead message back into a live one, due `now` with no attempts
/// counted, and writes its flow row, in one transaction.
pub fn requeue_dead(
    conn: &mut JournalConn,
    ids: &IdGenerator,
    node: &NodeInfo,
    shard: Arc<str>,
    id: MessageId,
    now: i64,
) -> Result<RequeueOutcome, JournalError> {
    let flow_id = ids.next_flow_id()?;
    with_conn!(conn, c => c.transaction(|c| {
        let row = match dead_row!(c, id) {
            Ok(row) => row,
            Err(None) => return Ok(RequeueOutcome::NotFound),
            Err(Some(status)) => return Ok(RequeueOutcome::NotDead(status)),
        };
        let update = diesel::update(
            message::table
                .filter(message::id.eq(id.0))
                .filter(message::status.eq(Status::Dead.code())),
        )
        .set((
            message::status.eq(Status::Delaying.code()),
            message::attempts.eq(0),
            message::due_time.eq(now),
            message::updated_time.eq(now),
            message::live_biz_key.eq(row.biz_key.as_deref()),
        ));
        match c.transaction(|c| update.execute(c)) {
            Ok(0) => return Ok(RequeueOutcome::NotDead(Status::WaitPut)),
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => {
                let key = row.biz_key.as_deref().unwrap_or_default();
                return match live_holder(c, &row.topic, key)? {
                    Some(holder) => Ok(RequeueOutcome::BizKeyTaken(holder.id)),
                    None => Err(e),
                };
            }
            Err(e) => return Err(e),
        }
        let change = StatusChange::requeued(id, now, shard);
        diesel::insert_into(message_flow::table)
            .values(new_flow(flow_id, node, &change))
            .execute(c)?;
        let mut row = row;
        row.status = Status::Delaying.code();
        row.attempts = 0;
        row.due_time = now;
        row.updated_time = now;
        row.live_biz_key = row.biz_key.clone();
        Ok::<_, diesel::result::Error>(RequeueOutcome::Requeued(Box::new(row)))
    }))
    .map_err(JournalError::from)
}

/// What deleting a dead message did.
#[derive(Debug, Clone)]
pub enum DeleteDeadOutcome {
    /// Deleted now (its flow row written).
    Deleted,
    /// Not dead: its status.
    NotDead(Status),
    NotFound,
}

/// Ends a dead message's life as Deleted, and writes its flow row, in one
/// transaction; only a message still Dead is changed. Redis holds nothing
/// of a dead message but a tombstone, which this leaves to expire.
pub fn delete_dead(
    conn: &mut JournalConn,
    ids: &IdGenerator,
    node: &NodeInfo,
    shard: Arc<str>,
    id: MessageId,
    now: i64,
) -> Result<DeleteDeadOutcome, JournalError> {
    let flow_id = ids.next_flow_id()?;
    with_conn!(conn, c => c.transaction(|c| {
        let row = match dead_row!(c, id) {
            Ok(row) => row,
            Err(None) => return Ok(DeleteDeadOutcome::NotFound),
            Err(Some(status)) => return Ok(DeleteDeadOutcome::NotDead(status)),
        };
        let changed = diesel::update(
            message::table
                .filter(message::id.eq(id.0))
                .filter(message::status.eq(Status::Dead.code())),
        )
        .set((
            message::status.eq(Status::Deleted.code()),
            message::updated_time.eq(now),
        ))
        .execute(c)?;
        if changed == 0 {
            return Ok(DeleteDeadOutcome::NotDead(Status::WaitPut));
        }
        let change = StatusChange::deleted(id, row.attempts, now, shard);
        diesel::insert_into(message_flow::table)
            .values(new_flow(flow_id, node, &change))
            .execute(c)?;
        Ok::<_, diesel::result::Error>(DeleteDeadOutcome::Deleted)
    }))
    .map_err(JournalError::from)
}

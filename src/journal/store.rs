//! The journal's queries, written once for every backend. Each function is
//! synchronous and runs on the JournalActor's threads.

use std::collections::HashMap;
use std::sync::Arc;

use diesel::prelude::*;

use crate::error::JournalError;
use crate::journal::connection::JournalConn;
use crate::journal::models::{FlowRow, MessageRow, NewFlow, NewMessage};
use crate::journal::schema::{message, message_flow};
use crate::message::{IdGenerator, Message, MessageId, Status};
use crate::repeat::Occurrence;
use crate::with_conn;

/// Rows per INSERT statement: well under SQLite's bound-variable limit.
const INSERT_CHUNK: usize = 500;

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
}

impl StatusChange {
    /// The change as JSON, to keep outside the process (see `node.rs`).
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "id": self.id,
            "status": self.status.code(),
            "attempts": self.attempts,
            "at": self.at,
            "due": self.due,
            "shard": &*self.shard,
            "occurrence": self.occurrence,
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
    }
}

/// Inserts messages as WaitPut with their first flow row, all in one
/// transaction. A message whose `(topic, bizKey)` is live already, in the
/// journal or earlier in the same batch, is not inserted.
///
/// Another writer (this node's or another node's) may commit the same live
/// `(topic, bizKey)` between this batch's check and its insert. The unique
/// index refuses it; then only the rows of that chunk are tried again, one
/// by one, each behind a savepoint, and a refused row answers with the
/// message that holds its bizKey: the rest of the batch is written as usual.
pub fn insert_messages(
    conn: &mut JournalConn,
    ids: &IdGenerator,
    node: &NodeInfo,
    shard_names: &dyn Fn(MessageId) -> Arc<str>,
    msgs: &[Message],
) -> Result<Vec<InsertOutcome>, JournalError> {
    let mut flow_ids = Vec::with_capacity(msgs.len());
    for _ in msgs {
        flow_ids.push(ids.next_id()?);
    }
    with_conn!(conn, c => c.transaction(|c| {
        let mut outcomes: Vec<Option<InsertOutcome>> = Vec::with_capacity(msgs.len());
        // (a later message, the earlier one of the same batch it repeats)
        let mut repeats = Vec::new();
        let mut seen: HashMap<(&str, &str), usize> = HashMap::new();
        let mut rows = Vec::with_capacity(msgs.len());
        let mut row_of = Vec::with_capacity(msgs.len());
        for (i, m) in msgs.iter().enumerate() {
            if let Some(key) = m.biz_key.as_deref() {
                if let Some(&first) = seen.get(&(m.topic.as_str(), key)) {
                    repeats.push((i, first));
                    outcomes.push(None);
                    continue;
                }
                seen.insert((m.topic.as_str(), key), i);
                let existing = message::table
                    .filter(message::topic.eq(&m.topic))
                    .filter(message::live_biz_key.eq(key))
                    .select(MessageRow::as_select())
                    .first(c)
                    .optional()?;
                if let Some(row) = existing {
                    outcomes.push(Some(InsertOutcome::Duplicate(Box::new(row))));
                    continue;
                }
            }
            rows.push(NewMessage::waiting(m));
            row_of.push(i);
            outcomes.push(Some(InsertOutcome::Inserted));
        }
        for (chunk, msg_of) in rows.chunks(INSERT_CHUNK).zip(row_of.chunks(INSERT_CHUNK)) {
            match c.transaction(|c| diesel::insert_into(message::table).values(chunk).execute(c)) {
                Ok(_) => {}
                Err(e) if is_unique_violation(&e) => {
                    for (row, &i) in chunk.iter().zip(msg_of) {
                        match c.transaction(|c| diesel::insert_into(message::table).values(row).execute(c)) {
                            Ok(_) => {}
                            Err(e) if is_unique_violation(&e) => {
                                let m = &msgs[i];
                                let key = m.biz_key.as_deref().unwrap_or_default();
                                match live_holder(c, &m.topic, key)? {
                                    Some(holder) => {
                                        tracing::info!(topic = %m.topic, biz_key = key, id = holder.id, "another writer took this bizKey meanwhile; answered with its message");
                                        outcomes[i] = Some(InsertOutcome::Duplicate(Box::new(holder)));
                                    }
                                    None => return Err(e),
                                }
                            }
                            Err(e) => return Err(e),
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
        for (i, first) in repeats {
            let row = match &outcomes[first] {
                Some(InsertOutcome::Duplicate(row)) => row.clone(),
                _ => Box::new(waiting_row(&msgs[first])),
            };
            outcomes[i] = Some(InsertOutcome::Duplicate(row));
        }
        let changes: Vec<(StatusChange, MessageId)> = msgs
            .iter()
            .zip(&outcomes)
            .zip(&flow_ids)
            .filter(|((_, o), _)| matches!(o, Some(InsertOutcome::Inserted)))
            .map(|((m, _), id)| {
                let change = StatusChange {
                    id: m.id,
                    status: Status::WaitPut,
                    attempts: None,
                    at: m.create_time,
                    due: None,
                    shard: shard_names(m.id),
                    occurrence: None,
                };
                (change, *id)
            })
            .collect();
        let flows: Vec<NewFlow> = changes.iter().map(|(ch, id)| new_flow(*id, node, ch)).collect();
        for chunk in flows.chunks(INSERT_CHUNK) {
            diesel::insert_into(message_flow::table).values(chunk).execute(c)?;
        }
        Ok::<_, diesel::result::Error>(outcomes.into_iter().map(|o| o.expect("every message has an outcome")).collect())
    }))
    .map_err(JournalError::from)
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
/// commit. SQLite has one writer at a time, so a plain read sees it.
trait LiveHolder {
    fn live_holder(&mut self, topic: &str, key: &str) -> QueryResult<Option<MessageRow>>;
}

impl LiveHolder for diesel::mysql::MysqlConnection {
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

fn waiting_row(m: &Message) -> MessageRow {
    let n = NewMessage::waiting(m);
    MessageRow {
        id: n.id,
        topic: m.topic.clone(),
        biz_key: m.biz_key.clone(),
        live_biz_key: m.biz_key.clone(),
        body: m.body.clone(),
        priority: n.priority,
        ttl: n.ttl,
        delay_ms: n.delay_ms,
        due_time: n.due_time,
        create_time: n.create_time,
        status: n.status,
        attempts: 0,
        updated_time: n.updated_time,
        max_attempts: n.max_attempts,
        retry: n.retry,
        repeat_spec: n.repeat_spec,
        occurrence: n.occurrence,
        occurrence_time: n.occurrence_time,
    }
}

/// The order in which changes of one message happened: a terminal status
/// ends its life; otherwise by time, then by delivery count (a redelivered
/// message's Ready belongs to its previous delivery), then the end of a
/// failed delivery after the delivery itself, then by status code (the
/// statuses of one delivery follow their codes' order).
fn happened_order(ch: &StatusChange) -> (bool, i64, i32, bool, i16) {
    (
        ch.status.is_terminal(),
        ch.at,
        ch.attempts.unwrap_or(0),
        ch.due.is_some(),
        ch.status.code(),
    )
}

/// Writes flow rows and moves each message to its latest status, in one
/// transaction. Two rules make the order of batches (and of the journal's
/// two flow lanes) irrelevant where it matters: a message already Consumed,
/// Deleted or Dead keeps that status (reaching one frees its bizKey), and
/// `attempts` only grows.
pub fn apply_changes(
    conn: &mut JournalConn,
    ids: &IdGenerator,
    node: &NodeInfo,
    changes: &[StatusChange],
) -> Result<(), JournalError> {
    // Each message ends the batch in the state of its latest change, in the
    // order the changes happened (`happened_order`), and with its highest
    // delivery count; updates are grouped by outcome so a batch costs a few
    // statements, not one per message.
    // A recurring message moved on to a later occurrence in this batch: the
    // highest such move per message, applied first and on its own (below),
    // so a later change of the new occurrence in the same batch (its Ready,
    // its delivery) cannot hide it.
    let mut moves: HashMap<MessageId, &StatusChange> = HashMap::new();
    for ch in changes {
        if let Some(occ) = ch.occurrence {
            let e = moves.entry(ch.id).or_insert(ch);
            if e.occurrence.is_some_and(|o| occ.number > o.number) {
                *e = ch;
            }
        }
    }
    let mut latest: HashMap<MessageId, &StatusChange> = HashMap::new();
    let mut attempts: HashMap<MessageId, i32> = HashMap::new();
    for ch in changes {
        let e = latest.entry(ch.id).or_insert(ch);
        if happened_order(ch) >= happened_order(e) {
            *e = ch;
        }
        // Deliveries of an earlier occurrence do not count against the
        // one the message moved on to.
        let before_move = moves
            .get(&ch.id)
            .is_some_and(|m| happened_order(ch) < happened_order(m));
        if let (Some(a), false) = (ch.attempts, before_move) {
            let m = attempts.entry(ch.id).or_insert(a);
            *m = (*m).max(a);
        }
    }
    // (status, highest attempts, at, due again) → ids
    type Outcome = (Status, Option<i32>, i64, Option<i64>);
    let mut groups: HashMap<Outcome, Vec<i64>> = HashMap::new();
    for (id, ch) in latest {
        let key = (ch.status, attempts.get(&id).copied(), ch.at, ch.due);
        groups.entry(key).or_default().push(id.0);
    }
    let move_rows: Vec<(Occurrence, i64, i64)> = moves
        .values()
        .filter_map(|ch| ch.occurrence.map(|o| (o, ch.id.0, ch.at)))
        .collect();
    let mut flows = Vec::with_capacity(changes.len());
    for ch in changes {
        flows.push(new_flow(ids.next_id()?, node, ch));
    }

    with_conn!(conn, c => c.transaction(|c| {
        for chunk in flows.chunks(INSERT_CHUNK) {
            diesel::insert_into(message_flow::table).values(chunk).execute(c)?;
        }
        // Occurrence moves first: whatever the order the changes arrive in,
        // the row never goes back to an earlier occurrence, and a move is
        // never lost behind a later change.
        for (occ, id, _) in &move_rows {
            diesel::update(
                message::table
                    .filter(message::id.eq(id))
                    .filter(message::status.lt(Status::FIRST_TERMINAL_CODE))
                    .filter(message::occurrence.lt(occ.number)),
            )
            .set((
                message::occurrence.eq(occ.number),
                message::occurrence_time.eq(occ.due_time),
                message::attempts.eq(0),
                message::due_time.eq(occ.due_time),
            ))
            .execute(c)?;
        }
        for ((status, attempts, at, due), ids) in &groups {
            for chunk in ids.chunks(INSERT_CHUNK) {
                let target = message::table
                    .filter(message::id.eq_any(chunk))
                    .filter(message::status.lt(Status::FIRST_TERMINAL_CODE));
                if status.is_terminal() {
                    diesel::update(target)
                        .set((
                            message::status.eq(status.code()),
                            message::updated_time.eq(at),
                            message::live_biz_key.eq(None::<String>),
                        ))
                        .execute(c)?;
                } else if let Some(due) = due {
                    diesel::update(target.filter(message::updated_time.le(at)))
                        .set((
                            message::status.eq(status.code()),
                            message::updated_time.eq(at),
                            message::due_time.eq(due),
                        ))
                        .execute(c)?;
                } else {
                    // A change older than the row's last one (it came by the
                    // other lane, or a batch later) does not turn it back.
                    diesel::update(target.filter(message::updated_time.le(at)))
                        .set((message::status.eq(status.code()), message::updated_time.eq(at)))
                        .execute(c)?;
                }
                if let Some(a) = attempts {
                    // A recurring message past its first occurrence takes
                    // counts only from changes not older than its row: an
                    // earlier occurrence's late change must not count
                    // against the current one.
                    diesel::update(
                        message::table
                            .filter(message::id.eq_any(chunk))
                            .filter(message::attempts.lt(a))
                            .filter(
                                message::occurrence
                                    .is_null()
                                    .or(message::occurrence.le(1))
                                    .or(message::updated_time.le(at)),
                            ),
                    )
                    .set(message::attempts.eq(a))
                    .execute(c)?;
                }
            }
        }
        Ok::<_, diesel::result::Error>(())
    }))
    .map_err(JournalError::from)
}

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
                message_flow::status.asc(),
                message_flow::id.asc(),
            ))
            .select(FlowRow::as_select())
            .load(c)?;
        Ok::<_, diesel::result::Error>(Some((row, history)))
    }))?)
}

/// Live messages (not Consumed, Deleted or Dead) with ids above `after`, in
/// id order: one keyset page of a restore.
pub fn live_page(
    conn: &mut JournalConn,
    after: i64,
    limit: i64,
) -> Result<Vec<MessageRow>, JournalError> {
    Ok(with_conn!(conn, c => message::table
        .filter(message::id.gt(after))
        .filter(message::status.lt(Status::FIRST_TERMINAL_CODE))
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
) -> Result<(Vec<RowState>, Option<i64>), JournalError> {
    let rows: Vec<RowState> = with_conn!(conn, c => message::table
        .filter(message::id.gt(after))
        .filter(message::status.lt(Status::FIRST_TERMINAL_CODE))
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
    let flow_id = ids.next_id()?;
    with_conn!(conn, c => c.transaction(|c| {
        let Some(row) = message::table
            .find(id.0)
            .select(MessageRow::as_select())
            .first(c)
            .optional()? else {
            return Ok(RequeueOutcome::NotFound);
        };
        if row.status() != Status::Dead {
            return Ok(RequeueOutcome::NotDead(row.status()));
        }
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
        let change = StatusChange {
            id,
            status: Status::Delaying,
            attempts: Some(0),
            at: now,
            due: Some(now),
            shard,
            occurrence: None,
        };
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
    let flow_id = ids.next_id()?;
    with_conn!(conn, c => c.transaction(|c| {
        let Some(row) = message::table
            .find(id.0)
            .select(MessageRow::as_select())
            .first(c)
            .optional()? else {
            return Ok(DeleteDeadOutcome::NotFound);
        };
        if row.status() != Status::Dead {
            return Ok(DeleteDeadOutcome::NotDead(row.status()));
        }
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
        let change = StatusChange {
            id,
            status: Status::Deleted,
            attempts: Some(row.attempts),
            at: now,
            due: None,
            shard,
            occurrence: None,
        };
        diesel::insert_into(message_flow::table)
            .values(new_flow(flow_id, node, &change))
            .execute(c)?;
        Ok::<_, diesel::result::Error>(DeleteDeadOutcome::Deleted)
    }))
    .map_err(JournalError::from)
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

/// How many messages each topic has in each status but Consumed and
/// Deleted: `(topic, status code, count)`, topics in name order, at most
/// `limit` rows. An index-only count over `(status, topic, id)`: it reads
/// one index entry per live or dead message.
pub fn topic_counts(
    conn: &mut JournalConn,
    limit: i64,
) -> Result<Vec<(String, i16, i64)>, JournalError> {
    let shown = [
        Status::WaitPut.code(),
        Status::Delaying.code(),
        Status::Ready.code(),
        Status::Consuming.code(),
        Status::Dead.code(),
    ];
    Ok(with_conn!(conn, c => message::table
        .filter(message::status.eq_any(shown))
        .group_by((message::topic, message::status))
        .select((message::topic, message::status, diesel::dsl::count_star()))
        .order((message::topic.asc(), message::status.asc()))
        .limit(limit)
        .load::<(String, i16, i64)>(c))?)
}

/// One page of the live messages of a topic whose bizKey starts with
/// `prefix`, ids above `after`, in id order; with the id to continue after
/// when there may be more.
pub fn live_by_biz_key_prefix(
    conn: &mut JournalConn,
    topic: &str,
    prefix: &str,
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
    let rows: Vec<MessageRow> = with_conn!(conn, c => message::table
        .filter(message::topic.eq(topic))
        .filter(message::live_biz_key.like(&pattern).escape('\\'))
        .filter(message::id.gt(after))
        .order(message::id.asc())
        .limit(limit)
        .select(MessageRow::as_select())
        .load(c))?;
    let next = (rows.len() as i64 == limit).then(|| rows.last().map_or(after, |r| r.id));
    // LIKE ignores case on MySQL's default collations and on SQLite for
    // ASCII: keep only exact prefixes.
    let rows = rows
        .into_iter()
        .filter(|r| {
            r.live_biz_key
                .as_deref()
                .is_some_and(|k| k.starts_with(prefix))
        })
        .collect();
    Ok((rows, next))
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

/// Does the database take a write? Inserts a flow row and rolls it back:
/// a database that refuses every write (read-only, out of space) fails
/// here, one that refuses only some rows (a constraint, a trigger) does not.
pub fn probe_write(conn: &mut JournalConn) -> Result<(), JournalError> {
    let probe = NewFlow {
        id: -1,
        message_id: -1,
        status: Status::WaitPut.code(),
        attempts: 0,
        flow_time: 0,
        shard: "probe",
        node_id: "probe",
        host: "probe",
    };
    let tried: Result<(), diesel::result::Error> = with_conn!(conn, c => c.transaction(|c| {
        diesel::insert_into(message_flow::table).values(&probe).execute(c)?;
        Err(diesel::result::Error::RollbackTransaction)
    }));
    match tried {
        Err(diesel::result::Error::RollbackTransaction) | Ok(()) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

pub fn ping(conn: &mut JournalConn) -> Result<(), JournalError> {
    use diesel::connection::SimpleConnection;
    Ok(with_conn!(conn, c => c.batch_execute("SELECT 1"))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(status: Status, attempts: Option<i32>, at: i64) -> StatusChange {
        StatusChange {
            id: MessageId(1),
            status,
            attempts,
            at,
            due: None,
            shard: "".into(),
            occurrence: None,
        }
    }

    #[test]
    fn changes_order_as_they_happened() {
        let order = |c: &StatusChange| happened_order(c);
        // A redelivery's Ready and the next Consuming in the same millisecond.
        let requeued = change(Status::Ready, Some(1), 100);
        let claimed = change(Status::Consuming, Some(2), 100);
        assert!(order(&claimed) > order(&requeued));
        // A message moved and handed out in the same millisecond.
        assert!(
            order(&change(Status::Consuming, Some(1), 7)) > order(&change(Status::Ready, None, 7))
        );
        // An ack is the end, even beside a later-stamped change.
        assert!(
            order(&change(Status::Consumed, Some(2), 100))
                > order(&change(Status::Ready, Some(2), 101))
        );
        // A nack in the millisecond of its delivery ends that delivery.
        let mut nacked = change(Status::Delaying, Some(2), 100);
        nacked.due = Some(5000);
        assert!(order(&nacked) > order(&claimed));
        // Otherwise time decides.
        assert!(
            order(&change(Status::Delaying, None, 9))
                > order(&change(Status::Consuming, Some(3), 8))
        );
    }
}

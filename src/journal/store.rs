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
    /// The zset key (or actor) that made the change; shared, not copied,
    /// by the many changes of one shard.
    pub shard: Arc<str>,
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
                    shard: shard_names(m.id),
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
    }
}

/// The order in which changes of one message happened: a terminal status
/// ends its life; otherwise by time, then by delivery count (a redelivered
/// message's Ready belongs to its previous delivery), then by status code
/// (the statuses of one delivery follow their codes' order).
fn happened_order(ch: &StatusChange) -> (bool, i64, i32, i16) {
    (
        ch.status.is_terminal(),
        ch.at,
        ch.attempts.unwrap_or(0),
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
    let mut latest: HashMap<MessageId, &StatusChange> = HashMap::new();
    let mut attempts: HashMap<MessageId, i32> = HashMap::new();
    for ch in changes {
        let e = latest.entry(ch.id).or_insert(ch);
        if happened_order(ch) >= happened_order(e) {
            *e = ch;
        }
        if let Some(a) = ch.attempts {
            let m = attempts.entry(ch.id).or_insert(a);
            *m = (*m).max(a);
        }
    }
    let mut groups: HashMap<(Status, Option<i32>, i64), Vec<i64>> = HashMap::new();
    for (id, ch) in latest {
        let key = (ch.status, attempts.get(&id).copied(), ch.at);
        groups.entry(key).or_default().push(id.0);
    }
    let mut flows = Vec::with_capacity(changes.len());
    for ch in changes {
        flows.push(new_flow(ids.next_id()?, node, ch));
    }

    with_conn!(conn, c => c.transaction(|c| {
        for chunk in flows.chunks(INSERT_CHUNK) {
            diesel::insert_into(message_flow::table).values(chunk).execute(c)?;
        }
        for ((status, attempts, at), ids) in &groups {
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
                } else {
                    // A change older than the row's last one (it came by the
                    // other lane, or a batch later) does not turn it back.
                    diesel::update(target.filter(message::updated_time.le(at)))
                        .set((message::status.eq(status.code()), message::updated_time.eq(at)))
                        .execute(c)?;
                }
                if let Some(a) = attempts {
                    diesel::update(message::table.filter(message::id.eq_any(chunk)).filter(message::attempts.lt(a)))
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

pub fn history(conn: &mut JournalConn, id: MessageId) -> Result<Vec<FlowRow>, JournalError> {
    Ok(with_conn!(conn, c => message_flow::table
        .filter(message_flow::message_id.eq(id.0))
        .order((
            message_flow::flow_time.asc(),
            message_flow::attempts.asc(),
            message_flow::status.asc(),
            message_flow::id.asc(),
        ))
        .select(FlowRow::as_select())
        .load(c))?)
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
            shard: "".into(),
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
        // Otherwise time decides.
        assert!(
            order(&change(Status::Delaying, None, 9))
                > order(&change(Status::Consuming, Some(3), 8))
        );
    }
}

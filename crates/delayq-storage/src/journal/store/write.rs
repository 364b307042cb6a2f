//! Writing the journal: messages inserted as WaitPut (a group commit), and
//! status changes applied in batches.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use diesel::prelude::*;

use crate::error::JournalError;
use crate::journal::connection::JournalConn;
use crate::journal::models::{MessageRow, NewFlow, NewMessage};
use crate::journal::schema::{message, message_waiting, outbox_done};
use crate::message::{IdGenerator, Message, MessageId, Status};
use crate::repeat::Occurrence;
use crate::with_conn;

use super::batch::{ChangeWriter, Update};
use super::change::{new_flow, NodeInfo, StatusChange};
use super::insert::{
    insert_chunks, is_unique_violation, live_holder, InsertOutcome, OutboxRows, INSERT_CHUNK,
};

/// How many times one row whose bizKey was taken, then freed before its
/// holder could be read, is tried again before the batch fails.
const LIVE_KEY_TRIES: u32 = 8;

/// Inserts messages as WaitPut with their first flow row, all in one
/// transaction. A message whose `(topic, bizKey)` is live already, in the
/// journal or earlier in the same batch, is not inserted.
///
/// Another writer (this node's or another node's) may commit the same live
/// `(topic, bizKey)` between this batch's check and its insert. The unique
/// index refuses it; then only the rows of that chunk are tried again, one
/// by one, each behind a savepoint, and a refused row answers with the
/// message that holds its bizKey: the rest of the batch is written as usual.
/// When that holder ended meanwhile (a cancel of the key committed between
/// the refused insert and the read of its holder), the key is free and the
/// row is tried again, up to [`LIVE_KEY_TRIES`] times.
///
/// Messages from an outbox (`outbox`, one row per message) whose row is in
/// `outbox_done` already answer [`InsertOutcome::OutboxDone`]; the others'
/// rows are written there in the same transaction, with the message that
/// took each (its own, or its bizKey's live holder).
pub fn insert_messages(
    conn: &mut JournalConn,
    ids: &IdGenerator,
    node: &NodeInfo,
    shard_names: &dyn Fn(MessageId) -> Arc<str>,
    msgs: &[Message],
    waiting: &[bool],
    outbox: Option<&OutboxRows>,
) -> Result<Vec<InsertOutcome>, JournalError> {
    if let Some(o) = outbox {
        assert_eq!(o.rows.len(), msgs.len(), "one outbox row per message");
    }
    let mut flow_ids = Vec::with_capacity(msgs.len());
    for _ in msgs {
        flow_ids.push(ids.next_flow_id()?);
    }
    with_conn!(conn, c => c.transaction(|c| {
        let mut outcomes: Vec<Option<InsertOutcome>> = Vec::with_capacity(msgs.len());
        // (a later message, the earlier one of the same batch it repeats)
        let mut repeats = Vec::new();
        let mut seen: HashMap<(&str, &str), usize> = HashMap::new();
        let mut rows = Vec::with_capacity(msgs.len());
        let mut row_of = Vec::with_capacity(msgs.len());
        let done: HashMap<i64, i64> = match outbox {
            Some(o) => {
                // Ranges of row ids, each read through the primary key
                // (source, row_id) as a range: a list of ids in one
                // statement (`= ANY`) leaves PostgreSQL reading every row
                // of the source through the index's first column.
                let created: HashMap<i64, i64> =
                    o.rows.iter().copied().zip(o.created.iter().copied()).collect();
                let mut done = HashMap::new();
                let mut stale = Vec::new();
                for (lo, hi) in id_ranges(&o.rows) {
                    let found: Vec<(i64, i64, i64)> = outbox_done::table
                        .filter(outbox_done::source.eq(&o.source))
                        .filter(outbox_done::row_id.between(lo, hi))
                        .select((outbox_done::row_id, outbox_done::row_created, outbox_done::message_id))
                        .load(c)?;
                    for (row, at, message) in found {
                        match created.get(&row) {
                            Some(&t) if t == at && !o.again => {
                                done.insert(row, message);
                            }
                            Some(_) => stale.push(row),
                            None => {}
                        }
                    }
                }
                // Records of an earlier row with the same id, or of a push
                // answered with a holder that ended: replaced below.
                for chunk in stale.chunks(INSERT_CHUNK) {
                    diesel::delete(
                        outbox_done::table
                            .filter(outbox_done::source.eq(&o.source))
                            .filter(outbox_done::row_id.eq_any(chunk)),
                    )
                    .execute(c)?;
                }
                done
            }
            None => HashMap::new(),
        };
        for (i, m) in msgs.iter().enumerate() {
            if let Some(&id) = outbox.and_then(|o| done.get(&o.rows[i])) {
                outcomes.push(Some(InsertOutcome::OutboxDone(id)));
                continue;
            }
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
        for range in insert_chunks(&rows, |r| r.body.len()) {
            let (chunk, msg_of) = (&rows[range.clone()], &row_of[range]);
            match c.transaction(|c| c.insert_messages(chunk)) {
                Ok(_) => {}
                Err(e) if is_unique_violation(&e) => {
                    for (row, &i) in chunk.iter().zip(msg_of) {
                        let mut tries = 0;
                        loop {
                            match c.transaction(|c| c.insert_messages(std::slice::from_ref(row))) {
                                Ok(_) => break,
                                Err(e) if is_unique_violation(&e) => {
                                    let m = &msgs[i];
                                    let Some(key) = m.biz_key.as_deref() else {
                                        return Err(e);
                                    };
                                    match live_holder(c, &m.topic, key)? {
                                        Some(holder) => {
                                            tracing::info!(topic = %m.topic, biz_key = key, id = holder.id, "another writer took this bizKey meanwhile; answered with its message");
                                            outcomes[i] = Some(InsertOutcome::Duplicate(Box::new(holder)));
                                            break;
                                        }
                                        // The holder ended (a cancel, an ack)
                                        // between the refused insert and this
                                        // read: the key is free again, and the
                                        // row is tried again (a push that takes
                                        // it meanwhile is found as its holder).
                                        None if tries < LIVE_KEY_TRIES => {
                                            tracing::info!(topic = %m.topic, biz_key = key, "this bizKey's holder ended meanwhile; inserting the message again");
                                            tries += 1;
                                        }
                                        None => return Err(e),
                                    }
                                }
                                Err(e) => return Err(e),
                            }
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
                let change = StatusChange::waiting(m.id, m.create_time, shard_names(m.id));
                (change, *id)
            })
            .collect();
        let flows: Vec<NewFlow> = changes.iter().map(|(ch, id)| new_flow(*id, node, ch)).collect();
        c.insert_flows(&flows)?;
        // Those due beyond the Redis horizon, listed for the loader.
        let listed: Vec<_> = msgs
            .iter()
            .zip(&outcomes)
            .zip(waiting.iter().chain(std::iter::repeat(&false)))
            .filter(|((_, o), &w)| w && matches!(o, Some(InsertOutcome::Inserted)))
            .map(|((m, _), _)| {
                (
                    message_waiting::due_time.eq(m.due_time),
                    message_waiting::id.eq(m.id.0),
                )
            })
            .collect();
        for chunk in listed.chunks(INSERT_CHUNK) {
            diesel::insert_into(message_waiting::table).values(chunk).execute(c)?;
        }
        if let Some(o) = outbox {
            let now = crate::message::now_ms();
            let pushed: Vec<_> = o
                .rows
                .iter()
                .zip(&o.created)
                .zip(msgs)
                .zip(&outcomes)
                .filter_map(|(((row, created), m), out)| {
                    let id = match out.as_ref()? {
                        InsertOutcome::Inserted => m.id.0,
                        InsertOutcome::Duplicate(holder) => holder.id,
                        InsertOutcome::OutboxDone(_) => return None,
                    };
                    Some((
                        outbox_done::source.eq(o.source.as_str()),
                        outbox_done::row_id.eq(*row),
                        outbox_done::row_created.eq(*created),
                        outbox_done::message_id.eq(id),
                        outbox_done::done_time.eq(now),
                    ))
                })
                .collect();
            for chunk in pushed.chunks(INSERT_CHUNK) {
                diesel::insert_into(outbox_done::table).values(chunk).execute(c)?;
            }
        }
        Ok::<_, diesel::result::Error>(outcomes.into_iter().map(|o| o.expect("every message has an outcome")).collect())
    }))
    .map_err(JournalError::from)
}

/// Deletes the records of outbox rows whose delete committed: they are
/// needed only while a row may still be in the outbox.
pub fn forget_outbox_rows(
    conn: &mut JournalConn,
    source: &str,
    rows: &[i64],
) -> Result<(), JournalError> {
    with_conn!(conn, c => {
        for (lo, hi) in id_ranges(rows) {
            let within: Vec<i64> = rows.iter().copied().filter(|r| (lo..=hi).contains(r)).collect();
            for chunk in within.chunks(INSERT_CHUNK) {
                diesel::delete(
                    outbox_done::table
                        .filter(outbox_done::source.eq(source))
                        .filter(outbox_done::row_id.between(lo, hi))
                        .filter(outbox_done::row_id.eq_any(chunk)),
                )
                .execute(c)?;
            }
        }
        Ok::<_, diesel::result::Error>(())
    })?;
    Ok(())
}

/// Row ids gathered into ranges no wider than [`RANGE_SPAN`] (sorted,
/// each id in one range): a batch taken in id order is one or a few.
fn id_ranges(ids: &[i64]) -> Vec<(i64, i64)> {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::new();
    for id in sorted {
        match out.last_mut() {
            Some((lo, hi)) if (id as i128 - *lo as i128) < RANGE_SPAN as i128 => *hi = id,
            _ => out.push((id, id)),
        }
    }
    out
}

/// The widest range of outbox row ids read in one statement.
const RANGE_SPAN: i64 = 4_096;

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
        msg_group: m.group.clone(),
    }
}

/// The order in which changes of one message happened: a terminal status
/// ends its life; otherwise by time, then by delivery count (a redelivered
/// message's Ready belongs to its previous delivery), then the end of a
/// failed delivery after the delivery itself, then by status code (the
/// statuses of one delivery follow their codes' order).
fn happened_order(ch: &StatusChange) -> (bool, i64, i32, bool, i16) {
    // A promotion carries its message's count for the history only: it
    // starts no delivery, and ranks as it did without one.
    let promotion = ch.status == Status::Ready && ch.due.is_none();
    (
        ch.status.is_terminal(),
        ch.at,
        if promotion {
            0
        } else {
            ch.attempts.unwrap_or(0)
        },
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
    // delivery count (written as each database takes a batch best:
    // super::batch).
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
    let updates: Vec<Update> = latest
        .into_iter()
        .map(|(id, ch)| Update {
            id: id.0,
            status: ch.status,
            at: ch.at,
            due: ch.due,
            attempts: attempts.get(&id).copied(),
            // A promotion with no count comes before the first delivery.
            delivery: ch
                .attempts
                .or((ch.status == Status::Ready && ch.due.is_none()).then_some(0)),
        })
        .collect();
    // Series moved by a reschedule: the latest per message.
    let mut series: HashMap<MessageId, (Occurrence, i64)> = HashMap::new();
    for ch in changes {
        if let Some(occ) = ch.series {
            let e = series.entry(ch.id).or_insert((occ, ch.at));
            if ch.at >= e.1 {
                *e = (occ, ch.at);
            }
        }
    }
    let move_rows: Vec<(Occurrence, i64, i64)> = moves
        .values()
        .filter_map(|ch| ch.occurrence.map(|o| (o, ch.id.0, ch.at)))
        .collect();
    let mut flows = Vec::with_capacity(changes.len());
    for ch in changes {
        flows.push(new_flow(ids.next_flow_id()?, node, ch));
    }
    // Ends Redis kept, recorded again (`StatusChange::kept`): no second
    // flow row for a message whose end the journal has already, or that
    // this batch writes another way.
    let kept: Vec<i64> = changes.iter().filter(|c| c.kept).map(|c| c.id.0).collect();
    let ending: HashSet<MessageId> = changes
        .iter()
        .filter(|c| c.status.is_terminal() && !c.kept)
        .map(|c| c.id)
        .collect();

    // Every row the batch changes, locked in id order first.
    let mut touched: Vec<i64> = updates
        .iter()
        .map(|u| u.id)
        .chain(move_rows.iter().map(|(_, id, _)| *id))
        .chain(series.keys().map(|id| id.0))
        .collect();
    touched.sort_unstable();
    touched.dedup();

    with_conn!(conn, c => c.transaction(|c| {
        c.lock_rows(&touched)?;
        if kept.is_empty() {
            c.insert_flows(&flows)?;
        } else {
            let ended: HashSet<i64> = message::table
                .filter(message::id.eq_any(&kept))
                .filter(message::status.ge(Status::FIRST_TERMINAL_CODE))
                .select(message::id)
                .load::<i64>(c)?
                .into_iter()
                .collect();
            let mut told = ending.clone();
            let new: Vec<NewFlow> = flows
                .iter()
                .zip(changes)
                .filter(|(_, ch)| !ch.kept || (!ended.contains(&ch.id.0) && told.insert(ch.id)))
                .map(|(f, _)| f.clone())
                .collect();
            c.insert_flows(&new)?;
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
        // A series moved: after the occurrence moves above, so the move of
        // the occurrence it moved (an ack's, in this batch or an earlier
        // one) cannot put the old time back; one in a later batch finds
        // the row at that occurrence already and leaves it.
        for (id, (occ, _)) in &series {
            let live = message::table
                .filter(message::id.eq(id.0))
                .filter(message::status.lt(Status::FIRST_TERMINAL_CODE));
            diesel::update(live.filter(message::occurrence.lt(occ.number)))
                .set((
                    message::occurrence.eq(occ.number),
                    message::attempts.eq(0),
                    message::due_time.eq(occ.due_time),
                ))
                .execute(c)?;
            diesel::update(live.filter(message::occurrence.eq(occ.number)))
                .set(message::occurrence_time.eq(occ.due_time))
                .execute(c)?;
        }
        c.update_rows(&updates)?;
        Ok::<_, diesel::result::Error>(())
    }))
    .map_err(JournalError::from)
}

/// Takes these `(due_time, id)` off the waiting list: the loader scheduled
/// them, or they are no longer waiting. One statement per chunk, over the
/// range of due times the chunk spans.
pub fn unlist_waiting(conn: &mut JournalConn, entries: &[(i64, i64)]) -> Result<(), JournalError> {
    with_conn!(conn, c => c.transaction(|c| {
        for chunk in entries.chunks(INSERT_CHUNK) {
            let (low, high) = chunk.iter().fold((i64::MAX, i64::MIN), |(lo, hi), &(due, _)| {
                (lo.min(due), hi.max(due))
            });
            let ids: Vec<i64> = chunk.iter().map(|&(_, id)| id).collect();
            diesel::delete(
                message_waiting::table
                    .filter(message_waiting::due_time.between(low, high))
                    .filter(message_waiting::id.eq_any(ids)),
            )
            .execute(c)?;
        }
        Ok::<_, diesel::result::Error>(())
    }))
    .map_err(JournalError::from)
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
            series: None,
            kept: false,
        }
    }

    #[test]
    fn id_ranges_cover_each_id_once_within_the_span() {
        assert_eq!(id_ranges(&[]), vec![]);
        assert_eq!(id_ranges(&[5, 3, 4]), vec![(3, 5)]);
        assert_eq!(
            id_ranges(&[i64::MIN, i64::MAX]),
            vec![(i64::MIN, i64::MIN), (i64::MAX, i64::MAX)]
        );
        assert_eq!(
            id_ranges(&[1, RANGE_SPAN, RANGE_SPAN + 1, 10 * RANGE_SPAN]),
            vec![
                (1, RANGE_SPAN),
                (RANGE_SPAN + 1, RANGE_SPAN + 1),
                (10 * RANGE_SPAN, 10 * RANGE_SPAN)
            ]
        );
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
        ); // A promotion carries its message's count for the history only: a
           // reschedule's Delaying in its millisecond still comes after it.
        let promoted = change(Status::Ready, Some(3), 50);
        let mut moved = change(Status::Delaying, None, 50);
        moved.due = Some(9000);
        assert!(order(&moved) > order(&promoted));
    }
}

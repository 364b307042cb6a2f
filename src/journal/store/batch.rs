//! How a batch of status changes reaches each database: its flow rows, and
//! each message moved to its latest status (see [`super::write::apply_changes`]
//! for what is decided before).
//!
//! Messages that end the batch alike (the same status, time, count and due
//! time) are moved by one UPDATE over their ids. On SQLite the flow rows
//! travel as one JSON text bound once, which SQLite reads with `json_each`
//! (no statement built, bound and stepped per row), and a message's status,
//! time and delivery count change in one row write. MySQL and MariaDB take
//! the flow rows through diesel, a few hundred a statement, and the count
//! in a second UPDATE (their UPDATE reads a column already set by an
//! earlier SET of the same statement).

use std::collections::HashMap;
use std::fmt::Write as _;

use diesel::connection::SimpleConnection as _;
use diesel::prelude::*;
use diesel::sql_types::Text;

use crate::journal::models::NewFlow;
use crate::journal::schema::{message, message_flow};
use crate::message::Status;

use super::INSERT_CHUNK;

/// Where one message ends a batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Update {
    pub id: i64,
    pub status: Status,
    /// When the change happened (the row's `updated_time`).
    pub at: i64,
    /// Due again (a failed delivery): the row's `due_time` takes it.
    pub due: Option<i64>,
    /// The highest delivery count the batch saw, when it saw one.
    pub attempts: Option<i32>,
}

/// Writes a batch's flow rows and row updates, inside the caller's
/// transaction. Two rules make the order of batches irrelevant where it
/// matters: a message already Consumed, Deleted or Dead keeps that status,
/// and a change older than the row's last one (`updated_time`) does not
/// turn it back; `attempts` only grows, and a recurring message past its
/// first occurrence takes counts only from changes not older than its row.
pub(super) trait ChangeWriter {
    fn insert_flows(&mut self, flows: &[NewFlow]) -> QueryResult<()>;
    fn update_rows(&mut self, updates: &[Update]) -> QueryResult<()>;
}

/// Text of a JSON string: shard names and hosts are plain, yet quoted
/// properly whatever they hold.
fn json_str(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// The flow rows as one JSON array: `[id, message, status, attempts, time,
/// shard]` each (node and host are the same for the whole batch).
fn flows_json(flows: &[NewFlow]) -> String {
    let mut out = String::with_capacity(flows.len() * 64 + 2);
    let mut quoted: Vec<(&str, String)> = Vec::new();
    out.push('[');
    for (i, f) in flows.iter().enumerate() {
        let shard = match quoted.iter().find(|(s, _)| *s == f.shard) {
            Some((_, q)) => q,
            None => {
                quoted.push((f.shard, json_str(f.shard)));
                &quoted.last().expect("just pushed").1
            }
        };
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(
            out,
            "{sep}[{},{},{},{},{},{shard}]",
            f.id, f.message_id, f.status, f.attempts, f.flow_time
        );
    }
    out.push(']');
    out
}

const SQLITE_INSERT_FLOWS: &str = "INSERT INTO message_flow \
    (id, message_id, status, attempts, flow_time, shard, node_id, host) \
    SELECT j.value ->> 0, j.value ->> 1, j.value ->> 2, j.value ->> 3, j.value ->> 4, j.value ->> 5, ?, ? \
    FROM json_each(?) AS j";

/// One group's UPDATE on SQLite: the messages `ids` that end the batch
/// alike. Every SET and the WHERE read the row as it was before the
/// statement. The row takes the status when it is live and the change is
/// not older than its last one (a terminal change ends any live row); it
/// takes the delivery count when that is higher and, for a recurring
/// message past its first occurrence, when the change is not older than
/// the row (which it is not once the row takes the status). The text holds
/// only numbers this function writes.
fn sqlite_group_update(
    status: Status,
    attempts: Option<i32>,
    at: i64,
    due: Option<i64>,
    ids: &[i64],
) -> String {
    let takes = if status.is_terminal() {
        format!("status < {}", Status::FIRST_TERMINAL_CODE)
    } else {
        format!(
            "(status < {} AND updated_time <= {at})",
            Status::FIRST_TERMINAL_CODE
        )
    };
    let count = attempts.map(|a| {
        let when = format!(
            "(attempts < {a} AND (occurrence IS NULL OR occurrence <= 1 OR updated_time <= {at} OR {takes}))"
        );
        (a, when)
    });
    // Without a count every row the WHERE picks takes the status; with one,
    // a row may be picked for its count alone.
    let set = |value: String, column: &str| match count {
        None => value,
        Some(_) => format!("CASE WHEN {takes} THEN {value} ELSE {column} END"),
    };
    let mut sql = String::with_capacity(400 + ids.len() * 21);
    let _ = write!(
        sql,
        "UPDATE message SET status = {}, updated_time = {}",
        set(status.code().to_string(), "status"),
        set(at.to_string(), "updated_time")
    );
    if let Some((a, when)) = &count {
        let _ = write!(
            sql,
            ", attempts = CASE WHEN {when} THEN {a} ELSE attempts END"
        );
    }
    if status.is_terminal() {
        let _ = write!(
            sql,
            ", live_biz_key = {}",
            set("NULL".into(), "live_biz_key")
        );
    } else if let Some(due) = due {
        let _ = write!(sql, ", due_time = {}", set(due.to_string(), "due_time"));
    }
    match &count {
        None => {
            let _ = write!(sql, " WHERE {takes} AND id IN (");
        }
        Some((_, when)) => {
            let _ = write!(sql, " WHERE ({takes} OR {when}) AND id IN (");
        }
    }
    push_ids(&mut sql, ids);
    sql
}

fn push_ids(sql: &mut String, ids: &[i64]) {
    for (i, id) in ids.iter().enumerate() {
        let _ = write!(sql, "{}{id}", if i == 0 { "" } else { "," });
    }
    sql.push(')');
}

/// Messages grouped by how they end the batch: (status, highest attempts,
/// at, due again) → ids.
type Groups = HashMap<(Status, Option<i32>, i64, Option<i64>), Vec<i64>>;

fn groups(updates: &[Update]) -> Groups {
    let mut groups = Groups::new();
    for u in updates {
        groups
            .entry((u.status, u.attempts, u.at, u.due))
            .or_default()
            .push(u.id);
    }
    groups
}

impl ChangeWriter for diesel::sqlite::SqliteConnection {
    fn insert_flows(&mut self, flows: &[NewFlow]) -> QueryResult<()> {
        let Some(first) = flows.first() else {
            return Ok(());
        };
        diesel::sql_query(SQLITE_INSERT_FLOWS)
            .bind::<Text, _>(first.node_id)
            .bind::<Text, _>(first.host)
            .bind::<Text, _>(flows_json(flows))
            .execute(self)?;
        Ok(())
    }

    fn update_rows(&mut self, updates: &[Update]) -> QueryResult<()> {
        for ((status, attempts, at, due), ids) in &groups(updates) {
            for chunk in ids.chunks(INSERT_CHUNK) {
                self.batch_execute(&sqlite_group_update(*status, *attempts, *at, *due, chunk))?;
            }
        }
        Ok(())
    }
}

impl ChangeWriter for diesel::mysql::MysqlConnection {
    fn insert_flows(&mut self, flows: &[NewFlow]) -> QueryResult<()> {
        for chunk in flows.chunks(INSERT_CHUNK) {
            diesel::insert_into(message_flow::table)
                .values(chunk)
                .execute(self)?;
        }
        Ok(())
    }

    fn update_rows(&mut self, updates: &[Update]) -> QueryResult<()> {
        for ((status, attempts, at, due), ids) in &groups(updates) {
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
                        .execute(self)?;
                } else if let Some(due) = due {
                    diesel::update(target.filter(message::updated_time.le(at)))
                        .set((
                            message::status.eq(status.code()),
                            message::updated_time.eq(at),
                            message::due_time.eq(due),
                        ))
                        .execute(self)?;
                } else {
                    diesel::update(target.filter(message::updated_time.le(at)))
                        .set((
                            message::status.eq(status.code()),
                            message::updated_time.eq(at),
                        ))
                        .execute(self)?;
                }
                if let Some(a) = attempts {
                    // Read after the status update above: a row it moved
                    // has `updated_time` = at.
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
                    .execute(self)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_travel_as_json_arrays() {
        let flows = [
            NewFlow {
                id: 7,
                message_id: 5,
                status: 3,
                attempts: 1,
                flow_time: 100,
                shard: "dq:{0}:\"in\"flight",
                node_id: "n",
                host: "h",
            },
            NewFlow {
                id: 8,
                message_id: 6,
                status: 4,
                attempts: 0,
                flow_time: 101,
                shard: "dq:{0}:\"in\"flight",
                node_id: "n",
                host: "h",
            },
        ];
        assert_eq!(
            flows_json(&flows),
            r#"[[7,5,3,1,100,"dq:{0}:\"in\"flight"],[8,6,4,0,101,"dq:{0}:\"in\"flight"]]"#
        );
        assert_eq!(flows_json(&[]), "[]");
    }

    #[test]
    fn group_updates_name_only_numbers() {
        let plain = sqlite_group_update(Status::Ready, None, 9, None, &[5, 6]);
        assert_eq!(
            plain,
            "UPDATE message SET status = 2, updated_time = 9 WHERE (status < 4 AND updated_time <= 9) AND id IN (5,6)"
        );
        let ended = sqlite_group_update(Status::Consumed, Some(2), 9, None, &[5]);
        assert!(
            ended.contains("live_biz_key = CASE WHEN status < 4 THEN NULL"),
            "{ended}"
        );
        assert!(ended.ends_with("id IN (5)"), "{ended}");
    }
}

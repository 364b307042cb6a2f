//! How a batch of status changes reaches each database: its flow rows, and
//! each message moved to its latest status (see [`super::write::apply_changes`]
//! for what is decided before).
//!
//! On SQLite and PostgreSQL the messages that end the batch in one shape
//! (the same status, and the same of count, due time and delivery given or
//! not) are moved by one UPDATE, each row with its own time, count and due
//! time joined from the batch's values: a few statements a batch, however
//! many milliseconds its single acks and cancels span. MySQL and MariaDB
//! take one UPDATE per group of messages that end the batch alike (the same
//! status, time, count and due time). On SQLite new messages'
//! rows and the flow rows travel as a few values bound once and read by
//! one statement (see [`packed`](super::packed)), and a message's status,
//! time and delivery count change in one row write. MySQL and MariaDB take
//! the flow rows through diesel, a few hundred a statement, and the count
//! in a second UPDATE (their UPDATE reads a column already set by an
//! earlier SET of the same statement).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::LazyLock;

use diesel::connection::SimpleConnection as _;
use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::sql_types::Bool;

use crate::journal::models::{NewFlow, NewMessage};
use crate::journal::schema::{message, message_flow};
use crate::message::Status;

use super::insert::INSERT_CHUNK;
use super::packed::{Kind, Layout, Packer, I16, I32, I64};

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
    /// The delivery the change itself belongs to (its own count), when it
    /// names one: it orders the change against the row's within `at`'s
    /// millisecond (see [`not_older`]).
    pub delivery: Option<i32>,
}

/// Whether a live row's last change is not newer than a change of
/// `status` made at `at` for the delivery `delivery`: SQL over the row's
/// `updated_time`, `attempts` and `status`, holding only numbers.
///
/// Changes of one message reach the journal by two lanes (the hand-outs'
/// and the changes callers wait for), so a later change may be written
/// first: an earlier millisecond never turns the row back. Within one
/// millisecond of Redis's clock (a nack sent the moment its poll answered)
/// the delivery decides: a delivery's hand-out (Consuming) comes after
/// everything of earlier deliveries, and its end (a failed delivery's
/// Delaying or Ready, or the promotion that follows it) after its hand-out.
/// So a row ranks `2 × attempts`, plus one unless it is Consuming; a
/// Consuming change of delivery `d` ranks `2d`, any other change `2d + 1`,
/// and takes the row when it ranks no lower (a first promotion names
/// delivery 0). A change that names no delivery (a push scheduled or
/// restored, a reschedule) goes by time alone.
pub(super) fn not_older(status: Status, delivery: Option<&str>, at: &str) -> String {
    match delivery {
        None => format!("updated_time <= {at}"),
        Some(d) if status == Status::Consuming => format!(
            "(updated_time < {at} OR (updated_time = {at} AND (attempts < {d} OR \
             (attempts = {d} AND status = {consuming}))))",
            consuming = Status::Consuming.code()
        ),
        Some(d) => format!("(updated_time < {at} OR (updated_time = {at} AND attempts <= {d}))"),
    }
}

/// Writes a batch's flow rows and row updates, inside the caller's
/// transaction. Two rules make the order of batches irrelevant where it
/// matters: a message already Consumed, Deleted or Dead keeps that status,
/// and a change older than the row's last one (`updated_time`, then within
/// its millisecond the delivery: [`not_older`]) does not turn it back; `attempts` only grows, and a recurring message past its
/// first occurrence takes counts only from changes not older than its row.
pub(super) trait ChangeWriter {
    /// New messages' rows; a bizKey already live refuses the whole call.
    fn insert_messages(&mut self, rows: &[NewMessage]) -> QueryResult<()>;
    fn insert_flows(&mut self, flows: &[NewFlow]) -> QueryResult<()>;
    fn update_rows(&mut self, updates: &[Update]) -> QueryResult<()>;
    /// Locks the message rows `ids` (sorted, distinct) in id order before
    /// a batch changes them, so two batches of status changes (two nodes'
    /// journals, or one node's two lanes) over the same rows take their
    /// locks in one order and never deadlock; their updates otherwise
    /// take the rows statement by statement in any order. SQLite has one writer at
    /// a time and locks nothing.
    fn lock_rows(&mut self, ids: &[i64]) -> QueryResult<()>;
}

/// A flow row on SQLite (see [`packed`](super::packed)): node and host
/// are the same for the whole batch.
const FLOW_LAYOUT: Layout = Layout {
    table: "message_flow",
    id: "id",
    packed: &[
        ("message_id", Kind::Int(I64)),
        ("status", Kind::Int(I16)),
        ("attempts", Kind::Int(I32)),
        ("flow_time", Kind::Int(I64)),
        ("shard", Kind::Text),
        ("due_time", Kind::OptInt(I64)),
    ],
    same: &["node_id", "host"],
};

/// A message's row on SQLite, as [`NewMessage`] names its fields.
const MESSAGE_LAYOUT: Layout = Layout {
    table: "message",
    id: "id",
    packed: &[
        ("topic", Kind::Text),
        ("biz_key", Kind::OptText),
        ("live_biz_key", Kind::OptText),
        ("body", Kind::Text),
        ("priority", Kind::Int(I32)),
        ("ttl", Kind::Int(I64)),
        ("delay_ms", Kind::Int(I64)),
        ("due_time", Kind::Int(I64)),
        ("create_time", Kind::Int(I64)),
        ("status", Kind::Int(I16)),
        ("attempts", Kind::Int(I32)),
        ("updated_time", Kind::Int(I64)),
        ("max_attempts", Kind::Int(I32)),
        ("retry", Kind::OptText),
        ("repeat_spec", Kind::OptText),
        ("occurrence", Kind::OptInt(I32)),
        ("occurrence_time", Kind::OptInt(I64)),
        ("msg_group", Kind::OptText),
    ],
    same: &[],
};

static FLOW_SQL: LazyLock<String> = LazyLock::new(|| FLOW_LAYOUT.insert_sql());
static MESSAGE_SQL: LazyLock<String> = LazyLock::new(|| MESSAGE_LAYOUT.insert_sql());

/// What the UPDATE of a shape reads per row: the row's values, as columns
/// of the batch's rows joined to `message` by `v_id` (the change's time
/// `v_at`, count `v_a`, due time `v_due`, delivery `v_d`).
const V_AT: &str = "v.v_at";
const V_ATTEMPTS: &str = "v.v_a";
const V_DUE: &str = "v.v_due";
const V_DELIVERY: &str = "v.v_d";

/// The UPDATE on SQLite and PostgreSQL of the messages that end the batch
/// in one shape, each with its own values read from `source` (`v`, see
/// [`V_AT`]). Every SET and the WHERE read the row as it was before the
/// statement. The row takes the status when it is live and the change is
/// not older than its last one (a terminal change ends any live row); it
/// takes the delivery count when that is higher and, for a recurring
/// message past its first occurrence, when the change is not older than
/// the row (which it is not once the row takes the status). One statement
/// a shape, not one per millisecond of the batch: single acks and cancels
/// each carry their own time.
fn shape_update(shape: &Shape, source: &str) -> String {
    let &(status, attempts, due, delivery) = shape;
    let at = V_AT;
    let takes = if status.is_terminal() {
        format!("status < {}", Status::FIRST_TERMINAL_CODE)
    } else {
        format!(
            "(status < {} AND {})",
            Status::FIRST_TERMINAL_CODE,
            not_older(status, delivery.then_some(V_DELIVERY), at)
        )
    };
    // When the row takes the count (a shape with one).
    let count = attempts.then(|| {
        format!(
            "(attempts < {V_ATTEMPTS} AND (occurrence IS NULL OR occurrence <= 1 OR updated_time <= {at} OR {takes}))"
        )
    });
    // Without a count every row the WHERE picks takes the status; with one,
    // a row may be picked for its count alone.
    let set = |value: &str, column: &str| match count {
        None => value.to_string(),
        Some(_) => format!("CASE WHEN {takes} THEN {value} ELSE {column} END"),
    };
    let mut sql = String::with_capacity(600);
    let _ = write!(
        sql,
        "UPDATE message SET status = {}, updated_time = {}",
        set(&status.code().to_string(), "status"),
        set(at, "updated_time")
    );
    if let Some(when) = &count {
        let _ = write!(
            sql,
            ", attempts = CASE WHEN {when} THEN {V_ATTEMPTS} ELSE attempts END"
        );
    }
    if status.is_terminal() {
        let _ = write!(sql, ", live_biz_key = {}", set("NULL", "live_biz_key"));
    } else if due {
        let _ = write!(sql, ", due_time = {}", set(V_DUE, "due_time"));
    }
    let _ = write!(sql, " FROM {source} WHERE message.id = v.v_id AND ");
    match &count {
        None => sql.push_str(&takes),
        Some(when) => {
            let _ = write!(sql, "({takes} OR {when})");
        }
    }
    sql
}

/// [`shape_update`] on SQLite for `rows`, their values written in the
/// statement (numbers only) as a VALUES list.
fn sqlite_shape_update(shape: &Shape, rows: &[&Update]) -> String {
    let mut values = String::with_capacity(16 + rows.len() * 48);
    values.push_str("(VALUES ");
    let opt = |v: Option<i64>| v.map_or("NULL".to_string(), |v| v.to_string());
    for (i, u) in rows.iter().enumerate() {
        let _ = write!(
            values,
            "{}({}, {}, {}, {}, {})",
            if i == 0 { "" } else { ", " },
            u.id,
            u.at,
            opt(u.attempts.map(i64::from)),
            opt(u.due),
            opt(u.delivery.map(i64::from)),
        );
    }
    values.push(')');
    let source = format!(
        "(SELECT column1 AS v_id, column2 AS v_at, column3 AS v_a, column4 AS v_due, \
         column5 AS v_d FROM {values}) AS v"
    );
    shape_update(shape, &source)
}

/// [`shape_update`]'s source on PostgreSQL: the rows' values bound as one
/// array a column, so a shape's statement is one round trip whatever the
/// batch's size (diesel does not keep raw statements prepared: the server
/// parses it each time, once a shape rather than once a millisecond).
const PG_SHAPE_SOURCE: &str = "unnest($1::bigint[], $2::bigint[], $3::integer[], $4::bigint[], \
     $5::integer[]) AS v(v_id, v_at, v_a, v_due, v_d)";

/// How messages end a batch, what the UPDATE of each reads from its rows:
/// (status, a delivery count, a due time, a delivery of its own).
type Shape = (Status, bool, bool, bool);

/// The batch's updates by shape.
fn shapes(updates: &[Update]) -> HashMap<Shape, Vec<&Update>> {
    let mut shapes: HashMap<Shape, Vec<&Update>> = HashMap::new();
    for u in updates {
        shapes
            .entry((
                u.status,
                u.attempts.is_some(),
                u.due.is_some(),
                u.delivery.is_some(),
            ))
            .or_default()
            .push(u);
    }
    shapes
}

/// How messages end a batch on MySQL and MariaDB, one UPDATE each:
/// (status, highest attempts, at, due again, the delivery of the change).
type Group = (Status, Option<i32>, i64, Option<i64>, Option<i32>);

/// Messages grouped by how they end the batch.
type Groups = HashMap<Group, Vec<i64>>;

fn groups(updates: &[Update]) -> Groups {
    let mut groups = Groups::new();
    for u in updates {
        groups
            .entry((u.status, u.attempts, u.at, u.due, u.delivery))
            .or_default()
            .push(u.id);
    }
    groups
}

impl ChangeWriter for diesel::sqlite::SqliteConnection {
    fn lock_rows(&mut self, _ids: &[i64]) -> QueryResult<()> {
        Ok(())
    }

    fn insert_messages(&mut self, rows: &[NewMessage]) -> QueryResult<()> {
        let mut p = Packer::new(&MESSAGE_LAYOUT, rows.len());
        for m in rows {
            p.row(m.id)
                .text(m.topic)
                .opt_text(m.biz_key)
                .opt_text(m.live_biz_key)
                .text(m.body)
                .int(m.priority.into(), I32)
                .int(m.ttl, I64)
                .int(m.delay_ms, I64)
                .int(m.due_time, I64)
                .int(m.create_time, I64)
                .int(m.status.into(), I16)
                .int(m.attempts.into(), I32)
                .int(m.updated_time, I64)
                .int(m.max_attempts.into(), I32)
                .opt_text(m.retry.as_deref())
                .opt_text(m.repeat_spec.as_deref())
                .opt_int(m.occurrence.map(i64::from), I32)
                .opt_int(m.occurrence_time, I64)
                .opt_text(m.msg_group);
        }
        p.insert(self, &MESSAGE_SQL, &[])?;
        Ok(())
    }

    fn insert_flows(&mut self, flows: &[NewFlow]) -> QueryResult<()> {
        let Some(first) = flows.first() else {
            return Ok(());
        };
        let mut p = Packer::new(&FLOW_LAYOUT, flows.len());
        for f in flows {
            p.row(f.id)
                .int(f.message_id, I64)
                .int(f.status.into(), I16)
                .int(f.attempts.into(), I32)
                .int(f.flow_time, I64)
                .text(f.shard)
                .opt_int(f.due_time, I64);
        }
        p.insert(self, &FLOW_SQL, &[first.node_id, first.host])?;
        Ok(())
    }

    fn update_rows(&mut self, updates: &[Update]) -> QueryResult<()> {
        for (shape, rows) in &shapes(updates) {
            for chunk in rows.chunks(INSERT_CHUNK) {
                self.batch_execute(&sqlite_shape_update(shape, chunk))?;
            }
        }
        Ok(())
    }
}

/// A batch's rows on PostgreSQL: one array a column, bound once, read by
/// `unnest` in one statement whatever the batch's size (the same short
/// text every time; diesel does not keep raw statements prepared, so the
/// server still parses it per batch), rather than a statement of a bind a
/// field whose text, and parsing, grows with the batch.
static PG_MESSAGE_SQL: LazyLock<String> = LazyLock::new(|| {
    pg_unnest_insert(
        "message",
        &[
            ("id", "bigint"),
            ("topic", "text"),
            ("biz_key", "text"),
            ("live_biz_key", "text"),
            ("body", "text"),
            ("priority", "integer"),
            ("ttl", "bigint"),
            ("delay_ms", "bigint"),
            ("due_time", "bigint"),
            ("create_time", "bigint"),
            ("status", "smallint"),
            ("attempts", "integer"),
            ("updated_time", "bigint"),
            ("max_attempts", "integer"),
            ("retry", "text"),
            ("repeat_spec", "text"),
            ("occurrence", "integer"),
            ("occurrence_time", "bigint"),
            ("msg_group", "text"),
        ],
        &[],
    )
});
static PG_FLOW_SQL: LazyLock<String> = LazyLock::new(|| {
    pg_unnest_insert(
        "message_flow",
        &[
            ("id", "bigint"),
            ("message_id", "bigint"),
            ("status", "smallint"),
            ("attempts", "integer"),
            ("flow_time", "bigint"),
            ("shard", "text"),
            ("due_time", "bigint"),
        ],
        &["node_id", "host"],
    )
});

/// `INSERT INTO table (columns, same) SELECT * , $n+1, … FROM unnest($1::type[], …)`:
/// the arrays bound in `columns`' order, then one value each for `same`.
fn pg_unnest_insert(table: &str, columns: &[(&str, &str)], same: &[&str]) -> String {
    let names: Vec<&str> = columns
        .iter()
        .map(|(n, _)| *n)
        .chain(same.iter().copied())
        .collect();
    let arrays: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, (_, t))| format!("${}::{t}[]", i + 1))
        .collect();
    let scalars: String = (0..same.len())
        .map(|i| format!(", ${}::text", columns.len() + i + 1))
        .collect();
    format!(
        "INSERT INTO {table} ({}) SELECT u.*{scalars} FROM unnest({}) AS u",
        names.join(", "),
        arrays.join(", ")
    )
}

/// PostgreSQL takes a batch's rows as arrays (above), and the changes of a
/// shape in one UPDATE that reads the row as it was, as SQLite's does.
impl ChangeWriter for diesel::pg::PgConnection {
    fn lock_rows(&mut self, ids: &[i64]) -> QueryResult<()> {
        // As strong as the UPDATE's own lock (a flow row's key check
        // beside it is not held up).
        for chunk in ids.chunks(8 * INSERT_CHUNK) {
            message::table
                .filter(message::id.eq_any(chunk))
                .order(message::id.asc())
                .select(message::id)
                .for_no_key_update()
                .load::<i64>(self)?;
        }
        Ok(())
    }

    fn insert_messages(&mut self, rows: &[NewMessage]) -> QueryResult<()> {
        use diesel::sql_types::{Array, BigInt, Integer, Nullable, SmallInt, Text};
        if rows.is_empty() {
            return Ok(());
        }
        fn col<'a, T>(rows: &'a [NewMessage<'a>], f: impl Fn(&'a NewMessage<'a>) -> T) -> Vec<T> {
            rows.iter().map(f).collect()
        }
        diesel::sql_query(PG_MESSAGE_SQL.as_str())
            .bind::<Array<BigInt>, _>(col(rows, |m| m.id))
            .bind::<Array<Text>, _>(col(rows, |m| m.topic))
            .bind::<Array<Nullable<Text>>, _>(col(rows, |m| m.biz_key))
            .bind::<Array<Nullable<Text>>, _>(col(rows, |m| m.live_biz_key))
            .bind::<Array<Text>, _>(col(rows, |m| m.body))
            .bind::<Array<Integer>, _>(col(rows, |m| m.priority))
            .bind::<Array<BigInt>, _>(col(rows, |m| m.ttl))
            .bind::<Array<BigInt>, _>(col(rows, |m| m.delay_ms))
            .bind::<Array<BigInt>, _>(col(rows, |m| m.due_time))
            .bind::<Array<BigInt>, _>(col(rows, |m| m.create_time))
            .bind::<Array<SmallInt>, _>(col(rows, |m| m.status))
            .bind::<Array<Integer>, _>(col(rows, |m| m.attempts))
            .bind::<Array<BigInt>, _>(col(rows, |m| m.updated_time))
            .bind::<Array<Integer>, _>(col(rows, |m| m.max_attempts))
            .bind::<Array<Nullable<Text>>, _>(col(rows, |m| m.retry.as_deref()))
            .bind::<Array<Nullable<Text>>, _>(col(rows, |m| m.repeat_spec.as_deref()))
            .bind::<Array<Nullable<Integer>>, _>(col(rows, |m| m.occurrence))
            .bind::<Array<Nullable<BigInt>>, _>(col(rows, |m| m.occurrence_time))
            .bind::<Array<Nullable<Text>>, _>(col(rows, |m| m.msg_group))
            .execute(self)?;
        Ok(())
    }

    fn insert_flows(&mut self, flows: &[NewFlow]) -> QueryResult<()> {
        use diesel::sql_types::{Array, BigInt, Integer, Nullable, SmallInt, Text};
        let Some(first) = flows.first() else {
            return Ok(());
        };
        for chunk in flows.chunks(8 * INSERT_CHUNK) {
            let col = |f: &dyn Fn(&NewFlow) -> i64| chunk.iter().map(f).collect::<Vec<i64>>();
            diesel::sql_query(PG_FLOW_SQL.as_str())
                .bind::<Array<BigInt>, _>(col(&|f| f.id))
                .bind::<Array<BigInt>, _>(col(&|f| f.message_id))
                .bind::<Array<SmallInt>, _>(chunk.iter().map(|f| f.status).collect::<Vec<i16>>())
                .bind::<Array<Integer>, _>(chunk.iter().map(|f| f.attempts).collect::<Vec<i32>>())
                .bind::<Array<BigInt>, _>(col(&|f| f.flow_time))
                .bind::<Array<Text>, _>(chunk.iter().map(|f| f.shard).collect::<Vec<&str>>())
                .bind::<Array<Nullable<BigInt>>, _>(
                    chunk
                        .iter()
                        .map(|f| f.due_time)
                        .collect::<Vec<Option<i64>>>(),
                )
                .bind::<Text, _>(first.node_id)
                .bind::<Text, _>(first.host)
                .execute(self)?;
        }
        Ok(())
    }

    fn update_rows(&mut self, updates: &[Update]) -> QueryResult<()> {
        use diesel::sql_types::{Array, BigInt, Integer, Nullable};
        for (shape, rows) in &shapes(updates) {
            let sql = shape_update(shape, PG_SHAPE_SOURCE);
            for chunk in rows.chunks(8 * INSERT_CHUNK) {
                diesel::sql_query(&sql)
                    .bind::<Array<BigInt>, _>(chunk.iter().map(|u| u.id).collect::<Vec<_>>())
                    .bind::<Array<BigInt>, _>(chunk.iter().map(|u| u.at).collect::<Vec<_>>())
                    .bind::<Array<Nullable<Integer>>, _>(
                        chunk.iter().map(|u| u.attempts).collect::<Vec<_>>(),
                    )
                    .bind::<Array<Nullable<BigInt>>, _>(
                        chunk.iter().map(|u| u.due).collect::<Vec<_>>(),
                    )
                    .bind::<Array<Nullable<Integer>>, _>(
                        chunk.iter().map(|u| u.delivery).collect::<Vec<_>>(),
                    )
                    .execute(self)?;
            }
        }
        Ok(())
    }
}

impl ChangeWriter for diesel::mysql::MysqlConnection {
    fn lock_rows(&mut self, ids: &[i64]) -> QueryResult<()> {
        for chunk in ids.chunks(INSERT_CHUNK) {
            message::table
                .filter(message::id.eq_any(chunk))
                .order(message::id.asc())
                .select(message::id)
                .for_update()
                .load::<i64>(self)?;
        }
        Ok(())
    }

    fn insert_messages(&mut self, rows: &[NewMessage]) -> QueryResult<()> {
        for chunk in rows.chunks(INSERT_CHUNK) {
            diesel::insert_into(message::table)
                .values(chunk)
                .execute(self)?;
        }
        Ok(())
    }

    fn insert_flows(&mut self, flows: &[NewFlow]) -> QueryResult<()> {
        for chunk in flows.chunks(INSERT_CHUNK) {
            diesel::insert_into(message_flow::table)
                .values(chunk)
                .execute(self)?;
        }
        Ok(())
    }

    fn update_rows(&mut self, updates: &[Update]) -> QueryResult<()> {
        for (&(status, attempts, at, due, delivery), ids) in &groups(updates) {
            let (d, at_text) = (delivery.map(|d| d.to_string()), at.to_string());
            let takes = not_older(status, d.as_deref(), &at_text);
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
                    diesel::update(target.filter(sql::<Bool>(&takes)))
                        .set((
                            message::status.eq(status.code()),
                            message::updated_time.eq(at),
                            message::due_time.eq(due),
                        ))
                        .execute(self)?;
                } else {
                    diesel::update(target.filter(sql::<Bool>(&takes)))
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
    fn flow_rows_come_back_as_written() {
        let flow = |id, message_id, status, attempts, flow_time, shard| NewFlow {
            id,
            message_id,
            status,
            attempts,
            flow_time,
            shard,
            node_id: "n\"1",
            host: "h\u{e9}",
            due_time: (id % 2 == 0).then_some(flow_time),
        };
        let quoted = "dq:{0}:\"in\"flight";
        let flows = [
            flow(7, 5, 3, 1, 100, quoted),
            flow(
                i64::MAX,
                i64::MIN,
                i16::MIN,
                i32::MAX,
                i64::MIN,
                "dq:{\u{e9}}:x",
            ),
            flow(-1, i64::MAX, i16::MAX, i32::MIN, i64::MAX, quoted),
            flow(0, 0, 0, 0, 0, ""),
        ];
        let mut c = diesel::sqlite::SqliteConnection::establish(":memory:").expect("memory");
        c.batch_execute(
            "CREATE TABLE message_flow (id INTEGER NOT NULL PRIMARY KEY, \
             message_id BIGINT NOT NULL, status SMALLINT NOT NULL, attempts INTEGER NOT NULL, \
             flow_time BIGINT NOT NULL, shard VARCHAR(128) NOT NULL, \
             node_id VARCHAR(128) NOT NULL, host VARCHAR(128) NOT NULL, due_time BIGINT NULL)",
        )
        .expect("table");
        c.insert_flows(&flows).expect("insert");
        c.insert_flows(&[]).expect("nothing");
        type Row = (i64, i64, i16, i32, i64, String, String, String, Option<i64>);
        let mut back: Vec<Row> = message_flow::table
            .select((
                message_flow::id,
                message_flow::message_id,
                message_flow::status,
                message_flow::attempts,
                message_flow::flow_time,
                message_flow::shard,
                message_flow::node_id,
                message_flow::host,
                message_flow::due_time,
            ))
            .load(&mut c)
            .expect("read");
        back.sort_by_key(|r| r.0);
        let mut want: Vec<Row> = flows
            .iter()
            .map(|f| {
                let text = |s: &str| s.to_string();
                let (shard, node, host) = (text(f.shard), text(f.node_id), text(f.host));
                (
                    f.id,
                    f.message_id,
                    f.status,
                    f.attempts,
                    f.flow_time,
                    shard,
                    node,
                    host,
                    f.due_time,
                )
            })
            .collect();
        want.sort_by_key(|r| r.0);
        assert_eq!(back, want);
    }

    fn update(id: i64, g: &Group) -> Update {
        let &(status, attempts, at, due, delivery) = g;
        Update {
            id,
            status,
            at,
            due,
            attempts,
            delivery,
        }
    }

    /// The one statement of `rows` (all of one shape) on SQLite.
    fn sqlite_update(rows: &[Update]) -> String {
        let by_shape = shapes(rows);
        assert_eq!(by_shape.len(), 1, "one shape");
        let (shape, rows) = by_shape.iter().next().expect("shape");
        sqlite_shape_update(shape, rows)
    }

    #[test]
    fn shape_updates_name_only_numbers() {
        let plain = sqlite_update(&[
            update(5, &(Status::Ready, None, 9, None, None)),
            update(6, &(Status::Ready, None, 11, None, None)),
        ]);
        assert_eq!(
            plain,
            "UPDATE message SET status = 2, updated_time = v.v_at FROM (SELECT column1 AS v_id, \
             column2 AS v_at, column3 AS v_a, column4 AS v_due, column5 AS v_d FROM \
             (VALUES (5, 9, NULL, NULL, NULL), (6, 11, NULL, NULL, NULL))) AS v \
             WHERE message.id = v.v_id AND (status < 4 AND updated_time <= v.v_at)"
        );
        let ended = sqlite_update(&[update(5, &(Status::Consumed, Some(2), 9, None, Some(2)))]);
        assert!(
            ended.contains("live_biz_key = CASE WHEN status < 4 THEN NULL"),
            "{ended}"
        );
        assert!(ended.contains("(VALUES (5, 9, 2, NULL, 2))"), "{ended}");
    }

    /// A fresh journal table with the message rows `rows`: (id, status,
    /// updated_time, attempts).
    fn table(rows: &[(i64, Status, i64, i32)]) -> diesel::sqlite::SqliteConnection {
        let mut c = diesel::sqlite::SqliteConnection::establish(":memory:").expect("memory");
        c.batch_execute(
            "CREATE TABLE message (id BIGINT PRIMARY KEY, status SMALLINT NOT NULL, \
             updated_time BIGINT NOT NULL, attempts INTEGER NOT NULL, due_time BIGINT NOT NULL, \
             occurrence INTEGER, live_biz_key TEXT)",
        )
        .expect("table");
        for (id, status, at, attempts) in rows {
            c.batch_execute(&format!(
                "INSERT INTO message VALUES ({id}, {}, {at}, {attempts}, 0, NULL, 'k')",
                status.code()
            ))
            .expect("row");
        }
        c
    }

    /// The table's rows by id: (id, status, updated_time, attempts,
    /// due_time, live_biz_key).
    fn read_rows(
        c: &mut diesel::sqlite::SqliteConnection,
    ) -> Vec<(i64, i16, i64, i32, i64, Option<String>)> {
        message::table
            .select((
                message::id,
                message::status,
                message::updated_time,
                message::attempts,
                message::due_time,
                message::live_biz_key,
            ))
            .order(message::id)
            .load(c)
            .expect("rows")
    }

    #[test]
    fn one_statement_gives_each_row_its_own_values() {
        // Three nacks in one statement, each with its own time, count and
        // due time; the second is older than its row and leaves it.
        let mut c = table(&[
            (1, Status::Consuming, 100, 1),
            (2, Status::Consuming, 300, 2),
            (3, Status::Consuming, 100, 3),
        ]);
        let rows = [
            update(1, &(Status::Delaying, Some(1), 200, Some(5_000), Some(1))),
            update(2, &(Status::Delaying, Some(1), 250, Some(6_000), Some(1))),
            update(3, &(Status::Delaying, Some(4), 210, Some(7_000), Some(4))),
        ];
        c.batch_execute(&sqlite_update(&rows)).expect("update");
        let (delaying, consuming) = (Status::Delaying.code(), Status::Consuming.code());
        let k = || Some("k".to_string());
        assert_eq!(
            read_rows(&mut c),
            [
                (1, delaying, 200, 1, 5_000, k()),
                (2, consuming, 300, 2, 0, k()),
                (3, delaying, 210, 4, 7_000, k()),
            ]
        );
    }

    #[test]
    fn a_batch_of_many_shapes_and_chunks_moves_every_row() {
        // 3,300 rows handed out: a third acked, a third nacked (due
        // again), a third handed out again, each with its own time; each
        // shape takes three statements of at most INSERT_CHUNK rows.
        let n = 3_300i64;
        assert!(n / 3 > 2 * INSERT_CHUNK as i64);
        let rows: Vec<(i64, Status, i64, i32)> =
            (1..=n).map(|id| (id, Status::Consuming, 100, 1)).collect();
        let mut c = table(&rows);
        let updates: Vec<Update> = (1..=n)
            .map(|id| match id % 3 {
                0 => update(id, &(Status::Consumed, Some(1), 200 + id, None, Some(1))),
                1 => update(
                    id,
                    &(
                        Status::Delaying,
                        Some(1),
                        200 + id,
                        Some(9_000 + id),
                        Some(1),
                    ),
                ),
                _ => update(id, &(Status::Consuming, Some(2), 200 + id, None, Some(2))),
            })
            .collect();
        c.update_rows(&updates).expect("update");
        let back = read_rows(&mut c);
        assert_eq!(back.len(), n as usize);
        for (id, status, at, attempts, due, key) in back {
            let want = match id % 3 {
                0 => (Status::Consumed.code(), 1, 0, None),
                1 => (
                    Status::Delaying.code(),
                    1,
                    9_000 + id,
                    Some("k".to_string()),
                ),
                _ => (Status::Consuming.code(), 2, 0, Some("k".to_string())),
            };
            assert_eq!((status, attempts, due, key), want, "message {id}");
            assert_eq!(at, 200 + id, "message {id}");
        }
    }

    /// Where a message's row ends when `changes` (groups of one message)
    /// are written one after the other, in every order: (status, attempts)
    /// per order.
    fn ends(from: (Status, i32, i64), changes: &[Group]) -> Vec<(i16, i32)> {
        let mut orders = vec![changes.to_vec()];
        if let [a, b] = changes {
            orders.push(vec![*b, *a]);
        }
        orders
            .into_iter()
            .map(|order| {
                let mut c = table(&[(5, from.0, from.2, from.1)]);
                for g in &order {
                    c.batch_execute(&sqlite_update(&[update(5, g)]))
                        .expect("update");
                }
                message::table
                    .select((message::status, message::attempts))
                    .first(&mut c)
                    .expect("row")
            })
            .collect()
    }

    #[test]
    fn changes_in_one_millisecond_land_in_any_order() {
        let delaying = Status::Delaying.code();
        // Handed out (its first delivery) and nacked in one millisecond.
        let handed: Group = (Status::Consuming, Some(1), 100, None, Some(1));
        let nacked: Group = (Status::Delaying, Some(1), 100, Some(5100), Some(1));
        assert_eq!(
            ends((Status::Ready, 0, 90), &[handed, nacked]),
            [(delaying, 1), (delaying, 1)]
        );
        // Nacked without a wait (ready again), and handed out again.
        let ready: Group = (Status::Ready, Some(1), 100, Some(100), Some(1));
        let again: Group = (Status::Consuming, Some(2), 100, None, Some(2));
        let consuming = Status::Consuming.code();
        assert_eq!(
            ends((Status::Consuming, 1, 90), &[ready, again]),
            [(consuming, 2), (consuming, 2)]
        );
        // A redelivery's promotion (carrying the count of the delivery that
        // failed) and the next hand-out.
        let promoted: Group = (Status::Ready, Some(1), 100, None, Some(1));
        assert_eq!(
            ends((Status::Delaying, 1, 90), &[promoted, again]),
            [(consuming, 2), (consuming, 2)]
        );
        // A first promotion and its hand-out.
        let first: Group = (Status::Ready, None, 100, None, Some(0));
        assert_eq!(
            ends((Status::Delaying, 0, 90), &[first, handed]),
            [(consuming, 1), (consuming, 1)]
        );
        // The same change written twice, and an earlier millisecond never
        // turns the row back.
        assert_eq!(
            ends((Status::Delaying, 0, 90), &[first, first]),
            [(Status::Ready.code(), 0), (Status::Ready.code(), 0)]
        );
        let earlier: Group = (Status::Consuming, Some(1), 99, None, Some(1));
        assert_eq!(
            ends((Status::Ready, 0, 90), &[earlier, nacked]),
            [(delaying, 1), (delaying, 1)]
        );
    }
}

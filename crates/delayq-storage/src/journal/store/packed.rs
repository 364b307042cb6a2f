//! Many rows into SQLite with one statement and a few bound values, none
//! built, bound or stepped per row.
//!
//! The rows' ids travel as a JSON array of numbers: `json_each` yields one
//! row each, its `key` the row's index. Every other value sits in a blob of
//! fixed-width fields, a row after another: a number as decimal text padded
//! with zeros to its width (the sign counted), a text as its offset and
//! length in a second blob holding the texts end to end, a nullable value
//! behind a one-byte flag (`N` for NULL). `substr` of a blob counts bytes,
//! so each field is found at once, and neither blob is parsed: a row of
//! JSON arrays made SQLite parse each row's array again for every column.
//!
//! [`Layout`] names the columns and their kinds once; [`Layout::insert_sql`]
//! writes the statement and [`Packer`] the values it binds.

use std::fmt::Write as _;

use diesel::prelude::*;
use diesel::sql_types::{Binary, Text};
use diesel::sqlite::SqliteConnection;

/// How a column's value is packed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Kind {
    /// An integer of at most this many characters, sign included.
    Int(usize),
    /// The same, or NULL.
    OptInt(usize),
    Text,
    OptText,
}

pub(super) const I16: usize = 6;
pub(super) const I32: usize = 11;
pub(super) const I64: usize = 20;
/// A text's offset and length in the text blob.
const SPAN: usize = 2 * I64;

impl Kind {
    fn width(self) -> usize {
        match self {
            Kind::Int(w) => w,
            Kind::OptInt(w) => w + 1,
            Kind::Text => SPAN,
            Kind::OptText => SPAN + 1,
        }
    }
}

/// A table's columns as one statement inserts them: the first is the id
/// (from the JSON array), then `packed` in the order [`Packer`] is fed, then
/// `same`, bound once for every row.
pub(super) struct Layout {
    pub table: &'static str,
    pub id: &'static str,
    pub packed: &'static [(&'static str, Kind)],
    pub same: &'static [&'static str],
}

impl Layout {
    fn row_width(&self) -> usize {
        self.packed.iter().map(|(_, k)| k.width()).sum()
    }

    /// `INSERT INTO table (…) SELECT … FROM json_each(?1)`: `?1` the ids,
    /// `?2` the fixed-width blob, `?3` the text blob, `?4…` the `same`
    /// values.
    pub fn insert_sql(&self) -> String {
        let row = self.row_width();
        let at = |p: usize| format!("j.key * {row} + {}", p + 1);
        let int = |p: usize, w: usize| format!("CAST(substr(?2, {}, {w}) AS INTEGER)", at(p));
        let text = |p: usize| {
            format!(
                "CAST(substr(?3, {} + 1, {}) AS TEXT)",
                int(p, I64),
                int(p + I64, I64)
            )
        };
        let null_or = |p: usize, value: String| {
            format!(
                "CASE WHEN substr(?2, {}, 1) = x'4E' THEN NULL ELSE {value} END",
                at(p)
            )
        };
        let mut columns = vec![self.id];
        let mut values = vec!["j.value".to_string()];
        let mut p = 0;
        for (name, kind) in self.packed {
            columns.push(name);
            values.push(match *kind {
                Kind::Int(w) => int(p, w),
                Kind::OptInt(w) => null_or(p, int(p + 1, w)),
                Kind::Text => text(p),
                Kind::OptText => null_or(p, text(p + 1)),
            });
            p += kind.width();
        }
        for (i, name) in self.same.iter().enumerate() {
            columns.push(name);
            values.push(format!("?{}", i + 4));
        }
        format!(
            "INSERT INTO {} ({}) SELECT {} FROM json_each(?1) AS j",
            self.table,
            columns.join(", "),
            values.join(", ")
        )
    }
}

/// The values of one statement, a row at a time: [`Packer::row`] with the
/// id, then each packed column in the layout's order.
pub(super) struct Packer {
    ids: String,
    fixed: String,
    text: Vec<u8>,
    rows: usize,
}

impl Packer {
    pub fn new(layout: &Layout, rows: usize) -> Self {
        Packer {
            ids: String::with_capacity(rows * 21 + 2),
            fixed: String::with_capacity(rows * layout.row_width()),
            text: Vec::new(),
            rows: 0,
        }
    }

    pub fn row(&mut self, id: i64) -> &mut Self {
        let sep = if self.rows == 0 { "" } else { "," };
        let _ = write!(self.ids, "{sep}{id}");
        self.rows += 1;
        self
    }

    /// An integer of a column of kind `Int(width)`.
    pub fn int(&mut self, value: i64, width: usize) -> &mut Self {
        let _ = write!(self.fixed, "{value:0width$}");
        self
    }

    pub fn opt_int(&mut self, value: Option<i64>, width: usize) -> &mut Self {
        match value {
            Some(v) => {
                self.fixed.push(' ');
                self.int(v, width)
            }
            None => self.null(width),
        }
    }

    pub fn text(&mut self, value: &str) -> &mut Self {
        let offset = self.text.len() as i64;
        self.text.extend_from_slice(value.as_bytes());
        self.int(offset, I64).int(value.len() as i64, I64)
    }

    pub fn opt_text(&mut self, value: Option<&str>) -> &mut Self {
        match value {
            Some(v) => {
                self.fixed.push(' ');
                self.text(v)
            }
            None => self.null(SPAN),
        }
    }

    fn null(&mut self, width: usize) -> &mut Self {
        self.fixed.push('N');
        self.fixed.extend(std::iter::repeat_n('0', width));
        self
    }

    /// Runs `sql` (from [`Layout::insert_sql`]) with these rows and the
    /// `same` values; no rows, no statement.
    pub fn insert(self, c: &mut SqliteConnection, sql: &str, same: &[&str]) -> QueryResult<usize> {
        if self.rows == 0 {
            return Ok(0);
        }
        let mut ids = self.ids;
        ids.insert(0, '[');
        ids.push(']');
        let query = diesel::sql_query(sql)
            .bind::<Text, _>(ids)
            .bind::<Binary, _>(self.fixed.into_bytes())
            .bind::<Binary, _>(self.text);
        match same {
            [] => query.execute(c),
            [a] => query.bind::<Text, _>(*a).execute(c),
            [a, b] => query.bind::<Text, _>(*a).bind::<Text, _>(*b).execute(c),
            _ => unreachable!("a layout binds at most two values for every row"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diesel::connection::SimpleConnection as _;

    const LAYOUT: Layout = Layout {
        table: "t",
        id: "id",
        packed: &[
            ("a", Kind::Int(I64)),
            ("b", Kind::OptInt(I32)),
            ("c", Kind::Text),
            ("d", Kind::OptText),
        ],
        same: &["e"],
    };

    type Row = (i64, i64, Option<i32>, String, Option<String>, String);

    #[test]
    fn rows_come_back_as_packed() {
        let rows: Vec<Row> = vec![
            (
                1,
                i64::MIN,
                Some(i32::MIN),
                "é\"'\\".into(),
                None,
                "same".into(),
            ),
            (
                i64::MAX,
                i64::MAX,
                None,
                String::new(),
                Some(String::new()),
                "same".into(),
            ),
            (
                -5,
                0,
                Some(i32::MAX),
                "x".repeat(70_000),
                Some("N".into()),
                "same".into(),
            ),
        ];
        let mut c = SqliteConnection::establish(":memory:").expect("memory");
        c.batch_execute(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, a BIGINT NOT NULL, b INTEGER, \
             c TEXT NOT NULL, d TEXT, e TEXT NOT NULL)",
        )
        .expect("table");
        let mut p = Packer::new(&LAYOUT, rows.len());
        for r in &rows {
            p.row(r.0)
                .int(r.1, I64)
                .opt_int(r.2.map(i64::from), I32)
                .text(&r.3)
                .opt_text(r.4.as_deref());
        }
        let sql = LAYOUT.insert_sql();
        assert_eq!(p.insert(&mut c, &sql, &["same"]).expect("insert"), 3);
        let none = Packer::new(&LAYOUT, 0);
        assert_eq!(none.insert(&mut c, &sql, &["same"]).expect("nothing"), 0);
        #[derive(QueryableByName, Debug, PartialEq)]
        struct Back {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            id: i64,
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            a: i64,
            #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Integer>)]
            b: Option<i32>,
            #[diesel(sql_type = Text)]
            c: String,
            #[diesel(sql_type = diesel::sql_types::Nullable<Text>)]
            d: Option<String>,
            #[diesel(sql_type = Text)]
            e: String,
            #[diesel(sql_type = Text)]
            types: String,
        }
        let back: Vec<Back> = diesel::sql_query(
            "SELECT id, a, b, c, d, e, typeof(a) || typeof(b) || typeof(c) || typeof(d) AS types \
             FROM t ORDER BY id",
        )
        .load(&mut c)
        .expect("read");
        let mut want = rows.clone();
        want.sort_by_key(|r| r.0);
        let got: Vec<Row> = back
            .iter()
            .map(|b| (b.id, b.a, b.b, b.c.clone(), b.d.clone(), b.e.clone()))
            .collect();
        assert_eq!(got, want);
        let types: Vec<&str> = back.iter().map(|b| b.types.as_str()).collect();
        assert_eq!(
            types,
            [
                "integerintegertexttext",
                "integerintegertextnull",
                "integernulltexttext"
            ]
        );
    }
}

//! Transactional enqueue: messages written by the application into a table
//! of its own database, in its own transactions, and pushed by delayq once
//! committed, each exactly once.
//!
//! `delayq outbox install --database-url URL` makes the table in the
//! application's PostgreSQL or MySQL/MariaDB database ([`table`]):
//!
//! | column | what |
//! |---|---|
//! | `id` | BIGINT, given by the database (identity / `AUTO_INCREMENT`) |
//! | `message` | JSON: one message, exactly as `POST /push` takes it (`topic`, `body`, `delay` or `deliverAt`, `bizKey`, …) |
//! | `created_at` | BIGINT epoch ms, given by the database when the row is inserted |
//! | `error` | NULL; set by delayq when it refuses the row (why, as `code: message`), which it then leaves alone |
//!
//! beside `TABLE_source`, one row naming the outbox (an id made at the
//! install), and on PostgreSQL a trigger that notifies `TABLE` at each
//! commit of new rows.
//!
//! A node started with `--outbox-url` runs an ingester ([`ingest`]: two
//! passes at once; every node may, each takes other rows): in one
//! transaction of the application's database a pass takes up to
//! `--outbox-batch` committed rows (`FOR UPDATE SKIP LOCKED`, oldest
//! first; passes side by side push in no set order), pushes their
//! messages, deletes the rows, and commits. The push writes, in the journal's transaction
//! that inserts the messages, which rows they came from (`outbox_done`,
//! keyed by the outbox's id and the row's, with its `created_at` so that
//! a row id used again is another row; deleted once the row's delete
//! committed): a row whose node stopped
//! between the push and the delete is found there by the next pass and
//! deleted without a second push. So:
//!
//! - a row of a transaction rolled back is never seen;
//! - a committed row is pushed once, and deleted once that push is durable;
//! - while the journal or Redis is out, rows wait in the outbox (the pass
//!   rolls back and is tried again after a back-off): nothing is lost;
//! - a row the journal's database refuses is found by pushing the pass's
//!   rows one by one, and marked refused: it holds up no other row.
//!
//! What a row's push does is what `POST /push` would do with its message:
//! a live `(topic, bizKey)` keeps its first message. A delay counts from
//! the push, not from the row's insert: an outbox that waited (delayq out)
//! delivers that much later; `deliverAt` names an instant. A row delayq
//! cannot push (not a JSON object, a rule broken, `onDuplicate` other
//! than `keep`) gets its `error` set and stays, for the application to
//! read and delete.

pub mod ingest;
pub mod table;

pub use ingest::{start, Ingester, Settings};

/// The outbox table's name unless `--outbox-table` or `--table` says
/// otherwise.
pub const TABLE: &str = "delayq_outbox";

/// An outbox table's name: a plain SQL identifier (letters, digits and
/// `_`, not starting with a digit), at most 48 characters so that its
/// companions' names (`TABLE_source`, `TABLE_notify`) fit every database.
pub fn parse_table(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 48
        && s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "'{s}' is not a table name: 1 to 48 of A-Z a-z 0-9 _, not starting with a digit"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::parse_table;

    #[test]
    fn table_names_are_plain_identifiers() {
        assert!(parse_table("delayq_outbox").is_ok());
        assert!(parse_table("_Out2").is_ok());
        for bad in ["", "2x", "a-b", "a;drop", "a b", "é", &"x".repeat(49)] {
            assert!(parse_table(bad).is_err(), "{bad:?}");
        }
    }
}

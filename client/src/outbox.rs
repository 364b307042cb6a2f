//! Transactional enqueue: a message written into the application's own
//! database, in the transaction that makes it true, and pushed by delayq
//! once that transaction committed (`delayq outbox install`, then
//! `delayq serve --outbox-url …`; the server's docs: "Transactional
//! enqueue: the outbox").
//!
//! [`outbox_row`] gives the text of the row's `message` column for a
//! [`NewMessage`] built as for [`Client::push`](crate::Client::push); the
//! application inserts it with its own database library, inside its own
//! transaction:
//!
//! ```
//! use std::time::Duration;
//! use delayq_client::{outbox, NewMessage};
//!
//! let reminder = NewMessage::new("reminders", "order 42")
//!     .delay(Duration::from_secs(24 * 3600))
//!     .biz_key("order-42");
//! let row = outbox::outbox_row(&reminder).unwrap();
//! // In the transaction that writes order 42 (PostgreSQL):
//! //   sqlx::query(outbox::INSERT_POSTGRES).bind(&row).execute(&mut *tx).await?;
//! assert!(row.contains(r#""bizKey":"order-42""#));
//! ```

use crate::message::{NewMessage, OnDuplicate};
use crate::Error;

/// The insert of one row into the outbox on PostgreSQL (`$1`: the text of
/// [`outbox_row`]).
pub const INSERT_POSTGRES: &str = "INSERT INTO delayq_outbox (message) VALUES ($1::json)";
/// The same on MySQL/MariaDB.
pub const INSERT_MYSQL: &str = "INSERT INTO delayq_outbox (message) VALUES (?)";

/// The JSON text of an outbox row's `message` column: the message as
/// [`Client::push`](crate::Client::push) sends it. `onDuplicate` `replace`
/// and `extend` are refused ([`Error::Outbox`]): the server refuses them in
/// an outbox row (a row keeps the live message of its bizKey, as a plain
/// push does).
pub fn outbox_row(message: &NewMessage) -> Result<String, Error> {
    if matches!(
        message.on_duplicate,
        Some(OnDuplicate::Replace | OnDuplicate::Extend)
    ) {
        return Err(Error::Outbox {
            reason: "onDuplicate replace and extend are not taken from an outbox row".into(),
        });
    }
    serde_json::to_string(message).map_err(|e| Error::Outbox {
        reason: e.to_string(),
    })
}

//! The journal's queries, written once for every backend. Each function is
//! synchronous and runs on the JournalActor's threads.
//!
//! [`write`]: inserting messages and applying status changes; [`read`]:
//! messages, their histories and pages of them; [`dead`]: dead letters
//! brought back or deleted; [`health`]: whether the database answers and
//! takes writes. What they share: [`change`] (the status change, the node
//! that wrote it, the flow row made from it) and [`insert`] (bounded
//! statements, the live holder of a bizKey).

mod batch;
pub mod change;
pub mod dead;
pub mod health;
pub mod insert;
mod moves;
mod packed;
pub mod read;
pub mod retention;
pub mod write;

pub use change::{NodeInfo, StatusChange};
pub use dead::{dead_page, delete_dead, requeue_dead, DeleteDeadOutcome, RequeueOutcome};
pub use health::{ping, probe_write};
pub use insert::{InsertOutcome, OutboxRows};
pub use moves::{move_messages, replace_message, unreplace, JournalMove, Replacement, RowBefore};
pub use read::{
    count_live, count_waiting_beyond, find, find_with_history, full_pages, live_by_biz_key,
    live_by_biz_key_prefix, live_page, live_states, rows_of, states_of, topic_counts, topic_known,
    topic_page, waiting_page, waiting_scan_page, RowState,
};
pub use write::{apply_changes, forget_outbox_rows, insert_messages, unlist_waiting};

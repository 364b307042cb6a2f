//! The journal handle and its JournalActor.
//!
//! [`Journal`] is the handle the rest of delayq uses. It feeds two batchers:
//! - inserts are group-committed: pushes that arrive while a commit is under
//!   way go together into the next transaction, and each push is answered
//!   only after its own transaction committed;
//! - status changes are gathered for a few milliseconds (or until many are
//!   waiting) and written together; a failed write is retried with backoff
//!   and never dropped. Changes a caller waits for (ack, cancel) take a lane
//!   of their own, so they do not queue behind a burst of Ready/Consuming
//!   rows; the journal's update rules make the two lanes' order irrelevant
//!   (see [`crate::journal::store::apply_changes`]).
//! - the changes waiting to be written are counted: past `--journal-backlog`
//!   the shard actors stop promoting due messages ([`Journal::lagging`])
//!   until the journal catches up, so a database outage costs lateness,
//!   not unbounded memory. Nothing is dropped: at shutdown what the database
//!   would not take in time is handed back ([`Journal::close`]) and kept in
//!   Redis until a node writes it (see `crate::node`'s spill).
//! - a batch the database refuses while it answers (a constraint, a
//!   trigger) is split until the refused changes are alone; they are set
//!   aside and reported (`GET /admin/journal`), the rest is written. A group
//!   commit of pushes that fails so is tried again push by push, so only the
//!   refused push gets the error.
//!
//! The JournalActor does the blocking work (diesel) on a SyncArbiter, away
//! from the HTTP and shard threads; it calls the storage layer in
//! [`crate::journal`], which knows nothing of actors.
//!
//! Layout: [`handle`] (the [`Journal`] handle), [`batches`] (the group
//! commit and the flow writers), [`backlog`] (what waits to be written, and
//! what was refused), [`actor`] (the JournalActor and its [`messages`]),
//! [`write_lock`] (SQLite's single writer).

pub mod actor;
pub mod backlog;
mod batches;
pub mod handle;
pub mod holds;
pub mod messages;
pub mod write_lock;

pub use actor::JournalActor;
pub use backlog::{BacklogView, Refused, DEFAULT_BACKLOG};
pub use handle::{Journal, JournalOptions, DEFAULT_NICE};
pub use holds::Hold;
pub use messages::{
    DeleteDead, InsertMessages, LiveByBizKey, MoveMessages, ProbeWrite, Read, RecordFlow,
    RequeueDead,
};
pub use write_lock::WriteLock;

//! Reconciliation: the journal and Redis compared, message by message, and
//! put right on request. A restore only adds what Redis lacks and only runs
//! when the data set marker is gone; Redis can also lose part of its data
//! with the marker intact (an AOF `everysec` crash, a replica promoted
//! before it caught up, an evicted key), and a message answered 200 must
//! still be delivered.
//!
//! Two passes, each in small pages with a pause after each page (on a
//! serving node pages of 100, over a Redis connection of its own, and a
//! pause of at least 2 ms and four times as long as the page took, see
//! [`Options`] and [`crate::node`]), so the scans that deliver messages
//! keep their lateness:
//! - the journal's live rows (not Consumed, Deleted or Dead), in keyset
//!   pages by id, each page looked up in Redis with one pipeline: is the
//!   record in its shard's hash, is there a tombstone, and where does it sit
//!   (delay zset, ready queue, in-flight zset);
//! - each shard's message hash, walked with HSCAN, the ids looked up in the
//!   journal: Redis holding what the journal says is finished, or what the
//!   journal does not know.
//!
//! The journal lags Redis by a few milliseconds (its flow rows are written
//! in batches), and a push is in the journal before Redis has it, so only
//! rows whose last change is older than the grace period are compared, and
//! a Redis state is held against the journal only when it is older than
//! the grace period too (an ack deadline tells when a message was handed
//! out, a due time when it became ready). Every difference found is looked
//! at once more, both sides read again, before it is reported or repaired.
//!
//! | kind | what | repair |
//! |---|---|---|
//! | `missing` | live in the journal; Redis has no record and no tombstone | scheduled again like a restore (`Schedule`: idempotent, tombstone-aware; an overdue one is due at once), recorded Delaying |
//! | `unscheduled` | Redis holds the record, but in no delay zset, ready queue or in-flight zset | put back in its delay zset with its record's score, or at the journal's due time when that is later (a failed delivery's retry time, which the record does not keep) (replace.lua) |
//! | `finishedInJournal` | Redis holds it; the journal says Consumed, Deleted or Dead (Redis lost an ack's or a cancel's write, its data set marker intact) | removed from Redis, leaving a tombstone (purge.lua); the journal's row is read once more right before, so a dead letter requeued meanwhile stays |
//! | `statusMismatch` | both hold it live, in different statuses | the journal follows Redis (the live state): a status change is recorded |
//! | `unknown` | Redis holds it; the journal has no such row | reported only: the journal may have lost the row (a database restored from a backup) and Redis holds the only copy |
//! | `unjournaled` | Redis ended it (acked, cancelled, dead: its end waits in `{P:s}:unjournaled`) and the journal never heard: the node that made the change stopped first | the end is written to the journal, so nothing brings the message back (an end the journal refuses, a trigger or a constraint, stays in Redis: counted, not repaired, and the run goes on) |
//!
//! The leader runs it every `--reconcile-interval` and repairs by itself
//! what keeps messages from being delivered (`missing`, `unscheduled`) and
//! what would bring an ended one back (`unjournaled`, `finishedInJournal`),
//! each seen twice (the second look);
//! `GET /admin/reconcile?repair=true` and `delayq reconcile --repair`
//! repair every kind but `unknown`.
//!
//! This module holds what a difference is (its kinds, the rule that
//! classifies a row and its Redis state) and fills the report, whose shape
//! is `delayq-proto`'s; [`reconciler`] holds the [`Reconciler`], which
//! reads both sides, settles and repairs.

mod classify;
pub mod fence;
mod reconciler;

pub use classify::Options;
pub use reconciler::Reconciler;

/// What a reconciliation puts right, and the report: the shapes `GET
/// /admin/reconcile` answers with.
pub use delayq_proto::{Difference, ReconcileReport, Repair, Sample};

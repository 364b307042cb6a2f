//! The backlog: the status changes waiting to be written, shared by the
//! handle and the flow writers, and what the database refused.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::journal::store::StatusChange;
use crate::message::now_ms;

/// Default of `--journal-backlog`: status changes queued before promotion
/// pauses (about 100 bytes each).
pub const DEFAULT_BACKLOG: usize = 200_000;
/// Refused changes kept for `GET /admin/journal`.
pub(super) const POISON_KEPT: usize = 1_000;

/// A status change the database refused while it answered, and the
/// journal's queue as `GET /admin/journal` shows it.
pub use delayq_proto::{BacklogView, Refused};

/// What waits to be written, shared by the handle and the writers.
#[derive(Default)]
pub(super) struct Backlog {
    /// Status changes queued and not yet written (or set aside).
    pub(super) pending: AtomicUsize,
    pub(super) limit: usize,
    /// Shutting down: a write that fails after this (epoch ms) gives its
    /// changes back instead of retrying.
    pub(super) closing_at: AtomicU64,
    pub(super) closing: AtomicBool,
    /// Changes given back at shutdown.
    pub(super) unwritten: Mutex<Vec<StatusChange>>,
    pub(super) refused: Mutex<VecDeque<Refused>>,
    pub(super) refused_total: AtomicU64,
    /// When a flow write last went through (epoch ms).
    pub(super) last_write_ok: std::sync::atomic::AtomicI64,
    /// Since when flow writes have been failing for want of the database
    /// (epoch ms; 0: they are not).
    pub(super) failing_since: std::sync::atomic::AtomicI64,
    /// Since when the flow write under way has been waiting for the
    /// database (epoch ms; 0: none is under way): a database that hangs
    /// rather than fails.
    pub(super) writing_since: std::sync::atomic::AtomicI64,
}

impl Backlog {
    pub(super) fn give_up(&self) -> bool {
        self.closing.load(Ordering::Acquire)
            && now_ms() as u64 >= self.closing_at.load(Ordering::Acquire)
    }
}

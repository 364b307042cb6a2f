//! Snowflake ids: 41 bits of milliseconds since [`MessageId::EPOCH_MS`], 10
//! bits of worker id, 12 bits of sequence.
//!
//! Two live processes must never share a worker id, so a worker id is a
//! lease (the server's `cluster::worker`): taken from ZooKeeper by a cluster node,
//! from Redis by a standalone node or a command-line tool. The generator
//! hands out ids only while its lease is confirmed: each renewal extends a
//! deadline on the monotonic clock, so a process that was paused past its
//! lease (SIGSTOP, a long GC-like stall) refuses ids the moment it resumes,
//! before it could collide with the worker's next holder.
//!
//! Ids continue above everything the worker issued before, even across a
//! restart with a clock that stepped back: every renewal stores a
//! *reserved* millisecond a little ahead of the clock with the lease, the
//! generator never issues past it, and the next holder starts above it.
//!
//! The journal's flow rows (status changes) take their ids from the same
//! generator, but a lapsed lease does not stop them at once
//! ([`IdGenerator::next_flow_id`]): the milliseconds up to the reservation
//! stay this process's (the next holder starts above them), so acks and
//! cancels keep reaching the journal through a ZooKeeper outage of up to
//! [`RESERVE_AHEAD_MS`], while pushes wait for a confirmed lease.

use std::sync::Mutex;
use std::time::Instant;

use crate::clock::local_ms as now_ms;

pub use delayq_proto::{BadMessageId, MessageId, ID_PATTERN};

/// How far ahead of the clock a renewal reserves milliseconds.
pub const RESERVE_AHEAD_MS: i64 = 10_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("this node holds no Snowflake worker id lease right now ({0}); it accepts no pushes until it has one")]
pub struct NoWorkerId(pub &'static str);

#[derive(Debug)]
struct State {
    worker: Option<i64>,
    /// The worker of the last lease granted, kept when it lapses: its
    /// reserved milliseconds are still this process's.
    last_worker: Option<i64>,
    /// Last millisecond used (relative to the epoch) and the sequence in it.
    last: i64,
    seq: i64,
    /// Ids may use milliseconds up to this one (epoch ms): what the lease
    /// store has recorded as reserved.
    reserved_ms: i64,
    /// The lease is confirmed until then (None: forever, fixed workers).
    valid_until: Option<Instant>,
}

/// Hands out Snowflake ids. Never repeats an id within one worker: when the
/// clock steps back it keeps counting from the last millisecond it used.
#[derive(Debug)]
pub struct IdGenerator {
    state: Mutex<State>,
}

impl IdGenerator {
    pub const MAX_WORKER: u16 = 1023;

    /// A generator with a fixed worker and no lease (unit tests, tools that
    /// own their worker by other means).
    pub fn new(worker: u16) -> Self {
        assert!(worker <= Self::MAX_WORKER, "worker id must be 0..=1023");
        IdGenerator {
            state: Mutex::new(State {
                worker: Some(worker as i64),
                last_worker: Some(worker as i64),
                last: 0,
                seq: 0,
                reserved_ms: i64::MAX,
                valid_until: None,
            }),
        }
    }

    /// A generator that issues nothing until [`IdGenerator::grant`].
    pub fn leased() -> Self {
        IdGenerator {
            state: Mutex::new(State {
                worker: None,
                last_worker: None,
                last: 0,
                seq: 0,
                reserved_ms: 0,
                valid_until: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A lease on `worker` was taken: ids continue above `floor_ms` (epoch
    /// ms, the previous holder's reservation) and may use milliseconds up to
    /// `reserved_ms`, until `valid_until`.
    pub fn grant(&self, worker: u16, floor_ms: i64, reserved_ms: i64, valid_until: Instant) {
        let mut st = self.lock();
        if st.last_worker != Some(worker as i64) {
            st.last = 0;
            st.seq = 0;
        }
        st.worker = Some(worker as i64);
        st.last_worker = Some(worker as i64);
        let floor = floor_ms + 1 - MessageId::EPOCH_MS;
        if floor > st.last {
            st.last = floor;
            st.seq = -1;
        }
        st.reserved_ms = reserved_ms;
        st.valid_until = Some(valid_until);
    }

    /// The lease was renewed.
    pub fn renewed(&self, reserved_ms: i64, valid_until: Instant) {
        let mut st = self.lock();
        st.reserved_ms = st.reserved_ms.max(reserved_ms);
        st.valid_until = Some(valid_until);
    }

    /// The lease is gone: no more ids until the next grant.
    pub fn revoke(&self) {
        let mut st = self.lock();
        st.worker = None;
        st.valid_until = None;
    }

    /// The worker id, while the lease holds.
    pub fn worker(&self) -> Option<u16> {
        let st = self.lock();
        let valid = st.valid_until.is_none_or(|v| Instant::now() < v);
        st.worker.filter(|_| valid).map(|w| w as u16)
    }

    /// The last millisecond (epoch ms) this generator used.
    pub fn last_ms(&self) -> i64 {
        self.lock().last + MessageId::EPOCH_MS
    }

    pub fn next_id(&self) -> Result<MessageId, NoWorkerId> {
        let mut st = self.lock();
        let Some(worker) = st.worker else {
            return Err(NoWorkerId("not leased"));
        };
        if st.valid_until.is_some_and(|v| Instant::now() >= v) {
            return Err(NoWorkerId("the lease was not renewed in time"));
        }
        Self::mint(&mut st, worker)
    }

    /// An id for a journal flow row: like [`Self::next_id`], and also
    /// after the lease lapsed (a ZooKeeper session lost, a renewal late),
    /// within the milliseconds it reserved: the next holder of the worker
    /// starts above them, so no id repeats. Status changes then keep
    /// reaching the journal for up to [`RESERVE_AHEAD_MS`] without a lease.
    pub fn next_flow_id(&self) -> Result<MessageId, NoWorkerId> {
        let mut st = self.lock();
        let Some(worker) = st.worker.or(st.last_worker) else {
            return Err(NoWorkerId("not leased"));
        };
        Self::mint(&mut st, worker)
    }

    fn mint(st: &mut State, worker: i64) -> Result<MessageId, NoWorkerId> {
        let now = now_ms() - MessageId::EPOCH_MS;
        if now > st.last {
            st.last = now;
            st.seq = 0;
        } else if st.seq < 4095 {
            st.seq += 1;
        } else {
            // Sequence exhausted (or the clock went back): borrow the next millisecond.
            st.last += 1;
            st.seq = 0;
        }
        if st.last + MessageId::EPOCH_MS > st.reserved_ms {
            // Not reserved in the lease store yet: wait for the next renewal.
            return Err(NoWorkerId("the clock ran past the reserved milliseconds"));
        }
        Ok(MessageId((st.last << 22) | (worker << 12) | st.seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ids_are_unique_increasing_and_carry_the_worker() {
        let g = IdGenerator::new(513);
        let ids: Vec<MessageId> = (0..20_000).map(|_| g.next_id().unwrap()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert!(ids.iter().all(|id| (id.0 >> 12) & 1023 == 513));
        let ms = (ids[0].0 >> 22) + MessageId::EPOCH_MS;
        assert!((ms - now_ms()).abs() < 5_000);
        assert!(MessageId::first_at(ms) <= ids[0]);
        assert!(MessageId::first_at(ms + 1) > ids[0]);
    }

    #[test]
    fn flow_ids_outlive_a_lapsed_lease_within_its_reservation() {
        let g = IdGenerator::leased();
        assert!(g.next_flow_id().is_err(), "never leased: nothing");
        let soon = Instant::now() + Duration::from_secs(60);
        g.grant(9, 0, now_ms() + RESERVE_AHEAD_MS, soon);
        let before = g.next_id().unwrap();
        g.revoke();
        assert!(g.next_id().is_err(), "no message id without a lease");
        let flow = g.next_flow_id().unwrap();
        assert!(flow > before);
        assert_eq!((flow.0 >> 12) & 1023, 9);
        // Past the reservation, not even a flow id.
        let g = IdGenerator::leased();
        g.grant(9, 0, now_ms() - 1, Instant::now());
        assert!(g.next_flow_id().is_err());
    }

    #[test]
    fn a_leased_generator_needs_a_live_lease() {
        let g = IdGenerator::leased();
        assert!(g.next_id().is_err());
        let soon = Instant::now() + Duration::from_secs(60);
        g.grant(7, 0, now_ms() + RESERVE_AHEAD_MS, soon);
        assert_eq!((g.next_id().unwrap().0 >> 12) & 1023, 7);
        g.renewed(now_ms() + RESERVE_AHEAD_MS, Instant::now());
        assert!(g.next_id().is_err(), "an expired lease issues nothing");
        g.renewed(now_ms() + RESERVE_AHEAD_MS, soon);
        assert!(g.next_id().is_ok());
        g.revoke();
        assert!(g.next_id().is_err());
    }

    #[test]
    fn ids_continue_above_the_previous_holders_reservation() {
        // The previous holder reserved up to a minute ahead (its clock was
        // ahead, or ours stepped back): our ids start above that.
        let floor = now_ms() + 60_000;
        let g = IdGenerator::leased();
        let soon = Instant::now() + Duration::from_secs(60);
        g.grant(3, floor, floor + RESERVE_AHEAD_MS, soon);
        let id = g.next_id().unwrap();
        assert!((id.0 >> 22) + MessageId::EPOCH_MS > floor);
        // Nothing past the reservation.
        let g = IdGenerator::leased();
        g.grant(3, 0, now_ms() - 1, soon);
        assert!(g.next_id().is_err());
    }
}

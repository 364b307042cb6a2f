//! What a reconciliation looks for: each kind of difference between the
//! journal and Redis for one message, how a row and what Redis holds are
//! told apart, and how a reconciliation runs (its options and pace).

use std::time::Duration;

use crate::journal::store::RowState;
use crate::message::Status;
use crate::redis::inspect::{End, Held, Place};

/// Differences looked at again together.
pub(super) const RECHECK_BATCH: usize = 1_000;
/// How long a difference must last before it counts: the journal's flow
/// batches land within milliseconds.
pub(super) const RECHECK_AFTER: Duration = Duration::from_millis(500);
/// Ids shown per kind of difference.
pub(super) const SAMPLE: usize = 20;
/// Named on the flow rows a repair writes.
pub(super) const FLOW_SHARD: &str = "reconcile";

use delayq_proto::{Difference, ReconcileReport, Repair};

/// How a reconciliation runs.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Rows changed (and Redis states reached) more recently are left out.
    pub grace: Duration,
    /// Journal rows per page (and records per HSCAN step).
    pub page: usize,
    /// The least pause after each page, for the scans' sake.
    pub pause: Duration,
    /// After each page, also pause this many times as long as the page
    /// took: a reconciliation then takes at most about 1 / (1 + idle) of
    /// the machine's time while it runs, however fast the machine is.
    pub idle: u32,
}

/// One difference of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Missing,
    Unscheduled,
    FinishedInJournal,
    Unknown,
    /// The journal says `journal`; Redis holds it as `redis` (due at `due`
    /// when scheduled).
    StatusMismatch {
        journal: Status,
        redis: Status,
        due: Option<i64>,
    },
    /// Redis ended it; the journal did not record the end.
    Unjournaled(End),
}

impl Kind {
    /// Whether `repair` puts this kind right.
    pub(super) fn repaired_by(self, repair: Repair) -> bool {
        match repair {
            Repair::None => false,
            Repair::Delivery => matches!(
                self,
                Kind::Missing | Kind::Unscheduled | Kind::Unjournaled(_) | Kind::FinishedInJournal
            ),
            Repair::All => !matches!(self, Kind::Unknown),
        }
    }

    /// The report's count of this kind.
    pub(super) fn of(self, report: &mut ReconcileReport) -> &mut Difference {
        match self {
            Kind::Missing => &mut report.missing,
            Kind::Unscheduled => &mut report.unscheduled,
            Kind::FinishedInJournal => &mut report.finished_in_journal,
            Kind::Unknown => &mut report.unknown,
            Kind::StatusMismatch { .. } => &mut report.status_mismatch,
            Kind::Unjournaled(_) => &mut report.unjournaled,
        }
    }
}

/// Compares one message's journal row (None: no row) with what Redis holds
/// of it. `cutoff` is now minus the grace period: a state reached after it
/// may be one the other side has not heard of yet. A message waiting in
/// the journal alone (WaitPut) due after `far` is not expected in Redis
/// yet: the horizon loader schedules it as it comes near (see
/// [`crate::horizon`]).
pub(super) fn classify(row: Option<&RowState>, held: Held, cutoff: i64, far: i64) -> Option<Kind> {
    let Some(row) = row else {
        return matches!(held, Held::Record(_)).then_some(Kind::Unknown);
    };
    if let Held::Unjournaled(end) = held {
        // An end the node that made it has not journaled yet, or never
        // will (it stopped): once it is older than the grace period, the
        // journal is told, whatever it says now (a terminal row only
        // needs Redis to forget the entry).
        return (end.at < cutoff).then_some(Kind::Unjournaled(end));
    }
    if row.updated_time >= cutoff {
        return None;
    }
    let journal = row.status();
    if journal == Status::WaitPut && row.due_time > far && matches!(held, Held::Absent) {
        return None;
    }
    if journal.is_terminal() {
        return matches!(held, Held::Record(_)).then_some(Kind::FinishedInJournal);
    }
    let place = match held {
        Held::Absent => return Some(Kind::Missing),
        Held::Unjournaled(_) => unreachable!("handled above"),
        // Acked or cancelled in Redis lately: the journal is catching up.
        Held::Finished => return None,
        Held::Record(Place::Nowhere) => return Some(Kind::Unscheduled),
        Held::Record(p) => p,
    };
    // The end of a delivery (a nack, an expired ack deadline) came before
    // its deadline: once that is older than the grace period, so is the end.
    let delivery_over = row.updated_time + row.ttl < cutoff;
    let (redis, due, settled) = match place {
        Place::Delay { due } => (
            Status::Delaying,
            Some(due),
            journal != Status::Consuming || delivery_over,
        ),
        Place::Ready => (
            Status::Ready,
            None,
            match journal {
                Status::Consuming => delivery_over,
                _ => row.due_time < cutoff,
            },
        ),
        Place::InFlight { deadline } => (Status::Consuming, None, deadline - row.ttl < cutoff),
        Place::Nowhere => unreachable!("handled above"),
    };
    (redis != journal && settled).then_some(Kind::StatusMismatch {
        journal,
        redis,
        due,
    })
}

#[cfg(test)]
mod tests {
    /// No horizon: every live message belongs in Redis.
    const NEVER: i64 = i64::MAX;
    use super::*;

    fn row(status: Status, updated: i64, due: i64) -> RowState {
        RowState {
            id: 1,
            topic: "t".into(),
            status: status.code(),
            updated_time: updated,
            due_time: due,
            ttl: 1_000,
        }
    }

    const CUT: i64 = 100_000;

    #[test]
    fn recent_rows_are_left_alone() {
        let r = row(Status::Delaying, CUT, CUT + 50_000);
        assert_eq!(classify(Some(&r), Held::Absent, CUT, NEVER), None);
    }

    #[test]
    fn a_message_waiting_beyond_the_horizon_is_not_missing() {
        let old = CUT - 10_000;
        let far = CUT + 3_600_000;
        let waiting = row(Status::WaitPut, old, far + 1);
        assert_eq!(classify(Some(&waiting), Held::Absent, CUT, far), None);
        // Within the horizon it should be in Redis by now.
        let near = row(Status::WaitPut, old, far - 1);
        assert_eq!(
            classify(Some(&near), Held::Absent, CUT, far),
            Some(Kind::Missing)
        );
        // Only a waiting message: one scheduled before is missing.
        let delaying = row(Status::Delaying, old, far + 1);
        assert_eq!(
            classify(Some(&delaying), Held::Absent, CUT, far),
            Some(Kind::Missing)
        );
    }

    #[test]
    fn kinds() {
        let old = CUT - 10_000;
        let delaying = row(Status::Delaying, old, CUT + 50_000);
        assert_eq!(
            classify(Some(&delaying), Held::Absent, CUT, NEVER),
            Some(Kind::Missing)
        );
        assert_eq!(classify(Some(&delaying), Held::Finished, CUT, NEVER), None);
        assert_eq!(
            classify(Some(&delaying), Held::Record(Place::Nowhere), CUT, NEVER),
            Some(Kind::Unscheduled)
        );
        let due = CUT + 50_000;
        assert_eq!(
            classify(
                Some(&delaying),
                Held::Record(Place::Delay { due }),
                CUT,
                NEVER
            ),
            None
        );
        assert_eq!(
            classify(None, Held::Record(Place::Nowhere), CUT, NEVER),
            Some(Kind::Unknown)
        );
        assert_eq!(classify(None, Held::Finished, CUT, NEVER), None);
        let consumed = row(Status::Consumed, old, old);
        assert_eq!(
            classify(Some(&consumed), Held::Record(Place::Ready), CUT, NEVER),
            Some(Kind::FinishedInJournal)
        );
        assert_eq!(classify(Some(&consumed), Held::Finished, CUT, NEVER), None);
    }

    #[test]
    fn status_mismatches_wait_for_both_sides_to_settle() {
        let old = CUT - 10_000;
        // Handed out long ago; the journal still says Delaying.
        let delaying = row(Status::Delaying, old, old);
        let long_ago = Held::Record(Place::InFlight {
            deadline: old + 1_000,
        });
        assert_eq!(
            classify(Some(&delaying), long_ago, CUT, NEVER),
            Some(Kind::StatusMismatch {
                journal: Status::Delaying,
                redis: Status::Consuming,
                due: None
            })
        );
        // Handed out a moment ago: its Consuming row may be on its way.
        let just_now = Held::Record(Place::InFlight {
            deadline: CUT + 1_000,
        });
        assert_eq!(classify(Some(&delaying), just_now, CUT, NEVER), None);
        // Delaying in the journal, ready in Redis: only once its due time
        // is older than the grace period.
        let due_now = row(Status::Delaying, old, CUT + 5);
        assert_eq!(
            classify(Some(&due_now), Held::Record(Place::Ready), CUT, NEVER),
            None
        );
        assert!(classify(Some(&delaying), Held::Record(Place::Ready), CUT, NEVER).is_some());
        // Consuming in the journal, scheduled again in Redis: only once the
        // delivery's ack deadline is older than the grace period.
        let consuming = row(Status::Consuming, CUT - 500, old);
        let again = Held::Record(Place::Delay { due: CUT + 9_000 });
        assert_eq!(classify(Some(&consuming), again, CUT, NEVER), None);
        let consuming = row(Status::Consuming, old, old);
        assert_eq!(
            classify(Some(&consuming), again, CUT, NEVER),
            Some(Kind::StatusMismatch {
                journal: Status::Consuming,
                redis: Status::Delaying,
                due: Some(CUT + 9_000)
            })
        );
    }
}

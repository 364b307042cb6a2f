//! The history: every operation the clients made, with its invocation and
//! completion on one monotonic clock of the test host and its result, and
//! every fault the nemesis made, with when it began and healed.

use std::sync::{Mutex, OnceLock};
use std::time::Instant;

static BASE: OnceLock<(Instant, i64)> = OnceLock::new();

fn base() -> &'static (Instant, i64) {
    BASE.get_or_init(|| (Instant::now(), crate::common::now_ms()))
}

/// The test host's time: µs on its monotonic clock since the checker
/// started.
pub fn now() -> i64 {
    base().0.elapsed().as_micros() as i64
}

/// A wall-clock time (ms since the epoch, as Redis on this host tells
/// it) on the history's scale (µs).
pub fn from_wall_ms(ms: i64) -> i64 {
    (ms - base().1) * 1000
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Res {
    /// Answered 2xx: applied as answered.
    Ok,
    /// Answered 4xx: definitely not applied.
    Fail,
    /// No answer, a timeout, a cut connection or a 5xx: it may have been
    /// applied.
    Unknown,
}

impl Res {
    pub fn of(status: Option<u16>) -> Res {
        match status {
            Some(200..=299) => Res::Ok,
            Some(400..=499) => Res::Fail,
            _ => Res::Unknown,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Res::Ok => "ok",
            Res::Fail => "fail",
            Res::Unknown => "unknown",
        }
    }

    /// Applied, or may have been.
    pub fn maybe(self) -> bool {
        self != Res::Fail
    }
}

#[derive(Debug, Clone)]
pub struct Pushed {
    /// The id answered (none when the push got no definite answer).
    pub id: Option<String>,
    pub topic: String,
    pub body: String,
    pub delay: i64,
    pub biz_key: Option<String>,
    /// Answered with the id of a live message of the same bizKey.
    pub duplicate: bool,
    /// Debounce: a push again on a bizKey pushed before, with
    /// `onDuplicate` `replace` (a new body and delay) or `extend` (a new
    /// delay).
    pub on_duplicate: Option<OnDuplicate>,
    /// Its answer when it was a duplicate: `replaced`, `extended`,
    /// `not_later` or `in_flight`, and the due time answered (wall ms)
    /// with the first three.
    pub result: Option<String>,
    pub due_time: Option<i64>,
    /// Its ordered group (of the main topic), if any.
    pub group: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDuplicate {
    Replace,
    Extend,
}

impl OnDuplicate {
    pub fn name(self) -> &'static str {
        match self {
            OnDuplicate::Replace => "replace",
            OnDuplicate::Extend => "extend",
        }
    }
}

impl Pushed {
    /// Answered ok as the given result on a live message (the answer's id).
    pub fn answered(&self, result: &str) -> bool {
        self.duplicate && self.result.as_deref() == Some(result)
    }
}

#[derive(Debug, Clone)]
pub struct Got {
    pub id: String,
    pub topic: String,
    pub body: String,
    pub receipt: String,
    pub ttl: i64,
    /// The group the delivery named.
    pub group: Option<String>,
}

impl Got {
    /// When it was handed out, by Redis's clock (the receipt's deadline
    /// less the ttl), on the history's scale.
    pub fn claimed(&self) -> Option<i64> {
        let deadline: i64 = self.receipt.split('-').nth(1)?.parse().ok()?;
        Some(from_wall_ms(deadline - self.ttl))
    }

    pub fn deadline(&self) -> Option<i64> {
        let deadline: i64 = self.receipt.split('-').nth(1)?.parse().ok()?;
        Some(from_wall_ms(deadline))
    }
}

#[derive(Debug, Clone)]
pub enum CancelBy {
    Id(String),
    BizKey {
        topic: String,
        key: String,
    },
    /// Every live message of the topic whose bizKey starts with `prefix`
    /// (the answer counts them, it does not name them).
    Prefix {
        topic: String,
        prefix: String,
    },
}

#[derive(Debug, Clone)]
pub enum What {
    Push {
        msgs: Vec<Pushed>,
    },
    /// A poll, with the acks it carried (`consumed`: answered so).
    Poll {
        consumer: usize,
        topic: String,
        got: Vec<Got>,
        acks: Vec<(String, String, bool)>,
    },
    Ack {
        id: String,
        receipt: String,
        consumed: bool,
    },
    Nack {
        id: String,
        receipt: String,
    },
    /// `deleted`: the ids answered `deleted`; `counted`: a prefix
    /// cancel's answered count of deleted messages (it names none).
    Cancel {
        by: CancelBy,
        deleted: Vec<String>,
        counted: Option<u64>,
    },
    Reschedule {
        id: String,
        delay: i64,
        rescheduled: bool,
    },
    Pause {
        topic: String,
    },
    Resume {
        topic: String,
    },
}

impl What {
    pub fn kind(&self) -> &'static str {
        match self {
            What::Push { msgs } if msgs.len() > 1 => "push_batch",
            What::Push { msgs } if msgs[0].on_duplicate == Some(OnDuplicate::Replace) => {
                "push_replace"
            }
            What::Push { msgs } if msgs[0].on_duplicate == Some(OnDuplicate::Extend) => {
                "push_extend"
            }
            What::Push { .. } => "push",
            What::Poll { acks, .. } if !acks.is_empty() => "poll_with_acks",
            What::Poll { .. } => "poll",
            What::Ack { .. } => "ack",
            What::Nack { .. } => "nack",
            What::Cancel {
                by: CancelBy::Id(_),
                ..
            } => "cancel_by_id",
            What::Cancel {
                by: CancelBy::Prefix { .. },
                ..
            } => "cancel_by_prefix",
            What::Cancel { .. } => "cancel_by_bizkey",
            What::Reschedule { .. } => "reschedule",
            What::Pause { .. } => "pause",
            What::Resume { .. } => "resume",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Op {
    pub invoke: i64,
    pub complete: i64,
    pub res: Res,
    /// The node's port.
    pub node: u16,
    pub what: What,
}

/// How long a resumed Redis Cluster master that was failed over while it
/// hung may serve its old data (measured: up to about 2 s).
pub const STALE_MASTER_MS: i64 = 3_000;

#[derive(Debug, Clone)]
pub struct Fault {
    pub kind: &'static str,
    pub from: i64,
    pub to: i64,
}

impl Fault {
    /// Redis lost writes (restarted empty, from an older snapshot, a
    /// lagging replica promoted, or a Redis Cluster master failed over).
    pub fn redis_lost(&self) -> bool {
        matches!(
            self.kind,
            "redis_restart_empty"
                | "redis_older_snapshot"
                | "redis_replica_promoted"
                | "redis_master_hung"
        )
    }

    /// When what Redis lost may still be served: a Redis Cluster master
    /// failed over while it hung serves its old data for a while after it
    /// resumes, until it learns of the failover
    /// ([`STALE_MASTER_MS`]; docs/src/concepts.md, "When Redis loses its last writes").
    pub fn stale_until(&self) -> i64 {
        if self.master_hung() {
            self.to + STALE_MASTER_MS * 1000
        } else {
            self.to
        }
    }

    /// A Redis Cluster master hung past the node timeout and failed over.
    pub fn master_hung(&self) -> bool {
        self.kind == "redis_master_hung"
    }

    /// A node was killed and started again.
    pub fn restarted_node(&self) -> bool {
        self.kind == "node_kill9" || self.kind.starts_with("node_clock_")
    }

    /// A node stopped running for a while: killed (and started again) or
    /// frozen.
    pub fn stopped_node(&self) -> bool {
        self.restarted_node() || self.kind == "node_sigstop"
    }

    /// The journal was out of reach of some node.
    pub fn journal_away(&self) -> bool {
        matches!(
            self.kind,
            "database_partition" | "database_down" | "database_read_only"
        )
    }
}

#[derive(Default)]
pub struct History {
    pub ops: Mutex<Vec<Op>>,
    pub faults: Mutex<Vec<Fault>>,
}

impl History {
    pub fn op(&self, invoke: i64, res: Res, node: u16, what: What) {
        let complete = now();
        self.ops.lock().unwrap().push(Op {
            invoke,
            complete,
            res,
            node,
            what,
        });
    }

    pub fn fault(&self, kind: &'static str, from: i64) {
        let to = now();
        self.faults.lock().unwrap().push(Fault { kind, from, to });
    }
}

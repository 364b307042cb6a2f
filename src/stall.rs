//! A process that did not run for a while (SIGSTOP, a paused VM, a swap
//! storm, a hung disk under its executable) finds requests waiting in its
//! sockets when it resumes, whose senders gave up long ago: nginx answered
//! them 504 after 1 to 2.5 s (a poll after its timeout + 1 s), and the client may
//! have sent them again to another node. Applying them now would accept a
//! push twice (its retry went elsewhere; a bizKey only guards while the
//! first copy is live) and hand messages to consumers that are gone, to
//! come back only after their ttl.
//!
//! So a thread beats every [`BEAT`] on the monotonic clock; a beat that
//! comes [`STALL`] or more after the last one means the process was not
//! running. From then, for [`GRACE`], and at any moment the beat is
//! [`STALL`] overdue (the requests may be handled before the beat thread
//! runs again), [`stalled`] says so: the API refuses every request that
//! could change something with 503 `node_stalled`, polls claim nothing, and
//! `/ready` fails. A refusal is always safe: nothing is applied and the
//! client may send it again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How often the beat thread beats.
const BEAT: Duration = Duration::from_millis(50);
/// A gap this long between beats is a stall: shorter than the 2.5 s nginx
/// waits for a push and the 3 s it waits for the shortest long poll, so
/// those it gave up on are refused (an ack it gave up on after 1 s and the
/// node applies late does no harm: the message is consumed).
pub const STALL: Duration = Duration::from_secs(2);
/// How long after a stall the requests found waiting are refused: they are
/// all read within milliseconds of the process resuming.
const GRACE: Duration = Duration::from_secs(1);

struct Beats {
    origin: Instant,
    /// Milliseconds since `origin` of the last beat.
    last: AtomicU64,
    /// Until when (ms since `origin`) requests are refused.
    refuse_until: AtomicU64,
    /// How long the last stall lasted (ms).
    last_stall: AtomicU64,
    stalls: AtomicU64,
}

static BEATS: OnceLock<Beats> = OnceLock::new();

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// Starts the beat thread (once per process; later calls do nothing).
pub fn start() {
    let mut started = false;
    let beats = BEATS.get_or_init(|| {
        started = true;
        Beats {
            origin: Instant::now(),
            last: AtomicU64::new(0),
            refuse_until: AtomicU64::new(0),
            last_stall: AtomicU64::new(0),
            stalls: AtomicU64::new(0),
        }
    });
    if !started {
        return;
    }
    std::thread::Builder::new()
        .name("stall-watch".into())
        .spawn(move || loop {
            std::thread::sleep(BEAT);
            let now = ms(beats.origin.elapsed());
            let gap = now.saturating_sub(beats.last.load(Ordering::Acquire));
            if gap >= ms(STALL) {
                beats.last_stall.store(gap, Ordering::Release);
                beats.refuse_until.store(now + ms(GRACE), Ordering::Release);
                beats.stalls.fetch_add(1, Ordering::AcqRel);
                tracing::warn!(
                    stalled_ms = gap,
                    "this process did not run for {:.1} s (stopped, a paused VM, swapping?): the requests found waiting are refused for {} ms, as their senders gave up",
                    gap as f64 / 1000.0,
                    ms(GRACE)
                );
            }
            beats.last.store(now, Ordering::Release);
        })
        .expect("spawn the stall-watch thread");
}

/// Why the process refuses requests right now, if it does: it has just
/// resumed from a stall (or is in one the beat thread has not seen yet).
pub fn stalled() -> Option<String> {
    let beats = BEATS.get()?;
    let now = ms(beats.origin.elapsed());
    let overdue = now.saturating_sub(beats.last.load(Ordering::Acquire));
    if overdue >= ms(STALL) {
        return Some(format!(
            "this node did not run for {:.1} s and has just resumed; send the request again",
            overdue as f64 / 1000.0
        ));
    }
    if now < beats.refuse_until.load(Ordering::Acquire) {
        return Some(format!(
            "this node did not run for {:.1} s and has just resumed; send the request again",
            beats.last_stall.load(Ordering::Acquire) as f64 / 1000.0
        ));
    }
    None
}

/// Stalls seen since the process started.
pub fn count() -> u64 {
    BEATS.get().map_or(0, |b| b.stalls.load(Ordering::Acquire))
}

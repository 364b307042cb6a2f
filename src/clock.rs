//! One clock for the cluster: Redis's.
//!
//! Every decision that compares a time with a due time or a deadline is
//! made on Redis's clock. The Lua scripts read it themselves (`TIME`):
//! promotion, expiry of in-flight messages, ack deadlines and tombstone
//! times never use a node's wall clock. What a node computes before it
//! talks to Redis (a push's due time from its `delay`, a `deliverAt` in
//! the past, a recurring message's next occurrence, the shard actor's
//! sleep until the next due time) uses [`now_ms`], this node's estimate of
//! Redis's clock:
//!
//! - every [`PROBE`] the node reads `TIME` and notes when, on the
//!   *monotonic* clock, it sent the request. Redis read its clock after
//!   that instant, so `redis time + (monotonic now - sent)` is never behind
//!   Redis's clock: an estimate that errs late, by at most the round trip.
//! - of the samples of the last two windows of [`WINDOW`], the tightest
//!   (smallest) bound is used, so one slow round trip costs nothing;
//! - between samples the estimate moves with the monotonic clock, so a
//!   node's wall clock that is wrong, or is stepped by NTP, changes
//!   nothing.
//!
//! What is still assumed: Redis's own clock is right (consumers compare
//! delivery times with due times on their clocks; run NTP on the Redis
//! host), and a node's monotonic clock runs at the rate of real time over a
//! few seconds. A node whose wall clock differs from Redis's by more than
//! [`SKEW_WARN_MS`] says so in its log (at most once a minute), in
//! `GET /admin/cluster` (`clock`) and in `/metrics`
//! (`delayq_clock_offset_seconds`); the node works the same either way.
//!
//! Before the first sample (start-up, tools that have not read Redis yet)
//! the wall clock is used. Snowflake ids ([`crate::ids`]) keep the wall
//! clock: they need to be unique and roughly time-ordered, not exact.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a node reads Redis's clock.
pub const PROBE: Duration = Duration::from_millis(500);
/// Samples are kept in windows this long; the best of the current and the
/// previous window counts.
pub const WINDOW: Duration = Duration::from_secs(2);
/// A wall clock this far from Redis's (either way) is reported.
pub const SKEW_WARN_MS: i64 = 500;

struct Estimate {
    /// When the process started, on the monotonic clock: the origin of
    /// the `base` values.
    origin: Instant,
    /// Tightest `redis_us - sent_us` (µs since `origin`) of the current
    /// window, and of the previous one.
    current: Option<i64>,
    previous: Option<i64>,
    window_started: Instant,
    /// The wall clock's offset from Redis's at the last sample (µs,
    /// Redis minus wall).
    wall_offset_us: Option<i64>,
    last_warned: Option<Instant>,
}

static ESTIMATE: Mutex<Option<Estimate>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Estimate) -> T) -> T {
    let mut guard = ESTIMATE.lock().unwrap_or_else(|p| p.into_inner());
    let e = guard.get_or_insert_with(|| {
        let now = Instant::now();
        Estimate {
            origin: now,
            current: None,
            previous: None,
            window_started: now,
            wall_offset_us: None,
            last_warned: None,
        }
    });
    f(e)
}

/// This process's wall clock, epoch ms.
pub fn local_ms() -> i64 {
    local_us() / 1000
}

/// This process's wall clock, epoch µs.
pub fn local_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// The cluster's clock (Redis's, estimated), epoch µs; the wall clock
/// until Redis's was read once.
pub fn now_us() -> i64 {
    with(|e| {
        let base = match (e.current, e.previous) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match base {
            Some(base) => base + e.origin.elapsed().as_micros() as i64,
            None => local_us(),
        }
    })
}

/// The cluster's clock (Redis's, estimated), epoch ms.
pub fn now_ms() -> i64 {
    now_us() / 1000
}

/// Notes a reading of Redis's clock: `redis_us` (epoch µs) was read by
/// Redis after `sent` (this process's monotonic clock).
pub fn observe(sent: Instant, redis_us: i64) {
    let wall = local_us();
    let warn = with(|e| {
        let base = redis_us - micros_since(e.origin, sent);
        if e.window_started.elapsed() >= WINDOW {
            e.previous = e.current.take();
            e.window_started = Instant::now();
        }
        e.current = Some(e.current.map_or(base, |c| c.min(base)));
        // Redis's clock now, by the estimate, against the wall clock now.
        let est = base + e.origin.elapsed().as_micros() as i64;
        let offset = est - wall;
        e.wall_offset_us = Some(offset);
        let skewed = (offset / 1000).abs() > SKEW_WARN_MS;
        let due = e
            .last_warned
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(60));
        if skewed && due {
            e.last_warned = Some(Instant::now());
            Some(offset / 1000)
        } else {
            None
        }
    });
    crate::metrics::metrics().clock_offset(offset_ms().unwrap_or(0));
    if let Some(ms) = warn {
        tracing::warn!(
            offset_ms = ms,
            bound_ms = SKEW_WARN_MS,
            "this node's wall clock differs from Redis's; delayq schedules on Redis's clock, \
             so nothing is delivered early, but check NTP on this host and on Redis's"
        );
    }
}

/// `t` in µs since `origin`; negative when `t` is earlier. The first
/// reading was sent before the estimate (and its origin) existed: clamping
/// that to 0 would put the estimate behind Redis's clock by the round trip.
fn micros_since(origin: Instant, t: Instant) -> i64 {
    match t.checked_duration_since(origin) {
        Some(d) => d.as_micros() as i64,
        None => -(origin.duration_since(t).as_micros() as i64),
    }
}

/// Redis's clock minus this node's wall clock (ms), once read.
pub fn offset_ms() -> Option<i64> {
    with(|e| e.wall_offset_us.map(|o| o / 1000))
}

/// What `GET /admin/cluster` shows of the clock.
#[derive(Debug, Clone, Copy, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClockView {
    /// Redis's clock minus this node's wall clock (ms); null before the
    /// first reading.
    pub offset_ms: Option<i64>,
    /// Whether that is beyond the bound.
    pub skewed: bool,
    pub bound_ms: i64,
    /// The cluster's clock as this node estimates it (epoch ms).
    pub now: i64,
}

pub fn view() -> ClockView {
    let offset_ms = offset_ms();
    ClockView {
        offset_ms,
        skewed: offset_ms.is_some_and(|o| o.abs() > SKEW_WARN_MS),
        bound_ms: SKEW_WARN_MS,
        now: now_ms(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_sent_before_the_origin_counts_from_before_it() {
        let origin = Instant::now();
        let sent = origin.checked_sub(Duration::from_millis(6)).unwrap();
        assert_eq!(micros_since(origin, sent), -6_000);
        let later = origin + Duration::from_millis(3);
        assert_eq!(micros_since(origin, later), 3_000);
    }

    #[test]
    fn follows_redis_and_errs_late() {
        // Redis 5 s behind the wall clock.
        let sent = Instant::now();
        let redis = local_us() - 5_000_000;
        observe(sent, redis);
        let now = now_us();
        assert!(now >= redis, "never behind the reading");
        assert!(now - redis < 1_000_000, "{}", now - redis);
        let off = offset_ms().unwrap();
        assert!((-5_100..=-4_900).contains(&off), "{off}");
        assert!(view().skewed);
        // A slower round trip (a later reading for an earlier send) does
        // not move the estimate later.
        let before = now_us();
        observe(sent, redis + 200_000);
        assert!(now_us() - before < 100_000);
    }
}

//! One clock per Redis master: Redis's.
//!
//! Every decision that compares a time with a due time or a deadline is
//! made on Redis's clock. The Lua scripts read it themselves (`TIME`):
//! promotion, expiry of in-flight messages, ack deadlines and tombstone
//! times never use a node's wall clock. On a Redis Cluster each master's
//! clock is its shards' clock: a shard's scripts run on its master. What a
//! node computes before it talks to Redis (a push's due time from its
//! `delay`, a `deliverAt` in the past, a recurring message's next
//! occurrence, the shard actor's sleep until the next due time) uses this
//! node's estimate of the clock of the master that holds the shard
//! ([`now_ms_for`]), or, where no shard is concerned, the latest of the
//! masters' clocks ([`now_ms`], which errs late on every master):
//!
//! - every [`PROBE`] the node reads `TIME` on each shard's master (the
//!   probe script, run on a key of the shard, names its master by run id
//!   and replication id)
//!   and notes when, on the *monotonic* clock, it sent the request. Redis
//!   read its clock after that instant, so `redis time + (monotonic now -
//!   sent)` is never behind Redis's clock: an estimate that errs late, by
//!   at most the round trip.
//! - of a master's samples of the last two windows of [`WINDOW`], the
//!   tightest (smallest) bound is used, so one slow round trip costs
//!   nothing; a sample that proves that bound too early (Redis's clock
//!   stepped forward: even the sample's *lower* bound, `redis time -
//!   (monotonic now - received)`, is past it) replaces it at once, so a
//!   forward step is followed within one probe;
//! - between samples the estimate moves with the monotonic clock, so a
//!   node's wall clock that is wrong, or is stepped by NTP, changes
//!   nothing;
//! - a shard follows the master that answered for it last; a master no
//!   shard follows any more and not heard of for [`FORGET`] (a failover
//!   replaced it) is forgotten.
//!
//! What is still assumed: Redis's own clock is right (consumers compare
//! delivery times with due times on their clocks; run NTP on the Redis
//! hosts), and a node's monotonic clock runs at the rate of real time over
//! a few seconds. A node whose wall clock differs from Redis's by more than
//! [`SKEW_WARN_MS`] says so in its log (at most once a minute), in
//! `GET /admin/cluster` (`clock`, with each master's offset) and in
//! `/metrics` (`delayq_clock_offset_seconds`); the node works the same
//! either way.
//!
//! Before the first sample (start-up, tools that have not read Redis yet)
//! the wall clock is used. Snowflake ids ([`crate::ids`]) keep the wall
//! clock: they need to be unique and roughly time-ordered, not exact.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a node reads Redis's clock.
pub const PROBE: Duration = Duration::from_millis(500);
/// Samples are kept in windows this long; the best of the current and the
/// previous window counts.
pub const WINDOW: Duration = Duration::from_secs(2);
/// A wall clock this far from Redis's (either way) is reported.
pub const SKEW_WARN_MS: i64 = 500;
/// A master not read for this long is forgotten.
pub const FORGET: Duration = Duration::from_secs(10);
/// The master of a shard's samples before a probe named its master.
const ANY: &str = "";

/// One master's clock, as samples bound it.
struct Master {
    /// Tightest `redis_us - sent_us` (µs since the origin) of the current
    /// window, and of the previous one.
    current: Option<i64>,
    previous: Option<i64>,
    window_started: Instant,
    last_seen: Instant,
}

impl Master {
    fn new(now: Instant) -> Self {
        Master {
            current: None,
            previous: None,
            window_started: now,
            last_seen: now,
        }
    }

    fn base(&self) -> Option<i64> {
        match (self.current, self.previous) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes a sample: `base` bounds the offset from above, `lower` from
    /// below.
    fn sample(&mut self, base: i64, lower: i64, now: Instant) {
        self.last_seen = now;
        if self.base().is_some_and(|b| lower > b) {
            // The clock stepped forward: the kept bound is behind it.
            self.current = Some(base);
            self.previous = None;
            self.window_started = now;
            return;
        }
        if now.duration_since(self.window_started) >= WINDOW {
            self.previous = self.current.take();
            self.window_started = now;
        }
        self.current = Some(self.current.map_or(base, |c| c.min(base)));
    }
}

struct Estimate {
    /// When the process started, on the monotonic clock: the origin of
    /// the `base` values.
    origin: Instant,
    /// By master (its run id and replication id; [`ANY`] when unnamed).
    masters: HashMap<String, Master>,
    /// The master that answered for each shard last.
    shards: HashMap<u32, String>,
    /// The wall clock's offset from Redis's at the last sample (µs,
    /// Redis minus wall), by master.
    wall_offset_us: HashMap<String, i64>,
    last_warned: Option<Instant>,
}

impl Estimate {
    /// Forgets masters not read for [`FORGET`] that no shard follows
    /// (a shard follows its master until a probe names another for it, so
    /// a master that cannot be read keeps its estimate for its shards).
    fn forget_old(&mut self, now: Instant) {
        let before = self.masters.len();
        let followed: std::collections::HashSet<&String> = self.shards.values().collect();
        self.masters
            .retain(|name, m| followed.contains(name) || now.duration_since(m.last_seen) < FORGET);
        if self.masters.len() != before {
            let masters = &self.masters;
            self.shards.retain(|_, m| masters.contains_key(m));
            self.wall_offset_us.retain(|m, _| masters.contains_key(m));
        }
    }

    fn elapsed_us(&self) -> i64 {
        self.origin.elapsed().as_micros() as i64
    }

    /// The latest of the masters' clocks.
    fn latest_base(&self) -> Option<i64> {
        self.masters.values().filter_map(Master::base).max()
    }
}

static ESTIMATE: Mutex<Option<Estimate>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Estimate) -> T) -> T {
    let mut guard = ESTIMATE.lock().unwrap_or_else(|p| p.into_inner());
    let e = guard.get_or_insert_with(|| Estimate {
        origin: Instant::now(),
        masters: HashMap::new(),
        shards: HashMap::new(),
        wall_offset_us: HashMap::new(),
        last_warned: None,
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

/// The cluster's clock where no shard is concerned: the latest of the
/// masters' (estimated), epoch µs, so a time computed from it is late on
/// no master; the wall clock until Redis's was read once.
pub fn now_us() -> i64 {
    with(|e| match e.latest_base() {
        Some(base) => base + e.elapsed_us(),
        None => local_us(),
    })
}

/// [`now_us`] in ms.
pub fn now_ms() -> i64 {
    now_us() / 1000
}

/// The clock of the master holding `shard` (estimated), epoch µs; before
/// that master was read, [`now_us`].
pub fn now_us_for(shard: u32) -> i64 {
    with(|e| {
        let base = e
            .shards
            .get(&shard)
            .and_then(|m| e.masters.get(m))
            .and_then(Master::base)
            .or_else(|| e.latest_base());
        match base {
            Some(base) => base + e.elapsed_us(),
            None => local_us(),
        }
    })
}

/// [`now_us_for`] in ms.
pub fn now_ms_for(shard: u32) -> i64 {
    now_us_for(shard) / 1000
}

/// Notes a reading of a shard's clock; its master is the one that
/// answered for it last.
pub fn observe_shard(shard: u32, sent: Instant, redis_us: i64) {
    let master = with(|e| e.shards.get(&shard).cloned());
    observe_master(master.as_deref().unwrap_or(ANY), None, sent, redis_us);
}

/// Notes a reading of the clock of `master` (its run id and replication
/// id), read by a
/// script on `shard`'s keys when one is given (the shard is then that
/// master's).
pub fn observe_master(master: &str, shard: Option<u32>, sent: Instant, redis_us: i64) {
    let wall = local_us();
    let received = Instant::now();
    let warn = with(|e| {
        let base = redis_us - micros_since(e.origin, sent);
        let lower = redis_us - micros_since(e.origin, received);
        e.masters
            .entry(master.to_string())
            .or_insert_with(|| Master::new(received))
            .sample(base, lower, received);
        if let Some(s) = shard {
            e.shards.insert(s, master.to_string());
        }
        e.forget_old(received);
        // This master's clock now, by the estimate, against the wall
        // clock now.
        let est = e.masters[master].base().unwrap_or(base) + e.elapsed_us();
        let offset = est - wall;
        e.wall_offset_us.insert(master.to_string(), offset);
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
    if let Some(ms) = warn {
        tracing::warn!(
            offset_ms = ms,
            master = %master,
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

/// Redis's clock minus this node's wall clock (ms), once read: the
/// largest in size over the masters.
pub fn offset_ms() -> Option<i64> {
    with(|e| {
        e.wall_offset_us
            .values()
            .copied()
            .max_by_key(|o| o.abs())
            .map(|o| o / 1000)
    })
}

pub use delayq_proto::{ClockView, MasterClock};

/// The clock as `GET /admin/cluster` shows it.
pub fn view() -> ClockView {
    let offset_ms = offset_ms();
    let masters = with(|e| {
        let latest = e.latest_base();
        let mut out: Vec<MasterClock> = e
            .masters
            .iter()
            .map(|(name, m)| {
                let mut shards: Vec<u32> = e
                    .shards
                    .iter()
                    .filter(|(_, n)| *n == name)
                    .map(|(s, _)| *s)
                    .collect();
                shards.sort_unstable();
                MasterClock {
                    master: name.clone(),
                    shards,
                    offset_ms: e.wall_offset_us.get(name).copied().unwrap_or(0) / 1000,
                    behind_latest_ms: match (m.base(), latest) {
                        (Some(b), Some(l)) => (b - l) / 1000,
                        _ => 0,
                    },
                }
            })
            .collect();
        out.sort_by(|a, b| a.shards.first().cmp(&b.shards.first()));
        out
    });
    ClockView {
        offset_ms,
        skewed: offset_ms.is_some_and(|o| o.abs() > SKEW_WARN_MS),
        bound_ms: SKEW_WARN_MS,
        now: now_ms(),
        masters,
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
        observe_master("follows", Some(900), sent, redis);
        let now = now_us_for(900);
        assert!(now >= redis, "never behind the reading");
        assert!(now - redis < 1_000_000, "{}", now - redis);
        // A slower round trip (sent 300 ms ago, read by Redis 100 ms
        // after) does not move the estimate later.
        let before = now_us_for(900);
        let slow = Instant::now()
            .checked_sub(Duration::from_millis(300))
            .unwrap();
        observe_master("follows", Some(900), slow, local_us() - 5_000_000 - 200_000);
        assert!(now_us_for(900) - before < 100_000);
    }

    #[test]
    fn a_master_stepped_forward_is_followed_at_once() {
        let t0 = Instant::now();
        let redis = local_us();
        let master = Master::new(t0);
        let mut m = master;
        // base = redis - sent; a sample 1 ms round trip.
        m.sample(redis, redis - 1_000, t0);
        assert_eq!(m.base(), Some(redis));
        // The clock steps forward 3 s: even the lower bound is past the
        // kept one, which goes at once.
        m.sample(redis + 3_000_000, redis + 2_999_000, t0);
        assert_eq!(m.base(), Some(redis + 3_000_000));
        // A step back is taken at once by the minimum.
        m.sample(redis - 3_000_000, redis - 3_001_000, t0);
        assert_eq!(m.base(), Some(redis - 3_000_000));
    }

    #[test]
    fn each_shard_follows_its_own_master() {
        let sent = Instant::now();
        let wall = local_us();
        observe_master("ahead", Some(901), sent, wall + 3_000_000);
        observe_master("behind", Some(902), sent, wall - 3_000_000);
        let ahead = now_us_for(901);
        let behind = now_us_for(902);
        assert!(ahead - behind >= 5_900_000, "{}", ahead - behind);
        // Without a shard, the latest master's: late on every master.
        assert!(now_us() >= ahead);
        // A sample of shard 902 with no master named goes to its master.
        observe_shard(902, sent, wall - 3_000_000);
        assert!(now_us_for(902) < ahead - 5_000_000);
        let v = view();
        assert!(v
            .masters
            .iter()
            .any(|m| m.master == "ahead" && m.shards == [901]));
    }
}

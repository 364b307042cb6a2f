//! Waits between failed attempts: exponential, capped, with jitter, and
//! never shorter than half the current step, so a consumer of a server that
//! is down never spins.

use std::time::Duration;

/// Exponential backoff with "equal jitter": the n-th wait after consecutive
/// failures is drawn from [step/2, step], where step = `min · 2ⁿ` capped at
/// `max`. Consumers of one server that failed together do not retry
/// together.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    /// `min` is raised to at least 1 ms, and `max` to at least `min`.
    pub fn new(min: Duration, max: Duration) -> Self {
        let min = min.max(Duration::from_millis(1));
        Backoff {
            min,
            max: max.max(min),
            failures: 0,
        }
    }

    /// The wait after one more failure.
    pub fn next_wait(&mut self) -> Duration {
        let step = self
            .min
            .saturating_mul(1u32 << self.failures.min(20))
            .min(self.max);
        self.failures = self.failures.saturating_add(1);
        let half = step / 2;
        half + half.mul_f64(fastrand::f64())
    }

    /// A success: the next failure waits from `min` again.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_to_the_cap_and_never_fall_below_half_a_step() {
        let (min, max) = (Duration::from_millis(100), Duration::from_secs(2));
        let mut b = Backoff::new(min, max);
        let mut step = min;
        for _ in 0..12 {
            let wait = b.next_wait();
            assert!(
                wait >= step / 2 && wait <= step,
                "{wait:?} for step {step:?}"
            );
            step = (step * 2).min(max);
        }
        b.reset();
        assert!(b.next_wait() <= min);
    }

    #[test]
    fn zero_settings_still_wait() {
        let mut b = Backoff::new(Duration::ZERO, Duration::ZERO);
        assert!(b.next_wait() >= Duration::from_micros(500));
    }
}

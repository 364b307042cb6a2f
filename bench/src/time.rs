//! The wall clock, and deadlines on it.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// Wall-clock time in epoch ms, with sub-millisecond precision.
pub fn now_ms() -> f64 {
    chrono::Utc::now().timestamp_micros() as f64 / 1_000.0
}

/// The `Instant` at which the wall clock will read `epoch_ms` (now, if that has passed).
pub fn instant_at(epoch_ms: f64) -> Instant {
    let ahead_ms = (epoch_ms - now_ms()).max(0.0);
    Instant::now() + Duration::from_secs_f64(ahead_ms / 1_000.0)
}

pub async fn with_timeout<T>(
    limit: Duration,
    what: &str,
    future: impl Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(limit, future)
        .await
        .with_context(|| format!("{what}: timed out after {} s", limit.as_secs()))?
}

//! What the overview's charts and rates show: a ring buffer of samples of
//! this process's metrics, taken every [`EVERY`] and kept for [`KEEP`]
//! samples (an hour). Each sample holds the push and delivery rates over
//! the interval (per topic too) and the mean and largest lateness of the
//! first deliveries handed out in it. Nothing is read from Redis or the
//! journal; a process counts only what it did itself, so on a cluster each
//! node's dashboard shows its own traffic.

use std::collections::{HashMap, VecDeque};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::message::now_ms;
use crate::metrics::metrics;

/// How often a sample is taken.
pub const EVERY: Duration = Duration::from_secs(2);
/// Samples kept: an hour's.
pub const KEEP: usize = 1800;

/// One interval.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    /// When it was taken (epoch ms).
    pub at: i64,
    pub pushed_per_s: f64,
    pub delivered_per_s: f64,
    /// Mean lateness of the first deliveries in the interval (ms), none
    /// when there were none.
    pub lateness_mean_ms: Option<f64>,
    pub lateness_max_ms: Option<f64>,
}

#[derive(Default)]
struct Totals {
    at: i64,
    topics: HashMap<String, (u64, u64)>,
}

#[derive(Default)]
struct Ring {
    samples: VecDeque<Sample>,
    last: Option<Totals>,
    /// Per topic, pushes and deliveries per second over the last interval.
    rates: HashMap<String, (f64, f64)>,
}

static RING: LazyLock<Mutex<Ring>> = LazyLock::new(Default::default);

fn ring() -> std::sync::MutexGuard<'static, Ring> {
    RING.lock().unwrap_or_else(|p| p.into_inner())
}

/// The samples, oldest first.
pub fn samples() -> Vec<Sample> {
    ring().samples.iter().copied().collect()
}

/// A topic's push and delivery rates over the last interval (0 when it
/// had no traffic here).
pub fn rates(topic: &str) -> (f64, f64) {
    ring().rates.get(topic).copied().unwrap_or_default()
}

/// Takes one sample.
pub fn sample() {
    let m = metrics();
    let now = Totals {
        at: now_ms(),
        topics: m
            .topic_totals()
            .into_iter()
            .map(|(t, p, d)| (t, (p, d)))
            .collect(),
    };
    let (count, sum, max) = m.take_lateness();
    let mut r = ring();
    if let Some(last) = &r.last {
        let secs = ((now.at - last.at) as f64 / 1000.0).max(0.001);
        let mut rates = HashMap::new();
        let (mut pushed, mut delivered) = (0u64, 0u64);
        for (topic, &(p, d)) in &now.topics {
            let (lp, ld) = last.topics.get(topic).copied().unwrap_or_default();
            let (dp, dd) = (p.saturating_sub(lp), d.saturating_sub(ld));
            pushed += dp;
            delivered += dd;
            rates.insert(topic.clone(), (dp as f64 / secs, dd as f64 / secs));
        }
        let sample = Sample {
            at: now.at,
            pushed_per_s: pushed as f64 / secs,
            delivered_per_s: delivered as f64 / secs,
            lateness_mean_ms: (count > 0).then(|| sum as f64 / count as f64),
            lateness_max_ms: (count > 0).then_some(max as f64),
        };
        r.rates = rates;
        if r.samples.len() == KEEP {
            r.samples.pop_front();
        }
        r.samples.push_back(sample);
    }
    r.last = Some(now);
}

/// Samples every [`EVERY`], for the life of the process.
pub async fn run() {
    loop {
        sample();
        tokio::time::sleep(EVERY).await;
    }
}

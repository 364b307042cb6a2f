//! What a scenario reports: one JSON line each, and the figures in it.

use std::collections::BTreeMap;

use delayq_client::MessageId;
use serde::Serialize;

use crate::consumers::{Delivery, Received};

/// One line of output: the fields common to every scenario around the scenario's own.
#[derive(Serialize)]
pub struct Line {
    pub scenario: &'static str,
    pub topic: String,
    #[serde(flatten)]
    pub outcome: Outcome,
    pub elapsed_s: f64,
}

#[derive(Serialize)]
#[serde(untagged)]
pub enum Outcome {
    Spread(SpreadReport),
    Burst(BurstReport),
    Cancel(CancelReport),
    Restore(RestoreReport),
    Pending(PendingReport),
    Failed { error: String },
}

impl Outcome {
    pub fn is_failure(&self) -> bool {
        match self {
            Outcome::Failed { .. } => true,
            Outcome::Burst(report) => report.error.is_some(),
            Outcome::Spread(_) | Outcome::Cancel(_) | Outcome::Restore(_) => false,
            Outcome::Pending(p) => p.probe_with_pending.delivered < p.probe_with_pending.pushed,
        }
    }
}

#[derive(Serialize)]
pub struct SpreadReport {
    pub pushed: usize,
    pub push_rate: f64,
    pub delivered: usize,
    pub missing: usize,
    pub early: usize,
    pub lateness_ms: Option<Percentiles>,
    pub duplicates: u64,
    pub unexpected: usize,
    pub poll_errors: u64,
    pub ack_errors: u64,
}

#[derive(Serialize)]
pub struct BurstReport {
    pub pushed: usize,
    pub push_rate: f64,
    pub deliver_at: i64,
    /// deliverAt minus the end of the push phase; negative means the push overran it.
    pub push_margin_ms: f64,
    pub delivered: usize,
    pub missing: usize,
    pub early: usize,
    /// Receive time of the last message minus deliverAt; null when the run is invalid.
    pub last_handout_ms: Option<f64>,
    pub lateness_ms: Option<Percentiles>,
    pub duplicates: u64,
    pub unexpected: usize,
    pub poll_errors: u64,
    pub ack_errors: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Serialize)]
pub struct CancelReport {
    pub pushed: usize,
    pub push_rate: f64,
    pub cancel_requests: usize,
    pub cancel_rate: f64,
    pub cancel_s: f64,
    /// `result` of each `/delete` call (`not_found` for a 404), plus `error` for failed
    /// requests.
    pub cancel_results: BTreeMap<String, u64>,
    pub delivered: usize,
    /// Messages whose delete answered `deleted` but which were delivered anyway (must be 0).
    pub cancelled_delivered: usize,
    /// Messages that were never cancelled but were not delivered.
    pub uncancelled_missing: usize,
    pub duplicates: u64,
    pub unexpected: usize,
    pub poll_errors: u64,
    pub ack_errors: u64,
}

#[derive(Serialize)]
pub struct RestoreReport {
    pub pushed: usize,
    pub push_rate: f64,
    pub redis_keys_deleted: usize,
    pub restored: Option<u64>,
    pub restore_s: f64,
    pub restore_rate: Option<f64>,
    pub response: serde_json::Value,
}

#[derive(Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `values`; `None` when there are none.
    pub fn of(mut values: Vec<f64>) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            let index = ((p / 100.0) * values.len() as f64).ceil() as usize;
            round(values[index.clamp(1, values.len()) - 1], 3)
        };
        Some(Self {
            p50: rank(50.0),
            p90: rank(90.0),
            p99: rank(99.0),
            max: rank(100.0),
        })
    }
}

/// What the consumers saw of the messages a scenario pushed.
pub struct Analysis {
    pub delivered: usize,
    pub missing: usize,
    pub early: usize,
    /// Received ids that the scenario did not push.
    pub unexpected: usize,
    pub lateness: Vec<f64>,
    pub last_receive_ms: Option<f64>,
}

impl Analysis {
    pub fn new(received: &Received, pushed: &[MessageId]) -> Self {
        let lateness: Vec<f64> = pushed
            .iter()
            .filter_map(|id| received.first.get(id))
            .map(Delivery::lateness_ms)
            .collect();
        let last_receive_ms = pushed
            .iter()
            .filter_map(|id| received.first.get(id))
            .map(|delivery| delivery.received_ms)
            .reduce(f64::max);
        Self {
            delivered: lateness.len(),
            missing: pushed.len() - lateness.len(),
            early: lateness.iter().filter(|&&ms| ms < 0.0).count(),
            unexpected: received.first.len().saturating_sub(lateness.len()),
            lateness,
            last_receive_ms,
        }
    }
}

pub fn rate(count: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        round(count as f64 / secs, 1)
    } else {
        0.0
    }
}

pub fn round(value: f64, decimals: i32) -> f64 {
    let scale = 10_f64.powi(decimals);
    (value * scale).round() / scale
}

/// What `--pending` measured (see `pending.rs`).
#[derive(Serialize)]
pub struct PendingReport {
    pub pending: usize,
    pub push_s: f64,
    pub push_rate: f64,
    pub used_memory_before: u64,
    pub used_memory_after: u64,
    /// Redis bytes per pending message: (after - before) / pending.
    pub bytes_per_pending: f64,
    pub probe_empty: Probe,
    pub probe_with_pending: Probe,
    /// `GET /forecast?bucket=1m&span=24h` and the same of the probe topic
    /// (a small share: sampled) beside the pending messages.
    pub forecast: ForecastTiming,
}

#[derive(Serialize)]
pub struct ForecastTiming {
    /// The slowest of three answers (ms), every topic.
    pub all_ms: f64,
    /// What it counted, and whether exactly.
    pub all_total: u64,
    pub all_exact: bool,
    /// The slowest of three answers (ms), one topic.
    pub topic_ms: f64,
    pub topic_sampled: u64,
    pub topic_exact: bool,
    pub journal_rows: u64,
}

#[derive(Serialize)]
pub struct Probe {
    pub pushed: usize,
    pub delivered: usize,
    pub early: usize,
    pub lateness_ms: Option<Percentiles>,
}

//! `delayq-bench`: a load generator that drives a *running* delayq server over HTTP.
//!
//! Every scenario runs on its own fresh topic (`{prefix}-{scenario}-{unix_ms}`) and prints
//! exactly one JSON line to stdout; progress goes to stderr. Every wait has a deadline, so
//! the bench cannot hang on a stuck server. The bench is a pure HTTP client, speaking through
//! `delayq-client` (its own consumer loops, tuned to time each receipt, call the client's
//! `poll` and `ack` directly); the only other connection it makes is to Redis, in the
//! `restore` scenario, to wipe the schedule before asking the server to rebuild it from its
//! journal (`GET /reStore`, an operator's route the client does not cover).

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::builder::RangedU64ValueParser;
use clap::{Parser, ValueEnum};
/// One delivery as an ack names it (the message's id and receipt).
use delayq_client::Delivery as Handout;
use delayq_client::{Client, Message, MessageId, NewMessage};
use futures::{stream, StreamExt, TryStreamExt};
use serde::Serialize;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// `timeout` parameter of each consumer long poll, in seconds.
const LONG_POLL_SECS: u64 = 1;
/// `count` parameter of each consumer long poll (the server's maximum).
const POLL_COUNT: usize = 100;
/// Acks in flight at once, across all consumers of a scenario.
/// Cancel (`/delete`) requests in flight at once.
const CANCEL_CONCURRENCY: usize = 32;
/// Size of every message body, in bytes.
const BODY_LEN: usize = 100;
/// `ttl` of every message, in ms.
const TTL_MS: u64 = 30_000;
/// Timeout of an ordinary request (push, ack, delete).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Timeout of a long poll's request: the poll itself plus the client's 10 s margin for a busy
/// server.
const POLL_TIMEOUT: Duration = Duration::from_secs(LONG_POLL_SECS + 10);
/// Timeout of `GET /reStore`, which rebuilds the whole schedule.
const RESTORE_TIMEOUT: Duration = Duration::from_secs(600);
/// Timeout of the whole Redis wipe in the `restore` scenario.
const REDIS_WIPE_TIMEOUT: Duration = Duration::from_secs(120);
/// Delay of the messages pushed by the `restore` scenario: one hour.
const RESTORE_DELAY_MS: u64 = 3_600_000;

const ABOUT: &str = "Benchmark a running delayq server over HTTP.";

const LONG_ABOUT: &str = "\
Benchmark a running delayq server over HTTP. Prints one JSON line per scenario on stdout \
(progress on stderr); the exit status is non-zero if any scenario failed.

Scenarios (default: all four, in this order):
  spread   consumers long-poll first, then --spread-count messages are pushed with delays
           uniform in 1000-6000 ms; reports push rate, delivery lateness percentiles
           (receive time minus the message's dueTime), early deliveries and duplicates.
  burst    --burst-count messages that all share one deliverAt; reports the time from the
           due instant to the last hand-out (last_handout_ms) and lateness percentiles.
  cancel   --cancel-count messages due in 3000-6000 ms, every second one cancelled through
           /delete; reports the cancel rate, the tally of results, and checks that no
           cancelled message is delivered (cancelled_delivered must be 0).
  restore  --restore-count messages due in one hour, then DELETES ALL OF THE SERVER'S REDIS
           KEYS (every key matching '{KEY_PREFIX:*' or 'KEY_PREFIX:*' in --redis-url) and
           times GET /reStore?expire=false; reports the restore rate.

The restore scenario wipes the server's whole Redis schedule (for every topic) and relies on
the server's journal to rebuild it, so point it only at a bench server. Its messages are left
pending, due an hour later on a topic nobody consumes, unless the operator clears them.";

#[derive(Parser, Debug)]
#[command(name = "delayq-bench", version, about = ABOUT, long_about = LONG_ABOUT)]
struct Cli {
    /// Base URL of the delayq server.
    #[arg(long, default_value = "http://127.0.0.1:7070")]
    url: String,

    /// Where pushes (and cancels) go, when not to --url: in a cluster, a
    /// node that does not scan the shards, to measure wake-ups across nodes.
    #[arg(long)]
    push_url: Option<String>,

    /// Where consumers poll and ack, when not at --url; repeat it to spread
    /// the consumers over several nodes (round robin).
    #[arg(long)]
    consume_url: Vec<String>,

    /// A PEM file of CA certificates to trust for https:// URLs (a server
    /// started with --tls-cert signed by a private CA), besides the
    /// platform's.
    #[arg(long, value_name = "PATH")]
    tls_ca_file: Option<std::path::PathBuf>,

    /// Prefix of the per-scenario topics.
    #[arg(long, default_value = "bench")]
    topic_prefix: String,

    /// Long-polling consumer tasks per scenario.
    #[arg(long, default_value_t = 16, value_parser = RangedU64ValueParser::<usize>::new().range(1..=1024))]
    consumers: usize,

    /// Consumers do not ack (measures hand-out alone; unacked messages stay
    /// in flight until their 30 s ttl).
    #[arg(long)]
    no_ack: bool,

    /// How consumers ack: `batch` acks the previous batch in the request
    /// that polls for the next (`POST /get/{topic}` with `{"ack": [...]}`),
    /// one request per batch; `per-message` sends `POST /ack/{id}` for each
    /// message, --ack-concurrency at a time.
    #[arg(long, value_enum, default_value_t = AckMode::Batch)]
    ack_mode: AckMode,

    /// Acks in flight at once across all consumers (--ack-mode per-message);
    /// a consumer waits for a free slot before polling again.
    #[arg(long, default_value_t = 256, value_parser = RangedU64ValueParser::<usize>::new().range(1..=4096))]
    ack_concurrency: usize,

    /// Concurrent push requests (batches in flight).
    #[arg(long, default_value_t = 4, value_parser = RangedU64ValueParser::<usize>::new().range(1..=256))]
    pushers: usize,

    /// Messages per `POST /push/batch`.
    #[arg(long, default_value_t = 500, value_parser = RangedU64ValueParser::<usize>::new().range(1..=1000))]
    batch: usize,

    /// Redis used by the server (restore scenario only).
    #[arg(long, default_value = "redis://127.0.0.1:6379/0")]
    redis_url: String,

    /// The server's Redis key prefix (restore scenario only).
    #[arg(long, default_value = "dq")]
    key_prefix: String,

    /// Messages pushed by the spread scenario.
    #[arg(long, default_value_t = 20_000)]
    spread_count: usize,

    /// Messages pushed by the burst scenario.
    #[arg(long, default_value_t = 20_000)]
    burst_count: usize,

    /// Messages pushed by the cancel scenario (every second one is cancelled).
    #[arg(long, default_value_t = 10_000)]
    cancel_count: usize,

    /// Messages pushed by the restore scenario.
    #[arg(long, default_value_t = 200_000)]
    restore_count: usize,

    /// Lead time of the burst's deliverAt over the start of its push phase, in ms
    /// [default: 3000 + burst-count / 5].
    #[arg(long)]
    burst_lead_ms: Option<u64>,

    /// Scenarios to run, in order.
    #[arg(value_enum)]
    scenarios: Vec<Scenario>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum AckMode {
    Batch,
    PerMessage,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    Spread,
    Burst,
    Cancel,
    Restore,
}

impl Scenario {
    const ALL: [Scenario; 4] = [
        Scenario::Spread,
        Scenario::Burst,
        Scenario::Cancel,
        Scenario::Restore,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::Spread => "spread",
            Scenario::Burst => "burst",
            Scenario::Cancel => "cancel",
            Scenario::Restore => "restore",
        }
    }

    async fn run(self, cli: &Cli, api: &Api, topic: &str) -> Result<Outcome> {
        Ok(match self {
            Scenario::Spread => Outcome::Spread(spread(cli, api, topic).await?),
            Scenario::Burst => Outcome::Burst(burst(cli, api, topic).await?),
            Scenario::Cancel => Outcome::Cancel(cancel(cli, api, topic).await?),
            Scenario::Restore => Outcome::Restore(restore(cli, api, topic).await?),
        })
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("delayq-bench: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs the selected scenarios; returns whether all of them succeeded.
async fn run(cli: &Cli) -> Result<bool> {
    let api = Api::new(
        cli.push_url.as_deref().unwrap_or(&cli.url),
        &cli.consume_url,
        &cli.url,
        cli.tls_ca_file.as_deref(),
    )?;
    let scenarios = if cli.scenarios.is_empty() {
        Scenario::ALL.to_vec()
    } else {
        cli.scenarios.clone()
    };

    let mut all_ok = true;
    for scenario in scenarios {
        let name = scenario.name();
        let topic = format!("{}-{}-{}", cli.topic_prefix, name, now_ms() as u64);
        eprintln!("[{name}] topic {topic}");
        let started = Instant::now();
        let outcome = scenario
            .run(cli, &api, &topic)
            .await
            .unwrap_or_else(|err| Outcome::Failed {
                error: format!("{err:#}"),
            });
        all_ok &= !outcome.is_failure();
        let line = Line {
            scenario: name,
            topic,
            outcome,
            elapsed_s: round(started.elapsed().as_secs_f64(), 3),
        };
        println!("{}", serde_json::to_string(&line)?);
        eprintln!("[{name}] done in {:.1} s", line.elapsed_s);
    }
    Ok(all_ok)
}

// ---------------------------------------------------------------------------------------
// Reports
// ---------------------------------------------------------------------------------------

/// One line of output: the fields common to every scenario around the scenario's own.
#[derive(Serialize)]
struct Line {
    scenario: &'static str,
    topic: String,
    #[serde(flatten)]
    outcome: Outcome,
    elapsed_s: f64,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Outcome {
    Spread(SpreadReport),
    Burst(BurstReport),
    Cancel(CancelReport),
    Restore(RestoreReport),
    Failed { error: String },
}

impl Outcome {
    fn is_failure(&self) -> bool {
        match self {
            Outcome::Failed { .. } => true,
            Outcome::Burst(report) => report.error.is_some(),
            Outcome::Spread(_) | Outcome::Cancel(_) | Outcome::Restore(_) => false,
        }
    }
}

#[derive(Serialize)]
struct SpreadReport {
    pushed: usize,
    push_rate: f64,
    delivered: usize,
    missing: usize,
    early: usize,
    lateness_ms: Option<Percentiles>,
    duplicates: u64,
    unexpected: usize,
    poll_errors: u64,
    ack_errors: u64,
}

#[derive(Serialize)]
struct BurstReport {
    pushed: usize,
    push_rate: f64,
    deliver_at: i64,
    /// deliverAt minus the end of the push phase; negative means the push overran it.
    push_margin_ms: f64,
    delivered: usize,
    missing: usize,
    early: usize,
    /// Receive time of the last message minus deliverAt; null when the run is invalid.
    last_handout_ms: Option<f64>,
    lateness_ms: Option<Percentiles>,
    duplicates: u64,
    unexpected: usize,
    poll_errors: u64,
    ack_errors: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize)]
struct CancelReport {
    pushed: usize,
    push_rate: f64,
    cancel_requests: usize,
    cancel_rate: f64,
    cancel_s: f64,
    /// `result` of each `/delete` call (`not_found` for a 404), plus `error` for failed
    /// requests.
    cancel_results: BTreeMap<String, u64>,
    delivered: usize,
    /// Messages whose delete answered `deleted` but which were delivered anyway (must be 0).
    cancelled_delivered: usize,
    /// Messages that were never cancelled but were not delivered.
    uncancelled_missing: usize,
    duplicates: u64,
    unexpected: usize,
    poll_errors: u64,
    ack_errors: u64,
}

#[derive(Serialize)]
struct RestoreReport {
    pushed: usize,
    push_rate: f64,
    redis_keys_deleted: usize,
    restored: Option<u64>,
    restore_s: f64,
    restore_rate: Option<f64>,
    response: serde_json::Value,
}

#[derive(Serialize)]
struct Percentiles {
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `values`; `None` when there are none.
    fn of(mut values: Vec<f64>) -> Option<Self> {
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
struct Analysis {
    delivered: usize,
    missing: usize,
    early: usize,
    /// Received ids that the scenario did not push.
    unexpected: usize,
    lateness: Vec<f64>,
    last_receive_ms: Option<f64>,
}

impl Analysis {
    fn new(received: &Received, pushed: &[MessageId]) -> Self {
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

// ---------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------

async fn spread(cli: &Cli, api: &Api, topic: &str) -> Result<SpreadReport> {
    let count = cli.spread_count;
    let (min_delay, max_delay) = (1_000, 6_000);
    let consumers = Consumers::start(
        api,
        topic,
        cli.consumers,
        cli.ack_concurrency,
        (!cli.no_ack).then_some(cli.ack_mode),
    );

    let mut rng = XorShift::new(0x5eed_0001);
    let messages = (0..count)
        .map(|i| {
            bench_message(topic, i).delay(Duration::from_millis(rng.between(min_delay, max_delay)))
        })
        .collect();
    let push = push_all(api, messages, cli.batch, cli.pushers).await?;

    let due_max = push.ended_ms + max_delay as f64;
    consumers
        .wait_for(count, instant_at(due_max + 10_000.0))
        .await;
    let consumed = consumers.finish().await;

    let analysis = Analysis::new(&consumed.received, &push.ids);
    Ok(SpreadReport {
        pushed: count,
        push_rate: push.rate(),
        delivered: analysis.delivered,
        missing: analysis.missing,
        early: analysis.early,
        lateness_ms: Percentiles::of(analysis.lateness),
        duplicates: consumed.received.duplicates,
        unexpected: analysis.unexpected,
        poll_errors: consumed.poll_errors,
        ack_errors: consumed.ack_errors,
    })
}

async fn burst(cli: &Cli, api: &Api, topic: &str) -> Result<BurstReport> {
    let count = cli.burst_count;
    let lead_ms = cli.burst_lead_ms.unwrap_or(3_000 + count as u64 / 5);
    let consumers = Consumers::start(
        api,
        topic,
        cli.consumers,
        cli.ack_concurrency,
        (!cli.no_ack).then_some(cli.ack_mode),
    );

    let deliver_at = now_ms() as i64 + lead_ms as i64;
    let messages = (0..count)
        .map(|i| bench_message(topic, i).deliver_at(epoch(deliver_at)))
        .collect();
    let push = push_all(api, messages, cli.batch, cli.pushers).await?;
    let push_margin_ms = deliver_at as f64 - push.ended_ms;
    let error = (push_margin_ms < 0.0).then(|| {
        format!(
            "the push phase ended {:.0} ms after deliverAt; raise --burst-lead-ms (was {lead_ms})",
            -push_margin_ms
        )
    });

    // Allow 1 ms per message on top of a fixed grace for the hand-out itself.
    let deadline = deliver_at as f64 + 10_000.0 + count as f64;
    consumers.wait_for(count, instant_at(deadline)).await;
    let consumed = consumers.finish().await;

    let analysis = Analysis::new(&consumed.received, &push.ids);
    let valid = error.is_none();
    Ok(BurstReport {
        pushed: count,
        push_rate: push.rate(),
        deliver_at,
        push_margin_ms: round(push_margin_ms, 3),
        delivered: analysis.delivered,
        missing: analysis.missing,
        early: analysis.early,
        last_handout_ms: analysis
            .last_receive_ms
            .filter(|_| valid)
            .map(|last| round(last - deliver_at as f64, 3)),
        lateness_ms: Percentiles::of(analysis.lateness).filter(|_| valid),
        duplicates: consumed.received.duplicates,
        unexpected: analysis.unexpected,
        poll_errors: consumed.poll_errors,
        ack_errors: consumed.ack_errors,
        error,
    })
}

async fn cancel(cli: &Cli, api: &Api, topic: &str) -> Result<CancelReport> {
    let count = cli.cancel_count;
    let (min_delay, max_delay) = (3_000, 6_000);
    let consumers = Consumers::start(
        api,
        topic,
        cli.consumers,
        cli.ack_concurrency,
        (!cli.no_ack).then_some(cli.ack_mode),
    );

    let mut rng = XorShift::new(0x5eed_0003);
    let messages = (0..count)
        .map(|i| {
            bench_message(topic, i).delay(Duration::from_millis(rng.between(min_delay, max_delay)))
        })
        .collect();
    let push = push_all(api, messages, cli.batch, cli.pushers).await?;

    // Cancel every second message (odd positions).
    let to_cancel: Vec<MessageId> = push.ids.iter().skip(1).step_by(2).copied().collect();
    eprintln!("[cancel] cancelling {} messages", to_cancel.len());
    let started = Instant::now();
    let results: Vec<(MessageId, Result<&str>)> = stream::iter(to_cancel.iter().copied())
        .map(|id| async move { (id, api.delete(id).await) })
        .buffer_unordered(CANCEL_CONCURRENCY)
        .collect()
        .await;
    let cancel_elapsed = started.elapsed().as_secs_f64();

    let mut cancel_results = BTreeMap::new();
    let mut deleted = HashSet::new();
    let mut logged_errors = 0;
    for (id, result) in &results {
        let key = match result {
            Ok(result) => (*result).to_owned(),
            Err(err) => {
                if logged_errors < 5 {
                    logged_errors += 1;
                    eprintln!("[cancel] delete {id}: {err:#}");
                }
                "error".to_owned()
            }
        };
        if key == "deleted" {
            deleted.insert(*id);
        }
        *cancel_results.entry(key).or_insert(0) += 1;
    }
    eprintln!("[cancel] results {cancel_results:?} in {cancel_elapsed:.2} s");

    // Keep consuming until every message is due plus 3 s, whatever arrives, so a cancelled
    // message delivered late is still caught.
    let due_max = push.ended_ms + max_delay as f64;
    consumers
        .wait_for(usize::MAX, instant_at(due_max + 3_000.0))
        .await;
    let consumed = consumers.finish().await;

    let received = &consumed.received.first;
    let analysis = Analysis::new(&consumed.received, &push.ids);
    let cancelled_delivered = deleted
        .iter()
        .filter(|id| received.contains_key(*id))
        .count();
    let uncancelled_missing = push
        .ids
        .iter()
        .step_by(2)
        .filter(|id| !received.contains_key(*id))
        .count();
    Ok(CancelReport {
        pushed: count,
        push_rate: push.rate(),
        cancel_requests: to_cancel.len(),
        cancel_rate: rate(to_cancel.len(), cancel_elapsed),
        cancel_s: round(cancel_elapsed, 3),
        cancel_results,
        delivered: analysis.delivered,
        cancelled_delivered,
        uncancelled_missing,
        duplicates: consumed.received.duplicates,
        unexpected: analysis.unexpected,
        poll_errors: consumed.poll_errors,
        ack_errors: consumed.ack_errors,
    })
}

async fn restore(cli: &Cli, api: &Api, topic: &str) -> Result<RestoreReport> {
    let count = cli.restore_count;
    let messages = (0..count)
        .map(|i| bench_message(topic, i).delay(Duration::from_millis(RESTORE_DELAY_MS)))
        .collect();
    let push = push_all(api, messages, cli.batch, cli.pushers).await?;

    let redis_keys_deleted = with_timeout(
        REDIS_WIPE_TIMEOUT,
        "wiping the server's Redis keys",
        wipe_redis(&cli.redis_url, &cli.key_prefix),
    )
    .await?;
    eprintln!("[restore] deleted {redis_keys_deleted} Redis keys; calling /reStore");

    let started = Instant::now();
    let response = api.restore(false).await?;
    let restore_elapsed = started.elapsed().as_secs_f64();
    let restored = response.get("restored").and_then(serde_json::Value::as_u64);
    Ok(RestoreReport {
        pushed: count,
        push_rate: push.rate(),
        redis_keys_deleted,
        restored,
        restore_s: round(restore_elapsed, 3),
        restore_rate: restored.map(|n| rate(n as usize, restore_elapsed)),
        response,
    })
}

/// Deletes every key of the server (`{PREFIX:...` hash-tagged keys and `PREFIX:...` keys)
/// with SCAN + UNLINK; returns how many keys were deleted.
async fn wipe_redis(redis_url: &str, key_prefix: &str) -> Result<usize> {
    let client = redis::Client::open(redis_url).context("invalid --redis-url")?;
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("connecting to {redis_url}"))?;

    let escaped = glob_escape(key_prefix);
    let mut keys = HashSet::new();
    for pattern in [format!("\\{{{escaped}:*"), format!("{escaped}:*")] {
        let mut cursor = 0_u64;
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1_000)
                .query_async(&mut con)
                .await
                .context("SCAN")?;
            keys.extend(batch);
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
    }

    let keys: Vec<String> = keys.into_iter().collect();
    for chunk in keys.chunks(500) {
        let _: i64 = redis::cmd("UNLINK")
            .arg(chunk)
            .query_async(&mut con)
            .await
            .context("UNLINK")?;
    }
    Ok(keys.len())
}

/// Escapes the Redis glob metacharacters of `text`.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

// ---------------------------------------------------------------------------------------
// Pushing
// ---------------------------------------------------------------------------------------

/// Message `index` of a scenario: its body is the index, zero-padded to exactly BODY_LEN
/// bytes; due at once until the scenario sets its delay or delivery time.
fn bench_message(topic: &str, index: usize) -> NewMessage {
    NewMessage::new(topic, format!("{index:0BODY_LEN$}"))
        .priority(0)
        .ttl(Duration::from_millis(TTL_MS))
}

/// The time `epoch_ms` milliseconds after the Unix epoch.
fn epoch(epoch_ms: i64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_millis(epoch_ms.max(0) as u64)
}

struct Pushed {
    /// Server ids, in push order.
    ids: Vec<MessageId>,
    elapsed: Duration,
    /// Epoch ms at which the last batch was acknowledged.
    ended_ms: f64,
}

impl Pushed {
    fn rate(&self) -> f64 {
        rate(self.ids.len(), self.elapsed.as_secs_f64())
    }
}

/// Pushes `messages` in batches of `batch`, `pushers` batches in flight.
async fn push_all(
    api: &Api,
    messages: Vec<NewMessage>,
    batch: usize,
    pushers: usize,
) -> Result<Pushed> {
    eprintln!(
        "pushing {} messages ({batch} per batch, {pushers} in flight)",
        messages.len()
    );
    let started = Instant::now();
    let batches: Vec<Vec<MessageId>> = stream::iter(messages.chunks(batch))
        .map(|chunk| api.push_batch(chunk))
        .buffered(pushers)
        .try_collect()
        .await?;
    let pushed = Pushed {
        ids: batches.concat(),
        elapsed: started.elapsed(),
        ended_ms: now_ms(),
    };
    eprintln!(
        "pushed {} in {:.2} s ({:.0}/s)",
        pushed.ids.len(),
        pushed.elapsed.as_secs_f64(),
        pushed.rate()
    );
    Ok(pushed)
}

// ---------------------------------------------------------------------------------------
// Consuming
// ---------------------------------------------------------------------------------------

struct Delivery {
    due_ms: i64,
    received_ms: f64,
}

impl Delivery {
    fn lateness_ms(&self) -> f64 {
        self.received_ms - self.due_ms as f64
    }
}

/// Deliveries seen by the consumers: the first receipt of every id, and the repeats.
#[derive(Default)]
struct Received {
    first: HashMap<MessageId, Delivery>,
    duplicates: u64,
}

struct ConsumerState {
    api: Api,
    topic: String,
    stop: AtomicBool,
    received: Mutex<Received>,
    ack_slots: Arc<Semaphore>,
    ack_concurrency: usize,
    ack: Option<AckMode>,
    poll_errors: AtomicU64,
    ack_errors: AtomicU64,
}

impl ConsumerState {
    fn received(&self) -> MutexGuard<'_, Received> {
        self.received.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn count_ack_errors(&self, refused: u64) {
        if refused > 0 && self.ack_errors.fetch_add(refused, Ordering::Relaxed) < 5 {
            eprintln!("  {refused} acks refused");
        }
    }

    fn record(&self, received_ms: f64, messages: &[Message]) {
        let mut received = self.received();
        for message in messages {
            match received.first.entry(message.id) {
                Entry::Occupied(_) => received.duplicates += 1,
                Entry::Vacant(slot) => {
                    slot.insert(Delivery {
                        due_ms: message.due_time,
                        received_ms,
                    });
                }
            }
        }
    }
}

/// What the consumers of a scenario saw once stopped.
struct Consumed {
    received: Received,
    poll_errors: u64,
    ack_errors: u64,
}

/// A pool of long-polling consumer tasks on one topic; each acks what it receives.
struct Consumers {
    state: Arc<ConsumerState>,
    tasks: Vec<JoinHandle<()>>,
}

impl Consumers {
    fn start(
        api: &Api,
        topic: &str,
        count: usize,
        ack_concurrency: usize,
        ack: Option<AckMode>,
    ) -> Self {
        let state = Arc::new(ConsumerState {
            api: api.clone(),
            topic: topic.to_owned(),
            stop: AtomicBool::new(false),
            received: Mutex::default(),
            ack_slots: Arc::new(Semaphore::new(ack_concurrency)),
            ack_concurrency,
            ack,
            poll_errors: AtomicU64::new(0),
            ack_errors: AtomicU64::new(0),
        });
        let tasks = (0..count)
            .map(|i| tokio::spawn(consume(Arc::clone(&state), i)))
            .collect();
        Self { state, tasks }
    }

    /// Waits until `target` distinct messages were received or `deadline` passed, logging
    /// progress every second; returns whether the target was reached.
    async fn wait_for(&self, target: usize, deadline: Instant) -> bool {
        let mut next_log = Instant::now() + Duration::from_secs(1);
        loop {
            let received = self.state.received().first.len();
            if received >= target {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            if now >= next_log {
                let left = deadline.saturating_duration_since(now).as_secs_f64();
                eprintln!("  received {received} (deadline in {left:.1} s)");
                next_log = now + Duration::from_secs(1);
            }
            tokio::time::sleep(Duration::from_millis(50).min(deadline - now)).await;
        }
    }

    /// Stops the consumers, waits (bounded) for their last polls and acks, and returns what
    /// they received.
    async fn finish(mut self) -> Consumed {
        self.state.stop.store(true, Ordering::Relaxed);
        let tasks = std::mem::take(&mut self.tasks);
        let aborts: Vec<_> = tasks.iter().map(JoinHandle::abort_handle).collect();
        let joined = tokio::time::timeout(
            POLL_TIMEOUT + Duration::from_secs(1),
            futures::future::join_all(tasks),
        )
        .await;
        if joined.is_err() {
            eprintln!("  consumers did not stop in time; aborting them");
            aborts.iter().for_each(tokio::task::AbortHandle::abort);
        }
        let all_slots = u32::try_from(self.state.ack_concurrency).unwrap_or(u32::MAX);
        let acks_done = tokio::time::timeout(
            REQUEST_TIMEOUT + Duration::from_secs(1),
            self.state.ack_slots.acquire_many(all_slots),
        )
        .await;
        if acks_done.is_err() {
            eprintln!("  some acks were still in flight when the bench stopped waiting");
        }

        Consumed {
            received: std::mem::take(&mut *self.state.received()),
            poll_errors: self.state.poll_errors.load(Ordering::Relaxed),
            ack_errors: self.state.ack_errors.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Consumers {
    /// A scenario that fails early must not leave its consumers polling forever.
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

/// One consumer: long-polls until told to stop, records every receipt, hands each message
/// to a bounded pool of ack tasks.
async fn consume(state: Arc<ConsumerState>, consumer: usize) {
    if state.ack == Some(AckMode::Batch) {
        return consume_batches(state, consumer).await;
    }
    while !state.stop.load(Ordering::Relaxed) {
        match state.api.poll(&state.topic, consumer).await {
            Ok((received_ms, messages)) => {
                state.record(received_ms, &messages);
                if state.ack.is_none() {
                    continue;
                }
                for message in messages {
                    let Ok(slot) = Arc::clone(&state.ack_slots).acquire_owned().await else {
                        return;
                    };
                    let state = Arc::clone(&state);
                    tokio::spawn(async move {
                        if let Err(err) = state.api.ack(&message, consumer).await {
                            if state.ack_errors.fetch_add(1, Ordering::Relaxed) < 5 {
                                eprintln!("  ack {}: {err:#}", message.id);
                            }
                        }
                        drop(slot);
                    });
                }
            }
            Err(err) => {
                if state.poll_errors.fetch_add(1, Ordering::Relaxed) < 5 {
                    eprintln!("  poll: {err:#}");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// One consumer that acks each batch in the request polling for the next one; the last
/// batch is acked with `POST /ack` when it stops.
async fn consume_batches(state: Arc<ConsumerState>, consumer: usize) {
    let mut to_ack: Vec<Handout> = Vec::new();
    while !state.stop.load(Ordering::Relaxed) {
        match state
            .api
            .ack_and_poll(&state.topic, consumer, &to_ack)
            .await
        {
            Ok((received_ms, messages, refused)) => {
                state.record(received_ms, &messages);
                state.count_ack_errors(refused);
                to_ack = messages.iter().map(Message::delivery).collect();
            }
            Err(err) => {
                if state.poll_errors.fetch_add(1, Ordering::Relaxed) < 5 {
                    eprintln!("  poll: {err:#}");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    if !to_ack.is_empty() {
        match state.api.ack_batch(&to_ack, consumer).await {
            Ok(refused) => state.count_ack_errors(refused),
            Err(err) => {
                state.count_ack_errors(to_ack.len() as u64);
                eprintln!("  ack: {err:#}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// HTTP API
// ---------------------------------------------------------------------------------------

fn refused(results: &[delayq_client::AckResult]) -> u64 {
    results
        .iter()
        .filter(|r| r.result != delayq_client::AckOutcome::Consumed)
        .count() as u64
}

/// The delayq HTTP API as the bench uses it: a `delayq_client::Client` for pushes and
/// cancels, one per consumer URL, and a plain HTTP client for `GET /reStore`.
#[derive(Clone)]
struct Api {
    base: Client,
    /// Where consumer `i` polls and acks: `consumers[i % len]`.
    consumers: Arc<[Client]>,
    admin: reqwest::Client,
}

impl Api {
    fn new(
        base: &str,
        consumers: &[String],
        default: &str,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Self> {
        let client = |url: &str| -> Result<Client> {
            let mut b = Client::builder(url)
                .pool_idle_per_host(1_024)
                .connect_timeout(Duration::from_secs(5))
                .timeout(REQUEST_TIMEOUT);
            if let Some(ca) = ca_file {
                b = b.tls_ca_file(ca);
            }
            b.build().with_context(|| format!("a client of {url}"))
        };
        let consumers: Vec<Client> = if consumers.is_empty() {
            vec![client(default)?]
        } else {
            consumers.iter().map(|u| client(u)).collect::<Result<_>>()?
        };
        let mut admin = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(RESTORE_TIMEOUT);
        if let Some(ca) = ca_file {
            let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
            for cert in reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("{} is not a PEM file of certificates", ca.display()))?
            {
                admin = admin.add_root_certificate(cert);
            }
        }
        let admin = admin.build().context("building the HTTP client")?;
        Ok(Self {
            base: client(base)?,
            consumers: consumers.into(),
            admin,
        })
    }

    async fn push_batch(&self, messages: &[NewMessage]) -> Result<Vec<MessageId>> {
        Ok(self.base.push_batch(messages).await?)
    }

    /// One long poll (`GET /get/{topic}`); returns the receive time (epoch ms, taken when
    /// the answer was read) and the messages.
    async fn poll(&self, topic: &str, consumer: usize) -> Result<(f64, Vec<Message>)> {
        let (received_ms, messages, _) = self.ack_and_poll(topic, consumer, &[]).await?;
        Ok((received_ms, messages))
    }

    /// Acks `ack` and long-polls for the next batch in one request (`POST /get/{topic}`);
    /// returns the receive time, the messages and how many acks were refused.
    async fn ack_and_poll(
        &self,
        topic: &str,
        consumer: usize,
        ack: &[Handout],
    ) -> Result<(f64, Vec<Message>, u64)> {
        let polled = self
            .consumer(consumer)
            .poll(topic, ack, POLL_COUNT, Duration::from_secs(LONG_POLL_SECS))
            .await?;
        Ok((now_ms(), polled.messages, refused(&polled.acks)))
    }

    /// `POST /ack` with many ids; returns how many were refused.
    async fn ack_batch(&self, ids: &[Handout], consumer: usize) -> Result<u64> {
        Ok(refused(&self.consumer(consumer).ack(ids).await?))
    }

    fn consumer(&self, consumer: usize) -> &Client {
        &self.consumers[consumer % self.consumers.len()]
    }

    /// `POST /ack/{id}` with the delivery's receipt.
    async fn ack(&self, message: &Message, consumer: usize) -> Result<()> {
        Ok(self
            .consumer(consumer)
            .ack_delivery(&message.delivery())
            .await?)
    }

    /// Cancels a message (`GET /delete`); returns the server's `result`.
    async fn delete(&self, id: MessageId) -> Result<&'static str> {
        Ok(self.base.cancel(id).await?.as_str())
    }

    async fn restore(&self, expire: bool) -> Result<serde_json::Value> {
        let url = format!("{}/reStore?expire={expire}", self.base.url());
        let response = self
            .admin
            .get(&url)
            .send()
            .await
            .with_context(|| format!("GET {url}"))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            let body: String = body.chars().take(300).collect();
            bail!("{url}: HTTP {status}: {body}");
        }
        response
            .json()
            .await
            .with_context(|| format!("{url}: decoding the response"))
    }
}

// ---------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------

/// xorshift64: a tiny deterministic PRNG, good enough to spread delays.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `low..=high` (modulo bias is negligible for these ranges).
    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next_u64() % (high - low + 1)
    }
}

/// Wall-clock time in epoch ms, with sub-millisecond precision.
fn now_ms() -> f64 {
    chrono::Utc::now().timestamp_micros() as f64 / 1_000.0
}

/// The `Instant` at which the wall clock will read `epoch_ms` (now, if that has passed).
fn instant_at(epoch_ms: f64) -> Instant {
    let ahead_ms = (epoch_ms - now_ms()).max(0.0);
    Instant::now() + Duration::from_secs_f64(ahead_ms / 1_000.0)
}

fn rate(count: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        round(count as f64 / secs, 1)
    } else {
        0.0
    }
}

fn round(value: f64, decimals: i32) -> f64 {
    let scale = 10_f64.powi(decimals);
    (value * scale).round() / scale
}

async fn with_timeout<T>(
    limit: Duration,
    what: &str,
    future: impl Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(limit, future)
        .await
        .with_context(|| format!("{what}: timed out after {} s", limit.as_secs()))?
}

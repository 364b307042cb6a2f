//! The scenarios: spread, burst, cancel and restore, each on its own
//! topic, each returning its report.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use delayq_client::MessageId;
use futures::{stream, StreamExt};

use crate::api::Api;
use crate::cli::{Cli, Scenario};
use crate::consumers::Consumers;
use crate::push::{bench_message, epoch, push_all};
use crate::report::{
    rate, round, Analysis, BurstReport, CancelReport, Outcome, Percentiles, RestoreReport,
    SpreadReport,
};
use crate::time::{instant_at, now_ms, with_timeout};

/// Cancel (`/delete`) requests in flight at once.
const CANCEL_CONCURRENCY: usize = 32;
/// Timeout of the whole Redis wipe in the `restore` scenario.
const REDIS_WIPE_TIMEOUT: Duration = Duration::from_secs(120);
/// Delay of the messages pushed by the `restore` scenario: one hour.
const RESTORE_DELAY_MS: u64 = 3_600_000;

impl Scenario {
    pub async fn run(self, cli: &Cli, api: &Api, topic: &str) -> Result<Outcome> {
        Ok(match self {
            Scenario::Spread => Outcome::Spread(spread(cli, api, topic).await?),
            Scenario::Burst => Outcome::Burst(burst(cli, api, topic).await?),
            Scenario::Cancel => Outcome::Cancel(cancel(cli, api, topic).await?),
            Scenario::Restore => Outcome::Restore(restore(cli, api, topic).await?),
            Scenario::Pending => Outcome::Pending(crate::pending::pending(cli, api, topic).await?),
        })
    }
}

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

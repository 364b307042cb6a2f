//! The `pending` scenario: what many messages waiting far ahead cost. A
//! probe stream on an empty queue, then `--pending-count` messages pushed
//! with delays uniform in `--pending-offset-ms` + [0, `--pending-spread-ms`]
//! (none falls due during the run), the Redis memory they took, and the
//! same probe stream again beside them. BullMQ's `pending_scale` does the
//! same (shared/peers/bullmq).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{stream, StreamExt, TryStreamExt};

use crate::api::Api;
use crate::cli::Cli;
use crate::consumers::Consumers;
use crate::push::{bench_message, push_all};
use crate::report::{rate, round, Analysis, ForecastTiming, PendingReport, Percentiles, Probe};
use crate::time::instant_at;

pub async fn pending(cli: &Cli, api: &Api, topic: &str) -> Result<PendingReport> {
    let probe_topic = format!("{topic}-probe");
    // A warm-up, so the order of the two probes below is not a bias.
    probe(cli, api, &probe_topic).await?;
    let probe_empty = probe(cli, api, &probe_topic).await?;
    let before = used_memory(&cli.redis_url).await?;

    let count = cli.pending_count;
    let (offset, spread) = (cli.pending_offset_ms, cli.pending_spread_ms);
    eprintln!("[pending] pushing {count} messages due in {offset} ms + up to {spread} ms");
    let started = Instant::now();
    let mut logged = Instant::now();
    let mut done = 0usize;
    let batches = count.div_ceil(cli.batch);
    let mut pushes = stream::iter(0..batches)
        .map(|b| {
            let first = b * cli.batch;
            let messages: Vec<_> = (first..(first + cli.batch).min(count))
                .map(|i| {
                    // A fixed draw per index (splitmix64), so runs compare.
                    let delay = offset + splitmix(i as u64) % (spread + 1);
                    bench_message(topic, i).delay(Duration::from_millis(delay))
                })
                .collect();
            async move { api.push_batch(&messages).await.map(|ids| ids.len()) }
        })
        .buffer_unordered(cli.pushers);
    while let Some(n) = pushes.try_next().await? {
        done += n;
        if logged.elapsed() >= Duration::from_secs(5) {
            logged = Instant::now();
            let secs = started.elapsed().as_secs_f64();
            eprintln!("[pending] {done} pushed, {:.0}/s", done as f64 / secs);
        }
    }
    let push_s = started.elapsed().as_secs_f64();
    let after = used_memory(&cli.redis_url).await?;
    let probe_with_pending = probe(cli, api, &probe_topic).await?;
    let forecast = forecast_timing(api, &probe_topic).await?;
    Ok(PendingReport {
        pending: done,
        push_s: round(push_s, 1),
        push_rate: rate(done, push_s),
        used_memory_before: before,
        used_memory_after: after,
        bytes_per_pending: round(after.saturating_sub(before) as f64 / done.max(1) as f64, 1),
        probe_empty,
        probe_with_pending,
        forecast,
    })
}

/// The forecast's answer times beside the pending messages: the slowest
/// of three, of every topic and of `topic`.
async fn forecast_timing(api: &Api, topic: &str) -> Result<ForecastTiming> {
    let mut t = ForecastTiming {
        all_ms: 0.0,
        all_total: 0,
        all_exact: true,
        topic_ms: 0.0,
        topic_sampled: 0,
        topic_exact: true,
        journal_rows: 0,
    };
    for _ in 0..3 {
        let (ms, f) = api.forecast(None, "1m", "24h").await?;
        t.all_ms = t.all_ms.max(round(ms, 1));
        (t.all_total, t.all_exact, t.journal_rows) = (f.total, f.exact, f.journal_rows);
        let (ms, f) = api.forecast(Some(topic), "1m", "24h").await?;
        t.topic_ms = t.topic_ms.max(round(ms, 1));
        (t.topic_sampled, t.topic_exact) = (f.sampled, f.exact);
    }
    eprintln!(
        "[pending] forecast: every topic {} ms ({} counted), one topic {} ms ({} read)",
        t.all_ms, t.all_total, t.topic_ms, t.topic_sampled
    );
    Ok(t)
}

/// `--probes` messages due `--probe-delay-ms` after their push, consumed
/// and acked as they fall due.
async fn probe(cli: &Cli, api: &Api, topic: &str) -> Result<Probe> {
    let consumers = Consumers::start(
        api,
        topic,
        cli.consumers,
        cli.ack_concurrency,
        Some(cli.ack_mode),
    );
    let messages = (0..cli.probes)
        .map(|i| bench_message(topic, i).delay(Duration::from_millis(cli.probe_delay_ms)))
        .collect();
    let push = push_all(api, messages, cli.batch, cli.pushers).await?;
    let due_max = push.ended_ms + cli.probe_delay_ms as f64;
    consumers
        .wait_for(cli.probes, instant_at(due_max + 30_000.0))
        .await;
    let consumed = consumers.finish().await;
    let analysis = Analysis::new(&consumed.received, &push.ids);
    Ok(Probe {
        pushed: cli.probes,
        delivered: analysis.delivered,
        early: analysis.early,
        lateness_ms: Percentiles::of(analysis.lateness),
    })
}

/// Redis's `used_memory`.
async fn used_memory(redis_url: &str) -> Result<u64> {
    let client = redis::Client::open(redis_url).context("invalid --redis-url")?;
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("connecting to {redis_url}"))?;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut con)
        .await
        .context("INFO memory")?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .context("INFO memory has no used_memory")
}

fn splitmix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

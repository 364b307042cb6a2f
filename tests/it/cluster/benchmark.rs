//! The cluster benchmark, run by hand.

use super::*;

/// The cluster benchmark (run by hand, figures in BENCHMARKS.md):
/// `cargo nextest run --release --test it --run-ignored only --no-capture -E 'test(/^cluster::.*cluster_benchmark$/)'`
/// - failover: kill -9 of the active node → first delivery by the new owner
///   of a message due after the kill, over `DELAYQ_BENCH_RUNS` (default 5)
///   kills, with a 6 s session;
/// - lateness p99 of messages pushed to the node that does not scan their
///   shard, consumed on that same node;
/// - lateness p99 while shards move (multi-active rebalance under load).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: run by hand, see BENCHMARKS.md"]
async fn cluster_benchmark() {
    let runs: usize = std::env::var("DELAYQ_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let session_ms: u64 = 6_000;

    // Failover.
    let mut c = Cluster::builder().session_ms(session_ms).start().await;
    let mut failovers = Vec::new();
    for run in 0..runs {
        let owners = c
            .wait_scanners(&[0, 1], Duration::from_secs(60), |_| true)
            .await;
        let active = Cluster::index_of(&owners[0]);
        let standby = 1 - active;
        let topic = format!("bf{run}{}", random_hex(4));
        let ids = c.push_batch(standby, messages(&topic, 500, 500, 20)).await;
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        c.kill9(active);
        let killed_at = now_ms();
        let expected: HashSet<String> = ids.into_iter().collect();
        let got = drain(
            &c.http,
            &[c.port(standby)],
            &topic,
            &expected,
            Duration::from_secs(40),
        )
        .await;
        assert_delivered(&got, &expected);
        let first = got
            .values()
            .flatten()
            .filter(|(r, _)| r.msg["dueTime"].as_i64().unwrap() > killed_at)
            .map(|(r, _)| r.at)
            .min()
            .unwrap();
        failovers.push(first - killed_at);
        eprintln!("failover run {run}: {} ms", first - killed_at);
        c.start_node(active).await;
    }
    failovers.sort_unstable();
    let median = failovers[failovers.len() / 2];

    // Lateness of pushes to the non-owner, consumed there.
    let owners = c
        .wait_scanners(&[0, 1], Duration::from_secs(60), |_| true)
        .await;
    let other = 1 - Cluster::index_of(&owners[0]);
    let topic = format!("bn{}", random_hex(4));
    let mut ids = Vec::new();
    for k in 0..10 {
        ids.extend(
            c.push_batch(other, messages(&topic, 500, 1_000 + k * 10, 1))
                .await,
        );
    }
    let expected: HashSet<String> = ids.into_iter().collect();
    let got = drain(
        &c.http,
        &[c.port(other)],
        &topic,
        &expected,
        Duration::from_secs(30),
    )
    .await;
    assert_delivered(&got, &expected);
    let non_owner: Vec<i64> = got
        .values()
        .map(|d| d[0].0.at - d[0].0.msg["dueTime"].as_i64().unwrap())
        .collect();
    drop(c);

    // Lateness while shards move.
    let c = Cluster::builder()
        .nodes(3)
        .shards(6)
        .mode("multi-active")
        .session_ms(session_ms)
        .start()
        .await;
    c.wait_scanners(&[0, 1, 2], Duration::from_secs(60), |s| {
        s.iter().all(|v| v.len() == 1)
    })
    .await;
    let topic = format!("br{}", random_hex(4));
    let mut ids = Vec::new();
    for k in 0..3 {
        ids.extend(c.push_batch(k, messages(&topic, 1000, 1_000, 3)).await);
    }
    let mover = async {
        for (n, shard) in [(1usize, 0u32), (2, 1), (0, 2), (1, 3)] {
            tokio::time::sleep(Duration::from_millis(700)).await;
            let to = Cluster::node_name(n);
            let _ = c
                .post(
                    0,
                    &format!("/admin/shards/{shard}/move?to={to}"),
                    &json!({}),
                )
                .await;
        }
        let _ = c.post(1, "/admin/rebalance", &json!({})).await;
    };
    let expected: HashSet<String> = ids.into_iter().collect();
    let ports = [c.port(0), c.port(1), c.port(2)];
    let (got, ()) = tokio::join!(
        drain(&c.http, &ports, &topic, &expected, Duration::from_secs(30)),
        mover
    );
    assert_delivered(&got, &expected);
    let moving: Vec<i64> = got
        .values()
        .map(|d| d[0].0.at - d[0].0.msg["dueTime"].as_i64().unwrap())
        .collect();
    println!(
        "cluster benchmark: failover median {median} ms over {runs} kills {failovers:?} (session {session_ms} ms); \
         non-owner lateness p99 {} ms max {} ms ({} msgs); lateness during shard moves p99 {} ms max {} ms ({} msgs)",
        p99(non_owner.clone()),
        non_owner.iter().max().unwrap(),
        non_owner.len(),
        p99(moving.clone()),
        moving.iter().max().unwrap(),
        moving.len()
    );
}

/// Waits for both nodes, pushes `backlog` messages of `topic` due at once
/// (batches of 1,000, to either node in turn), and lets them fall due.
async fn ready_with_backlog(c: &Cluster, topic: &str, backlog: usize) {
    c.wait_ready(0, Duration::from_secs(30)).await;
    c.wait_ready(1, Duration::from_secs(30)).await;
    for chunk in 0..backlog.div_ceil(1000) {
        let n = (backlog - chunk * 1000).min(1000);
        c.push_batch(
            chunk % 2,
            (0..n)
                .map(|i| json!({"topic": topic, "body": format!("{i}")}))
                .collect(),
        )
        .await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
}

/// The rate limit's precision (run by hand, figures in BENCHMARKS.md):
/// `cargo nextest run --release --test it --run-ignored only --no-capture -E 'test(/rate_limit_benchmark$/)'`
/// Two nodes with `--topic-limit` N/s (`DELAYQ_BENCH_RATE`, default 200)
/// sharing one Redis, 8 consumers (4 polling each node, count 10, acking
/// in their polls), a backlog of more than the run needs due at once, for
/// `DELAYQ_BENCH_SECONDS` (default 60). Prints the rate over the run after
/// the first second's burst, and the slowest and fastest single second.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: run by hand, see BENCHMARKS.md"]
async fn rate_limit_benchmark() {
    let env_u64 = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let rate = env_u64("DELAYQ_BENCH_RATE", 200);
    let secs = env_u64("DELAYQ_BENCH_SECONDS", 60);
    let topic = format!("rl{}", random_hex(6));
    let c = Cluster::builder()
        .arg("--topic-limit")
        .arg(&format!("{topic}={rate}/s"))
        .start()
        .await;
    ready_with_backlog(&c, &topic, (rate * (secs + 5)) as usize).await;
    let started = now_ms();
    let stop_at = started + secs as i64 * 1000;
    let times: Arc<Mutex<Vec<i64>>> = Arc::default();
    let mut consumers = Vec::new();
    for k in 0..8 {
        let (http, base, topic, times) = (
            c.http.clone(),
            c.url(k % 2, ""),
            topic.clone(),
            times.clone(),
        );
        consumers.push(tokio::spawn(async move {
            let mut ack: Vec<String> = Vec::new();
            while now_ms() < stop_at {
                let r = http
                    .post(format!("{base}/get/{topic}?timeout=2"))
                    .json(&json!({"ack": ack, "count": 10}))
                    .send()
                    .await;
                let Ok(r) = r else { continue };
                let Ok(body) = r.json::<Value>().await else {
                    continue;
                };
                let at = now_ms();
                let got = body["messages"].as_array().cloned().unwrap_or_default();
                ack = got
                    .iter()
                    .map(|m| m["id"].as_str().unwrap().to_string())
                    .collect();
                if at < stop_at {
                    times
                        .lock()
                        .unwrap()
                        .extend(std::iter::repeat_n(at, got.len()));
                }
            }
        }));
    }
    for t in consumers {
        let _ = t.await;
    }
    let times = times.lock().unwrap().clone();
    let mut per_second = vec![0u64; secs as usize];
    for t in &times {
        let s = ((t - started) / 1000) as usize;
        if s < per_second.len() {
            per_second[s] += 1;
        }
    }
    let after_burst: u64 = per_second[1..].iter().sum();
    let measured = after_burst as f64 / (secs - 1) as f64;
    let report = json!({
        "limit_per_s": rate,
        "seconds": secs,
        "consumers": 8,
        "nodes": 2,
        "handed_out": times.len(),
        "first_second": per_second[0],
        "rate_after_first_second": (measured * 10.0).round() / 10.0,
        "error_pct": ((measured / rate as f64 - 1.0) * 1000.0).round() / 10.0,
        "slowest_second": per_second[1..].iter().min(),
        "fastest_second": per_second[1..].iter().max(),
    });
    println!("{report}");
    assert!((measured / rate as f64 - 1.0).abs() < 0.05, "{report}");
}

/// What the consumers of [`concurrency_cap_benchmark`] hold and saw.
#[derive(Default, Clone, Copy)]
struct Held {
    now: u64,
    most: u64,
    handed: u64,
    /// Polls answered empty, and of them those before their timeout.
    empty: u64,
    early: u64,
}

/// The concurrency cap's use (run by hand, figures in BENCHMARKS.md):
/// `cargo nextest run --release --test it --run-ignored only --no-capture -E 'test(/concurrency_cap_benchmark$/)'`
/// Two nodes with `--topic-limit TOPIC=concurrency=M` (`DELAYQ_BENCH_CAP`,
/// default 20) sharing one Redis, 16 consumers (8 polling each node,
/// count 5), each holding what it got for 50 ms before acking it in its
/// next poll, a backlog due at once, for `DELAYQ_BENCH_SECONDS` (default
/// 30). What the consumers hold (from a poll's answer until the poll that
/// acks it is sent) is part of what the server counts, so its most must
/// not pass M; it prints that, the mean held (sampled every 10 ms), the
/// hand-outs a second beside the M ÷ 50 ms a cap used to the full allows,
/// and the polls (timeout 2 s) that answered empty, at their timeout or
/// before it.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: run by hand, see BENCHMARKS.md"]
async fn concurrency_cap_benchmark() {
    let env_u64 = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let cap = env_u64("DELAYQ_BENCH_CAP", 20);
    let secs = env_u64("DELAYQ_BENCH_SECONDS", 30);
    let hold = Duration::from_millis(50);
    let topic = format!("cc{}", random_hex(6));
    let c = Cluster::builder()
        .arg("--topic-limit")
        .arg(&format!("{topic}=concurrency={cap}"))
        .start()
        .await;
    ready_with_backlog(&c, &topic, (cap * 20 * (secs + 5)) as usize).await;
    let started = now_ms();
    let stop_at = started + secs as i64 * 1000;
    let held: Arc<Mutex<Held>> = Arc::default();
    let mut consumers = Vec::new();
    for k in 0..16 {
        let (http, base, topic, held) = (
            c.http.clone(),
            c.url(k % 2, ""),
            topic.clone(),
            held.clone(),
        );
        consumers.push(tokio::spawn(async move {
            let mut ack: Vec<String> = Vec::new();
            while now_ms() < stop_at {
                held.lock().unwrap().now -= ack.len() as u64;
                let asked = std::time::Instant::now();
                let r = http
                    .post(format!("{base}/get/{topic}?timeout=2"))
                    .json(&json!({"ack": ack, "count": 5}))
                    .send()
                    .await;
                ack.clear();
                let Ok(r) = r else { continue };
                let Ok(body) = r.json::<Value>().await else {
                    continue;
                };
                let got = body["messages"].as_array().cloned().unwrap_or_default();
                {
                    let mut h = held.lock().unwrap();
                    h.now += got.len() as u64;
                    h.most = h.most.max(h.now);
                    if now_ms() < stop_at {
                        h.handed += got.len() as u64;
                    }
                    if got.is_empty() {
                        h.empty += 1;
                        if asked.elapsed() < Duration::from_millis(1_900) && now_ms() < stop_at {
                            h.early += 1;
                        }
                    }
                }
                tokio::time::sleep(hold).await;
                ack = got
                    .iter()
                    .map(|m| m["id"].as_str().unwrap().to_string())
                    .collect();
            }
            held.lock().unwrap().now -= ack.len() as u64;
        }));
    }
    let (mut samples, mut sum) = (0u64, 0u64);
    while now_ms() < stop_at {
        tokio::time::sleep(Duration::from_millis(10)).await;
        sum += held.lock().unwrap().now;
        samples += 1;
    }
    for t in consumers {
        let _ = t.await;
    }
    let Held {
        most,
        handed,
        empty,
        early,
        ..
    } = *held.lock().unwrap();
    let rate = handed as f64 / secs as f64;
    let report = json!({
        "cap": cap,
        "seconds": secs,
        "consumers": 16,
        "nodes": 2,
        "hold_ms": hold.as_millis() as u64,
        "most_held": most,
        "mean_held": ((sum as f64 / samples.max(1) as f64) * 10.0).round() / 10.0,
        "handed_out_per_s": (rate * 10.0).round() / 10.0,
        "full_use_per_s": cap as f64 * 1000.0 / hold.as_millis() as f64,
        "empty_polls_at_their_timeout": empty - early,
        "empty_polls_early": early,
    });
    println!("{report}");
    assert!(most <= cap, "{report}");
}

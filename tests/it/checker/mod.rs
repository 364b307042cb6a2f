//! A randomized fault checker, in the manner of Jepsen's queue tests, run
//! on real processes: two delayq nodes (multi-active) on a three-server
//! ZooKeeper ensemble, one Redis or a Redis Cluster with replicas, and a
//! MariaDB or PostgreSQL journal (chosen by the seed), each node reaching
//! Redis, the database and each ZooKeeper server through proxies of its
//! own that the nemesis can cut (connections refused) or hang (packets
//! dropped).
//!
//! - [`history`]: every client operation with its invocation and
//!   completion on the test host's monotonic clock and its result (ok,
//!   failed, or unknown: it may have been applied), and every fault.
//! - [`workload`]: pushes (single and batch, with bizKeys) to three topics
//!   (one paused and resumed now and then, one with a rate limit and a
//!   concurrency cap), cancels by id, by bizKey and by bizKey prefix after a tenth of the
//!   pushes, reschedules, debounce (a push again on a recent bizKey with
//!   `onDuplicate` `replace`, a new body and delay, or `extend`, a new
//!   delay), consumers acking alone or in their next poll, nacking, and
//!   stalling past the ttl to come back late.
//! - [`series`]: recurring messages (`repeat: {every, times: 3}`) on a
//!   topic of their own, with their own record and invariants (each
//!   occurrence never early, none handed out again after its ack, one
//!   consumer at a time, every series consumed).
//! - [`nemesis`]: kill -9 and SIGSTOP of nodes, node clocks 3 s ahead or
//!   behind (started so) or jumping 3 s either way while they run (a
//!   clock shim, clock_shim.c), Redis restarted empty or from an older snapshot (single
//!   Redis) or a master hung and its replica promoted (Redis Cluster),
//!   a ZooKeeper server killed or the quorum lost, partitions between a
//!   node and Redis, the database or ZooKeeper, the database out of reach
//!   of every node, and (PostgreSQL) the database refusing every write.
//! - [`check`]: the invariants, from the history alone (the server's state
//!   only as a final read): never early (by the host's clock, from the
//!   earliest due time any push, reschedule, replace or extend that may
//!   have been applied last could set), nothing lost, nothing revived
//!   (outside the documented window, which it names), one consumer at a
//!   time, the cap never exceeded, answers true (cancels, pauses),
//!   nothing phantom, bodies intact (the push's or a replace's), and
//!   replaced (a poll sent after a replace was answered `replaced` hands
//!   out its body or that of a replace that may have come after it; one
//!   answered `in_flight` changes nothing).
//!
//! `DELAYQ_CHECKER_SEED` (a fresh random seed when unset, printed so a
//! failure can be replayed), `DELAYQ_CHECKER_SECS` (how long the nemesis
//! runs), `DELAYQ_CHECKER_CONFIG` (`single-mariadb`, `single-postgres`,
//! `cluster-mariadb`, `cluster-postgres`; by the seed when unset) and
//! `DELAYQ_CHECKER_PLANT` (`early`, `lost`, `revived`, `doubled`,
//! `answer`, `stale`, `grouped`: a planted bug the checker must catch).
//! `scripts/check-faults` runs it long.

mod check;
mod history;
mod nemesis;
mod series;
mod workload;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;

use crate::common::cluster::Cluster;
use crate::common::{Backend, RedisCluster};
use check::Final;
use history::{now, Res, What};
use workload::{World, LIMITED, MAIN, PAUSED};

/// The planted bugs, each with the invariant it must break and the fault
/// that plants it in the nodes.
pub const PLANTS: [(&str, &str, &str); 7] = [
    ("early", "early", "plant_early"),
    ("lost", "lost", "plant_lost"),
    ("revived", "revived", "plant_revived"),
    ("doubled", "doubled", "ignore_receipts"),
    ("answer", "answer", "plant_answer"),
    ("stale", "replaced", "plant_stale_body"),
    ("grouped", "grouped", "plant_grouped"),
];

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

fn seed() -> u64 {
    env_u64("DELAYQ_CHECKER_SEED").unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        (t.as_nanos() as u64 ^ u64::from(std::process::id())) % 1_000_000
    })
}

/// Which Redis and which journal: from `DELAYQ_CHECKER_CONFIG`, or the seed.
fn config(seed: u64) -> (bool, Backend) {
    let name = std::env::var("DELAYQ_CHECKER_CONFIG").unwrap_or_default();
    let (cluster, postgres) = match name.as_str() {
        "single-mariadb" => (false, false),
        "single-postgres" => (false, true),
        "cluster-mariadb" => (true, false),
        "cluster-postgres" => (true, true),
        "" => (seed % 4 >= 2, seed % 2 == 1),
        other => panic!("DELAYQ_CHECKER_CONFIG={other}: not a configuration"),
    };
    let backend = if postgres {
        Backend::Postgres
    } else {
        Backend::Mariadb
    };
    (cluster, backend)
}

/// Runs the workload under the nemesis for `secs`, then heals, drains
/// and reads the end: the violations by invariant and the report.
async fn run(seed: u64, secs: u64, plant: Option<&str>) -> (check::Violations, serde_json::Value) {
    let (on_cluster, backend) = config(seed);
    let dir = tempfile::tempdir().unwrap();
    let redis_cluster = on_cluster.then(|| RedisCluster::start(dir.path()));
    // Every node's wall clock can be moved while it runs (nemesis.rs).
    let shim = crate::common::redis_cluster::build_clock_shim(dir.path());
    let mut b = Cluster::builder()
        .mode("multi-active")
        .backend(backend)
        .proxied()
        .env_all("LD_PRELOAD", shim.to_str().unwrap())
        .env_all("CLOCK_SKEW_FILE", "{dir}/clock-skew-ms-{node}")
        .arg("--reconcile-interval")
        .arg("2s")
        .arg("--reconcile-grace")
        .arg("2s")
        .arg("--topic-limit")
        .arg(&format!("{LIMITED}=50/s,concurrency={}", workload::CAP));
    if let Some(rc) = &redis_cluster {
        b = b.redis_url(&rc.url);
    }
    if let Some(kind) = plant {
        let fault = PLANTS.iter().find(|p| p.0 == kind).expect("a plant kind").2;
        b = b.env_all("DELAYQ_FAULTS", fault);
    }
    let c = b.start().await;
    for i in 0..2 {
        c.wait_ready(i, Duration::from_secs(30)).await;
    }
    // The nodes made the journal's tables: the switch that lets it refuse
    // writes goes in before any fault.
    c.journal.prepare_refusal();
    let config = format!(
        "{}-{}",
        if on_cluster { "cluster" } else { "single" },
        if backend == Backend::Postgres {
            "postgres"
        } else {
            "mariadb"
        }
    );
    eprintln!(
        "checker: seed {seed} ({config}), nemesis for {secs} s, planted bug: {plant:?} \
         (replay: scripts/check-faults --seed {seed} --secs {secs} --config {config}{})",
        plant.map(|p| format!(" --plant {p}")).unwrap_or_default()
    );
    let w = Arc::new(World::new(seed));
    nemesis::publish_ports(&w, &c);
    let started = Instant::now();
    let producers: Vec<_> = (0..2)
        .map(|i| tokio::spawn(workload::producer(w.clone(), i)))
        .collect();
    let pauser = tokio::spawn(workload::pauser(w.clone()));
    let series_producer = tokio::spawn(series::producer(w.clone()));
    let series_consumer = tokio::spawn(series::consumer(w.clone(), Duration::from_secs(40)));
    let consumers: Vec<_> = [MAIN, MAIN, MAIN, PAUSED, LIMITED]
        .into_iter()
        .enumerate()
        .map(|(i, topic)| tokio::spawn(workload::consumer(w.clone(), i, topic)))
        .collect();
    let mut c = nemesis::nemesis(
        w.clone(),
        c,
        redis_cluster.as_ref(),
        Duration::from_secs(secs),
    )
    .await;

    // Quiet: every link healed (the nemesis did), every node up and
    // running; the pushes stop and the consumers drain.
    for i in 0..c.nodes.len() {
        match &c.nodes[i] {
            Some(n) => n.signal("CONT"),
            None => c.start_node(i).await,
        }
    }
    nemesis::publish_ports(&w, &c);
    w.stop.store(true, Ordering::Release);
    for p in producers {
        p.await.unwrap();
    }
    pauser.await.unwrap();
    series_producer.await.unwrap();
    let quiet_from = now();
    let open = |w: &World| {
        let ops = w.history.ops.lock().unwrap();
        let mut accepted: HashSet<&str> = HashSet::new();
        for op in ops.iter() {
            if let (What::Push { msgs }, Res::Ok) = (&op.what, op.res) {
                for p in msgs.iter().filter(|p| !p.duplicate) {
                    accepted.insert(p.id.as_deref().unwrap_or_default());
                }
            }
        }
        for op in ops.iter() {
            match &op.what {
                What::Ack {
                    id, consumed: true, ..
                } if op.res == Res::Ok => {
                    accepted.remove(id.as_str());
                }
                What::Poll { acks, .. } if op.res == Res::Ok => {
                    for (id, _, consumed) in acks {
                        if *consumed {
                            accepted.remove(id.as_str());
                        }
                    }
                }
                What::Cancel { deleted, .. } if op.res == Res::Ok => {
                    for id in deleted {
                        accepted.remove(id.as_str());
                    }
                }
                _ => {}
            }
        }
        accepted.len()
    };
    let drain_until = Instant::now() + Duration::from_secs(60);
    let (mut last, mut since) = (usize::MAX, Instant::now());
    loop {
        let left = open(&w);
        if left != last {
            (last, since) = (left, Instant::now());
        }
        if left == 0 || Instant::now() > drain_until || since.elapsed() > Duration::from_secs(15) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    w.drained.store(true, Ordering::Release);
    for h in consumers {
        if tokio::time::timeout(Duration::from_secs(20), h)
            .await
            .is_err()
        {
            eprintln!("checker: a consumer did not drain in 20 s");
        }
    }
    // The series' consumer goes on until each series is consumed (40 s
    // at most).
    if tokio::time::timeout(Duration::from_secs(50), series_consumer)
        .await
        .is_err()
    {
        eprintln!("checker: the series' consumer did not drain in 50 s");
    }
    // Late acks of stalled consumers land.
    tokio::time::sleep(Duration::from_secs(4)).await;

    // The final read of every message pushed.
    let ops = w.history.ops.lock().unwrap().clone();
    let faults = w.history.faults.lock().unwrap().clone();
    let ids: Vec<String> = ops
        .iter()
        .filter_map(|op| match &op.what {
            What::Push { msgs } => Some(msgs.iter().filter_map(|p| p.id.clone())),
            _ => None,
        })
        .flatten()
        .collect();
    let port = w.port(0).unwrap();
    let http = w.http.clone();
    let finals: HashMap<String, Option<Final>> = futures::stream::iter(ids)
        .map(|id| {
            let http = http.clone();
            async move {
                for _ in 0..20 {
                    let r = http
                        .get(format!("http://127.0.0.1:{port}/messages/{id}"))
                        .send()
                        .await;
                    let Ok(r) = r else { continue };
                    if r.status() == 404 {
                        return (id, None);
                    }
                    if r.status() != 200 {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        continue;
                    }
                    let v: serde_json::Value = r.json().await.unwrap_or_default();
                    let m = &v["message"];
                    return (
                        id,
                        Some(Final {
                            status: m["status"].as_str().unwrap_or_default().to_string(),
                            due: m["dueTime"].as_i64().unwrap_or(0),
                        }),
                    );
                }
                panic!("no final read of {id}");
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let (mut violations, mut report) = check::check(&ops, &faults, &finals, quiet_from);
    let series_finals = series::finals(&w, port).await;
    report["series"] = series::check(&w, &faults, &series_finals, &mut violations);
    report["violations"] = check::violations_json(&violations);
    report["seed"] = json!(seed);
    report["config"] = json!(config);
    report["seconds"] = json!(started.elapsed().as_secs());
    report["nemesis_seconds"] = json!(secs);
    report["planted"] = json!(plant);
    println!("{report}");
    eprintln!("checker: {report:#}");
    eprint!("{}", explain(&ops, &faults, &finals, &violations, 1));
    if violations.total() > 0 {
        // The nodes' logs (named by generation: 100 × (node + 1) + start)
        // outlive the run.
        let keep = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target/checker-logs")
            .join(format!("seed-{seed}"));
        let _ = std::fs::create_dir_all(&keep);
        for entry in std::fs::read_dir(c.dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name();
            if name.to_string_lossy().ends_with(".log") {
                let _ = std::fs::copy(entry.path(), keep.join(&name));
            }
        }
        // Every operation and fault around the first violations of each
        // invariant.
        let _ = std::fs::write(
            keep.join("explain.txt"),
            explain(&ops, &faults, &finals, &violations, 20),
        );
        eprintln!(
            "checker: the nodes' logs and explain.txt (the first 20 violations of each invariant, with every operation naming the message) are kept in {}",
            keep.display()
        );
    }
    drop(c);
    (violations, report)
}

/// The invariants hold under the nemesis, on a random seed (and so a
/// random configuration) in every run.
#[tokio::test(flavor = "multi_thread")]
async fn the_invariants_hold_under_faults() {
    let seed = seed();
    let secs = env_u64("DELAYQ_CHECKER_SECS").unwrap_or(75);
    let plant = std::env::var("DELAYQ_CHECKER_PLANT")
        .ok()
        .filter(|p| !p.is_empty());
    if plant.is_some() {
        // scripts/check-faults --plant runs the planted test below.
        return;
    }
    let (violations, report) = run(seed, secs, None).await;
    let m = &report["messages"];
    let injected: u64 = report["faults"]
        .as_object()
        .map(|f| f.values().filter_map(|n| n.as_u64()).sum())
        .unwrap_or(0);
    assert!(injected > 0, "the nemesis injected nothing");
    // It proves nothing if nothing worked.
    for (what, least) in [
        ("accepted", 200),
        ("delivered", 150),
        ("acked", 100),
        ("cancelled", 3),
    ] {
        assert!(
            m[what].as_u64().unwrap_or(0) >= least,
            "only {} messages {what} (at least {least} expected): {report}",
            m[what]
        );
    }
    assert_eq!(
        violations.total(),
        0,
        "seed {seed}: violations {:#?}",
        violations.0
    );
}

/// A planted bug (one of [`PLANTS`], chosen by the seed or by
/// `DELAYQ_CHECKER_PLANT`) makes the checker fail on the invariant it
/// breaks.
#[tokio::test(flavor = "multi_thread")]
async fn a_planted_bug_is_caught() {
    let seed = seed();
    let plant = std::env::var("DELAYQ_CHECKER_PLANT")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| PLANTS[(seed / 4) as usize % PLANTS.len()].0.to_string());
    let secs = env_u64("DELAYQ_CHECKER_SECS").unwrap_or(45);
    let invariant = PLANTS
        .iter()
        .find(|p| p.0 == plant)
        .unwrap_or_else(|| panic!("DELAYQ_CHECKER_PLANT={plant}: not a plant"))
        .1;
    let (mut violations, _) = run(seed, secs, Some(&plant)).await;
    // A plant whose symptom needs a rare interleaving (`doubled`: a late
    // consumer's ack landing while the next delivery is still in flight)
    // can go unseen in a short run under heavy faults: one more run, with
    // the next seed, before it counts as missed.
    let mut seeds = vec![seed];
    if !violations.0.contains_key(invariant) {
        eprintln!(
            "checker: seed {seed}: {plant} unseen in {secs} s; once more with seed {}",
            seed + 1
        );
        seeds.push(seed + 1);
        violations = run(seed + 1, secs, Some(&plant)).await.0;
    }
    assert!(
        violations.0.contains_key(invariant),
        "seeds {seeds:?}: the planted bug {plant} went unseen (no {invariant} violation); found {:?}",
        violations.0.keys().collect::<Vec<_>>()
    );
    eprintln!(
        "checker: the planted bug {plant} was caught: {} {invariant} violations",
        violations.0[invariant].0
    );
}

/// For the first `each` violations of each invariant: every operation
/// that names its message, the faults around it, and its final read.
fn explain(
    ops: &[history::Op],
    faults: &[history::Fault],
    finals: &HashMap<String, Option<Final>>,
    violations: &check::Violations,
    each: usize,
) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for (invariant, (_, list)) in &violations.0 {
        for first in list.iter().take(each) {
            let id = first.split(':').next().unwrap_or_default().trim();
            let _ = writeln!(out, "checker: {invariant}: {first}");
            let mut around = (i64::MAX, i64::MIN);
            // Its topic and bizKey: a push with onDuplicate on it may have
            // changed it.
            let key = ops.iter().find_map(|op| match &op.what {
                What::Push { msgs } => msgs
                    .iter()
                    .find(|p| p.id.as_deref() == Some(id) && p.biz_key.is_some())
                    .map(|p| (p.topic.clone(), p.biz_key.clone())),
                _ => None,
            });
            for op in ops {
                let names = match &op.what {
                    What::Push { msgs } => msgs.iter().any(|p| {
                        p.id.as_deref() == Some(id)
                            || p.on_duplicate.is_some()
                                && key.as_ref() == Some(&(p.topic.clone(), p.biz_key.clone()))
                    }),
                    What::Poll { got, acks, .. } => {
                        got.iter().any(|g| g.id == id) || acks.iter().any(|a| a.0 == id)
                    }
                    What::Ack { id: i, .. } | What::Nack { id: i, .. } => i == id,
                    What::Reschedule { id: i, .. } => i == id,
                    What::Cancel { by, deleted, .. } => {
                        deleted.iter().any(|d| d == id)
                            || matches!(by, history::CancelBy::Id(i) if i == id)
                    }
                    _ => false,
                };
                if names {
                    around = (around.0.min(op.invoke), around.1.max(op.complete));
                    let _ = writeln!(
                        out,
                        "    {:>9.3}..{:>9.3} s {:<8} :{} {:?}",
                        op.invoke as f64 / 1e6,
                        op.complete as f64 / 1e6,
                        op.res.name(),
                        op.node,
                        op.what
                    );
                }
            }
            for f in faults {
                if f.to >= around.0 - 5_000_000 && f.from <= around.1 + 5_000_000 {
                    let _ = writeln!(
                        out,
                        "    fault {} {:.3}..{:.3} s",
                        f.kind,
                        f.from as f64 / 1e6,
                        f.to as f64 / 1e6
                    );
                }
            }
            let _ = writeln!(out, "    final: {:?}", finals.get(id));
        }
    }
    out
}

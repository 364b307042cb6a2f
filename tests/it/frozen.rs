//! One node of three frozen (SIGSTOP) for longer than its ZooKeeper session
//! while producers and consumers go through the shipped nginx
//! (`cluster/nginx`: its per-route timeouts, and `cluster/nginx-watch`
//! taking a node whose `/ready` does not answer out of rotation), then
//! resumed. Real processes throughout: a ZooKeeper ensemble, one Redis, a
//! MariaDB journal, three `delayq serve`, nginx.
//!
//! The producers push one message per request, each with a bizKey, and
//! send a push that got no answer again with the same key. The consumers
//! long-poll and ack each message on its own, with its receipt, as a
//! first program against delayq would.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::{now_ms, parse_id, random_hex, Backend, Env};
use serde_json::{json, Value};

struct Scenario {
    /// The active/standby pair with its standby frozen, instead of three
    /// active nodes with one frozen.
    pair: bool,
    messages: usize,
    session_ms: u64,
    freeze: Duration,
    producers: usize,
    consumers: usize,
    /// Pushes run this long before the freeze, and after it.
    around: Duration,
    ttl_ms: i64,
}

/// One push request: when it was sent, how long its answer took, and its
/// status (0: no answer).
struct PushAttempt {
    /// Its bizKey (also its body).
    key: String,
    sent: i64,
    took_ms: i64,
    status: u16,
}

struct Delivery {
    id: String,
    /// Its body: the bizKey it was pushed with.
    key: String,
    due: i64,
    at: i64,
    acked: bool,
}

struct Outcome {
    /// bizKey → id, for every push accepted.
    accepted: HashMap<String, String>,
    attempts: Vec<PushAttempt>,
    deliveries: Vec<Delivery>,
    /// The node frozen, and the shards it scanned then.
    frozen: usize,
    frozen_shards: HashSet<u32>,
    frozen_at: i64,
    resumed_at: i64,
}

fn percentile(v: &[i64], p: usize) -> i64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v[(v.len() * p / 100).min(v.len() - 1)]
}

async fn push_until_accepted(
    http: &reqwest::Client,
    front: u16,
    msg: &Value,
    attempts: &Mutex<Vec<PushAttempt>>,
) -> Option<String> {
    // As a client would: sent again (its bizKey makes that safe) for up to
    // 20 s, well past the freeze.
    let giving_up = Instant::now() + Duration::from_secs(20);
    while Instant::now() < giving_up {
        let sent = now_ms();
        let began = Instant::now();
        let r = http
            .post(format!("http://127.0.0.1:{front}/push"))
            .json(msg)
            .send()
            .await;
        let (status, id) = match r {
            Ok(r) => {
                let status = r.status().as_u16();
                let v: Value = r.json().await.unwrap_or(Value::Null);
                (status, v["id"].as_str().map(String::from))
            }
            Err(_) => (0, None),
        };
        attempts.lock().unwrap().push(PushAttempt {
            key: msg["bizKey"].as_str().unwrap_or_default().to_string(),
            sent,
            took_ms: began.elapsed().as_millis() as i64,
            status,
        });
        if status == 200 {
            return id;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("a push was refused for 20 s: {msg}");
    None
}

/// A consumer loop through nginx: poll, then ack each message on its own.
async fn consume(
    http: reqwest::Client,
    front: u16,
    topic: String,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Vec<Delivery>>>,
) {
    while !stop.load(Ordering::Relaxed) {
        let url = format!("http://127.0.0.1:{front}/get/{topic}?timeout=2&count=50");
        let Ok(resp) = http.get(url).send().await else {
            continue;
        };
        let at = now_ms();
        let Ok(v) = resp.json::<Value>().await else {
            continue;
        };
        for m in v["messages"].as_array().cloned().unwrap_or_default() {
            let id = m["id"].as_str().unwrap().to_string();
            let receipt = m["receipt"].as_str().unwrap_or_default().to_string();
            let acked = http
                .post(format!(
                    "http://127.0.0.1:{front}/ack/{id}?receipt={receipt}"
                ))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200);
            out.lock().unwrap().push(Delivery {
                key: m["body"].as_str().unwrap_or_default().to_string(),
                id,
                due: m["dueTime"].as_i64().unwrap(),
                at,
                acked,
            });
        }
    }
}

async fn run(s: &Scenario) -> (Cluster, Outcome) {
    let nodes: Vec<usize> = if s.pair { vec![0, 1] } else { vec![0, 1, 2] };
    let mut c = Cluster::builder()
        .nodes(nodes.len())
        .shards(6)
        .mode(if s.pair {
            "active-standby"
        } else {
            "multi-active"
        })
        .session_ms(s.session_ms)
        .start()
        .await;
    let owners = c
        .wait_scanners(&nodes, Duration::from_secs(60), |s| {
            let owners: HashSet<&String> = s.iter().map(|v| &v[0]).collect();
            owners.len() == nodes.len() || (nodes.len() == 2 && owners.len() == 1)
        })
        .await;
    // The standby of the pair (it scans nothing), or node-1.
    let frozen = if s.pair {
        1 - Cluster::index_of(&owners[0])
    } else {
        1
    };
    // Ready (a standby once it saw the active node lead), so nginx-watch
    // has it in rotation.
    c.wait_ready(frozen, Duration::from_secs(30)).await;
    let frozen_shards: HashSet<u32> = owners
        .iter()
        .enumerate()
        .filter(|(_, o)| *o == &Cluster::node_name(frozen))
        .map(|(s, _)| s as u32)
        .collect();
    let front = c.start_nginx(&nodes);
    let topic = format!("fz{}", random_hex(6));
    // As a user's HTTP client would be: a 15 s timeout, keep-alive.
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let deliveries = Arc::new(Mutex::new(Vec::new()));
    let consumers: Vec<_> = (0..s.consumers)
        .map(|_| {
            tokio::spawn(consume(
                http.clone(),
                front,
                topic.clone(),
                stop.clone(),
                deliveries.clone(),
            ))
        })
        .collect();

    // Producers: `messages` pushes spread evenly over the whole window,
    // each due 3 to 8 s after it is pushed.
    let window = s.around * 2 + s.freeze;
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let accepted = Arc::new(Mutex::new(HashMap::new()));
    let per_producer = s.messages / s.producers;
    let gap = window / per_producer as u32;
    let began = Instant::now();
    let producers: Vec<_> = (0..s.producers)
        .map(|p| {
            let (http, topic, attempts, accepted) = (
                http.clone(),
                topic.clone(),
                attempts.clone(),
                accepted.clone(),
            );
            let ttl = s.ttl_ms;
            tokio::spawn(async move {
                for k in 0..per_producer {
                    let at = began + gap * k as u32 + gap * p as u32 / 2;
                    tokio::time::sleep_until(at.into()).await;
                    let key = format!("p{p}-{k}");
                    let delay = 3_000 + (k as i64 * 7_919 + p as i64 * 2_003) % 5_000;
                    let msg = json!({"topic": topic, "body": key, "bizKey": key, "delay": delay, "ttl": ttl});
                    if let Some(id) = push_until_accepted(&http, front, &msg, &attempts).await {
                        accepted.lock().unwrap().insert(key, id);
                    }
                }
            })
        })
        .collect();

    tokio::time::sleep_until((began + s.around).into()).await;
    c.node(frozen).signal("STOP");
    let frozen_at = now_ms();
    eprintln!("node-{frozen} frozen; it scanned shards {frozen_shards:?}");
    tokio::time::sleep(s.freeze).await;
    c.node(frozen).signal("CONT");
    let resumed_at = now_ms();
    eprintln!("node-{frozen} resumed after {} ms", resumed_at - frozen_at);
    for p in producers {
        p.await.unwrap();
    }

    // Every accepted message delivered and acked, or time is up.
    let accepted: HashMap<String, String> = accepted.lock().unwrap().clone();
    let ids: HashSet<&String> = accepted.values().collect();
    let deadline =
        Instant::now() + Duration::from_secs(8) + Duration::from_millis(s.ttl_ms as u64 * 2);
    while Instant::now() < deadline {
        let acked: HashSet<String> = deliveries
            .lock()
            .unwrap()
            .iter()
            .filter(|d| d.acked)
            .map(|d| d.id.clone())
            .collect();
        if ids.iter().all(|id| acked.contains(*id)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A little longer: anything delivered twice shows now.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    for h in consumers {
        h.await.unwrap();
    }
    let attempts = std::mem::take(&mut *attempts.lock().unwrap());
    let deliveries = std::mem::take(&mut *deliveries.lock().unwrap());
    (
        c,
        Outcome {
            accepted,
            attempts,
            deliveries,
            frozen,
            frozen_shards,
            frozen_at,
            resumed_at,
        },
    )
}

struct Figures {
    healthy_p50: i64,
    healthy_p99: i64,
    healthy_max: i64,
    /// None when the frozen node scanned nothing (a standby).
    frozen_max: Option<i64>,
    push_max_ms: i64,
    pushes_failed: usize,
    pushes_during_freeze: usize,
}

/// Checks what must hold whatever the timings: nothing lost, early, handed
/// to two consumers at once, acked and back, or accepted twice. Returns the
/// figures.
fn check(c: &Cluster, s: &Scenario, o: &Outcome) -> Figures {
    let mut failed_by_status: BTreeMap<u16, usize> = BTreeMap::new();
    for a in o.attempts.iter().filter(|a| a.status != 200) {
        *failed_by_status.entry(a.status).or_default() += 1;
    }
    if !failed_by_status.is_empty() {
        eprintln!("push attempts refused, by status (0: no answer): {failed_by_status:?}");
    }
    let ids: HashSet<&String> = o.accepted.values().collect();
    assert_eq!(
        o.accepted.len(),
        s.messages / s.producers * s.producers,
        "a push was never accepted"
    );
    assert_eq!(ids.len(), o.accepted.len(), "two bizKeys got one id");
    // A push whose attempt got no answer (nginx's 504 from the frozen
    // node) may still be applied when that node resumes, after the retry
    // that got the id was delivered and acked, its bizKey free again (the
    // documented outcome of a push that timed out: nginx-proxy.conf). Such
    // a message is delivered under an id no push got; any other is a push
    // accepted twice.
    let unanswered: HashSet<&str> = o
        .attempts
        .iter()
        .filter(|a| a.status == 0 || a.status >= 500)
        .map(|a| a.key.as_str())
        .collect();
    let mut by_id: BTreeMap<&str, Vec<&Delivery>> = BTreeMap::new();
    let mut applied_late = HashSet::new();
    for d in &o.deliveries {
        if !ids.contains(&d.id) && unanswered.contains(d.key.as_str()) {
            applied_late.insert(d.id.as_str());
            continue;
        }
        assert!(
            ids.contains(&d.id),
            "{} ({}) was delivered but no push got that id: a push was accepted twice",
            d.id,
            d.key
        );
        assert!(
            d.at >= d.due,
            "{} delivered {} ms early",
            d.id,
            d.due - d.at
        );
        by_id.entry(&d.id).or_default().push(d);
    }
    if !applied_late.is_empty() {
        eprintln!(
            "{} pushes that got no answer were applied after their retry's message ended: {applied_late:?}",
            applied_late.len()
        );
    }
    for id in &ids {
        let ds = by_id.get(id.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        assert!(!ds.is_empty(), "{id} was never delivered");
        assert!(ds.iter().any(|d| d.acked), "{id} was never acked");
        let mut ds = ds.to_vec();
        ds.sort_by_key(|d| d.at);
        for pair in ds.windows(2) {
            assert!(
                !pair[0].acked,
                "{id} was delivered again after it was acked"
            );
            // Handed out again only after the first hand-out's ttl (the
            // receive times are taken after the answers: 500 ms of slack).
            assert!(
                pair[1].at - pair[0].at >= s.ttl_ms - 500,
                "{id} was handed out twice within its ttl: at {} and {}",
                pair[0].at,
                pair[1].at
            );
        }
    }
    let first: HashMap<&str, &Delivery> = by_id
        .iter()
        .map(|(id, ds)| (*id, *ds.iter().min_by_key(|d| d.at).unwrap()))
        .collect();
    let (mut healthy, mut frozen) = (Vec::new(), Vec::new());
    let mut slow: BTreeMap<(u32, i64), usize> = BTreeMap::new();
    for (id, d) in &first {
        let late = d.at - d.due;
        let shard = c.keys.shard_of(parse_id(id));
        if o.frozen_shards.contains(&shard) {
            frozen.push(late);
        } else {
            healthy.push(late);
            if late > 500 {
                // By shard and by second of due time from the freeze.
                *slow
                    .entry((shard, (d.due - o.frozen_at).div_euclid(1000)))
                    .or_default() += 1;
            }
        }
    }
    if !slow.is_empty() {
        eprintln!("messages of the running nodes' shards more than 500 ms late, by (shard, second due after the freeze): {slow:?}");
    }
    let during: Vec<&PushAttempt> = o
        .attempts
        .iter()
        .filter(|a| a.sent >= o.frozen_at && a.sent < o.resumed_at)
        .collect();
    Figures {
        healthy_p50: percentile(&healthy, 50),
        healthy_p99: percentile(&healthy, 99),
        healthy_max: *healthy.iter().max().unwrap(),
        frozen_max: frozen.iter().max().copied(),
        push_max_ms: o.attempts.iter().map(|a| a.took_ms).max().unwrap(),
        pushes_failed: o.attempts.iter().filter(|a| a.status != 200).count(),
        pushes_during_freeze: during.iter().filter(|a| a.status == 200).count(),
    }
}

/// The frozen node comes back: ready, in nginx's rotation again, and
/// taking pushes and polls.
async fn rejoins(c: &Cluster, frozen: usize) {
    c.wait_ready(frozen, Duration::from_secs(30)).await;
    c.nginx
        .as_ref()
        .unwrap()
        .wait_all_in_rotation(Duration::from_secs(20))
        .await;
    let topic = format!("back{}", random_hex(4));
    let id = c
        .push(frozen, json!({"topic": topic, "body": "b", "delay": 100}))
        .await;
    let got = c.poll(frozen, &topic, 5, 1).await;
    assert_eq!(got.len(), 1, "the resumed node hands nothing out");
    assert_eq!(got[0].msg["id"], id.as_str());
}

/// The CI-sized scenario: 1,200 messages, 3 s sessions, an 8 s freeze
/// (long beside nginx's 2.5 s, so a stalled client stands out from a
/// loaded machine's slow answers).
fn small(pair: bool) -> Scenario {
    Scenario {
        pair,
        messages: 1_200,
        session_ms: 3_000,
        freeze: Duration::from_secs(8),
        producers: 2,
        consumers: 6,
        around: Duration::from_secs(2),
        ttl_ms: 5_000,
    }
}

/// What the clients saw must hold: each push answered within nginx's
/// 2.5 s (+ slack) and pushes accepted while the node was frozen; the
/// messages of the nodes that ran delivered on time (without the per-route
/// timeouts every loop waited out the freeze on the frozen node: seconds);
/// the frozen node's shards moved once its session expired; and the node
/// rejoins.
async fn clients_were_not_stalled(c: &Cluster, s: &Scenario, o: &Outcome) {
    let f = check(c, s, o);
    eprintln!(
        "frozen node behind nginx: healthy shards' lateness p50 {} / p99 {} / max {} ms; frozen node's shards max {:?} ms; \
         slowest push answer {} ms, {} push attempts failed, {} pushes accepted during the freeze",
        f.healthy_p50, f.healthy_p99, f.healthy_max, f.frozen_max, f.push_max_ms, f.pushes_failed, f.pushes_during_freeze
    );
    // nginx gives up on the frozen node after 2.5 s and sends the push to
    // the other; a push stalled behind the freeze waits 8 s. The 2 s above
    // nginx's wait are the loaded machine's (the other node's answer).
    assert!(f.push_max_ms <= 4_500, "a push waited {} ms", f.push_max_ms);
    assert!(
        f.pushes_during_freeze > 0,
        "no push accepted during the freeze"
    );
    // With the nginx from before, clients stalled behind the frozen node
    // and these messages waited 4.1 s (p99) through a 6 s freeze, and
    // longer through a longer one; a loaded 2-core machine running the
    // rest of the suite beside this test adds a second or more on its own.
    assert!(
        f.healthy_p99 < 3_500,
        "messages of the nodes that ran waited: p99 {} ms",
        f.healthy_p99
    );
    if let Some(max) = f.frozen_max {
        assert!(
            max < s.session_ms as i64 + 2_000,
            "the frozen node's shards waited {max} ms"
        );
    }
    rejoins(c, o.frozen).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_node_does_not_stall_clients_behind_nginx() {
    let s = small(false);
    let (c, o) = run(&s).await;
    clients_were_not_stalled(&c, &s, &o).await;
}

/// The active/standby pair: a frozen standby held the consumers too.
#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_standby_does_not_stall_clients_behind_nginx() {
    let s = small(true);
    let (c, o) = run(&s).await;
    clients_were_not_stalled(&c, &s, &o).await;
}

/// With the other node out of rotation (frozen), one request the node left
/// answered later than nginx waits (1 s for an ack: a loaded machine, a
/// pause of the process) marked it failed (`max_fails=1`), and nginx
/// answered every request `502 no_node` for its `fail_timeout`, 5 s: seen
/// in CI as a frozen standby's test whose producers got 91 refusals and
/// whose consumers stopped for 4.5 s. The node left is never shut out.
#[tokio::test(flavor = "multi_thread")]
async fn one_late_answer_does_not_shut_out_the_last_node_in_rotation() {
    // 12 s sessions: node-0's worker-id lease outlasts its 1.4 s pause
    // below (with 3 s sessions it lapses, and the node refuses pushes
    // until it is confirmed again).
    let mut c = Cluster::builder()
        .nodes(2)
        .mode("active-standby")
        .session_ms(12_000)
        .start()
        .await;
    c.wait_ready(0, Duration::from_secs(30)).await;
    c.wait_ready(1, Duration::from_secs(30)).await;
    let front = c.start_nginx(&[0, 1]);
    let nginx = c.nginx.as_ref().unwrap();
    nginx.wait_all_in_rotation(Duration::from_secs(20)).await;
    c.node(1).signal("STOP");
    let frozen = format!("127.0.0.1:{}", c.port(1));
    crate::common::wait::wait_until(
        "node-1 out of nginx's rotation",
        Duration::from_secs(10),
        || async {
            let out = nginx.out_of_rotation();
            out.contains(&frozen)
                .then_some(())
                .ok_or(format!("out of rotation: {out:?}"))
        },
    )
    .await;
    // Node-0 stays in rotation from here, as nginx-watch would keep it (its
    // /ready answers well within the watch's 1 s after this pause).
    nginx.stop_watch();

    // Node-0 misses one of nginx's read timeouts: an ack sent while it is
    // paused for longer than nginx's 1 s (and shorter than a stall).
    let http = c.http.clone();
    c.node(0).signal("STOP");
    let ack = tokio::spawn(async move {
        http.post(format!("http://127.0.0.1:{front}/ack/1?receipt=r"))
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    tokio::time::sleep(Duration::from_millis(1_400)).await;
    c.node(0).signal("CONT");
    assert_eq!(
        ack.await.unwrap().ok(),
        Some(504),
        "nginx waits 1 s for an ack"
    );

    // Node-0 answers again: nginx sends it the next requests at once.
    let topic = format!("late{}", random_hex(4));
    for k in 0..5 {
        let r = c
            .send(
                c.http
                    .post(format!("http://127.0.0.1:{front}/push"))
                    .json(&json!({"topic": topic, "body": format!("m{k}"), "delay": 0})),
            )
            .await;
        assert_eq!(r.status, 200, "push {k} through nginx: {}", r.text);
    }
    c.node(1).signal("CONT");
}

/// A node that resumes after not running for longer than nginx waits
/// refuses the requests it finds in its sockets: their senders gave up
/// (and may have sent them elsewhere). A push sent while it was stopped is
/// not accepted, and a poll that waited through the stop claims nothing.
#[tokio::test(flavor = "multi_thread")]
async fn requests_found_waiting_after_a_stall_are_refused() {
    let env = Env::start(Backend::Sqlite).await;
    let topic = format!("st{}", random_hex(6));
    let id = env
        .push(json!({"topic": topic, "body": "due during the stop", "delay": 1_000}))
        .await;
    // Clients that give up after 1 s, as nginx does after 2.5 s.
    let impatient = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let poll = tokio::spawn(
        impatient
            .get(env.url(&format!("/get/{topic}?timeout=20&count=10")))
            .send(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    env.server.signal("STOP");
    let stale_push = impatient
        .post(env.url("/push"))
        .json(&json!({"topic": topic, "body": "stale", "bizKey": "stale", "delay": 0}))
        .send()
        .await;
    assert!(stale_push.is_err(), "a stopped node answered");
    assert!(poll.await.unwrap().is_err(), "a stopped node answered");
    tokio::time::sleep(Duration::from_secs(3)).await;
    env.server.signal("CONT");
    // Past the grace (1 s) the node answers again.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        env.journal.rows_by_biz_key(&topic, "stale").is_empty(),
        "the push found waiting after the stall was accepted"
    );
    let got = env.poll(&topic, 2, 10).await;
    assert_eq!(
        got.len(),
        1,
        "the poll found waiting after the stall claimed the message"
    );
    assert_eq!(got[0].msg["id"], id.as_str());
    assert!(
        env.server.log_tail(200).contains("did not run for"),
        "the stall is not in the log"
    );
    env.get_path("/ready").await.assert_ok();
}

/// The figures of BENCHMARKS.md ("A frozen node behind nginx"): the
/// scenario of the issue it answers, 3,000 messages, a 6 s session, a
/// 10 s freeze.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: run by hand, see BENCHMARKS.md"]
async fn frozen_node_benchmark() {
    let s = Scenario {
        pair: false,
        messages: 3_000,
        session_ms: 6_000,
        freeze: Duration::from_secs(10),
        producers: 2,
        consumers: 6,
        around: Duration::from_secs(3),
        ttl_ms: 30_000,
    };
    let (c, o) = run(&s).await;
    let f = check(&c, &s, &o);
    rejoins(&c, o.frozen).await;
    println!(
        "frozen node benchmark: {} messages, 6 consumer loops through nginx, node-1 frozen {} s (session {} ms): \
         lateness of the other nodes' shards p50 {} ms / p99 {} ms / max {} ms; frozen node's shards max {:?} ms; \
         slowest push answer {} ms; {} push attempts failed (sent again with their bizKey); {} pushes accepted during the freeze",
        o.accepted.len(),
        s.freeze.as_secs(),
        s.session_ms,
        f.healthy_p50,
        f.healthy_p99,
        f.healthy_max,
        f.frozen_max,
        f.push_max_ms,
        f.pushes_failed,
        f.pushes_during_freeze
    );
}

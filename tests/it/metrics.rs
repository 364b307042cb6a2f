//! `GET /metrics` after a scripted workload: the counts a Prometheus user
//! would graph match what the workload did, against a real server, Redis
//! and journal.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use serde_json::json;

/// The samples of a scrape: `name{labels}` (as printed) → value.
struct Scrape(BTreeMap<String, f64>);

impl Scrape {
    async fn of(env: &Env) -> Scrape {
        let resp = env
            .http
            .get(env.url("/metrics"))
            .send()
            .await
            .expect("GET /metrics");
        assert_eq!(resp.status().as_u16(), 200);
        let content_type = resp.headers()["content-type"].to_str().unwrap().to_string();
        assert!(
            content_type.starts_with("application/openmetrics-text"),
            "{content_type}"
        );
        let text = resp.text().await.unwrap();
        assert!(
            text.ends_with("# EOF\n"),
            "an OpenMetrics text ends with # EOF"
        );
        let mut samples = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("not a sample: {line}"));
            let value: f64 = value
                .parse()
                .unwrap_or_else(|_| panic!("not a number: {line}"));
            samples.insert(series.to_string(), value);
        }
        Scrape(samples)
    }

    /// The value of one series; 0 when absent (a counter never counted).
    fn get(&self, series: &str) -> f64 {
        self.0.get(series).copied().unwrap_or(0.0)
    }

    fn has(&self, series: &str) -> bool {
        self.0.contains_key(series)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scripted_workload_shows_in_the_counts_and_the_lateness_histogram() {
    let env = Env::builder(Backend::Sqlite)
        .arg("--metrics-topics")
        .arg("2")
        .start()
        .await;

    // Five messages on "orders", one of which may be delivered only once;
    // two on "mails", one of them cancelled; one on "sms", a third topic
    // past the limit of two.
    let due = now_ms() + 400;
    let mut orders = Vec::new();
    for i in 0..5 {
        let mut m = json!({"topic": "orders", "deliverAt": due, "body": format!("o{i}")});
        if i == 0 {
            m["maxAttempts"] = json!(1);
        }
        orders.push(env.push(m).await);
    }
    let mails = env
        .push_batch(vec![
            json!({"topic": "mails", "delay": 60_000, "body": "m0"}),
            json!({"topic": "mails", "delay": 60_000, "body": "m1"}),
        ])
        .await;
    env.push(json!({"topic": "sms", "delay": 60_000, "body": "s0"}))
        .await;
    // Refused: bad input counts as a request, not as a push.
    env.post_json("/push", &json!({"topic": "orders", "delay": -1}))
        .await
        .assert_error(400, "invalid_delay");
    let r = env.delete(&mails[0]).await;
    assert_eq!(r.assert_ok()["result"], "deleted", "{}", r.text);

    let got = env.collect("orders", 5, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 5, "{got:?}");
    for r in &got {
        assert!(r.at >= due, "delivered early: {r:?}");
    }
    // The one allowed a single attempt is nacked, and so dead; the others
    // are acked in one batch.
    let r = env
        .post_json(&format!("/nack/{}", orders[0]), &json!({}))
        .await;
    r.assert_ok();
    let rest: Vec<&String> = orders[1..].iter().collect();
    let r = env.post_json("/ack", &json!({ "ids": rest })).await;
    r.assert_ok();

    // The shard gauges are sampled every few seconds.
    let what = "the shard gauges to count 2 delaying";
    let every = Duration::from_millis(500);
    let m = wait_every(what, Duration::from_secs(15), every, || async {
        let m = Scrape::of(&env).await;
        let delaying: f64 = (0..SHARDS)
            .map(|s| {
                m.get(&format!(
                    "delayq_shard_messages{{shard=\"{s}\",state=\"delaying\"}}"
                ))
            })
            .sum();
        if delaying == 2.0 {
            Ok(m)
        } else {
            Err(format!("{delaying} delaying"))
        }
    })
    .await;

    assert_eq!(m.get("delayq_pushed_total{topic=\"orders\"}"), 5.0);
    assert_eq!(m.get("delayq_pushed_total{topic=\"mails\"}"), 2.0);
    assert_eq!(
        m.get("delayq_pushed_total{topic=\"(other)\"}"),
        1.0,
        "a third topic shares the (other) series"
    );
    assert!(!m.has("delayq_pushed_total{topic=\"sms\"}"));
    assert_eq!(m.get("delayq_delivered_total{topic=\"orders\"}"), 5.0);
    assert_eq!(m.get("delayq_acked_total"), 4.0);
    assert_eq!(m.get("delayq_nacked_total{topic=\"orders\"}"), 1.0);
    assert_eq!(m.get("delayq_dead_total{topic=\"orders\"}"), 1.0);
    assert_eq!(m.get("delayq_cancelled_total"), 1.0);
    assert_eq!(m.get("delayq_promoted_total"), 5.0);

    // Lateness: five first deliveries, none early, all within 10 s.
    assert_eq!(m.get("delayq_lateness_seconds_count"), 5.0);
    assert!(m.get("delayq_lateness_seconds_sum") >= 0.0);
    assert_eq!(m.get("delayq_lateness_seconds_bucket{le=\"10.0\"}"), 5.0);
    assert!(m.has("delayq_lateness_seconds_bucket{le=\"0.001\"}"));

    // Requests by route pattern, never by path.
    assert_eq!(
        m.get("delayq_http_requests_total{route=\"/push\",method=\"POST\",status=\"200\"}"),
        6.0
    );
    assert_eq!(
        m.get("delayq_http_requests_total{route=\"/push\",method=\"POST\",status=\"400\"}"),
        1.0
    );
    assert_eq!(
        m.get("delayq_http_requests_total{route=\"/nack/{id}\",method=\"POST\",status=\"200\"}"),
        1.0
    );
    assert!(
        !m.0.keys().any(|k| k.contains(&orders[0])),
        "no id in a label"
    );

    // The journal and Redis at work.
    assert!(m.get("delayq_journal_batch_size_count{kind=\"insert\"}") >= 1.0);
    assert!(m.get("delayq_journal_batch_size_sum{kind=\"insert\"}") >= 8.0);
    assert!(m.get("delayq_journal_commit_seconds_count{kind=\"flow\"}") >= 1.0);
    assert!(m.has("delayq_journal_backlog"));
    assert!(m.get("delayq_redis_script_seconds_count{script=\"tick\"}") >= 1.0);
    // On one Redis a poll peeks and claims across the shards in one call.
    assert!(m.get("delayq_redis_script_seconds_count{script=\"take\"}") >= 1.0);
    assert_eq!(
        m.get("delayq_redis_script_seconds_count{script=\"claim\"}"),
        0.0
    );

    // What Redis holds, sampled: the cancelled mail is gone, one mail and
    // the sms wait; nothing is ready or in flight.
    let sum = |state: &str| -> f64 {
        (0..SHARDS)
            .map(|s| {
                m.get(&format!(
                    "delayq_shard_messages{{shard=\"{s}\",state=\"{state}\"}}"
                ))
            })
            .sum()
    };
    assert_eq!(sum("delaying"), 2.0);
    assert_eq!(sum("ready"), 0.0);
    assert_eq!(sum("inflight"), 0.0);
    for s in 0..SHARDS {
        assert_eq!(
            m.get(&format!("delayq_shard_overdue_seconds{{shard=\"{s}\"}}")),
            0.0
        );
        assert!(m.get(&format!("delayq_shard_epoch{{shard=\"{s}\"}}")) >= 1.0);
    }

    // A standalone node leads and owns every shard.
    assert_eq!(m.get("delayq_cluster_session{state=\"standalone\"}"), 1.0);
    assert_eq!(m.get("delayq_cluster_leader"), 1.0);
    assert_eq!(m.get("delayq_cluster_owned_shards"), SHARDS as f64);
}

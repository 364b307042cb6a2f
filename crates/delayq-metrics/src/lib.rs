//! Prometheus metrics, served by `GET /metrics` in the OpenMetrics text
//! format (which Prometheus scrapes natively).
//!
//! One registry per process ([`metrics`]). Events are counted where they
//! happen, with atomics; what is a state rather than an event is read at
//! scrape time from what the node holds in memory (the journal's queue,
//! the cluster view; [`Metrics::node_state`], called by the route), or,
//! for what lives in Redis, sampled every [`SAMPLE_EVERY`]
//! (`cluster::health::sample_shards`, through [`Metrics::shard_sizes`]): a scrape never touches Redis or the
//! database, so scraping never slows delivery.
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `delayq_pushed_total` | counter | topic | messages accepted (durable in the journal) |
//! | `delayq_delivered_total` | counter | topic | messages handed to a consumer (every attempt) |
//! | `delayq_acked_total` | counter | | deliveries acked (consumed, or a recurring occurrence done) |
//! | `delayq_nacked_total` | counter | topic | deliveries given back by a consumer |
//! | `delayq_redelivered_total` | counter | topic | deliveries whose ack deadline passed |
//! | `delayq_dead_total` | counter | topic | messages that became dead (last attempt failed) |
//! | `delayq_cancelled_total` | counter | | messages cancelled before delivery |
//! | `delayq_promoted_total` | counter | | due messages moved to a ready queue by this node's shard scans |
//! | `delayq_restored_total` | counter | | messages put back into Redis from the journal |
//! | `delayq_beyond_horizon_total` | counter | | messages pushed due beyond `--redis-horizon`: kept in the journal alone |
//! | `delayq_horizon_loaded_total` | counter | | messages this node scheduled from the journal as they came within the horizon |
//! | `delayq_reconcile_repaired_total` | counter | kind | differences the reconciler repaired |
//! | `delayq_forwarded_total` | counter | topic, sink | messages a broker or webhook confirmed (see the server's `forward`) |
//! | `delayq_forward_failed_total` | counter | topic, sink | forwards that failed (nacked) |
//! | `delayq_outbox_pushed_total` | counter | | rows of an application's outbox pushed (see the server's `outbox`) |
//! | `delayq_outbox_refused_total` | counter | | outbox rows refused (their `error` column says why) |
//! | `delayq_outbox_oldest_seconds` | gauge | | how long the oldest row the last outbox pass took had waited since its insert (0: the pass found none); grows while passes fail |
//! | `delayq_outbox_failed_total` | counter | | outbox passes rolled back (the application's database, the journal or Redis failed; the rows wait) |
//! | `delayq_outbox_lag_seconds` | histogram | | the pass that pushed and deleted the row committed − the row's `created_at` |
//! | `delayq_lateness_seconds` | histogram | | hand-out time − due time of each first delivery |
//! | `delayq_journal_batch_size` | histogram | kind (`insert`, `flow`) | rows per group commit |
//! | `delayq_journal_commit_seconds` | histogram | kind | time per group commit |
//! | `delayq_journal_backlog` | gauge | | status changes waiting to be written |
//! | `delayq_journal_refused_total` | counter | | status changes the database refused (set aside) |
//! | `delayq_journal_purged_total` | counter | | finished messages removed from the journal with their history (`--retain-finished`, `--retain-dead`) |
//! | `delayq_redis_script_seconds` | histogram | script | time per script call (a pipeline of calls counts once) |
//! | `delayq_http_requests_total` | counter | route, method, status | requests by route pattern |
//! | `delayq_http_request_seconds` | histogram | route, method | time to answer (long polls included) |
//! | `delayq_shard_messages` | gauge | shard, state (`delaying`, `ready`, `inflight`) | sampled, shards this node owns |
//! | `delayq_shard_overdue_seconds` | gauge | shard | how long the earliest due message waits for promotion (0: none) |
//! | `delayq_shard_epoch` | gauge | shard | fencing epoch of each shard this node owns |
//! | `delayq_cluster_session` | gauge | state | 1 for the session's state (`standalone`, `connected`, …) |
//! | `delayq_cluster_leader` | gauge | | 1 on the leader |
//! | `delayq_topic_paused` | gauge | topic | 1 for each paused topic (read from Redis each second; the same on every node) |
//! | `delayq_topic_due_next_hour` | gauge | topic | messages falling due within the next hour (`GET /forecast`'s reading: exact, or an estimate where the hour holds more than 5,000 messages in Redis), read every 15 s by the leader (standalone: the node) and shown by it alone; the topics with the most get their own series |
//! | `delayq_cluster_nodes` | gauge | | live nodes this node sees |
//! | `delayq_cluster_owned_shards` | gauge | | shards this node scans |
//! | `delayq_clock_offset_seconds` | gauge | | Redis's clock minus this node's wall clock (see [`delayq_domain::clock`]), the largest in size over the masters |
//! | `delayq_shards_fenced` | gauge | | shards that hand nothing out until the journal's ends are re-applied (Redis may have lost writes; see `reconcile::fence`) |
//! | `delayq_ends_reapplied_total` | counter | | messages removed from Redis because the journal had ended them, after Redis may have lost writes |
//! | `delayq_shard_scan_refused_total` | counter | shard, reason (`stale_epoch`, `error`) | scans of an owned shard that Redis refused or that failed |
//! | `delayq_shard_unscannable` | gauge | shard | 1 while an owned shard cannot be scanned (its scans keep failing) |
//!
//! Topic labels are bounded: the first `--metrics-topics` topics (100 by
//! default) seen by a process get their own series, later ones share the
//! series `topic="(other)"` (a name no topic can have).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, RwLock};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The label value every topic past the limit shares.
pub const OTHER_TOPIC: &str = "(other)";
/// Topics with their own series, unless configured otherwise.
pub const DEFAULT_TOPICS: usize = 100;
/// How often the shards' sizes are read from Redis.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// The content type of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Lateness buckets: 1 ms to 10 s, about three per decade.
const LATENESS_BUCKETS: [f64; 14] = [
    0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
const BATCH_BUCKETS: [f64; 11] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0,
];
/// Database commits and Redis calls: 100 µs to 10 s.
const CALL_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0, 10.0,
];
/// HTTP answers, long polls included: 1 ms to 60 s.
const HTTP_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 30.0, 60.0,
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicLabel {
    pub topic: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForwardLabels {
    pub topic: String,
    pub sink: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScriptLabel {
    pub script: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
    pub method: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub route: String,
    pub method: String,
    pub status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardStateLabels {
    pub shard: u32,
    pub state: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardLabel {
    pub shard: u32,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardReasonLabels {
    pub shard: u32,
    pub reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SessionLabel {
    pub state: &'static str,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// Every metric of the process.
pub struct Metrics {
    registry: Mutex<Registry>,
    topics: TopicLabels,
    pub pushed: Family<TopicLabel, Counter>,
    pub delivered: Family<TopicLabel, Counter>,
    pub acked: Counter,
    pub nacked: Family<TopicLabel, Counter>,
    pub redelivered: Family<TopicLabel, Counter>,
    pub dead: Family<TopicLabel, Counter>,
    pub cancelled: Counter,
    pub promoted: Counter,
    pub restored: Counter,
    pub beyond_horizon: Counter,
    pub horizon_loaded: Counter,
    pub repaired: Family<KindLabel, Counter>,
    forwarded: Family<ForwardLabels, Counter>,
    forward_failed: Family<ForwardLabels, Counter>,
    pub outbox_pushed: Counter,
    pub outbox_refused: Counter,
    pub outbox_failed: Counter,
    pub outbox_oldest: FloatGauge,
    pub outbox_lag: Histogram,
    pub lateness: Histogram,
    /// First deliveries, their lateness summed and the largest (ms), since
    /// the dashboard's sampler last took them.
    lateness_window: [AtomicU64; 3],
    pub journal_batch: Family<KindLabel, Histogram>,
    pub journal_commit: Family<KindLabel, Histogram>,
    journal_backlog: Gauge,
    pub journal_refused: Counter,
    pub journal_purged: Counter,
    pub script: Family<ScriptLabel, Histogram>,
    pub http_requests: Family<RequestLabels, Counter>,
    pub http_seconds: Family<RouteLabels, Histogram>,
    shard_messages: Family<ShardStateLabels, Gauge>,
    shard_overdue: Family<ShardLabel, FloatGauge>,
    shard_epoch: Family<ShardLabel, Gauge>,
    cluster_session: Family<SessionLabel, Gauge>,
    cluster_leader: Gauge,
    topic_paused: Family<TopicLabel, Gauge>,
    topic_due_next_hour: Family<TopicLabel, Gauge>,
    cluster_nodes: Gauge,
    owned_shards: Gauge,
    clock_offset: FloatGauge,
    shards_fenced: Gauge,
    ends_reapplied: Counter,
    shard_scan_refused: Family<ShardReasonLabels, Counter>,
    shard_unscannable: Family<ShardLabel, Gauge>,
}

fn batch_histogram() -> Histogram {
    Histogram::new(BATCH_BUCKETS)
}

fn call_histogram() -> Histogram {
    Histogram::new(CALL_BUCKETS)
}

fn http_histogram() -> Histogram {
    Histogram::new(HTTP_BUCKETS)
}

impl Metrics {
    fn new() -> Metrics {
        let m = Metrics {
            registry: Mutex::new(Registry::default()),
            topics: TopicLabels::new(DEFAULT_TOPICS),
            pushed: Family::default(),
            delivered: Family::default(),
            acked: Counter::default(),
            nacked: Family::default(),
            redelivered: Family::default(),
            dead: Family::default(),
            cancelled: Counter::default(),
            promoted: Counter::default(),
            restored: Counter::default(),
            beyond_horizon: Counter::default(),
            horizon_loaded: Counter::default(),
            repaired: Family::default(),
            forwarded: Family::default(),
            forward_failed: Family::default(),
            outbox_pushed: Counter::default(),
            outbox_refused: Counter::default(),
            outbox_failed: Counter::default(),
            outbox_oldest: FloatGauge::default(),
            outbox_lag: Histogram::new(LATENESS_BUCKETS),
            lateness: Histogram::new(LATENESS_BUCKETS),
            lateness_window: Default::default(),
            journal_batch: Family::new_with_constructor(batch_histogram),
            journal_commit: Family::new_with_constructor(call_histogram),
            journal_backlog: Gauge::default(),
            journal_refused: Counter::default(),
            journal_purged: Counter::default(),
            script: Family::new_with_constructor(call_histogram),
            http_requests: Family::default(),
            http_seconds: Family::new_with_constructor(http_histogram),
            shard_messages: Family::default(),
            shard_overdue: Family::default(),
            shard_epoch: Family::default(),
            cluster_session: Family::default(),
            cluster_leader: Gauge::default(),
            topic_paused: Family::default(),
            topic_due_next_hour: Family::default(),
            cluster_nodes: Gauge::default(),
            owned_shards: Gauge::default(),
            clock_offset: FloatGauge::default(),
            shards_fenced: Gauge::default(),
            ends_reapplied: Counter::default(),
            shard_scan_refused: Family::default(),
            shard_unscannable: Family::default(),
        };
        {
            let mut r = m.registry.lock().unwrap_or_else(|p| p.into_inner());
            let d = r.sub_registry_with_prefix("delayq");
            d.register(
                "pushed",
                "Messages accepted (durable in the journal)",
                m.pushed.clone(),
            );
            d.register(
                "delivered",
                "Messages handed to a consumer, every attempt",
                m.delivered.clone(),
            );
            d.register("acked", "Deliveries acked", m.acked.clone());
            d.register(
                "nacked",
                "Deliveries given back by a consumer",
                m.nacked.clone(),
            );
            d.register(
                "redelivered",
                "Deliveries whose ack deadline passed",
                m.redelivered.clone(),
            );
            d.register(
                "dead",
                "Messages that became dead after their last attempt",
                m.dead.clone(),
            );
            d.register(
                "cancelled",
                "Messages cancelled before delivery",
                m.cancelled.clone(),
            );
            d.register(
                "promoted",
                "Due messages moved to a ready queue by this node's shard scans",
                m.promoted.clone(),
            );
            d.register(
                "restored",
                "Messages put back into Redis from the journal",
                m.restored.clone(),
            );
            d.register(
                "beyond_horizon",
                "Messages pushed due beyond the Redis horizon: kept in the journal alone",
                m.beyond_horizon.clone(),
            );
            d.register(
                "horizon_loaded",
                "Messages this node scheduled from the journal as they came within the Redis horizon",
                m.horizon_loaded.clone(),
            );
            d.register(
                "reconcile_repaired",
                "Differences between the journal and Redis the reconciler repaired",
                m.repaired.clone(),
            );
            d.register(
                "forwarded",
                "Messages a broker or webhook confirmed",
                m.forwarded.clone(),
            );
            d.register(
                "forward_failed",
                "Forwards that failed (nacked)",
                m.forward_failed.clone(),
            );
            d.register(
                "outbox_pushed",
                "Rows of an application's outbox pushed",
                m.outbox_pushed.clone(),
            );
            d.register(
                "outbox_refused",
                "Outbox rows refused (their error column says why)",
                m.outbox_refused.clone(),
            );
            d.register(
                "outbox_failed",
                "Outbox passes rolled back (their rows wait)",
                m.outbox_failed.clone(),
            );
            d.register(
                "outbox_oldest_seconds",
                "How long the oldest row the last outbox pass took had waited since its insert",
                m.outbox_oldest.clone(),
            );
            d.register(
                "outbox_lag_seconds",
                "The commit of the pass that pushed and deleted the row minus its created_at",
                m.outbox_lag.clone(),
            );
            d.register(
                "lateness_seconds",
                "Hand-out time minus due time of each first delivery",
                m.lateness.clone(),
            );
            d.register(
                "journal_batch_size",
                "Rows per journal group commit",
                m.journal_batch.clone(),
            );
            d.register(
                "journal_commit_seconds",
                "Time per journal group commit",
                m.journal_commit.clone(),
            );
            d.register(
                "journal_backlog",
                "Status changes waiting to be written to the journal",
                m.journal_backlog.clone(),
            );
            d.register(
                "journal_refused",
                "Status changes the database refused (set aside)",
                m.journal_refused.clone(),
            );
            d.register(
                "journal_purged",
                "Finished messages removed from the journal with their history",
                m.journal_purged.clone(),
            );
            d.register(
                "redis_script_seconds",
                "Time per Redis script call or pipeline of calls",
                m.script.clone(),
            );
            d.register(
                "http_requests",
                "HTTP requests by route pattern, method and status",
                m.http_requests.clone(),
            );
            d.register(
                "http_request_seconds",
                "Time to answer an HTTP request, long polls included",
                m.http_seconds.clone(),
            );
            d.register(
                "shard_messages",
                "Messages in each owned shard by state (sampled)",
                m.shard_messages.clone(),
            );
            d.register("shard_overdue_seconds", "How long the earliest due message of each owned shard has waited for promotion (sampled)", m.shard_overdue.clone());
            d.register(
                "shard_epoch",
                "Fencing epoch of each shard this node owns",
                m.shard_epoch.clone(),
            );
            d.register(
                "cluster_session",
                "1 for the state of this node's cluster session",
                m.cluster_session.clone(),
            );
            d.register(
                "cluster_leader",
                "1 when this node is the leader",
                m.cluster_leader.clone(),
            );
            d.register(
                "topic_paused",
                "1 for each paused topic",
                m.topic_paused.clone(),
            );
            d.register(
                "topic_due_next_hour",
                "Messages of the topic falling due within the next hour (an estimate where the hour holds more than 5,000 messages in Redis; read every 15 s, by the leader only)",
                m.topic_due_next_hour.clone(),
            );
            d.register(
                "cluster_nodes",
                "Live nodes this node sees",
                m.cluster_nodes.clone(),
            );
            d.register(
                "cluster_owned_shards",
                "Shards this node scans",
                m.owned_shards.clone(),
            );
            d.register(
                "clock_offset_seconds",
                "Redis's clock minus this node's wall clock",
                m.clock_offset.clone(),
            );
            d.register(
                "shards_fenced",
                "Shards that hand nothing out until the journal's ends are re-applied",
                m.shards_fenced.clone(),
            );
            d.register(
                "ends_reapplied",
                "Messages removed from Redis because the journal had ended them, after Redis may have lost writes",
                m.ends_reapplied.clone(),
            );
            d.register(
                "shard_scan_refused",
                "Scans of an owned shard that Redis refused (stale epoch) or that failed",
                m.shard_scan_refused.clone(),
            );
            d.register(
                "shard_unscannable",
                "1 while an owned shard cannot be scanned",
                m.shard_unscannable.clone(),
            );
        }
        m
    }

    /// How many shards are fenced now.
    pub fn shards_fenced(&self, n: u64) {
        self.shards_fenced.set(n as i64);
    }

    /// Messages the journal had ended, removed from Redis after a fence.
    pub fn ends_reapplied(&self, n: u64) {
        self.ends_reapplied.inc_by(n);
    }

    /// A scan of `shard` was refused or failed.
    pub fn scan_refused(&self, shard: u32, reason: &'static str) {
        self.shard_scan_refused
            .get_or_create(&ShardReasonLabels { shard, reason })
            .inc();
    }

    /// Whether `shard` is owned here and cannot be scanned.
    pub fn set_unscannable(&self, shard: u32, yes: bool) {
        self.shard_unscannable
            .get_or_create(&ShardLabel { shard })
            .set(yes as i64);
    }

    /// Sets how many topics get their own series (before any is counted).
    pub fn limit_topics(&self, limit: usize) {
        self.topics.limit.store(limit, Ordering::Relaxed);
    }

    /// The label of `topic`: its own while the limit allows, else `(other)`.
    pub fn topic(&self, topic: &str) -> TopicLabel {
        TopicLabel {
            topic: self.topics.label(topic),
        }
    }

    /// One first delivery, `ms` after its due time.
    pub fn delivered_late(&self, ms: i64) {
        self.lateness.observe(ms as f64 / 1000.0);
        let [count, sum, max] = &self.lateness_window;
        let ms = ms.max(0) as u64;
        count.fetch_add(1, Ordering::Relaxed);
        sum.fetch_add(ms, Ordering::Relaxed);
        max.fetch_max(ms, Ordering::Relaxed);
    }

    /// First deliveries since the last call: how many, their lateness
    /// summed and the largest (ms); and starts again.
    pub fn take_lateness(&self) -> (u64, u64, u64) {
        let [count, sum, max] = &self.lateness_window;
        (
            count.swap(0, Ordering::Relaxed),
            sum.swap(0, Ordering::Relaxed),
            max.swap(0, Ordering::Relaxed),
        )
    }

    /// `(topic, pushed, delivered)` counted by this process, per topic
    /// label (the shared `(other)` last, when used).
    pub fn topic_totals(&self) -> Vec<(String, u64, u64)> {
        let mut topics: Vec<String> = self
            .topics
            .known
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        topics.sort();
        topics.push(OTHER_TOPIC.to_string());
        topics
            .into_iter()
            .filter_map(|topic| {
                let label = TopicLabel { topic };
                let pushed = self.pushed.get(&label).map(|c| c.get());
                let delivered = self.delivered.get(&label).map(|c| c.get());
                (pushed.is_some() || delivered.is_some())
                    .then(|| (label.topic, pushed.unwrap_or(0), delivered.unwrap_or(0)))
            })
            .collect()
    }

    /// Counts `n` events of `topic` in `family`.
    pub fn count(&self, family: &Family<TopicLabel, Counter>, topic: &str, n: u64) {
        family.get_or_create(&self.topic(topic)).inc_by(n);
    }

    /// One round of a forwarder: `ok` messages confirmed, `failed` not.
    pub fn forwarded(&self, topic: &str, sink: &'static str, ok: u64, failed: u64) {
        let labels = ForwardLabels {
            topic: self.topics.label(topic),
            sink,
        };
        if ok > 0 {
            self.forwarded.get_or_create(&labels).inc_by(ok);
        }
        if failed > 0 {
            self.forward_failed.get_or_create(&labels).inc_by(failed);
        }
    }

    /// Times one Redis script call (or pipeline of calls).
    pub fn script_took(&self, script: &'static str, since: Instant) {
        self.script
            .get_or_create(&ScriptLabel { script })
            .observe(since.elapsed().as_secs_f64());
    }

    /// One journal group commit of `rows` rows.
    pub fn journal_committed(&self, kind: &'static str, rows: usize, since: Instant) {
        let kind = KindLabel { kind };
        self.journal_batch.get_or_create(&kind).observe(rows as f64);
        self.journal_commit
            .get_or_create(&kind)
            .observe(since.elapsed().as_secs_f64());
    }

    /// What the node holds in memory, read at scrape time: the journal's
    /// backlog and the cluster view (`session` as `standalone`,
    /// `connected`, …; `owned` as shard and epoch).
    pub fn node_state(
        &self,
        backlog: usize,
        session: &'static str,
        leader: bool,
        nodes: usize,
        owned: &[(u32, i64)],
    ) {
        self.journal_backlog.set(backlog as i64);
        self.cluster_session.clear();
        self.cluster_session
            .get_or_create(&SessionLabel { state: session })
            .set(1);
        self.cluster_leader.set(leader as i64);
        self.cluster_nodes.set(nodes as i64);
        self.owned_shards.set(owned.len() as i64);
        self.shard_epoch.clear();
        for &(shard, epoch) in owned {
            self.shard_epoch
                .get_or_create(&ShardLabel { shard })
                .set(epoch);
        }
    }

    /// The paused topics, replacing the last reading (a resumed topic
    /// loses its series). Not bound by the topic label limit: a pause is
    /// an operator's act, and each is worth its series.
    pub fn paused_topics<'a>(&self, topics: impl Iterator<Item = &'a String>) {
        self.topic_paused.clear();
        for topic in topics {
            self.topic_paused
                .get_or_create(&TopicLabel {
                    topic: topic.clone(),
                })
                .set(1);
        }
    }

    /// How many messages of each topic fall due within the next hour,
    /// replacing the last reading (empty: none shown). Its own label
    /// budget: the `--metrics-topics` topics with the most get a series
    /// each, the rest add up in `(other)`.
    pub fn due_next_hour(&self, counts: &std::collections::BTreeMap<String, u64>) {
        let limit = self.topics.limit.load(Ordering::Relaxed);
        let mut by_count: Vec<(&String, &u64)> = counts.iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let other: u64 = by_count.iter().skip(limit).map(|(_, n)| **n).sum();
        self.topic_due_next_hour.clear();
        for (topic, n) in by_count.into_iter().take(limit) {
            self.topic_due_next_hour
                .get_or_create(&TopicLabel {
                    topic: topic.clone(),
                })
                .set(*n as i64);
        }
        if other > 0 {
            self.topic_due_next_hour
                .get_or_create(&TopicLabel {
                    topic: OTHER_TOPIC.to_string(),
                })
                .set(other as i64);
        }
    }

    /// The sampled sizes of the shards this node owns, replacing the last
    /// sample (a shard no longer owned loses its series).
    pub fn shard_sizes(&self, sizes: &[ShardSize]) {
        self.shard_messages.clear();
        self.shard_overdue.clear();
        for s in sizes {
            let shard = s.shard;
            for (state, n) in [
                ("delaying", s.delaying),
                ("ready", s.ready),
                ("inflight", s.in_flight),
            ] {
                self.shard_messages
                    .get_or_create(&ShardStateLabels { shard, state })
                    .set(n);
            }
            self.shard_overdue
                .get_or_create(&ShardLabel { shard })
                .set(s.overdue_ms as f64 / 1000.0);
        }
    }

    /// The text of every metric.
    pub fn encode(&self) -> String {
        // Read from the clock's estimate when shown: the clock (the
        // domain crate) knows nothing of metrics.
        let offset_ms = delayq_domain::clock::offset_ms().unwrap_or(0);
        self.clock_offset.set(offset_ms as f64 / 1000.0);
        let mut text = String::with_capacity(16 * 1024);
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
        text
    }
}

/// One shard's sample for [`Metrics::shard_sizes`].
pub struct ShardSize {
    pub shard: u32,
    pub delaying: i64,
    pub ready: i64,
    pub in_flight: i64,
    /// How long its earliest due message has waited for promotion.
    pub overdue_ms: i64,
}

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &METRICS
}

/// The topics with a series of their own: the first `limit` seen.
struct TopicLabels {
    limit: AtomicUsize,
    known: RwLock<HashSet<String>>,
}

impl TopicLabels {
    fn new(limit: usize) -> Self {
        TopicLabels {
            limit: AtomicUsize::new(limit),
            known: RwLock::new(HashSet::new()),
        }
    }

    fn label(&self, topic: &str) -> String {
        if self
            .known
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(topic)
        {
            return topic.to_string();
        }
        let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
        if known.contains(topic) {
            return topic.to_string();
        }
        if known.len() < self.limit.load(Ordering::Relaxed) {
            known.insert(topic.to_string());
            topic.to_string()
        } else {
            OTHER_TOPIC.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_past_the_limit_share_one_series() {
        let t = TopicLabels::new(2);
        assert_eq!(t.label("a"), "a");
        assert_eq!(t.label("b"), "b");
        assert_eq!(t.label("c"), OTHER_TOPIC);
        assert_eq!(t.label("a"), "a");
        assert_eq!(t.label("d"), OTHER_TOPIC);
        assert!(!delayq_domain::input::valid_topic(OTHER_TOPIC));
    }
}

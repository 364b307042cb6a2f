//! The command line: flags, their defaults and help, and the scenarios.

use clap::builder::RangedU64ValueParser;
use clap::{Parser, ValueEnum};

const ABOUT: &str = "Benchmark a running delayq server over HTTP.";

const LONG_ABOUT: &str = "\
Benchmark a running delayq server over HTTP. Prints one JSON line per scenario on stdout \
(progress on stderr); the exit status is non-zero if any scenario failed.

Scenarios (default: the first four, in this order):
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
  pending  a probe stream (--probes messages due --probe-delay-ms ahead) on an empty queue,
           then --pending-count messages due --pending-offset-ms + up to --pending-spread-ms
           ahead, Redis's used_memory before and after (--redis-url: a Redis of this server
           alone), and the probe stream again beside them; BullMQ's pending_scale beside it.

The restore scenario wipes the server's whole Redis schedule (for every topic) and relies on
the server's journal to rebuild it, so point it only at a bench server. Its messages are left
pending, due an hour later on a topic nobody consumes, unless the operator clears them.";

#[derive(Parser, Debug)]
#[command(name = "delayq-bench", version, about = ABOUT, long_about = LONG_ABOUT)]
pub struct Cli {
    /// Base URL of the delayq server.
    #[arg(long, default_value = "http://127.0.0.1:7070")]
    pub url: String,

    /// Where pushes (and cancels) go, when not to --url: in a cluster, a
    /// node that does not scan the shards, to measure wake-ups across nodes.
    #[arg(long)]
    pub push_url: Option<String>,

    /// Where consumers poll and ack, when not at --url; repeat it to spread
    /// the consumers over several nodes (round robin).
    #[arg(long)]
    pub consume_url: Vec<String>,

    /// A PEM file of CA certificates to trust for https:// URLs (a server
    /// started with --tls-cert signed by a private CA), besides the
    /// platform's.
    #[arg(long, value_name = "PATH")]
    pub tls_ca_file: Option<std::path::PathBuf>,

    /// Prefix of the per-scenario topics.
    #[arg(long, default_value = "bench")]
    pub topic_prefix: String,

    /// Long-polling consumer tasks per scenario.
    #[arg(long, default_value_t = 16, value_parser = RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub consumers: usize,

    /// Consumers do not ack (measures hand-out alone; unacked messages stay
    /// in flight until their 30 s ttl).
    #[arg(long)]
    pub no_ack: bool,

    /// How consumers ack: `batch` acks the previous batch in the request
    /// that polls for the next (`POST /get/{topic}` with `{"ack": [...]}`),
    /// one request per batch; `per-message` sends `POST /ack/{id}` for each
    /// message, --ack-concurrency at a time.
    #[arg(long, value_enum, default_value_t = AckMode::Batch)]
    pub ack_mode: AckMode,

    /// Acks in flight at once across all consumers (--ack-mode per-message);
    /// a consumer waits for a free slot before polling again.
    #[arg(long, default_value_t = 256, value_parser = RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub ack_concurrency: usize,

    /// Concurrent push requests (batches in flight).
    #[arg(long, default_value_t = 4, value_parser = RangedU64ValueParser::<usize>::new().range(1..=256))]
    pub pushers: usize,

    /// Messages per `POST /push/batch`.
    #[arg(long, default_value_t = 500, value_parser = RangedU64ValueParser::<usize>::new().range(1..=1000))]
    pub batch: usize,

    /// Redis used by the server (restore and pending scenarios only).
    #[arg(long, default_value = "redis://127.0.0.1:6379/0")]
    pub redis_url: String,

    /// The server's Redis key prefix (restore scenario only).
    #[arg(long, default_value = "dq")]
    pub key_prefix: String,

    /// Messages pushed by the spread scenario.
    #[arg(long, default_value_t = 20_000)]
    pub spread_count: usize,

    /// Messages pushed by the burst scenario.
    #[arg(long, default_value_t = 20_000)]
    pub burst_count: usize,

    /// Messages pushed by the cancel scenario (every second one is cancelled).
    #[arg(long, default_value_t = 10_000)]
    pub cancel_count: usize,

    /// Messages pushed by the restore scenario.
    #[arg(long, default_value_t = 200_000)]
    pub restore_count: usize,

    /// Messages pushed by the pending scenario.
    #[arg(long, default_value_t = 1_000_000)]
    pub pending_count: usize,

    /// The pending scenario's messages are due this long after their push
    /// at the earliest, in ms.
    #[arg(long, default_value_t = 600_000)]
    pub pending_offset_ms: u64,

    /// ... and up to this much later, uniformly, in ms.
    #[arg(long, default_value_t = 3_600_000)]
    pub pending_spread_ms: u64,

    /// Probe messages pushed before and after the pending ones.
    #[arg(long, default_value_t = 1_000)]
    pub probes: usize,

    /// Delay of each probe message, in ms.
    #[arg(long, default_value_t = 2_000)]
    pub probe_delay_ms: u64,

    /// Lead time of the burst's deliverAt over the start of its push phase, in ms
    /// [default: 3000 + burst-count / 5].
    #[arg(long)]
    pub burst_lead_ms: Option<u64>,

    /// Scenarios to run, in order.
    #[arg(value_enum)]
    pub scenarios: Vec<Scenario>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckMode {
    Batch,
    PerMessage,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    Spread,
    Burst,
    Cancel,
    Restore,
    Pending,
}

impl Scenario {
    pub const ALL: [Scenario; 4] = [
        Scenario::Spread,
        Scenario::Burst,
        Scenario::Cancel,
        Scenario::Restore,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Spread => "spread",
            Scenario::Burst => "burst",
            Scenario::Cancel => "cancel",
            Scenario::Restore => "restore",
            Scenario::Pending => "pending",
        }
    }
}

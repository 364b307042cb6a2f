//! Command line and environment. Every flag has an environment twin,
//! `DELAYQ_` + the flag in upper snake case; a flag wins over its twin.
//!
//! | flag | variable | default |
//! |---|---|---|
//! | `--bind` | `DELAYQ_BIND` | `127.0.0.1:7070` |
//! | `--redis-url` | `DELAYQ_REDIS_URL` | `redis://127.0.0.1:6379/0` |
//! | `--database-url` | `DELAYQ_DATABASE_URL` | `sqlite://data/delayq.db` |
//! | `--shards` | `DELAYQ_SHARDS` | `8` |
//! | `--key-prefix` | `DELAYQ_KEY_PREFIX` | `dq` |
//! | `--redis-horizon` | `DELAYQ_REDIS_HORIZON` | `1h` (`0`: off); see [`crate::horizon`] |
//! | `--node-id` | `DELAYQ_NODE_ID` | host name + port |
//! | `--zookeeper` | `DELAYQ_ZOOKEEPER` | none: standalone (`host:port,host:port/chroot`) |
//! | `--mode` | `DELAYQ_MODE` | `active-standby` (or `multi-active`) |
//! | `--zk-session-timeout` | `DELAYQ_ZK_SESSION_TIMEOUT` | `6s` |
//! | `--advertise` | `DELAYQ_ADVERTISE` | `http://` (`https://` with `--tls-cert`) + the bind address |
//! | `--admin-token` | `DELAYQ_ADMIN_TOKEN` | none |
//! | `--read-token` | `DELAYQ_READ_TOKEN` | none |
//! | `--max-body-bytes` | `DELAYQ_MAX_BODY_BYTES` | `1048576` |
//! | `--workers` | `DELAYQ_WORKERS` | number of cores (HTTP worker threads) |
//! | `--journal-backlog` | `DELAYQ_JOURNAL_BACKLOG` | `200000` status changes |
//! | `--journal-nice` | `DELAYQ_JOURNAL_NICE` | `10` (0-19) |
//! | `--log-json` | `DELAYQ_LOG_JSON` | off |
//! | `--reconcile-interval` | `DELAYQ_RECONCILE_INTERVAL` | `60s` (`0`: off) |
//! | `--reconcile-grace` | `DELAYQ_RECONCILE_GRACE` | `30s` |
//! | `--forward` | `DELAYQ_FORWARD` | none; `TOPIC=URL`, repeatable (rules separated by spaces in the variable), see [`crate::forward`] |
//! | `--topic-limit` | `DELAYQ_TOPIC_LIMIT` | none; `TOPIC=N/s`, repeatable (separated by spaces in the variable), see [`crate::limit`] |
//! | `--forward-secret` | `DELAYQ_FORWARD_SECRET` | none; signs webhook requests (HMAC-SHA256) |
//! | `--metrics-topics` | `DELAYQ_METRICS_TOPICS` | `100` topics with series of their own in `/metrics` |
//! | `--ui-read-only` | `DELAYQ_UI_READ_ONLY` | off; the dashboard (`/ui`) shows everything and offers no action |
//! | `--tls-cert`, `--tls-key` | `DELAYQ_TLS_CERT`, `DELAYQ_TLS_KEY` | none: plain HTTP; both: HTTPS, the files read again on SIGHUP |
//! | `--outbox-url` | `DELAYQ_OUTBOX_URL` | none; the application's database whose outbox table the node pushes from, see [`crate::outbox`] |
//! | `--outbox-table`, `--outbox-poll`, `--outbox-batch` | `DELAYQ_OUTBOX_TABLE`, `…_POLL`, `…_BATCH` | `delayq_outbox`, `100ms`, `500` |
//! | `--tls-ca-file` | `DELAYQ_TLS_CA_FILE` | none: the platform's CAs alone; see [`crate::tls`] |
//! | `--tls-client-cert`, `--tls-client-key` | `DELAYQ_TLS_CLIENT_CERT`, `DELAYQ_TLS_CLIENT_KEY` | none; mutual TLS with Redis, RabbitMQ, NATS and webhooks |
//!
//! Settings can also come from a TOML file, `--config PATH` (or
//! `DELAYQ_CONFIG`), whose keys are the long flags (`redis-url = "…"`, or
//! `redis_url`): a flag wins over its twin, and a twin over the file (see
//! [`file`]; `delayq.example.toml` lists the keys of `delayq serve`).
//!
//! Log levels follow `RUST_LOG` (default `info`). Snowflake worker ids are
//! not configured: each process leases one (see [`crate::cluster::worker`]).

pub mod file;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::cluster::assign::Mode;

use clap::error::{ContextKind, ContextValue};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "delayq", version = crate::VERSION, about = "A clustered delayed-message queue")]
pub struct Cli {
    /// Log as JSON lines instead of text.
    #[arg(long, env = "DELAYQ_LOG_JSON", global = true)]
    pub log_json: bool,
    /// A TOML file of settings: its keys are the long flags (redis-url =
    /// "redis://…"); flags and DELAYQ_* variables win over it.
    #[arg(long, env = "DELAYQ_CONFIG", global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// What no single flag's parser can see, or say without repeating a
    /// secret: a topic given twice in `--topic-limit` (across flags), a
    /// bad token ([`check_token`]). Refused as a usage error (exit 2),
    /// before anything starts.
    fn check(&self) -> Result<(), clap::Error> {
        let usage =
            |e: String| clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("{e}\n"));
        if let Command::Serve(serve) = &self.command {
            crate::limit::by_topic(&serve.topic_limit).map_err(usage)?;
            for (flag, token) in [
                ("--admin-token", &serve.admin_token),
                ("--read-token", &serve.read_token),
            ] {
                if let Some(t) = token {
                    check_token(t).map_err(|e| usage(format!("{flag}: {e}")))?;
                }
            }
        }
        Ok(())
    }
}

/// `delayq reshard` moves the data set to the count `--shards` names: a
/// count left to its default (8) is refused, so a forgotten flag moves
/// nothing.
fn reshard_names_its_shards(m: &clap::ArgMatches) -> Result<(), clap::Error> {
    if let Some(("reshard", sub)) = m.subcommand() {
        if sub.value_source("shards") == Some(clap::parser::ValueSource::DefaultValue) {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::MissingRequiredArgument,
                "delayq reshard needs the shard count to move the data set to: --shards N \
                 (or DELAYQ_SHARDS); start the nodes with the same --shards afterwards\n",
            ));
        }
    }
    Ok(())
}

impl Cli {
    /// The command line, the `DELAYQ_*` environment and the config file,
    /// in that order of precedence. Like clap's own parse it exits with
    /// code 2 on a usage error, and on a config file that does not fit.
    pub fn load() -> Cli {
        let args: Vec<OsString> = std::env::args_os().collect();
        let mut cmd = Cli::command();
        cmd.build();
        let from_file = match file::read(&cmd, &args, |v| std::env::var_os(v)) {
            Ok(f) => f.unwrap_or_default(),
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(2);
            }
        };
        let given = file::with_settings(&cmd, &args, &from_file);
        match cmd.try_get_matches_from_mut(&given).and_then(|m| {
            reshard_names_its_shards(&m)?;
            let cli = Cli::from_arg_matches(&m)?;
            cli.check()?;
            Ok(cli)
        }) {
            Ok(cli) => cli,
            Err(e) => {
                let e = e.format(&mut cmd);
                let _ = e.print();
                if let Some(key) = file_key_of(&e, &args, &from_file) {
                    eprintln!(
                        "note: the value comes from config file {}, key `{key}`",
                        from_file.path
                    );
                }
                std::process::exit(e.exit_code());
            }
        }
    }
}

/// The config file's key behind a value clap refused, when the file gave
/// it (neither the flag nor its variable did).
fn file_key_of<'f>(
    e: &clap::Error,
    args: &[OsString],
    from_file: &'f file::FromFile,
) -> Option<&'f str> {
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let long = arg.strip_prefix("--")?.split([' ', '=']).next()?;
    let flag = format!("--{long}");
    let given = args.iter().any(|a| {
        a.to_str()
            .is_some_and(|a| a == flag || a.starts_with(&format!("{flag}=")))
    });
    if given {
        return None;
    }
    from_file.keys.get(long).map(String::as_str)
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a node.
    Serve(Box<ServeArgs>),
    /// Run the journal migrations and exit.
    Migrate(JournalArgs),
    /// Rebuild Redis from the journal for every live message, then exit.
    Restore(RestoreArgs),
    /// Compare the journal with Redis message by message (and repair), then exit.
    Reconcile(ReconcileCmdArgs),
    /// Create the outbox table in the application's database (`delayq
    /// outbox install --database-url …`): rows inserted there in the
    /// application's transactions are pushed once committed, exactly once.
    Outbox(OutboxCmdArgs),
    /// Move a stopped deployment's Redis data set to another shard count
    /// (--shards: the new count), then exit.
    #[command(mut_arg("shards", |a| a
        .help("The shard count to move the data set to (required; the count it has now is read from Redis)")
        .hide_default_value(true)))]
    Reshard(ReshardArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ReshardArgs {
    /// Records moved per step.
    #[arg(long, default_value_t = crate::reshard::PAGE, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub page: u64,
    /// Move messages of ordered groups too: each group's messages then
    /// spread over the new shards, each keeping a turn of its own (two of
    /// a group may be handed out at once) until they are gone. Without
    /// it a reshard refuses while Redis holds any.
    #[arg(long)]
    pub split_groups: bool,
    #[command(flatten)]
    pub redis: RedisArgs,
}

#[derive(Debug, Clone, Args)]
pub struct RedisArgs {
    /// Redis holding the schedule.
    #[arg(
        long,
        env = "DELAYQ_REDIS_URL",
        default_value = "redis://127.0.0.1:6379/0"
    )]
    pub redis_url: String,
    /// Prefix of every Redis key, so deployments and tests can share one Redis.
    #[arg(long, env = "DELAYQ_KEY_PREFIX", default_value = "dq", value_parser = parse_prefix)]
    pub key_prefix: String,
    /// Number of zset shards; fixed for a cluster's life.
    #[arg(long, env = "DELAYQ_SHARDS", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub shards: u32,
    /// Messages due further ahead than this wait in the journal alone and
    /// are scheduled into Redis as they come within it (e.g. 1h, 30m, at
    /// least 1s; 0: every message goes to Redis when pushed).
    #[arg(long, env = "DELAYQ_REDIS_HORIZON", default_value = "1h", value_parser = parse_horizon)]
    pub redis_horizon: Duration,
}

#[derive(Debug, Clone, Args)]
pub struct JournalArgs {
    /// Journal database: sqlite://PATH, mysql://USER:PASS@HOST:PORT/DB
    /// or postgres://USER:PASS@HOST:PORT/DB.
    #[arg(
        long,
        env = "DELAYQ_DATABASE_URL",
        default_value = "sqlite://data/delayq.db"
    )]
    pub database_url: String,
}

#[derive(Debug, Clone, Args)]
pub struct NodeArgs {
    /// This node's name in the cluster and in the flow table [default: host name + port].
    #[arg(long, env = "DELAYQ_NODE_ID", value_parser = parse_node_id)]
    pub node_id: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// ZooKeeper ensemble, `host:port,host:port/chroot`; without it the node
    /// runs standalone and owns every shard.
    #[arg(long, env = "DELAYQ_ZOOKEEPER")]
    pub zookeeper: Option<String>,
    /// `active-standby`: the leader scans every shard; `multi-active`: the
    /// shards are spread over the live nodes.
    #[arg(
        long,
        env = "DELAYQ_MODE",
        value_enum,
        default_value = "active-standby"
    )]
    pub mode: Mode,
    /// ZooKeeper session timeout (e.g. 6s, 2500ms); failover takes about this long.
    #[arg(long, env = "DELAYQ_ZK_SESSION_TIMEOUT", default_value = "6s", value_parser = parse_duration)]
    pub zk_session_timeout: Duration,
    /// The URL other nodes and operators reach this node's HTTP API at
    /// [default: http:// + the bind address, https:// with --tls-cert].
    #[arg(long, env = "DELAYQ_ADVERTISE")]
    pub advertise: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct ReconcileArgs {
    /// A reconciliation leaves out journal rows changed, and Redis states
    /// reached, within this time (e.g. 30s, 2500ms): the journal lags Redis.
    #[arg(long, env = "DELAYQ_RECONCILE_GRACE", default_value = "30s", value_parser = parse_duration)]
    pub reconcile_grace: Duration,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// HTTP address to listen on.
    #[arg(long, env = "DELAYQ_BIND", default_value = "127.0.0.1:7070")]
    pub bind: SocketAddr,
    /// Serve HTTPS with this PEM certificate (chain); read again on SIGHUP.
    #[arg(
        long,
        env = "DELAYQ_TLS_CERT",
        value_name = "PATH",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert; read again on SIGHUP.
    #[arg(
        long,
        env = "DELAYQ_TLS_KEY",
        value_name = "PATH",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// When set, /admin/*, /delete, /cancel, /reschedule,
    /// /dead/.../requeue, /topics/.../pause, /topics/.../resume, /reStore*
    /// and the dashboard need 'Authorization: Bearer TOKEN' (the dashboard
    /// a login with it); so do the routes that show message bodies and GET
    /// /topics, which take --read-token too. Not empty.
    #[arg(long, env = "DELAYQ_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// When set, the routes that show message bodies (GET /messages/{id},
    /// GET /messages?…, GET /dead/{topic}) and GET /topics take
    /// 'Authorization: Bearer TOKEN' with this token (or the admin token).
    /// Not empty.
    #[arg(long, env = "DELAYQ_READ_TOKEN", hide_env_values = true)]
    pub read_token: Option<String>,
    /// Largest message body accepted, in bytes (at most 15 MiB: a request
    /// is at most 16 MiB).
    #[arg(long, env = "DELAYQ_MAX_BODY_BYTES", default_value_t = 1 << 20, value_parser = parse_max_body)]
    pub max_body_bytes: usize,
    /// HTTP worker threads [default: number of cores].
    #[arg(long, env = "DELAYQ_WORKERS", value_parser = parse_workers)]
    pub workers: Option<usize>,
    /// Status changes waiting for the journal before due messages stop being
    /// promoted (until the journal catches up); bounds memory in an outage.
    #[arg(long, env = "DELAYQ_JOURNAL_BACKLOG", default_value_t = crate::actors::journal::DEFAULT_BACKLOG, value_parser = clap::value_parser!(usize))]
    pub journal_backlog: usize,
    /// The nice value (0-19) of the thread that journals the status changes
    /// no caller waits for (promotions, hand-outs, acks answered before their
    /// commit): on a busy machine, handing messages out comes first and the
    /// journal catches up after. 0 keeps the process's priority.
    #[arg(long, env = "DELAYQ_JOURNAL_NICE", default_value_t = crate::actors::journal::DEFAULT_NICE, value_parser = clap::value_parser!(i32).range(0..=19))]
    pub journal_nice: i32,
    /// How often the leader compares the journal with Redis, schedules
    /// again what Redis lost and takes out of Redis what the journal ended
    /// (e.g. 60s, 5m; 0 turns it off).
    #[arg(long, env = "DELAYQ_RECONCILE_INTERVAL", default_value = "60s", value_parser = parse_interval)]
    pub reconcile_interval: Duration,
    /// How long a Consumed or Deleted message stays in the journal (with
    /// its history) once it finished (e.g. 7d, 12h; 0 keeps it forever).
    #[arg(long, env = "DELAYQ_RETAIN_FINISHED", default_value = "7d", value_parser = parse_interval)]
    pub retain_finished: Duration,
    /// How long a dead letter stays in the journal (to be requeued or
    /// deleted) once it died (e.g. 30d; 0 keeps it forever).
    #[arg(long, env = "DELAYQ_RETAIN_DEAD", default_value = "30d", value_parser = parse_interval)]
    pub retain_dead: Duration,
    /// How often the leader removes from the journal what it no longer
    /// keeps (--retain-finished, --retain-dead).
    #[arg(long, env = "DELAYQ_RETENTION_INTERVAL", default_value = "1m", value_parser = parse_duration)]
    pub retention_interval: Duration,
    /// Topics with series of their own in /metrics; topics seen after these
    /// share the series topic="(other)", so the number of series stays bounded.
    #[arg(long, env = "DELAYQ_METRICS_TOPICS", default_value_t = crate::metrics::DEFAULT_TOPICS)]
    pub metrics_topics: usize,
    /// The dashboard at /ui shows everything and offers no action: no
    /// buttons, and its action routes answer 403.
    #[arg(long, env = "DELAYQ_UI_READ_ONLY")]
    pub ui_read_only: bool,
    /// Forward a topic's due messages to RabbitMQ, NATS JetStream or a
    /// webhook: TOPIC=amqp://…, TOPIC=nats://…, TOPIC=http(s)://…; repeat
    /// for more topics.
    #[arg(
        long = "forward",
        env = "DELAYQ_FORWARD",
        value_delimiter = ' ',
        value_name = "TOPIC=URL"
    )]
    pub forward: Vec<crate::forward::Rule>,
    /// At most N messages of a topic handed out (and forwarded) per second,
    /// across the cluster, and/or at most M handed out and not yet acked:
    /// TOPIC=N/s, TOPIC=N/s,concurrency=M or TOPIC=concurrency=M. Repeat
    /// for more topics. Give every node the same limits.
    #[arg(
        long = "topic-limit",
        env = "DELAYQ_TOPIC_LIMIT",
        value_delimiter = ' ',
        value_name = "TOPIC=N/s[,concurrency=M]"
    )]
    pub topic_limit: Vec<crate::limit::TopicLimit>,
    /// The secret webhook requests are signed with (X-Delayq-Signature).
    #[arg(long, env = "DELAYQ_FORWARD_SECRET", hide_env_values = true)]
    pub forward_secret: Option<String>,
    #[command(flatten)]
    pub reconcile: ReconcileArgs,
    #[command(flatten)]
    pub outbox: OutboxArgs,
    #[command(flatten)]
    pub redis: RedisArgs,
    #[command(flatten)]
    pub journal: JournalArgs,
    #[command(flatten)]
    pub node: NodeArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Ingesting an application's outbox table (see [`crate::outbox`]).
#[derive(Debug, Clone, Args)]
pub struct OutboxArgs {
    /// The application's database holding the outbox table
    /// (postgres://… or mysql://…); none: no outbox is read.
    #[arg(long, env = "DELAYQ_OUTBOX_URL", hide_env_values = true)]
    pub outbox_url: Option<String>,
    /// The outbox table's name (as `delayq outbox install --table` made it).
    #[arg(long, env = "DELAYQ_OUTBOX_TABLE", default_value = crate::outbox::TABLE, value_parser = crate::outbox::parse_table)]
    pub outbox_table: String,
    /// How often the table is read when nothing woke the node (PostgreSQL
    /// wakes it at each commit of new rows; MySQL/MariaDB is read this often).
    #[arg(long, env = "DELAYQ_OUTBOX_POLL", default_value = "100ms", value_parser = parse_duration)]
    pub outbox_poll: Duration,
    /// Rows taken, pushed and deleted per transaction.
    #[arg(long, env = "DELAYQ_OUTBOX_BATCH", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub outbox_batch: u32,
}

/// What `delayq outbox` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutboxAction {
    /// Create the outbox table (and what wakes the nodes) if it is not there.
    Install,
}

#[derive(Debug, Clone, Args)]
pub struct OutboxCmdArgs {
    /// What to do: `install`.
    #[arg(value_enum)]
    pub action: OutboxAction,
    /// The application's database (postgres://… or mysql://…), where the
    /// outbox table is made: not delayq's journal.
    #[arg(long, env = "DELAYQ_OUTBOX_URL", hide_env_values = true)]
    pub database_url: String,
    /// The outbox table's name.
    #[arg(long, env = "DELAYQ_OUTBOX_TABLE", default_value = crate::outbox::TABLE, value_parser = crate::outbox::parse_table)]
    pub table: String,
}

#[derive(Debug, Clone, Args)]
pub struct RestoreArgs {
    /// Also restore messages whose due time has passed (delivered at once).
    #[arg(long)]
    pub expire: bool,
    /// Count what would be restored; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub redis: RedisArgs,
    #[command(flatten)]
    pub journal: JournalArgs,
    #[command(flatten)]
    pub node: NodeArgs,
}

#[derive(Debug, Clone, Args)]
pub struct ReconcileCmdArgs {
    /// Repair what differs (every kind but `unknown`); without it, report only.
    #[arg(long)]
    pub repair: bool,
    #[command(flatten)]
    pub reconcile: ReconcileArgs,
    #[command(flatten)]
    pub redis: RedisArgs,
    #[command(flatten)]
    pub journal: JournalArgs,
    #[command(flatten)]
    pub node: NodeArgs,
}

fn parse_prefix(s: &str) -> Result<String, String> {
    if crate::message::valid_topic(s) && s.len() <= 64 {
        Ok(s.to_string())
    } else {
        Err("the key prefix must be 1 to 64 characters of A-Z a-z 0-9 . _ : -".into())
    }
}

fn parse_node_id(s: &str) -> Result<String, String> {
    if crate::message::valid_topic(s) {
        Ok(s.to_string())
    } else {
        Err("the node id must be 1 to 128 characters of A-Z a-z 0-9 . _ : -".into())
    }
}

/// `6s`, `2500ms`, `1m`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("'{s}' is not a duration (e.g. 6s, 2500ms, 1m, 12h, 7d)");
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    let secs = |per: u64| {
        n.checked_mul(per)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("'{s}' is too long a duration"))
    };
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => secs(1)?,
        "m" => secs(60)?,
        "h" => secs(3_600)?,
        "d" => secs(86_400)?,
        _ => return Err(bad()),
    };
    if d.is_zero() {
        return Err(format!(
            "'{s}' is no time: give a duration above 0 (e.g. 30s)"
        ));
    }
    Ok(d)
}

/// A bearer token a request can send: not empty (an empty one would lock
/// the routes it guards), visible ASCII and inner spaces only (a header
/// carries nothing else), nothing around it (a secret read from a file
/// with its newline). Checked at start, after the flags are read, so the
/// error never repeats the secret.
pub fn check_token(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("the token is empty: give a secret, or leave the option out".into());
    }
    if s.trim() != s {
        return Err(
            "the token begins or ends with white space (a newline read from a file?)".into(),
        );
    }
    if !s.chars().all(|c| c == ' ' || c.is_ascii_graphic()) {
        return Err("the token holds a character other than visible ASCII and spaces".into());
    }
    Ok(())
}

/// Largest message body: 1 byte to 15 MiB (a request is at most 16 MiB,
/// and MySQL's MEDIUMTEXT body column holds 16 MB).
/// HTTP worker threads: 1 to 1024.
pub fn parse_workers(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n),
        _ => Err(format!(
            "'{s}' is not a worker count: a whole number from 1 to 1024"
        )),
    }
}

pub fn parse_max_body(s: &str) -> Result<usize, String> {
    const MAX: usize = 15 << 20;
    match s.parse::<usize>() {
        Ok(n) if (1..=MAX).contains(&n) => Ok(n),
        _ => Err(format!(
            "'{s}' is not a body size: bytes from 1 to {MAX} (15 MiB; a request is at most 16 MiB)"
        )),
    }
}

/// A duration as [`parse_duration`] reads it, or `0` for none.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    if matches!(s, "0" | "0ms" | "0s" | "0m" | "0h" | "0d") {
        Ok(Duration::ZERO)
    } else {
        parse_duration(s)
    }
}

/// A horizon: `0` (off) or at least a second, so the journal's lag and the
/// loader's pace fit well inside it.
pub fn parse_horizon(s: &str) -> Result<Duration, String> {
    let d = parse_interval(s)?;
    if !d.is_zero() && d < Duration::from_secs(1) {
        return Err(format!(
            "'{s}' is too short for a horizon: 0 (off) or at least 1s"
        ));
    }
    Ok(d)
}

impl NodeArgs {
    /// The node id, defaulting to host name + port.
    pub fn node_id(&self, port: Option<u16>) -> String {
        self.node_id.clone().unwrap_or_else(|| match port {
            Some(p) => format!("{}:{p}", host_name()),
            None => host_name(),
        })
    }
}

/// The host name, with anything a node id cannot hold replaced by `-`.
pub fn host_name() -> String {
    gethostname::gethostname()
        .to_string_lossy()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._:-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("6s"), Ok(Duration::from_secs(6)));
        assert_eq!(parse_duration("2500ms"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert_eq!(parse_duration("12h"), Ok(Duration::from_secs(12 * 3_600)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        for bad in ["", "s", "0s", "6w", "-1s", "1.5s", "1d2h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_interval("0"), Ok(Duration::ZERO));
        assert_eq!(parse_interval("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_interval("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_interval("0d"), Ok(Duration::ZERO));
        assert!(parse_interval("0w").is_err());
        assert!(parse_interval("x").is_err());
    }
}

/// The TLS flags of every command (global, so `delayq restore` reaches a
/// `rediss://` Redis as `delayq serve` does).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// PEM file of CA certificates to trust besides the platform's, on
    /// every TLS link delayq opens (Redis, RabbitMQ, NATS, webhooks; MySQL
    /// when its URL names no ssl_ca).
    #[arg(long, env = "DELAYQ_TLS_CA_FILE", global = true, value_name = "PATH")]
    pub tls_ca_file: Option<PathBuf>,
    /// PEM certificate (chain) delayq presents to servers that ask for one
    /// (mutual TLS with Redis, RabbitMQ, NATS, webhooks).
    #[arg(
        long,
        env = "DELAYQ_TLS_CLIENT_CERT",
        global = true,
        value_name = "PATH",
        requires = "tls_client_key"
    )]
    pub tls_client_cert: Option<PathBuf>,
    /// PEM private key of --tls-client-cert.
    #[arg(
        long,
        env = "DELAYQ_TLS_CLIENT_KEY",
        global = true,
        value_name = "PATH",
        requires = "tls_client_cert"
    )]
    pub tls_client_key: Option<PathBuf>,
}

impl TlsArgs {
    /// The settings the links are made with.
    pub fn settings(&self) -> crate::tls::TlsSettings {
        crate::tls::TlsSettings {
            tls_ca_file: self.tls_ca_file.clone(),
            tls_client_cert: self.tls_client_cert.clone(),
            tls_client_key: self.tls_client_key.clone(),
        }
    }
}

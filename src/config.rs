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
//! | `--node-id` | `DELAYQ_NODE_ID` | host name + port |
//! | `--worker-id` | `DELAYQ_WORKER_ID` | `0` (Snowflake worker, 0..=1023) |
//! | `--admin-token` | `DELAYQ_ADMIN_TOKEN` | none |
//! | `--max-body-bytes` | `DELAYQ_MAX_BODY_BYTES` | `1048576` |
//! | `--workers` | `DELAYQ_WORKERS` | number of cores (HTTP worker threads) |
//! | `--log-json` | `DELAYQ_LOG_JSON` | off |
//!
//! Log levels follow `RUST_LOG` (default `info`).

use std::net::SocketAddr;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "delayq", version, about = "A clustered delayed-message queue")]
pub struct Cli {
    /// Log as JSON lines instead of text.
    #[arg(long, env = "DELAYQ_LOG_JSON", global = true)]
    pub log_json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a node.
    Serve(ServeArgs),
    /// Run the journal migrations and exit.
    Migrate(JournalArgs),
    /// Rebuild Redis from the journal for every live message, then exit.
    Restore(RestoreArgs),
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
}

#[derive(Debug, Clone, Args)]
pub struct JournalArgs {
    /// Journal database: sqlite://PATH or mysql://USER:PASS@HOST:PORT/DB.
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
    #[arg(long, env = "DELAYQ_NODE_ID")]
    pub node_id: Option<String>,
    /// Snowflake worker id of this node; distinct per node.
    #[arg(long, env = "DELAYQ_WORKER_ID", default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=1023))]
    pub worker_id: u16,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// HTTP address to listen on.
    #[arg(long, env = "DELAYQ_BIND", default_value = "127.0.0.1:7070")]
    pub bind: SocketAddr,
    /// When set, /reStore* and /delete need 'Authorization: Bearer TOKEN'.
    #[arg(long, env = "DELAYQ_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Largest message body accepted, in bytes.
    #[arg(long, env = "DELAYQ_MAX_BODY_BYTES", default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// HTTP worker threads [default: number of cores].
    #[arg(long, env = "DELAYQ_WORKERS")]
    pub workers: Option<usize>,
    #[command(flatten)]
    pub redis: RedisArgs,
    #[command(flatten)]
    pub journal: JournalArgs,
    #[command(flatten)]
    pub node: NodeArgs,
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

fn parse_prefix(s: &str) -> Result<String, String> {
    if crate::message::valid_topic(s) && s.len() <= 64 {
        Ok(s.to_string())
    } else {
        Err("the key prefix must be 1 to 64 characters of A-Z a-z 0-9 . _ : -".into())
    }
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

pub fn host_name() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

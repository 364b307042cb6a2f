//! delayq: a clustered delayed-message queue.
//!
//! # Layout
//!
//! The floors, bottom first, each importing only from itself and the
//! floors below. The lower ones are crates of their own, so Cargo refuses
//! an import that runs up; within this crate a unit test in `layers.rs`
//! checks the floors, and no crate in the repository has an import circle:
//!
//! - `delayq-proto` (`crates/delayq-proto`): the wire, every shape that
//!   crosses HTTP (the message, its id and status, the answers, the error
//!   codes), shared with the Rust client and the OpenAPI document;
//! - `delayq-domain`: the message's rules, which know nothing of HTTP,
//!   Redis or SQL: [`message`], [`input`], [`ids`], [`retry`], [`repeat`],
//!   [`clock`], [`limit`], [`redact`], [`faults`];
//! - `delayq-metrics`: [`metrics`], what `GET /metrics` shows;
//! - `delayq-storage`: [`redis`], [`journal`] and [`tls`], the links to
//!   them, with their own errors;
//! - in this crate, the shards' engine: [`actors`] (the router, the shard
//!   actors, the journal actor, the scan permit and health), [`notify`];
//! - the engine: [`queue`], [`cluster`], [`restore`], [`reconcile`],
//!   [`reshard`], [`retention`], [`horizon`];
//! - the edges: [`api`], [`forward`], [`outbox`], [`config`], [`node`];
//! - beside them all: [`error`] (the API's error codes), [`stall`],
//!   [`progress`], [`exit`] (how the process ends).
//!
//! The modules of the lower crates keep their paths here
//! (`delayq::message`, `delayq::redis`, ...).
//!
//! A message's path, module by module:
//!
//! - [`api`]: actix-web routes. `POST /push` checks the message
//!   ([`message::parse_draft`]); the queue gives it a Snowflake id ([`ids`]),
//!   from a worker id this process leases ([`cluster::worker`]). Handlers parse
//!   and render; the queue's rules (accept, hand out, ack, nack, cancel,
//!   requeue) are in [`queue`], which the command line calls too. The
//!   routes are one table, described by `GET /openapi.json` (generated
//!   from the handlers and [`api::schema`]) and Swagger UI at `/docs`.
//!   The dashboard at `/ui` ([`api::ui`]) shows the same state as pages
//!   and acts through the same queue rules.
//! - [`journal`]: the message is group-committed to the journal (SQLite,
//!   MySQL/MariaDB or PostgreSQL) as WaitPut by the [`actors::journal::JournalActor`]; only
//!   then is the push answered.
//! - [`actors::router`]: the RouterActor hashes the id to a shard and writes it
//!   into that shard's delay zset ([`redis::keys`], [`redis::scripts`]),
//!   waking the shard's actor when the message is due before its next wake-up.
//! - [`cluster`]: decides which node owns which shard (ZooKeeper, or
//!   standalone) and has the router start and stop shard actors; an owner
//!   elsewhere is woken over Redis pub/sub ([`notify`]).
//! - [`actors::shard`]: a ZsetShardActor per owned shard sleeps until the
//!   earliest due time, then moves due ids to their topic's ready queue
//!   (fenced by the shard's epoch) and notifies waiting consumers
//!   ([`notify`]; on other nodes through the ready channel).
//! - [`queue::consume`] (behind `GET /get/{topic}`, and [`forward`], which
//!   hands a topic's messages to RabbitMQ, NATS or a webhook) hands ready messages out (Consuming,
//!   with an ack deadline); `POST /ack/{id}` ends their life (Consumed). An
//!   unacked message returns to the ready queue when its deadline passes.
//!   [`retry`] decides what a failed delivery leads to; [`repeat`] when a
//!   recurring message's next occurrence is due once the current one is acked;
//!   [`limit`] how fast a topic may be handed out.
//! - Every status change is written to the journal's flow table in batches.
//! - [`restore`]: rebuilds Redis from the journal.
//! - [`reconcile`]: compares the journal with Redis message by message and
//!   puts differences right, run by the leader on a timer (self-repair).
//! - [`reshard`]: `delayq reshard`, a stopped deployment's data set moved to
//!   another shard count (the count is part of the data set).
//! - [`stall`]: a node that did not run for seconds (stopped, a paused
//!   VM) refuses the requests it finds waiting when it resumes: their
//!   senders gave up and may have sent them elsewhere.
//! - [`tls`]: one TLS stack (rustls) for the links to Redis, RabbitMQ,
//!   NATS and webhooks and for the HTTPS listener; MySQL's TLS is its
//!   client library's, set in the URL. [`redact`] hides the secrets of
//!   URLs in logs, errors and pages.
//! - [`clock`]: the one clock every due time and deadline is measured on
//!   (Redis's; the scripts read it, the node estimates it).
//! - [`node`]: start-up and shutdown, and the command-line restore and
//!   reconcile, which show their progress with [`progress`]; [`config`]:
//!   flags, their `DELAYQ_*` twins and the config file; [`error`]: the
//!   error policy and the API's error codes ([`error::ErrorCode`]);
//!   [`metrics`]: what `GET /metrics` shows, counted along the way above.

// The floors below this crate, by the paths its modules name them with.
pub use delayq_domain::{clock, faults, ids, input, limit, message, redact, repeat, retry};
pub use delayq_metrics as metrics;
pub use delayq_storage::{journal, redis, tls, with_conn};

pub mod actors;
pub mod api;
pub mod cluster;
pub mod config;
pub mod error;
pub mod exit;
pub mod forward;
pub mod horizon;
#[cfg(test)]
mod layers;
pub mod node;
pub mod notify;
pub mod outbox;
pub mod progress;
pub mod queue;
pub mod reconcile;
pub mod reshard;
pub mod restore;
pub mod retention;
pub mod stall;

/// The git revision this binary was built from (12 hex digits, or
/// `unknown` when built outside a git checkout; see `build.rs`).
pub const GIT_REVISION: &str = env!("DELAYQ_GIT_REVISION");

/// What `delayq --version` prints after the name: `0.1.0 (git 74eeeb3abcde)`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("DELAYQ_GIT_REVISION"),
    ")"
);

//! delayq: a clustered delayed-message queue.
//!
//! # Layout
//!
//! Four floors, each importing only from itself and the floors below
//! (checked by a unit test in `layers.rs`, with no import circle either):
//!
//! - the edges: [`api`], [`forward`], [`config`], [`node`];
//! - the engine: [`queue`], [`actors`], [`cluster`], [`restore`],
//!   [`reconcile`], [`reshard`], [`retention`], [`horizon`];
//! - storage: [`redis`], [`journal`], [`notify`];
//! - the domain, which knows nothing of HTTP, Redis or SQL: [`message`],
//!   [`input`], [`ids`], [`retry`], [`repeat`], [`clock`], [`error`],
//!   [`metrics`], [`tls`], [`redact`], [`stall`], [`progress`], [`faults`],
//!   [`limit`].
//!
//! The JSON shapes the server and the Rust client share (error codes, the
//! outcomes of acks, nacks and cancels) are the `delayq-proto` crate.
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
//! - [`journal`]: the message is group-committed to the journal (MySQL/MariaDB
//!   or SQLite) as WaitPut by the [`actors::journal::JournalActor`]; only
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

// The domain is its own crate (crates/delayq-domain), which names no HTTP,
// Redis or SQL crate; its modules keep their paths here.
pub use delayq_domain::{clock, faults, ids, input, limit, message, redact, repeat, retry};
pub use delayq_metrics as metrics;

pub mod actors;
pub mod api;
pub mod cluster;
pub mod config;
pub mod error;
pub mod forward;
pub mod horizon;
pub mod journal;
#[cfg(test)]
mod layers;
pub mod node;
pub mod notify;
pub mod progress;
pub mod queue;
pub mod reconcile;
pub mod redis;
pub mod reshard;
pub mod restore;
pub mod retention;
pub mod stall;
pub mod tls;

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

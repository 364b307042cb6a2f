//! delayq's storage floor: the two stores and the links to them.
//!
//! - [`redis`]: the schedule in Redis (one Redis or a Redis Cluster): the
//!   key layout, the record, the Lua scripts run per atomic step, and the
//!   handle the engine schedules, delivers and inspects through;
//! - [`journal`]: the relational journal (SQLite, MySQL/MariaDB or
//!   PostgreSQL) every accepted message and status change is written to,
//!   with its migrations and its own reading of the database's errors
//!   ([`error::JournalError::is_deadlock`], [`error::JournalError::is_refusal`]);
//! - [`tls`]: the one TLS stack of every outgoing link (rustls), which the
//!   stores' connections and the engine's forwarders use;
//! - [`error`]: what went wrong with either store.
//!
//! It builds on the domain (`delayq-domain`) and the metrics
//! (`delayq-metrics`), and knows nothing of HTTP, actors or the cluster:
//! those are the floors above, in the `delayq` crate (which also wakes
//! waiting consumers over Redis pub/sub, its `notify`).

pub mod error;
pub mod journal;
pub mod redis;
pub mod tls;

// The floors below, by the paths this crate's modules name them with.
pub(crate) use delayq_domain::{clock, faults, ids, limit, message, redact, repeat, retry};
pub(crate) use delayq_metrics as metrics;

//! delayq's integration tests, one binary: every module below starts real
//! processes (redis-server, the journal database, `delayq serve`, and for
//! some ZooKeeper, nginx, RabbitMQ, NATS or Chromium) through the fixtures
//! in [`common`], and checks what the server did by looking into them.
//!
//! Run one module with a test-name filter, e.g.
//! `cargo nextest run --test it -E 'test(/^restore::/)'`.

#[macro_use]
mod common;

mod ack;
mod admin;
mod bizkey;
mod book;
mod cancel;
mod checker;
mod client;
mod cluster;
mod crash;
mod debounce;
mod delivery;
mod first_hour;
mod forecast;
mod forward;
mod frozen;
mod groups;
mod horizon;
mod input;
mod journal;
mod journal_faults;
mod limit;
mod local_time;
mod loss;
mod metrics;
mod openapi;
mod ops;
mod outage;
mod outbox;
mod pause;
mod promises;
mod property;
mod reconcile;
mod reconcile_rules;
mod recurring;
mod redis_cluster;
mod reschedule;
mod restore;
mod retention;
mod retry;
mod search;
mod standalone;
mod tls;
mod ui;

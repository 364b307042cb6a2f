//! The queue's rules: accepting pushes, handing messages out, acks, nacks
//! (what a failed delivery leads to), recurring occurrences, cancels, dead
//! letters. Every entry point (the HTTP API, the command line, forwarders)
//! calls this layer; the HTTP handlers in [`crate::api`] only parse requests
//! and render outcomes.
//!
//! Outcomes a caller must tell apart (an ack of a message not handed out,
//! a cancel of a consumed message) are values, enums per operation;
//! [`QueueError`] is for what stopped an operation (an outage, a refusal).

//!
//! Inside: [`state`] holds the handles and what the rules share, [`error`]
//! and [`outcome`] the values they come to, [`coalesce`] batches single
//! acks and cancels; each rule has its file above them, and this file
//! wires the batching to the rules that apply a batch.

pub mod cancel;
pub mod coalesce;
pub mod consume;
pub mod dead;
pub mod error;
pub mod forecast;
pub mod outcome;
pub mod produce;
pub mod read;
pub mod replace;
pub mod reschedule;
pub mod state;

pub use error::QueueError;
pub use produce::Accepted;
pub use state::{PrefixCounts, Queue};

use std::sync::Arc;

use actix::Addr;

use crate::actors::journal::Journal;
use crate::actors::router::RouterActor;
use crate::message::IdGenerator;
use crate::notify::Topics;
use crate::redis::schedule::RedisSchedule;

/// Most acks or cancels applied in one batch.
const COALESCE: usize = 500;

impl Queue {
    /// The queue of a serving node: single acks and cancels are batched
    /// with their neighbours (must run inside the actix system).
    pub fn new(
        journal: Journal,
        router: Addr<RouterActor>,
        redis: RedisSchedule,
        waiters: Topics,
        ids: Arc<IdGenerator>,
    ) -> Queue {
        let mut q = Queue {
            journal,
            router,
            redis,
            waiters,
            ids,
            acks: None,
            cancels: None,
        };
        let (a, c) = (q.clone(), q.clone());
        q.acks = Some(coalesce::Coalesce::start(COALESCE, move |acks| {
            consume::ack_batch(a.clone(), acks)
        }));
        q.cancels = Some(coalesce::Coalesce::start(COALESCE, move |ids| {
            cancel::cancel_batch(c.clone(), ids)
        }));
        q
    }
}

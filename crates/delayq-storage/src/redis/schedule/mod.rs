//! The schedule's operations on Redis, each one script call (or one pipeline
//! of them) on one shard's keys. Any node may run any of them: ownership only
//! decides who runs [`Delivery::tick`].
//!
//! [`RedisSchedule`] (`handle.rs`) holds the connection, the keys and the
//! scripts, and schedules messages (`put.rs`, with the fence's checks in
//! `fence.rs` and reschedules in `moves.rs`). Every other concern is a
//! handle of its own, small enough to read at once, taken from it: [`RedisSchedule::delivery`]
//! (handing out, acks, nacks, cancels), [`RedisSchedule::topics`] (pauses,
//! the oldest ready), [`RedisSchedule::inspect`] (where messages are,
//! records, the restore cursor), [`RedisSchedule::ownership`] (epochs,
//! leases, the data set's markers), [`RedisSchedule::journal_sync`] (what
//! Redis keeps for the journal) and [`RedisSchedule::records`] (small shared
//! records, shard counts, the clock probe, ping).

mod deliver;
mod fence;
pub mod handle;
mod journal_sync;
mod moves;
mod outcomes;
mod ownership;
mod put;
mod records;
mod topics;

pub use deliver::Delivery;
pub use fence::ShardProbe;
pub use handle::{
    stale_reading_ms, tombstone_ms, PerShard, RedisSchedule, BEHIND_FRESH_MS, STALE_READING_MS,
    TOMBSTONE_MS,
};
pub use journal_sync::JournalSync;
pub use moves::{RecordChange, RedisMove};
pub use outcomes::*;
pub use ownership::Ownership;
pub use records::Records;
pub use topics::TopicState;

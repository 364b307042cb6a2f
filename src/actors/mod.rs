//! The actors: [`router::RouterActor`] routes messages to shards,
//! [`shard::ZsetShardActor`] scans one shard on its owner,
//! [`journal::JournalActor`] writes the journal on blocking threads.

pub mod health;
pub mod journal;
pub mod permit;
pub mod router;
pub mod shard;

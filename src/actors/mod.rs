//! The actors: [`router::RouterActor`] routes messages to shards,
//! [`shard::ZsetShardActor`] scans one shard on its owner,
//! [`journal::JournalActor`] writes the journal on blocking threads.

pub mod journal;
pub mod router;
pub mod shard;

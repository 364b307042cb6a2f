//! delayq's promises at the edges a production cluster meets, each against
//! real processes: a node whose wall clock is off, a ZooKeeper ensemble
//! rebuilt under a running Redis (its zxids start again below the stored
//! epochs), a node started with another shard count, and an ack whose
//! journal write was lost with a crash.
//!
//! `cluster`: the promises of a cluster (ZooKeeper, several nodes, shards
//! changing hands); `node`: those of one node, its journal and its tools.

mod cluster;
mod node;

//! The sizes of the shards this node owns, sampled into `/metrics`.

use crate::cluster::ClusterHandle;
use crate::metrics::{metrics, ShardSize, SAMPLE_EVERY};
use crate::redis::schedule::RedisSchedule;

/// Every [`SAMPLE_EVERY`], reads the sizes of the shards this node owns
/// (a few O(1) reads per shard) into `/metrics`' shard gauges; a scrape
/// never waits on Redis.
pub async fn sample_shards(redis: RedisSchedule, cluster: ClusterHandle) {
    loop {
        let owned: Vec<u32> = cluster.view().owned.iter().map(|&(s, _)| s).collect();
        let counts =
            futures::future::join_all(owned.iter().map(|&s| redis.records().shard_counts(s))).await;
        let now = crate::clock::now_ms();
        let sizes: Vec<ShardSize> = owned
            .iter()
            .zip(counts)
            .filter_map(|(&shard, counts)| {
                let c = counts.ok()?;
                Some(ShardSize {
                    shard,
                    delaying: c.delaying,
                    ready: c.ready,
                    in_flight: c.in_flight,
                    overdue_ms: c.oldest_overdue.map_or(0, |due| (now - due).max(0)),
                })
            })
            .collect();
        metrics().shard_sizes(&sizes);
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
}

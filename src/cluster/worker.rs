//! Snowflake worker-id leases: two live processes never share a worker id.
//!
//! - A cluster node leases from ZooKeeper: the ephemeral node
//!   `/workers/N` is its lease, gone with its session (see
//!   [`crate::cluster::zk`]).
//! - A standalone node and the command-line tools (`delayq restore`) lease
//!   from Redis: the key `{P}:worker:N`, renewed every [`RENEW`], expiring
//!   after [`LEASE`] (see lease.lua).
//!
//! Nodes take ids from [`NODE_WORKERS`]; command-line tools from
//! [`TOOL_WORKERS`], so a tool run beside cluster nodes (whose leases are in
//! ZooKeeper, not Redis) cannot take a node's id. Either way the reserved
//! millisecond is kept in Redis (`{P}:worker-reserved:N`, see reserve.lua)
//! so ids continue above what the worker issued before.

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::local_ms as now_ms;
use crate::ids::{IdGenerator, RESERVE_AHEAD_MS};
use crate::redis::schedule::{LeaseOp, RedisSchedule};

/// Worker ids of nodes.
pub const NODE_WORKERS: RangeInclusive<u16> = 0..=1007;
/// Worker ids of command-line tools.
pub const TOOL_WORKERS: RangeInclusive<u16> = 1008..=1023;

/// A Redis lease lasts this long without renewal...
pub const LEASE: Duration = Duration::from_secs(15);
/// ...is renewed this often...
pub const RENEW: Duration = Duration::from_secs(2);
/// ...and a renewal lets the holder issue ids for this long after the
/// renewal was sent (less than [`LEASE`]: the lease outlives its use).
pub const VALID: Duration = Duration::from_secs(10);

/// A unique holder name for this process: the node id and a random suffix.
pub fn holder_name(node_id: &str) -> String {
    format!("{node_id}#{}", uuid::Uuid::new_v4().simple())
}

/// Reserves milliseconds ahead for `worker` and grants or renews the lease
/// in `ids`, valid until `valid_until`.
pub async fn reserve_and_grant(
    redis: &RedisSchedule,
    ids: &IdGenerator,
    worker: u16,
    fresh: bool,
    valid_until: Instant,
) -> Result<(), crate::error::RedisError> {
    let want = now_ms().max(ids.last_ms()) + RESERVE_AHEAD_MS;
    let (before, reserved) = redis.ownership().reserve(worker, want).await?;
    if fresh {
        ids.grant(worker, before, reserved, valid_until);
    } else {
        ids.renewed(reserved, valid_until);
    }
    Ok(())
}

/// A worker id leased from Redis.
pub struct RedisWorkerLease {
    redis: RedisSchedule,
    ids: Arc<IdGenerator>,
    holder: String,
    range: RangeInclusive<u16>,
    worker: Option<u16>,
}

impl RedisWorkerLease {
    pub fn new(
        redis: RedisSchedule,
        ids: Arc<IdGenerator>,
        holder: String,
        range: RangeInclusive<u16>,
    ) -> Self {
        RedisWorkerLease {
            redis,
            ids,
            holder,
            range,
            worker: None,
        }
    }

    /// Takes the first free worker id of the range.
    pub async fn acquire(&mut self) -> anyhow::Result<u16> {
        for worker in self.range.clone() {
            let sent = Instant::now();
            let key = self.redis.keys().worker_lease(worker);
            let (held, _) = self
                .redis
                .ownership()
                .lease(
                    LeaseOp::Acquire,
                    &key,
                    &self.holder,
                    LEASE.as_millis() as u64,
                )
                .await?;
            if held {
                reserve_and_grant(&self.redis, &self.ids, worker, true, sent + VALID).await?;
                self.worker = Some(worker);
                tracing::info!(worker, "leased Snowflake worker id from Redis");
                return Ok(worker);
            }
        }
        anyhow::bail!(
            "every Snowflake worker id in {:?} is leased by another live process",
            self.range
        )
    }

    /// Renews the lease for the life of the process; takes a new one when
    /// it was lost (Redis lost its data, or the process was paused too long).
    pub async fn keep(mut self) {
        loop {
            tokio::time::sleep(RENEW).await;
            let Some(worker) = self.worker else {
                if let Err(e) = self.acquire().await {
                    tracing::warn!(error = %e, "cannot lease a Snowflake worker id; retrying");
                }
                continue;
            };
            let sent = Instant::now();
            let key = self.redis.keys().worker_lease(worker);
            let renewed = self
                .redis
                .ownership()
                .lease(LeaseOp::Renew, &key, &self.holder, LEASE.as_millis() as u64)
                .await;
            match renewed {
                Ok((true, _)) => {
                    if let Err(e) =
                        reserve_and_grant(&self.redis, &self.ids, worker, false, sent + VALID).await
                    {
                        tracing::warn!(error = %e, "cannot renew the worker id reservation");
                    }
                }
                Ok((false, holder)) => {
                    tracing::error!(
                        worker,
                        ?holder,
                        "the Snowflake worker id lease was lost; taking a new one"
                    );
                    self.ids.revoke();
                    self.worker = None;
                    // Without an id the node takes no pushes and writes no
                    // status rows: take a new one now, not a renewal later.
                    if let Err(e) = self.acquire().await {
                        tracing::warn!(error = %e, "cannot lease a Snowflake worker id; retrying");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, worker, "cannot renew the worker id lease; retrying")
                }
            }
        }
    }

    /// Frees the lease (clean shutdown).
    pub async fn release(redis: &RedisSchedule, holder: &str, worker: u16) {
        let key = redis.keys().worker_lease(worker);
        let _ = redis
            .ownership()
            .lease(LeaseOp::Release, &key, holder, 0)
            .await;
    }
}

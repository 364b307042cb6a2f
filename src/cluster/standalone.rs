//! Standalone mode: no ZooKeeper, one node owns every shard.
//!
//! The node first takes the standalone lease `{P}:standalone` in Redis (see
//! lease.lua). A second standalone node on the same Redis and key prefix
//! finds it held and refuses to start with a clear error, instead of
//! raising the shards' epochs under the first one's feet. The lease is
//! renewed every [`RENEW`]; if it is lost (Redis lost its data, or the
//! process was paused past it and another node took over), the node stops
//! scanning and takes the lease and the shards again when it can.
//!
//! A shard's epoch here is one above the stored one: the lease makes this
//! node the only standalone scanner, and the first scan raises the stored
//! epoch, fencing anything older.

use std::time::{Duration, Instant};

use actix::Addr;
use tokio::sync::mpsc;

use crate::actors::router::{OwnedShards, RouterActor, StartShard, StopShard};
use crate::actors::shard::Stale;
use crate::cluster::worker::{LEASE, RENEW, VALID};
use crate::cluster::{ClusterError, ClusterHandle, Command, Permit, Session};
use crate::redis::schedule::{LeaseOp, RedisSchedule};

/// How long start-up waits for another standalone node's lease to lapse
/// (it may have died without releasing it).
const WAIT_FOR_OTHER: Duration = Duration::from_millis(LEASE.as_millis() as u64 + 1_000);

/// The node id in a holder name (`node#random`).
fn node_of(holder: &str) -> &str {
    holder.split_once('#').map_or(holder, |(n, _)| n)
}

/// Takes the standalone lease at start-up. A lease held by a process with
/// the same node id (this node's previous run, killed) is taken over.
pub async fn take_lease(redis: &RedisSchedule, holder: &str) -> anyhow::Result<()> {
    let key = redis.keys().standalone_lease();
    let deadline = Instant::now() + WAIT_FOR_OTHER;
    let mut told = false;
    loop {
        let (held, cur) = redis
            .ownership()
            .lease(LeaseOp::Acquire, &key, holder, LEASE.as_millis() as u64)
            .await?;
        if held {
            return Ok(());
        }
        let other = cur.unwrap_or_default();
        if node_of(&other) == node_of(holder) {
            // Our own previous run: it is gone (two live nodes never share a
            // node id on purpose). Free its lease and take it.
            redis
                .ownership()
                .lease(LeaseOp::Release, &key, &other, 0)
                .await?;
            continue;
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "another standalone delayq node ('{}') is serving key prefix '{}' on this Redis; \
                 run several nodes as a cluster (--zookeeper), or give each deployment its own --key-prefix",
                node_of(&other),
                redis.keys().prefix()
            );
        }
        if !told {
            tracing::warn!(
                other = node_of(&other),
                "another standalone node holds this key prefix; waiting up to {WAIT_FOR_OTHER:?} for its lease to lapse"
            );
            told = true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Starts a scan of every shard.
async fn own_all(redis: &RedisSchedule, router: &Addr<RouterActor>) -> Result<(), ClusterError> {
    for shard in 0..redis.keys().shards() {
        let epoch = redis
            .ownership()
            .next_epoch(shard)
            .await
            .map_err(|e| ClusterError::NotPossible(e.to_string()))?;
        router.do_send(StartShard { shard, epoch });
    }
    Ok(())
}

async fn stop_all(redis: &RedisSchedule, router: &Addr<RouterActor>) {
    for shard in 0..redis.keys().shards() {
        let _ = router.send(StopShard { shard }).await;
    }
}

/// Runs standalone ownership for the life of the process (the lease is
/// already taken).
pub async fn run(
    redis: RedisSchedule,
    router: Addr<RouterActor>,
    permit: Permit,
    holder: String,
    handle: ClusterHandle,
    mut commands: mpsc::UnboundedReceiver<Command>,
    mut stale: mpsc::UnboundedReceiver<Stale>,
) {
    let key = redis.keys().standalone_lease();
    let mut owning = false;
    let mut every = tokio::time::interval(RENEW);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if !owning {
            match own_all(&redis, &router).await {
                Ok(()) => owning = true,
                Err(e) => tracing::warn!(error = %e, "cannot start the shard scans; retrying"),
            }
        }
        let owned = router.send(OwnedShards).await.unwrap_or_default();
        handle.update(|v| {
            v.owned = owned;
            v.assignment = vec![Some(v.node_id.clone()); redis.keys().shards() as usize];
        });
        tokio::select! {
            _ = every.tick() => {
                let sent = Instant::now();
                let renewed = redis
                    .ownership().lease(LeaseOp::Renew, &key, &holder, LEASE.as_millis() as u64)
                    .await;
                match renewed {
                    Ok((true, _)) => {
                        permit.extend(sent + VALID);
                        handle.update(|v| v.session = Session::Standalone);
                    }
                    Ok((false, other)) => {
                        permit.revoke();
                        tracing::error!(?other, "the standalone lease was lost; stopping every scan until it is taken again");
                        handle.update(|v| v.session = Session::Disconnected);
                        stop_all(&redis, &router).await;
                        owning = false;
                        loop {
                            let sent = Instant::now();
                            match take_lease(&redis, &holder).await {
                                Ok(()) => {
                                    permit.extend(sent + VALID);
                                    break;
                                }
                                Err(e) => {
                                    tracing::error!(error = %e, "cannot take the standalone lease back; retrying");
                                    tokio::time::sleep(RENEW).await;
                                }
                            }
                        }
                        handle.update(|v| v.session = Session::Standalone);
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot renew the standalone lease; retrying"),
                }
            }
            Some(s) = stale.recv() => {
                // Something raised the epoch under this node: take the shard
                // again above it, as long as the lease is ours.
                tracing::warn!(shard = s.shard, epoch = s.epoch, "shard epoch raised elsewhere; taking the shard again");
                if let Ok(epoch) = redis.ownership().next_epoch(s.shard).await {
                    router.do_send(StartShard { shard: s.shard, epoch });
                }
            }
            Some(cmd) = commands.recv() => {
                let refuse = || ClusterError::NotPossible(
                    "a standalone node owns every shard; run nodes with --zookeeper to rebalance or move shards".into(),
                );
                match cmd {
                    Command::Rebalance(reply) => { let _ = reply.send(Err(refuse())); }
                    Command::Move { reply, .. } => { let _ = reply.send(Err(refuse())); }
                    Command::Shutdown(done) => {
                        stop_all(&redis, &router).await;
                        let _ = redis.ownership().lease(LeaseOp::Release, &key, &holder, 0).await;
                        let _ = done.send(());
                        return;
                    }
                }
            }
        }
    }
}

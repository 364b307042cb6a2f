//! Opening the stores a node works with: the journal (migrated, waiting for
//! the database at start-up) and the Redis schedule (its shard count
//! checked against the data set's).

use std::time::Duration;

use anyhow::{bail, Context as _};

use crate::config::RedisArgs;
use crate::journal;
use crate::journal::connection::JournalUrl;
use crate::redact;
use crate::redis::keys::Keys;
use crate::redis::schedule::RedisSchedule;

/// How long start-up waits for Redis and the database to answer.
const STARTUP_WAIT: Duration = Duration::from_secs(30);

pub(super) async fn open_journal(url: &str) -> anyhow::Result<JournalUrl> {
    let url = JournalUrl::parse(url)?;
    let u = url.clone();
    let applied = tokio::task::spawn_blocking(move || journal::migrate(&u, STARTUP_WAIT))
        .await?
        .context("journal migrations")?;
    if applied > 0 {
        tracing::info!(applied, "journal migrations applied");
    }
    Ok(url)
}

pub(super) async fn open_redis(args: &RedisArgs, node_id: &str) -> anyhow::Result<RedisSchedule> {
    let redis = connect_redis(args, node_id).await?;
    check_shard_count(&redis).await?;
    Ok(redis)
}

/// Connects to Redis (waiting up to [`STARTUP_WAIT`]) and reads its clock.
pub(super) async fn connect_redis(
    args: &RedisArgs,
    node_id: &str,
) -> anyhow::Result<RedisSchedule> {
    let keys = Keys::new(&args.key_prefix, args.shards);
    if let Err(e) = crate::redis::conn::check_url(&args.redis_url) {
        bail!("--redis-url {}: {e}", redact::url(&args.redis_url));
    }
    let deadline = tokio::time::Instant::now() + STARTUP_WAIT;
    loop {
        let attempt = async {
            let con = crate::redis::connect(&args.redis_url).await?;
            let r = RedisSchedule::new(con, keys.clone(), node_id)
                .await
                .map(|r| r.with_horizon(args.redis_horizon))?;
            // The cluster's clock is Redis's: read it (every master's)
            // before anything is scheduled or stamped; a master failing
            // over meanwhile is waited for like an unreachable Redis.
            r.records().probe_clock().await?;
            Ok::<_, crate::error::RedisError>(r)
        };
        match attempt.await {
            Ok(r) => return Ok(r),
            // A certificate delayq does not trust will not become trusted
            // by waiting.
            Err(e) if crate::tls::certificate_problem(&e.to_string()).is_some() => bail!(
                "cannot reach Redis at {}: {}",
                redact::url(&args.redis_url),
                crate::tls::explain(&e.to_string())
            ),
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::warn!(
                    error = %e,
                    url = %redact::url(&args.redis_url),
                    "Redis not reachable yet; retrying for up to {} s from start",
                    STARTUP_WAIT.as_secs()
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => bail!(
                "cannot reach Redis at {}: {e}",
                redact::url(&args.redis_url)
            ),
        }
    }
}

/// The shard count is part of the data set: recorded in Redis the first
/// time a node (or tool) opens it, and a node started with another count
/// refuses to start (its messages would go to shards nobody scans, and the
/// others' messages would sit in shards it does not know).
async fn check_shard_count(redis: &RedisSchedule) -> anyhow::Result<()> {
    let mine = redis.keys().shards();
    if let Some(moving) = redis.ownership().resharding().await? {
        bail!(
            "a reshard of this data set ({moving} shards) is under way or was interrupted; \
             finish it with `delayq reshard --shards N` (N: the count it moves to) before starting nodes"
        );
    }
    match redis.ownership().record_shard_count().await? {
        recorded if recorded == mine => Ok(()),
        recorded => bail!(
            "this Redis data set (key prefix '{}') was written with --shards {recorded}, not {mine}: \
             start every node with --shards {recorded}, or stop every node and move the data set \
             with `delayq reshard --shards {mine}` (shard count is fixed for a data set's life)",
            redis.keys().prefix()
        ),
    }
}

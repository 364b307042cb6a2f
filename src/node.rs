//! Start-up and shutdown of a node, and the command-line restore.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix_web::{web, App, HttpServer};
use anyhow::{bail, Context as _};

use crate::actors::router::{RouterActor, ShardOwned};
use crate::actors::shard::{Release, ZsetShardActor};
use crate::api::{self, AppState};
use crate::config::{host_name, RedisArgs, RestoreArgs, ServeArgs};
use crate::journal::connection::{redact, JournalUrl};
use crate::journal::{self, Journal, NodeInfo};
use crate::message::IdGenerator;
use crate::ready::Waiters;
use crate::redis::keys::Keys;
use crate::redis::schedule::RedisSchedule;
use crate::restore::{RestoreReport, Restorer};

/// How long start-up waits for Redis and the database to answer.
const STARTUP_WAIT: Duration = Duration::from_secs(30);

async fn open_journal(url: &str) -> anyhow::Result<JournalUrl> {
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

async fn open_redis(args: &RedisArgs) -> anyhow::Result<RedisSchedule> {
    let keys = Keys::new(&args.key_prefix, args.shards);
    let deadline = tokio::time::Instant::now() + STARTUP_WAIT;
    loop {
        let attempt = async {
            let con = crate::redis::connect(&args.redis_url).await?;
            RedisSchedule::new(con, keys.clone()).await
        };
        match attempt.await {
            Ok(r) => return Ok(r),
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::warn!(error = %e, url = %redact(&args.redis_url), "Redis not reachable yet; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => bail!("cannot reach Redis at {}: {e}", redact(&args.redis_url)),
        }
    }
}

fn log_progress(r: &RestoreReport) {
    tracing::info!(
        scanned = r.scanned,
        restored = r.restored,
        already_present = r.already_present,
        "restoring"
    );
}

/// How often a node checks that Redis still holds its data set.
const DATASET_CHECK: Duration = Duration::from_secs(1);

/// Restores every live message from the journal when Redis has no dataset
/// marker (a new Redis, or one that lost its data), then sets the marker.
async fn ensure_dataset(restorer: &Restorer, node_id: &str) -> anyhow::Result<()> {
    if restorer.redis.has_dataset_marker().await? {
        return Ok(());
    }
    let report = restorer
        .all(true, false, log_progress)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if report.restored > 0 {
        tracing::warn!(
            restored = report.restored,
            "Redis held no delayq data set; restored it from the journal"
        );
    }
    restorer.redis.set_dataset_marker(node_id).await?;
    Ok(())
}

/// Redis may lose its data while the node runs (a restart without
/// persistence, a flush): notice it and rebuild from the journal.
async fn watch_dataset(restorer: Restorer, node_id: String) {
    let mut every = tokio::time::interval(DATASET_CHECK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if let Err(e) = ensure_dataset(&restorer, &node_id).await {
            tracing::warn!(error = %e, "cannot check or restore the Redis data set; retrying");
        }
    }
}

/// Runs a node until it is told to stop (SIGINT/SIGTERM).
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let db_url = open_journal(&args.journal.database_url).await?;
    let redis = open_redis(&args.redis).await?;
    let node_id = args.node.node_id(Some(args.bind.port()));
    let node = NodeInfo {
        node_id: node_id.clone(),
        host: format!("{}/{}", host_name(), args.bind.ip()),
    };
    let ids = Arc::new(IdGenerator::new(args.node.worker_id));
    let journal = Journal::start(&db_url, redis.keys().clone(), node, ids.clone());
    let waiters = Waiters::default();

    // Router and shard actors share one arbiter thread, away from HTTP work.
    let scan = Arbiter::new();
    let (r, j) = (redis.clone(), journal.clone());
    let router = RouterActor::start_in_arbiter(&scan.handle(), move |_| RouterActor::new(r, j));

    // A Redis without the marker has lost (or never held) the data set:
    // rebuild it from the journal before scanning, and keep watching.
    let restorer = Restorer {
        journal: journal.clone(),
        router: router.clone(),
        redis: redis.clone(),
    };
    ensure_dataset(&restorer, &node_id).await?;
    actix::spawn(watch_dataset(restorer, node_id.clone()));

    // Standalone: this node owns every shard.
    let mut shards = Vec::new();
    for shard in 0..redis.keys().shards() {
        let (r, j, w) = (redis.clone(), journal.clone(), waiters.clone());
        let actor = ZsetShardActor::start_in_arbiter(&scan.handle(), move |_| {
            ZsetShardActor::new(shard, r, j, w)
        });
        router.do_send(ShardOwned {
            shard,
            actor: actor.clone(),
        });
        shards.push(actor);
    }

    let state = web::Data::new(AppState {
        journal: journal.clone(),
        router,
        redis: redis.clone(),
        waiters,
        ids,
        max_body: args.max_body_bytes,
        admin_token: args.admin_token.clone(),
    });
    let mut server =
        HttpServer::new(move || App::new().app_data(state.clone()).configure(api::configure))
            .shutdown_timeout(5);
    if let Some(n) = args.workers {
        server = server.workers(n);
    }
    let server = server
        .bind(args.bind)
        .with_context(|| format!("cannot listen on {}", args.bind))?;
    tracing::info!(
        bind = %args.bind,
        node = %node_id,
        shards = redis.keys().shards(),
        prefix = redis.keys().prefix(),
        journal = %redact(&args.journal.database_url),
        "delayq serving (standalone: this node owns every shard)"
    );
    server.run().await?;

    tracing::info!("shutting down: stopping shard scans, flushing the journal");
    for actor in shards {
        actor.do_send(Release);
    }
    journal.flush().await?;
    scan.stop();
    Ok(())
}

/// `delayq restore`: the restore of `GET /reStore`, with progress on stderr
/// and the report as one JSON line on stdout.
pub async fn restore(args: RestoreArgs) -> anyhow::Result<RestoreReport> {
    let db_url = open_journal(&args.journal.database_url).await?;
    let redis = open_redis(&args.redis).await?;
    let node = NodeInfo {
        node_id: args.node.node_id(None),
        host: host_name(),
    };
    let ids = Arc::new(IdGenerator::new(args.node.worker_id));
    let journal = Journal::start(&db_url, redis.keys().clone(), node, ids);
    let (r, j) = (redis.clone(), journal.clone());
    let router = RouterActor::create(move |_| RouterActor::new(r, j));
    let restorer = Restorer {
        journal,
        router,
        redis,
    };
    let report = restorer
        .all(args.expire, args.dry_run, |r| {
            eprintln!(
                "restore: scanned {} restored {} already present {} skipped (expired) {}",
                r.scanned, r.restored, r.already_present, r.skipped_expired
            )
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(report)
}

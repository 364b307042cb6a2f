//! Start-up and shutdown of a node, and the command-line restore.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix_web::{web, App, HttpServer};
use anyhow::{bail, Context as _};

use crate::actors::journal::{Journal, JournalOptions};
use crate::actors::router::RouterActor;
use crate::api::{self, AppState};
use crate::cluster::worker::{self, RedisWorkerLease};
use crate::cluster::{self, standalone, ClusterHandle, Member, View};
use crate::config::{host_name, ReconcileCmdArgs, RedisArgs, RestoreArgs, ServeArgs};
use crate::journal::connection::JournalUrl;
use crate::journal::{self, NodeInfo};
use crate::message::{now_ms, IdGenerator};
use crate::notify::{Notifier, Topics};
use crate::progress::{self, Progress};
use crate::reconcile::{self, ReconcileReport, Reconciler, Repair};
use crate::redact;
use crate::redis::inspect::evicts;
use crate::redis::keys::Keys;
use crate::redis::schedule::{LeaseOp, RedisSchedule};
use crate::restore::{RestoreReport, RestoreStatus, Restorer};

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

async fn open_redis(args: &RedisArgs, node_id: &str) -> anyhow::Result<RedisSchedule> {
    let redis = connect_redis(args, node_id).await?;
    check_shard_count(&redis).await?;
    Ok(redis)
}

/// Connects to Redis (waiting up to [`STARTUP_WAIT`]) and reads its clock.
async fn connect_redis(args: &RedisArgs, node_id: &str) -> anyhow::Result<RedisSchedule> {
    let keys = Keys::new(&args.key_prefix, args.shards);
    let deadline = tokio::time::Instant::now() + STARTUP_WAIT;
    loop {
        let attempt = async {
            let con = crate::redis::connect(&args.redis_url).await?;
            RedisSchedule::new(con, keys.clone(), node_id).await
        };
        match attempt.await {
            Ok(r) => {
                // The cluster's clock is Redis's: read it before anything
                // is scheduled or stamped.
                r.probe_clock().await?;
                return Ok(r);
            }
            // A certificate delayq does not trust will not become trusted
            // by waiting.
            Err(e) if crate::tls::certificate_problem(&e.to_string()).is_some() => bail!(
                "cannot reach Redis at {}: {}",
                redact::url(&args.redis_url),
                crate::tls::explain(&e.to_string())
            ),
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::warn!(error = %e, url = %redact::url(&args.redis_url), "Redis not reachable yet; retrying");
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
    if let Some(moving) = redis.resharding().await? {
        bail!(
            "a reshard of this data set ({moving} shards) is under way or was interrupted; \
             finish it with `delayq reshard --shards N` (N: the count it moves to) before starting nodes"
        );
    }
    match redis.record_shard_count().await? {
        recorded if recorded == mine => Ok(()),
        recorded => bail!(
            "this Redis data set (key prefix '{}') was written with --shards {recorded}, not {mine}: \
             start every node with --shards {recorded}, or stop every node and move the data set \
             with `delayq reshard --shards {mine}` (shard count is fixed for a data set's life)",
            redis.keys().prefix()
        ),
    }
}

/// A reconciliation on a serving node reads small pages, each a short burst
/// of work, and pauses after each at least `RECONCILE_PAUSE` and
/// `RECONCILE_IDLE` times as long as the page took: it takes at most about
/// a fifth of the machine while shard scans and consumers need it.
const RECONCILE_PAGE: usize = 100;
const RECONCILE_PAUSE: Duration = Duration::from_millis(2);
const RECONCILE_IDLE: u32 = 4;
/// The command line's pages: nothing to share the machine with.
const RECONCILE_TOOL_PAGE: usize = 1_000;

/// Warns when Redis may evict keys: a dropped key loses messages while the
/// data set marker survives, so only the reconciler would bring them back.
async fn check_eviction(redis: &RedisSchedule) {
    match redis.maxmemory_policy().await {
        Some(p) if evicts(&p) => tracing::warn!(
            maxmemory_policy = %p,
            "Redis may evict keys under memory pressure (maxmemory-policy is not noeviction): \
             an evicted key loses scheduled messages until the reconciler schedules them again; \
             set maxmemory-policy noeviction"
        ),
        Some(_) => {}
        None => tracing::info!(
            "cannot read Redis's maxmemory-policy (CONFIG is disabled); make sure it is noeviction"
        ),
    }
}

/// Every node says in Redis, each second, whether its journal is behind
/// (see [`Journal::behind`]): acks and cancels it applied in Redis may not
/// be in the journal yet, so the journal's live rows cannot be trusted to
/// be live.
async fn publish_journal_behind(redis: RedisSchedule, journal: Journal, node_id: String) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Err(e) = redis.say_journal_behind(&node_id, journal.behind()).await {
            tracing::debug!(error = %e, "cannot publish whether the journal is behind");
        }
    }
}

/// Every `every`, the leader compares the journal with Redis and schedules
/// again what Redis lost with its data set marker intact (see
/// [`crate::reconcile`]). While the marker is missing the data set watch
/// restores everything instead.
async fn reconcile_periodically(reconciler: Reconciler, cluster: ClusterHandle, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        if !cluster.is_leader() {
            continue;
        }
        if !matches!(reconciler.redis.has_dataset_marker().await, Ok(true)) {
            continue;
        }
        // A message a node acked or cancelled in Redis while its journal was
        // down still looks live in the journal, and once its tombstone is
        // gone, missing from Redis: repairing it would deliver it again.
        match reconciler.redis.journals_behind().await {
            Ok(nodes) if nodes.is_empty() => {}
            Ok(nodes) => {
                tracing::info!(?nodes, "a node's journal is behind; reconciling later");
                continue;
            }
            Err(_) => continue,
        }
        tracing::debug!("reconciling the journal with Redis");
        match reconciler.run(Repair::Delivery, |_| {}).await {
            Ok(r) if r.is_clean() => tracing::debug!(
                journal_scanned = r.journal_scanned,
                redis_scanned = r.redis_scanned,
                elapsed_ms = r.elapsed_ms,
                "reconciled: the journal and Redis agree"
            ),
            Ok(r) => tracing::warn!(
                missing = r.missing.count,
                rescheduled = r.missing.repaired,
                unscheduled = r.unscheduled.count,
                put_back = r.unscheduled.repaired,
                finished_in_journal = r.finished_in_journal.count,
                status_mismatch = r.status_mismatch.count,
                unknown = r.unknown.count,
                elapsed_ms = r.elapsed_ms,
                "reconciled: the journal and Redis differed; messages Redis lost are scheduled again \
                 (GET /admin/reconcile?repair=true puts the rest right)"
            ),
            Err(e) => tracing::warn!(error = %e, "reconciliation failed; trying again next time"),
        }
    }
}

/// Reads Redis's clock every [`crate::clock::PROBE`], so this node's
/// estimate of the cluster's clock follows it (see [`crate::clock`]).
async fn probe_clock(redis: RedisSchedule) {
    let mut every = tokio::time::interval(crate::clock::PROBE);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if let Err(e) = redis.probe_clock().await {
            tracing::debug!(error = %e, "cannot read Redis's clock");
        }
    }
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
        .all(true, false, |_| {})
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
/// persistence, a flush): notice it and rebuild from the journal. A duty of
/// the leader alone, so one node restores.
async fn watch_dataset(restorer: Restorer, node_id: String, cluster: ClusterHandle) {
    let mut every = tokio::time::interval(DATASET_CHECK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if !cluster.is_leader() {
            continue;
        }
        if let Err(e) = ensure_dataset(&restorer, &node_id).await {
            tracing::warn!(error = %e, "cannot check or restore the Redis data set; retrying");
        }
        replay_spill(&restorer.redis, &restorer.journal, &node_id).await;
    }
}

/// How long a stopping node waits for a forwarder to finish its round.
const FORWARDER_STOP_WAIT: Duration = Duration::from_secs(15);

/// How long a stopping node waits for the journal to take its queued status
/// changes before it keeps them in Redis instead.
const SHUTDOWN_JOURNAL_WAIT: Duration = Duration::from_secs(5);
/// Spilled status changes written per journal commit.
const SPILL_PAGE: isize = 500;

/// Keeps status changes the journal did not take before shutdown in Redis
/// (`{P}:journal-spill`), for the next node to write. Only when Redis too is
/// unreachable are they lost, and then each is logged.
async fn spill(redis: &RedisSchedule, changes: &[crate::journal::StatusChange]) {
    if changes.is_empty() {
        return;
    }
    let lines: Vec<String> = changes.iter().map(|c| c.to_json()).collect();
    let mut con = redis.connection();
    let mut pipe = redis::pipe();
    for chunk in lines.chunks(SPILL_PAGE as usize) {
        pipe.rpush(redis.keys().journal_spill(), chunk).ignore();
    }
    match pipe.query_async::<()>(&mut con).await {
        Ok(()) => tracing::warn!(
            changes = changes.len(),
            "the journal did not take every status change before shutdown; kept in Redis for the next node to write"
        ),
        Err(e) => {
            tracing::error!(error = %e, changes = changes.len(), "neither the journal nor Redis took these status changes at shutdown");
            for line in &lines {
                tracing::error!(change = %line, "status change not journaled");
            }
        }
    }
}

/// Writes status changes a stopped node kept in Redis to the journal, a
/// page at a time, removing each page once committed.
async fn replay_spill(redis: &RedisSchedule, journal: &Journal, node_id: &str) {
    let key = redis.keys().journal_spill();
    let mut con = redis.connection();
    let empty = redis::cmd("LLEN")
        .arg(&key)
        .query_async::<i64>(&mut con)
        .await
        .map_or(true, |n| n == 0);
    if empty {
        return;
    }
    // One node at a time: two reading the same page and each trimming it
    // would trim a page nobody wrote.
    let lock = format!("{key}:lock");
    match redis
        .lease(
            LeaseOp::Acquire,
            &lock,
            node_id,
            SPILL_LOCK.as_millis() as u64,
        )
        .await
    {
        Ok((true, _)) => {}
        _ => return,
    }
    replay_spill_pages(redis, journal, &key).await;
    let _ = redis.lease(LeaseOp::Release, &lock, node_id, 0).await;
}

/// How long one node may hold the right to write spilled changes.
const SPILL_LOCK: Duration = Duration::from_secs(60);

async fn replay_spill_pages(redis: &RedisSchedule, journal: &Journal, key: &str) {
    let mut con = redis.connection();
    loop {
        let page: Vec<String> = match redis::cmd("LRANGE")
            .arg(key)
            .arg(0)
            .arg(SPILL_PAGE - 1)
            .query_async(&mut con)
            .await
        {
            Ok(p) => p,
            Err(_) => return,
        };
        if page.is_empty() {
            return;
        }
        let changes: Vec<_> = page
            .iter()
            .filter_map(|l| {
                let change = crate::journal::StatusChange::from_json(l);
                if change.is_none() {
                    tracing::error!(line = %l, "a status change kept in Redis cannot be read; dropped");
                }
                change
            })
            .collect();
        if let Err(e) = journal.record_durable(changes).await {
            tracing::warn!(error = %e, "cannot write status changes kept in Redis yet; retrying later");
            return;
        }
        let trimmed: redis::RedisResult<()> = redis::cmd("LTRIM")
            .arg(key)
            .arg(page.len())
            .arg(-1)
            .query_async(&mut con)
            .await;
        if trimmed.is_err() {
            return;
        }
        tracing::info!(
            changes = page.len(),
            "wrote status changes a stopped node kept in Redis to the journal"
        );
    }
}

/// Runs a node until it is told to stop (SIGINT/SIGTERM).
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let node_id = args.node.node_id(Some(args.bind.port()));
    crate::metrics::metrics().limit_topics(args.metrics_topics);
    crate::stall::start();
    let db_url = open_journal(&args.journal.database_url).await?;
    let redis = open_redis(&args.redis, &node_id).await?;
    let node = NodeInfo {
        node_id: node_id.clone(),
        host: format!("{}/{}", host_name(), args.bind.ip()),
    };
    // No ids until a worker id is leased.
    let ids = Arc::new(IdGenerator::leased());
    let journal = Journal::start(
        &db_url,
        redis.clone(),
        node,
        ids.clone(),
        JournalOptions {
            backlog: args.journal_backlog,
            background_nice: args.journal_nice,
        },
    );
    let waiters = Topics::default();
    let shards = redis.keys().shards();
    let holder = worker::holder_name(&node_id);

    // Router and shard actors share one arbiter thread, away from HTTP work.
    let scan = Arbiter::new();
    let (stale_tx, stale_rx) = tokio::sync::mpsc::unbounded_channel();
    let permit = cluster::Permit::default();
    let (r, j, w, p) = (
        redis.clone(),
        journal.clone(),
        waiters.clone(),
        permit.clone(),
    );
    let router = RouterActor::start_in_arbiter(&scan.handle(), move |_| {
        RouterActor::new(r, j, w, stale_tx, p)
    });

    // Wake-ups from other nodes: shards to scan, topics with ready messages.
    Notifier::new(
        waiters.clone(),
        router.clone().recipient(),
        router.clone().recipient(),
    )
    .listen_redis(
        args.redis.redis_url.clone(),
        redis.keys().clone(),
        node_id.clone(),
    );

    let restore_status = RestoreStatus::default();
    let restorer = Restorer {
        journal: journal.clone(),
        router: router.clone(),
        redis: redis.clone(),
        status: restore_status.clone(),
    };
    // Its own Redis connection: its pipelines do not hold up the scans'.
    let reconcile_redis = redis.with_connection(
        crate::redis::connect(&args.redis.redis_url)
            .await
            .context("a Redis connection for the reconciler")?,
    );
    let reconciler = Reconciler::new(
        journal.clone(),
        router.clone(),
        reconcile_redis,
        reconcile::Options {
            grace: args.reconcile.reconcile_grace,
            page: RECONCILE_PAGE,
            pause: RECONCILE_PAUSE,
            idle: RECONCILE_IDLE,
        },
    );
    check_eviction(&redis).await;
    let advertise = args.cluster.advertise.clone().unwrap_or_else(|| {
        let scheme = if args.tls_cert.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", args.bind)
    });
    let cluster = match &args.cluster.zookeeper {
        Some(zk) => {
            let view = View::new(args.cluster.mode.as_str(), &node_id, shards);
            let (handle, commands) = ClusterHandle::new(view);
            let me = Member {
                id: node_id.clone(),
                address: advertise,
                start_time: now_ms(),
                version: env!("CARGO_PKG_VERSION").to_string(),
            };
            cluster::zk::start(
                cluster::zk::Config {
                    connect: zk.clone(),
                    session_timeout: args.cluster.zk_session_timeout,
                    mode: args.cluster.mode,
                    shards,
                },
                me,
                redis.clone(),
                ids.clone(),
                router.clone(),
                permit.clone(),
                handle.clone(),
                commands,
                stale_rx,
            )
            .await?;
            handle
        }
        None => {
            // One standalone node per key prefix: refuse clearly when
            // another one serves it.
            standalone::take_lease(&redis, &holder).await?;
            permit.extend(std::time::Instant::now() + worker::VALID);
            let mut lease = RedisWorkerLease::new(
                redis.clone(),
                ids.clone(),
                holder.clone(),
                worker::NODE_WORKERS,
            );
            let worker_id = lease.acquire().await?;
            actix::spawn(lease.keep());
            let mut view = View::new("standalone", &node_id, shards);
            view.session = cluster::Session::Standalone;
            view.leader = Some(node_id.clone());
            view.worker_id = Some(worker_id);
            view.nodes = vec![Member {
                id: node_id.clone(),
                address: advertise,
                start_time: now_ms(),
                version: env!("CARGO_PKG_VERSION").to_string(),
            }];
            let (handle, commands) = ClusterHandle::new(view);
            // A Redis without the marker has lost (or never held) the data
            // set: rebuild it from the journal before scanning.
            ensure_dataset(&restorer, &node_id).await?;
            actix::spawn(standalone::run(
                redis.clone(),
                router.clone(),
                permit.clone(),
                holder.clone(),
                handle.clone(),
                commands,
                stale_rx,
            ));
            handle
        }
    };
    actix::spawn(probe_clock(redis.clone()));
    actix::spawn(publish_journal_behind(
        redis.clone(),
        journal.clone(),
        node_id.clone(),
    ));
    actix::spawn(watch_dataset(restorer, node_id.clone(), cluster.clone()));
    actix::spawn(api::ui::history::run());
    actix::spawn(api::ui::auth::sync_revoked(redis.clone()));
    actix::spawn(crate::cluster::health::sample_shards(
        redis.clone(),
        cluster.clone(),
    ));
    if !args.reconcile_interval.is_zero() {
        actix::spawn(reconcile_periodically(
            reconciler.clone(),
            cluster.clone(),
            args.reconcile_interval,
        ));
    }

    let state = web::Data::new(AppState {
        queue: crate::queue::Queue::new(
            journal.clone(),
            router.clone(),
            redis.clone(),
            waiters.clone(),
            ids.clone(),
        ),
        journal: journal.clone(),
        router,
        redis: redis.clone(),
        waiters,
        ids: ids.clone(),
        cluster: cluster.clone(),
        max_body: args.max_body_bytes,
        admin_token: args.admin_token.clone(),
        read_token: args.read_token.clone(),
        ui_read_only: args.ui_read_only,
        restore_status,
        reconciler,
    });
    let (stop_forwarding, forwarding_stopped) = tokio::sync::watch::channel(false);
    let forwarders = crate::forward::start(
        state.queue.clone(),
        &args.forward,
        args.forward_secret.clone(),
        forwarding_stopped,
    );
    let mut server = HttpServer::new(move || {
        App::new()
            .wrap(actix_web::middleware::from_fn(api::refuse_when_stalled))
            .wrap(actix_web::middleware::from_fn(api::count_requests))
            .app_data(state.clone())
            .configure(api::configure)
    })
    .shutdown_timeout(5);
    if let Some(n) = args.workers {
        server = server.workers(n);
    }
    let server = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let listener = crate::tls::Listener::load(cert, key)?;
            listener.clone().reload_on_hangup()?;
            server.bind_rustls_0_23(args.bind, listener.server_config())
        }
        _ => server.bind(args.bind),
    }
    .with_context(|| format!("cannot listen on {}", args.bind))?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        revision = crate::GIT_REVISION,
        bind = %args.bind,
        https = args.tls_cert.is_some(),
        node = %node_id,
        shards,
        prefix = redis.keys().prefix(),
        journal = %redact::url(&args.journal.database_url),
        mode = cluster.view().mode,
        "delayq serving"
    );
    server.run().await?;

    tracing::info!("shutting down: stopping forwarders and shard scans, flushing the journal");
    // Forwarders finish (and ack) what they hold; one stuck on a broker is
    // left: what it holds comes back after its ttl.
    let _ = stop_forwarding.send(true);
    for f in forwarders {
        let _ = tokio::time::timeout(FORWARDER_STOP_WAIT, f).await;
    }
    cluster.shutdown().await;
    let unwritten = journal.close(SHUTDOWN_JOURNAL_WAIT).await;
    spill(&redis, &unwritten).await;
    if let Some(w) = ids.worker() {
        if args.cluster.zookeeper.is_none() {
            RedisWorkerLease::release(&redis, &holder, w).await;
        }
    }
    scan.stop();
    Ok(())
}

/// What the command-line tools (`delayq restore`, `delayq reconcile`) run
/// on: the journal, Redis and a router, and, when the tool writes, a
/// worker id of the tools' range leased in Redis: never one a running node
/// uses (a tool that only reads needs none).
struct Tool {
    redis: RedisSchedule,
    journal: Journal,
    router: Addr<RouterActor>,
    holder: String,
    leased: Option<(u16, tokio::task::JoinHandle<()>)>,
}

impl Tool {
    async fn open(
        node: &crate::config::NodeArgs,
        journal: &crate::config::JournalArgs,
        redis: &RedisArgs,
        writes: bool,
    ) -> anyhow::Result<Tool> {
        let node_id = node.node_id(None);
        let db_url = open_journal(&journal.database_url).await?;
        let redis = open_redis(redis, &node_id).await?;
        let info = NodeInfo {
            node_id: node_id.clone(),
            host: host_name(),
        };
        let ids = Arc::new(IdGenerator::leased());
        let holder = worker::holder_name(&node_id);
        let mut leased = None;
        if writes {
            let mut lease = RedisWorkerLease::new(
                redis.clone(),
                ids.clone(),
                holder.clone(),
                worker::TOOL_WORKERS,
            );
            let worker_id = lease.acquire().await?;
            leased = Some((worker_id, actix::spawn(lease.keep())));
        }
        let journal = Journal::start(&db_url, redis.clone(), info, ids, JournalOptions::default());
        let (stale, _) = tokio::sync::mpsc::unbounded_channel();
        let (r, j) = (redis.clone(), journal.clone());
        let router = RouterActor::create(move |_| {
            RouterActor::new(r, j, Topics::default(), stale, cluster::Permit::forever())
        });
        Ok(Tool {
            redis,
            journal,
            router,
            holder,
            leased,
        })
    }

    /// Writes the status rows of what the tool did, then frees the lease.
    async fn close(self) -> anyhow::Result<()> {
        let flushed = self.journal.flush().await;
        if let Some((worker_id, keeping)) = self.leased {
            keeping.abort();
            RedisWorkerLease::release(&self.redis, &self.holder, worker_id).await;
        }
        Ok(flushed?)
    }
}

/// `delayq restore`: the restore of `GET /reStore`, with progress on stderr
/// (a bar on a terminal, its total the live rows still to read; plain lines
/// elsewhere) and the report as one JSON line on stdout.
pub async fn restore(args: RestoreArgs) -> anyhow::Result<RestoreReport> {
    let tool = Tool::open(&args.node, &args.journal, &args.redis, !args.dry_run).await?;
    let restorer = Restorer {
        journal: tool.journal.clone(),
        router: tool.router.clone(),
        redis: tool.redis.clone(),
        status: RestoreStatus::default(),
    };
    // The bar's total: the live rows after where the restore starts. A
    // failed count leaves the bar without one (no time left shown).
    let total = if progress::wanted() {
        match restorer.resumes_after(args.expire, args.dry_run).await {
            Ok(c) => tool.journal.count_live(c.map_or(0, |c| c.after)).await.ok(),
            Err(_) => None,
        }
    } else {
        None
    };
    let shown = Progress::start("restore", total);
    let report = restorer
        .all(args.expire, args.dry_run, |r| {
            shown.update(
                r.scanned,
                || {
                    format!(
                        "restored {}, already present {}, skipped (expired) {}, skipped (finished) {}",
                        r.restored, r.already_present, r.skipped_expired, r.skipped_finished
                    )
                },
                || {
                    format!(
                        "restore: scanned {} restored {} already present {} skipped (expired) {}",
                        r.scanned, r.restored, r.already_present, r.skipped_expired
                    )
                },
            )
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}"));
    drop(shown);
    // The Delaying rows of what was restored, before the lease goes.
    tool.close().await?;
    report
}

/// `delayq reshard --shards N`: moves a stopped deployment's data set to `N`
/// shards (see [`crate::reshard`]); the report as one JSON line.
pub async fn reshard(
    args: crate::config::ReshardArgs,
) -> anyhow::Result<crate::reshard::ReshardReport> {
    let redis = connect_redis(&args.redis, &host_name()).await?;
    crate::reshard::reshard(&redis, args.page as usize).await
}

/// `delayq reconcile`: the report of `GET /admin/reconcile`, with progress
/// on stderr (a bar on a terminal, its total the live journal rows and the
/// Redis records to read; plain lines elsewhere) and the report as one JSON
/// line on stdout.
pub async fn reconcile(args: ReconcileCmdArgs) -> anyhow::Result<ReconcileReport> {
    // Repairs write flow rows.
    let tool = Tool::open(&args.node, &args.journal, &args.redis, args.repair).await?;
    let reconciler = Reconciler::new(
        tool.journal.clone(),
        tool.router.clone(),
        tool.redis.clone(),
        reconcile::Options {
            grace: args.reconcile.reconcile_grace,
            page: RECONCILE_TOOL_PAGE,
            pause: Duration::ZERO,
            idle: 0,
        },
    );
    let repair = if args.repair {
        Repair::All
    } else {
        Repair::None
    };
    // The bar's total: the live journal rows and the Redis records.
    let total = if progress::wanted() {
        match (
            tool.journal.count_live(0).await,
            tool.redis.record_count().await,
        ) {
            (Ok(rows), Ok(records)) => Some(rows + records),
            _ => None,
        }
    } else {
        None
    };
    let shown = Progress::start("reconcile", total);
    let report = reconciler
        .run(repair, |r| {
            shown.update(
                r.journal_scanned + r.journal_recent + r.redis_scanned,
                || {
                    format!(
                        "journal rows {} (recent {}), redis records {}; missing {}, unscheduled {}, \
                         finishedInJournal {}, statusMismatch {}, unknown {}",
                        r.journal_scanned,
                        r.journal_recent,
                        r.redis_scanned,
                        r.missing.count,
                        r.unscheduled.count,
                        r.finished_in_journal.count,
                        r.status_mismatch.count,
                        r.unknown.count
                    )
                },
                || {
                    format!(
                        "reconcile: journal rows {} (recent {}) redis records {} missing {} unscheduled {} \
                         finishedInJournal {} statusMismatch {} unknown {}",
                        r.journal_scanned,
                        r.journal_recent,
                        r.redis_scanned,
                        r.missing.count,
                        r.unscheduled.count,
                        r.finished_in_journal.count,
                        r.status_mismatch.count,
                        r.unknown.count
                    )
                },
            )
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}"));
    drop(shown);
    tool.close().await?;
    report
}

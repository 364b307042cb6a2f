//! Running a node: start-up in named steps, serving, and shutdown.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix_web::{web, App, HttpServer};
use anyhow::Context as _;

use crate::actors::journal::{Journal, JournalOptions};
use crate::actors::router::RouterActor;
use crate::actors::shard::Stale;
use crate::api::{self, AppState};
use crate::cluster::worker::{self, RedisWorkerLease};
use crate::cluster::{self, standalone, ClusterHandle, Member, View};
use crate::config::{host_name, ServeArgs};
use crate::journal::NodeInfo;
use crate::message::{now_ms, IdGenerator};
use crate::notify::{Notifier, Topics};
use crate::reconcile::{self, Reconciler};
use crate::redact;
use crate::redis::schedule::RedisSchedule;
use crate::restore::{RestoreStatus, Restorer};
use crate::retention::{Keep, Retention};
use tokio::sync::mpsc;

use super::duties::{
    answer_flush_asks, check_eviction, ensure_dataset, publish_journal_behind,
    reconcile_periodically, retain_periodically, watch_dataset, watch_due_next_hour, watch_paused,
};
use super::open::{open_journal, open_redis};
use super::spill::spill;

/// A reconciliation on a serving node reads small pages, each a short burst
/// of work, and pauses after each at least `RECONCILE_PAUSE` and
/// `RECONCILE_IDLE` times as long as the page took: it takes at most about
/// a fifth of the machine while shard scans and consumers need it.
const RECONCILE_PAGE: usize = 100;
const RECONCILE_PAUSE: Duration = Duration::from_millis(2);
const RECONCILE_IDLE: u32 = 4;

/// How long a stopping node waits for a forwarder to finish its round.
const FORWARDER_STOP_WAIT: Duration = Duration::from_secs(15);

/// How long a stopping node waits for the journal to take its queued status
/// changes before it keeps them in Redis instead.
const SHUTDOWN_JOURNAL_WAIT: Duration = Duration::from_secs(5);

/// Runs a node until it is told to stop (SIGINT/SIGTERM; SIGQUIT stops it
/// without waiting for the requests in progress).
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let node_id = args.node.node_id(Some(args.bind.port()));
    crate::metrics::metrics().limit_topics(args.metrics_topics);
    crate::stall::start();
    let db_url = open_journal(&args.journal.database_url).await?;
    let limits = crate::limit::by_topic(&args.topic_limit).map_err(|e| anyhow::anyhow!(e))?;
    let redis = open_redis(&args.redis, &node_id).await?;
    if redis.is_cluster() {
        crate::limit::check_on_cluster(&limits, args.redis.shards)
            .map_err(|e| anyhow::anyhow!(e))?;
    }
    let redis = redis.with_limits(limits);
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
    // A pause or resume cut short, or a reshard, left some shard's copy of
    // the paused topics behind the list: made to follow it.
    if let Err(e) = redis.topics().sync_paused().await {
        tracing::warn!(error = %e, "cannot bring the shards' paused topics in line with the list; pause or resume again");
    }
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
            join_zookeeper(
                &args, zk, &node_id, shards, advertise, &redis, &ids, &router, &permit, stale_rx,
            )
            .await?
        }
        None => {
            run_standalone(
                &node_id, shards, advertise, &holder, &redis, &ids, &router, &permit, &restorer,
                stale_rx,
            )
            .await?
        }
    };
    spawn_duties(
        &args,
        &redis,
        &journal,
        &node_id,
        restorer.clone(),
        &cluster,
        &reconciler,
    );

    let state = web::Data::new(AppState {
        queue: crate::queue::Queue::new(
            journal.clone(),
            router.clone(),
            redis.clone(),
            waiters.clone(),
            ids.clone(),
        ),
        cluster: cluster.clone(),
        max_body: args.max_body_bytes,
        admin_token: args.admin_token.clone(),
        read_token: args.read_token.clone(),
        ui_read_only: args.ui_read_only,
        restore_status,
        restorer: restorer.clone(),
        reconciler,
    });
    actix::spawn(watch_due_next_hour(state.queue.clone(), cluster.clone()));
    let (stop_forwarding, forwarding_stopped) = tokio::sync::watch::channel(false);
    let forwarders = crate::forward::start(
        state.queue.clone(),
        &args.forward,
        args.forward_secret.clone(),
        forwarding_stopped,
    );
    let outbox = args.outbox.outbox_url.clone().map(|url| {
        crate::outbox::start(
            state.queue.clone(),
            crate::outbox::Settings {
                url,
                table: args.outbox.outbox_table.clone(),
                poll: args.outbox.outbox_poll,
                batch: args.outbox.outbox_batch,
                max_body: args.max_body_bytes,
            },
        )
    });
    // The stop signals are caught from before the node listens: one sent
    // as soon as it answers is a graceful stop, never the default action
    // (the process killed outright) while the task below has yet to run.
    let signals = StopSignals::catch();
    let server = listen(&args, state, &node_id, shards, &redis, &cluster)?;
    let handle = server.handle();
    // SIGINT/SIGTERM: waiting long polls answer with nothing at once, then
    // the server stops taking connections and finishes the requests it has
    // (up to 5 s).
    actix::spawn(async move {
        let graceful = signals.first().await;
        tracing::info!(
            graceful,
            "stop signal: answering waiting polls, finishing requests"
        );
        crate::queue::consume::begin_closing();
        handle.stop(graceful).await;
    });
    server.await?;

    tracing::info!("shutting down: stopping forwarders and shard scans, flushing the journal");
    stop_forwarders(stop_forwarding, forwarders).await;
    if let Some(outbox) = outbox {
        outbox.stop().await;
    }
    release(&args, &cluster, &journal, &redis, &ids, &holder, scan).await;
    redis.journal_sync().say_stopped(&node_id).await;
    Ok(())
}

/// Joins the cluster on ZooKeeper: membership, leadership and shard
/// ownership run in the background ([`cluster::zk`]).
#[allow(clippy::too_many_arguments)]
async fn join_zookeeper(
    args: &ServeArgs,
    zk: &str,
    node_id: &str,
    shards: u32,
    advertise: String,
    redis: &RedisSchedule,
    ids: &Arc<IdGenerator>,
    router: &Addr<RouterActor>,
    permit: &cluster::Permit,
    stale_rx: mpsc::UnboundedReceiver<Stale>,
) -> anyhow::Result<ClusterHandle> {
    let view = View::new(args.cluster.mode.as_str(), node_id, shards);
    let (handle, commands) = ClusterHandle::new(view);
    let me = Member {
        id: node_id.to_string(),
        address: advertise,
        start_time: now_ms(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    };
    cluster::zk::start(
        cluster::zk::Config {
            connect: zk.to_string(),
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
    Ok(handle)
}

/// Runs as the only node ([`standalone`]): takes the standalone lease and a
/// worker id, and rebuilds Redis from the journal when it lost the data set.
#[allow(clippy::too_many_arguments)]
async fn run_standalone(
    node_id: &str,
    shards: u32,
    advertise: String,
    holder: &str,
    redis: &RedisSchedule,
    ids: &Arc<IdGenerator>,
    router: &Addr<RouterActor>,
    permit: &cluster::Permit,
    restorer: &Restorer,
    stale_rx: mpsc::UnboundedReceiver<Stale>,
) -> anyhow::Result<ClusterHandle> {
    // One standalone node per key prefix: refuse clearly when
    // another one serves it.
    standalone::take_lease(redis, holder).await?;
    permit.extend(std::time::Instant::now() + worker::VALID);
    let mut lease = RedisWorkerLease::new(
        redis.clone(),
        ids.clone(),
        holder.to_string(),
        worker::NODE_WORKERS,
    );
    let worker_id = lease.acquire().await?;
    actix::spawn(lease.keep());
    let mut view = View::new("standalone", node_id, shards);
    view.session = cluster::Session::Standalone;
    view.leader = Some(node_id.to_string());
    view.worker_id = Some(worker_id);
    view.nodes = vec![Member {
        id: node_id.to_string(),
        address: advertise,
        start_time: now_ms(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    }];
    let (handle, commands) = ClusterHandle::new(view);
    // A Redis without the marker has lost (or never held) the data
    // set: rebuild it from the journal before scanning.
    ensure_dataset(restorer, node_id).await?;
    actix::spawn(standalone::run(
        redis.clone(),
        router.clone(),
        permit.clone(),
        holder.to_string(),
        handle.clone(),
        commands,
        stale_rx,
    ));
    Ok(handle)
}

/// Starts the node's background duties ([`super::duties`] and the
/// dashboard's and metrics' samplers).
fn spawn_duties(
    args: &ServeArgs,
    redis: &RedisSchedule,
    journal: &Journal,
    node_id: &str,
    restorer: Restorer,
    cluster: &ClusterHandle,
    reconciler: &Reconciler,
) {
    actix::spawn(
        crate::reconcile::fence::Fence::new(redis.clone(), journal.clone(), node_id)
            .with_retention(args.retain_finished, args.retain_dead)
            .with_cluster(cluster.clone())
            .run(),
    );
    actix::spawn(watch_paused(redis.clone()));
    actix::spawn(
        crate::horizon::Loader {
            journal: journal.clone(),
            router: restorer.router.clone(),
            redis: redis.clone(),
        }
        .run(),
    );
    actix::spawn(publish_journal_behind(
        redis.clone(),
        journal.clone(),
        node_id.to_string(),
    ));
    actix::spawn(answer_flush_asks(
        redis.clone(),
        journal.clone(),
        node_id.to_string(),
    ));
    actix::spawn(watch_dataset(
        restorer,
        node_id.to_string(),
        cluster.clone(),
    ));
    actix::spawn(api::ui::history::run());
    actix::spawn(api::ui::auth::sync_revoked(redis.clone()));
    actix::spawn(crate::cluster::sizes::sample_shards(
        redis.clone(),
        cluster.clone(),
    ));
    if !(args.retain_finished.is_zero() && args.retain_dead.is_zero()) {
        let retention = Retention {
            journal: journal.clone(),
            redis: redis.clone(),
            keep: Keep {
                finished: args.retain_finished,
                dead: args.retain_dead,
            },
        };
        actix::spawn(retain_periodically(
            retention,
            cluster.clone(),
            args.retention_interval,
        ));
    }
    if !args.reconcile_interval.is_zero() {
        actix::spawn(reconcile_periodically(
            reconciler.clone(),
            cluster.clone(),
            args.reconcile_interval,
        ));
    }
}

/// Binds the HTTP (or HTTPS) listener and starts serving.
fn listen(
    args: &ServeArgs,
    state: web::Data<AppState>,
    node_id: &str,
    shards: u32,
    redis: &RedisSchedule,
    cluster: &ClusterHandle,
) -> anyhow::Result<actix_web::dev::Server> {
    let app = move || {
        App::new()
            .wrap(actix_web::middleware::from_fn(api::refuse_when_stalled))
            .wrap(actix_web::middleware::from_fn(api::count_requests))
            .app_data(state.clone())
            .configure(api::configure)
    };
    let server = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let listener = super::https::Listener::load(cert, key)?;
            listener.clone().reload_on_hangup()?;
            super::https::serve(args.bind, args.workers, listener.server_config(), app)
        }
        _ => {
            let mut server = HttpServer::new(app).shutdown_timeout(5).disable_signals();
            if let Some(n) = args.workers {
                server = server.workers(n);
            }
            server.bind(args.bind).map(HttpServer::run)
        }
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
    Ok(server)
}

/// SIGINT, SIGTERM and SIGQUIT, caught from the moment [`StopSignals::catch`]
/// runs (a signal that arrives before [`StopSignals::first`] is awaited is
/// kept, not acted on by default).
struct StopSignals {
    interrupt: Option<tokio::signal::unix::Signal>,
    terminate: Option<tokio::signal::unix::Signal>,
    quit: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    fn catch() -> StopSignals {
        use tokio::signal::unix::{signal, SignalKind};
        let listen = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for {name}");
                None
            }
        };
        StopSignals {
            interrupt: listen(SignalKind::interrupt(), "SIGINT"),
            terminate: listen(SignalKind::terminate(), "SIGTERM"),
            quit: listen(SignalKind::quit(), "SIGQUIT"),
        }
    }

    /// The first SIGINT or SIGTERM (true: finish the requests in progress)
    /// or SIGQUIT (false: drop them); either way the node then releases its
    /// shards and flushes its journal.
    async fn first(self) -> bool {
        async fn next(s: Option<tokio::signal::unix::Signal>) {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            _ = next(self.interrupt) => true,
            _ = next(self.terminate) => true,
            _ = next(self.quit) => false,
        }
    }
}

/// Lets the forwarders finish their round.
async fn stop_forwarders(
    stop_forwarding: tokio::sync::watch::Sender<bool>,
    forwarders: Vec<tokio::task::JoinHandle<()>>,
) {
    // Forwarders finish (and ack) what they hold; one stuck on a broker is
    // left: what it holds comes back after its ttl.
    let _ = stop_forwarding.send(true);
    for f in forwarders {
        let _ = tokio::time::timeout(FORWARDER_STOP_WAIT, f).await;
    }
}

/// Stops the scans and leaves the cluster, flushes the journal (keeping in
/// Redis what it would not take) and gives the worker id back.
async fn release(
    args: &ServeArgs,
    cluster: &ClusterHandle,
    journal: &Journal,
    redis: &RedisSchedule,
    ids: &IdGenerator,
    holder: &str,
    scan: Arbiter,
) {
    cluster.shutdown().await;
    let unwritten = journal.close(SHUTDOWN_JOURNAL_WAIT).await;
    spill(redis, &unwritten).await;
    if let Some(w) = ids.worker() {
        if args.cluster.zookeeper.is_none() {
            RedisWorkerLease::release(redis, holder, w).await;
        }
    }
    scan.stop();
}

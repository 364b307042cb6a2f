//! The command-line tools: restore, reshard and reconcile, each on its own
//! connections to the journal and Redis.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use crate::actors::journal::{Journal, JournalOptions};
use crate::actors::router::RouterActor;
use crate::cluster;
use crate::cluster::worker::{self, RedisWorkerLease};
use crate::config::{host_name, ReconcileCmdArgs, RedisArgs, RestoreArgs};
use crate::journal::NodeInfo;
use crate::message::IdGenerator;
use crate::notify::Topics;
use crate::progress::{self, Progress};
use crate::reconcile::{self, ReconcileReport, Reconciler, Repair};
use crate::redis::schedule::RedisSchedule;
use crate::restore::{RestoreReport, RestoreStatus, Restorer};

use super::open::{connect_redis, open_journal, open_redis};

/// The command line's pages: nothing to share the machine with.
const RECONCILE_TOOL_PAGE: usize = 1_000;

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
                        "restored {}, already present {}, skipped (expired) {}, skipped (finished) {}, beyond horizon {}",
                        r.restored, r.already_present, r.skipped_expired, r.skipped_finished, r.beyond_horizon
                    )
                },
                || {
                    format!(
                        "restore: scanned {} restored {} already present {} skipped (expired) {} skipped (finished) {} beyond horizon {}",
                        r.scanned, r.restored, r.already_present, r.skipped_expired, r.skipped_finished, r.beyond_horizon
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
    crate::reshard::reshard(&redis, args.page as usize, args.split_groups).await
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
            tool.redis.inspect().record_count().await,
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

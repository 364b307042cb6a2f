//! The journal's ends over a Redis that may have lost its last writes.
//!
//! Redis can lose writes and keep its data set marker: a replica promoted
//! before it caught up (replication is asynchronous), a crash under
//! `appendfsync everysec`, an older snapshot restored by an operator. Acks
//! and cancels the journal committed seconds before would then be undone in
//! Redis, and the messages handed out again. Every such loss has a new
//! data set serve the shard: a restart (a new run id) or a promoted
//! replica (a new replication id); each shard's `{P:s}:applied` hash names
//! the data set (run id and replication id) on which the journal's ends
//! were last known applied to it, and the hand-out scripts (take.lua,
//! claim.lua) hand nothing out of a shard served by another (see
//! fence.lua).
//!
//! Every node probes each shard every [`crate::clock::PROBE`] (the same
//! call reads the shard's master's clock). A node that finds a shard
//! fenced takes the shard's fence lease and re-applies the journal's ends:
//! it walks the shard's message hash and removes every message the journal
//! says is Consumed, Deleted or Dead (purge.lua, leaving a tombstone), then
//! names the process (confirm.lua, refused if yet another process serves
//! the shard by then: it begins again). A fence costs one walk of the
//! shard's records, looked up in the journal by id, a page at a time; the
//! journal must be reachable for it (the shard hands nothing out until
//! then).
//!
//! Before the walk, every serving node writes the status changes it has
//! queued (an ack or a cancel is answered once Redis applied it, and its
//! journal row follows a few milliseconds later, seconds later on a loaded
//! machine or a slow database): the walker asks (`{P}:flush-asked`), writes
//! its own, and waits until each other node answered (`{P}:flushed`; see
//! `node::duties::answer_flush_asks`): the cluster's members as ZooKeeper
//! lists them and the nodes that said they run (`{P}:alive`). A node whose
//! journal does not answer keeps the shard fenced until it does, or until
//! it leaves. The walk also waits for a Redis that lost its data set to be
//! restored from the journal (the marker set): a restore that read a row
//! before its end was written is then walked over, and the end re-applied.
//!
//! What can still come back: an end a node applied in Redis and had not
//! written to the journal when it stopped (killed, or frozen past
//! [`crate::redis::schedule::BEHIND_FRESH_MS`]) and Redis lost it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::actors::journal::Journal;
use crate::message::MessageId;
use crate::queue::QueueError;
use crate::redis::schedule::{LeaseOp, RedisSchedule, ShardProbe};

/// Records looked up in the journal at a time.
const PAGE: usize = 1_000;
/// The fence lease: renewed after each page.
const LEASE_MS: u64 = 30_000;
/// How long one re-application waits for the nodes to write the status
/// changes they queued before it gives up (and is tried again at the next
/// probe, the shard fenced meanwhile).
const FLUSH_WAIT: Duration = Duration::from_secs(10);
/// How long a walk waits for a member ZooKeeper lists that does not say
/// it runs in Redis.
const MEMBER_WAIT: Duration = Duration::from_secs(2);
/// A shard whose re-application keeps failing is logged at most this
/// often.
const WARN_EVERY: Duration = Duration::from_secs(30);

/// Probes the shards and lifts their fences.
#[derive(Clone)]
pub struct Fence {
    pub redis: RedisSchedule,
    pub journal: Journal,
    pub node: String,
    /// Shards this process is re-applying.
    busy: Arc<Mutex<HashSet<u32>>>,
    /// When a failed re-application of each shard was last logged.
    warned: Arc<Mutex<std::collections::HashMap<u32, std::time::Instant>>>,
    /// How long the journal keeps the rows of ended messages (None:
    /// forever): a record of a message created before that which the
    /// journal no longer holds ended long ago (an older snapshot).
    retained: Option<Duration>,
    /// The cluster's members (none standalone): the nodes that must write
    /// their queued changes before a walk.
    cluster: Option<crate::cluster::ClusterHandle>,
    /// Per shard, the run it was fenced for and the ask made for it.
    asks: Arc<Mutex<std::collections::HashMap<u32, (String, i64)>>>,
}

impl Fence {
    pub fn new(redis: RedisSchedule, journal: Journal, node: &str) -> Self {
        Fence {
            redis,
            journal,
            node: node.to_string(),
            busy: Arc::default(),
            warned: Arc::default(),
            retained: None,
            cluster: None,
            asks: Arc::default(),
        }
    }

    /// The same, knowing how long the journal keeps ended messages
    /// (`--retain-finished`, `--retain-dead`; zero: forever).
    pub fn with_retention(mut self, finished: Duration, dead: Duration) -> Self {
        // A kind kept forever (zero) is never missing: nothing can be
        // told apart then.
        self.retained = (!finished.is_zero() && !dead.is_zero()).then(|| finished.min(dead));
        self
    }

    /// The same, waiting before each walk for the cluster's members to
    /// write their queued changes.
    pub fn with_cluster(mut self, cluster: crate::cluster::ClusterHandle) -> Self {
        self.cluster = Some(cluster);
        self
    }

    /// Probes every [`crate::clock::PROBE`], for ever.
    pub async fn run(self) {
        let mut every = tokio::time::interval(crate::clock::PROBE);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if let Err(e) = self.probe_once().await {
                tracing::debug!(error = %e, "cannot probe Redis's shards");
            }
        }
    }

    /// One probe: each fenced shard's re-application started (in the
    /// background) unless under way here.
    async fn probe_once(&self) -> Result<(), QueueError> {
        let probes = self.redis.probe().await?;
        let fenced: Vec<ShardProbe> = probes.into_iter().filter(ShardProbe::fenced).collect();
        crate::metrics::metrics().shards_fenced(fenced.len() as u64);
        for p in fenced {
            if !self.busy.lock().unwrap().insert(p.shard) {
                continue;
            }
            let me = self.clone();
            actix::spawn(async move {
                let shard = p.shard;
                if let Err(e) = me.reapply(&p).await {
                    // Once per shard every WARN_EVERY: it is tried again
                    // at every probe.
                    let due = {
                        let mut warned = me.warned.lock().unwrap();
                        let last = warned.get(&shard).copied();
                        let due = last.is_none_or(|t| t.elapsed() >= WARN_EVERY);
                        if due {
                            warned.insert(shard, std::time::Instant::now());
                        }
                        due
                    };
                    if due {
                        tracing::warn!(shard, error = %e,
                            "cannot re-apply the journal's ends to a fenced shard yet (it hands nothing out meanwhile); trying again at every probe");
                    } else {
                        tracing::debug!(shard, error = %e, "cannot re-apply the journal's ends yet");
                    }
                }
                me.busy.lock().unwrap().remove(&shard);
            });
        }
        Ok(())
    }

    /// Re-applies the journal's ends to one fenced shard, under its lease,
    /// and lifts the fence. Returns how many messages were removed (None:
    /// another node holds the lease).
    pub async fn reapply(&self, p: &ShardProbe) -> Result<Option<u64>, QueueError> {
        let key = self.redis.keys().fence_lock(p.shard);
        let (got, _) = self
            .redis
            .ownership()
            .lease(LeaseOp::Acquire, &key, &self.node, LEASE_MS)
            .await?;
        if !got {
            return Ok(None);
        }
        let result = self.walk(p).await;
        let _ = self
            .redis
            .ownership()
            .lease(LeaseOp::Release, &key, &self.node, LEASE_MS)
            .await;
        result.map(Some)
    }

    /// Waits until every node that runs wrote the status changes it had
    /// queued when asked: the ends it applied to the Redis that may have
    /// lost them are then in the journal, for the walk to find.
    async fn nodes_wrote_their_changes(&self, p: &ShardProbe) -> Result<(), QueueError> {
        let shard = p.shard;
        if !self.redis.ownership().has_dataset_marker().await? {
            return Err(QueueError::NotScheduled(format!(
                "shard {shard} waits for Redis's data set to be restored from the journal"
            )));
        }
        // One ask per fence: a retry after FLUSH_WAIT waits for the same
        // answers (a slow node answers the ask it read), unless the counter
        // went back (Redis lost it too).
        let remembered = self
            .asks
            .lock()
            .unwrap()
            .get(&shard)
            .filter(|(run, _)| *run == p.run)
            .map(|(_, asked)| *asked);
        let asked = match remembered {
            Some(asked) if asked <= self.redis.journal_sync().flush_ask_of(&self.node).await?.0 => {
                asked
            }
            _ => {
                let asked = self.redis.journal_sync().ask_flush().await?;
                self.asks
                    .lock()
                    .unwrap()
                    .insert(shard, (p.run.clone(), asked));
                asked
            }
        };
        let started = std::time::Instant::now();
        // This node's own, at once.
        tokio::time::timeout(FLUSH_WAIT, self.journal.written_up_to_now())
            .await
            .map_err(|_| {
                QueueError::NotScheduled(format!(
                    "this node's journal has not written the status changes it queued: shard {shard} \
                     stays fenced until it does"
                ))
            })??;
        loop {
            // A member ZooKeeper lists that has not said it runs within
            // MEMBER_WAIT is not waited for (the list may be stale); one
            // that runs says so every second, even to a Redis that
            // restarted empty.
            let mut nodes = self.redis.ownership().nodes_alive().await?;
            if let Some(cluster) = self
                .cluster
                .as_ref()
                .filter(|_| started.elapsed() < MEMBER_WAIT)
            {
                nodes.extend(cluster.view().nodes.into_iter().map(|m| m.id));
            }
            nodes.sort();
            nodes.dedup();
            nodes.retain(|n| *n != self.node);
            let answered = self.redis.journal_sync().flushed_by(&nodes).await?;
            let waiting: Vec<&String> = nodes
                .iter()
                .zip(&answered)
                .filter(|(_, &a)| a < asked)
                .map(|(n, _)| n)
                .collect();
            if waiting.is_empty() {
                return Ok(());
            }
            if started.elapsed() >= FLUSH_WAIT {
                return Err(QueueError::NotScheduled(format!(
                    "nodes {waiting:?} have not written the status changes they queued (their journal \
                     does not answer): shard {shard} stays fenced until they do or stop"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn walk(&self, p: &ShardProbe) -> Result<u64, QueueError> {
        let shard = p.shard;
        let started = std::time::Instant::now();
        // Said once per fence, not at every retry.
        let retrying = self.warned.lock().unwrap().contains_key(&shard);
        match &p.applied {
            _ if retrying => {
                tracing::debug!(shard, run = %p.run, "re-applying the journal's ends again")
            }
            Some(before) => tracing::warn!(
                shard,
                run = %p.run,
                before = %before,
                "another Redis process serves this shard (a restart or a failover): Redis may have \
                 lost its last writes; the shard hands nothing out until the journal's ends are \
                 re-applied"
            ),
            None => tracing::info!(
                shard,
                run = %p.run,
                "re-applying the journal's ends to this shard before it hands messages out"
            ),
        }
        self.nodes_wrote_their_changes(p).await?;
        let key = self.redis.keys().fence_lock(shard);
        let (mut cursor, mut walked, mut removed) = (0u64, 0u64, 0u64);
        loop {
            let (next, records) = self
                .redis
                .inspect()
                .scan_records(shard, cursor, PAGE)
                .await?;
            let ids: Vec<i64> = records.iter().map(|(id, _)| id.0).collect();
            walked += ids.len() as u64;
            if !ids.is_empty() {
                // Ended, by the journal; or created before the journal's
                // retention and no longer in it: it ended long ago (a
                // snapshot older than the retention). A newer record the
                // journal lacks stays (the journal may have lost the row:
                // the reconciler reports it as `unknown`).
                let old = self.retained.map(|r| {
                    MessageId::first_at(crate::message::now_ms() - r.as_millis() as i64).0
                });
                let states = self.journal.states_of(ids.clone()).await?;
                let known: HashSet<i64> = states.iter().map(|r| r.id).collect();
                let ended: Vec<MessageId> = states
                    .into_iter()
                    .filter(|r| r.status().is_terminal())
                    .map(|r| MessageId(r.id))
                    .chain(
                        ids.iter()
                            .filter(|id| !known.contains(id) && old.is_some_and(|o| **id < o))
                            .map(|&id| MessageId(id)),
                    )
                    .collect();
                if !ended.is_empty() {
                    let gone = self.redis.inspect().purge(&ended).await?;
                    removed += gone.iter().filter(|&&g| g).count() as u64;
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
            let (still, _) = self
                .redis
                .ownership()
                .lease(LeaseOp::Renew, &key, &self.node, LEASE_MS)
                .await?;
            if !still {
                return Err(QueueError::NotScheduled(format!(
                    "lost the fence lease of shard {shard}"
                )));
            }
        }
        if !self.redis.confirm_applied(shard, &p.run).await? {
            return Err(QueueError::NotScheduled(format!(
                "another Redis process serves shard {shard} since the re-application began"
            )));
        }
        crate::metrics::metrics().ends_reapplied(removed);
        self.warned.lock().unwrap().remove(&shard);
        tracing::warn!(
            shard,
            run = %p.run,
            walked,
            removed,
            took_ms = started.elapsed().as_millis() as u64,
            "the journal's ends are re-applied: the shard hands messages out again"
        );
        Ok(removed)
    }
}

//! A cluster node on ZooKeeper.
//!
//! Under the cluster's chroot (`--zookeeper host:port,host:port/chroot`):
//!
//! | path | kind | holds |
//! |---|---|---|
//! | `/nodes/ID` | ephemeral | a live node: [`Member`] as JSON |
//! | `/leader/_c_…-latch-N` | ephemeral sequential | the leader election (Curator-compatible lock: each contender watches its predecessor only) |
//! | `/assignment` | persistent | the leader's [`AssignmentDoc`]: shard → node |
//! | `/shards` | persistent | the cluster's shard count; a node started with another one stops |
//! | `/owners/S` | ephemeral | shard S is scanned by the node named in its data; its creation zxid is the shard's fencing epoch |
//! | `/workers/N` | ephemeral | Snowflake worker id N is leased by the node named in its data |
//!
//! One task per node runs the membership, a session at a time:
//!
//! 1. connect, make sure the paths exist, lease a worker id, register;
//! 2. contend for leadership in the background;
//! 3. every [`TICK`] (and at once on a watched change of `/assignment` or of
//!    the live nodes): confirm the worker lease with a server round trip, read
//!    the assignment, and — the leader only — recompute it when the live
//!    nodes changed, writing it with a multi-op that checks the leader's lock
//!    node still exists, so a deposed leader's write fails;
//! 4. take the shards assigned here: create `/owners/S` once the previous
//!    owner's node is gone, and start the shard's actor with the new node's
//!    czxid as its epoch (its first scan raises the epoch in Redis, fencing
//!    any older owner); let go of the shards assigned elsewhere: stop the
//!    actor (it finishes the batch under way), then delete `/owners/S`.
//!
//! Session rules (Curator's): on `Disconnected` every shard actor stops at
//! once and no id is issued, before the servers could expire the session;
//! on reconnect the owner nodes are checked to still be this session's
//! before scanning resumes (a blip shorter than the session timeout hands
//! nothing off); on `Expired` everything is dropped, a new session opens,
//! and shards come back only through the assignment.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use zookeeper_client as zk;

use crate::actors::router::{RouterActor, StartShard, StopShard};
use crate::actors::shard::Stale;
use crate::cluster::assign::{self, Assignment, Mode};
use crate::cluster::worker::{self, NODE_WORKERS};
use crate::cluster::{ClusterError, ClusterHandle, Command, Member, Permit, Session};
use crate::ids::IdGenerator;
use crate::redis::schedule::RedisSchedule;

/// How often the membership loop looks at ZooKeeper when nothing woke it.
pub const TICK: Duration = Duration::from_millis(200);

#[derive(Debug, Clone)]
pub struct Config {
    /// `host:port,host:port[/chroot]`
    pub connect: String,
    pub session_timeout: Duration,
    pub mode: Mode,
    pub shards: u32,
}

/// What `/assignment` holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssignmentDoc {
    pub leader: Option<String>,
    pub mode: Option<Mode>,
    /// Raised by every write.
    pub generation: u64,
    pub shards: Assignment,
}

fn zk_err(e: zk::Error) -> ClusterError {
    ClusterError::ZooKeeper(e.to_string())
}

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

fn ephemeral() -> zk::CreateOptions<'static> {
    zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())
}

/// Splits `hosts/chroot` into the hosts and the chroot ("" for none).
pub fn split_connect(connect: &str) -> Result<(String, String), String> {
    let (hosts, chroot) = match connect.find('/') {
        Some(i) => (&connect[..i], &connect[i..]),
        None => (connect, ""),
    };
    if hosts.is_empty()
        || hosts.split(',').any(|h| {
            h.rsplit_once(':')
                .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
        })
    {
        return Err(format!(
            "'{connect}' is not a ZooKeeper address: give host:port[,host:port...][/chroot]"
        ));
    }
    let chroot = chroot.trim_end_matches('/');
    if chroot.contains("//") {
        return Err(format!("bad chroot in '{connect}'"));
    }
    Ok((hosts.to_string(), chroot.to_string()))
}

/// Checks the configuration and starts the membership task.
#[allow(clippy::too_many_arguments)]
pub async fn start(
    cfg: Config,
    me: Member,
    redis: RedisSchedule,
    ids: Arc<IdGenerator>,
    router: Addr<RouterActor>,
    permit: Permit,
    handle: ClusterHandle,
    commands: mpsc::UnboundedReceiver<Command>,
    stale: mpsc::UnboundedReceiver<Stale>,
) -> anyhow::Result<()> {
    split_connect(&cfg.connect).map_err(anyhow::Error::msg)?;
    let node = Node {
        cfg,
        me,
        redis,
        ids,
        router,
        permit,
        handle,
    };
    actix::spawn(node.run(commands, stale));
    Ok(())
}

struct Node {
    cfg: Config,
    me: Member,
    redis: RedisSchedule,
    ids: Arc<IdGenerator>,
    router: Addr<RouterActor>,
    permit: Permit,
    handle: ClusterHandle,
}

/// How a session ended.
enum End {
    Expired,
    Shutdown(oneshot::Sender<()>),
}

type Watch = Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>;

/// What one session has done so far.
struct SessionState {
    client: zk::Client,
    worker: u16,
    /// Shards scanned here, with their epochs (owner nodes' czxid, or the
    /// epoch a takeover raised Redis's to).
    owned: BTreeMap<u32, i64>,
    /// Shards let go of whose owner node could not be deleted yet: retried
    /// every step, so a failed delete never leaves a shard nobody scans.
    releasing: BTreeSet<u32>,
    /// Paused by a disconnection: owned, but not scanning.
    paused: bool,
    assignment: AssignmentDoc,
    assignment_version: i32,
    /// Live nodes the leader last computed the assignment for.
    computed_for: Option<BTreeSet<String>>,
    members: BTreeMap<String, Member>,
    lock: Option<zk::OwnedLockClient>,
    lock_wait: Option<oneshot::Receiver<Result<zk::OwnedLockClient, zk::Error>>>,
    assignment_watch: Option<Watch>,
    nodes_watch: Option<Watch>,
    /// Owner nodes of shards assigned here that another node still holds:
    /// the shard is taken the moment that node lets go, not at the next tick.
    owner_watches: BTreeMap<u32, Watch>,
    /// Since when this node has not reached Redis.
    redis_down_since: Option<Instant>,
    /// Redis unreachable for longer than the session timeout: this node
    /// left the membership (its shards and leadership went to others) and
    /// keeps only its session, until Redis answers again.
    withdrawn: bool,
}

impl Node {
    async fn run(
        self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut stale: mpsc::UnboundedReceiver<Stale>,
    ) {
        loop {
            self.handle.update(|v| {
                v.session = Session::Connecting;
                v.leader = None;
                v.owned.clear();
                v.worker_id = None;
            });
            let client = tokio::select! {
                c = self.connect() => c,
                Some(cmd) = commands.recv() => {
                    if let Some(done) = refuse(cmd, "this node is not connected to ZooKeeper") {
                        let _ = done.send(());
                        return;
                    }
                    continue;
                }
            };
            match self.session(client, &mut commands, &mut stale).await {
                End::Expired => {
                    tracing::error!(
                        "ZooKeeper session expired; every scan stopped; opening a new session"
                    );
                    self.handle.update(|v| v.session = Session::Expired);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                End::Shutdown(done) => {
                    let _ = done.send(());
                    return;
                }
            }
        }
    }

    /// Opens a session under the chroot, retrying until the ensemble answers.
    async fn connect(&self) -> zk::Client {
        let (hosts, chroot) = split_connect(&self.cfg.connect).expect("checked at start");
        let mut backoff = Duration::from_millis(200);
        loop {
            let attempt = async {
                let client = zk::Client::connector()
                    .with_session_timeout(self.cfg.session_timeout)
                    .with_connection_timeout(Duration::from_secs(2))
                    .connect(&hosts)
                    .await?;
                if chroot.is_empty() {
                    return Ok(client);
                }
                client.mkdir(&chroot, &persistent()).await?;
                client
                    .chroot(chroot.clone())
                    .map_err(|_| zk::Error::BadArguments(&"bad chroot"))
            };
            match tokio::time::timeout(
                self.cfg.session_timeout.max(Duration::from_secs(5)),
                attempt,
            )
            .await
            {
                Ok(Ok(c)) => return c,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, zookeeper = %self.cfg.connect, "cannot open a ZooKeeper session; retrying")
                }
                Err(_) => {
                    tracing::warn!(zookeeper = %self.cfg.connect, "opening a ZooKeeper session timed out; retrying")
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }

    async fn session(
        &self,
        client: zk::Client,
        commands: &mut mpsc::UnboundedReceiver<Command>,
        stale: &mut mpsc::UnboundedReceiver<Stale>,
    ) -> End {
        let mut st = match self.join(client).await {
            Ok(st) => st,
            Err(e) => {
                tracing::warn!(error = %e, "cannot join the cluster in this session");
                return End::Expired;
            }
        };
        let mut states = st.client.state_watcher();
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if !st.paused {
                if let Err(e) = self.step(&mut st).await {
                    tracing::warn!(error = %e, "cluster step failed; retrying");
                    if matches!(e, ClusterError::ZooKeeper(ref m) if m.contains("expired")) {
                        self.stop_all(&mut st).await;
                        return End::Expired;
                    }
                }
            }
            let lock_done = async {
                match st.lock_wait.as_mut() {
                    Some(rx) => rx.await.ok(),
                    None => std::future::pending().await,
                }
            };
            let assignment_changed = async {
                match st.assignment_watch.as_mut() {
                    Some(w) => w.await,
                    None => std::future::pending().await,
                }
            };
            let nodes_changed = async {
                match st.nodes_watch.as_mut() {
                    Some(w) => w.await,
                    None => std::future::pending().await,
                }
            };
            let owner_freed = async {
                if st.owner_watches.is_empty() {
                    std::future::pending::<()>().await;
                }
                futures::future::select_all(st.owner_watches.values_mut()).await;
            };
            tokio::select! {
                state = states.changed() => match state {
                    zk::SessionState::Disconnected => {
                        // Ids stay valid until the last confirmation's deadline
                        // (a third of the session): the session cannot have
                        // expired before then, so the worker id is still ours.
                        tracing::warn!("ZooKeeper connection lost; pausing every scan until it is back");
                        self.pause(&mut st).await;
                        self.handle.update(|v| v.session = Session::Disconnected);
                    }
                    zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                        tracing::info!("ZooKeeper connection back; checking ownership before resuming");
                        self.handle.update(|v| v.session = Session::Connected);
                        // Watches may have been lost: re-arm them.
                        st.assignment_watch = None;
                        st.nodes_watch = None;
                        st.owner_watches.clear();
                        if let Err(e) = self.resume(&mut st).await {
                            tracing::warn!(error = %e, "cannot resume after reconnecting");
                        }
                    }
                    _ => {
                        self.stop_all(&mut st).await;
                        self.ids.revoke();
                        return End::Expired;
                    }
                },
                res = lock_done => {
                    st.lock_wait = None;
                    match res {
                        Some(Ok(lock)) => {
                            tracing::info!(node = %self.me.id, "elected cluster leader");
                            st.lock = Some(lock);
                            st.computed_for = None;
                        }
                        Some(Err(e)) => tracing::warn!(error = %e, "leader election failed; contending again"),
                        None => {}
                    }
                }
                _ = assignment_changed => st.assignment_watch = None,
                _ = nodes_changed => st.nodes_watch = None,
                _ = owner_freed => st.owner_watches.clear(),
                Some(s) = stale.recv() => self.on_stale(&mut st, s).await,
                Some(cmd) = commands.recv() => {
                    if let Some(done) = self.command(&mut st, cmd).await {
                        self.leave(&mut st).await;
                        return End::Shutdown(done);
                    }
                }
                _ = tick.tick() => {}
            }
        }
    }

    /// Makes the paths, leases a worker id, registers, starts contending.
    async fn join(&self, client: zk::Client) -> Result<SessionState, ClusterError> {
        for dir in ["/nodes", "/owners", "/workers", "/leader"] {
            client.mkdir(dir, &persistent()).await.map_err(zk_err)?;
        }
        match client.create("/assignment", b"{}", &persistent()).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(zk_err(e)),
        }
        // The shard count is the cluster's, for its life: a node started
        // with another one would scan shards no other node writes to.
        let count = self.cfg.shards.to_string();
        match client
            .create("/shards", count.as_bytes(), &persistent())
            .await
        {
            Ok(_) => {}
            Err(zk::Error::NodeExists) => {
                let (data, _) = client.get_data("/shards").await.map_err(zk_err)?;
                let recorded = String::from_utf8_lossy(&data).to_string();
                if recorded != count {
                    tracing::error!(
                        recorded = %recorded,
                        shards = self.cfg.shards,
                        "this cluster runs with --shards {recorded}, this node was started with --shards {count}: \
                         start it with --shards {recorded} (moving a deployment to another count: stop every node, \
                         run `delayq reshard --shards N`, and remove the cluster's /shards node in ZooKeeper); stopping"
                    );
                    std::process::exit(2);
                }
            }
            Err(e) => return Err(zk_err(e)),
        }
        let worker = self.lease_worker(&client).await?;
        self.register(&client).await?;
        let mut st = SessionState {
            client,
            worker,
            owned: BTreeMap::new(),
            releasing: BTreeSet::new(),
            paused: false,
            assignment: AssignmentDoc::default(),
            assignment_version: -1,
            computed_for: None,
            members: BTreeMap::new(),
            lock: None,
            lock_wait: None,
            assignment_watch: None,
            nodes_watch: None,
            owner_watches: BTreeMap::new(),
            redis_down_since: None,
            withdrawn: false,
        };
        self.contend(&mut st);
        let granted = st.client.session_timeout().as_millis() as u64;
        let permit = self.valid_for(&st.client).as_millis() as u64;
        self.handle.update(|v| {
            v.session = Session::Connected;
            v.worker_id = Some(worker);
            v.session_timeout_ms = Some(granted);
            v.permit_ms = Some(permit);
        });
        tracing::info!(node = %self.me.id, worker, session = ?st.client.session_id(), "joined the cluster");
        Ok(st)
    }

    /// Takes the first free `/workers/N` and reserves its milliseconds.
    async fn lease_worker(&self, client: &zk::Client) -> Result<u16, ClusterError> {
        for n in NODE_WORKERS {
            let sent = Instant::now();
            match client
                .create(
                    &format!("/workers/{n}"),
                    self.me.id.as_bytes(),
                    &ephemeral(),
                )
                .await
            {
                Ok(_) => {
                    worker::reserve_and_grant(
                        &self.redis,
                        &self.ids,
                        n,
                        true,
                        sent + self.valid_for(client),
                    )
                    .await
                    .map_err(|e| {
                        ClusterError::NotPossible(format!(
                            "cannot reserve worker {n}'s ids in Redis: {e}"
                        ))
                    })?;
                    return Ok(n);
                }
                Err(zk::Error::NodeExists) => continue,
                Err(e) => return Err(zk_err(e)),
            }
        }
        Err(ClusterError::NotPossible(
            "every worker id is leased".into(),
        ))
    }

    /// How long a confirmed session lets this node issue ids and scan: a
    /// third of the session timeout the servers granted (they clamp what
    /// was asked for to their own bounds), so the permit always lapses
    /// before the session could expire.
    fn valid_for(&self, client: &zk::Client) -> Duration {
        client.session_timeout().min(self.cfg.session_timeout) / 3
    }

    /// Registers `/nodes/ID`. A registration of the same id held by another
    /// session is never removed: it may be a live process (paused, or a
    /// second process started with the same `--node-id`), not only this
    /// node's previous run. Its session ends by itself when that process is
    /// gone; until then this node waits (for about a session timeout, then
    /// tries again in a new session) and is not ready.
    async fn register(&self, client: &zk::Client) -> Result<(), ClusterError> {
        let path = format!("/nodes/{}", self.me.id);
        let data = serde_json::to_vec(&self.me).expect("a member serializes");
        let deadline = Instant::now() + self.cfg.session_timeout + Duration::from_secs(1);
        let mut said = false;
        loop {
            match client.create(&path, &data, &ephemeral()).await {
                Ok(_) => return Ok(()),
                Err(zk::Error::NodeExists) => {
                    match client.check_stat(&path).await.map_err(zk_err)? {
                        Some(stat) if stat.ephemeral_owner != client.session_id().0 => {
                            if !said {
                                tracing::warn!(
                                    node = %self.me.id,
                                    session = format!("{:#x}", stat.ephemeral_owner),
                                    "another session holds this node id's registration (a previous run not yet expired, \
                                     or another process with the same --node-id); waiting for it to end"
                                );
                                said = true;
                            }
                            if Instant::now() >= deadline {
                                return Err(ClusterError::NotPossible(format!(
                                    "node id {} is registered by another live session",
                                    self.me.id
                                )));
                            }
                            tokio::time::sleep(Duration::from_millis(250)).await;
                        }
                        Some(_) => return Ok(()),
                        None => {}
                    }
                }
                Err(e) => return Err(zk_err(e)),
            }
        }
    }

    fn contend(&self, st: &mut SessionState) {
        let (tx, rx) = oneshot::channel();
        let client = st.client.clone();
        let data = self.me.id.clone().into_bytes();
        actix::spawn(async move {
            let options = match zk::LockOptions::new(zk::Acls::anyone_all())
                .with_ancestor_options(persistent())
            {
                Ok(o) => o,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let prefix =
                zk::LockPrefix::new_curator("/leader", "latch-").expect("a valid lock prefix");
            let res = client
                .lock(prefix, &data, options)
                .await
                .map(|l| l.into_owned());
            let _ = tx.send(res);
        });
        st.lock_wait = Some(rx);
    }

    /// A node that reaches ZooKeeper but not Redis scans nothing, yet its
    /// owner nodes would keep every other node from its shards: once Redis
    /// has not answered for the session timeout, the node leaves the
    /// membership (stops its scans, deletes its owner nodes and its
    /// registration, gives up the leadership), so the leader hands its
    /// shards to nodes that can scan them. It comes back when Redis
    /// answers again. Returns whether the node is withdrawn now.
    async fn watch_redis(&self, st: &mut SessionState) -> Result<bool, ClusterError> {
        let answers = matches!(
            tokio::time::timeout(Duration::from_secs(1), self.redis.ping()).await,
            Ok(Ok(()))
        );
        if answers {
            st.redis_down_since = None;
            if st.withdrawn {
                tracing::warn!("Redis answers again; rejoining the cluster");
                self.register(&st.client).await?;
                self.contend(st);
                st.withdrawn = false;
                st.nodes_watch = None;
                st.assignment_watch = None;
            }
            return Ok(false);
        }
        let since = *st.redis_down_since.get_or_insert_with(Instant::now);
        if !st.withdrawn && since.elapsed() >= self.cfg.session_timeout {
            tracing::error!(
                down_ms = since.elapsed().as_millis() as u64,
                "Redis has not answered for the session timeout; leaving the cluster's membership \
                 so other nodes scan this node's shards"
            );
            self.let_go_of_all(st).await;
            st.lock_wait = None;
            match st
                .client
                .delete(&format!("/nodes/{}", self.me.id), None)
                .await
            {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(zk_err(e)),
            }
            st.withdrawn = true;
            self.handle.update(|v| {
                v.owned.clear();
                v.leader = None;
            });
        } else if st.withdrawn {
            for shard in std::mem::take(&mut st.releasing) {
                if self.delete_owner(st, shard).await.is_err() {
                    st.releasing.insert(shard);
                }
            }
        }
        Ok(st.withdrawn)
    }

    /// One look at the cluster: confirm the lease, read the assignment and
    /// the members, (leader) recompute, then take and release shards.
    async fn step(&self, st: &mut SessionState) -> Result<(), ClusterError> {
        if self.watch_redis(st).await? {
            return Ok(());
        }
        // The worker lease, confirmed by a server round trip.
        let sent = Instant::now();
        match st
            .client
            .check_stat(&format!("/workers/{}", st.worker))
            .await
        {
            Ok(Some(stat)) if stat.ephemeral_owner == st.client.session_id().0 => {
                let valid_for = self.valid_for(&st.client);
                self.permit.extend(sent + valid_for);
                if self.ids.worker() != Some(st.worker) {
                    worker::reserve_and_grant(
                        &self.redis,
                        &self.ids,
                        st.worker,
                        true,
                        sent + valid_for,
                    )
                    .await
                    .map_err(|e| ClusterError::NotPossible(e.to_string()))?;
                } else if let Err(e) = worker::reserve_and_grant(
                    &self.redis,
                    &self.ids,
                    st.worker,
                    false,
                    sent + valid_for,
                )
                .await
                {
                    tracing::warn!(error = %e, "cannot reserve ids ahead in Redis");
                }
            }
            Ok(_) => {
                self.ids.revoke();
                return Err(ClusterError::ZooKeeper(
                    "the worker id lease is gone: session expired".into(),
                ));
            }
            Err(zk::Error::SessionExpired) => {
                return Err(ClusterError::ZooKeeper("session expired".into()))
            }
            Err(e) => return Err(zk_err(e)),
        }

        self.read_members(st).await?;
        self.read_assignment(st).await?;
        if st.lock.is_some() {
            self.lead(st).await?;
        }
        self.reconcile(st).await?;
        let owned: Vec<(u32, i64)> = st.owned.iter().map(|(s, e)| (*s, *e)).collect();
        let members: Vec<Member> = st.members.values().cloned().collect();
        let doc = st.assignment.clone();
        self.handle.update(|v| {
            v.owned = owned;
            v.nodes = members;
            v.leader = doc.leader.clone();
            v.assignment = doc.shards.clone();
            v.assignment.resize(self.cfg.shards as usize, None);
        });
        Ok(())
    }

    async fn read_members(&self, st: &mut SessionState) -> Result<(), ClusterError> {
        let names = if st.nodes_watch.is_none() {
            let (names, _, watch) = st
                .client
                .get_and_watch_children("/nodes")
                .await
                .map_err(zk_err)?;
            st.nodes_watch = Some(Box::pin(watch.changed()));
            names
        } else if st.members.is_empty() {
            st.client.list_children("/nodes").await.map_err(zk_err)?
        } else {
            return Ok(());
        };
        let mut members = BTreeMap::new();
        for name in names {
            if let Some(m) = st.members.get(&name) {
                members.insert(name, m.clone());
                continue;
            }
            match st.client.get_data(&format!("/nodes/{name}")).await {
                Ok((data, _)) => {
                    if let Ok(m) = serde_json::from_slice::<Member>(&data) {
                        members.insert(name, m);
                    }
                }
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(zk_err(e)),
            }
        }
        st.members = members;
        Ok(())
    }

    async fn read_assignment(&self, st: &mut SessionState) -> Result<(), ClusterError> {
        if st.assignment_watch.is_some() && st.assignment_version >= 0 {
            return Ok(());
        }
        let (data, stat, watch) = st
            .client
            .get_and_watch_data("/assignment")
            .await
            .map_err(zk_err)?;
        st.assignment_watch = Some(Box::pin(watch.changed()));
        st.assignment = serde_json::from_slice(&data).unwrap_or_default();
        st.assignment_version = stat.version;
        Ok(())
    }

    /// The leader's duty: a new assignment when the live nodes changed (or
    /// the stored one names nodes that are gone, or another mode).
    async fn lead(&self, st: &mut SessionState) -> Result<(), ClusterError> {
        let live: BTreeSet<String> = st.members.keys().cloned().collect();
        let mut current = st.assignment.shards.clone();
        current.resize(self.cfg.shards as usize, None);
        let stale_doc = st.assignment.leader.as_deref() != Some(self.me.id.as_str())
            || st.assignment.mode != Some(self.cfg.mode)
            || current
                .iter()
                .any(|o| o.as_ref().is_none_or(|o| !live.contains(o)));
        if !stale_doc && st.computed_for.as_ref() == Some(&live) {
            return Ok(());
        }
        let live_list: Vec<String> = live.iter().cloned().collect();
        let next = assign::assign(
            self.cfg.mode,
            &live_list,
            &self.me.id,
            self.cfg.shards,
            &current,
        );
        if next != current || stale_doc {
            tracing::info!(moves = assign::moves(&current, &next), nodes = ?live_list, "leader writes a new shard assignment");
            self.write_assignment(st, next).await?;
        }
        st.computed_for = Some(live);
        Ok(())
    }

    /// Writes the assignment if nobody changed it since it was read; as the
    /// leader, only while its lock node exists.
    async fn write_assignment(
        &self,
        st: &mut SessionState,
        shards: Assignment,
    ) -> Result<(), ClusterError> {
        let doc = AssignmentDoc {
            leader: if st.lock.is_some() {
                Some(self.me.id.clone())
            } else {
                st.assignment.leader.clone()
            },
            mode: Some(self.cfg.mode),
            generation: st.assignment.generation + 1,
            shards,
        };
        let data = serde_json::to_vec(&doc).expect("an assignment serializes");
        let version = Some(st.assignment_version);
        let written = match &st.lock {
            Some(lock) => lock.set_data("/assignment", &data, version).await,
            None => st.client.set_data("/assignment", &data, version).await,
        };
        match written {
            Ok(stat) => {
                st.assignment = doc;
                st.assignment_version = stat.version;
                Ok(())
            }
            Err(zk::Error::BadVersion) => {
                // Changed meanwhile: read again next time.
                st.assignment_watch = None;
                st.assignment_version = -1;
                Err(ClusterError::NotPossible(
                    "the assignment changed meanwhile; try again".into(),
                ))
            }
            Err(zk::Error::RuntimeInconsistent) => {
                tracing::error!(
                    "lost the leadership while writing the assignment; contending again"
                );
                st.lock = None;
                self.contend(st);
                Err(ClusterError::NotPossible(
                    "this node is no longer the leader".into(),
                ))
            }
            Err(e) => Err(zk_err(e)),
        }
    }

    /// Takes the shards assigned here, lets go of the others.
    async fn reconcile(&self, st: &mut SessionState) -> Result<(), ClusterError> {
        let mine: BTreeSet<u32> = st
            .assignment
            .shards
            .iter()
            .enumerate()
            .filter(|(_, o)| o.as_deref() == Some(self.me.id.as_str()))
            .map(|(s, _)| s as u32)
            .filter(|s| *s < self.cfg.shards)
            .collect();
        let letting_go: Vec<u32> = st
            .owned
            .keys()
            .copied()
            .filter(|s| !mine.contains(s))
            .collect();
        for shard in letting_go {
            // The actor finishes its batch and stops before the owner node
            // goes, so the next owner starts only after this one stopped.
            let _ = self.router.send(StopShard { shard }).await;
            st.owned.remove(&shard);
            st.releasing.insert(shard);
        }
        // Owner nodes of shards let go of: deleted now, or, when the delete
        // fails, at the next step (the shard is not scanned here meanwhile,
        // and nobody else can take it until its node is gone).
        let mut first_error = None;
        for shard in std::mem::take(&mut st.releasing) {
            if mine.contains(&shard) {
                continue;
            }
            let deleted = if crate::faults::once("zk_delete_owner_fails") {
                Err(ClusterError::ZooKeeper(
                    "injected fault: delete failed".into(),
                ))
            } else {
                self.delete_owner(st, shard).await
            };
            match deleted {
                Ok(()) => tracing::info!(shard, "handed the shard off"),
                Err(e) => {
                    tracing::warn!(shard, error = %e, "cannot delete the shard's owner node; trying again");
                    st.releasing.insert(shard);
                    first_error.get_or_insert(e);
                }
            }
        }
        for shard in mine {
            if st.owned.contains_key(&shard) {
                continue;
            }
            if let Some(epoch) = self.take(st, shard).await? {
                st.owned.insert(shard, epoch);
                self.router.do_send(StartShard { shard, epoch });
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Creates `/owners/S` if no other live session holds it; its czxid is
    /// the epoch.
    async fn take(&self, st: &mut SessionState, shard: u32) -> Result<Option<i64>, ClusterError> {
        let path = format!("/owners/{shard}");
        match st
            .client
            .create(&path, self.me.id.as_bytes(), &ephemeral())
            .await
        {
            Ok((stat, _)) => {
                let epoch = if stat.czxid > 0 {
                    stat.czxid
                } else {
                    match st.client.check_stat(&path).await.map_err(zk_err)? {
                        Some(s) => s.czxid,
                        None => return Ok(None),
                    }
                };
                Ok(Some(epoch))
            }
            Err(zk::Error::NodeExists) => {
                let (data, stat, watch) = match st.client.get_and_watch_data(&path).await {
                    Ok(d) => d,
                    Err(zk::Error::NoNode) => return Ok(None),
                    Err(e) => return Err(zk_err(e)),
                };
                st.owner_watches.insert(shard, Box::pin(watch.changed()));
                if stat.ephemeral_owner == st.client.session_id().0 {
                    return Ok(Some(stat.czxid));
                }
                // Another session holds it (even one that names this node
                // id: a previous run not yet expired, or a live process
                // paused): wait for it to let go or for its session to end.
                let _ = data;
                Ok(None)
            }
            Err(e) => Err(zk_err(e)),
        }
    }

    async fn delete_owner(&self, st: &SessionState, shard: u32) -> Result<(), ClusterError> {
        let path = format!("/owners/{shard}");
        match st.client.check_stat(&path).await.map_err(zk_err)? {
            Some(stat) if stat.ephemeral_owner == st.client.session_id().0 => {
                match st.client.delete(&path, Some(stat.version)).await {
                    Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                    Err(e) => Err(zk_err(e)),
                }
            }
            _ => Ok(()),
        }
    }

    /// Disconnected: stop scanning at once; ownership is kept for now.
    async fn pause(&self, st: &mut SessionState) {
        self.permit.revoke();
        st.paused = true;
        for &shard in st.owned.keys() {
            let _ = self.router.send(StopShard { shard }).await;
        }
        self.handle.update(|v| v.owned.clear());
    }

    /// Reconnected within the session: resume the shards whose owner nodes
    /// are still this session's.
    async fn resume(&self, st: &mut SessionState) -> Result<(), ClusterError> {
        if !st.paused {
            return Ok(());
        }
        let owned = std::mem::take(&mut st.owned);
        for (shard, epoch) in owned {
            match st
                .client
                .check_stat(&format!("/owners/{shard}"))
                .await
                .map_err(zk_err)?
            {
                Some(stat)
                    if stat.ephemeral_owner == st.client.session_id().0 && stat.czxid == epoch =>
                {
                    st.owned.insert(shard, epoch);
                    self.router.do_send(StartShard { shard, epoch });
                }
                _ => tracing::warn!(
                    shard,
                    "the shard's owner node is no longer this session's; not resuming it"
                ),
            }
        }
        st.paused = false;
        Ok(())
    }

    async fn stop_all(&self, st: &mut SessionState) {
        self.permit.revoke();
        for shard in std::mem::take(&mut st.owned).into_keys() {
            let _ = self.router.send(StopShard { shard }).await;
        }
        self.handle.update(|v| v.owned.clear());
    }

    /// Redis refused a scan: it holds a higher epoch than this owner's.
    /// Either another node scanned the shard after this one took it (then
    /// ZooKeeper no longer says this session owns it, and the shard is let
    /// go), or ZooKeeper itself was rebuilt or restored from an older
    /// snapshot, so its zxids (the epochs) start again below what Redis
    /// keeps. In that case this session holds the shard's owner node, and
    /// takes the shard past the stored epoch in one fenced step: with a
    /// permit freshly confirmed by the round trip that read the owner node,
    /// it raises the epoch to the stored one + 1 only if the stored one is
    /// still the one it was refused by (takeover.lua). A paused old owner
    /// cannot do the same: its permit has lapsed, and its session no longer
    /// holds the owner node.
    async fn on_stale(&self, st: &mut SessionState, s: Stale) {
        if st.owned.get(&s.shard) != Some(&s.epoch) {
            return;
        }
        st.owned.remove(&s.shard);
        let path = format!("/owners/{}", s.shard);
        let sent = Instant::now();
        let ours = match st.client.check_stat(&path).await {
            Ok(Some(stat)) => stat.ephemeral_owner == st.client.session_id().0,
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(error = %e, shard = s.shard, "cannot read the shard's owner node; trying again");
                return;
            }
        };
        if !ours {
            if crate::cluster::health::may_log(s.shard, "let-go").is_some() {
                tracing::error!(
                    shard = s.shard,
                    epoch = s.epoch,
                    stored = s.stored,
                    "another owner raised the shard's epoch; letting the shard go"
                );
            }
            if let Err(e) = self.delete_owner(st, s.shard).await {
                tracing::warn!(error = %e, shard = s.shard, "cannot delete the owner node");
            }
            return;
        }
        self.permit.extend(sent + self.valid_for(&st.client));
        if !self.permit.valid() {
            return;
        }
        let next = s.stored.saturating_add(1);
        match self.redis.take_over(s.shard, s.stored, next).await {
            Ok(true) => {
                tracing::warn!(
                    shard = s.shard,
                    owner_epoch = s.epoch,
                    stored = s.stored,
                    epoch = next,
                    "ZooKeeper says this node owns the shard but its epoch is below Redis's \
                     (the ensemble was rebuilt or restored); took the shard past the stored epoch"
                );
                st.owned.insert(s.shard, next);
                self.router.do_send(StartShard {
                    shard: s.shard,
                    epoch: next,
                });
            }
            Ok(false) => {
                if crate::cluster::health::may_log(s.shard, "takeover").is_some() {
                    tracing::warn!(
                        shard = s.shard,
                        stored = s.stored,
                        "the shard's epoch moved during a takeover; trying again"
                    );
                }
            }
            Err(e) => {
                if crate::cluster::health::may_log(s.shard, "takeover").is_some() {
                    tracing::warn!(shard = s.shard, error = %e, "cannot take the shard past the stored epoch; trying again");
                }
            }
        }
    }

    /// Carries out an operator's command; returns the shutdown reply when
    /// the node is stopping.
    async fn command(&self, st: &mut SessionState, cmd: Command) -> Option<oneshot::Sender<()>> {
        match cmd {
            Command::Shutdown(done) => return Some(done),
            Command::Rebalance(reply) => {
                let res = self.rebalance(st).await;
                let _ = reply.send(res);
            }
            Command::Move { shard, to, reply } => {
                let res = self.move_shard(st, shard, &to).await;
                let _ = reply.send(res);
            }
        }
        None
    }

    async fn fresh_assignment(&self, st: &mut SessionState) -> Result<Assignment, ClusterError> {
        st.assignment_watch = None;
        st.assignment_version = -1;
        self.read_assignment(st).await?;
        st.nodes_watch = None;
        self.read_members(st).await?;
        let mut current = st.assignment.shards.clone();
        current.resize(self.cfg.shards as usize, None);
        Ok(current)
    }

    async fn rebalance(&self, st: &mut SessionState) -> Result<Assignment, ClusterError> {
        let current = self.fresh_assignment(st).await?;
        let live: Vec<String> = st.members.keys().cloned().collect();
        let leader = st
            .assignment
            .leader
            .clone()
            .unwrap_or_else(|| self.me.id.clone());
        let next = assign::assign(self.cfg.mode, &live, &leader, self.cfg.shards, &current);
        if next != current {
            tracing::info!(
                moves = assign::moves(&current, &next),
                "rebalancing on an operator's request"
            );
            self.write_assignment(st, next.clone()).await?;
        }
        Ok(next)
    }

    async fn move_shard(
        &self,
        st: &mut SessionState,
        shard: u32,
        to: &str,
    ) -> Result<Assignment, ClusterError> {
        if shard >= self.cfg.shards {
            return Err(ClusterError::NoSuchShard(shard));
        }
        if self.cfg.mode == Mode::ActiveStandby {
            return Err(ClusterError::NotPossible(
                "in active-standby mode the leader scans every shard; shards move with the leadership".into(),
            ));
        }
        let current = self.fresh_assignment(st).await?;
        if !st.members.contains_key(to) {
            return Err(ClusterError::NoSuchNode(to.to_string()));
        }
        let next = assign::move_shard(&current, shard, to);
        if next != current {
            tracing::info!(shard, to, "moving a shard on an operator's request");
            self.write_assignment(st, next.clone()).await?;
        }
        Ok(next)
    }

    /// Stops every scan, deletes this session's owner nodes (one whose
    /// delete fails stays in `releasing`, tried again later) and gives up
    /// the leadership.
    async fn let_go_of_all(&self, st: &mut SessionState) {
        let owned: Vec<u32> = st
            .owned
            .keys()
            .copied()
            .chain(std::mem::take(&mut st.releasing))
            .collect();
        self.stop_all(st).await;
        for shard in owned {
            if let Err(e) = self.delete_owner(st, shard).await {
                st.releasing.insert(shard);
                tracing::warn!(shard, error = %e, "cannot delete the owner node; trying again");
            }
        }
        st.lock = None;
    }

    /// Clean shutdown: stop the scans, free the owner nodes, leave.
    async fn leave(&self, st: &mut SessionState) {
        self.let_go_of_all(st).await;
        let _ = st
            .client
            .delete(&format!("/nodes/{}", self.me.id), None)
            .await;
    }
}

/// Answers a command while there is no session; the shutdown reply when the
/// node is stopping.
fn refuse(cmd: Command, why: &str) -> Option<oneshot::Sender<()>> {
    match cmd {
        Command::Shutdown(done) => Some(done),
        Command::Rebalance(reply) => {
            let _ = reply.send(Err(ClusterError::NotPossible(why.into())));
            None
        }
        Command::Move { reply, .. } => {
            let _ = reply.send(Err(ClusterError::NotPossible(why.into())));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_strings() {
        assert_eq!(
            split_connect("127.0.0.1:2181,h:2182/delayq/prod"),
            Ok(("127.0.0.1:2181,h:2182".into(), "/delayq/prod".into()))
        );
        assert_eq!(split_connect("h:1"), Ok(("h:1".into(), "".into())));
        assert_eq!(split_connect("h:1/"), Ok(("h:1".into(), "".into())));
        for bad in ["", "h", "h:x", ":1/a", "h:1//a"] {
            assert!(split_connect(bad).is_err(), "{bad}");
        }
    }
}

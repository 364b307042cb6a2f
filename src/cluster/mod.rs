//! The cluster: which node scans which shard.
//!
//! Ownership is an event source: the membership side decides that this node
//! owns shard `s` with epoch `e` (or no longer does), and tells the
//! [`RouterActor`](crate::actors::router::RouterActor), which starts or stops that shard's `ZsetShardActor`.
//!
//! - [`zk`]: a cluster node. ZooKeeper registers the live nodes, elects a
//!   leader, stores the leader's assignment, and makes shard ownership
//!   exclusive with one ephemeral owner node per shard, whose creation zxid
//!   is the shard's fencing epoch.
//! - [`standalone`]: no ZooKeeper. The node owns every shard while it holds
//!   the standalone lease in Redis, so a second standalone node on the same
//!   key prefix is refused instead of fighting over the shards.
//! - [`assign`]: the assignment rule, a pure function.
//! - [`worker`]: Snowflake worker-id leases.
//!
//! [`ClusterHandle`] is what the rest of the node sees: a snapshot of the
//! cluster for `GET /admin/cluster` and `/ready`, whether this node leads,
//! and the rebalance and move commands.

pub mod assign;
pub mod sizes;
pub mod standalone;
pub mod worker;
pub mod zk;

use std::sync::{Arc, RwLock};

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::cluster::assign::Assignment;

pub use crate::actors::permit::Permit;

/// A node as it registers itself, and this node's standing in the cluster:
/// the shapes `GET /admin/cluster` shows them in.
pub use delayq_proto::{Member, Session};

/// What the node knows of the cluster right now.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    /// `standalone`, `active-standby` or `multi-active`.
    pub mode: &'static str,
    pub node_id: String,
    pub session: Session,
    pub leader: Option<String>,
    /// Live nodes (registered with a live session).
    pub nodes: Vec<Member>,
    /// The leader's assignment: shard → node.
    pub assignment: Assignment,
    /// The shards this node scans now, with their epochs.
    pub owned: Vec<(u32, i64)>,
    pub worker_id: Option<u16>,
    /// The session timeout the ZooKeeper servers granted (they clamp what
    /// was asked for to their own bounds); none standalone.
    pub session_timeout_ms: Option<u64>,
    /// How long a confirmed session lets this node scan and issue ids: a
    /// third of the granted timeout, so it lapses before the session can
    /// expire.
    pub permit_ms: Option<u64>,
}

impl View {
    pub fn new(mode: &'static str, node_id: &str, shards: u32) -> View {
        View {
            mode,
            node_id: node_id.to_string(),
            session: Session::Connecting,
            leader: None,
            nodes: Vec::new(),
            assignment: vec![None; shards as usize],
            owned: Vec::new(),
            worker_id: None,
            session_timeout_ms: None,
            permit_ms: None,
        }
    }

    pub fn is_leader(&self) -> bool {
        self.leader.as_deref() == Some(self.node_id.as_str())
    }

    /// A member in good standing: its session is live (or it is standalone
    /// and holds its lease) and it has a worker id.
    pub fn in_good_standing(&self) -> bool {
        matches!(self.session, Session::Connected | Session::Standalone) && self.worker_id.is_some()
    }
}

/// An operator's command, carried out by the membership task.
pub enum Command {
    /// Spread the shards evenly over the live nodes.
    Rebalance(oneshot::Sender<Result<Assignment, ClusterError>>),
    /// Move one shard to a node.
    Move {
        shard: u32,
        to: String,
        reply: oneshot::Sender<Result<Assignment, ClusterError>>,
    },
    /// The node is stopping: stop every scan, let go of every shard and
    /// lease, then answer.
    Shutdown(oneshot::Sender<()>),
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("{0}")]
    NotPossible(String),
    #[error("no such node: {0}")]
    NoSuchNode(String),
    #[error("no such shard: {0}")]
    NoSuchShard(u32),
    #[error("ZooKeeper: {0}")]
    ZooKeeper(String),
    #[error("the cluster module has stopped")]
    Stopped,
}

/// The node's handle on the cluster module.
#[derive(Clone)]
pub struct ClusterHandle {
    view: Arc<RwLock<View>>,
    commands: mpsc::UnboundedSender<Command>,
}

impl ClusterHandle {
    pub fn new(view: View) -> (ClusterHandle, mpsc::UnboundedReceiver<Command>) {
        let (commands, rx) = mpsc::unbounded_channel();
        (
            ClusterHandle {
                view: Arc::new(RwLock::new(view)),
                commands,
            },
            rx,
        )
    }

    pub fn view(&self) -> View {
        self.view.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn update(&self, f: impl FnOnce(&mut View)) {
        f(&mut self.view.write().unwrap_or_else(|p| p.into_inner()));
    }

    pub fn is_leader(&self) -> bool {
        self.view
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_leader()
    }

    async fn ask(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<Assignment, ClusterError>>) -> Command,
    ) -> Result<Assignment, ClusterError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(make(tx))
            .map_err(|_| ClusterError::Stopped)?;
        rx.await.map_err(|_| ClusterError::Stopped)?
    }

    pub async fn rebalance(&self) -> Result<Assignment, ClusterError> {
        self.ask(Command::Rebalance).await
    }

    /// Stops every scan and lets go of the shards (clean shutdown).
    pub async fn shutdown(&self) {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Command::Shutdown(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    pub async fn move_shard(&self, shard: u32, to: String) -> Result<Assignment, ClusterError> {
        self.ask(|reply| Command::Move { shard, to, reply }).await
    }
}

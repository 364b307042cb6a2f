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
//!
//! [`session`] runs the sessions, [`membership`] joins the cluster,
//! [`leadership`] elects the leader and keeps the assignment, [`shards`]
//! takes and lets go of shards.

mod leadership;
mod membership;
mod session;
mod shards;

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

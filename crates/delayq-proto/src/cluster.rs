//! The cluster as `GET /admin/cluster` shows it (its clock is in
//! `clock.rs`), and the leader's assignment that shard moves answer with.

use serde::{Deserialize, Serialize};

use crate::clock::ClockView;

/// A node as it registers itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Member {
    pub id: String,
    /// Where its HTTP API answers.
    pub address: String,
    pub start_time: i64,
    pub version: String,
}

/// This node's standing in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Session {
    /// Not started yet, or between sessions.
    Connecting,
    Connected,
    /// The connection is lost; the session may still be alive on the
    /// servers. Scanning is paused.
    Disconnected,
    /// The session ended; a new one is being opened.
    Expired,
    /// No ZooKeeper: this node is the cluster.
    Standalone,
}

impl Session {
    /// The name `/cluster` and `/metrics` show.
    pub fn name(self) -> &'static str {
        match self {
            Session::Connecting => "connecting",
            Session::Connected => "connected",
            Session::Disconnected => "disconnected",
            Session::Expired => "expired",
            Session::Standalone => "standalone",
        }
    }
}

/// One shard in `GET /admin/cluster`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ShardView {
    pub shard: usize,
    /// The node the leader assigned it to.
    pub owner: Option<String>,
    pub scanning_here: bool,
    /// The epoch this node scans it under, when it does.
    pub owner_epoch: Option<i64>,
    /// The fencing epoch stored in Redis (0: none yet).
    pub epoch: i64,
    pub delaying: i64,
    pub ready: i64,
    pub in_flight: i64,
    /// Due time of the earliest scheduled message, when already due.
    pub oldest_overdue: Option<i64>,
}

/// `GET /admin/cluster`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ClusterReply {
    pub mode: String,
    pub node: String,
    pub session: Session,
    pub leader: Option<String>,
    pub in_good_standing: bool,
    pub worker_id: Option<u16>,
    /// The ZooKeeper session timeout the servers granted (ms); null
    /// standalone.
    pub session_timeout_ms: Option<u64>,
    /// How long a confirmed session lets this node scan (ms): a third of
    /// the granted timeout.
    pub permit_ms: Option<u64>,
    pub nodes: Vec<Member>,
    pub shards: Vec<ShardView>,
    /// This node's wall clock against the cluster's (Redis's).
    pub clock: ClockView,
}

/// The leader's assignment: per shard, its node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct AssignmentReply {
    pub assignment: Vec<Option<String>>,
}

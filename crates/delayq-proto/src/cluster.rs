//! The cluster's members as `GET /admin/cluster` shows them.

use serde::{Deserialize, Serialize};

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

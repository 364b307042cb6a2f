//! Liveness and readiness: `GET /health` and `GET /ready`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct HealthReply {
    #[cfg_attr(feature = "utoipa", schema(example = "ok"))]
    pub status: String,
    /// The version of delayq this node runs.
    #[cfg_attr(feature = "utoipa", schema(example = "0.1.0"))]
    pub version: String,
    /// The git revision it was built from (`unknown` without git).
    #[cfg_attr(feature = "utoipa", schema(example = "0c76ed1c7286"))]
    pub revision: String,
}

/// `GET /ready`: each dependency, `ok` or what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReadyReply {
    pub redis: String,
    pub journal: String,
    pub cluster: String,
    /// `standalone`, `active-standby` or `multi-active`.
    pub mode: String,
    pub leader: Option<String>,
    /// Shards this node scans.
    pub scanning: usize,
    /// Owned shards whose scans keep failing (`ok` when none): nothing of
    /// theirs is delivered.
    pub shards: String,
    /// `ok`, or how long this process did not run when it has just resumed
    /// from a stall (it refuses requests meanwhile; see the book's
    /// operating chapter, "A frozen node").
    pub process: String,
    /// Redis's `maxmemory-policy`; null when its CONFIG command is disabled.
    pub redis_maxmemory_policy: Option<String>,
    pub warnings: Vec<String>,
}

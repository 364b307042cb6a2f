//! The clock as `GET /admin/cluster` shows it.

use serde::{Deserialize, Serialize};

/// One master's clock, as `GET /admin/cluster` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MasterClock {
    /// The master's run id and replication id, `RUN/REPLID` (empty for a
    /// plain reading of one Redis).
    pub master: String,
    /// The shards it answered for last.
    pub shards: Vec<u32>,
    /// Its clock minus this node's wall clock (ms).
    pub offset_ms: i64,
    /// Its clock minus the latest master's (ms, 0 or less): how much
    /// later than its shards' own a due time computed without a shard
    /// (`now_ms`) comes out on it.
    pub behind_latest_ms: i64,
}

/// What `GET /admin/cluster` shows of the clock.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ClockView {
    /// Redis's clock minus this node's wall clock (ms), the largest in
    /// size over the masters; null before the first reading.
    pub offset_ms: Option<i64>,
    /// Whether that is beyond the bound.
    pub skewed: bool,
    pub bound_ms: i64,
    /// The cluster's clock as this node estimates it (epoch ms; the
    /// latest master's).
    pub now: i64,
    /// Each master's clock.
    pub masters: Vec<MasterClock>,
}

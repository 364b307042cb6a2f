//! Topics as `GET /topics` lists them, and the answers to pausing and
//! resuming one.

use serde::{Deserialize, Serialize};

use crate::message::Status;

/// A topic's messages by status (from the journal, a few seconds old at
/// most).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TopicCounts {
    /// Due beyond the Redis horizon, kept in the journal until they come near.
    pub waiting: i64,
    pub delaying: i64,
    pub ready: i64,
    pub in_flight: i64,
    pub dead: i64,
    /// Finished and kept until `--retain-finished` removes them.
    #[serde(default)]
    pub consumed: i64,
    /// Cancelled and kept until `--retain-finished` removes them.
    #[serde(default)]
    pub deleted: i64,
}

impl TopicCounts {
    /// The count of messages in `status` (none for `Unknown`).
    pub fn of_mut(&mut self, status: Status) -> Option<&mut i64> {
        Some(match status {
            Status::WaitPut => &mut self.waiting,
            Status::Delaying => &mut self.delaying,
            Status::Ready => &mut self.ready,
            Status::Consuming => &mut self.in_flight,
            Status::Dead => &mut self.dead,
            Status::Consumed => &mut self.consumed,
            Status::Deleted => &mut self.deleted,
            Status::Unknown => return None,
        })
    }

    /// The count of messages in `status` (0 for `Unknown`).
    pub fn of(mut self, status: Status) -> i64 {
        self.of_mut(status).map_or(0, |n| *n)
    }
}

/// One topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TopicView {
    pub topic: String,
    pub counts: TopicCounts,
    /// Nothing of the topic is handed out or forwarded while it is paused.
    pub paused: bool,
    /// When it was paused (epoch ms), while it is.
    pub paused_at: Option<i64>,
    /// Most messages handed out a second (`--topic-limit`), if limited.
    #[serde(default)]
    pub limit_per_second: Option<u32>,
    /// Most messages of it handed out and not yet acked at once
    /// (`--topic-limit TOPIC=…,concurrency=M`), if capped.
    #[serde(default)]
    pub limit_concurrency: Option<u32>,
    /// The due time (epoch ms) of its oldest message waiting ready, if any.
    pub oldest_ready_due_time: Option<i64>,
    /// How long that message has waited past its due time (ms).
    pub overdue_ms: Option<i64>,
    /// Its ordered groups with a message due or handed out; absent when
    /// it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<GroupCounts>,
}

/// A topic's ordered groups, as Redis holds them now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct GroupCounts {
    /// Groups holding their turn: one message of each is ready, handed
    /// out, or waiting for its retry after a failed delivery.
    pub active: i64,
    /// Of those, the groups with due messages waiting behind that one.
    pub waiting: i64,
    /// Due messages waiting behind their group's message (counted as
    /// ready in `counts`).
    pub held: i64,
}

/// `GET /topics`: every topic with messages in the journal (live, dead,
/// or finished within retention), paused or limited, in name order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TopicList {
    pub topics: Vec<TopicView>,
    /// The journal's counts were cut at their limit: some topics may be
    /// missing.
    pub cut: bool,
}

/// `POST /topics/{topic}/pause` and `/resume`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PauseState {
    pub topic: String,
    pub paused: bool,
    /// When it was paused (epoch ms): the first pause's time when it was
    /// paused already; null once resumed.
    pub paused_at: Option<i64>,
    /// Whether the call changed anything (false: it was in that state).
    pub changed: bool,
    /// Whether the topic is known: the journal holds messages of it, or it
    /// is paused or limited. A pause ahead of a topic's first push is kept;
    /// false says the name is new (a typo?).
    #[serde(default = "known_by_default")]
    pub known: bool,
}

fn known_by_default() -> bool {
    true
}

/// One bucket of a forecast: how many messages fall due in
/// `[at, at + bucket)`. `low` and `high` are given where `count` is an
/// estimate (a topic's share of a bucket too large to read whole): its 95 %
/// interval. Without them the count is exact (as of the reading).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ForecastBucket {
    /// The bucket's start (epoch ms).
    pub at: i64,
    pub count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high: Option<u64>,
}

impl ForecastBucket {
    pub fn exact(at: i64, count: u64) -> Self {
        ForecastBucket {
            at,
            count,
            low: None,
            high: None,
        }
    }
}

/// `GET /forecast` and `GET /topics/{topic}/forecast`: how many messages
/// fall due per bucket from `from` (now) over `span`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Forecast {
    /// The topic, or null for every topic.
    pub topic: Option<String>,
    /// When it was read (epoch ms).
    pub now: i64,
    /// The first bucket's start (epoch ms).
    pub from: i64,
    /// Bucket width (ms).
    pub bucket: i64,
    /// Span (ms): `buckets.len() · bucket`.
    pub span: i64,
    /// Due before `from` and not yet taken by its shard's owner (still in a
    /// delay zset, or waiting in the journal); ready messages waiting for
    /// a consumer are not counted. `at` is `now`.
    pub overdue: ForecastBucket,
    pub buckets: Vec<ForecastBucket>,
    /// The sum of the buckets' counts.
    pub total: u64,
    /// Every bucket is exact (no topic share was estimated) and every
    /// message waiting in the journal beyond the Redis horizon was counted.
    pub exact: bool,
    /// Messages waiting in the journal beyond the Redis horizon were
    /// counted up to this due time (epoch ms) and no further: the journal's
    /// row budget ran out. Buckets from it on lack those messages. Null
    /// when all were counted.
    pub journal_counted_until: Option<i64>,
    /// Messages read to find a topic's share, and journal rows read (any
    /// topic, ended ones still listed too).
    pub sampled: u64,
    pub journal_rows: u64,
}

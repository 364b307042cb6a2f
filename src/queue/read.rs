//! What the queue shows: the read models the JSON API and the dashboard
//! both show, read through the queue like its rules (handlers touch no
//! store themselves).
//!
//! - topics: counts by status (cached a moment, so dashboards refreshing
//!   together count once), pauses, limits, the oldest ready message;
//! - a message: its journal row and history, with what Redis already did
//!   that the journal has not written yet;
//! - searches: a topic's messages by bizKey, bizKey prefix or status, a
//!   page at a time, and its dead letters;
//! - the node: whether Redis and the journal answer, the journal's
//!   backlog, the worker lease, the shards' counts, the last restore and
//!   reconciliation.

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use delayq_proto::{TopicCounts, TopicList, TopicView};

use super::error::QueueError;
use super::state::Queue;
use crate::actors::journal::{BacklogView, LiveByBizKey};
use crate::journal::models::{FlowRow, MessageRow};
use crate::limit::Limit;
use crate::message::{now_ms, MessageId, MessageView, Status};
use crate::redis::inspect::RestoreCursor;
use crate::redis::schedule::ShardCounts;

/// Most (topic, status) rows the topic counts read.
pub const MAX_ROWS: i64 = 5_000;
/// How long a count is shown before it is read again.
const COUNTS_FRESH: Duration = Duration::from_secs(2);

/// Messages per status, by topic.
pub type Counts = BTreeMap<String, TopicCounts>;

static CACHE: LazyLock<Mutex<Option<(Instant, Counts, bool)>>> = LazyLock::new(Default::default);

/// A message as `GET /messages/{id}` and the dashboard show it.
pub struct Inspected {
    /// Its status and attempts as Redis has them when Redis knows more
    /// than the journal (a change the journal has not written yet).
    pub message: MessageView,
    /// The journal's row (its status and attempts may be behind
    /// `message`'s).
    pub row: MessageRow,
    /// Where `message.status` comes from: `redis` or `journal`.
    pub status_from: &'static str,
    /// Oldest first.
    pub history: Vec<FlowRow>,
}

/// Which of a topic's messages a search pages through.
pub enum Search {
    /// The live message holding a bizKey (at most one), past `after`, in
    /// `status` if given.
    BizKey { key: String, status: Option<Status> },
    /// Live messages whose bizKey starts with the prefix.
    Prefix {
        prefix: String,
        status: Option<Status>,
    },
    /// Messages in a status.
    Status(Status),
}

/// Whether the stores answer, as `GET /ready` shows it.
pub struct Probe {
    pub redis: Result<(), String>,
    pub journal: Result<(), String>,
    /// Redis's `maxmemory-policy`; none when its CONFIG command is
    /// disabled.
    pub maxmemory_policy: Option<String>,
}

/// What Redis says of a message beside the journal's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RedisView {
    /// What the journal does not say yet: the end an ack or cancel applied
    /// (kept for the journal until it has it), or, for a message the
    /// journal holds live, where it is now and its attempts.
    Newer(Status, i32),
    /// Nothing newer (or Redis cannot be asked: the journal's word is then
    /// all there is).
    Agrees,
    /// No record of a message the row calls live: finished, or gone.
    Gone,
}

impl Queue {
    /// Counts per topic, as `GET /topics` and the dashboard show them: one
    /// grouped count of the journal over its `(status, topic, id)` index, at
    /// most [`MAX_ROWS`] rows (and whether it was cut there), kept for
    /// [`COUNTS_FRESH`] so that dashboards refreshing together run it once.
    pub async fn topic_counts(&self) -> Result<(Counts, bool), QueueError> {
        if let Some((at, counts, cut)) = &*CACHE.lock().unwrap_or_else(|p| p.into_inner()) {
            if at.elapsed() < COUNTS_FRESH {
                return Ok((counts.clone(), *cut));
            }
        }
        let rows = self.journal.topic_counts(MAX_ROWS).await?;
        let cut = rows.len() as i64 == MAX_ROWS;
        let mut counts = Counts::new();
        for (topic, status, n) in rows {
            let c = counts.entry(topic).or_default();
            if let Some(count) = Status::from_code(status).and_then(|s| c.of_mut(s)) {
                *count += n;
            }
        }
        *CACHE.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Instant::now(), counts.clone(), cut));
        Ok((counts, cut))
    }

    /// The topics as `GET /topics` and the dashboard show them.
    pub async fn topic_list(&self) -> Result<TopicList, QueueError> {
        let (counts, cut) = self.topic_counts().await?;
        let paused = self.redis.topics().paused_topics().await?;
        let mut names: Vec<&str> = counts.keys().map(String::as_str).collect();
        names.extend(paused.keys().map(String::as_str));
        let limits = self.redis.limits();
        names.extend(limits.keys().map(String::as_str));
        names.sort_unstable();
        names.dedup();
        let oldest = self.redis.topics().oldest_ready(&names).await?;
        let groups = self.redis.topics().group_counts(&names).await?;
        let now = now_ms();
        let topics = names
            .iter()
            .zip(oldest)
            .zip(groups)
            .map(|((&topic, due), groups)| {
                let paused_at = paused.get(topic).copied();
                TopicView {
                    topic: topic.to_string(),
                    counts: counts.get(topic).cloned().unwrap_or_default(),
                    paused: paused_at.is_some(),
                    paused_at,
                    limit_per_second: limits.get(topic).map(|l| l.per_second).filter(|&n| n > 0),
                    limit_concurrency: limits.get(topic).map(|l| l.concurrency).filter(|&n| n > 0),
                    oldest_ready_due_time: due,
                    overdue_ms: due.map(|d| (now - d).max(0)),
                    groups,
                }
            })
            .collect();
        Ok(TopicList { topics, cut })
    }

    /// `topic`'s ordered groups as Redis holds them (none due or handed
    /// out: `None`).
    pub async fn topic_groups(
        &self,
        topic: &str,
    ) -> Result<Option<delayq_proto::GroupCounts>, QueueError> {
        let mut counts = self.redis.topics().group_counts(&[topic]).await?;
        Ok(counts.pop().flatten())
    }

    /// Whether `topic` is known: the journal holds a message of it, or it
    /// is paused or limited.
    pub async fn topic_known(&self, topic: &str) -> Result<bool, QueueError> {
        Ok(self.redis.limits().contains_key(topic)
            || self
                .redis
                .topics()
                .paused_topics()
                .await?
                .contains_key(topic)
            || self.journal.topic_known(topic).await?)
    }

    /// The paused topics, each with when it was paused.
    pub async fn paused_topics(&self) -> Result<BTreeMap<String, i64>, QueueError> {
        Ok(self.redis.topics().paused_topics().await?)
    }

    /// The topics' rate limits and concurrency caps (`--topic-limit`).
    pub fn limits(&self) -> &BTreeMap<String, Limit> {
        self.redis.limits()
    }

    /// Message `id` as `GET /messages/{id}` and the dashboard show it:
    /// the journal's row and history, with what Redis already did that
    /// the journal has not written yet (an ack a few ms ago).
    pub async fn inspect(&self, id: MessageId) -> Result<Option<Inspected>, QueueError> {
        let Some((mut row, mut history)) = self.journal.find(id).await? else {
            return Ok(None);
        };
        let mut ahead = self.redis_ahead(id, &row).await;
        if ahead == RedisView::Gone {
            // Redis holds no record of a message the row read before it
            // calls live: the journal may have written what Redis applied
            // (and Redis then dropped the end it kept) between the two
            // reads. The row read again is the newer word.
            if let Some((again, again_history)) = self.journal.find(id).await? {
                row = again;
                history = again_history;
            }
            ahead = RedisView::Agrees;
        }
        let mut message = row.view();
        if let RedisView::Newer(status, attempts) = ahead {
            message.status = status;
            message.attempts = attempts;
        }
        Ok(Some(Inspected {
            message,
            row,
            status_from: match ahead {
                RedisView::Newer(..) => "redis",
                _ => "journal",
            },
            history,
        }))
    }

    /// Message `id` as the journal alone has it: its row and history
    /// (Redis is not asked, so an outage of Redis does not hold this up).
    pub async fn journal_row(
        &self,
        id: MessageId,
    ) -> Result<Option<(MessageRow, Vec<FlowRow>)>, QueueError> {
        Ok(self.journal.find(id).await?)
    }

    /// Whether the journal holds message `id`.
    pub async fn exists(&self, id: MessageId) -> Result<bool, QueueError> {
        Ok(self.journal_row(id).await?.is_some())
    }

    /// What Redis says of message `id` beside its journal row `row`.
    async fn redis_ahead(&self, id: MessageId, row: &MessageRow) -> RedisView {
        use crate::redis::inspect::{Held, Place};
        let live = !row.status().is_terminal();
        let Some(held) = self
            .redis
            .inspect()
            .locate(&[(id, row.topic.as_str())])
            .await
            .ok()
            .and_then(|mut h| h.pop())
        else {
            return RedisView::Agrees;
        };
        let now = match held {
            Held::Unjournaled(end) => (end.status, end.attempts),
            Held::Record(place) if live => {
                let status = match place {
                    Place::Delay { .. } => Status::Delaying,
                    Place::Ready => Status::Ready,
                    Place::InFlight { .. } => Status::Consuming,
                    Place::Nowhere => return RedisView::Gone,
                };
                match self.redis.inspect().headers(&[id]).await {
                    Ok(mut h) => match h.pop().flatten() {
                        Some(header) => (status, header.attempts),
                        None => return RedisView::Gone,
                    },
                    Err(_) => return RedisView::Agrees,
                }
            }
            Held::Finished | Held::Absent if live => return RedisView::Gone,
            _ => return RedisView::Agrees,
        };
        if now != (row.status(), row.attempts) {
            RedisView::Newer(now.0, now.1)
        } else {
            RedisView::Agrees
        }
    }

    /// A page of `topic`'s messages in id order, those past `after`, at
    /// most `limit`, and the `after` of the next page.
    pub async fn search(
        &self,
        topic: &str,
        search: Search,
        after: i64,
        limit: i64,
    ) -> Result<(Vec<MessageRow>, Option<i64>), QueueError> {
        Ok(match search {
            Search::BizKey { key, status } => {
                let (mut rows, next) = self
                    .journal
                    .live_by_biz_key(LiveByBizKey::Exact {
                        topic: topic.to_string(),
                        key,
                    })
                    .await?;
                rows.retain(|r| r.id > after && status.is_none_or(|s| r.status() == s));
                (rows, next)
            }
            Search::Prefix { prefix, status } => {
                self.journal
                    .live_by_biz_key(LiveByBizKey::Prefix {
                        topic: topic.to_string(),
                        prefix,
                        status,
                        after,
                        limit,
                    })
                    .await?
            }
            Search::Status(status) => {
                // One more than a page tells whether there is another.
                let rows = self
                    .journal
                    .topic_page(topic, status, after, limit + 1)
                    .await?;
                crate::journal::store::full_pages(rows, limit)
            }
        })
    }

    /// A page of `topic`'s dead letters past `after`, each with its
    /// history.
    pub async fn dead_page(
        &self,
        topic: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<(MessageRow, Vec<FlowRow>)>, QueueError> {
        Ok(self.journal.dead_page(topic, after, limit).await?)
    }

    /// Whether Redis and the journal answer, and how Redis evicts.
    pub async fn probe(&self) -> Probe {
        let (redis, journal, maxmemory_policy) = futures::join!(
            self.redis.records().ping(),
            self.journal.ping(),
            self.redis.inspect().maxmemory_policy()
        );
        Probe {
            redis: redis.map_err(|e| e.to_string()),
            journal: journal.map_err(|e| e.to_string()),
            maxmemory_policy,
        }
    }

    /// The Snowflake worker id this node holds a confirmed lease on: none,
    /// and it takes no pushes.
    pub fn worker(&self) -> Option<u16> {
        self.ids.worker()
    }

    /// The deployment's shard count.
    pub fn shards(&self) -> u32 {
        self.redis.keys().shards()
    }

    /// Every shard's counts, shard 0 first.
    pub async fn shard_counts(&self) -> Vec<Result<ShardCounts, QueueError>> {
        futures::future::join_all((0..self.shards()).map(|s| self.redis.records().shard_counts(s)))
            .await
            .into_iter()
            .map(|c| c.map_err(QueueError::from))
            .collect()
    }

    /// Status changes waiting to be written to the journal.
    pub fn journal_pending(&self) -> usize {
        self.journal.backlog_pending()
    }

    /// The journal's backlog and what it refused (`GET /admin/journal`).
    pub fn journal_backlog(&self) -> BacklogView {
        self.journal.backlog()
    }

    /// Shares a dashboard logout with every node: the session's signed
    /// body is refused until `until` (epoch ms), when it expires anyway.
    pub async fn revoke_ui_session(&self, body: &str, until: i64) -> Result<(), QueueError> {
        Ok(self.redis.records().revoke_ui_session(body, until).await?)
    }

    /// Where an interrupted restore would resume.
    pub async fn restore_cursor(&self) -> Result<Option<RestoreCursor>, QueueError> {
        Ok(self.redis.inspect().restore_cursor().await?)
    }

    /// The leader's last periodic reconciliation (its report, JSON), if one
    /// was kept.
    pub async fn reconciled(&self) -> Result<Option<String>, QueueError> {
        Ok(self.redis.records().reconciled().await?)
    }
}

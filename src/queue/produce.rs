//! Accepting messages: durable in the journal first, then scheduled.

use std::collections::HashSet;

use super::error::QueueError;
use super::replace::Replaced;
use super::state::Queue;
use crate::actors::router::Schedule;
use crate::journal::store::OutboxRows;
use crate::journal::InsertOutcome;
use crate::message::{Draft, Message, MessageId, OnDuplicate, Status, When};

/// What accepting a message did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// Its id, or, for a repeated live `(topic, bizKey)`, the live one's.
    pub id: MessageId,
    /// False when the bizKey belonged to a live message already.
    pub fresh: bool,
    /// A duplicate pushed with `onDuplicate` `replace` or `extend`: what
    /// it did to the live message.
    pub replaced: Option<Replaced>,
}

/// Times a push whose key's holder ended under its `onDuplicate` is
/// tried again as a new message.
const REPLACE_ROUNDS: usize = 3;

impl Queue {
    /// Gives checked drafts their ids (from this node's worker id lease;
    /// none without one) and accepts them, all or none: see
    /// [`Queue::accept`].
    pub async fn push(&self, drafts: Vec<Draft>) -> Result<Vec<Accepted>, QueueError> {
        if drafts.iter().any(|d| d.group.is_some()) {
            self.mark_groups_used().await?;
        }
        let mut messages = Vec::with_capacity(drafts.len());
        let modes: Vec<OnDuplicate> = drafts.iter().map(|d| d.on_duplicate).collect();
        let whens: Vec<When> = drafts.iter().map(|d| d.when).collect();
        for draft in drafts {
            // A delay counts from the clock of the master that will hold
            // the message (on a Redis Cluster each master's clock is its
            // shards').
            let id = self.id_for(&draft.topic, draft.group.as_deref())?;
            let shard_now = crate::clock::now_ms_for(self.redis.keys().shard_of(id));
            let mut m = draft.into_message(id, shard_now);
            if crate::faults::on("plant_early") && m.due_time > shard_now {
                m.due_time -= 400;
            }
            messages.push(m);
        }
        if modes.iter().all(|m| *m == OnDuplicate::Keep) {
            return self.accept(messages, None).await;
        }
        let mut accepted = self.accept(messages.clone(), None).await?;
        // Duplicates with onDuplicate: their holders change, after the
        // batch's own messages are scheduled (a holder pushed earlier in
        // the batch is then in Redis, or on its way there).
        let mut rounds = 0;
        let mut todo: Vec<usize> = (0..messages.len())
            .filter(|&i| modes[i] != OnDuplicate::Keep && !accepted[i].fresh)
            .collect();
        while !todo.is_empty() {
            let mut ended = Vec::new();
            for &i in &todo {
                let Some(holder) = self.journal.rows_of(vec![accepted[i].id.0]).await?.pop() else {
                    ended.push(i);
                    continue;
                };
                // Its delay counts from the clock of the master holding
                // the live message (its shard's), not the new id's.
                let mut m = messages[i].clone();
                if m.repeat.is_none() {
                    let shard = self.redis.keys().shard_of(accepted[i].id);
                    m.due_time = whens[i].due(crate::clock::now_ms_for(shard));
                }
                let outcome = self.replace_holder(&holder, &m, modes[i]).await?;
                if outcome == Replaced::Ended {
                    ended.push(i);
                } else {
                    accepted[i].replaced = Some(outcome);
                }
            }
            rounds += 1;
            if ended.is_empty() || rounds == REPLACE_ROUNDS {
                break;
            }
            // Their holders ended: the key is free, so each is pushed as a
            // new message (or finds the key's new holder).
            let again = self
                .accept(ended.iter().map(|&i| messages[i].clone()).collect(), None)
                .await?;
            todo.clear();
            for (&i, a) in ended.iter().zip(again) {
                accepted[i] = a;
                if !a.fresh {
                    todo.push(i);
                }
            }
        }
        Ok(accepted)
    }

    /// Records, once per process, that this data set carries messages of
    /// ordered groups, before the first is accepted: they may wait in the
    /// journal alone (beyond the horizon, dead letters), where `delayq
    /// reshard` cannot see them, so it refuses from then on.
    async fn mark_groups_used(&self) -> Result<(), QueueError> {
        use std::sync::atomic::{AtomicBool, Ordering};
        static MARKED: AtomicBool = AtomicBool::new(false);
        if MARKED.load(Ordering::Acquire) {
            return Ok(());
        }
        let _: () = redis::cmd("SET")
            .arg(self.redis.keys().groups_used())
            .arg("1")
            .query_async(&mut self.redis.connection())
            .await
            .map_err(crate::error::RedisError::from)?;
        MARKED.store(true, Ordering::Release);
        Ok(())
    }

    /// A new message's id: one of its group's shard for a message of an
    /// ordered group (see [`crate::redis::keys::Keys::shard_of_group`]),
    /// drawn until one falls there (as many draws as shards, on average).
    fn id_for(&self, topic: &str, group: Option<&str>) -> Result<MessageId, QueueError> {
        let keys = self.redis.keys();
        let Some(group) = group.filter(|_| !crate::faults::on("plant_grouped")) else {
            return Ok(self.ids.next_id()?);
        };
        let want = keys.shard_of_group(topic, group);
        loop {
            let id = self.ids.next_id()?;
            if keys.shard_of(id) == want {
                return Ok(id);
            }
        }
    }

    /// Forgets the records of outbox rows whose delete committed.
    pub async fn forget_outbox_rows(
        &self,
        source: String,
        rows: Vec<i64>,
    ) -> Result<(), QueueError> {
        self.journal.forget_outbox_rows(source, rows).await?;
        Ok(())
    }

    /// Pushes the messages of an application's outbox rows (one row per
    /// draft, see [`crate::outbox`]): durable with the record of their
    /// rows, in one transaction, then scheduled. A row pushed before (its
    /// node stopped before deleting it) answers with the message it became
    /// and pushes nothing. Drafts keep the first message of a live bizKey
    /// (`onDuplicate` `keep`).
    pub async fn push_outbox(
        &self,
        drafts: Vec<Draft>,
        rows: OutboxRows,
    ) -> Result<Vec<Accepted>, QueueError> {
        if drafts.iter().any(|d| d.group.is_some()) {
            self.mark_groups_used().await?;
        }
        let mut messages = Vec::with_capacity(drafts.len());
        for draft in drafts {
            debug_assert_eq!(draft.on_duplicate, OnDuplicate::Keep);
            let id = self.id_for(&draft.topic, draft.group.as_deref())?;
            let shard_now = crate::clock::now_ms_for(self.redis.keys().shard_of(id));
            messages.push(draft.into_message(id, shard_now));
        }
        self.accept(messages, Some(rows)).await
    }

    /// Makes messages durable (one group commit, all or none; from an
    /// outbox, a transaction of their own with their rows' record), then
    /// schedules them. A message whose `(topic, bizKey)` is live already
    /// answers with that message.
    #[tracing::instrument(name = "push", level = "debug", skip_all, fields(messages = messages.len()))]
    async fn accept(
        &self,
        messages: Vec<Message>,
        outbox: Option<OutboxRows>,
    ) -> Result<Vec<Accepted>, QueueError> {
        // A message due beyond the horizon stays in the journal alone
        // (WaitPut, listed as waiting): the owner of its shard schedules it
        // as it comes near (see crate::horizon). Decided once, here, for
        // the journal and for Redis alike.
        let now = crate::message::now_ms();
        let far: Vec<bool> = messages
            .iter()
            .map(|m| self.redis.beyond_horizon(m.due_time, now))
            .collect();
        let mut outcomes = match &outbox {
            None => self.journal.insert(messages.clone(), far.clone()).await?,
            Some(rows) => {
                self.journal
                    .insert_outbox(messages.clone(), far.clone(), rows.clone())
                    .await?
            }
        };
        // A bizKey's holder may have ended in Redis (an ack answered before
        // its journal write) with its end still on its way to the journal:
        // it is not live. Its end is written first, then the push is tried
        // again, so a key freed by an answered ack is free.
        let held: Vec<(usize, MessageId)> = outcomes
            .iter()
            .enumerate()
            .filter_map(|(i, o)| match o {
                InsertOutcome::Duplicate(row) => Some((i, MessageId(row.id))),
                InsertOutcome::Inserted | InsertOutcome::OutboxDone(_) => None,
            })
            .collect();
        if !held.is_empty() {
            let holders: Vec<MessageId> = held.iter().map(|(_, id)| *id).collect();
            let ends = self.redis.journal_sync().pending_ends(&holders).await?;
            let mut again = Vec::new();
            let mut changes = Vec::new();
            for ((i, id), end) in held.iter().zip(ends) {
                if let Some(end) = end {
                    let shard = self.redis.keys().shard_of(*id);
                    changes.push(crate::journal::StatusChange::ended(
                        *id,
                        end.status,
                        end.attempts,
                        end.at,
                        self.redis.keys().inflight(shard).into(),
                    ));
                    again.push(*i);
                }
            }
            if !again.is_empty() {
                self.journal.record_durable(changes).await?;
                let retry: Vec<Message> = again.iter().map(|&i| messages[i].clone()).collect();
                let retry_far: Vec<bool> = again.iter().map(|&i| far[i]).collect();
                let redone = match &outbox {
                    None => self.journal.insert(retry, retry_far).await?,
                    // Their records point at the holder that ended: the
                    // retry replaces them.
                    Some(o) => {
                        self.journal
                            .insert_outbox(retry, retry_far, o.again(&again))
                            .await?
                    }
                };
                for (&i, o) in again.iter().zip(redone) {
                    outcomes[i] = o;
                }
            }
        }
        let mut accepted = Vec::with_capacity(messages.len());
        let mut to_schedule = Vec::new();
        let mut seen = HashSet::new();
        // Outbox rows pushed before by a node that stopped before deleting
        // them: one that stopped between the journal and Redis left its
        // messages WaitPut, scheduled here as a repeated bizKey's are.
        let done: Vec<i64> = outcomes
            .iter()
            .filter_map(|o| match o {
                InsertOutcome::OutboxDone(id) => Some(*id),
                _ => None,
            })
            .collect();
        if !done.is_empty() {
            for row in self.journal.rows_of(done).await? {
                if row.status() == Status::WaitPut
                    && !self.redis.beyond_horizon(row.due_time, now)
                    && seen.insert(MessageId(row.id))
                {
                    to_schedule.push((row.message(), row.attempts));
                }
            }
        }
        let metrics = crate::metrics::metrics();
        for ((m, outcome), far) in messages.into_iter().zip(outcomes).zip(far) {
            match outcome {
                InsertOutcome::Inserted => {
                    tracing::debug!(id = %m.id, topic = %m.topic, due = m.due_time, "accepted");
                    metrics.count(&metrics.pushed, &m.topic, 1);
                    accepted.push(Accepted {
                        id: m.id,
                        fresh: true,
                        replaced: None,
                    });
                    seen.insert(m.id);
                    if far {
                        metrics.beyond_horizon.inc();
                    } else {
                        to_schedule.push((m, 0));
                    }
                }
                InsertOutcome::OutboxDone(id) => {
                    tracing::debug!(id, topic = %m.topic, "its outbox row was pushed before");
                    accepted.push(Accepted {
                        id: MessageId(id),
                        fresh: false,
                        replaced: None,
                    });
                }
                InsertOutcome::Duplicate(row) => {
                    tracing::debug!(id = row.id, topic = %m.topic, "its bizKey's message is live: answered with it");
                    accepted.push(Accepted {
                        id: MessageId(row.id),
                        fresh: false,
                        replaced: None,
                    });
                    // A live message still WaitPut may never have reached
                    // Redis (its push met an outage): schedule it again.
                    // Scheduling is idempotent (Redis keeps a message it
                    // holds as it is), and a message acked or cancelled is
                    // no longer live, so this never brings a finished
                    // message back. One due beyond the horizon is listed
                    // as waiting, for the loader.
                    if row.status() == Status::WaitPut
                        && !self.redis.beyond_horizon(row.due_time, now)
                        && seen.insert(MessageId(row.id))
                    {
                        to_schedule.push((row.message(), row.attempts));
                    }
                }
            }
        }
        if to_schedule.is_empty() {
            return Ok(accepted);
        }
        let scheduled = self
            .router
            .send(Schedule {
                batch: to_schedule.clone(),
                // Read as the journal took the rows (a push frozen since is
                // refused, see STALE_READING_MS).
                read_at: now,
            })
            .await
            .map_err(crate::error::router_unreachable);
        // The router records the scheduled messages Delaying.
        match scheduled.and_then(|r| r) {
            Ok(_) => Ok(accepted),
            Err(e) => {
                tracing::warn!(error = %e, count = to_schedule.len(), "messages journaled but not scheduled");
                let list: Vec<String> = to_schedule.iter().map(|(m, _)| m.id.to_string()).collect();
                Err(QueueError::NotScheduled(format!(
                    "{e}; message(s) {} are durable in the journal (WaitPut) and are scheduled by the next restore, \
                     or by pushing again with the same bizKey",
                    list.join(",")
                )))
            }
        }
    }
}

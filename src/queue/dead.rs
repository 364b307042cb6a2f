//! Dead letters: a message that used its last attempt is brought back, or
//! its life ended as Deleted; one by one or a topic's at a time.

use std::future::Future;

use super::error::QueueError;
use super::state::Queue;
use crate::journal::{DeleteDeadOutcome, RequeueOutcome};
use crate::message::{now_ms, MessageId};

/// Dead messages read per page when working through a topic's.
const PAGE: i64 = 500;

/// Brings a dead message back: live again in the journal (due now,
/// attempts counted from 0), then scheduled, its tombstone cleared.
pub async fn requeue(state: &Queue, id: MessageId) -> Result<RequeueOutcome, QueueError> {
    let outcome = state.journal.requeue_dead(id, now_ms()).await?;
    if let RequeueOutcome::Requeued(row) = &outcome {
        state
            .redis
            .schedule_requeued(&[row.message()])
            .await
            .map_err(|e| {
                QueueError::NotScheduled(format!(
                    "{e}; message {id} is live again in the journal (Delaying) and is scheduled by the next restore"
                ))
            })?;
    }
    Ok(outcome)
}

/// Ends a dead message's life as Deleted: it is no longer listed among the
/// dead and can be neither requeued nor delivered. Redis holds nothing of
/// it to remove.
pub async fn delete(state: &Queue, id: MessageId) -> Result<DeleteDeadOutcome, QueueError> {
    Ok(state.journal.delete_dead(id, now_ms()).await?)
}

/// What working through a topic's dead messages did.
#[derive(Debug)]
pub struct TopicOutcome<T> {
    /// Messages requeued (or deleted).
    pub done: usize,
    /// Those left as they were, with why.
    pub skipped: Vec<(MessageId, T)>,
    /// Dead messages of the topic are left past the limit.
    pub more: bool,
}

/// Up to `limit` dead messages of `topic` (in id order) brought back; one
/// that cannot be (its bizKey taken by a live message) is skipped.
pub async fn requeue_topic(
    state: &Queue,
    topic: &str,
    limit: usize,
) -> Result<TopicOutcome<RequeueOutcome>, QueueError> {
    each_dead(
        state,
        topic,
        limit,
        |id| requeue(state, id),
        |o| matches!(o, RequeueOutcome::Requeued(_)),
    )
    .await
}

/// Up to `limit` dead messages of `topic` deleted.
pub async fn delete_topic(
    state: &Queue,
    topic: &str,
    limit: usize,
) -> Result<TopicOutcome<DeleteDeadOutcome>, QueueError> {
    each_dead(
        state,
        topic,
        limit,
        |id| delete(state, id),
        |o| matches!(o, DeleteDeadOutcome::Deleted),
    )
    .await
}

async fn each_dead<T, F, Fut>(
    state: &Queue,
    topic: &str,
    limit: usize,
    mut act: F,
    done: impl Fn(&T) -> bool,
) -> Result<TopicOutcome<T>, QueueError>
where
    F: FnMut(MessageId) -> Fut,
    Fut: Future<Output = Result<T, QueueError>>,
{
    let mut out = TopicOutcome {
        done: 0,
        skipped: Vec::new(),
        more: false,
    };
    let mut after = 0i64;
    'pages: loop {
        let page = state.journal.dead_page(topic, after, PAGE).await?;
        let full = page.len() as i64 == PAGE;
        for (row, _) in page {
            if out.done + out.skipped.len() >= limit {
                break 'pages;
            }
            after = row.id;
            let id = MessageId(row.id);
            let outcome = act(id).await?;
            if done(&outcome) {
                out.done += 1;
            } else {
                out.skipped.push((id, outcome));
            }
        }
        if !full {
            break;
        }
    }
    out.more = !state.journal.dead_page(topic, after, 1).await?.is_empty();
    Ok(out)
}

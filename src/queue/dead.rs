//! Dead letters: a message that used its last attempt is brought back.

use super::{Queue, QueueError};
use crate::journal::RequeueOutcome;
use crate::message::{now_ms, MessageId};

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

//! One request's worth of work, shared with its neighbours: single acks and
//! single cancels that arrive while the previous batch is under way are
//! applied together, one Redis pipeline for the lot, so a consumer that
//! acks each message with its own request (or a producer cancelling one id
//! per request) pays for a shared round trip, not one per message. Nothing
//! waits for a batch to fill: the first request goes at once, and what
//! queued behind it goes next (group commit, as the journal's inserts).
//!
//! A batch runs in two steps. The first (Redis) runs one batch at a time;
//! it answers what it can, and the next batch starts as soon as it ends.
//! The second, for the items the first could not answer (they wait on the
//! journal: an id Redis does not hold, a cancel's commit), runs beside the
//! batches that follow it, so a journal database that stopped answering
//! holds up only the requests that need it, never the ones queued behind.

use std::future::Future;

use futures::future::LocalBoxFuture;
use tokio::sync::{mpsc, oneshot};

use super::error::QueueError;

type Reply<O> = oneshot::Sender<Result<O, QueueError>>;

/// What a batch's first step came to.
pub struct Staged<O> {
    /// One entry per item, in order: its output, or `None` when `later`
    /// answers it.
    pub now: Vec<Option<O>>,
    /// The second step: one answer per `None` of `now`, in order. It runs
    /// on its own, beside the batches that follow.
    pub later: Option<LocalBoxFuture<'static, Vec<Result<O, QueueError>>>>,
}

/// The answer of an item neither step answered (a bug in a batch's steps):
/// an error, not a hang.
fn unanswered() -> QueueError {
    QueueError::NotScheduled("no answer".into())
}

/// Answers `replies` (one per item, in order) with what `staged` says,
/// at once where it can; the items its second step answers get their
/// answer when that step ends (it runs on its own task).
fn answer<O: 'static>(replies: Vec<Reply<O>>, staged: Staged<O>) {
    let mut waiting = Vec::new();
    let mut now = staged.now.into_iter();
    for reply in replies {
        match now.next() {
            Some(Some(out)) => {
                let _ = reply.send(Ok(out));
            }
            _ => waiting.push(reply),
        }
    }
    if waiting.is_empty() {
        return;
    }
    let Some(later) = staged.later else {
        for reply in waiting {
            let _ = reply.send(Err(unanswered()));
        }
        return;
    };
    actix::spawn(async move {
        let mut outs = later.await.into_iter();
        for reply in waiting {
            let _ = reply.send(outs.next().unwrap_or_else(|| Err(unanswered())));
        }
    });
}

/// A batching front for an operation on many items.
pub struct Coalesce<I, O> {
    tx: mpsc::UnboundedSender<(I, Reply<O>)>,
}

impl<I, O> Clone for Coalesce<I, O> {
    fn clone(&self) -> Self {
        Coalesce {
            tx: self.tx.clone(),
        }
    }
}

impl<I: Clone + 'static, O: 'static> Coalesce<I, O> {
    /// Starts the batching task (inside the actix system): `run` applies
    /// the first step of a batch of at most `max` items (see [`Staged`]).
    /// A batch whose first step fails is run again item by item, so each
    /// caller gets its own item's error.
    pub fn start<F, Fut>(max: usize, run: F) -> Self
    where
        F: Fn(Vec<I>) -> Fut + 'static,
        Fut: Future<Output = Result<Staged<O>, QueueError>> + 'static,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<(I, Reply<O>)>();
        actix::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                while batch.len() < max {
                    match rx.try_recv() {
                        Ok(next) => batch.push(next),
                        Err(_) => break,
                    }
                }
                let items: Vec<I> = batch.iter().map(|(i, _)| i.clone()).collect();
                match run(items).await {
                    Ok(staged) => answer(batch.into_iter().map(|(_, r)| r).collect(), staged),
                    Err(_) if batch.len() > 1 => {
                        for (item, reply) in batch {
                            match run(vec![item]).await {
                                Ok(staged) => answer(vec![reply], staged),
                                Err(e) => {
                                    let _ = reply.send(Err(e));
                                }
                            }
                        }
                    }
                    Err(e) => {
                        if let Some((_, reply)) = batch.pop() {
                            let _ = reply.send(Err(e));
                        }
                    }
                }
            }
        });
        Coalesce { tx }
    }

    /// Applies `item` with whatever else is queued.
    pub async fn call(&self, item: I) -> Result<O, QueueError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send((item, reply))
            .map_err(|_| QueueError::NotScheduled("the node is shutting down".into()))?;
        rx.await
            .map_err(|_| QueueError::NotScheduled("the node is shutting down".into()))?
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Items below 100 are answered by the first step; the others by a
    /// second step that waits until `gate` opens (a journal that does not
    /// answer).
    fn start(gate: tokio::sync::watch::Receiver<bool>) -> Coalesce<u32, u32> {
        Coalesce::start(10, move |items: Vec<u32>| {
            let mut gate = gate.clone();
            async move {
                let now: Vec<Option<u32>> = items.iter().map(|&i| (i < 100).then_some(i)).collect();
                let slow: Vec<u32> = items.into_iter().filter(|&i| i >= 100).collect();
                let later = async move {
                    let _ = gate.wait_for(|open| *open).await;
                    slow.into_iter().map(Ok).collect()
                };
                Ok(Staged {
                    now,
                    later: Some(Box::pin(later)),
                })
            }
        })
    }

    #[actix_rt::test]
    async fn a_batch_waiting_on_its_second_step_holds_up_no_later_batch() {
        let (open, gate) = tokio::sync::watch::channel(false);
        let c = start(gate);
        let slow = actix::spawn({
            let c = c.clone();
            async move { c.call(100).await }
        });
        tokio::task::yield_now().await;
        for i in 0..5 {
            let got = tokio::time::timeout(Duration::from_secs(1), c.call(i)).await;
            assert_eq!(got.expect("answered at once").unwrap(), i);
        }
        assert!(!slow.is_finished());
        open.send(true).unwrap();
        assert_eq!(slow.await.unwrap().unwrap(), 100);
    }

    #[actix_rt::test]
    async fn each_item_of_a_batch_gets_its_own_answer() {
        let (open, gate) = tokio::sync::watch::channel(true);
        let c = start(gate);
        let calls: Vec<_> = [1, 150, 2, 160, 3]
            .into_iter()
            .map(|i| {
                let c = c.clone();
                actix::spawn(async move { (i, c.call(i).await.unwrap()) })
            })
            .collect();
        for call in calls {
            let (asked, got) = call.await.unwrap();
            assert_eq!(asked, got);
        }
        drop(open);
    }
}

//! One request's worth of work, shared with its neighbours: single acks and
//! single cancels that arrive while the previous batch is under way are
//! applied together, one Redis pipeline for the lot, so a consumer that
//! acks each message with its own request (or a producer cancelling one id
//! per request) pays for a shared round trip, not one per message. Nothing
//! waits for a batch to fill: the first request goes at once, and what
//! queued behind it goes next (group commit, as the journal's inserts).

use std::future::Future;

use tokio::sync::{mpsc, oneshot};

use super::QueueError;

type Reply<O> = oneshot::Sender<Result<O, QueueError>>;

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
    /// Starts the batching task (inside the actix system): `run` applies a
    /// batch of at most `max` items and answers one output per item, in
    /// order. A batch that fails is run again item by item, so each caller
    /// gets its own item's error.
    pub fn start<F, Fut>(max: usize, run: F) -> Self
    where
        F: Fn(Vec<I>) -> Fut + 'static,
        Fut: Future<Output = Result<Vec<O>, QueueError>> + 'static,
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
                    Ok(outs) => {
                        for ((_, reply), out) in batch.into_iter().zip(outs) {
                            let _ = reply.send(Ok(out));
                        }
                    }
                    Err(_) if batch.len() > 1 => {
                        for (item, reply) in batch {
                            let one = run(vec![item]).await.and_then(|mut o| {
                                o.pop()
                                    .ok_or_else(|| QueueError::NotScheduled("no answer".into()))
                            });
                            let _ = reply.send(one);
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

//! [`Consumer`]: the loop that long-polls a topic, hands each message to a
//! handler task, and settles every message the way its handler said.
//!
//! - **Concurrency.** At most `concurrency` handlers run at once. A poll
//!   asks for as many messages as there are free handler slots (at most
//!   `batch`), so no message waits in the client while its ack deadline
//!   runs, and one poll is in flight at a time.
//! - **Acks ride the polls.** A handler that returns [`Outcome::Ack`] leaves
//!   its id with the next poll (`POST /get/{topic}` with `{"ack": [...]}`):
//!   one round trip acks the last messages and fetches the next. Acks that
//!   no poll picks up within `ack_linger` (a long poll is already waiting)
//!   go on their own in `POST /ack`.
//! - **Nacks** ([`Outcome::Retry`], [`Outcome::RetryAfter`]) go in `POST
//!   /nack`, one request per delay for the messages waiting.
//! - **Errors.** No answer, a 5xx (503 while Redis or the journal is down),
//!   429: the loop sends nothing for a while, then tries again; acks and
//!   nacks not sent are kept and sent later. The wait grows exponentially
//!   with each failure and is jittered; one wait holds back polls and acks
//!   alike, and any wait is at least half of `backoff_min`, so the loop
//!   never spins. A refusal of the
//!   poll itself (4xx, e.g. an invalid topic) ends the run with that error,
//!   after the handlers running finished and their acks were sent.
//! - **Shutdown.** When the `shutdown` future completes the loop polls no
//!   more; a poll in flight is answered (its messages are handled), running
//!   handlers finish, pending acks and nacks are sent, and `run` returns.
//!   Sending them is retried for up to `drain_timeout`; what is still
//!   unsent then is counted in [`ConsumerStats::unsettled`] and comes back
//!   after its ttl, as any unacked delivery.
//!
//! Delivery is at least once: a message whose ack is lost or late is
//! delivered again, so handlers should be idempotent (a `bizKey` or the
//! message id helps).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::client::{Client, MAX_ACK_IDS, MAX_POLL_COUNT, MAX_POLL_TIMEOUT};
use crate::error::Error;
use crate::message::{Delivery, MessageView};
use crate::reply::{AckAndPollReply, AckOutcome, AckResult, NackOutcome, NackResult};
use delayq_proto::millis;

/// What a handler says about its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Handled: ack it.
    Ack,
    /// Not handled: nack it, and let its `retry` policy say when it comes
    /// back (at once without a policy). Counts as a failed attempt.
    Retry,
    /// Not handled: nack it and deliver it again after this delay (at most
    /// one day). Counts as a failed attempt.
    RetryAfter(Duration),
}

/// `Ok(())` acks, an error retries by the message's policy, so a handler
/// can use `?` and end with `.into()`.
impl<E> From<Result<(), E>> for Outcome {
    fn from(result: Result<(), E>) -> Self {
        match result {
            Ok(()) => Outcome::Ack,
            Err(_) => Outcome::Retry,
        }
    }
}

/// What a consumer did, returned by [`Consumer::run`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    /// Messages received and handed to the handler.
    pub received: u64,
    /// Acks the server answered `consumed`.
    pub acked: u64,
    /// Nacks the server took (the message is ready, delaying or dead).
    pub nacked: u64,
    /// Acks and nacks the server refused: the message was no longer handed
    /// out (its ack deadline passed, it was cancelled or acked elsewhere).
    pub refused: u64,
    /// Handlers that panicked; their messages were nacked as
    /// [`Outcome::Retry`].
    pub panicked: u64,
    /// Requests that failed (each followed by a backoff).
    pub errors: u64,
    /// Acks and nacks still unsent when the shutdown's `drain_timeout` ran
    /// out.
    pub unsettled: u64,
}

/// A consumer of one topic. Build it with [`Consumer::new`] and the setting
/// methods, then [`run`](Consumer::run) it.
///
/// ```no_run
/// use std::time::Duration;
/// use delayq_client::{Client, Consumer, Outcome};
///
/// # async fn example() -> Result<(), delayq_client::Error> {
/// let client = Client::new("http://127.0.0.1:7070")?;
/// let stats = Consumer::new(client, "sms")
///     .concurrency(8)
///     .run(
///         |msg| async move {
///             match send_sms(&msg.body).await {
///                 Ok(()) => Outcome::Ack,
///                 Err(_) => Outcome::RetryAfter(Duration::from_secs(60)),
///             }
///         },
///         async { tokio::signal::ctrl_c().await.ok(); },
///     )
///     .await?;
/// println!("{stats:?}");
/// # Ok(()) }
/// # async fn send_sms(_: &str) -> Result<(), ()> { Ok(()) }
/// ```
#[derive(Clone)]
pub struct Consumer {
    client: Client,
    topic: String,
    concurrency: usize,
    batch: usize,
    poll_timeout: Duration,
    ack_linger: Duration,
    backoff_min: Duration,
    backoff_max: Duration,
    drain_timeout: Duration,
}

impl Consumer {
    /// A consumer of `topic` with one handler at a time, polls of up to 10 s.
    pub fn new(client: Client, topic: impl Into<String>) -> Self {
        Consumer {
            client,
            topic: topic.into(),
            concurrency: 1,
            batch: MAX_POLL_COUNT,
            poll_timeout: Duration::from_secs(10),
            ack_linger: Duration::from_millis(50),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(30),
        }
    }

    /// Handlers running at once (default 1; at least 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Most messages one poll asks for (1 to 100; default 100), bounded by
    /// the free handler slots.
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n.clamp(1, MAX_POLL_COUNT);
        self
    }

    /// How long one poll waits on the server for a message (whole seconds,
    /// up to 300; default 10 s). A shutdown waits for the poll in flight, so
    /// this bounds how long stopping an idle consumer takes.
    pub fn poll_timeout(mut self, timeout: Duration) -> Self {
        self.poll_timeout = timeout.min(MAX_POLL_TIMEOUT);
        self
    }

    /// How long an ack waits for a poll to carry it before it is sent on
    /// its own (default 50 ms).
    pub fn ack_linger(mut self, linger: Duration) -> Self {
        self.ack_linger = linger;
        self
    }

    /// The backoff after a failed request: from `min` (default 100 ms),
    /// doubling to `max` (default 10 s), each wait jittered down by at most
    /// half.
    pub fn backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff_min = min;
        self.backoff_max = max;
        self
    }

    /// How long a shutdown keeps trying to send the last acks and nacks
    /// once the handlers finished (default 30 s).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// Runs until `shutdown` completes (or a poll is refused), calling
    /// `handler` for every message received, up to `concurrency` at a time,
    /// each in its own task. Returns once the handlers running finished and
    /// their acks and nacks were sent.
    pub async fn run<H, F, S>(self, handler: H, shutdown: S) -> Result<ConsumerStats, Error>
    where
        H: Fn(MessageView) -> F + Send + Sync + 'static,
        F: Future<Output = Outcome> + Send + 'static,
        S: Future,
    {
        let handler = Arc::new(handler);
        let mut shutdown = std::pin::pin!(shutdown);
        let mut run = Run::new(&self);
        loop {
            let now = Instant::now();
            run.start_poll(&self, now);
            run.start_flush(&self, now);
            if run.finished(&self, now) {
                break;
            }
            let wake = run.next_wake(&self);
            let sleep = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let (stopping, busy) = (run.stopping, !run.handlers.is_empty());
            let (poll_slot, flush_slot) = (&mut run.poll, &mut run.flush);
            let poll = async {
                match poll_slot.as_mut() {
                    Some((_, fut)) => fut.await,
                    None => std::future::pending().await,
                }
            };
            let flush = async {
                match flush_slot.as_mut() {
                    Some(fut) => fut.await,
                    None => std::future::pending().await,
                }
            };
            let handlers = &mut run.handlers;
            tokio::select! {
                biased;
                _ = &mut shutdown, if !stopping => {
                    tracing::debug!(topic = %self.topic, "consumer stopping");
                    run.stopping = true;
                }
                Some(done) = handlers.join_next_with_id(), if busy => {
                    run.handled(done);
                }
                polled = poll => {
                    let (carried, _) = run.poll.take().expect("a poll was in flight");
                    run.polled(&self, carried, polled, &handler);
                }
                flushed = flush => {
                    run.flush = None;
                    run.flushed(&self, flushed);
                }
                _ = sleep => {}
            }
        }
        match run.fatal {
            Some(e) => Err(e),
            None => Ok(run.stats),
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
/// A poll in flight and the acks it carries.
type PollInFlight = (Vec<Delivery>, BoxFuture<Result<AckAndPollReply, Error>>);

/// A finished `POST /ack` or `POST /nack`, with what it carried.
enum Flushed {
    Acks(Vec<Delivery>, Result<Vec<AckResult>, Error>),
    Nacks(Option<i64>, Vec<Delivery>, Result<Vec<NackResult>, Error>),
}

/// Acks and nacks waiting to be sent.
#[derive(Default)]
struct Pending {
    acks: Vec<Delivery>,
    /// When the oldest waiting ack was made.
    acks_since: Option<Instant>,
    /// By delay in ms (none: the retry policy's).
    nacks: BTreeMap<Option<i64>, Vec<Delivery>>,
}

impl Pending {
    fn ack(&mut self, ids: impl IntoIterator<Item = Delivery>) {
        self.acks.extend(ids);
        if !self.acks.is_empty() && self.acks_since.is_none() {
            self.acks_since = Some(Instant::now());
        }
    }

    fn take_acks(&mut self) -> Vec<Delivery> {
        let n = self.acks.len().min(MAX_ACK_IDS);
        let taken: Vec<Delivery> = self.acks.drain(..n).collect();
        if self.acks.is_empty() {
            self.acks_since = None;
        }
        taken
    }

    fn nack(&mut self, delay: Option<i64>, ids: impl IntoIterator<Item = Delivery>) {
        self.nacks.entry(delay).or_default().extend(ids);
    }

    fn take_nacks(&mut self) -> Option<(Option<i64>, Vec<Delivery>)> {
        let mut entry = self.nacks.first_entry()?;
        let ids = entry.get_mut();
        let n = ids.len().min(MAX_ACK_IDS);
        let taken: Vec<Delivery> = ids.drain(..n).collect();
        let delay = *entry.key();
        if entry.get().is_empty() {
            entry.remove();
        }
        Some((delay, taken))
    }

    fn len(&self) -> usize {
        self.acks.len() + self.nacks.values().map(Vec::len).sum::<usize>()
    }
}

/// The state of one [`Consumer::run`].
struct Run {
    handlers: JoinSet<Outcome>,
    in_hand: HashMap<tokio::task::Id, Delivery>,
    pending: Pending,
    poll: Option<PollInFlight>,
    flush: Option<BoxFuture<Flushed>>,
    /// One backoff for every request: a failed request holds back the
    /// others too (the server is down for all of them).
    backoff: Backoff,
    paused_until: Option<Instant>,
    stopping: bool,
    fatal: Option<Error>,
    /// When a stopping run gives up sending what is pending.
    drain_until: Option<Instant>,
    stats: ConsumerStats,
}

impl Run {
    fn new(c: &Consumer) -> Self {
        Run {
            handlers: JoinSet::new(),
            in_hand: HashMap::new(),
            pending: Pending::default(),
            poll: None,
            flush: None,
            backoff: Backoff::new(c.backoff_min, c.backoff_max),
            paused_until: None,
            stopping: false,
            fatal: None,
            drain_until: None,
            stats: ConsumerStats::default(),
        }
    }

    fn winding_down(&self) -> bool {
        self.stopping || self.fatal.is_some()
    }

    /// Polls when no poll is in flight, a handler slot is free and no
    /// backoff holds it; the poll carries the acks waiting.
    fn start_poll(&mut self, c: &Consumer, now: Instant) {
        let free = c.concurrency.saturating_sub(self.handlers.len());
        if self.poll.is_some() || self.winding_down() || free == 0 || self.paused(now) {
            return;
        }
        let ack = self.pending.take_acks();
        let (client, topic, timeout) = (c.client.clone(), c.topic.clone(), c.poll_timeout);
        let count = free.min(c.batch);
        let carried = ack.clone();
        let fut = async move { client.poll(&topic, &ack, count, timeout).await };
        self.poll = Some((carried, Box::pin(fut)));
    }

    /// Sends nacks at once, and acks no poll will carry soon: a full
    /// request's worth, ones older than `ack_linger`, or all of them when
    /// no more polls go out.
    fn start_flush(&mut self, c: &Consumer, now: Instant) {
        if self.flush.is_some() || self.paused(now) {
            return;
        }
        let client = c.client.clone();
        if let Some((delay, ids)) = self.pending.take_nacks() {
            self.flush = Some(Box::pin(async move {
                let result = client
                    .nack(
                        &ids,
                        delay.map(|ms| Duration::from_millis(ms.max(0) as u64)),
                    )
                    .await;
                Flushed::Nacks(delay, ids, result)
            }));
            return;
        }
        let due = self.pending.acks.len() >= MAX_ACK_IDS
            || self.winding_down()
            || self
                .pending
                .acks_since
                .is_some_and(|t| now >= t + c.ack_linger);
        if due && !self.pending.acks.is_empty() {
            let ids = self.pending.take_acks();
            self.flush = Some(Box::pin(async move {
                let result = client.ack(&ids).await;
                Flushed::Acks(ids, result)
            }));
        }
    }

    /// A stopping run is finished when nothing runs and nothing is pending,
    /// or when its drain time ran out.
    fn finished(&mut self, c: &Consumer, now: Instant) -> bool {
        if !self.winding_down()
            || self.poll.is_some()
            || !self.handlers.is_empty()
            || self.flush.is_some()
        {
            return false;
        }
        let left = self.pending.len();
        if left == 0 {
            return true;
        }
        let until = *self.drain_until.get_or_insert(now + c.drain_timeout);
        if now >= until {
            tracing::warn!(
                topic = %c.topic,
                unsettled = left,
                "consumer stopped with acks and nacks unsent; those messages come back after their ttl"
            );
            self.stats.unsettled = left as u64;
            return true;
        }
        false
    }

    fn paused(&self, now: Instant) -> bool {
        self.paused_until.is_some_and(|t| t > now)
    }

    /// A request failed with an outage: no request goes out for the next
    /// wait. Failures of requests that were in flight together count once.
    fn back_off(&mut self, what: &str, topic: &str, error: &Error) {
        let now = Instant::now();
        if self.paused(now) {
            return;
        }
        let wait = self.backoff.next_wait();
        tracing::warn!(
            topic, error = %chain(error), retry_in_ms = wait.as_millis() as u64,
            "{what} failed; backing off"
        );
        self.paused_until = Some(now + wait);
    }

    /// The next time a timer should wake the loop.
    fn next_wake(&self, c: &Consumer) -> Option<Instant> {
        let linger = self
            .pending
            .acks_since
            .filter(|_| self.flush.is_none())
            .map(|t| t + c.ack_linger);
        [self.paused_until, linger, self.drain_until]
            .into_iter()
            .flatten()
            .min()
    }

    fn handled(&mut self, done: Result<(tokio::task::Id, Outcome), tokio::task::JoinError>) {
        let (task, outcome) = match done {
            Ok((task, outcome)) => (task, outcome),
            Err(e) => {
                self.stats.panicked += 1;
                tracing::error!(error = %e, "a message handler failed; nacking its message");
                (e.id(), Outcome::Retry)
            }
        };
        let Some(id) = self.in_hand.remove(&task) else {
            return;
        };
        match outcome {
            Outcome::Ack => self.pending.ack([id]),
            Outcome::Retry => self.pending.nack(None, [id]),
            Outcome::RetryAfter(d) => self.pending.nack(Some(millis(d)), [id]),
        }
    }

    fn polled<H, F>(
        &mut self,
        c: &Consumer,
        carried: Vec<Delivery>,
        polled: Result<AckAndPollReply, Error>,
        handler: &Arc<H>,
    ) where
        H: Fn(MessageView) -> F + Send + Sync + 'static,
        F: Future<Output = Outcome> + Send + 'static,
    {
        match polled {
            Ok(polled) => {
                self.backoff.reset();
                self.count_acks(&polled.results);
                for msg in polled.messages {
                    self.stats.received += 1;
                    // Acked or nacked with its receipt: a handler that
                    // outlived the ttl cannot settle the next delivery.
                    let delivery = Delivery::from(&msg);
                    let handler = Arc::clone(handler);
                    let task = self.handlers.spawn(async move { handler(msg).await });
                    self.in_hand.insert(task.id(), delivery);
                }
            }
            Err(e) => {
                self.stats.errors += 1;
                self.pending.ack(carried);
                if e.is_retryable() {
                    self.back_off("poll", &c.topic, &e);
                } else {
                    tracing::error!(topic = %c.topic, error = %chain(&e), "poll refused; the consumer stops");
                    self.fatal = Some(e);
                }
            }
        }
    }

    fn flushed(&mut self, c: &Consumer, flushed: Flushed) {
        let failed = match flushed {
            Flushed::Acks(_, Ok(results)) => {
                self.count_acks(&results);
                None
            }
            Flushed::Nacks(_, _, Ok(results)) => {
                for r in &results {
                    match r.result {
                        NackOutcome::NotInFlight
                        | NackOutcome::StaleDelivery
                        | NackOutcome::NotFound => self.stats.refused += 1,
                        _ => self.stats.nacked += 1,
                    }
                }
                None
            }
            Flushed::Acks(ids, Err(e)) => {
                if e.is_retryable() {
                    self.pending.ack(ids);
                }
                Some(e)
            }
            Flushed::Nacks(delay, ids, Err(e)) => {
                if e.is_retryable() {
                    self.pending.nack(delay, ids);
                }
                Some(e)
            }
        };
        match failed {
            None => self.backoff.reset(),
            Some(e) => {
                self.stats.errors += 1;
                if e.is_retryable() {
                    self.back_off("sending acks or nacks", &c.topic, &e);
                } else {
                    tracing::error!(topic = %c.topic, error = %chain(&e), "acks or nacks refused; dropping them");
                }
            }
        }
    }

    fn count_acks(&mut self, results: &[AckResult]) {
        for r in results {
            match r.result {
                AckOutcome::Consumed => self.stats.acked += 1,
                _ => self.stats.refused += 1,
            }
        }
    }
}

/// An error and its causes, for the log.
fn chain(error: &Error) -> String {
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::MessageId;

    #[test]
    fn pending_nacks_go_out_by_delay_and_in_requests_of_100() {
        let mut p = Pending::default();
        p.nack(Some(500), (1..=150).map(|n| Delivery::from(MessageId(n))));
        p.nack(None, [Delivery::from(MessageId(999))]);
        assert_eq!(p.len(), 151);
        let (d, ids) = p.take_nacks().unwrap();
        assert_eq!((d, ids.len()), (None, 1));
        let (d, ids) = p.take_nacks().unwrap();
        assert_eq!((d, ids.len(), ids[0].id), (Some(500), 100, MessageId(1)));
        let (_, ids) = p.take_nacks().unwrap();
        assert_eq!(ids.len(), 50);
        assert!(p.take_nacks().is_none());
    }

    #[test]
    fn pending_acks_remember_their_age_until_taken() {
        let mut p = Pending::default();
        p.ack([]);
        assert!(p.acks_since.is_none());
        p.ack((1..=120).map(|n| Delivery::from(MessageId(n))));
        assert!(p.acks_since.is_some());
        assert_eq!(p.take_acks().len(), 100);
        assert!(p.acks_since.is_some());
        assert_eq!(p.take_acks().len(), 20);
        assert!(p.acks_since.is_none());
    }

    #[test]
    fn results_make_outcomes() {
        assert_eq!(Outcome::from(Ok::<(), ()>(())), Outcome::Ack);
        assert_eq!(Outcome::from(Err::<(), _>("no")), Outcome::Retry);
    }
}

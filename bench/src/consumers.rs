//! The consumers: long-polling tasks that record every receipt and ack it
//! (in the next poll, or one request per message).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// One delivery as an ack names it (the message's id and receipt).
use delayq_client::Delivery as Handout;
use delayq_client::{MessageId, MessageView};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::api::{Api, POLL_TIMEOUT, REQUEST_TIMEOUT};
use crate::cli::AckMode;

pub struct Delivery {
    pub due_ms: i64,
    pub received_ms: f64,
}

impl Delivery {
    pub fn lateness_ms(&self) -> f64 {
        self.received_ms - self.due_ms as f64
    }
}

/// Deliveries seen by the consumers: the first receipt of every id, and the repeats.
#[derive(Default)]
pub struct Received {
    pub first: HashMap<MessageId, Delivery>,
    pub duplicates: u64,
}

struct ConsumerState {
    api: Api,
    topic: String,
    stop: AtomicBool,
    received: Mutex<Received>,
    ack_slots: Arc<Semaphore>,
    ack_concurrency: usize,
    ack: Option<AckMode>,
    poll_errors: AtomicU64,
    ack_errors: AtomicU64,
}

impl ConsumerState {
    fn received(&self) -> MutexGuard<'_, Received> {
        self.received.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn count_ack_errors(&self, refused: u64) {
        if refused > 0 && self.ack_errors.fetch_add(refused, Ordering::Relaxed) < 5 {
            eprintln!("  {refused} acks refused");
        }
    }

    fn record(&self, received_ms: f64, messages: &[MessageView]) {
        let mut received = self.received();
        for message in messages {
            match received.first.entry(message.id) {
                Entry::Occupied(_) => received.duplicates += 1,
                Entry::Vacant(slot) => {
                    slot.insert(Delivery {
                        due_ms: message.due_time,
                        received_ms,
                    });
                }
            }
        }
    }
}

/// What the consumers of a scenario saw once stopped.
pub struct Consumed {
    pub received: Received,
    pub poll_errors: u64,
    pub ack_errors: u64,
}

/// A pool of long-polling consumer tasks on one topic; each acks what it receives.
pub struct Consumers {
    state: Arc<ConsumerState>,
    tasks: Vec<JoinHandle<()>>,
}

impl Consumers {
    pub fn start(
        api: &Api,
        topic: &str,
        count: usize,
        ack_concurrency: usize,
        ack: Option<AckMode>,
    ) -> Self {
        let state = Arc::new(ConsumerState {
            api: api.clone(),
            topic: topic.to_owned(),
            stop: AtomicBool::new(false),
            received: Mutex::default(),
            ack_slots: Arc::new(Semaphore::new(ack_concurrency)),
            ack_concurrency,
            ack,
            poll_errors: AtomicU64::new(0),
            ack_errors: AtomicU64::new(0),
        });
        let tasks = (0..count)
            .map(|i| tokio::spawn(consume(Arc::clone(&state), i)))
            .collect();
        Self { state, tasks }
    }

    /// Waits until `target` distinct messages were received or `deadline` passed, logging
    /// progress every second; returns whether the target was reached.
    pub async fn wait_for(&self, target: usize, deadline: Instant) -> bool {
        let mut next_log = Instant::now() + Duration::from_secs(1);
        loop {
            let received = self.state.received().first.len();
            if received >= target {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            if now >= next_log {
                let left = deadline.saturating_duration_since(now).as_secs_f64();
                eprintln!("  received {received} (deadline in {left:.1} s)");
                next_log = now + Duration::from_secs(1);
            }
            tokio::time::sleep(Duration::from_millis(50).min(deadline - now)).await;
        }
    }

    /// Stops the consumers, waits (bounded) for their last polls and acks, and returns what
    /// they received.
    pub async fn finish(mut self) -> Consumed {
        self.state.stop.store(true, Ordering::Relaxed);
        let tasks = std::mem::take(&mut self.tasks);
        let aborts: Vec<_> = tasks.iter().map(JoinHandle::abort_handle).collect();
        let joined = tokio::time::timeout(
            POLL_TIMEOUT + Duration::from_secs(1),
            futures::future::join_all(tasks),
        )
        .await;
        if joined.is_err() {
            eprintln!("  consumers did not stop in time; aborting them");
            aborts.iter().for_each(tokio::task::AbortHandle::abort);
        }
        let all_slots = u32::try_from(self.state.ack_concurrency).unwrap_or(u32::MAX);
        let acks_done = tokio::time::timeout(
            REQUEST_TIMEOUT + Duration::from_secs(1),
            self.state.ack_slots.acquire_many(all_slots),
        )
        .await;
        if acks_done.is_err() {
            eprintln!("  some acks were still in flight when the bench stopped waiting");
        }

        Consumed {
            received: std::mem::take(&mut *self.state.received()),
            poll_errors: self.state.poll_errors.load(Ordering::Relaxed),
            ack_errors: self.state.ack_errors.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Consumers {
    /// A scenario that fails early must not leave its consumers polling forever.
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

/// One consumer: long-polls until told to stop, records every receipt, hands each message
/// to a bounded pool of ack tasks.
async fn consume(state: Arc<ConsumerState>, consumer: usize) {
    if state.ack == Some(AckMode::Batch) {
        return consume_batches(state, consumer).await;
    }
    while !state.stop.load(Ordering::Relaxed) {
        match state.api.poll(&state.topic, consumer).await {
            Ok((received_ms, messages)) => {
                state.record(received_ms, &messages);
                if state.ack.is_none() {
                    continue;
                }
                for message in messages {
                    let Ok(slot) = Arc::clone(&state.ack_slots).acquire_owned().await else {
                        return;
                    };
                    let state = Arc::clone(&state);
                    tokio::spawn(async move {
                        if let Err(err) = state.api.ack(&message, consumer).await {
                            if state.ack_errors.fetch_add(1, Ordering::Relaxed) < 5 {
                                eprintln!("  ack {}: {err:#}", message.id);
                            }
                        }
                        drop(slot);
                    });
                }
            }
            Err(err) => {
                if state.poll_errors.fetch_add(1, Ordering::Relaxed) < 5 {
                    eprintln!("  poll: {err:#}");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// One consumer that acks each batch in the request polling for the next one; the last
/// batch is acked with `POST /ack` when it stops.
async fn consume_batches(state: Arc<ConsumerState>, consumer: usize) {
    let mut to_ack: Vec<Handout> = Vec::new();
    while !state.stop.load(Ordering::Relaxed) {
        match state
            .api
            .ack_and_poll(&state.topic, consumer, &to_ack)
            .await
        {
            Ok((received_ms, messages, refused)) => {
                state.record(received_ms, &messages);
                state.count_ack_errors(refused);
                to_ack = messages.iter().map(delayq_client::Delivery::from).collect();
            }
            Err(err) => {
                if state.poll_errors.fetch_add(1, Ordering::Relaxed) < 5 {
                    eprintln!("  poll: {err:#}");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    if !to_ack.is_empty() {
        match state.api.ack_batch(&to_ack, consumer).await {
            Ok(refused) => state.count_ack_errors(refused),
            Err(err) => {
                state.count_ack_errors(to_ack.len() as u64);
                eprintln!("  ack: {err:#}");
            }
        }
    }
}

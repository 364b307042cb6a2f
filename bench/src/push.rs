//! Pushing a scenario's messages: what each one is, and the batches in
//! flight.

use std::time::{Duration, Instant};

use anyhow::Result;
use delayq_client::{MessageId, NewMessage};
use futures::{stream, StreamExt, TryStreamExt};

use crate::api::Api;
use crate::report::rate;
use crate::time::now_ms;

/// Size of every message body, in bytes.
const BODY_LEN: usize = 100;
/// `ttl` of every message, in ms.
const TTL_MS: u64 = 30_000;

/// Message `index` of a scenario: its body is the index, zero-padded to exactly BODY_LEN
/// bytes; due at once until the scenario sets its delay or delivery time.
pub fn bench_message(topic: &str, index: usize) -> NewMessage {
    NewMessage::new(topic, format!("{index:0BODY_LEN$}"))
        .priority(0)
        .ttl(Duration::from_millis(TTL_MS))
}

/// The time `epoch_ms` milliseconds after the Unix epoch.
pub fn epoch(epoch_ms: i64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_millis(epoch_ms.max(0) as u64)
}

pub struct PushReply {
    /// Server ids, in push order.
    pub ids: Vec<MessageId>,
    pub elapsed: Duration,
    /// Epoch ms at which the last batch was acknowledged.
    pub ended_ms: f64,
}

impl PushReply {
    pub fn rate(&self) -> f64 {
        rate(self.ids.len(), self.elapsed.as_secs_f64())
    }
}

/// Pushes `messages` in batches of `batch`, `pushers` batches in flight.
pub async fn push_all(
    api: &Api,
    messages: Vec<NewMessage>,
    batch: usize,
    pushers: usize,
) -> Result<PushReply> {
    eprintln!(
        "pushing {} messages ({batch} per batch, {pushers} in flight)",
        messages.len()
    );
    let started = Instant::now();
    let batches: Vec<Vec<MessageId>> = stream::iter(messages.chunks(batch))
        .map(|chunk| api.push_batch(chunk))
        .buffered(pushers)
        .try_collect()
        .await?;
    let pushed = PushReply {
        ids: batches.concat(),
        elapsed: started.elapsed(),
        ended_ms: now_ms(),
    };
    eprintln!(
        "pushed {} in {:.2} s ({:.0}/s)",
        pushed.ids.len(),
        pushed.elapsed.as_secs_f64(),
        pushed.rate()
    );
    Ok(pushed)
}

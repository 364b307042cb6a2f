//! Consumers: long-poll a topic, ack.

use std::collections::BTreeMap;
use std::time::Duration;

use actix_web::{web, HttpResponse};
use serde_json::json;

use super::{int_param, parse_id, AppState, Query};
use crate::actors::router::Touch;
use crate::error::ApiError;
use crate::journal::StatusChange;
use crate::message::{now_ms, valid_topic, MessageView, Status};
use crate::redis::schedule::{AckResult, Claimed};

pub const MAX_COUNT: u64 = 100;
pub const MAX_TIMEOUT_S: u64 = 300;
/// A waiting long poll looks at the ready queues at least this often, so a
/// lost notification (another node's, over pub/sub) costs at most this.
const RECHECK: Duration = Duration::from_secs(1);

/// `GET /get/{topic}?timeout=S&count=N`: answers as soon as messages are
/// ready, or with an empty list when the timeout passes.
pub async fn get(
    state: web::Data<AppState>,
    topic: web::Path<String>,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    let topic = topic.into_inner();
    if !valid_topic(&topic) {
        return Err(ApiError::invalid(
            "invalid_topic",
            "topic must be 1 to 128 characters of A-Z a-z 0-9 . _ : -",
        ));
    }
    let timeout = int_param(&q, "timeout", 30, 0..=MAX_TIMEOUT_S)?;
    let count = int_param(&q, "count", 1, 1..=MAX_COUNT)? as usize;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    let notify = state.waiters.topic(&topic);
    loop {
        // Listen before looking, so a message made ready in between wakes us.
        let woken = notify.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let claimed = claim(&state, &topic, count).await?;
        if !claimed.is_empty() {
            return Ok(deliver(&state, claimed));
        }
        let recheck = (tokio::time::Instant::now() + RECHECK).min(deadline);
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep_until(recheck), if recheck < deadline => {}
            _ = tokio::time::sleep_until(deadline) => {
                return Ok(HttpResponse::Ok().json(json!({ "messages": [] })));
            }
        }
    }
}

async fn claim(state: &AppState, topic: &str, count: usize) -> Result<Vec<Claimed>, ApiError> {
    // The first `count` ready messages across shards decide how many to take
    // from each shard's queue head. Other consumers may empty a queue in
    // between: look again while the queues are not empty.
    for _ in 0..8 {
        let picks = state.redis.peek_ready(topic, count).await?;
        if picks.is_empty() {
            return Ok(Vec::new());
        }
        let mut per_shard: BTreeMap<u32, usize> = BTreeMap::new();
        for (_, shard, _) in &picks {
            *per_shard.entry(*shard).or_default() += 1;
        }
        let claimed = state.redis.claim(topic, &per_shard, now_ms()).await?;
        if !claimed.is_empty() {
            return Ok(claimed);
        }
    }
    Ok(Vec::new())
}

fn deliver(state: &AppState, claimed: Vec<Claimed>) -> HttpResponse {
    let now = now_ms();
    let keys = state.redis.keys();
    let mut changes = Vec::with_capacity(claimed.len());
    let mut views = Vec::with_capacity(claimed.len());
    // Each shard's actor must wake for the earliest ack deadline handed out.
    let mut deadlines: BTreeMap<u32, i64> = BTreeMap::new();
    let mut inflight_names: BTreeMap<u32, std::sync::Arc<str>> = BTreeMap::new();
    for c in claimed {
        let deadline = deadlines.entry(c.shard).or_insert(i64::MAX);
        *deadline = (*deadline).min(now + c.message.ttl);
        changes.push(StatusChange {
            id: c.message.id,
            status: Status::Consuming,
            attempts: Some(c.attempts),
            at: c.at,
            shard: inflight_names
                .entry(c.shard)
                .or_insert_with(|| keys.inflight(c.shard).into())
                .clone(),
        });
        views.push(MessageView {
            message: c.message,
            status: Status::Consuming,
            attempts: c.attempts,
        });
    }
    for (shard, at_ms) in deadlines {
        state.router.do_send(Touch { shard, at_ms });
    }
    state.journal.record(changes);
    HttpResponse::Ok().json(json!({ "messages": views }))
}

/// `POST /ack/{id}`: the message is consumed.
pub async fn ack(
    state: web::Data<AppState>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&id)?;
    match state.redis.ack(id).await? {
        AckResult::Acked { attempts } => {
            state
                .record_end(id, Status::Consumed, attempts, |k, s| k.inflight(s))
                .await?;
            Ok(HttpResponse::Ok().json(json!({ "id": id, "status": Status::Consumed })))
        }
        AckResult::NotInFlight => Err(ApiError::Conflict {
            code: "not_in_flight",
            message: format!(
                "message {id} has not been delivered yet; only a delivered message can be acked"
            ),
        }),
        AckResult::Absent => match state.journal.find(id).await? {
            None => Err(ApiError::NotFound {
                code: "not_found",
                message: format!("no message {id}"),
            }),
            // Acking twice is harmless.
            Some((row, _)) if row.status() == Status::Consumed => {
                Ok(HttpResponse::Ok().json(json!({ "id": id, "status": Status::Consumed })))
            }
            // Handed out, and Redis no longer holds it: an earlier ack got as
            // far as Redis but was answered 503 before the journal committed
            // (or Redis lost its data). The consumer is done with it.
            Some((row, _)) if row.status() == Status::Consuming => {
                state
                    .record_end(id, Status::Consumed, row.attempts, |k, s| k.inflight(s))
                    .await?;
                Ok(HttpResponse::Ok().json(json!({ "id": id, "status": Status::Consumed })))
            }
            Some((row, _)) => Err(ApiError::Conflict {
                code: "not_in_flight",
                message: format!("message {id} is {} and cannot be acked", row.status()),
            }),
        },
    }
}

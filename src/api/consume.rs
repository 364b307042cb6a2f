//! Consumers: long-poll a topic, ack.

use std::collections::BTreeMap;
use std::time::Duration;

use actix_web::{web, HttpResponse};
use serde_json::json;

use super::body::JsonBody;
use super::{batch_ids, check_topic, int_param, parse_id, AppState, Query};
use crate::actors::router::Touch;
use crate::actors::router::Touch as WakeShard;
use crate::error::ApiError;
use crate::error::ShardError;
use crate::journal::StatusChange;
use crate::message::{now_ms, MessageId, MessageView, Status};
use crate::redis::record;
use crate::redis::schedule::{AckResult, Advanced, AfterFailure, Claimed, NackResult};
use crate::repeat::Occurrence;
use crate::retry::MAX_RETRY_MS;

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
    check_topic(&topic)?;
    let timeout = int_param(&q, "timeout", 30, 0..=MAX_TIMEOUT_S)?;
    let count = int_param(&q, "count", 1, 1..=MAX_COUNT)? as usize;
    let messages = poll(&state, &topic, count, timeout).await?;
    Ok(HttpResponse::Ok().json(json!({ "messages": messages })))
}

/// Waits up to `timeout_s` for ready messages of `topic` and hands out up
/// to `count` of them; an empty list when none came.
async fn poll(
    state: &AppState,
    topic: &str,
    count: usize,
    timeout_s: u64,
) -> Result<serde_json::Value, ApiError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout_s);
    let notify = state.waiters.topic(topic);
    loop {
        // Listen before looking, so a message made ready in between wakes us.
        let woken = notify.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let claimed = claim(state, topic, count).await?;
        if !claimed.is_empty() {
            return Ok(deliver(state, claimed));
        }
        let recheck = (tokio::time::Instant::now() + RECHECK).min(deadline);
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep_until(recheck), if recheck < deadline => {}
            _ = tokio::time::sleep_until(deadline) => return Ok(json!([])),
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

fn deliver(state: &AppState, claimed: Vec<Claimed>) -> serde_json::Value {
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
            due: None,
            shard: inflight_names
                .entry(c.shard)
                .or_insert_with(|| keys.inflight(c.shard).into())
                .clone(),
            occurrence: None,
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
    json!(views)
}

/// What acking one id did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckOutcome {
    /// Consumed now, or before (acking twice is harmless).
    Consumed,
    /// A recurring message's occurrence is consumed: the message waits for
    /// its next occurrence (or it was acked before and waits already).
    Next(Occurrence),
    /// Not handed out: scheduled, ready for its first delivery, or ended
    /// some other way (the status says which).
    NotInFlight(Option<Status>),
    NotFound,
}

impl AckOutcome {
    fn is_consumed(self) -> bool {
        matches!(self, AckOutcome::Consumed | AckOutcome::Next(_))
    }

    fn to_json(self, id: MessageId) -> serde_json::Value {
        match self {
            AckOutcome::Consumed => json!({ "id": id, "result": "consumed" }),
            AckOutcome::Next(next) => {
                json!({ "id": id, "result": "consumed", "nextOccurrence": next })
            }
            AckOutcome::NotInFlight(status) => json!({
                "id": id,
                "result": "not_in_flight",
                "status": status,
            }),
            AckOutcome::NotFound => json!({ "id": id, "result": "not_found" }),
        }
    }
}

/// When an ack is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckJournal {
    /// Once the journal committed it.
    Committed,
    /// Once Redis let go of the message; the journal row follows within
    /// milliseconds, with the other status changes.
    Queued,
}

/// Acks messages: one script call per shard and one journal commit for the
/// whole call. With [`AckJournal::Committed`] it answers once every consumed
/// message is durable; on an error nothing is lost: Redis may have let go of
/// some of them, and acking them again finds them Consuming in the journal
/// and completes the ack.
async fn ack_ids(
    state: &AppState,
    ids: &[MessageId],
    journal: AckJournal,
) -> Result<Vec<AckOutcome>, ApiError> {
    let keys = state.redis.keys();
    let now = now_ms();
    let consumed = |id: MessageId, attempts: i32, at: i64| StatusChange {
        id,
        status: Status::Consumed,
        attempts: Some(attempts),
        at,
        due: None,
        shard: keys.inflight(keys.shard_of(id)).into(),
        occurrence: None,
    };
    // A recurring message moved on to an occurrence: Delaying, no attempts.
    let moved_on = |id: MessageId, next: Occurrence, due: i64, at: i64| StatusChange {
        id,
        status: Status::Delaying,
        attempts: Some(0),
        at,
        due: Some(due),
        shard: keys.inflight(keys.shard_of(id)).into(),
        occurrence: Some(next),
    };
    let mut outcomes = vec![AckOutcome::NotInFlight(None); ids.len()];
    let mut changes = Vec::new();
    let mut pending: Vec<usize> = (0..ids.len()).collect();
    // A recurring message is read, then moved on only if its record is
    // still the one read; one changed in between (its deadline passed, its
    // series was cancelled) is acked again. Rounds after the first are rare.
    for _ in 0..ADVANCE_ROUNDS {
        if pending.is_empty() {
            break;
        }
        let round: Vec<MessageId> = pending.iter().map(|&i| ids[i]).collect();
        let results = state.redis.ack_many(&round).await?;
        // (index, attempts, (id, record read, next occurrence))
        let mut advancing = Vec::new();
        for (&i, result) in pending.iter().zip(results) {
            let id = ids[i];
            outcomes[i] = match result {
                AckResult::Acked { attempts } => {
                    changes.push(consumed(id, attempts, now));
                    AckOutcome::Consumed
                }
                AckResult::Recurring { attempts, record } => {
                    let (_, msg) = record::decode(&record).map_err(ShardError::BadRecord)?;
                    advancing.push((i, attempts, (id, record, msg.next_occurrence())));
                    continue;
                }
                AckResult::NotInFlight {
                    recurring: Some(record),
                } => {
                    let (attempts, msg) = record::decode(&record).map_err(ShardError::BadRecord)?;
                    match msg.occurrence {
                        // Waiting for a later occurrence, not handed out yet:
                        // this acks an earlier one again (its answer was
                        // lost). The journal catches up with the occurrence.
                        Some(occ) if attempts == 0 && occ.number > 1 => {
                            changes.push(moved_on(id, occ, msg.due_time, now));
                            AckOutcome::Next(occ)
                        }
                        _ => AckOutcome::NotInFlight(None),
                    }
                }
                AckResult::NotInFlight { recurring: None } => AckOutcome::NotInFlight(None),
                // Redis does not hold it: the journal knows how its life went.
                AckResult::Absent | AckResult::Finished => match state.journal.find(id).await? {
                    None => AckOutcome::NotFound,
                    Some((row, _)) => match row.status() {
                        Status::Consumed => AckOutcome::Consumed,
                        // Handed out, and Redis no longer holds it: an earlier
                        // ack got as far as Redis but was answered 503 before the
                        // journal committed (or Redis lost its data). The
                        // consumer is done with it.
                        Status::Consuming => {
                            changes.push(consumed(id, row.attempts, now));
                            AckOutcome::Consumed
                        }
                        // Redis let go of it lately (its tombstone) and the
                        // journal never heard why: an earlier ack reached Redis
                        // and the node stopped before the journal recorded the
                        // delivery and the ack. Only a consumer that was handed
                        // the message knows its id to ack it; the journal ends
                        // Consumed, so no restore delivers it again.
                        Status::WaitPut | Status::Delaying | Status::Ready
                            if result == AckResult::Finished =>
                        {
                            changes.push(consumed(id, row.attempts.max(1), now));
                            AckOutcome::Consumed
                        }
                        other => AckOutcome::NotInFlight(Some(other)),
                    },
                },
            };
        }
        pending.clear();
        if advancing.is_empty() {
            break;
        }
        let items: Vec<_> = advancing.iter().map(|(_, _, item)| item.clone()).collect();
        let advanced = state.redis.advance_many(&items).await?;
        for ((i, attempts, (id, _, next)), done) in advancing.into_iter().zip(advanced) {
            match (done, next) {
                (Advanced::Next { at }, Some(next)) => {
                    let occ = next.occurrence.expect("a next occurrence has its number");
                    changes.push(moved_on(id, occ, next.due_time, at));
                    state.router.do_send(WakeShard {
                        shard: keys.shard_of(id),
                        at_ms: next.due_time,
                    });
                    outcomes[i] = AckOutcome::Next(occ);
                }
                (Advanced::Next { at } | Advanced::Ended { at }, _) => {
                    changes.push(consumed(id, attempts, at));
                    outcomes[i] = AckOutcome::Consumed;
                }
                (Advanced::Changed, _) => pending.push(i),
            }
        }
    }
    match journal {
        AckJournal::Committed => state.journal.record_durable(changes).await?,
        AckJournal::Queued => state.journal.record(changes),
    }
    Ok(outcomes)
}

/// Rounds of reading and moving on a recurring message an ack makes before
/// it answers `not_in_flight` (its record kept changing under it).
const ADVANCE_ROUNDS: usize = 4;

/// `POST /ack/{id}`: the message is consumed.
pub async fn ack(
    state: web::Data<AppState>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&id)?;
    match ack_ids(&state, &[id], AckJournal::Committed).await?[0] {
        AckOutcome::Consumed => {
            Ok(HttpResponse::Ok().json(json!({ "id": id, "status": Status::Consumed })))
        }
        AckOutcome::Next(next) => Ok(HttpResponse::Ok().json(json!({
            "id": id,
            "status": Status::Delaying,
            "nextOccurrence": next,
        }))),
        AckOutcome::NotInFlight(None) => Err(ApiError::Conflict {
            code: "not_in_flight",
            message: format!(
                "message {id} has not been delivered yet; only a delivered message can be acked"
            ),
        }),
        AckOutcome::NotInFlight(Some(status)) => Err(ApiError::Conflict {
            code: "not_in_flight",
            message: format!("message {id} is {status} and cannot be acked"),
        }),
        AckOutcome::NotFound => Err(ApiError::NotFound {
            code: "not_found",
            message: format!("no message {id}"),
        }),
    }
}

fn ack_report(ids: &[MessageId], outcomes: &[AckOutcome]) -> serde_json::Value {
    let acked = outcomes.iter().filter(|o| o.is_consumed()).count();
    let results: Vec<serde_json::Value> = ids
        .iter()
        .zip(outcomes)
        .map(|(id, o)| o.to_json(*id))
        .collect();
    json!({ "acked": acked, "results": results })
}

/// `POST /ack` with `{"ids": [...]}`: acks up to 100 messages in one journal
/// commit; answers a result per id (`consumed`, `not_in_flight` with the
/// message's status, `not_found`).
pub async fn ack_batch(
    state: web::Data<AppState>,
    body: JsonBody,
) -> Result<HttpResponse, ApiError> {
    let body = object(&body, &["ids"])?;
    let ids = batch_ids("ids", body.get("ids"), 1..=MAX_COUNT as usize)?;
    let outcomes = ack_ids(&state, &ids, AckJournal::Committed).await?;
    Ok(HttpResponse::Ok().json(ack_report(&ids, &outcomes)))
}

/// `POST /get/{topic}` with `{"ack": [...], "count": N, "timeout": S}`: acks
/// the previous batch, then long-polls like `GET /get/{topic}`, in one round
/// trip. The answer holds the messages and the ack results.
///
/// These acks do not wait for the journal's commit before the poll: Redis
/// lets go of the messages (and keeps their tombstones) before the answer,
/// and the journal records them within milliseconds with the other status
/// changes, retrying until it has. Waiting for that commit, under load, made
/// every consumer loop idle for tens of milliseconds per batch while
/// messages fell due. What a crash between the two can cost is a redelivery
/// (the journal still says Consuming; only a rebuild of Redis from the
/// journal would hand it out again), never a loss. `POST /ack` answers after
/// the commit.
pub async fn ack_and_get(
    state: web::Data<AppState>,
    topic: web::Path<String>,
    body: JsonBody,
) -> Result<HttpResponse, ApiError> {
    let topic = topic.into_inner();
    check_topic(&topic)?;
    let body = object(&body, &["ack", "count", "timeout"])?;
    let ids = batch_ids("ack", body.get("ack"), 0..=MAX_COUNT as usize)?;
    let count = body_int(body, "count", 1, 1..=MAX_COUNT)? as usize;
    let timeout = body_int(body, "timeout", 30, 0..=MAX_TIMEOUT_S)?;
    let outcomes = ack_ids(&state, &ids, AckJournal::Queued).await?;
    let messages = poll(&state, &topic, count, timeout).await?;
    let mut report = ack_report(&ids, &outcomes);
    report["messages"] = messages;
    Ok(HttpResponse::Ok().json(report))
}

fn object<'a>(
    body: &'a serde_json::Value,
    fields: &[&str],
) -> Result<&'a serde_json::Map<String, serde_json::Value>, ApiError> {
    let Some(map) = body.as_object() else {
        return Err(ApiError::invalid(
            "invalid_body",
            "the request body must be a JSON object",
        ));
    };
    if let Some(unknown) = map.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(ApiError::invalid(
            "unknown_field",
            format!("unknown field {unknown:?}; expected {}", fields.join(", ")),
        ));
    }
    Ok(map)
}

fn body_int(
    body: &serde_json::Map<String, serde_json::Value>,
    field: &str,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, ApiError> {
    match body.get(field) {
        None | Some(serde_json::Value::Null) => Ok(default),
        Some(v) => match v.as_u64().filter(|n| range.contains(n)) {
            Some(n) => Ok(n),
            None => Err(ApiError::invalid(
                "invalid_parameter",
                format!(
                    "{field} must be a whole number from {} to {}, got {v}",
                    range.start(),
                    range.end()
                ),
            )),
        },
    }
}

/// What nacking one id did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NackOutcome {
    /// The delivery failed: the message is ready again, scheduled again,
    /// or dead after its last attempt.
    Failed {
        attempts: i32,
        then: AfterFailure,
    },
    /// Not handed out, or ended (the status says how, when known).
    NotInFlight(Option<Status>),
    NotFound,
}

impl NackOutcome {
    fn to_json(self, id: MessageId) -> serde_json::Value {
        match self {
            NackOutcome::Failed { attempts, then } => {
                let mut v = json!({
                    "id": id,
                    "result": match then {
                        AfterFailure::Ready => "ready",
                        AfterFailure::Delaying { .. } => "delaying",
                        AfterFailure::Dead => "dead",
                        AfterFailure::Stopped => "deleted",
                    },
                    "status": then.status(),
                    "attempts": attempts,
                });
                if let AfterFailure::Delaying { due } = then {
                    v["dueTime"] = json!(due);
                }
                v
            }
            NackOutcome::NotInFlight(status) => json!({
                "id": id,
                "result": "not_in_flight",
                "status": status,
            }),
            NackOutcome::NotFound => json!({ "id": id, "result": "not_found" }),
        }
    }
}

/// Gives back delivered messages, each with its own wait (`None`: its retry
/// policy), and answers once the journal committed what became of them.
async fn nack_ids(
    state: &AppState,
    nacks: &[(MessageId, Option<i64>)],
) -> Result<Vec<NackOutcome>, ApiError> {
    let results = state.redis.nack_many(nacks).await?;
    let keys = state.redis.keys();
    let mut outcomes = Vec::with_capacity(nacks.len());
    let mut changes = Vec::new();
    let mut ready_topics: Vec<String> = Vec::new();
    for (&(id, _), result) in nacks.iter().zip(results) {
        outcomes.push(match result {
            NackResult::Failed {
                attempts,
                then,
                at,
                topic,
            } => {
                let shard = keys.shard_of(id);
                match then {
                    AfterFailure::Ready => ready_topics.push(topic),
                    AfterFailure::Delaying { due } => state.router.do_send(WakeShard {
                        shard,
                        at_ms: due,
                    }),
                    AfterFailure::Dead => {
                        tracing::info!(id = %id, topic = %topic, attempts, "nacked on its last attempt; the message is dead")
                    }
                    AfterFailure::Stopped => {}
                }
                changes.push(StatusChange {
                    id,
                    status: then.status(),
                    attempts: Some(attempts),
                    at,
                    due: Some(match then {
                        AfterFailure::Delaying { due } => due,
                        _ => at,
                    }),
                    shard: keys.inflight(shard).into(),
                    occurrence: None,
                });
                NackOutcome::Failed { attempts, then }
            }
            NackResult::NotInFlight => NackOutcome::NotInFlight(None),
            NackResult::Absent => match state.journal.find(id).await? {
                None => NackOutcome::NotFound,
                Some((row, _)) => NackOutcome::NotInFlight(Some(row.status())),
            },
        });
    }
    ready_topics.sort_unstable();
    ready_topics.dedup();
    for topic in &ready_topics {
        state.waiters.notify(topic);
    }
    state.journal.record_durable(changes).await?;
    Ok(outcomes)
}

fn nack_delay(raw: Option<&serde_json::Value>) -> Result<Option<i64>, ApiError> {
    match raw {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => match v.as_i64() {
            Some(ms) if (0..=MAX_RETRY_MS).contains(&ms) => Ok(Some(ms)),
            _ => Err(ApiError::invalid(
                "invalid_delay",
                format!("delay must be 0 to {MAX_RETRY_MS} ms (one day), got {v}"),
            )),
        },
    }
}

/// `POST /nack/{id}?delay=ms`: the consumer could not handle the message.
/// It comes back after `delay`, or after its retry policy's wait without
/// one; on its last attempt it is dead.
pub async fn nack(
    state: web::Data<AppState>,
    id: web::Path<String>,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&id)?;
    if let Some(unknown) = q.keys().find(|k| k.as_str() != "delay") {
        return Err(ApiError::invalid(
            "unknown_parameter",
            format!("unknown parameter {unknown:?}; POST /nack/{{id}} takes delay"),
        ));
    }
    let delay = match q.get("delay") {
        None => None,
        Some(raw) => nack_delay(Some(
            &raw.parse::<i64>()
                .map(serde_json::Value::from)
                .map_err(|_| {
                    ApiError::invalid(
                        "invalid_delay",
                        format!("delay must be 0 to {MAX_RETRY_MS} ms (one day), got '{raw}'"),
                    )
                })?,
        ))?,
    };
    match nack_ids(&state, &[(id, delay)]).await?[0] {
        outcome @ NackOutcome::Failed { .. } => Ok(HttpResponse::Ok().json(outcome.to_json(id))),
        NackOutcome::NotInFlight(None) => Err(ApiError::Conflict {
            code: "not_in_flight",
            message: format!(
                "message {id} is not handed out to a consumer (not delivered yet, or its ack deadline passed); only a delivered message can be nacked"
            ),
        }),
        NackOutcome::NotInFlight(Some(status)) => Err(ApiError::Conflict {
            code: "not_in_flight",
            message: format!("message {id} is {status} and cannot be nacked"),
        }),
        NackOutcome::NotFound => Err(ApiError::NotFound {
            code: "not_found",
            message: format!("no message {id}"),
        }),
    }
}

/// `POST /nack` with `{"ids": [...], "delay": ms}` (delay optional): nacks up
/// to 100 messages in one journal commit; a result per id (`ready`,
/// `delaying` with `dueTime`, `dead`, `not_in_flight`, `not_found`).
pub async fn nack_batch(
    state: web::Data<AppState>,
    body: JsonBody,
) -> Result<HttpResponse, ApiError> {
    let body = object(&body, &["ids", "delay"])?;
    let ids = batch_ids("ids", body.get("ids"), 1..=MAX_COUNT as usize)?;
    let delay = nack_delay(body.get("delay"))?;
    let nacks: Vec<(MessageId, Option<i64>)> = ids.iter().map(|&id| (id, delay)).collect();
    let outcomes = nack_ids(&state, &nacks).await?;
    let nacked = outcomes
        .iter()
        .filter(|o| matches!(o, NackOutcome::Failed { .. }))
        .count();
    let results: Vec<serde_json::Value> = ids
        .iter()
        .zip(&outcomes)
        .map(|(id, o)| o.to_json(*id))
        .collect();
    Ok(HttpResponse::Ok().json(json!({ "nacked": nacked, "results": results })))
}

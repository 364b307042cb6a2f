//! Consumers' routes: long-poll a topic, ack, nack. The rules are in
//! [`crate::queue::consume`]; these parse and render.

use actix_web::{web, HttpResponse};
use delayq_proto as proto;

use super::body::JsonBody;
use super::parse::{batch_deliveries, check_topic, int_param, parse_id, parse_receipt, Query};
use super::schema::{
    AckAndGetRequest, AckAndPollReply, AckBatchReply, AckReply, AckRequest, AckResult,
    NackBatchReply, NackRequest, NackResult, PollReply,
};
use super::state::AppState;
use crate::api::error::ApiError;
use crate::api::error::ErrorBody;
use crate::error::ErrorCode;
use crate::message::{whole_number, MessageId, Status};
use crate::queue::consume::{self, Ack, AckJournal, AckOutcome, NackOutcome};
use crate::redis::schedule::AfterFailure;
use crate::retry::MAX_RETRY_MS;

pub const MAX_COUNT: u64 = 100;
pub const MAX_TIMEOUT_S: u64 = 300;

/// `GET /get/{topic}?timeout=S&count=N`: answers as soon as messages are
/// ready, or with an empty list when the timeout passes.
#[utoipa::path(
    get,
    path = "/get/{topic}",
    tag = "consume",
    params(
        ("topic" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,128}$", example = "sms"),
        ("timeout" = Option<u64>, Query, minimum = 0, maximum = 300, description = "Seconds to wait for a message (default 30)"),
        ("count" = Option<u64>, Query, minimum = 1, maximum = 100, description = "Most messages to hand out (default 1)"),
    ),
    responses(
        (status = 200, description = "The messages handed out, each now `Consuming`; empty when the timeout passed", body = PollReply),
        (status = 400, description = "A bad topic or parameter", body = ErrorBody),
        (status = 503, description = "Redis or the journal unavailable", body = ErrorBody),
    ),
)]
pub async fn get(
    state: web::Data<AppState>,
    topic: web::Path<String>,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    let topic = topic.into_inner();
    check_topic(&topic)?;
    let timeout = int_param(&q, "timeout", 30, 0..=MAX_TIMEOUT_S)?;
    let count = int_param(&q, "count", 1, 1..=MAX_COUNT)? as usize;
    let messages = consume::poll(&state.queue, &topic, count, timeout).await?;
    Ok(HttpResponse::Ok().json(PollReply { messages }))
}

/// `POST /ack/{id}[?receipt=R][&occurrence=N]`: the message is consumed, or,
/// with the receipt of a delivery other than the current one, refused (409
/// `stale_delivery`). A recurring message: occurrence N, or the one handed
/// out, is consumed. With the receipt of the delivery acked, an ack of any
/// other delivery than the one in hand (or the last one, when its deadline
/// passed and nobody holds it) is refused and changes nothing; without one
/// it applies to the current delivery.
#[utoipa::path(
    post,
    path = "/ack/{id}",
    tag = "consume",
    params(
        ("id" = MessageId, Path),
        ("occurrence" = Option<u64>, Query, minimum = 1, maximum = 2147483647, description = "A recurring message: the occurrence acked"),
        ("receipt" = Option<String>, Query, description = "The receipt the delivery was handed out with"),
    ),
    responses(
        (status = 200, description = "Consumed: applied in Redis, its end kept there until the journal has it (within milliseconds), so it never comes undone while Redis keeps its data; acking twice is fine. A recurring message with occurrences to come is `Delaying` for the next", body = AckReply),
        (status = 400, description = "A bad id or parameter", body = ErrorBody),
        (status = 404, description = "No such message", body = ErrorBody),
        (status = 409, description = "Not handed out to a consumer (`not_in_flight`), or the receipt names another delivery (`stale_delivery`)", body = ErrorBody),
        (status = 503, description = "Redis unavailable; or Redis no longer holds the message (an unknown id, one acked long ago) and the journal, which alone can tell what became of it, did not answer within 2 s (`journal_unavailable`; nothing changed, try again)", body = ErrorBody),
    ),
)]
pub async fn ack(
    state: web::Data<AppState>,
    id: web::Path<String>,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&id)?;
    // A recurring message's consumer may say which occurrence it acks.
    let occurrence = match q.get("occurrence") {
        None => None,
        Some(_) => Some(int_param(&q, "occurrence", 1, 1..=i32::MAX as u64)? as i32),
    };
    let receipt = q.get("receipt").map(|r| parse_receipt(r)).transpose()?;
    let acks = [Ack {
        id,
        occurrence,
        receipt,
    }];
    match state.queue.ack_one(acks[0]).await? {
        AckOutcome::Consumed => Ok(HttpResponse::Ok().json(AckReply {
            id,
            status: Status::Consumed,
            next_occurrence: None,
        })),
        AckOutcome::Next(next) => Ok(HttpResponse::Ok().json(AckReply {
            id,
            status: Status::Delaying,
            next_occurrence: Some(next),
        })),
        AckOutcome::Deleted => Ok(HttpResponse::Ok().json(AckReply {
            id,
            status: Status::Deleted,
            next_occurrence: None,
        })),
        AckOutcome::NotInFlight(None) => Err(ApiError::Conflict {
            code: ErrorCode::NotInFlight,
            message: format!(
                "message {id} is not in flight: not delivered yet, or a delivery Redis lost \
                 (a recurring message's occurrence is then delivered again); only a delivered \
                 message can be acked"
            ),
        }),
        AckOutcome::NotInFlight(Some(status)) => Err(ApiError::Conflict {
            code: ErrorCode::NotInFlight,
            message: not_handed_out(id, status, "acked"),
        }),
        AckOutcome::Stale { now, earlier } => Err(stale(id, now, earlier)),
        AckOutcome::NotFound => Err(ApiError::NotFound {
            code: ErrorCode::NotFound,
            message: format!("no message {id}"),
        }),
    }
}

/// 409 `stale_delivery`: the receipt names another delivery than the
/// message's current one: an earlier one (`earlier`), or none it was
/// handed out with.
fn stale(id: MessageId, now: Status, earlier: bool) -> ApiError {
    let whose = match now {
        Status::Consuming => "is handed to another consumer now",
        Status::Delaying => "is scheduled again (Delaying) after a later delivery",
        Status::Consumed => "is consumed",
        _ => "is waiting (Ready) after a later delivery",
    };
    let receipt = if earlier {
        "the receipt names an earlier delivery, which ended"
    } else {
        "the receipt names no delivery this message was handed out with (another message's, or altered)"
    };
    ApiError::Conflict {
        code: ErrorCode::StaleDelivery,
        message: format!("message {id} {whose}: {receipt}; nothing changed (status {now})"),
    }
}

/// Why a message not handed out cannot be acked or nacked, by its status.
fn not_handed_out(id: MessageId, status: Status, what: &str) -> String {
    match status {
        Status::Delaying | Status::Ready | Status::WaitPut => format!(
            "message {id} is {status}: not handed out to a consumer (not delivered yet, or waiting for its next delivery), so it cannot be {what}"
        ),
        _ => format!("message {id} is {status} and cannot be {what}"),
    }
}

fn ack_report(ids: &[MessageId], outcomes: &[AckOutcome]) -> AckBatchReply {
    let acked = outcomes.iter().filter(|o| o.is_consumed()).count();
    let results = ids
        .iter()
        .zip(outcomes)
        .map(|(id, o)| ack_result(*o, *id))
        .collect();
    AckBatchReply { acked, results }
}

/// `POST /ack` with `{"ids": [...]}`: acks up to 100 messages in one journal
/// commit; answers a result per id (`consumed`, `not_in_flight` with the
/// message's status, `not_found`).
#[utoipa::path(
    post,
    path = "/ack",
    tag = "consume",
    request_body = AckRequest,
    responses(
        (status = 200, description = "A result per id, in order", body = AckBatchReply),
        (status = 400, description = "A bad body or id", body = ErrorBody),
        (status = 413, description = "The request is too large", body = ErrorBody),
        (status = 503, description = "Redis or the journal unavailable", body = ErrorBody),
    ),
)]
pub async fn ack_batch(
    state: web::Data<AppState>,
    body: JsonBody,
) -> Result<HttpResponse, ApiError> {
    let body = object(&body, &["ids"])?;
    let given = batch_deliveries("ids", body.get("ids"), 1..=MAX_COUNT as usize)?;
    let (ids, acks) = acks_of(&given);
    let outcomes = consume::ack_deliveries(&state.queue, &acks, AckJournal::Committed).await?;
    Ok(HttpResponse::Ok().json(ack_report(&ids, &outcomes)))
}

fn acks_of(given: &[(MessageId, Option<crate::message::Receipt>)]) -> (Vec<MessageId>, Vec<Ack>) {
    let ids = given.iter().map(|(id, _)| *id).collect();
    let acks = given
        .iter()
        .map(|&(id, receipt)| Ack {
            id,
            occurrence: None,
            receipt,
        })
        .collect();
    (ids, acks)
}

/// `POST /get/{topic}` with `{"ack": [...], "count": N, "timeout": S}`: acks
/// the previous batch, then long-polls like `GET /get/{topic}`, in one round
/// trip. The answer holds the messages and the ack results.
///
/// The acks run beside the poll. They do not wait for the journal's commit: Redis
/// lets go of the messages (and keeps their tombstones) before the answer,
/// and the journal records them within milliseconds with the other status
/// changes, retrying until it has. Waiting for that commit, under load, made
/// every consumer loop idle for tens of milliseconds per batch while
/// messages fell due. What a crash between the two can cost is a redelivery
/// (the journal still says Consuming; only a rebuild of Redis from the
/// journal would hand it out again), never a loss. `POST /ack` answers after
/// the commit.
#[utoipa::path(
    post,
    path = "/get/{topic}",
    tag = "consume",
    params(
        ("topic" = String, Path, pattern = "^[A-Za-z0-9._:-]{1,128}$", example = "sms"),
        ("timeout" = Option<u64>, Query, minimum = 0, maximum = 300, description = "Seconds to wait, as `timeout` in the body (give one or the other, or the same in both); in the query a load balancer can bound the wait by it"),
    ),
    request_body = AckAndGetRequest,
    responses(
        (status = 200, description = "The acks' results, and the messages handed out (each now `Consuming`)", body = AckAndPollReply),
        (status = 400, description = "A bad topic, body or id", body = ErrorBody),
        (status = 413, description = "The request is too large", body = ErrorBody),
        (status = 503, description = "Redis or the journal unavailable", body = ErrorBody),
    ),
)]
pub async fn ack_and_get(
    state: web::Data<AppState>,
    topic: web::Path<String>,
    q: Query,
    body: JsonBody,
) -> Result<HttpResponse, ApiError> {
    let topic = topic.into_inner();
    check_topic(&topic)?;
    let body = object(&body, &["ack", "count", "timeout"])?;
    let given = batch_deliveries("ack", body.get("ack"), 0..=MAX_COUNT as usize)?;
    let (ids, acks) = acks_of(&given);
    let count = body_int(body, "count", 1, 1..=MAX_COUNT)? as usize;
    let timeout = match (q.contains_key("timeout"), body.get("timeout")) {
        (false, _) => body_int(body, "timeout", 30, 0..=MAX_TIMEOUT_S)?,
        (true, None) => int_param(&q, "timeout", 30, 0..=MAX_TIMEOUT_S)?,
        (true, Some(_)) => {
            let (in_query, in_body) = (
                int_param(&q, "timeout", 30, 0..=MAX_TIMEOUT_S)?,
                body_int(body, "timeout", 30, 0..=MAX_TIMEOUT_S)?,
            );
            if in_query != in_body {
                return Err(ApiError::invalid(
                    ErrorCode::InvalidParameter,
                    format!("timeout is {in_query} in the query and {in_body} in the body; give one, or the same in both"),
                ));
            }
            in_query
        }
    };
    // The acks and the poll run side by side, so a batch costs one wait
    // for Redis less. Both run to their end (what the acks applied in Redis
    // is journaled whatever the poll met); an error of either is answered
    // then, and messages the poll claimed come back after their ttl, like
    // any unacked delivery.
    let (outcomes, messages) = futures::future::join(
        consume::ack_deliveries(&state.queue, &acks, AckJournal::Queued),
        consume::poll(&state.queue, &topic, count, timeout),
    )
    .await;
    let (outcomes, mut messages) = (outcomes?, messages?);
    // A message whose ack deadline passed is ready again: the poll may have
    // claimed it while the ack consumed it. Consumed, it is not handed out
    // (a recurring message's next occurrence still is).
    if !ids.is_empty() && !messages.is_empty() {
        let acked: std::collections::HashMap<MessageId, AckOutcome> =
            ids.iter().copied().zip(outcomes.iter().copied()).collect();
        messages.retain(|m| match acked.get(&m.message.id) {
            Some(AckOutcome::Consumed | AckOutcome::Deleted) => false,
            Some(AckOutcome::Next(next)) => m
                .message
                .occurrence
                .is_some_and(|o| o.number >= next.number),
            _ => true,
        });
    }
    let report = ack_report(&ids, &outcomes);
    // Serialized straight from the messages, not through a JSON tree.
    Ok(HttpResponse::Ok().json(AckAndPollReply {
        acked: report.acked,
        results: report.results,
        messages,
    }))
}

fn object<'a>(
    body: &'a serde_json::Value,
    fields: &[&str],
) -> Result<&'a serde_json::Map<String, serde_json::Value>, ApiError> {
    let Some(map) = body.as_object() else {
        return Err(ApiError::invalid(
            ErrorCode::InvalidBody,
            "the request body must be a JSON object",
        ));
    };
    if let Some(unknown) = map.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(ApiError::invalid(
            ErrorCode::UnknownField,
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
        Some(v) => match whole_number(v)
            .and_then(|n| u64::try_from(n).ok())
            .filter(|n| range.contains(n))
        {
            Some(n) => Ok(n),
            None => Err(ApiError::invalid(
                ErrorCode::InvalidParameter,
                format!(
                    "{field} must be a whole number from {} to {}, got {v}",
                    range.start(),
                    range.end()
                ),
            )),
        },
    }
}

fn nack_delay(raw: Option<&serde_json::Value>) -> Result<Option<i64>, ApiError> {
    match raw {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => match whole_number(v) {
            Some(ms) if (0..=MAX_RETRY_MS).contains(&ms) => Ok(Some(ms)),
            _ => Err(ApiError::invalid(
                ErrorCode::InvalidDelay,
                format!("delay must be 0 to {MAX_RETRY_MS} ms (one day), got {v}"),
            )),
        },
    }
}

/// `POST /nack/{id}?delay=ms`: the consumer could not handle the message.
/// It comes back after `delay`, or after its retry policy's wait without
/// one; on its last attempt it is dead.
#[utoipa::path(
    post,
    path = "/nack/{id}",
    tag = "consume",
    params(
        ("id" = MessageId, Path),
        ("delay" = Option<i64>, Query, minimum = 0, maximum = 86400000, description = "Ms until it is delivered again (0: ready at once); without it, by the message's retry policy"),
        ("receipt" = Option<String>, Query, description = "The receipt the delivery was handed out with"),
    ),
    responses(
        (status = 200, description = "Back to `Delaying` or `Ready`, or `Dead` after its last attempt", body = NackResult),
        (status = 400, description = "A bad id or parameter", body = ErrorBody),
        (status = 404, description = "No such message", body = ErrorBody),
        (status = 409, description = "Not handed out to a consumer (`not_in_flight`), or the receipt names an earlier delivery (`stale_delivery`)", body = ErrorBody),
        (status = 503, description = "Redis or the journal unavailable", body = ErrorBody),
    ),
)]
pub async fn nack(
    state: web::Data<AppState>,
    id: web::Path<String>,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&id)?;
    let receipt = q.get("receipt").map(|r| parse_receipt(r)).transpose()?;
    let delay = match q.get("delay") {
        None => None,
        Some(raw) => nack_delay(Some(
            &raw.parse::<i64>()
                .map(serde_json::Value::from)
                .map_err(|_| {
                    ApiError::invalid(
                        ErrorCode::InvalidDelay,
                        format!("delay must be 0 to {MAX_RETRY_MS} ms (one day), got '{raw}'"),
                    )
                })?,
        ))?,
    };
    match consume::nack(&state.queue, &[(id, delay, receipt)]).await?[0] {
        outcome @ NackOutcome::Failed { .. } => {
            Ok(HttpResponse::Ok().json(nack_result(outcome, id)))
        }
        NackOutcome::NotInFlight(None) => Err(ApiError::Conflict {
            code: ErrorCode::NotInFlight,
            message: format!(
                "message {id} is not handed out to a consumer (not delivered yet, or its ack deadline passed); only a delivered message can be nacked"
            ),
        }),
        NackOutcome::NotInFlight(Some(status)) => Err(ApiError::Conflict {
            code: ErrorCode::NotInFlight,
            message: not_handed_out(id, status, "nacked"),
        }),
        NackOutcome::Stale(status) => Err(stale(id, status, true)),
        NackOutcome::NotFound => Err(ApiError::NotFound {
            code: ErrorCode::NotFound,
            message: format!("no message {id}"),
        }),
    }
}

/// `POST /nack`: nacks up to 100 messages (`{"ids": [...], "delay": ms}`,
/// delay optional) in one journal commit; a result per id (`ready`,
/// `delaying` with `dueTime`, `dead`, `not_in_flight`, `not_found`).
#[utoipa::path(
    post,
    path = "/nack",
    tag = "consume",
    request_body = NackRequest,
    responses(
        (status = 200, description = "A result per id, in order", body = NackBatchReply),
        (status = 400, description = "A bad body, id or delay", body = ErrorBody),
        (status = 413, description = "The request is too large", body = ErrorBody),
        (status = 503, description = "Redis or the journal unavailable", body = ErrorBody),
    ),
)]
pub async fn nack_batch(
    state: web::Data<AppState>,
    body: JsonBody,
) -> Result<HttpResponse, ApiError> {
    let body = object(&body, &["ids", "delay"])?;
    let given = batch_deliveries("ids", body.get("ids"), 1..=MAX_COUNT as usize)?;
    let delay = nack_delay(body.get("delay"))?;
    let ids: Vec<MessageId> = given.iter().map(|(id, _)| *id).collect();
    let nacks: Vec<_> = given
        .iter()
        .map(|&(id, receipt)| (id, delay, receipt))
        .collect();
    let outcomes = consume::nack(&state.queue, &nacks).await?;
    let nacked = outcomes
        .iter()
        .filter(|o| matches!(o, NackOutcome::Failed { .. }))
        .count();
    let results = ids
        .iter()
        .zip(&outcomes)
        .map(|(id, o)| nack_result(*o, *id))
        .collect();
    Ok(HttpResponse::Ok().json(NackBatchReply { nacked, results }))
}

fn ack_result(outcome: AckOutcome, id: MessageId) -> AckResult {
    let (result, status, next_occurrence) = match outcome {
        AckOutcome::Consumed => (proto::AckOutcome::Consumed, None, None),
        AckOutcome::Deleted => (
            proto::AckOutcome::Consumed,
            Some(Some(Status::Deleted)),
            None,
        ),
        AckOutcome::Next(next) => (proto::AckOutcome::Consumed, None, Some(next)),
        AckOutcome::NotInFlight(status) => (proto::AckOutcome::NotInFlight, Some(status), None),
        AckOutcome::Stale { now, .. } => (proto::AckOutcome::StaleDelivery, Some(Some(now)), None),
        AckOutcome::NotFound => (proto::AckOutcome::NotFound, None, None),
    };
    AckResult {
        id,
        result,
        status,
        next_occurrence,
    }
}

fn nack_result(outcome: NackOutcome, id: MessageId) -> NackResult {
    let result = |result| NackResult {
        id,
        result,
        status: None,
        attempts: None,
        due_time: None,
    };
    match outcome {
        NackOutcome::Failed { attempts, then } => NackResult {
            status: Some(Some(then.status())),
            attempts: Some(attempts),
            due_time: match then {
                AfterFailure::Delaying { due } => Some(due),
                _ => None,
            },
            ..result(match then {
                AfterFailure::Ready => proto::NackOutcome::Ready,
                AfterFailure::Delaying { .. } => proto::NackOutcome::Delaying,
                AfterFailure::Dead => proto::NackOutcome::Dead,
                AfterFailure::Stopped => proto::NackOutcome::Deleted,
            })
        },
        NackOutcome::NotInFlight(status) => NackResult {
            status: Some(status),
            ..result(proto::NackOutcome::NotInFlight)
        },
        NackOutcome::Stale(now) => NackResult {
            status: Some(Some(now)),
            ..result(proto::NackOutcome::StaleDelivery)
        },
        NackOutcome::NotFound => result(proto::NackOutcome::NotFound),
    }
}

//! `POST /reschedule`: messages not handed out yet move to a new due time
//! and/or priority and keep their ids. The rules are in
//! [`crate::queue::reschedule`].

use actix_web::{web, HttpRequest, HttpResponse};

use super::body::JsonBody;
use super::schema::{
    PrefixCounts, RescheduleEach, RescheduleOne, RescheduleReply, RescheduleRequest,
};
use super::select::{self, Selector};
use super::state::AppState;
use crate::api::error::{ApiError, ErrorBody};
use crate::error::ErrorCode;
use crate::message::{now_ms, parse_new_schedule, MessageId};
use crate::queue::reschedule::{self, MoveOutcome, NewSchedule};

pub const MAX_RESCHEDULE_IDS: usize = 1_000;

/// The selector's fields (see [`select`]) and where to.
const FIELDS: [&str; 12] = [
    select::FIELDS[0],
    select::FIELDS[1],
    select::FIELDS[2],
    select::FIELDS[3],
    select::FIELDS[4],
    "delay",
    "deliverAt",
    "deliverAtLocal",
    "tz",
    "dst",
    "priority",
    "series",
];

fn report(ids: &[MessageId], outcomes: &[MoveOutcome]) -> RescheduleReply {
    let results: Vec<RescheduleOne> = ids
        .iter()
        .zip(outcomes)
        .map(|(id, o)| {
            let (due_time, priority) = match o {
                MoveOutcome::Rescheduled { due, priority } => (Some(*due), Some(*priority)),
                _ => (None, None),
            };
            RescheduleOne {
                id: *id,
                result: o.outcome(),
                due_time,
                priority,
            }
        })
        .collect();
    let rescheduled = results.iter().filter(|r| r.due_time.is_some()).count();
    RescheduleReply::Each(RescheduleEach {
        rescheduled,
        results,
    })
}

/// `POST /reschedule`: `{"ids": [...]}`, `{"topic", "bizKey"}` or
/// `{"topic", "bizKeyPrefix"}` with `delay`, `deliverAt` or `deliverAtLocal`
/// (with `tz` and `dst`) and/or
/// `priority`. A message keeps its id, body and attempts; one handed out
/// is left alone (`in_flight`).
#[utoipa::path(
    post,
    path = "/reschedule",
    tag = "produce",
    request_body = RescheduleRequest,
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "By ids or bizKey: a result per message; by prefix: how many matched and the count per outcome", body = RescheduleReply),
        (status = 400, description = "A bad body, id, topic, key, time or priority", body = ErrorBody),
        (status = 401, description = "The admin token is set and was not given", body = ErrorBody),
        (status = 404, description = "By bizKey: no live message of the topic holds it (`not_found`)", body = ErrorBody),
        (status = 413, description = "The request is too large", body = ErrorBody),
        (status = 503, description = "Redis or the journal unavailable: the messages not answered for may have moved; send it again", body = ErrorBody),
    ),
)]
pub async fn reschedule(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: JsonBody,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    let body = select::object_of(
        &body,
        &FIELDS,
        "ids, or topic with bizKey or bizKeyPrefix, and delay, deliverAt or deliverAtLocal (with tz, dst) and/or priority, and series",
    )?;
    let (due, priority) = parse_new_schedule(body, now_ms())?;
    let series = match body.get("series") {
        None | Some(serde_json::Value::Null) => false,
        Some(serde_json::Value::Bool(b)) => *b,
        Some(other) => {
            return Err(ApiError::invalid(
                ErrorCode::InvalidBody,
                format!("series must be true or false, got {other}"),
            ))
        }
    };
    if series && due.is_none() {
        return Err(ApiError::invalid(
            ErrorCode::InvalidBody,
            "series moves a recurring series to a new time: give delay, deliverAt or deliverAtLocal",
        ));
    }
    let to = NewSchedule {
        due,
        priority,
        series,
    };
    match select::selector(body, MAX_RESCHEDULE_IDS, ErrorCode::InvalidBody)? {
        Selector::Ids(ids) => {
            let outcomes = reschedule::reschedule_many(&state.queue, &ids, to).await?;
            Ok(HttpResponse::Ok().json(report(&ids, &outcomes)))
        }
        Selector::BizKey { topic, key } => {
            let (ids, outcomes): (Vec<MessageId>, Vec<MoveOutcome>) =
                reschedule::reschedule_biz_key(&state.queue, topic, key, to)
                    .await?
                    .into_iter()
                    .unzip();
            if ids.is_empty() {
                return Err(select::no_holder(topic, key));
            }
            Ok(HttpResponse::Ok().json(report(&ids, &outcomes)))
        }
        Selector::Prefix { topic, prefix } => {
            let (matched, counts) =
                reschedule::reschedule_biz_key_prefix(&state.queue, topic, prefix, to).await?;
            Ok(
                HttpResponse::Ok().json(RescheduleReply::Counts(PrefixCounts {
                    matched: matched as u64,
                    results: counts
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect(),
                })),
            )
        }
    }
}

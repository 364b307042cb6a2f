//! Cancelling's routes: one message (`GET /delete?id=`) or many (`POST
//! /cancel` by ids, by bizKey, or by bizKey prefix). The rules are in
//! [`crate::queue::cancel`].

use actix_web::{web, HttpRequest, HttpResponse};
use delayq_proto as proto;

use super::body::JsonBody;
use super::parse::{parse_id, Query};
use super::schema::{
    CancelEach, CancelOne, CancelReply, CancelRequest, DeleteNotFound, PrefixCounts,
};
use super::select::{self, Selector};
use super::state::AppState;
use crate::api::error::ApiError;
use crate::api::error::ErrorBody;
use crate::error::ErrorCode;
use crate::message::MessageId;
use crate::queue::cancel::{self, CancelOutcome};

/// Most ids in one `POST /cancel`.
pub const MAX_CANCEL_IDS: usize = 1_000;

/// `GET /delete?id=ID`: cancel one message.
#[utoipa::path(
    get,
    path = "/delete",
    tag = "cancel",
    params(("id" = MessageId, Query)),
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "A definite outcome: `deleted`, `in_flight` (handed to a consumer: left alone), `already_consumed` or `dead`", body = CancelOne),
        (status = 400, description = "No id, or a bad one", body = ErrorBody),
        (status = 401, description = "The admin token is set and was not given", body = ErrorBody),
        (status = 403, description = "From another site, as the browser says (`forbidden`): this route changes data", body = ErrorBody),
        (status = 404, description = "No such message (`not_found`, with the id and result)", body = DeleteNotFound),
        (status = 503, description = "Redis or the journal unavailable", body = ErrorBody),
    ),
)]
pub async fn delete(
    state: web::Data<AppState>,
    req: HttpRequest,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    super::state::refuse_cross_site(&req)?;
    let raw = q.get("id").ok_or_else(|| {
        ApiError::invalid(ErrorCode::MissingId, "give the message id: /delete?id=ID")
    })?;
    let id = parse_id(raw)?;
    match state.queue.cancel_one(id).await? {
        // An unknown id is a client error (404), still with a definite result.
        CancelOutcome::NotFound => Ok(HttpResponse::NotFound().json(DeleteNotFound {
            error: ErrorCode::NotFound,
            message: format!("no message {id}"),
            id,
            result: proto::CancelOutcome::NotFound,
        })),
        outcome => Ok(HttpResponse::Ok().json(CancelOne {
            id,
            result: outcome.into(),
        })),
    }
}

fn report(ids: &[MessageId], outcomes: &[CancelOutcome]) -> CancelReply {
    let deleted = outcomes
        .iter()
        .filter(|o| **o == CancelOutcome::Deleted)
        .count();
    let results = ids
        .iter()
        .zip(outcomes)
        .map(|(id, o)| CancelOne {
            id: *id,
            result: (*o).into(),
        })
        .collect();
    CancelReply::Each(CancelEach { deleted, results })
}

/// `POST /cancel`: `{"ids": [...]}` (1 to 1000), `{"topic", "bizKey"}` (the
/// live message holding that key) or `{"topic", "bizKeyPrefix"}` (every live
/// message whose key starts with it). Ids and bizKey answer a result per id;
/// a prefix answers counts per outcome.
#[utoipa::path(
    post,
    path = "/cancel",
    tag = "cancel",
    request_body = CancelRequest,
    security((), ("adminToken" = [])),
    responses(
        (status = 200, description = "By ids or bizKey: a result per message; by prefix: how many matched and the count per outcome", body = CancelReply),
        (status = 400, description = "A bad body, id, topic or key", body = ErrorBody),
        (status = 401, description = "The admin token is set and was not given", body = ErrorBody),
        (status = 404, description = "By bizKey: no live message of the topic holds it (`not_found`)", body = ErrorBody),
        (status = 413, description = "The request is too large", body = ErrorBody),
        (status = 503, description = "Redis or the journal unavailable", body = ErrorBody),
    ),
)]
pub async fn cancel(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: JsonBody,
) -> Result<HttpResponse, ApiError> {
    state.require_admin(&req)?;
    let body = select::object_of(
        &body,
        &select::FIELDS,
        "ids, or topic with bizKey or bizKeyPrefix",
    )?;
    match select::selector(body, MAX_CANCEL_IDS, ErrorCode::InvalidCancel)? {
        Selector::Ids(ids) => {
            let outcomes = cancel::cancel_many(&state.queue, &ids).await?;
            Ok(HttpResponse::Ok().json(report(&ids, &outcomes)))
        }
        Selector::BizKey { topic, key } => {
            let (ids, outcomes): (Vec<MessageId>, Vec<CancelOutcome>) =
                cancel::cancel_biz_key(&state.queue, topic, key)
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
                cancel::cancel_biz_key_prefix(&state.queue, topic, prefix).await?;
            Ok(HttpResponse::Ok().json(CancelReply::Counts(PrefixCounts {
                matched: matched as u64,
                results: counts
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            })))
        }
    }
}

//! `GET /messages?topic=…`: finding messages without their ids, by bizKey,
//! bizKey prefix or status, a page at a time (the dashboard's topic page
//! reads the same journal queries).

use actix_web::{web, HttpRequest, HttpResponse};

use super::parse::{check_topic, int_param, Query};
use super::schema::MessagePage;
use super::state::AppState;
use crate::api::error::{ApiError, ErrorBody};
use crate::error::ErrorCode;
use crate::message::{MessageId, Status, MAX_BIZ_KEY_LEN};
use crate::queue::read::Search;

/// Most messages a page holds.
const MAX_PAGE: u64 = 1_000;

fn invalid(message: String) -> ApiError {
    ApiError::invalid(ErrorCode::InvalidParameter, message)
}

/// A status by the name messages show (`Delaying`, `Ready`, …).
fn status_param(raw: &str) -> Result<Status, ApiError> {
    (0..=6)
        .filter_map(Status::from_code)
        .find(|s| s.to_string() == raw)
        .ok_or_else(|| {
            invalid(format!(
                "status must be one of WaitPut, Delaying, Ready, Consuming, Consumed, Deleted, Dead, not {raw:?}"
            ))
        })
}

/// `GET /messages?topic=T&bizKey=K`, `?topic=T&bizKeyPrefix=P[&status=S]`
/// or `?topic=T&status=S`, with `limit` and `after`: a topic's messages in
/// id order.
#[utoipa::path(
    get,
    path = "/messages",
    tag = "inspect",
    params(
        ("topic" = String, Query, pattern = "^[A-Za-z0-9._:-]{1,128}$", example = "sms"),
        ("bizKey" = Option<String>, Query, description = "The live message holding this bizKey (compared exactly)"),
        ("bizKeyPrefix" = Option<String>, Query, description = "Live messages whose bizKey starts with this (compared exactly)"),
        ("status" = Option<String>, Query, description = "WaitPut, Delaying, Ready, Consuming, Consumed, Deleted or Dead; required without a bizKey or prefix; with one, a live status"),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 1000, description = "Page size (default 100)"),
        ("after" = Option<MessageId>, Query, description = "The `next` of the previous page"),
    ),
    security((), ("readToken" = []), ("adminToken" = [])),
    responses(
        (status = 200, description = "A page of the topic's messages in id order; `next` continues it", body = MessagePage),
        (status = 400, description = "A bad topic or parameter", body = ErrorBody),
        (status = 401, description = "A read or admin token is set and was not given", body = ErrorBody),
        (status = 503, description = "The journal unavailable", body = ErrorBody),
    ),
)]
pub async fn find(
    state: web::Data<AppState>,
    req: HttpRequest,
    q: Query,
) -> Result<HttpResponse, ApiError> {
    state.require_reader(&req)?;
    let topic = q
        .get("topic")
        .ok_or_else(|| invalid("topic is required".into()))?;
    check_topic(topic)?;
    let limit = int_param(&q, "limit", 100, 1..=MAX_PAGE)? as i64;
    let after = match q.get("after") {
        None => 0,
        Some(raw) => {
            raw.parse::<MessageId>()
                .map_err(|e| invalid(format!("after must be a message id: {e}")))?
                .0
        }
    };
    for field in ["bizKey", "bizKeyPrefix"] {
        if let Some(k) = q.get(field) {
            if k.is_empty() || k.chars().count() > MAX_BIZ_KEY_LEN {
                return Err(ApiError::invalid(
                    ErrorCode::InvalidBizKey,
                    format!("{field} must be 1 to {MAX_BIZ_KEY_LEN} characters"),
                ));
            }
        }
    }
    let status = q.get("status").map(|s| status_param(s)).transpose()?;
    let search = match (q.get("bizKey"), q.get("bizKeyPrefix")) {
        (Some(_), Some(_)) => return Err(invalid("give bizKey or bizKeyPrefix, not both".into())),
        (key, prefix) if key.or(prefix).is_some() => {
            if let Some(s) = status.filter(|s| s.is_terminal()) {
                return Err(invalid(format!(
                    "a bizKey is held by live messages only: status {s} finds none (search {s} messages by status alone)"
                )));
            }
            match (key, prefix) {
                (Some(key), _) => Search::BizKey {
                    key: key.clone(),
                    status,
                },
                (_, Some(prefix)) => Search::Prefix {
                    prefix: prefix.clone(),
                    status,
                },
                _ => unreachable!("one of them is given"),
            }
        }
        _ => Search::Status(
            status.ok_or_else(|| invalid("give bizKey, bizKeyPrefix or status".into()))?,
        ),
    };
    let (rows, next) = state.queue.search(topic, search, after, limit).await?;
    Ok(HttpResponse::Ok().json(MessagePage {
        messages: rows.iter().map(|r| r.view()).collect(),
        next: next.map(MessageId),
    }))
}

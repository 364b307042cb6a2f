//! Query parameters, one rule for every route: a route takes exactly the
//! parameters its OpenAPI entry lists, each at most once. Anything else is
//! a 400 before the handler runs, so nothing changes: `?bogus=1` beside a
//! requeue, `dryrun` for `dryRun`, `timeout` given twice.
//!
//! The route table reads its [`Table`] from the OpenAPI document once, so
//! the parameters a route takes and the ones it documents cannot drift
//! apart; each route's middleware holds its own list.

use std::collections::{HashMap, HashSet};

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::web;

use super::error::ApiError;
use crate::error::ErrorCode;

/// (method, path as registered) of every route → the query parameters it
/// takes.
pub type Table = HashMap<(&'static str, &'static str), Vec<String>>;

/// The query parameters each of `routes` takes, as `doc` (the OpenAPI
/// document) lists them.
pub fn table(routes: &[(&'static str, &'static str)], doc: &serde_json::Value) -> Table {
    routes
        .iter()
        .map(|&(method, path)| {
            let op = &doc["paths"][openapi_path(path)][method];
            let names = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "query")
                .filter_map(|p| p["name"].as_str().map(str::to_string))
                .collect();
            ((method, path), names)
        })
        .collect()
}

/// A path as actix-web registers it (`/docs/{file:.*}`) as OpenAPI writes
/// it (`/docs/{file}`).
pub fn openapi_path(registered: &str) -> String {
    let mut out = String::with_capacity(registered.len());
    let mut in_pattern = false;
    for c in registered.chars() {
        match c {
            ':' if !in_pattern && out.rfind('{') > out.rfind('}') => in_pattern = true,
            '}' => {
                in_pattern = false;
                out.push(c);
            }
            _ if in_pattern => {}
            _ => out.push(c),
        }
    }
    out
}

/// Checks a query string against what the route takes (`allowed`): each
/// parameter known, none twice.
pub fn check(
    (method, path): (&'static str, &'static str),
    allowed: &[String],
    query: &str,
) -> Result<(), ApiError> {
    if query.is_empty() {
        return Ok(());
    }
    let pairs = web::Query::<Vec<(String, String)>>::from_query(query).map_err(|e| {
        ApiError::invalid(
            ErrorCode::InvalidParameter,
            format!("the query string could not be read: {e}"),
        )
    })?;
    let mut seen = HashSet::new();
    for (name, _) in pairs.iter() {
        if !allowed.iter().any(|a| a == name) {
            let route = format!("{} {}", method.to_uppercase(), openapi_path(path));
            let takes = if allowed.is_empty() {
                "no query parameters".to_string()
            } else {
                allowed.join(", ")
            };
            return Err(ApiError::invalid(
                ErrorCode::UnknownParameter,
                format!("unknown parameter {name:?}; {route} takes {takes}"),
            ));
        }
        if !seen.insert(name.as_str()) {
            return Err(ApiError::invalid(
                ErrorCode::InvalidParameter,
                format!("{name} is given twice; give it once"),
            ));
        }
    }
    Ok(())
}

/// The middleware every API route is registered with: refuses a query
/// string [`check`] refuses, before the handler sees the request.
pub async fn checked(
    route: (&'static str, &'static str),
    allowed: &'static [String],
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    if let Err(e) = check(route, allowed, req.query_string()) {
        return Ok(req.error_response(e).map_into_right_body());
    }
    next.call(req)
        .await
        .map(ServiceResponse::map_into_left_body)
}

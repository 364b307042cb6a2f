//! Query parameters, one rule for every route: a route takes exactly the
//! parameters its OpenAPI entry lists, each at most once. Anything else is
//! a 400 before the handler runs, so nothing changes: `?bogus=1` beside a
//! requeue, `dryrun` for `dryRun`, `timeout` given twice.
//!
//! The table is read from the document ([`super::openapi`]) once, so the
//! parameters a route takes and the ones it documents cannot drift apart.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::web;

use super::error::ApiError;
use crate::error::ErrorCode;

/// (method, path as registered) of every route in [`super::ROUTES`] → the
/// query parameters it takes: looked up per request without allocating.
type Table = HashMap<(&'static str, &'static str), Vec<String>>;

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        let doc = serde_json::to_value(super::openapi()).expect("the document serialises");
        super::ROUTES
            .iter()
            .map(|&(method, path)| {
                let op = &doc["paths"][super::openapi_path(path)][method];
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
    })
}

/// The query parameters `method` `path` (as registered) takes.
pub fn allowed(method: &'static str, path: &'static str) -> &'static [String] {
    table().get(&(method, path)).map_or(&[], Vec::as_slice)
}

/// Checks a query string against what the route takes: each parameter
/// known, none twice.
pub fn check(method: &'static str, path: &'static str, query: &str) -> Result<(), ApiError> {
    if query.is_empty() {
        return Ok(());
    }
    let pairs = web::Query::<Vec<(String, String)>>::from_query(query).map_err(|e| {
        ApiError::invalid(
            ErrorCode::InvalidParameter,
            format!("the query string could not be read: {e}"),
        )
    })?;
    let allowed = allowed(method, path);
    let mut seen = HashSet::new();
    for (name, _) in pairs.iter() {
        if !allowed.iter().any(|a| a == name) {
            let route = format!("{} {}", method.to_uppercase(), super::openapi_path(path));
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
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    if let Err(e) = check(route.0, route.1, req.query_string()) {
        return Ok(req.error_response(e).map_into_right_body());
    }
    next.call(req)
        .await
        .map(ServiceResponse::map_into_left_body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_take_what_they_document_once() {
        assert!(check("post", "/dead/{target}/requeue", "limit=5").is_ok());
        for bad in ["bogus=1", "limit=5&limit=6", "limit=5&Limit=6"] {
            assert!(
                check("post", "/dead/{target}/requeue", bad).is_err(),
                "{bad}"
            );
        }
        assert!(check("get", "/reStore", "dryRun=true&expire=1").is_ok());
        assert!(check("get", "/reStore", "dryrun=true").is_err());
        assert!(check("post", "/push", "").is_ok());
        assert!(check("post", "/push", "delay=5").is_err());
        assert_eq!(allowed("get", "/get/{topic}"), ["timeout", "count"]);
    }
}

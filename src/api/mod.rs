//! The HTTP API (actix-web). The original routes keep their exact shape:
//! `POST /push`, `GET /delete?id=`, `GET /reStore?expire=`, `GET /reStore/{id}`,
//! `GET /get/{topic}`; beside them `POST /push/batch`, `POST /ack/{id}`,
//! `GET /messages/{id}`, `/health`, `/ready`, the cluster's
//! `GET /admin/cluster`, `POST /admin/rebalance`, `POST /admin/shards/{s}/move`,
//! and `GET /admin/reconcile`, `GET /admin/restore`, and `GET /metrics`. Errors are JSON
//! `{"error": code, "message": text}` ([`error::ApiError`]).
//!
//! Every route is in one table ([`ROUTES`]); `GET /openapi.json` describes
//! them all (OpenAPI 3.1: each handler's `#[utoipa::path]`, the bodies'
//! types in [`schema`]) and Swagger UI shows it at `/docs` (`docs.rs`).
//! The dashboard's pages at `/ui` ([`ui`]) answer HTML, not the API's
//! JSON: they are a table of their own ([`ui::UI_ROUTES`]), left out of
//! the document.

mod admin;
mod body;
mod cancel;
mod consume;
mod dead;
mod docs;
pub mod error;
mod manage;
mod metrics;
mod params;
mod produce;
mod reschedule;
pub mod schema;
mod search;
mod select;
mod topics;
pub mod ui;
mod views;

use std::collections::HashMap;

use actix_web::{web, HttpRequest, HttpResponse};

use crate::api::error::ApiError;
use crate::cluster::ClusterHandle;
use crate::error::ErrorCode;
use crate::message::MessageId;
use crate::queue::Queue;
use crate::reconcile::Reconciler;
use crate::restore::{RestoreStatus, Restorer};

/// Everything a request handler needs, shared by all HTTP workers.
pub struct AppState {
    /// The queue's rules, and its handles (the journal, Redis, the
    /// router) for the routes that only read: inspection, admin.
    pub queue: Queue,
    pub cluster: ClusterHandle,
    pub max_body: usize,
    pub admin_token: Option<String>,
    /// Reads message bodies (`--read-token`); the admin token does too.
    pub read_token: Option<String>,
    /// The dashboard shows everything and takes no action (`--ui-read-only`).
    pub ui_read_only: bool,
    /// This node's current or last restore.
    pub restore_status: RestoreStatus,
    /// Restores Redis from the journal (`GET /reStore`, the dashboard).
    pub restorer: Restorer,
    pub reconciler: Reconciler,
}

impl AppState {
    pub fn restorer(&self) -> &Restorer {
        &self.restorer
    }

    /// With an admin token configured, the caller must present it.
    fn require_admin(&self, req: &HttpRequest) -> Result<(), ApiError> {
        let Some(token) = &self.admin_token else {
            return Ok(());
        };
        match bearer(req) {
            Some(g) if constant_time_eq(g.as_bytes(), token.as_bytes()) => Ok(()),
            _ => Err(ApiError::Unauthorized),
        }
    }

    /// A route that shows message bodies: with a read token, it or the
    /// admin token; else with an admin token, that one; else anyone.
    fn require_reader(&self, req: &HttpRequest) -> Result<(), ApiError> {
        let Some(read) = &self.read_token else {
            return self.require_admin(req);
        };
        let given = bearer(req).unwrap_or("");
        let admin = self
            .admin_token
            .as_ref()
            .is_some_and(|t| constant_time_eq(given.as_bytes(), t.as_bytes()));
        if constant_time_eq(given.as_bytes(), read.as_bytes()) || admin {
            Ok(())
        } else {
            Err(ApiError::UnauthorizedReader)
        }
    }
}

/// The token of an `Authorization: Bearer TOKEN` header.
fn bearer(req: &HttpRequest) -> Option<&str> {
    req.headers()
        .get("Authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// The original routes that change state on a GET (`/delete`, `/reStore`,
/// a repairing `/admin/reconcile`) refuse a request a browser says comes
/// from another site (`Sec-Fetch-Site: cross-site` or `same-site`, or an
/// `Origin` naming another host): without an admin token a page elsewhere
/// could otherwise make a visitor's browser cancel messages. Clients that
/// are not browsers send neither header and are not affected.
fn refuse_cross_site(req: &HttpRequest) -> Result<(), ApiError> {
    let h = req.headers();
    let refused = |why: String| {
        Err(ApiError::Forbidden {
            code: ErrorCode::Forbidden,
            message: format!(
                "this route changes data and refuses requests from other sites ({why})"
            ),
        })
    };
    if let Some(site) = h.get("Sec-Fetch-Site").and_then(|v| v.to_str().ok()) {
        if site == "cross-site" || site == "same-site" {
            return refused(format!("Sec-Fetch-Site: {site}"));
        }
    }
    if let Some(origin) = h.get("Origin").and_then(|v| v.to_str().ok()) {
        let host = h
            .get("X-Forwarded-Host")
            .or_else(|| h.get("Host"))
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
        if origin == "null" || origin_host != host {
            return refused(format!("Origin: {origin}"));
        }
    }
    Ok(())
}

/// Compares a presented token with the configured one: every byte of the
/// configured token is examined whatever was presented, so the time taken
/// tells a caller neither where a guess went wrong nor whether its length
/// was right.
fn constant_time_eq(given: &[u8], token: &[u8]) -> bool {
    let mut diff = (given.len() != token.len()) as u8;
    for (i, t) in token.iter().enumerate() {
        diff |= t ^ given.get(i).copied().unwrap_or(!*t);
    }
    diff == 0
}

pub use body::{MAX_JSON_VALUES, MAX_REQUEST_BYTES};
pub use docs::openapi;
pub use manage::refuse_when_stalled;
pub use metrics::count_requests;

/// Every route of the API, in one table: [`configure`] registers them,
/// [`ROUTES`] lists them and the OpenAPI document ([`docs::openapi`])
/// takes each handler's `#[utoipa::path]`, so no route is served
/// undocumented (a test checks that the paths written in those attributes
/// are the ones registered).
macro_rules! routes {
    ($($method:ident $path:literal => $module:ident :: $handler:ident,)*) => {
        /// Every route served: (method, path as registered with actix-web).
        pub const ROUTES: &[(&str, &str)] = &[$((stringify!($method), $path),)*];

        /// Each route is a resource of its own, guarded by its method (so
        /// `GET` and `POST /get/{topic}` fall through to each other), its
        /// query string checked against what it documents ([`params`]).
        fn register(cfg: &mut web::ServiceConfig) {
            $(cfg.service(
                web::resource($path)
                    .guard(actix_web::guard::Method(method(stringify!($method))))
                    .wrap(actix_web::middleware::from_fn(|req, next| {
                        params::checked((stringify!($method), $path), req, next)
                    }))
                    .route(web::$method().to($module::$handler)),
            );)*
        }

        #[derive(utoipa::OpenApi)]
        #[openapi(paths($($module::$handler),*))]
        struct Routes;
    };
}

routes! {
    post "/push" => produce::push,
    post "/push/batch" => produce::push_batch,
    get "/delete" => cancel::delete,
    post "/cancel" => cancel::cancel,
    post "/reschedule" => reschedule::reschedule,
    get "/dead/{topic}" => dead::list,
    post "/dead/{target}/requeue" => dead::requeue,
    get "/get/{topic}" => consume::get,
    post "/get/{topic}" => consume::ack_and_get,
    post "/ack" => consume::ack_batch,
    post "/ack/{id}" => consume::ack,
    post "/nack" => consume::nack_batch,
    post "/nack/{id}" => consume::nack,
    get "/reStore" => manage::restore_all,
    get "/reStore/{id}" => manage::restore_one,
    get "/messages" => search::find,
    get "/messages/{id}" => manage::message,
    get "/topics" => topics::list,
    post "/topics/{topic}/pause" => topics::pause,
    post "/topics/{topic}/resume" => topics::resume,
    get "/admin/cluster" => admin::cluster,
    get "/admin/journal" => admin::journal,
    post "/admin/rebalance" => admin::rebalance,
    get "/admin/reconcile" => admin::reconcile,
    get "/admin/restore" => admin::restore,
    post "/admin/shards/{shard}/move" => admin::move_shard,
    get "/health" => manage::health,
    get "/ready" => manage::ready,
    get "/metrics" => metrics::scrape,
    get "/openapi.json" => docs::openapi_json,
    get "/docs" => docs::ui_root,
    get "/docs/{file:.*}" => docs::ui_file,
}

fn method(name: &str) -> actix_web::http::Method {
    actix_web::http::Method::from_bytes(name.to_uppercase().as_bytes()).expect("an HTTP method")
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

pub fn configure(cfg: &mut web::ServiceConfig) {
    // JSON bodies are read as bytes up to the limit and checked before
    // they are parsed (see body.rs).
    let payload = web::PayloadConfig::new(MAX_REQUEST_BYTES);
    let path = web::PathConfig::default()
        .error_handler(|err, _| ApiError::invalid(ErrorCode::InvalidPath, err.to_string()).into());
    cfg.app_data(payload).app_data(path);
    register(cfg);
    ui::register(cfg);
    cfg.default_service(web::to(not_found));
}

async fn not_found(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::NotFound {
        code: ErrorCode::NoSuchRoute,
        message: format!("no route {} {}", req.method(), req.path()),
    })
}

type Query = web::Query<HashMap<String, String>>;

fn parse_id(raw: &str) -> Result<MessageId, ApiError> {
    raw.parse().map_err(|e: crate::ids::BadMessageId| {
        ApiError::invalid(ErrorCode::InvalidId, e.to_string())
    })
}

/// The ids of a batch request: a list of message ids (strings or numbers),
/// as many as `count` allows, no repeats.
fn batch_ids(
    field: &str,
    value: Option<&serde_json::Value>,
    count: std::ops::RangeInclusive<usize>,
) -> Result<Vec<MessageId>, ApiError> {
    let (min, max) = (*count.start(), *count.end());
    let Some(value) = value else {
        return if min == 0 {
            Ok(Vec::new())
        } else {
            Err(ApiError::invalid(
                ErrorCode::InvalidIds,
                format!("{field} is required: a list of {min} to {max} message ids"),
            ))
        };
    };
    let Some(list) = value.as_array() else {
        return Err(ApiError::invalid(
            ErrorCode::InvalidIds,
            format!("{field} must be a list of message ids"),
        ));
    };
    if !count.contains(&list.len()) {
        return Err(ApiError::invalid(
            ErrorCode::InvalidIds,
            format!(
                "{field} must hold {min} to {max} message ids, not {}",
                list.len()
            ),
        ));
    }
    let mut ids = Vec::with_capacity(list.len());
    let mut seen = std::collections::HashSet::with_capacity(list.len());
    for v in list {
        let text = match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => match crate::message::whole_number(v) {
                Some(id) => id.to_string(),
                None => n.to_string(),
            },
            other => {
                return Err(ApiError::invalid(
                    ErrorCode::InvalidIds,
                    format!("{field} holds {other}, which is not a message id"),
                ))
            }
        };
        let id = parse_id(&text)?;
        if !seen.insert(id) {
            return Err(ApiError::invalid(
                ErrorCode::InvalidIds,
                format!("{field} names message {id} twice"),
            ));
        }
        ids.push(id);
    }
    Ok(ids)
}

/// A list of deliveries to ack or nack (`field` of a request body): each
/// element a message id (as [`batch_ids`] reads it), or
/// `{"id": ID, "receipt": RECEIPT}` naming the delivery by the receipt it
/// was handed out with. Each message once.
fn batch_deliveries(
    field: &str,
    value: Option<&serde_json::Value>,
    count: std::ops::RangeInclusive<usize>,
) -> Result<Vec<(MessageId, Option<crate::message::Receipt>)>, ApiError> {
    let Some(serde_json::Value::Array(list)) = value else {
        return Ok(batch_ids(field, value, count)?
            .into_iter()
            .map(|id| (id, None))
            .collect());
    };
    let mut plain = Vec::with_capacity(list.len());
    let mut receipts = Vec::with_capacity(list.len());
    for v in list {
        match v {
            serde_json::Value::Object(o) => {
                if let Some(unknown) = o.keys().find(|k| *k != "id" && *k != "receipt") {
                    return Err(ApiError::invalid(
                        ErrorCode::InvalidIds,
                        format!("{field} holds an object with {unknown:?}; give {{\"id\", \"receipt\"}}"),
                    ));
                }
                let Some(id) = o.get("id") else {
                    return Err(ApiError::invalid(
                        ErrorCode::InvalidIds,
                        format!("{field} holds an object without \"id\""),
                    ));
                };
                plain.push(id.clone());
                receipts.push(match o.get("receipt") {
                    None => None,
                    Some(serde_json::Value::String(r)) => Some(parse_receipt(r)?),
                    Some(other) => {
                        return Err(ApiError::invalid(
                            ErrorCode::InvalidReceipt,
                            format!("a receipt is a string as handed out, not {other}"),
                        ))
                    }
                });
            }
            other => {
                plain.push(other.clone());
                receipts.push(None);
            }
        }
    }
    let ids = batch_ids(field, Some(&serde_json::Value::Array(plain)), count)?;
    Ok(ids.into_iter().zip(receipts).collect())
}

/// A receipt as handed out with a delivery.
fn parse_receipt(text: &str) -> Result<crate::message::Receipt, ApiError> {
    text.parse()
        .map_err(|e: String| ApiError::invalid(ErrorCode::InvalidReceipt, e))
}

fn check_topic(topic: &str) -> Result<(), ApiError> {
    if crate::message::valid_topic(topic) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            ErrorCode::InvalidTopic,
            format!(
                "topic must be 1 to {} characters of A-Z a-z 0-9 . _ : -",
                crate::message::MAX_TOPIC_LEN
            ),
        ))
    }
}

fn bool_param(q: &HashMap<String, String>, name: &str, default: bool) -> Result<bool, ApiError> {
    match q.get(name).map(String::as_str) {
        None => Ok(default),
        Some("true") | Some("1") => Ok(true),
        Some("false") | Some("0") => Ok(false),
        Some(other) => Err(ApiError::invalid(
            ErrorCode::InvalidParameter,
            format!("{name} must be true or false, got '{other}'"),
        )),
    }
}

fn int_param(
    q: &HashMap<String, String>,
    name: &str,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, ApiError> {
    match q.get(name) {
        None => Ok(default),
        Some(raw) => match raw.parse::<u64>() {
            Ok(v) if range.contains(&v) => Ok(v),
            _ => Err(ApiError::invalid(
                ErrorCode::InvalidParameter,
                format!(
                    "{name} must be a whole number from {} to {}, got '{raw}'",
                    range.start(),
                    range.end()
                ),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_only_exactly() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        for wrong in [&b""[..], b"s3cre", b"s3cret!", b"S3cret", b"s3crex"] {
            assert!(!constant_time_eq(wrong, b"s3cret"), "{wrong:?}");
        }
    }

    #[test]
    fn paths_read_as_openapi_writes_them() {
        assert_eq!(openapi_path("/docs/{file:.*}"), "/docs/{file}");
        assert_eq!(openapi_path("/a/{x}/b:c/{y:[0-9]+}"), "/a/{x}/b:c/{y}");
    }

    /// Every route registered is in the document, with its method, and the
    /// document has no other.
    #[test]
    fn the_document_lists_exactly_the_routes_served() {
        let doc = serde_json::to_value(openapi()).unwrap();
        let methods = [
            "get", "put", "post", "delete", "options", "head", "patch", "trace",
        ];
        let mut documented = std::collections::BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, _) in item.as_object().unwrap() {
                if methods.contains(&method.as_str()) {
                    documented.insert((method.clone(), path.clone()));
                }
            }
        }
        let served: std::collections::BTreeSet<(String, String)> = ROUTES
            .iter()
            .map(|(m, p)| (m.to_string(), openapi_path(p)))
            .collect();
        assert_eq!(served.len(), ROUTES.len(), "a route is registered twice");
        assert_eq!(documented, served);
    }

    /// The dashboard's routes are apart: HTML pages (and forms) under
    /// `/ui`, none of them an API route, none in the document.
    #[test]
    fn the_dashboard_routes_are_left_out_of_the_document() {
        let doc = serde_json::to_value(openapi()).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for (method, path) in ui::UI_ROUTES {
            assert!(path == &"/ui" || path.starts_with("/ui/"), "{path}");
            assert!(
                !paths.contains_key(&openapi_path(path)),
                "{path} is documented"
            );
            assert!(
                !ROUTES.contains(&(method, path)),
                "{method} {path} is an API route too"
            );
            assert!(
                seen.insert((method, path)),
                "{method} {path} is registered twice"
            );
        }
        assert!(!paths.keys().any(|p| p == "/ui" || p.starts_with("/ui/")));
    }
}

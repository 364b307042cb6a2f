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
mod parse;
mod produce;
mod reschedule;
pub mod schema;
mod search;
mod select;
mod state;
mod topics;
pub mod ui;
mod views;

use std::sync::OnceLock;

use actix_web::{web, HttpRequest, HttpResponse};

use crate::api::error::ApiError;
use crate::error::ErrorCode;

pub use body::{MAX_JSON_VALUES, MAX_REQUEST_BYTES};
pub use manage::refuse_when_stalled;
pub use metrics::count_requests;
pub use params::openapi_path;
pub use state::AppState;

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
                    .wrap(actix_web::middleware::from_fn({
                        let route = (stringify!($method), $path);
                        let allowed = allowed(route);
                        move |req, next| params::checked(route, allowed, req, next)
                    }))
                    .route(web::$method().to($module::$handler)),
            );)*
        }

        #[derive(utoipa::OpenApi)]
        #[openapi(paths($($module::$handler),*))]
        struct Routes;
    };
}

// The table's order is the order a request's path is matched in, and a
// path with a `{segment}` costs a regex match each time it is tried: the
// routes taken once per message (hand-outs, single acks and nacks) come
// first, so they are found before any other pattern is tried.
routes! {
    get "/get/{topic}" => consume::get,
    post "/get/{topic}" => consume::ack_and_get,
    post "/ack/{id}" => consume::ack,
    post "/nack/{id}" => consume::nack,
    post "/push" => produce::push,
    post "/push/batch" => produce::push_batch,
    get "/delete" => cancel::delete,
    post "/cancel" => cancel::cancel,
    post "/reschedule" => reschedule::reschedule,
    get "/dead/{topic}" => dead::list,
    post "/dead/{target}/requeue" => dead::requeue,
    post "/ack" => consume::ack_batch,
    post "/nack" => consume::nack_batch,
    get "/reStore" => manage::restore_all,
    get "/reStore/{id}" => manage::restore_one,
    get "/messages" => search::find,
    get "/messages/{id}" => manage::message,
    get "/topics" => topics::list,
    post "/topics/{topic}/pause" => topics::pause,
    post "/topics/{topic}/resume" => topics::resume,
    get "/topics/{topic}/forecast" => topics::forecast,
    get "/forecast" => topics::forecast_all,
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

/// The whole OpenAPI document: every route of [`ROUTES`], by its handler's
/// `#[utoipa::path]`.
pub fn openapi() -> utoipa::openapi::OpenApi {
    docs::document(<Routes as utoipa::OpenApi>::openapi())
}

/// The document, made once: as `GET /openapi.json` serves it, and the
/// query parameters each route takes as it lists them.
struct Document {
    json: String,
    params: params::Table,
}

fn document() -> &'static Document {
    static DOCUMENT: OnceLock<Document> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let json = openapi()
            .to_json()
            .expect("the OpenAPI document serializes");
        let read = serde_json::from_str(&json).expect("the document reads back");
        Document {
            params: params::table(ROUTES, &read),
            json,
        }
    })
}

/// The query parameters `route` takes, as the document lists them.
fn allowed(route: (&'static str, &'static str)) -> &'static [String] {
    document().params.get(&route).map_or(&[], Vec::as_slice)
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    // JSON bodies are read as bytes up to the limit and checked before
    // they are parsed (see body.rs).
    let payload = web::PayloadConfig::new(MAX_REQUEST_BYTES);
    let path = web::PathConfig::default()
        .error_handler(|err, _| ApiError::invalid(ErrorCode::InvalidPath, err.to_string()).into());
    cfg.app_data(payload)
        .app_data(path)
        .app_data(web::Data::new(docs::Spec(&document().json)));
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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// `repeat`'s fields as the document lists them are those a push takes.
    #[test]
    fn the_document_lists_every_repeat_field_a_push_takes() {
        let doc = serde_json::to_value(openapi()).unwrap();
        let props = doc["components"]["schemas"]["RepeatRequest"]["properties"]
            .as_object()
            .expect("RepeatRequest's properties");
        let mut documented: Vec<&str> = props.keys().map(String::as_str).collect();
        let mut taken = crate::repeat::FIELDS.to_vec();
        documented.sort_unstable();
        taken.sort_unstable();
        assert_eq!(documented, taken);
    }

    /// Summaries are whole sentences of plain text: no Markdown backticks,
    /// no parenthesis left open where the first line ended.
    #[test]
    fn summaries_are_plain_whole_sentences() {
        let doc = serde_json::to_value(openapi()).unwrap();
        let mut seen = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let Some(summary) = op["summary"].as_str() else {
                    continue;
                };
                seen += 1;
                assert!(!summary.contains('`'), "{method} {path}: {summary}");
                assert!(!summary.contains("crate::"), "{method} {path}: {summary}");
                assert!(
                    !summary.starts_with("GET /") && !summary.starts_with("POST /"),
                    "{method} {path}: {summary}"
                );
                assert_eq!(
                    summary.matches('(').count(),
                    summary.matches(')').count(),
                    "{method} {path}: {summary}"
                );
            }
        }
        assert!(seen > 20, "{seen} summaries");
        let ack = doc["paths"]["/ack/{id}"]["post"]["summary"]
            .as_str()
            .unwrap();
        assert!(ack.contains("stale_delivery"), "{ack}");
    }

    fn check(route: (&'static str, &'static str), query: &str) -> Result<(), ApiError> {
        params::check(route, allowed(route), query)
    }

    #[test]
    fn routes_take_what_they_document_once() {
        assert!(check(("post", "/dead/{target}/requeue"), "limit=5").is_ok());
        for bad in ["bogus=1", "limit=5&limit=6", "limit=5&Limit=6"] {
            assert!(
                check(("post", "/dead/{target}/requeue"), bad).is_err(),
                "{bad}"
            );
        }
        assert!(check(("get", "/reStore"), "dryRun=true&expire=1").is_ok());
        assert!(check(("get", "/reStore"), "dryrun=true").is_err());
        assert!(check(("post", "/push"), "").is_ok());
        assert!(check(("post", "/push"), "delay=5").is_err());
        assert_eq!(allowed(("get", "/get/{topic}")), ["timeout", "count"]);
    }
}

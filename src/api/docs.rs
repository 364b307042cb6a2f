//! The API's description of itself: `GET /openapi.json`, an OpenAPI 3.1
//! document generated from the handlers' `#[utoipa::path]` attributes and
//! the types of [`super::schema`], and Swagger UI at `/docs`, whose files
//! are built into the binary (utoipa-swagger-ui's vendored copy: nothing is
//! fetched from elsewhere, at build time or at run time). Both are
//! read-only and need no admin token.

use std::sync::{Arc, LazyLock};

use actix_web::http::header;
use actix_web::{web, HttpResponse};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::OpenApi;

use crate::api::error::{ApiError, ErrorBody};
use crate::error::ErrorCode;

/// Where Swagger UI lives; `GET /docs` sends browsers to it.
const UI_ROOT: &str = "/docs/";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "delayq",
        description = "A clustered delayed-message queue. Message ids are 64-bit Snowflakes sent as decimal strings; times are epoch milliseconds. Errors are `{\"error\": code, \"message\": text}` with a 4xx/5xx status, and bad input changes nothing."
    ),
    components(schemas(ErrorBody)),
    modifiers(&AdminToken),
    tags(
        (name = "produce", description = "Push messages"),
        (name = "consume", description = "Long-poll a topic, ack, nack"),
        (name = "cancel", description = "Cancel messages before they are delivered"),
        (name = "dead", description = "Dead letters: list and requeue"),
        (name = "topics", description = "Topics with their counts; pause and resume a topic"),
        (name = "inspect", description = "A message's status and history; restore from the journal"),
        (name = "admin", description = "Cluster, journal, reconciliation and restore progress"),
        (name = "health", description = "Liveness and readiness"),
        (name = "docs", description = "This document and Swagger UI"),
    )
)]
struct ApiDoc;

/// With `--admin-token`, the admin routes need `Authorization: Bearer TOKEN`.
struct AdminToken;

impl utoipa::Modify for AdminToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "adminToken",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The server's --admin-token; needed only when one is set",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "readToken",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The server's --read-token (or its --admin-token): the routes that show message bodies need it when either is set",
                    ))
                    .build(),
            ),
        );
    }
}

/// The whole document: its description, tags and security scheme with
/// the operations of `routes` (every route the table serves).
pub fn document(routes: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.merge(routes);
    for item in doc.paths.paths.values_mut() {
        for op in [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            if let Some(summary) = &op.summary {
                op.summary = Some(summary_of(summary, op.description.as_deref()));
            }
        }
    }
    doc
}

/// An operation's summary as Swagger UI shows it (plain text, beside the
/// route): the first sentence of the handler's doc comment, which the
/// macro cuts at the end of its first line, whole again, without the route
/// it begins with and without the backticks Markdown would have read.
fn summary_of(first_line: &str, rest: Option<&str>) -> String {
    let text = match rest {
        Some(rest) => format!("{first_line} {rest}"),
        None => first_line.to_string(),
    };
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let text = match text.strip_prefix('`').and_then(|t| t.split_once("`: ")) {
        Some((_route, after)) => after.to_string(),
        None => text,
    };
    let sentence = match text.find(". ") {
        Some(end) => &text[..end],
        None => text.trim_end_matches('.'),
    };
    // Rust's intra-doc links mean nothing to an API's reader.
    let mut plain = sentence.replace('`', "");
    while let Some(start) = plain.find("([crate::") {
        let end = plain[start..]
            .find("])")
            .map_or(plain.len(), |e| start + e + 2);
        plain.replace_range(start..end, "");
        plain = plain.replace("  ", " ").replace(" ;", ";");
    }
    let mut chars = plain.chars();
    chars
        .next()
        .map_or(String::new(), |c| c.to_uppercase().chain(chars).collect())
}

/// The document as served, given by the route table (`configure`).
pub struct Spec(pub &'static str);

static UI_CONFIG: LazyLock<Arc<utoipa_swagger_ui::Config<'static>>> =
    LazyLock::new(|| Arc::new(utoipa_swagger_ui::Config::new(["/openapi.json"])));

/// `GET /openapi.json`: this document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "docs",
    responses((status = 200, description = "This document (OpenAPI 3.1)", body = Object)),
)]
pub async fn openapi_json(spec: web::Data<Spec>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(header::ContentType::json())
        .body(spec.0)
}

/// `GET /docs`: Swagger UI's page loads its files relative to itself, so
/// it is served at `/docs/`.
#[utoipa::path(
    get,
    path = "/docs",
    tag = "docs",
    responses((
        status = 308,
        description = "Swagger UI is at `/docs/`",
        headers(("Location" = String, description = "/docs/")),
    )),
)]
pub async fn ui_root() -> HttpResponse {
    HttpResponse::PermanentRedirect()
        .insert_header((header::LOCATION, UI_ROOT))
        .finish()
}

/// `GET /docs/{file}`: Swagger UI's page (`/docs/`) and its files.
#[utoipa::path(
    get,
    path = "/docs/{file}",
    tag = "docs",
    params(("file" = String, Path, description = "A file of Swagger UI; empty for its page")),
    responses(
        (status = 200, description = "The file", content(
            (String = "text/html"),
            (String = "text/css"),
            (String = "text/javascript"),
            (String = "application/json"),
            (String = "image/png"),
        )),
        (status = 404, description = "No such file", body = ErrorBody),
    ),
)]
pub async fn ui_file(file: web::Path<String>) -> Result<HttpResponse, ApiError> {
    match utoipa_swagger_ui::serve(&file, UI_CONFIG.clone()) {
        Ok(Some(f)) => {
            let mut reply = HttpResponse::Ok();
            reply.content_type(f.content_type);
            if f.gzpipped {
                reply.insert_header(header::ContentEncoding::Gzip);
            }
            Ok(reply.body(f.bytes.into_owned()))
        }
        Ok(None) => Err(ApiError::NotFound {
            code: ErrorCode::NotFound,
            message: format!("Swagger UI has no file '{file}'"),
        }),
        Err(e) => Err(ApiError::Internal(format!("Swagger UI: {e}"))),
    }
}

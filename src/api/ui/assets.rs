//! The dashboard's files, built into the binary: its own stylesheet and
//! script (`assets/ui/`) and the vendored htmx and uPlot
//! (`assets/vendor/`, versions and licenses in its README). Their URLs
//! carry this build's version, so browsers may keep them for a year.

use actix_web::http::header;
use actix_web::{web, HttpResponse};

use crate::api::error::ApiError;
use crate::error::ErrorCode;

/// (name, content type, bytes).
const FILES: &[(&str, &str, &[u8])] = &[
    (
        "dashboard.css",
        "text/css; charset=utf-8",
        include_bytes!("../../../assets/ui/dashboard.css"),
    ),
    (
        "dashboard.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../assets/ui/dashboard.js"),
    ),
    (
        "htmx.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../assets/vendor/htmx/htmx.min.js"),
    ),
    (
        "uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../assets/vendor/uplot/uPlot.iife.min.js"),
    ),
    (
        "uPlot.min.css",
        "text/css; charset=utf-8",
        include_bytes!("../../../assets/vendor/uplot/uPlot.min.css"),
    ),
];

/// The URL of a file, with this build's version for cache busting.
pub fn url(name: &str) -> String {
    format!(
        "/ui/assets/{name}?v={}-{}",
        env!("CARGO_PKG_VERSION"),
        crate::GIT_REVISION
    )
}

/// `GET /ui/assets/{file}`.
pub async fn file(name: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let Some((_, content_type, bytes)) = FILES.iter().find(|(n, _, _)| *n == name.as_str()) else {
        return Err(ApiError::NotFound {
            code: ErrorCode::NotFound,
            message: format!("the dashboard has no file '{name}'"),
        });
    };
    Ok(HttpResponse::Ok()
        .content_type(*content_type)
        .insert_header((header::CACHE_CONTROL, "public, max-age=31536000, immutable"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .body(*bytes))
}

//! The dashboard's answers other than a page: an error shown as a page, the
//! headers every answer carries, a redirect after a form, with a notice.

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};

use super::assets;
use super::html::{esc, url_encode};
use super::sign::notice_sig;
use crate::api::error::ApiError;

/// What stopped a page: shown as a page with the API's status code.
#[derive(Debug)]
pub struct UiError(pub ApiError);

impl std::fmt::Display for UiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<E> From<E> for UiError
where
    ApiError: From<E>,
{
    fn from(e: E) -> Self {
        UiError(ApiError::from(e))
    }
}

impl ResponseError for UiError {
    fn status_code(&self) -> StatusCode {
        self.0.status_code()
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        let html = format!(
            r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{code} · delayq</title><link rel="stylesheet" href="{css}"></head><body><header><a class="brand" href="/ui">delayq</a></header><main><h1>{code}</h1><p class="notice err">{message}</p><p><a href="/ui">Back to the overview</a></p></main></body></html>"#,
            code = status.as_u16(),
            css = assets::url("dashboard.css"),
            message = esc(&self.0.to_string()),
        );
        secure(HttpResponse::build(status))
            .content_type(header::ContentType::html())
            .body(html)
    }
}

/// The headers every page carries: no framing, scripts and styles from
/// this origin only, forms posted only here, nothing cached.
pub fn secure(mut reply: actix_web::HttpResponseBuilder) -> actix_web::HttpResponseBuilder {
    reply
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        ))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "same-origin"))
        .insert_header((header::CACHE_CONTROL, "no-store"));
    reply
}

/// A 303 to `to` (after a form's POST).
pub fn see_other(to: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, to))
        .finish()
}

/// `back` with a notice for the next page: `done` or `error`.
pub fn back_with(back: &str, kind: &str, text: &str) -> HttpResponse {
    let sep = if back.contains('?') { '&' } else { '?' };
    see_other(&format!(
        "{back}{sep}{kind}={}&sig={}",
        url_encode(text),
        notice_sig(kind, text)
    ))
}

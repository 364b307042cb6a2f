//! The dashboard at `/ui`: server-rendered HTML pages over the same state
//! as the API, with two small vendored libraries (htmx refreshes parts of
//! a page, uPlot draws the lateness chart; `assets/vendor/`), all built
//! into the binary ([`assets`]).
//!
//! | page | shows | actions |
//! |---|---|---|
//! | Overview (`/ui`) | topics with waiting, delaying, ready, in-flight and dead counts, push and delivery rates; lateness and rate charts | |
//! | Topic (`/ui/topics/{topic}`) | its messages by status, a page at a time; search by id or bizKey | |
//! | Message (`/ui/messages/{id}`) | its fields, body and status history | requeue, delete (dead) |
//! | Dead letters (`/ui/dead`, `/ui/dead/{topic}`) | dead messages per topic | requeue or delete one or all |
//! | Cluster (`/ui/cluster`) | nodes, leader, each shard's owner, epoch and counts | rebalance, move a shard |
//! | Restore (`/ui/restore`) | this node's restore, a resumable cursor, the last reconciliation | reconcile: report, repair |
//!
//! Counts per topic and status come from the journal (one grouped,
//! index-only count, [`overview`]); rates and lateness from this process's
//! metrics, sampled every [`history::EVERY`] into a ring buffer
//! ([`history`]). Actions call the queue layer ([`crate::queue`]) or the
//! cluster, as the API's routes do.
//!
//! Who may do what ([`auth`]): with `--admin-token`, every page needs a
//! login (the token, once, for a signed session cookie); actions are POST
//! forms carrying a CSRF token tied to that cookie, refused from another
//! origin; `--ui-read-only` shows everything and offers no action.
//!
//! These routes answer HTML (and the chart's JSON), not the API's JSON:
//! they are listed in [`UI_ROUTES`], apart from [`super::ROUTES`], and are
//! left out of the OpenAPI document.

/// The viewer of a page, or (from the handler) the way to the login form.
macro_rules! viewer {
    ($state:expr, $req:expr) => {
        match $crate::api::ui::Viewer::of(&$state, &$req) {
            Ok(v) => v,
            Err(login) => return Ok($crate::api::ui::see_other(&login)),
        }
    };
}

mod assets;
pub mod auth;
mod cluster;
mod dead;
pub mod history;
mod message;
pub(crate) mod overview;
mod restore;
mod topic;

use std::fmt::Write;

use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpResponse, ResponseError};

use crate::api::error::ApiError;
pub use auth::Viewer;

/// The dashboard's routes, apart from the API's: they answer HTML and are
/// left out of the OpenAPI document (a test checks both lists).
macro_rules! ui_routes {
    ($($method:ident $path:literal => $module:ident :: $handler:ident,)*) => {
        /// Every route of the dashboard: (method, path).
        pub const UI_ROUTES: &[(&str, &str)] = &[$((stringify!($method), $path),)*];

        pub fn register(cfg: &mut web::ServiceConfig) {
            $(cfg.route($path, web::$method().to($module::$handler));)*
        }
    };
}

ui_routes! {
    get "/ui" => overview::page,
    get "/ui/chart.json" => overview::chart,
    get "/ui/topics/{topic}" => topic::page,
    post "/ui/topics/{topic}/pause" => topic::pause,
    post "/ui/topics/{topic}/resume" => topic::resume,
    get "/ui/messages/{id}" => message::page,
    post "/ui/messages/{id}/requeue" => dead::requeue_one,
    post "/ui/messages/{id}/delete" => dead::delete_one,
    get "/ui/dead" => dead::index,
    get "/ui/dead/{topic}" => dead::page,
    post "/ui/dead/{topic}/requeue" => dead::requeue_all,
    post "/ui/dead/{topic}/delete" => dead::delete_all,
    get "/ui/cluster" => cluster::page,
    post "/ui/cluster/rebalance" => cluster::rebalance,
    post "/ui/cluster/shards/{shard}/move" => cluster::move_shard,
    get "/ui/restore" => restore::page,
    post "/ui/restore/reconcile" => restore::reconcile,
    get "/ui/login" => auth::login_page,
    post "/ui/login" => auth::login,
    post "/ui/logout" => auth::logout,
    get "/ui/assets/{file}" => assets::file,
}

/// HTML-escapes text for an element's content or a quoted attribute.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// Percent-encodes text for a URL's path segment or query value.
pub fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// An epoch-ms time as UTC, to the millisecond.
pub fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
    )
}

/// A bizKey, escaped, its white space at either end made visible (`A-1`
/// and `A-1 ` are two keys and must not look alike): each such character
/// is shown as `␠` (or its code) in a marked span.
pub fn key(text: &str) -> String {
    let inner = text.trim();
    if inner.len() == text.len() {
        return esc(text);
    }
    let start = text.len() - text.trim_start().len();
    let end = start + inner.len();
    let mark = |edge: &str| {
        let shown: String = edge
            .chars()
            .map(|c| match c {
                ' ' => "␠".to_string(),
                '\t' => "⇥".to_string(),
                '\n' => "↵".to_string(),
                other => format!("U+{:04X}", other as u32),
            })
            .collect();
        format!(r#"<span class="ws" title="white space">{shown}</span>"#)
    };
    let (head, tail) = (&text[..start], &text[end..]);
    let mut out = String::new();
    if !head.is_empty() {
        out.push_str(&mark(head));
    }
    out.push_str(&esc(inner));
    if !tail.is_empty() {
        out.push_str(&mark(tail));
    }
    out
}

/// A duration in ms, as a person reads it.
pub fn duration(ms: i64) -> String {
    let (abs, sign) = (ms.unsigned_abs(), if ms < 0 { "−" } else { "" });
    match abs {
        0..=999 => format!("{sign}{abs} ms"),
        1_000..=59_999 => format!("{sign}{:.1} s", abs as f64 / 1e3),
        60_000..=3_599_999 => format!("{sign}{:.1} min", abs as f64 / 6e4),
        3_600_000..=86_399_999 => format!("{sign}{:.1} h", abs as f64 / 3.6e6),
        _ => format!("{sign}{:.1} d", abs as f64 / 8.64e7),
    }
}

/// A status as a badge.
pub fn badge(status: crate::message::Status) -> String {
    let name = status.to_string();
    format!(
        r#"<span class="badge s-{}">{name}</span>"#,
        name.to_lowercase()
    )
}

/// The first characters of a body, escaped.
pub fn preview(body: &str, chars: usize) -> String {
    let mut cut: String = body.chars().take(chars).collect();
    if cut.len() < body.len() {
        cut.push('…');
    }
    esc(&cut)
}

/// The navigation entries: (path, label).
const NAV: &[(&str, &str)] = &[
    ("/ui", "Overview"),
    ("/ui/dead", "Dead letters"),
    ("/ui/cluster", "Cluster"),
    ("/ui/restore", "Restore & reconcile"),
];

/// A whole page: the layout around `body`, with the viewer's notices.
pub fn page(viewer: &Viewer, title: &str, nav: &str, body: &str) -> HttpResponse {
    viewer.respond(StatusCode::OK, layout(viewer, title, nav, body))
}

/// The layout around `body`: head, navigation, notices.
pub fn layout(viewer: &Viewer, title: &str, nav: &str, body: &str) -> String {
    let mut links = String::new();
    for (path, label) in NAV {
        let class = if *path == nav { r#" class="on""# } else { "" };
        let _ = write!(links, r#"<a href="{path}"{class}>{label}</a>"#);
    }
    let mut notices = String::new();
    if let Some(done) = &viewer.done {
        let _ = write!(notices, r#"<p class="notice ok">{}</p>"#, esc(done));
    }
    if let Some(error) = &viewer.error {
        let _ = write!(notices, r#"<p class="notice err">{}</p>"#, esc(error));
    }
    format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="htmx-config" content='{{"includeIndicatorStyles":false}}'>
<title>{title} · delayq</title>
<link rel="stylesheet" href="{css}">
<link rel="stylesheet" href="{uplot_css}">
<script src="{htmx}" defer></script>
<script src="{uplot}" defer></script>
<script src="{js}" defer></script>
</head>
<body>
<header><a class="brand" href="/ui">delayq</a><nav>{links}</nav><div class="who">{who}</div></header>
<main>
{notices}{body}
</main>
</body>
</html>"#,
        title = esc(title),
        css = assets::url("dashboard.css"),
        uplot_css = assets::url("uPlot.min.css"),
        htmx = assets::url("htmx.min.js"),
        uplot = assets::url("uPlot.iife.min.js"),
        js = assets::url("dashboard.js"),
        who = viewer.header(),
    )
}

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
        auth::notice_sig(kind, text)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_show_white_space_at_their_ends() {
        assert_eq!(key("A-1"), "A-1");
        assert_ne!(key("A-1 "), key("A-1"));
        assert!(key("A-1 ").contains("␠"));
        assert!(key(" <b>").starts_with(r#"<span class="ws""#));
        assert!(key(" <b>").ends_with("&lt;b&gt;"));
        assert!(
            key("a\tb").contains('\t'),
            "inner white space is left as it is"
        );
    }

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
    }

    #[test]
    fn encodes_urls() {
        assert_eq!(url_encode("a b/c?d=é"), "a%20b%2Fc%3Fd%3D%C3%A9");
        assert_eq!(url_encode("orders.v1:eu-west_1"), "orders.v1%3Aeu-west_1");
    }

    #[test]
    fn previews_cut_on_characters() {
        assert_eq!(preview("héllo wörld", 5), "héllo…");
        assert_eq!(preview("<b>", 10), "&lt;b&gt;");
    }

    #[test]
    fn every_route_is_under_ui() {
        for (_, path) in UI_ROUTES {
            assert!(path.starts_with("/ui"), "{path}");
        }
    }
}

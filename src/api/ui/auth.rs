//! Who may see and do what on the dashboard.
//!
//! - The session is a cookie (`delayq_ui`, HttpOnly, SameSite=Strict, path
//!   `/ui`) holding its issue time, a random nonce and an HMAC-SHA256 of
//!   both keyed with the admin token: any node of a cluster sharing the
//!   token accepts it, and changing the token ends every session. It lasts
//!   [`SESSION_MS`].
//! - With `--admin-token`, a page without a valid session sends the
//!   browser to the login form, which asks for the token once (compared in
//!   constant time, as the API does). Without one, every visitor gets a
//!   session on the first page: it anchors the CSRF token.
//! - The read token (`--read-token`) logs in too, to a session that sees
//!   every page and takes no action (support staff): the session says so
//!   (a `.r` in its signed body), and its pages offer no action.
//! - Every action is a POST form with a CSRF token, an HMAC of the session
//!   cookie: a page of another site can neither read it nor (SameSite)
//!   send the cookie. Actions are also refused when the browser says the
//!   request comes from elsewhere (`Sec-Fetch-Site` other than
//!   `same-origin`, or an `Origin` whose host is not this one).
//! - `--ui-read-only`: no forms are shown and every action answers 403.
//! - Logins are throttled per client address: after [`LOGIN_FAILURES`]
//!   wrong tokens within [`LOGIN_WINDOW`] that address gets 429 until the
//!   window has passed.
//! - Logging out revokes the session on every node: its id is kept in
//!   Redis (`{P}:ui-revoked`) until it would have expired, and each node
//!   reads the list every second ([`sync_revoked`]).

use std::collections::HashMap;

use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};

use super::html::{esc, url_encode};
use super::response::{secure, UiError};
use super::sign::{hmac_hex, notice};
use crate::api::error::ApiError;
use crate::api::state::{constant_time_eq, AppState};
use crate::error::ErrorCode;
use crate::message::now_ms;

/// The session cookie's name.
pub const COOKIE: &str = "delayq_ui";
/// How long a session lasts: 12 hours.
pub const SESSION_MS: i64 = 12 * 3600 * 1000;

pub(super) type Form = web::Form<HashMap<String, String>>;

fn mac(state: &AppState, purpose: &str, text: &str) -> String {
    let key = state.admin_token.as_deref().unwrap_or("");
    hmac_hex(&format!("delayq-ui:{key}"), purpose, text)
}

/// Wrong logins an address may make within [`LOGIN_WINDOW`].
pub const LOGIN_FAILURES: u32 = 5;
pub const LOGIN_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

/// Wrong logins per client address: when the window began, how many.
pub(super) static FAILED_LOGINS: std::sync::Mutex<
    Option<HashMap<std::net::IpAddr, (std::time::Instant, u32)>>,
> = std::sync::Mutex::new(None);

/// Sessions logged out (their `issued.nonce`), on any node.
pub(super) static REVOKED: std::sync::RwLock<Option<std::collections::HashSet<String>>> =
    std::sync::RwLock::new(None);

fn revoked(body: &str) -> bool {
    REVOKED
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .is_some_and(|r| r.contains(body))
}

/// Keeps this node's list of logged-out sessions in step with Redis's,
/// every second.
pub async fn sync_revoked(redis: crate::redis::schedule::RedisSchedule) {
    loop {
        let list = redis.records().revoked_ui_sessions().await;
        if let Ok(list) = list {
            let mut r = REVOKED.write().unwrap_or_else(|p| p.into_inner());
            let set = r.get_or_insert_with(Default::default);
            // Kept locally too: a logout this node made counts at once,
            // even before Redis has it; sessions past their end go.
            set.extend(list);
            let now = now_ms();
            set.retain(|body| {
                body.split('.')
                    .next()
                    .and_then(|t| t.parse::<i64>().ok())
                    .is_some_and(|issued| issued + SESSION_MS > now)
            });
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// A new session's cookie value; a reader's (the read token's) looks only.
pub(super) fn issue(state: &AppState, reader: bool) -> String {
    let role = if reader { ".r" } else { "" };
    let body = format!("{}.{}{role}", now_ms(), uuid::Uuid::new_v4().simple());
    let sig = mac(state, "session", &body);
    format!("{body}.{sig}")
}

/// Is `value` a session this server issued (under the current token), not
/// yet expired? `Some(true)` for a reader's.
fn valid(state: &AppState, value: &str) -> Option<bool> {
    let (body, sig) = value.rsplit_once('.')?;
    let issued = body.split('.').next().and_then(|t| t.parse::<i64>().ok())?;
    let age = now_ms() - issued;
    ((0..SESSION_MS).contains(&age)
        && constant_time_eq(sig.as_bytes(), mac(state, "session", body).as_bytes())
        && !revoked(body))
    .then(|| body.ends_with(".r"))
}

/// The CSRF token of a session.
fn csrf_of(state: &AppState, session: &str) -> String {
    mac(state, "csrf", session)
}

pub(super) fn cookie_of(req: &HttpRequest) -> Option<String> {
    req.headers()
        .get_all(header::COOKIE)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_string())
}

pub(super) fn set_cookie(value: &str, max_age_s: i64) -> String {
    format!("{COOKIE}={value}; Path=/ui; Max-Age={max_age_s}; HttpOnly; SameSite=Strict")
}

/// Who is looking at a page, and what the page may offer them.
pub struct Viewer {
    /// The CSRF token for forms, when this viewer may act.
    csrf: Option<String>,
    /// A new session to set with this page.
    new_session: Option<String>,
    pub read_only: bool,
    /// An admin token is configured (the header offers a logout).
    login: bool,
    /// Logged in with the read token: sees everything, acts on nothing.
    pub reader: bool,
    pub node: String,
    /// Notices passed on by the previous action (`?done=`, `?error=`).
    pub done: Option<String>,
    pub error: Option<String>,
}

impl Viewer {
    /// The viewer of a page, or where to send them (the login form's URL).
    pub fn of(state: &AppState, req: &HttpRequest) -> Result<Viewer, String> {
        let login = state.admin_token.is_some();
        let (session, new_session, reader) =
            match cookie_of(req).and_then(|c| valid(state, &c).map(|reader| (c, reader))) {
                Some((c, reader)) => (c, None, reader),
                None if login => {
                    let next = req
                        .uri()
                        .path_and_query()
                        .map_or("/ui", |p| p.as_str())
                        .to_string();
                    return Err(format!("/ui/login?next={}", url_encode(&next)));
                }
                None => {
                    let c = issue(state, false);
                    (c.clone(), Some(c), false)
                }
            };
        let q = web::Query::<HashMap<String, String>>::from_query(req.query_string())
            .map(|q| q.into_inner())
            .unwrap_or_default();
        Ok(Viewer {
            csrf: (!state.ui_read_only).then(|| csrf_of(state, &session)),
            new_session,
            read_only: state.ui_read_only || reader,
            login,
            reader,
            node: state.cluster.view().node_id,
            done: notice(&q, "done"),
            error: notice(&q, "error"),
        })
    }

    pub fn may_act(&self) -> bool {
        self.csrf.is_some() && !self.reader
    }

    /// A POST form of one button (nothing when this viewer may not act):
    /// `fields` are hidden inputs, `confirm` a question asked first.
    pub fn button(
        &self,
        action: &str,
        label: &str,
        class: &str,
        fields: &[(&str, &str)],
        confirm: Option<&str>,
    ) -> String {
        let Some(csrf) = self.csrf.as_ref().filter(|_| !self.reader) else {
            return String::new();
        };
        let mut hidden = format!(r#"<input type="hidden" name="csrf" value="{csrf}">"#);
        for (name, value) in fields {
            hidden.push_str(&format!(
                r#"<input type="hidden" name="{}" value="{}">"#,
                esc(name),
                esc(value)
            ));
        }
        let confirm = confirm.map_or(String::new(), |q| format!(r#" data-confirm="{}""#, esc(q)));
        format!(
            r#"<form method="post" action="{}" class="inline"{confirm}>{hidden}<button type="submit" class="{class}">{}</button></form>"#,
            esc(action),
            esc(label)
        )
    }

    /// The CSRF input for a form of its own (empty when this viewer may not act).
    pub fn csrf_input(&self) -> String {
        match &self.csrf {
            Some(c) if !self.reader => format!(r#"<input type="hidden" name="csrf" value="{c}">"#),
            _ => String::new(),
        }
    }

    /// The header's right side: node, mode, logout.
    pub fn header(&self) -> String {
        let mut out = format!(
            r#"<span class="node">node <b>{}</b></span>"#,
            esc(&self.node)
        );
        if self.reader {
            out.push_str(
                r#"<span class="badge ro" title="logged in with the read token">read token</span>"#,
            );
        } else if self.read_only {
            out.push_str(r#"<span class="badge ro">read-only</span>"#);
        }
        if self.login {
            if let Some(csrf) = &self.csrf {
                out.push_str(&format!(
                    r#"<form method="post" action="/ui/logout" class="inline"><input type="hidden" name="csrf" value="{csrf}"><button type="submit" class="link">Log out</button></form>"#
                ));
            }
        }
        out
    }

    /// A viewer not logged in (the login form's page).
    pub fn anonymous(state: &AppState) -> Viewer {
        Viewer {
            csrf: None,
            new_session: None,
            read_only: state.ui_read_only,
            login: false,
            reader: false,
            node: state.cluster.view().node_id,
            done: None,
            error: None,
        }
    }

    /// A page's answer, setting the session cookie when it is new.
    pub fn respond(&self, status: StatusCode, html: String) -> HttpResponse {
        let mut reply = secure(HttpResponse::build(status));
        if let Some(c) = &self.new_session {
            reply.insert_header((header::SET_COOKIE, set_cookie(c, SESSION_MS / 1000)));
        }
        reply.content_type(header::ContentType::html()).body(html)
    }
}

fn forbidden(message: impl Into<String>) -> UiError {
    UiError(ApiError::Forbidden {
        code: ErrorCode::Forbidden,
        message: message.into(),
    })
}

/// The request comes from a page of this origin, as far as the browser
/// says: `Sec-Fetch-Site` (when sent) is `same-origin`, and `Origin` (when
/// sent) names the host the request was sent to.
pub(super) fn same_origin(req: &HttpRequest) -> Result<(), UiError> {
    let h = req.headers();
    if let Some(site) = h.get("Sec-Fetch-Site").and_then(|v| v.to_str().ok()) {
        if site != "same-origin" {
            return Err(forbidden(format!(
                "a dashboard action must come from the dashboard's own pages (Sec-Fetch-Site: {site})"
            )));
        }
    }
    if let Some(origin) = h.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let host = h
            .get("X-Forwarded-Host")
            .or_else(|| h.get(header::HOST))
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let origin_host = origin.split_once("://").map_or("", |(_, rest)| rest);
        if host.is_empty() || origin_host != host {
            return Err(forbidden(format!(
                "a dashboard action must come from the dashboard's own pages (Origin: {origin})"
            )));
        }
    }
    Ok(())
}

/// Checks an action's request: not read-only, from this origin, a valid
/// session (not a reader's), and its form's CSRF token.
pub fn check_action(
    state: &AppState,
    req: &HttpRequest,
    form: &HashMap<String, String>,
) -> Result<(), UiError> {
    if check_session(state, req, form)? {
        return Err(forbidden(
            "logged in with the read token: the dashboard shows everything and takes no action; log in with the admin token to act",
        ));
    }
    Ok(())
}

/// Checks a form's request: not read-only, from this origin, a valid
/// session, and its form's CSRF token; whether it is a reader's.
pub(super) fn check_session(
    state: &AppState,
    req: &HttpRequest,
    form: &HashMap<String, String>,
) -> Result<bool, UiError> {
    if state.ui_read_only {
        return Err(forbidden(
            "the dashboard is read-only (--ui-read-only): it takes no actions",
        ));
    }
    same_origin(req)?;
    let Some((session, reader)) =
        cookie_of(req).and_then(|c| valid(state, &c).map(|reader| (c, reader)))
    else {
        return Err(UiError(ApiError::Unauthorized));
    };
    let given = form.get("csrf").map(String::as_str).unwrap_or("");
    if !constant_time_eq(given.as_bytes(), csrf_of(state, &session).as_bytes()) {
        return Err(forbidden(
            "the form's CSRF token is missing or does not match this session; reload the page and try again",
        ));
    }
    Ok(reader)
}

/// Where a form sends the browser back to: a dashboard path, or `default`.
pub fn back(form: &HashMap<String, String>, default: &str) -> String {
    match form.get("back") {
        Some(b) if b.starts_with("/ui") && !b.contains("//") && !b.contains('\\') => b.clone(),
        _ => default.to_string(),
    }
}

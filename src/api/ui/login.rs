//! Logging in to the dashboard (the admin or the read token, for a signed
//! session cookie; wrong tokens throttled per address) and out (the
//! session revoked on every node).

use std::collections::HashMap;

use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};

use super::auth::{
    back, check_session, cookie_of, issue, same_origin, set_cookie, Form, Viewer, FAILED_LOGINS,
    LOGIN_FAILURES, LOGIN_WINDOW, REVOKED, SESSION_MS,
};
use super::html::esc;
use super::layout::{self, layout};
use super::response::{see_other, UiError};
use crate::api::state::{constant_time_eq, AppState};

fn login_form(next: &str, wrong: bool, reader: bool) -> String {
    let (notice, intro, label) = if reader {
        (
            "That is neither the admin token nor the read token.",
            "This node has an admin token (<code>--admin-token</code>): enter it to use the dashboard, or the read token (<code>--read-token</code>) to see it without acting.",
            "Admin or read token",
        )
    } else {
        (
            "That is not the admin token.",
            "This node has an admin token (<code>--admin-token</code>). Enter it to use the dashboard.",
            "Admin token",
        )
    };
    let notice = if wrong {
        format!(r#"<p class="notice err">{notice}</p>"#)
    } else {
        String::new()
    };
    format!(
        r#"<section class="login"><h1>Log in</h1>{notice}<p>{intro}</p>
<form method="post" action="/ui/login"><input type="hidden" name="next" value="{next}"><label>{label} <input type="password" name="token" id="token" autocomplete="current-password" autofocus required></label> <button type="submit" id="login">Log in</button></form></section>"#,
        next = esc(next)
    )
}

/// `GET /ui/login`.
pub async fn page(state: web::Data<AppState>, req: HttpRequest) -> HttpResponse {
    if state.admin_token.is_none() {
        return see_other("/ui");
    }
    let q = web::Query::<HashMap<String, String>>::from_query(req.query_string())
        .map(|q| q.into_inner())
        .unwrap_or_default();
    let next = back(
        &HashMap::from([("back".into(), q.get("next").cloned().unwrap_or_default())]),
        "/ui",
    );
    let form = login_form(&next, false, state.read_token.is_some());
    layout::page(&Viewer::anonymous(&state), "Log in", "", &form)
}

/// `POST /ui/login`: the admin token for a session cookie.
pub async fn login(
    state: web::Data<AppState>,
    req: HttpRequest,
    form: Form,
) -> Result<HttpResponse, UiError> {
    same_origin(&req)?;
    let Some(token) = &state.admin_token else {
        return Ok(see_other("/ui"));
    };
    let next = back(
        &HashMap::from([("back".into(), form.get("next").cloned().unwrap_or_default())]),
        "/ui",
    );
    let addr = req
        .peer_addr()
        .map(|a| a.ip())
        .unwrap_or(std::net::IpAddr::from([0, 0, 0, 0]));
    let throttled = {
        let mut g = FAILED_LOGINS.lock().unwrap_or_else(|p| p.into_inner());
        let map = g.get_or_insert_with(HashMap::new);
        map.retain(|_, (since, _)| since.elapsed() < LOGIN_WINDOW);
        map.get(&addr)
            .filter(|(_, n)| *n >= LOGIN_FAILURES)
            .map(|(since, _)| LOGIN_WINDOW.saturating_sub(since.elapsed()))
    };
    if let Some(wait) = throttled {
        tracing::warn!(%addr, "dashboard login refused: too many wrong tokens from this address");
        return Ok(HttpResponse::TooManyRequests()
            .insert_header((header::RETRY_AFTER, wait.as_secs().max(1).to_string()))
            .content_type(header::ContentType::plaintext())
            .body(format!(
                "too many wrong logins from this address; try again in {} s",
                wait.as_secs().max(1)
            )));
    }
    let given = form.get("token").map(String::as_str).unwrap_or("");
    let admin = constant_time_eq(given.as_bytes(), token.as_bytes());
    let reader = !admin
        && state
            .read_token
            .as_ref()
            .is_some_and(|t| constant_time_eq(given.as_bytes(), t.as_bytes()));
    if !admin && !reader {
        tracing::warn!(%addr, "dashboard login with a wrong admin token");
        let mut g = FAILED_LOGINS.lock().unwrap_or_else(|p| p.into_inner());
        let e = g
            .get_or_insert_with(HashMap::new)
            .entry(addr)
            .or_insert((std::time::Instant::now(), 0));
        e.1 += 1;
        drop(g);
        return Ok(Viewer::anonymous(&state).respond(
            StatusCode::UNAUTHORIZED,
            layout(
                &Viewer::anonymous(&state),
                "Log in",
                "",
                &login_form(&next, true, state.read_token.is_some()),
            ),
        ));
    }
    if let Some(map) = FAILED_LOGINS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_mut()
    {
        map.remove(&addr);
    }
    Ok(HttpResponse::SeeOther()
        .insert_header((
            header::SET_COOKIE,
            set_cookie(&issue(&state, reader), SESSION_MS / 1000),
        ))
        .insert_header((header::LOCATION, next))
        .finish())
}

/// `POST /ui/logout`: the session cookie is cleared.
pub async fn logout(
    state: web::Data<AppState>,
    req: HttpRequest,
    form: Form,
) -> Result<HttpResponse, UiError> {
    check_session(&state, &req, &form)?;
    // The session ends everywhere, not only in this browser: a copied
    // cookie no longer works on any node.
    if let Some((body, issued)) = cookie_of(&req).and_then(|c| {
        let body = c.rsplit_once('.')?.0.to_string();
        let issued: i64 = body.split('.').next()?.parse().ok()?;
        Some((body, issued))
    }) {
        REVOKED
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(Default::default)
            .insert(body.clone());
        let saved = state
            .queue
            .revoke_ui_session(&body, issued + SESSION_MS)
            .await;
        if let Err(e) = saved {
            tracing::warn!(error = %e, "cannot share a logout with the other nodes; it holds on this one");
        }
    }
    Ok(HttpResponse::SeeOther()
        .insert_header((header::SET_COOKIE, set_cookie("", 0)))
        .insert_header((header::LOCATION, "/ui/login"))
        .finish())
}

//! One message: its fields, its body (as text) and its status history, as
//! `GET /messages/{id}` answers them; a dead message can be requeued or
//! deleted from here.

use std::fmt::Write;

use actix_web::{web, HttpRequest, HttpResponse};

use super::html::{badge, duration, esc, key, time, url_encode};
use super::layout;
use super::response::UiError;
use crate::api::error::ApiError;
use crate::api::parse::parse_id;
use crate::api::state::AppState;
use crate::error::ErrorCode;
use crate::message::Status;

/// `GET /ui/messages/{id}`.
pub async fn page(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, UiError> {
    let viewer = viewer!(state, req);
    let id = parse_id(&id)?;
    let Some((row, history)) = state.queue.journal_row(id).await? else {
        return Err(UiError(ApiError::NotFound {
            code: ErrorCode::NotFound,
            message: format!("no message {id}"),
        }));
    };
    let m = row.message();
    let opt =
        |v: Option<String>| v.map_or(r#"<span class="zero">none</span>"#.to_string(), |s| esc(&s));
    let mut fields = String::new();
    for (name, value) in [
        ("Id", format!(r#"<span class="mono">{id}</span>"#)),
        (
            "Topic",
            format!(
                r#"<a class="mono" href="/ui/topics/{}">{}</a>"#,
                url_encode(&m.topic),
                esc(&m.topic)
            ),
        ),
        (
            "bizKey",
            m.biz_key
                .as_deref()
                .map_or(r#"<span class="zero">none</span>"#.to_string(), key),
        ),
        (
            "Group",
            m.group
                .as_deref()
                .map_or(r#"<span class="zero">none</span>"#.to_string(), key),
        ),
        ("Status", badge(row.status())),
        (
            "Attempts",
            format!("{} of {}", row.attempts, row.max_attempts),
        ),
        ("Priority", m.priority.to_string()),
        ("Created", time(m.create_time)),
        ("Delay", duration(m.delay)),
        ("Due", time(m.due_time)),
        ("Ack within (ttl)", duration(m.ttl)),
        ("Last change", time(row.updated_time)),
        ("Retry", opt(row.retry.clone())),
        ("Repeat", opt(row.repeat_spec.clone())),
        (
            "Occurrence",
            opt(m
                .occurrence
                .map(|o| format!("#{} due {}", o.number, time(o.due_time)))),
        ),
    ] {
        let _ = write!(fields, "<tr><th>{name}</th><td>{value}</td></tr>");
    }
    let mut flow = String::new();
    let mut previous: Option<i64> = None;
    for f in &history {
        let mut status = Status::from_code(f.status).map_or(f.status.to_string(), badge);
        if let Some(due) = f.due_time {
            let _ = write!(status, r#" <span class="hint">until {}</span>"#, time(due));
        }
        let after = previous.map_or(String::new(), |p| format!("+{}", duration(f.flow_time - p)));
        previous = Some(f.flow_time);
        let _ = write!(
            flow,
            r#"<tr><td>{}</td><td class="num">{after}</td><td>{status}</td><td class="num">{}</td><td class="mono">{}</td><td>{}</td><td>{}</td></tr>"#,
            time(f.flow_time),
            f.attempts,
            esc(&f.shard),
            esc(&f.node_id),
            esc(&f.host),
        );
    }
    let mut actions = String::new();
    if row.status() == Status::Dead && viewer.may_act() {
        let back = format!("/ui/messages/{id}");
        actions = format!(
            r#"<div class="actions">{}{}</div>"#,
            viewer.button(
                &format!("/ui/messages/{id}/requeue"),
                "Requeue",
                "primary",
                &[("back", &back)],
                None
            ),
            viewer.button(
                &format!("/ui/messages/{id}/delete"),
                "Delete",
                "danger",
                &[("back", &back)],
                Some("Delete this dead message? It cannot be requeued afterwards.")
            ),
        );
    }
    let body = format!(
        r#"<h1>Message <span class="mono">{id}</span> {status}</h1>
{actions}
<div class="split"><section><h2>Fields</h2><table class="fields">{fields}</table></section>
<section><h2>Body <span class="hint">{len} bytes</span></h2><pre class="body" id="body">{body}</pre></section></div>
<h2>History</h2>
<table class="grid" id="history"><thead><tr><th>Time (UTC)</th><th class="num">After</th><th>Status</th><th class="num">Attempts</th><th>Shard</th><th>Node</th><th>Host</th></tr></thead><tbody>{flow}</tbody></table>"#,
        status = badge(row.status()),
        len = m.body.len(),
        body = esc(&m.body),
    );
    Ok(layout::page(&viewer, &format!("Message {id}"), "", &body))
}

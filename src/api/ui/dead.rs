//! Dead letters: the topics that have any, a topic's dead messages, and
//! requeueing or deleting one or all of them (through [`crate::queue::dead`]).

use std::collections::HashMap;
use std::fmt::Write;

use actix_web::{web, HttpRequest, HttpResponse};

use super::auth::{back, check_action};
use super::html::{esc, key, preview, time, url_encode};
use super::layout;
use super::response::{back_with, UiError};
use crate::api::parse::{check_topic, parse_id};
use crate::api::state::AppState;
use crate::journal::{DeleteDeadOutcome, RequeueOutcome};
use crate::message::MessageId;
use crate::queue::dead;

/// Dead messages per page.
const PAGE: i64 = 50;
/// Most messages one "all" button requeues or deletes.
const MAX_ALL: usize = 10_000;

type Form = web::Form<HashMap<String, String>>;

/// `GET /ui/dead`: topics with dead messages.
pub async fn index(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse, UiError> {
    let viewer = viewer!(state, req);
    let (counts, _) = state.queue.topic_counts().await?;
    let mut rows = String::new();
    for (topic, c) in counts.iter().filter(|(_, c)| c.dead > 0) {
        let _ = write!(
            rows,
            r#"<tr><td><a class="topic" href="/ui/dead/{}">{}</a></td><td class="num">{}</td></tr>"#,
            url_encode(topic),
            esc(topic),
            c.dead
        );
    }
    if rows.is_empty() {
        rows.push_str(r#"<tr><td colspan="2" class="empty">No dead messages.</td></tr>"#);
    }
    let body = format!(
        r#"<h1>Dead letters</h1>
<p class="sub">Messages that used their last attempt, per topic. Requeue brings one back due at once with its attempts counted from 0; delete ends its life (Deleted).</p>
<table class="grid narrow"><thead><tr><th>Topic</th><th class="num">Dead</th></tr></thead><tbody>{rows}</tbody></table>"#
    );
    Ok(layout::page(&viewer, "Dead letters", "/ui/dead", &body))
}

/// `GET /ui/dead/{topic}?after=`.
pub async fn page(
    state: web::Data<AppState>,
    req: HttpRequest,
    topic: web::Path<String>,
    q: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, UiError> {
    let viewer = viewer!(state, req);
    let topic = topic.into_inner();
    check_topic(&topic)?;
    let after = q
        .get("after")
        .and_then(|a| a.parse::<MessageId>().ok())
        .map_or(0, |id| id.0);
    let page = state.queue.dead_page(&topic, after, PAGE).await?;
    let base = format!("/ui/dead/{}", url_encode(&topic));
    let mut rows = String::new();
    for (r, history) in &page {
        let id = r.id;
        let delivered = history
            .iter()
            .rev()
            .find(|f| f.status == crate::message::Status::Consuming.code());
        let back = base.clone();
        let _ = write!(
            rows,
            r#"<tr id="dead-{id}"><td><a class="mono" href="/ui/messages/{id}">{id}</a></td><td>{biz}</td><td class="num">{}</td><td>{}</td><td>{}</td><td class="body">{}</td><td class="actions"><div class="row-actions">{}{}</div></td></tr>"#,
            r.attempts,
            delivered.map_or(String::new(), |f| time(f.flow_time)),
            time(r.updated_time),
            preview(&r.body, 40),
            viewer.button(
                &format!("/ui/messages/{id}/requeue"),
                "Requeue",
                "primary small",
                &[("back", &back)],
                None
            ),
            viewer.button(
                &format!("/ui/messages/{id}/delete"),
                "Delete",
                "danger small",
                &[("back", &back)],
                Some("Delete this dead message?")
            ),
            biz = r.biz_key.as_deref().map_or(String::new(), key),
        );
    }
    if page.is_empty() {
        rows.push_str(
            r#"<tr><td colspan="7" class="empty">No dead messages in this topic.</td></tr>"#,
        );
    }
    let mut all = String::new();
    if !page.is_empty() && viewer.may_act() {
        all = format!(
            r#"<div class="actions">{}{}</div>"#,
            viewer.button(
                &format!("{base}/requeue"),
                "Requeue all",
                "primary",
                &[],
                Some("Requeue every dead message of this topic?")
            ),
            viewer.button(
                &format!("{base}/delete"),
                "Delete all",
                "danger",
                &[],
                Some(
                    "Delete every dead message of this topic? They cannot be requeued afterwards."
                )
            ),
        );
    }
    let mut pager = String::new();
    if after > 0 {
        let _ = write!(pager, r#"<a href="{base}">« First</a>"#);
    }
    if page.len() as i64 == PAGE {
        let last = page.last().map_or(0, |(r, _)| r.id);
        let _ = write!(pager, r#"<a href="{base}?after={last}">Next »</a>"#);
    }
    let body = format!(
        r#"<h1>Dead letters of <a class="mono" href="/ui/topics/{u}">{t}</a></h1>
{all}
<table class="grid" id="dead"><thead><tr><th>Id</th><th>bizKey</th><th class="num">Attempts</th><th>Last delivered</th><th>Died</th><th>Body</th><th></th></tr></thead><tbody>{rows}</tbody></table>
<p class="pager">{pager}</p>"#,
        u = url_encode(&topic),
        t = esc(&topic),
    );
    Ok(layout::page(
        &viewer,
        &format!("Dead letters of {topic}"),
        "/ui/dead",
        &body,
    ))
}

/// `POST /ui/messages/{id}/requeue`.
pub async fn requeue_one(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
    form: Form,
) -> Result<HttpResponse, UiError> {
    check_action(&state, &req, &form)?;
    let id = parse_id(&id)?;
    let back = back(&form, &format!("/ui/messages/{id}"));
    Ok(match dead::requeue(&state.queue, id).await? {
        RequeueOutcome::Requeued(_) => {
            tracing::info!(%id, "dead message requeued from the dashboard");
            back_with(&back, "done", &format!("Message {id} requeued: due now."))
        }
        RequeueOutcome::NotDead(s) => {
            back_with(&back, "error", &format!("Message {id} is {s}, not dead."))
        }
        RequeueOutcome::NotFound => back_with(&back, "error", &format!("No message {id}.")),
        RequeueOutcome::BizKeyTaken(holder) => back_with(
            &back,
            "error",
            &format!(
                "Message {id} stays dead: live message {} holds its bizKey now.",
                MessageId(holder)
            ),
        ),
    })
}

/// `POST /ui/messages/{id}/delete`.
pub async fn delete_one(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
    form: Form,
) -> Result<HttpResponse, UiError> {
    check_action(&state, &req, &form)?;
    let id = parse_id(&id)?;
    let back = back(&form, &format!("/ui/messages/{id}"));
    Ok(match dead::delete(&state.queue, id).await? {
        DeleteDeadOutcome::Deleted => {
            tracing::info!(%id, "dead message deleted from the dashboard");
            back_with(&back, "done", &format!("Message {id} deleted."))
        }
        DeleteDeadOutcome::NotDead(s) => {
            back_with(&back, "error", &format!("Message {id} is {s}, not dead."))
        }
        DeleteDeadOutcome::NotFound => back_with(&back, "error", &format!("No message {id}.")),
    })
}

/// `POST /ui/dead/{topic}/requeue`.
pub async fn requeue_all(
    state: web::Data<AppState>,
    req: HttpRequest,
    topic: web::Path<String>,
    form: Form,
) -> Result<HttpResponse, UiError> {
    check_action(&state, &req, &form)?;
    check_topic(&topic)?;
    let run = dead::requeue_topic(&state.queue, &topic, MAX_ALL).await?;
    tracing::info!(topic = %topic, requeued = run.done, skipped = run.skipped.len(), "dead messages requeued from the dashboard");
    Ok(back_with(
        &format!("/ui/dead/{}", url_encode(&topic)),
        "done",
        &format!(
            "{} requeued, {} left dead (a live message holds their bizKey, or they changed meanwhile){}.",
            run.done,
            run.skipped.len(),
            if run.more { "; more are left" } else { "" }
        ),
    ))
}

/// `POST /ui/dead/{topic}/delete`.
pub async fn delete_all(
    state: web::Data<AppState>,
    req: HttpRequest,
    topic: web::Path<String>,
    form: Form,
) -> Result<HttpResponse, UiError> {
    check_action(&state, &req, &form)?;
    check_topic(&topic)?;
    let run = dead::delete_topic(&state.queue, &topic, MAX_ALL).await?;
    tracing::info!(topic = %topic, deleted = run.done, "dead messages deleted from the dashboard");
    Ok(back_with(
        &format!("/ui/dead/{}", url_encode(&topic)),
        "done",
        &format!(
            "{} deleted{}.",
            run.done,
            if run.more { "; more are left" } else { "" }
        ),
    ))
}

//! A topic's messages in one status, a page at a time in id order, and a
//! search by id or bizKey.

use std::collections::HashMap;
use std::fmt::Write;

use actix_web::{web, HttpRequest, HttpResponse};

use super::auth::check_action;
use super::html::{badge, esc, key, preview, time, url_encode};
use super::layout;
use super::response::{back_with, see_other, UiError};
use crate::api::parse::check_topic;
use crate::api::state::AppState;
use crate::message::{MessageId, Status};
use crate::queue::read::Search;

/// Messages per page.
pub const PAGE: i64 = 50;

/// The statuses a topic's messages are listed by, as their tabs read.
const TABS: &[(Status, &str)] = &[
    (Status::Delaying, "delaying"),
    (Status::Ready, "ready"),
    (Status::Consuming, "in-flight"),
    (Status::Dead, "dead"),
    (Status::WaitPut, "waiting"),
    (Status::Consumed, "consumed"),
    (Status::Deleted, "deleted"),
];

/// `GET /ui/topics/{topic}?status=&after=&q=`.
pub async fn page(
    state: web::Data<AppState>,
    req: HttpRequest,
    topic: web::Path<String>,
    q: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, UiError> {
    let mut viewer = viewer!(state, req);
    let topic = topic.into_inner();
    check_topic(&topic)?;
    let base = format!("/ui/topics/{}", url_encode(&topic));
    // A bizKey is compared exactly (`A-1 ` is not `A-1`); a search that
    // finds nothing so is tried again without white space at its ends.
    if let Some(search) = q.get("q").filter(|s| !s.trim().is_empty()) {
        let mut found = search_one(&state, &topic, search).await?;
        if found.is_none() && search.trim() != search {
            found = search_one(&state, &topic, search.trim()).await?;
        }
        if let Some(found) = found {
            return Ok(see_other(&format!("/ui/messages/{found}")));
        }
        viewer.error = Some(format!(
            "No message has id {search:?}, and no live message of topic {topic} has bizKey {search:?}."
        ));
    }
    // Each tab's count (the overview's, a few seconds old at most); the
    // page opens on the first tab that holds messages.
    let (counts, _) = state.queue.topic_counts().await?;
    let c = counts.get(&topic).cloned().unwrap_or_default();
    let count_of = |s: Status| c.of(s);
    let (status, tab) = q
        .get("status")
        .and_then(|s| TABS.iter().find(|(_, name)| name == s))
        .or_else(|| TABS.iter().find(|(s, _)| count_of(*s) > 0))
        .copied()
        .unwrap_or(TABS[0]);
    let after = q
        .get("after")
        .and_then(|a| a.parse::<MessageId>().ok())
        .map_or(0, |id| id.0);
    let (rows, next) = state
        .queue
        .search(&topic, Search::Status(status), after, PAGE)
        .await?;

    let mut tabs = String::new();
    for (s, name) in TABS {
        let class = if *name == tab { r#" class="on""# } else { "" };
        let _ = write!(
            tabs,
            r#"<a href="{base}?status={name}"{class}>{name} <span class="count">{}</span></a>"#,
            count_of(*s)
        );
    }
    let mut list = String::new();
    for r in &rows {
        let _ = write!(
            list,
            r#"<tr><td><a class="mono" href="/ui/messages/{id}">{id}</a></td><td>{biz}</td><td>{}</td><td class="num">{}</td><td class="num">{}/{}</td><td>{}</td><td class="body">{}</td></tr>"#,
            time(r.due_time),
            r.priority,
            r.attempts,
            r.max_attempts,
            badge(r.status()),
            preview(&r.body, 80),
            id = r.id,
            biz = r.biz_key.as_deref().map_or(String::new(), key),
        );
    }
    if rows.is_empty() {
        let _ = write!(
            list,
            r#"<tr><td colspan="7" class="empty">No {tab} messages{}.</td></tr>"#,
            if after > 0 { " after this point" } else { "" }
        );
    }
    let mut pager = String::new();
    if after > 0 {
        let _ = write!(pager, r#"<a href="{base}?status={tab}">« First</a>"#);
    }
    if let Some(last) = next {
        let _ = write!(
            pager,
            r#"<a href="{base}?status={tab}&amp;after={last}">Next »</a>"#
        );
    }
    let paused_at = state.queue.paused_topics().await?.get(&topic).copied();
    let action = format!(
        "{base}/{}",
        if paused_at.is_some() {
            "resume"
        } else {
            "pause"
        }
    );
    let pause = match paused_at {
        Some(at) => format!(
            r#"<div class="paused" id="pause-state"><span class="badge paused">Paused</span> since {} — nothing of this topic is handed out or forwarded; pushes, cancels and acks go on. {}</div>"#,
            time(at),
            viewer.button(&action, "Resume", "primary", &[], None)
        ),
        None => format!(
            r#"<div id="pause-state">{}</div>"#,
            viewer.button(
                &action,
                "Pause",
                "danger",
                &[],
                Some(&format!(
                    "Pause {topic}? Nothing of it is handed out, on any node, until it is resumed."
                )),
            )
        ),
    };
    let limit = match state.queue.limits().get(&topic) {
        Some(l) => {
            let mut caps = Vec::new();
            if l.per_second > 0 {
                caps.push(format!(
                    "at most <b>{}</b> handed out a second",
                    l.per_second
                ));
            }
            if l.concurrency > 0 {
                caps.push(format!(
                    "at most <b>{}</b> handed out and not yet acked at once",
                    l.concurrency
                ));
            }
            format!(
                r#"<p class="hint" id="limit">Limits: {}, across the cluster (<code>--topic-limit</code>).</p>"#,
                caps.join("; ")
            )
        }
        None => String::new(),
    };
    let groups = match state.queue.topic_groups(&topic).await? {
        Some(g) => format!(
            r#"<p class="hint" id="groups">Ordered groups:{} — one message of a group at a time is handed out, in due order.</p>"#,
            super::overview::group_badge(&g)
        ),
        None => String::new(),
    };
    let body = format!(
        r#"<h1>Topic <span class="mono">{t}</span></h1>
{pause}{limit}{groups}
<form class="search" method="get" action="{base}"><input type="search" name="q" placeholder="Message id or bizKey" aria-label="Message id or bizKey" value=""><button type="submit">Find</button></form>
<nav class="tabs">{tabs}</nav>
<table class="grid"><thead><tr><th>Id</th><th>bizKey</th><th>Due</th><th class="num">Priority</th><th class="num">Attempts</th><th>Status</th><th>Body</th></tr></thead><tbody>{list}</tbody></table>
<p class="pager">{pager}</p>
{forecast}"#,
        t = esc(&topic),
        forecast = super::overview::forecast_chart(Some(&topic)),
    );
    Ok(layout::page(
        &viewer,
        &format!("Topic {topic}"),
        "/ui",
        &body,
    ))
}

/// The message a search names: an id (of any topic), or the bizKey of a
/// live message of this topic.
async fn search_one(
    state: &AppState,
    topic: &str,
    search: &str,
) -> Result<Option<MessageId>, UiError> {
    if let Ok(id) = search.parse::<MessageId>() {
        if state.queue.exists(id).await? {
            return Ok(Some(id));
        }
    }
    let (rows, _) = state
        .queue
        .search(
            topic,
            Search::BizKey {
                key: search.to_string(),
                status: None,
            },
            0,
            1,
        )
        .await?;
    Ok(rows.first().map(|r| MessageId(r.id)))
}

/// `POST /ui/topics/{topic}/pause`.
pub async fn pause(
    state: web::Data<AppState>,
    req: HttpRequest,
    topic: web::Path<String>,
    form: web::Form<HashMap<String, String>>,
) -> Result<HttpResponse, UiError> {
    check_action(&state, &req, &form)?;
    check_topic(&topic)?;
    state.queue.pause(&topic).await?;
    Ok(back_with(
        &format!("/ui/topics/{}", url_encode(&topic)),
        "done",
        &format!("Topic {topic} paused."),
    ))
}

/// `POST /ui/topics/{topic}/resume`.
pub async fn resume(
    state: web::Data<AppState>,
    req: HttpRequest,
    topic: web::Path<String>,
    form: web::Form<HashMap<String, String>>,
) -> Result<HttpResponse, UiError> {
    check_action(&state, &req, &form)?;
    check_topic(&topic)?;
    state.queue.resume(&topic).await?;
    Ok(back_with(
        &format!("/ui/topics/{}", url_encode(&topic)),
        "done",
        &format!("Topic {topic} resumed."),
    ))
}

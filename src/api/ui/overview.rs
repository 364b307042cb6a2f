//! The overview: every topic with its counts per status and its rates,
//! the node at a glance, and the lateness and rate charts.
//!
//! Counts come from the journal, as `GET /topics` reads them
//! ([`crate::queue::Queue::topic_counts`]); the journal follows Redis
//! within milliseconds (`GET /admin/journal`).

use std::fmt::Write;

use actix_web::{web, HttpRequest, HttpResponse};

use super::auth::Viewer;
use super::history;
use super::html::{duration, esc, url_encode};
use super::layout;
use super::response::{see_other, UiError};
use crate::api::state::AppState;

use crate::queue::read::MAX_ROWS;
pub use delayq_proto::TopicCounts;

fn rate(r: f64) -> String {
    if r == 0.0 {
        "–".into()
    } else if r < 10.0 {
        format!("{r:.1}/s")
    } else {
        format!("{r:.0}/s")
    }
}

fn count(n: i64) -> String {
    if n == 0 {
        r#"<span class="zero">0</span>"#.into()
    } else {
        n.to_string()
    }
}

/// A topic's ordered groups: how many hold their turn, and how many of
/// those have due messages waiting behind it.
pub fn group_badge(g: &delayq_proto::GroupCounts) -> String {
    format!(
        r#" <span class="badge groups" title="ordered groups with a message ready, handed out or waiting to retry: {a}; {w} of them with due messages waiting behind it ({h} messages)">{a} {noun} · {w} waiting</span>"#,
        a = g.active,
        w = g.waiting,
        h = g.held,
        noun = if g.active == 1 { "group" } else { "groups" },
    )
}

/// The topics table (refreshed in place every few seconds): the topics
/// as `GET /topics` lists them, with the same counts, and how long the
/// oldest ready message of each has waited past its due time (a paused
/// topic's grows until it is resumed).
fn topics_table(list: &delayq_proto::TopicList) -> String {
    let mut rows = String::new();
    for t in &list.topics {
        let (topic, c) = (&t.topic, &t.counts);
        let (pushed, delivered) = history::rates(topic);
        let dead = if c.dead > 0 {
            format!(
                r#"<a class="dead" href="/ui/dead/{}">{}</a>"#,
                url_encode(topic),
                c.dead
            )
        } else {
            count(0)
        };
        let waited = t.overdue_ms.map_or_else(|| "–".to_string(), duration);
        let _ = write!(
            rows,
            r#"<tr><td><a class="topic" href="/ui/topics/{u}">{t}</a>{p}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{dead}</td><td class="num" title="kept until --retention removes them; {deleted} cancelled">{}</td><td class="num">{waited}</td><td class="num">{}</td><td class="num">{}</td></tr>"#,
            count(c.waiting),
            count(c.delaying),
            count(c.ready),
            count(c.in_flight),
            count(c.consumed),
            rate(pushed),
            rate(delivered),
            deleted = c.deleted,
            u = url_encode(topic),
            t = esc(topic),
            p = {
                let mut marks = String::new();
                if t.paused {
                    marks.push_str(r#" <span class="badge paused">Paused</span>"#);
                }
                if let Some(n) = t.limit_per_second {
                    let _ = write!(marks, r#" <span class="badge limit">{n}/s</span>"#);
                }
                if let Some(n) = t.limit_concurrency {
                    let _ = write!(
                        marks,
                        r#" <span class="badge limit" title="at most this many handed out and not yet acked">≤{n} in flight</span>"#
                    );
                }
                if let Some(g) = t.groups {
                    marks.push_str(&group_badge(&g));
                }
                marks
            },
        );
    }
    if list.topics.is_empty() {
        rows.push_str(r#"<tr><td colspan="10" class="empty">No messages yet: push one with <code>POST /push</code>.</td></tr>"#);
    }
    let note = if list.cut {
        format!(
            r#"<p class="hint">Only the first {MAX_ROWS} topic and status counts are shown.</p>"#
        )
    } else {
        String::new()
    };
    format!(
        r##"<div id="topics" hx-get="/ui" hx-select="#topics" hx-target="this" hx-swap="outerHTML" hx-trigger="every 5s"><table class="grid"><thead><tr><th>Topic</th><th class="num">Waiting</th><th class="num">Delaying</th><th class="num">Ready</th><th class="num">In flight</th><th class="num">Dead</th><th class="num">Consumed</th><th class="num" title="how long the oldest ready message has waited past its due time">Oldest ready</th><th class="num">Pushed</th><th class="num">Delivered</th></tr></thead><tbody>{rows}</tbody></table>{note}</div>"##
    )
}

/// `GET /ui`.
pub async fn page(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse, UiError> {
    let viewer = viewer!(state, req);
    let list = state.queue.topic_list().await?;
    let view = state.cluster.view();
    let samples = history::samples();
    let last = samples.last();
    let totals = list
        .topics
        .iter()
        .map(|t| &t.counts)
        .fold(TopicCounts::default(), |mut a, c| {
            a.waiting += c.waiting;
            a.delaying += c.delaying;
            a.ready += c.ready;
            a.in_flight += c.in_flight;
            a.dead += c.dead;
            a
        });
    let lateness = last
        .and_then(|s| s.lateness_max_ms)
        .map_or("–".to_string(), |ms| format!("{ms:.0} ms"));
    let cards = format!(
        r#"<div class="cards">
<div class="card"><span>Delaying</span><b>{}</b></div>
<div class="card"><span>Ready</span><b>{}</b></div>
<div class="card"><span>In flight</span><b>{}</b></div>
<div class="card"><span>Dead</span><b>{}</b></div>
<div class="card"><span>Pushed</span><b>{}</b></div>
<div class="card"><span>Delivered</span><b>{}</b></div>
<div class="card"><span>Lateness, max</span><b>{lateness}</b></div>
<div class="card"><span>Shards here</span><b>{} / {}</b></div>
</div>"#,
        totals.delaying,
        totals.ready,
        totals.in_flight,
        totals.dead,
        rate(last.map_or(0.0, |s| s.pushed_per_s)),
        rate(last.map_or(0.0, |s| s.delivered_per_s)),
        view.owned.len(),
        state.queue.shards(),
    );
    let body = format!(
        r#"<h1>Overview</h1>
<p class="sub">Mode <b>{mode}</b> · leader <b>{leader}</b> · journal backlog <b>{backlog}</b> status changes</p>
{cards}
<h2>Topics</h2>
{table}
<h2>Lateness and rates on this node</h2>
<p class="hint">Sampled from this process's metrics every {every} s, kept for an hour: lateness of first deliveries (due time to hand-out), pushes and deliveries per second.</p>
<div class="charts"><div id="chart-lateness" class="chart" data-src="/ui/chart.json" data-kind="lateness"></div><div id="chart-rates" class="chart" data-src="/ui/chart.json" data-kind="rates"></div></div>
{forecast}"#,
        mode = esc(view.mode),
        leader = esc(view.leader.as_deref().unwrap_or("none")),
        backlog = state.queue.journal_pending(),
        table = topics_table(&list),
        every = history::EVERY.as_secs(),
        forecast = forecast_chart(None),
    );
    Ok(layout::page(&viewer, "Overview", "/ui", &body))
}

/// `GET /ui/chart.json`: the samples as columns, for uPlot.
pub async fn chart(state: web::Data<AppState>, req: HttpRequest) -> HttpResponse {
    if let Err(login) = Viewer::of(&state, &req) {
        return see_other(&login);
    }
    let s = history::samples();
    let col = |f: &dyn Fn(&history::Sample) -> Option<f64>| -> Vec<Option<f64>> {
        s.iter().map(f).collect()
    };
    HttpResponse::Ok()
        .insert_header((actix_web::http::header::CACHE_CONTROL, "no-store"))
        .json(serde_json::json!({
            "time": s.iter().map(|x| x.at as f64 / 1000.0).collect::<Vec<_>>(),
            "latenessMeanMs": col(&|x| x.lateness_mean_ms),
            "latenessMaxMs": col(&|x| x.lateness_max_ms),
            "pushedPerS": col(&|x| Some(x.pushed_per_s)),
            "deliveredPerS": col(&|x| Some(x.delivered_per_s)),
        }))
}

/// The forecast's buckets on the dashboard: 15 minutes over 24 hours.
const FORECAST_BUCKET_MS: i64 = 15 * 60_000;
const FORECAST_BUCKETS: usize = 96;

/// The "Coming due" section: the forecast of every topic, or of one.
pub(super) fn forecast_chart(topic: Option<&str>) -> String {
    let src = match topic {
        Some(t) => format!("/ui/forecast.json?topic={}", url_encode(t)),
        None => "/ui/forecast.json".to_string(),
    };
    format!(
        r#"<h2>Coming due</h2>
<p class="hint">Messages falling due per 15 minutes over the next 24 hours (<code>GET /forecast</code>), read again every minute. Of one topic, a bucket too large to read whole is an estimate: the dashed lines are its 95 % interval.</p>
<div class="charts"><div id="chart-forecast" class="chart wide" data-src="{src}" data-kind="forecast"></div></div>"#,
        src = esc(&src),
    )
}

/// How long the dashboard shows a forecast before reading it again: every
/// open page asks each minute, and a reading may take seconds (a journal
/// with many messages waiting beyond the horizon).
const FORECAST_FRESH: std::time::Duration = std::time::Duration::from_secs(30);

/// The dashboard's last forecasts, by topic (None: every topic).
type Readings = std::collections::HashMap<Option<String>, (std::time::Instant, serde_json::Value)>;
static FORECASTS: std::sync::LazyLock<tokio::sync::Mutex<Readings>> =
    std::sync::LazyLock::new(Default::default);

/// `GET /ui/forecast.json?topic=T`: the forecast as columns, for uPlot
/// (read at most every [`FORECAST_FRESH`]; pages asking meanwhile wait for
/// the reading under way and share it).
pub async fn forecast(
    state: web::Data<AppState>,
    req: HttpRequest,
    q: web::Query<std::collections::HashMap<String, String>>,
) -> HttpResponse {
    if let Err(login) = Viewer::of(&state, &req) {
        return see_other(&login);
    }
    let topic = q.get("topic");
    if topic.is_some_and(|t| !crate::message::valid_topic(t)) {
        return HttpResponse::BadRequest().json(serde_json::json!({
            "error": "invalid_topic",
            "message": "a topic is 1 to 128 characters of A-Z a-z 0-9 . _ : -",
        }));
    }
    let fresh = |v: &serde_json::Value| {
        HttpResponse::Ok()
            .insert_header((actix_web::http::header::CACHE_CONTROL, "no-store"))
            .json(v)
    };
    let mut readings = FORECASTS.lock().await;
    if let Some((at, v)) = readings.get(&topic.cloned()) {
        if at.elapsed() < FORECAST_FRESH {
            return fresh(v);
        }
    }
    let f = match state
        .queue
        .forecast(
            topic.map(String::as_str),
            FORECAST_BUCKET_MS,
            FORECAST_BUCKETS,
        )
        .await
    {
        Ok(f) => f,
        Err(e) => {
            return HttpResponse::ServiceUnavailable().json(serde_json::json!({
                "error": "unavailable",
                "message": e.to_string(),
            }))
        }
    };
    let v = serde_json::json!({
        "time": f.buckets.iter().map(|b| b.at as f64 / 1000.0).collect::<Vec<_>>(),
        "count": f.buckets.iter().map(|b| b.count).collect::<Vec<_>>(),
        "low": f.buckets.iter().map(|b| b.low.unwrap_or(b.count)).collect::<Vec<_>>(),
        "high": f.buckets.iter().map(|b| b.high.unwrap_or(b.count)).collect::<Vec<_>>(),
        "exact": f.exact,
        // What the chart's title says besides.
        "note": f.journal_counted_until.map(|t| format!(
            "the journal's waiting messages counted up to {} only",
            super::html::time(t)
        )),
    });
    if readings.len() >= 1_000 {
        readings.clear();
    }
    readings.insert(topic.cloned(), (std::time::Instant::now(), v.clone()));
    fresh(&v)
}

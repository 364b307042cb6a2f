//! Restore and reconciliation: this node's current or last restore (what
//! `GET /admin/restore` answers), a cursor an interrupted restore left, and
//! reconciliation of the journal with Redis on request: a report, or a
//! repair of every difference but `unknown`.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::{LazyLock, Mutex};

use actix_web::{web, HttpRequest, HttpResponse};

use super::auth::check_action;
use super::html::{duration, esc, time};
use super::layout;
use super::response::{back_with, UiError};
use crate::api::state::AppState;
use crate::reconcile::{ReconcileReport, Repair};

type Form = web::Form<HashMap<String, String>>;

/// The last reconciliation run from this node's dashboard.
static LAST: LazyLock<Mutex<Option<ReconcileReport>>> = LazyLock::new(Default::default);

/// `GET /ui/restore`.
pub async fn page(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse, UiError> {
    let viewer = viewer!(state, req);
    let cursor = state.queue.restore_cursor().await?;
    let progress = match state.restore_status.get() {
        None => {
            r#"<p class="empty">This node has run no restore since it started.</p>"#.to_string()
        }
        Some(p) => {
            let state_text = if p.running {
                r#"<span class="badge s-ready">running</span>"#.to_string()
            } else if let Some(e) = &p.error {
                format!(r#"<span class="badge s-dead">failed</span> {}"#, esc(e))
            } else {
                r#"<span class="badge s-consumed">finished</span>"#.to_string()
            };
            format!(
                r#"<table class="fields"><tr><th>State</th><td>{state_text}</td></tr><tr><th>Started</th><td>{}</td></tr><tr><th>Finished</th><td>{}</td></tr><tr><th>Expired messages</th><td>{}</td></tr><tr><th>Dry run</th><td>{}</td></tr><tr><th>Journal rows read</th><td>{}</td></tr><tr><th>Restored</th><td>{}</td></tr><tr><th>Already in Redis</th><td>{}</td></tr><tr><th>Left out: expired</th><td>{}</td></tr><tr><th>Left out: finished</th><td>{}</td></tr><tr><th>Rate</th><td>{:.0} rows/s</td></tr><tr><th>Cursor</th><td class="mono">{}</td></tr></table>"#,
                time(p.started_at),
                p.finished_at.map_or("–".to_string(), time),
                if p.expire {
                    "restored (delivered at once)"
                } else {
                    "left out"
                },
                if p.dry_run { "yes" } else { "no" },
                p.scanned,
                p.restored,
                p.already_present,
                p.skipped_expired,
                p.skipped_finished,
                p.rate_per_second,
                p.cursor,
            )
        }
    };
    let running = state.restore_status.get().is_some_and(|p| p.running);
    let refresh = if running {
        r##" hx-get="/ui/restore" hx-select="#restore" hx-target="this" hx-swap="outerHTML" hx-trigger="every 2s""##
    } else {
        ""
    };
    let resumable = cursor.map_or(String::new(), |c| {
        format!(
            r#"<p class="notice warn">An interrupted restore (started {}, expire {}) left a cursor at id <span class="mono">{}</span>, written {}: the next restore resumes after it.</p>"#,
            time(c.started_at),
            c.expire,
            c.after,
            time(c.updated_at)
        )
    });
    let report = LAST
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map_or(
            r#"<p class="empty">No reconciliation run from this dashboard yet. The leader also runs one every <code>--reconcile-interval</code>.</p>"#.to_string(),
            report_table,
        );
    let periodic = match state.queue.reconciled().await? {
        Some(json) => periodic_html(&json),
        None => r#"<p class="empty">None kept: the leader reconciles every <code>--reconcile-interval</code> (0: never) once the node has run that long.</p>"#.to_string(),
    };
    let buttons = format!(
        "{}{}",
        viewer.button(
            "/ui/restore/reconcile",
            "Report differences",
            "",
            &[("repair", "false")],
            None
        ),
        viewer.button(
            "/ui/restore/reconcile",
            "Repair differences",
            "primary",
            &[("repair", "true")],
            Some("Put every difference but unknown right?")
        ),
    );
    let body = format!(
        r#"<h1>Restore &amp; reconcile</h1>
<h2>Restore on this node</h2>
<div id="restore"{refresh}>{resumable}{progress}</div>
<p class="hint">A restore rebuilds Redis from the journal: <code>GET /reStore?expire=true|false</code> or <code>delayq restore</code>.</p>
<h2>The leader's periodic reconciliation</h2>
<div id="periodic">{periodic}</div>
<h2>Reconcile the journal with Redis</h2>
<div class="actions">{buttons}</div>
<div id="report">{report}</div>"#
    );
    Ok(layout::page(
        &viewer,
        "Restore & reconcile",
        "/ui/restore",
        &body,
    ))
}

/// The leader's last periodic reconciliation, as kept in Redis: when, by
/// which node, and what it found and repaired of each kind.
fn periodic_html(json: &str) -> String {
    let Ok(kept) = serde_json::from_str::<serde_json::Value>(json) else {
        return r#"<p class="empty">The kept report could not be read.</p>"#.to_string();
    };
    let r = &kept["report"];
    let kinds = [
        (
            "missing",
            "missing: live in the journal, absent from Redis (scheduled again)",
        ),
        (
            "unscheduled",
            "unscheduled: in Redis, in no queue (put back)",
        ),
        (
            "finishedInJournal",
            "finished in the journal, still in Redis (taken out)",
        ),
        ("unknown", "unknown: in Redis, not in the journal"),
        ("statusMismatch", "status differs"),
        ("unjournaled", "ends Redis kept for the journal"),
    ];
    let mut rows = String::new();
    let mut found = 0;
    for (key, kind) in kinds {
        let (count, repaired) = (
            r[key]["count"].as_u64().unwrap_or(0),
            r[key]["repaired"].as_u64().unwrap_or(0),
        );
        found += count;
        let _ = write!(
            rows,
            r#"<tr><td>{kind}</td><td class="num">{count}</td><td class="num">{repaired}</td></tr>"#
        );
    }
    let verdict = if found == 0 {
        r#"<span class="badge s-consumed">the journal and Redis agree</span>"#.to_string()
    } else {
        format!(r#"<span class="badge s-dead">{found} differences</span>"#)
    };
    format!(
        r#"<p class="sub">Node <b>{}</b> at {}, took {}: {} journal rows, {} Redis records — {verdict}</p>
<table class="grid"><thead><tr><th>Kind</th><th class="num">Found</th><th class="num">Repaired</th></tr></thead><tbody>{rows}</tbody></table>"#,
        esc(kept["node"].as_str().unwrap_or("?")),
        time(kept["at"].as_i64().unwrap_or(0)),
        duration(r["elapsedMs"].as_i64().unwrap_or(0)),
        r["journalScanned"].as_u64().unwrap_or(0),
        r["redisScanned"].as_u64().unwrap_or(0),
    )
}

fn report_table(r: &ReconcileReport) -> String {
    let mut rows = String::new();
    for (kind, d) in [
        (
            "missing: live in the journal, absent from Redis",
            &r.missing,
        ),
        ("unscheduled: in Redis, in no queue", &r.unscheduled),
        (
            "finished in the journal, still in Redis",
            &r.finished_in_journal,
        ),
        ("unknown: in Redis, not in the journal", &r.unknown),
        ("status differs", &r.status_mismatch),
    ] {
        let mut sample = String::new();
        for s in d.sample.iter().take(5) {
            let _ = write!(
                sample,
                r#"<a class="mono" href="/ui/messages/{0}">{0}</a> "#,
                s.id
            );
        }
        let _ = write!(
            rows,
            r#"<tr><td>{kind}</td><td class="num">{}</td><td class="num">{}</td><td>{sample}</td></tr>"#,
            d.count, d.repaired
        );
    }
    format!(
        r#"<p class="sub">Run {} ({:?}), took {}: {} journal rows compared ({} changed within the {} grace period left out), {} Redis records walked — <b>{}</b> differences.</p>
<table class="grid"><thead><tr><th>Kind</th><th class="num">Found</th><th class="num">Repaired</th><th>Some of them</th></tr></thead><tbody>{rows}</tbody></table>"#,
        time(r.started_at),
        r.repair,
        duration(r.elapsed_ms as i64),
        r.journal_scanned,
        r.journal_recent,
        duration(r.grace_ms as i64),
        r.redis_scanned,
        r.differences(),
    )
}

/// `POST /ui/restore/reconcile` with `repair=true|false`.
pub async fn reconcile(
    state: web::Data<AppState>,
    req: HttpRequest,
    form: Form,
) -> Result<HttpResponse, UiError> {
    check_action(&state, &req, &form)?;
    let repair = if form.get("repair").is_some_and(|r| r == "true") {
        Repair::All
    } else {
        Repair::None
    };
    let report = state.reconciler.run(repair, |_| {}).await?;
    tracing::info!(
        differences = report.differences(),
        ?repair,
        "reconciliation from the dashboard finished"
    );
    let text = format!(
        "Reconciliation finished: {} differences{}.",
        report.differences(),
        if repair == Repair::All {
            ", repaired"
        } else {
            ""
        }
    );
    *LAST.lock().unwrap_or_else(|p| p.into_inner()) = Some(report);
    Ok(back_with("/ui/restore", "done", &text))
}

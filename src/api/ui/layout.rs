//! A whole page of the dashboard: the layout (head, navigation, who is
//! looking, notices) around a page's body.

use std::fmt::Write;

use actix_web::http::StatusCode;
use actix_web::HttpResponse;

use super::assets;
use super::auth::Viewer;
use super::html::esc;

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

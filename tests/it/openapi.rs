//! The API describes itself: `GET /openapi.json` is an OpenAPI 3 document
//! of every route the server serves and no other, Swagger UI at `/docs`
//! loads from the server alone (no admin token needed), and schemathesis,
//! driving a real server from that document, finds no 5xx and no answer the
//! document does not allow.
//!
//! schemathesis is installed by scripts/test, which names it in
//! `DELAYQ_SCHEMATHESIS`; without it the test fails rather than passes
//! unexamined.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::common::{Backend, Env};
use serde_json::{json, Value};

const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// (method, path) of every operation in an OpenAPI document.
fn operations(doc: &Value) -> BTreeSet<(String, String)> {
    let mut ops = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("a path item").keys() {
            if METHODS.contains(&method.as_str()) {
                ops.insert((method.clone(), path.clone()));
            }
        }
    }
    ops
}

/// A request path for a documented path: each parameter filled in.
fn sample_path(path: &str) -> String {
    path.replace("{topic}", "t")
        .replace("{target}", "t")
        .replace("{id}", "1")
        .replace("{shard}", "0")
        .replace("{file}", "index.html")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_document_lists_every_route_served() {
    let env = Env::start(Backend::Sqlite).await;
    let r = env.get_path("/openapi.json").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let doc = &r.json;
    assert!(
        doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")),
        "not an OpenAPI 3 document: {}",
        &r.text[..r.text.len().min(200)]
    );
    assert_eq!(doc["info"]["title"], "delayq");
    assert!(doc["components"]["schemas"]["ErrorBody"].is_object());

    // The routes the server registers (one table in src/api) are the ones
    // documented.
    let documented = operations(doc);
    let registered: BTreeSet<(String, String)> = delayq::api::ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), delayq::api::openapi_path(p)))
        .collect();
    assert_eq!(documented, registered);

    // Each documented operation is served (the server's own 404 for an
    // unknown route is `no_such_route`), and on a documented path no other
    // method is.
    let paths: BTreeSet<&String> = documented.iter().map(|(_, p)| p).collect();
    for path in paths {
        for method in ["get", "post", "put", "delete", "patch"] {
            let url = env.url(&format!("{}?timeout=0", sample_path(path)));
            let req = env
                .http
                .request(method.to_uppercase().parse().unwrap(), url);
            let r = env.send(req).await;
            let served = r.json["error"] != "no_such_route";
            let listed = documented.contains(&(method.to_string(), path.clone()));
            assert_eq!(
                served,
                listed,
                "{} {path}: answered {} {}",
                method.to_uppercase(),
                r.status,
                r.text
            );
        }
    }

    // Path parameters, request bodies and error answers are described.
    let push = &doc["paths"]["/push"]["post"];
    assert!(push["requestBody"]["content"]["application/json"].is_object());
    for status in ["200", "400", "413", "503"] {
        assert!(push["responses"][status].is_object(), "POST /push {status}");
    }
    let ack = &doc["paths"]["/ack/{id}"]["post"];
    assert_eq!(ack["parameters"][0]["name"], "id");
    assert_eq!(ack["parameters"][0]["in"], "path");
    assert!(ack["responses"]["409"]["content"]["application/json"].is_object());
    let id = &doc["components"]["schemas"]["MessageId"];
    assert_eq!(id["type"], "string", "ids are decimal strings: {id}");

    // Unknown routes keep their JSON 404.
    env.get_path("/no/such/route")
        .await
        .assert_error(404, "no_such_route");
}

#[tokio::test(flavor = "multi_thread")]
async fn swagger_ui_loads_from_the_server_without_the_admin_token() {
    let env = Env::builder(Backend::Sqlite)
        .arg("--admin-token")
        .arg("s3cret")
        .start()
        .await;
    env.get_path("/admin/cluster")
        .await
        .assert_error(401, "unauthorized");
    assert_eq!(env.get_path("/openapi.json").await.status, 200);

    // /docs sends the browser to /docs/, the page.
    let page = env
        .http
        .get(env.url("/docs"))
        .send()
        .await
        .expect("GET /docs");
    assert_eq!(page.status(), 200);
    assert_eq!(page.url().path(), "/docs/");
    assert!(content_type(page.headers()).starts_with("text/html"));
    let html = page.text().await.unwrap();
    assert!(html.contains("swagger-ui"), "{html}");

    // Every file the page loads comes from this server, and is there.
    let assets = attribute_values(&html, &["src=\"", "href=\""]);
    assert!(
        assets.iter().any(|a| a.ends_with(".js")) && assets.iter().any(|a| a.ends_with(".css")),
        "{assets:?}"
    );
    for asset in &assets {
        assert!(
            !asset.contains("://") && !asset.starts_with("//"),
            "the page loads {asset} from elsewhere"
        );
        let url = env.url(&format!("/docs/{}", asset.trim_start_matches("./")));
        let r = env.http.get(&url).send().await.expect("GET an asset");
        assert_eq!(r.status(), 200, "{url}");
        let kind = content_type(r.headers());
        let expected = match Path::new(asset).extension().and_then(|e| e.to_str()) {
            Some("js") => "javascript",
            Some("css") => "text/css",
            Some("png") => "image/png",
            _ => "",
        };
        assert!(kind.contains(expected), "{url}: {kind}");
        let body = r.bytes().await.unwrap();
        assert!(!body.is_empty(), "{url} is empty");
    }
    // The page reads this server's document.
    let init = env.get_path("/docs/swagger-initializer.js").await;
    assert!(init.text.contains("/openapi.json"), "{}", init.text);
    env.get_path("/docs/no-such-file.js")
        .await
        .assert_error(404, "not_found");
}

#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_finds_nothing_the_document_does_not_allow() {
    let schemathesis = std::env::var("DELAYQ_SCHEMATHESIS").expect(
        "DELAYQ_SCHEMATHESIS must name the schemathesis executable (scripts/test installs it)",
    );
    let env = Env::start(Backend::Sqlite).await;
    // Real messages for it to find, on the document's example topic (sms):
    // one handed out, one dead, a recurring one waiting with a retry policy,
    // and a few due for its polls to take.
    let topic = "sms";
    let handed_out = env.push(json!({"topic": topic, "body": "{\"n\":1}"})).await;
    assert_eq!(env.receive_one(topic).await.id(), handed_out);
    let dead = env
        .push(json!({"topic": topic, "body": "dies", "maxAttempts": 1}))
        .await;
    assert_eq!(env.receive_one(topic).await.id(), dead);
    let nack = env
        .send(env.http.post(env.url(&format!("/nack/{dead}"))))
        .await;
    assert_eq!(nack.assert_ok()["result"], "dead");
    let recurring = env
        .push(json!({
            "topic": topic, "body": "every hour", "bizKey": "hourly",
            "repeat": {"every": 3_600_000, "times": 3},
            "retry": {"backoff": "fixed", "delay": 500},
        }))
        .await;
    for i in 0..5 {
        env.push(json!({"topic": topic, "body": format!("due {i}"), "priority": i}))
            .await;
    }
    let example_ids = [handed_out, dead, recurring].join(",");

    let spec = env.dir.path().join("openapi.json");
    std::fs::write(&spec, env.get_path("/openapi.json").await.text).unwrap();
    let hooks = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/openapi_hooks.py");
    let reports = env.dir.path().join("schemathesis");
    let url = env.url("");
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(&schemathesis)
            .arg("run")
            .arg(&spec)
            .args(["--url", &url])
            .args([
                "--checks",
                "not_a_server_error,status_code_conformance,content_type_conformance,\
                 response_headers_conformance,response_schema_conformance,\
                 negative_data_rejection",
            ])
            .args(["--phases", "examples,coverage,fuzzing"])
            .args(["--max-examples", "25"])
            .arg("--generation-deterministic")
            .args(["--max-time", "120"])
            // One worker: with two, hypothesis may parse source on both
            // threads at once, and Python 3.11 then fails the run with
            // "AST constructor recursion depth mismatch" (CPython
            // gh-106905), as it did in CI on a loaded machine.
            .args(["--workers", "1"])
            .args(["--request-timeout", "20"])
            .args(["--max-redirects", "0"])
            .arg("--no-color")
            .arg("--report-dir")
            .arg(&reports)
            .env("SCHEMATHESIS_HOOKS", &hooks)
            .env("DELAYQ_EXAMPLE_IDS", &example_ids)
            .env("NO_PROXY", "*")
            .current_dir(reports.parent().unwrap())
            .output()
            .unwrap_or_else(|e| panic!("run {schemathesis}: {e}"))
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "schemathesis ran {:.0} s:\n{stdout}\n{stderr}",
        started.elapsed().as_secs_f64()
    );
    // A failure names its findings in the panic itself: the output above
    // may be cut off before them where only the end of a log is shown.
    assert!(
        out.status.success(),
        "schemathesis found problems ({}):\n{}",
        out.status,
        findings(&stdout)
    );
    // The server is still well.
    assert_eq!(env.get_path("/ready").await.status, 200);
}

/// The ERRORS and FAILURES sections of schemathesis's report (up to the
/// next section), or the whole report when it has neither.
fn findings(report: &str) -> String {
    let mut kept = String::new();
    let mut keep = false;
    for line in report.lines() {
        if line.starts_with("====") {
            keep = line.contains("ERRORS") || line.contains("FAILURES");
        }
        if keep {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    if kept.is_empty() {
        report.to_string()
    } else {
        kept
    }
}

fn content_type(headers: &reqwest::header::HeaderMap) -> String {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// The values of the attributes starting with one of `openers` in `html`.
fn attribute_values(html: &str, openers: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for opener in openers {
        let mut rest = html;
        while let Some(start) = rest.find(opener) {
            rest = &rest[start + opener.len()..];
            let end = rest.find('"').unwrap_or(rest.len());
            found.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    found
}

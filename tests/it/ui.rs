//! The dashboard (`/ui`) in a real headless Chromium: its pages show live
//! data, bodies as text, and its actions work end to end, behind the admin
//! token, refused from another site and in read-only mode.
//!
//! With `DELAYQ_UI_SCREENSHOTS=DIR` the tests save the screenshots of the
//! main pages the README shows (`docs/screenshots/`) into DIR.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::browser::Browser;
use crate::common::{Backend, Env};
use serde_json::json;

const TOKEN: &str = "s3cret-ui";
const SCRIPT_BODY: &str =
    r#"<script>window.pwned = 1</script><b id="bold">not bold</b> & "quoted""#;

/// Where screenshots go: the directory asked for, or the test's own.
fn shots(env: &Env) -> (PathBuf, bool) {
    match std::env::var_os("DELAYQ_UI_SCREENSHOTS") {
        Some(dir) => {
            std::fs::create_dir_all(&dir).unwrap();
            (PathBuf::from(dir), true)
        }
        None => (env.dir.path().to_path_buf(), false),
    }
}

/// A message of `topic` that used its only attempt: dead.
async fn dead_message(env: &Env, topic: &str, body: &str, biz_key: &str) -> String {
    let id = env
        .push(json!({"topic": topic, "body": body, "bizKey": biz_key, "maxAttempts": 1}))
        .await;
    assert_eq!(env.receive_one(topic).await.id(), id);
    let nack = env
        .send(env.http.post(env.url(&format!("/nack/{id}"))))
        .await;
    assert_eq!(nack.assert_ok()["result"], "dead");
    env.wait_history(&id, &["WaitPut", "Delaying", "Ready", "Consuming", "Dead"])
        .await;
    id
}

async fn pages_show_live_data(b: Backend) {
    let env = Env::start(b).await;
    let (dir, asked) = shots(&env);
    let id = env
        .push(json!({"topic": "orders.eu", "body": SCRIPT_BODY, "bizKey": "<img src=x onerror=alert(1)>", "delay": 3_600_000}))
        .await;
    env.wait_history(&id, &["WaitPut", "Delaying"]).await;
    // An ordered group with one message out and one waiting behind it.
    let grouped: Vec<String> = env
        .push_batch(
            (0..2)
                .map(|i| json!({"topic": "grouped.ui", "group": "<b>cart</b>", "body": format!("g{i}"), "delay": i}))
                .collect(),
        )
        .await;
    assert_eq!(env.receive_one("grouped.ui").await.id(), grouped[0]);
    if asked {
        // Some traffic for the overview's rates and charts.
        for round in 0..4 {
            for topic in ["sms.reminder", "review.request", "payments.retry"] {
                let ids = env
                    .push_batch(
                        (0..20)
                            .map(|i| json!({"topic": topic, "body": format!("{{\"n\":{i}}}"), "delay": 50 * i}))
                            .collect(),
                    )
                    .await;
                for m in env.collect(topic, ids.len(), Duration::from_secs(10)).await {
                    if round < 3 {
                        env.ack(m.id()).await.assert_ok();
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        dead_message(
            &env,
            "payments.retry",
            r#"{"order":"A-1042","amount":1999}"#,
            "order-A-1042",
        )
        .await;
    }

    let browser = Browser::start().await;
    browser.resize(1360, 1060).await;

    // Overview: the pushed message's topic, with its count.
    browser.goto(&env.url("/ui")).await;
    browser.wait_for("orders.eu").await;
    assert!(browser.text("#topics").await.contains("orders.eu"));
    if asked {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    browser.screenshot(&dir.join("overview.png")).await;

    // The group shows on its topic's row, and on its topic page; the
    // message page names its group, as text.
    browser.wait_for("1 group · 1 waiting").await;
    browser.goto(&env.url("/ui/topics/grouped.ui")).await;
    browser.wait_for("Ordered groups").await;
    assert!(browser
        .text("#groups")
        .await
        .contains("1 group · 1 waiting"));
    browser
        .goto(&env.url(&format!("/ui/messages/{}", grouped[1])))
        .await;
    browser.wait_for("<b>cart</b>").await;
    browser.goto(&env.url("/ui")).await;
    browser.wait_for("orders.eu").await;

    // Coming due: the forecast chart is drawn, from data that count the
    // message pushed an hour ahead.
    browser.find("#chart-forecast canvas").await;
    assert!(browser
        .text("#chart-forecast")
        .await
        .contains("Falling due"));
    let due = browser
        .script(
            "return fetch('/ui/forecast.json', {credentials: 'same-origin'}).then(r => r.json()).then(d => [d.time.length, d.count.reduce((a, b) => a + b, 0)]);",
            json!([]),
        )
        .await;
    assert_eq!(due[0], 96, "{due}");
    assert!(due[1].as_u64().unwrap() >= 1, "{due}");

    // The topic page lists it; a search by bizKey finds it.
    browser.goto(&env.url("/ui/topics/orders.eu")).await;
    browser.wait_for(&id).await;
    browser.find("#chart-forecast canvas").await;
    let due = browser
        .script(
            "return fetch(document.getElementById('chart-forecast').dataset.src, {credentials: 'same-origin'}).then(r => r.json()).then(d => d.count.reduce((a, b) => a + b, 0));",
            json!([]),
        )
        .await;
    assert_eq!(due, 1, "orders.eu's forecast holds its one message");
    let search = browser.find("form.search input[name=q]").await;
    browser
        .type_into(&search, "<img src=x onerror=alert(1)>")
        .await;
    browser
        .click(&browser.find("form.search button").await)
        .await;
    browser.wait_for("History").await;
    assert!(browser
        .current_url()
        .await
        .ends_with(&format!("/ui/messages/{id}")));

    // The message: its body as text, nothing of it run or rendered.
    assert_eq!(browser.text("#body").await, SCRIPT_BODY);
    let parsed = browser
        .script(
            "return [typeof window.pwned, document.querySelectorAll('#body *').length, document.getElementById('bold') === null];",
            json!([]),
        )
        .await;
    assert_eq!(parsed, json!(["undefined", 0, true]));
    let history = browser.text("#history").await;
    assert!(
        history.contains("WaitPut") && history.contains("Delaying"),
        "{history}"
    );
    assert!(browser
        .text("body")
        .await
        .contains("<img src=x onerror=alert(1)>"));
    browser.screenshot(&dir.join("message.png")).await;

    // The cluster: this node, leader of itself.
    let node = env.get_path("/admin/cluster").await.assert_ok()["node"]
        .as_str()
        .unwrap()
        .to_string();
    browser.goto(&env.url("/ui/cluster")).await;
    browser.wait_for("Shards").await;
    assert_eq!(browser.text("#node").await, node);
    assert!(browser.text("#nodes").await.contains(&node));
    browser.screenshot(&dir.join("cluster.png")).await;

    // Restore and reconcile: a report run by clicking.
    browser.goto(&env.url("/ui/restore")).await;
    browser.wait_for("Reconcile the journal with Redis").await;
    let report = browser
        .find("form[action='/ui/restore/reconcile'] button:not(.primary)")
        .await;
    browser.click(&report).await;
    browser.wait_for("Reconciliation finished").await;
    assert!(browser.text("#report").await.contains("differences"));
}

backend_tests!(pages_show_live_data);

/// With an admin token: log in, requeue a dead message from the Dead
/// letters page, and it is delivered again. A POST from another site, or
/// without the CSRF token, changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn requeue_by_clicking_behind_the_token() {
    let env = Env::builder(Backend::Sqlite)
        .arg("--admin-token")
        .arg(TOKEN)
        .start()
        .await;
    let (dir, _) = shots(&env);
    let id = dead_message(&env, "sms", SCRIPT_BODY, "order-17").await;
    let other = dead_message(&env, "sms", r#"{"to":"+4915112345678"}"#, "order-18").await;

    let browser = Browser::start().await;
    browser.resize(1360, 900).await;

    // No session: the login form, which refuses a wrong token.
    browser.goto(&env.url("/ui/dead/sms")).await;
    browser.wait_for("Log in").await;
    browser
        .type_into(&browser.find("#token").await, "wrong")
        .await;
    browser.click(&browser.find("#login").await).await;
    browser.wait_for("That is not the admin token").await;
    browser
        .type_into(&browser.find("#token").await, TOKEN)
        .await;
    browser.click(&browser.find("#login").await).await;
    browser.wait_for("Dead letters of").await;
    assert!(browser.current_url().await.ends_with("/ui/dead/sms"));
    assert_eq!(
        browser.text(&format!("#dead-{id} td.body")).await.len(),
        40 + "…".len()
    );
    browser.screenshot(&dir.join("dead-letters.png")).await;

    // A form posted from another site (an opaque origin): no cookie goes
    // with it (SameSite) and the browser says where it comes from.
    let session = browser.cookie("delayq_ui").await.expect("a session cookie");
    browser
        .goto(&format!(
            "data:text/html,<form method=post action='{}'></form><script>document.forms[0].submit()</script>",
            env.url(&format!("/ui/messages/{other}/requeue"))
        ))
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The same with the cookie but without the CSRF token, and with a
    // token but from another origin.
    let post = |form: &'static str, origin: Option<&'static str>| {
        let mut req = env
            .http
            .post(env.url(&format!("/ui/messages/{other}/requeue")))
            .header("Cookie", format!("delayq_ui={session}"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(form);
        if let Some(o) = origin {
            req = req.header("Origin", o);
        }
        req
    };
    assert_eq!(env.send(post("back=%2Fui", None)).await.status, 403);
    assert_eq!(
        env.send(post("csrf=0000", Some("http://evil.example")))
            .await
            .status,
        403
    );
    let no_session = env
        .send(
            env.http
                .post(env.url(&format!("/ui/messages/{other}/requeue")))
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body("csrf=x"),
        )
        .await;
    assert_eq!(no_session.status, 401);
    assert_eq!(env.message(&other).await["message"]["status"], "Dead");
    // GET does not act.
    let get = env.get_path(&format!("/ui/messages/{other}/requeue")).await;
    assert!([404, 405].contains(&get.status), "{}", get.status);

    // Requeue by clicking: the message is delivered again.
    browser.goto(&env.url("/ui/dead/sms")).await;
    let requeue = browser.find(&format!("#dead-{id} button.primary")).await;
    browser.click(&requeue).await;
    browser.wait_for(&format!("Message {id} requeued")).await;
    assert_eq!(env.receive_one("sms").await.id(), id);
    assert_eq!(env.message(&other).await["message"]["status"], "Dead");

    // Delete the other one from its message page (the question accepted).
    browser
        .goto(&env.url(&format!("/ui/messages/{other}")))
        .await;
    browser.click(&browser.find("button.danger").await).await;
    browser.accept_dialog().await;
    browser.wait_for(&format!("Message {other} deleted")).await;
    assert_eq!(env.message(&other).await["message"]["status"], "Deleted");
}

/// `--ui-read-only`: every page shows, no form acts, and the action routes
/// refuse.
#[tokio::test(flavor = "multi_thread")]
async fn read_only_offers_no_action() {
    let env = Env::builder(Backend::Sqlite)
        .arg("--ui-read-only")
        .start()
        .await;
    let id = dead_message(&env, "mail", "hello", "k1").await;
    let browser = Browser::start().await;
    for page in [
        "/ui".to_string(),
        "/ui/dead/mail".to_string(),
        format!("/ui/messages/{id}"),
        "/ui/cluster".to_string(),
        "/ui/restore".to_string(),
    ] {
        browser.goto(&env.url(&page)).await;
        browser.wait_for("read-only").await;
        assert!(
            browser.find_all("form[method=post]").await.is_empty(),
            "{page}"
        );
        assert!(browser.find_all("button").await.is_empty(), "{page}");
    }
    browser.goto(&env.url("/ui/dead/mail")).await;
    browser.wait_for(&id).await;
    let session = browser.cookie("delayq_ui").await.expect("a session cookie");
    let refused = env
        .send(
            env.http
                .post(env.url(&format!("/ui/messages/{id}/requeue")))
                .header("Cookie", format!("delayq_ui={session}"))
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body("csrf=x"),
        )
        .await;
    assert_eq!(refused.status, 403);
    assert!(refused.text.contains("read-only"));
    assert_eq!(env.message(&id).await["message"]["status"], "Dead");
}

/// Pause a topic from its page (the question accepted) and resume it: while
/// paused the overview and the topic page say so and nothing is handed out.
/// Both pages show the topic's limits.
#[tokio::test(flavor = "multi_thread")]
async fn pause_and_resume_by_clicking() {
    let env = Env::builder(Backend::Sqlite)
        .arg("--admin-token")
        .arg(TOKEN)
        .arg("--topic-limit")
        .arg("sms=200/s,concurrency=5")
        .start()
        .await;
    let browser = Browser::start().await;
    browser.goto(&env.url("/ui/topics/sms")).await;
    browser.wait_for("Log in").await;
    browser
        .type_into(&browser.find("#token").await, TOKEN)
        .await;
    browser.click(&browser.find("#login").await).await;
    browser.wait_for("Topic sms").await;
    let limits = browser.text("#limit").await;
    assert!(
        limits.contains("at most 200 handed out a second")
            && limits.contains("at most 5 handed out and not yet acked"),
        "{limits}"
    );

    browser
        .click(&browser.find("#pause-state button.danger").await)
        .await;
    browser.accept_dialog().await;
    browser.wait_for("Topic sms paused.").await;
    browser.wait_for("Paused since").await;
    let id = env.push(json!({"topic": "sms", "body": "held"})).await;
    env.assert_nothing("sms", 1).await;
    browser.goto(&env.url("/ui")).await;
    browser.wait_for("Paused").await;
    browser.wait_for("200/s").await;
    browser.wait_for("≤5 in flight").await;
    // How long its oldest ready message has waited, on the overview.
    let mut waited = String::new();
    for _ in 0..40 {
        browser.goto(&env.url("/ui")).await;
        browser.wait_for("Topics").await;
        waited = browser
            .script(
                "const c = [...document.querySelectorAll('#topics th')].findIndex(th => th.textContent === 'Oldest ready'); return document.querySelector('#topics tbody tr').children[c].textContent;",
                json!([]),
            )
            .await
            .as_str()
            .unwrap_or_default()
            .to_string();
        if waited.ends_with('s') {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        waited.ends_with('s'),
        "the oldest ready message's wait: {waited:?}"
    );

    browser.goto(&env.url("/ui/topics/sms")).await;
    browser
        .click(&browser.find("#pause-state button.primary").await)
        .await;
    browser.wait_for("Topic sms resumed.").await;
    assert!(!browser.text("#pause-state").await.contains("Paused"));
    assert_eq!(env.receive_one("sms").await.id(), id);
}

/// The read token logs in too, to look without acting (support staff):
/// every page, no action offered, an action posted anyway refused; the
/// API's 401 on a route that takes it names it.
#[tokio::test(flavor = "multi_thread")]
async fn the_read_token_logs_in_to_look_only() {
    const READER: &str = "look-only";
    let env = Env::builder(Backend::Sqlite)
        .arg("--admin-token")
        .arg(TOKEN)
        .arg("--read-token")
        .arg(READER)
        .start()
        .await;
    let id = dead_message(&env, "mail", "hello", "k1").await;
    let plain = reqwest::Client::new();
    let r = env
        .send(plain.get(env.url(&format!("/messages/{id}"))))
        .await;
    r.assert_error(401, "unauthorized");
    assert!(r.text.contains("--read-token"), "{}", r.text);

    let browser = Browser::start().await;
    browser.goto(&env.url("/ui/dead/mail")).await;
    browser.wait_for("read token").await;
    browser
        .type_into(&browser.find("#token").await, READER)
        .await;
    browser.click(&browser.find("#login").await).await;
    browser.wait_for("Dead letters of").await;
    for page in [
        "/ui".to_string(),
        "/ui/dead/mail".to_string(),
        format!("/ui/messages/{id}"),
        "/ui/topics/mail".to_string(),
        "/ui/cluster".to_string(),
        "/ui/restore".to_string(),
    ] {
        browser.goto(&env.url(&page)).await;
        browser.wait_for("Log out").await;
        let forms = browser.find_all("form[method=post]").await;
        assert_eq!(forms.len(), 1, "{page}: only the logout form");
        let buttons = browser.find_all("form[method=post] button").await;
        assert_eq!(buttons.len(), 1, "{page}");
    }
    browser.goto(&env.url(&format!("/ui/messages/{id}"))).await;
    browser.wait_for("hello").await;
    // Posted anyway, with the session's own CSRF token: refused.
    let session = browser.cookie("delayq_ui").await.expect("a session cookie");
    let csrf = browser
        .script(
            "return document.querySelector('form[action=\"/ui/logout\"] input[name=csrf]').value;",
            json!([]),
        )
        .await;
    let refused = env
        .send(
            plain
                .post(env.url(&format!("/ui/messages/{id}/requeue")))
                .header("Cookie", format!("delayq_ui={session}"))
                .header("Sec-Fetch-Site", "same-origin")
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body(format!("csrf={}", csrf.as_str().unwrap())),
        )
        .await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    assert!(refused.text.contains("read token"), "{}", refused.text);
    assert_eq!(env.message(&id).await["message"]["status"], "Dead");
}

/// What the dashboard knows, it shows: a topic opens on the tab that holds
/// its messages, each tab with its count; a bizKey's white space at its
/// ends is visible; the leader's periodic reconciliation is on the restore
/// page; a notice a link made up is not shown as the node's own.
#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_shows_what_it_knows_and_only_that() {
    let env = Env::builder(Backend::Sqlite)
        .arg("--reconcile-interval")
        .arg("1s")
        .start()
        .await;
    let ids = env
        .push_batch(vec![
            json!({"topic": "t9", "body": "one", "bizKey": "A-1"}),
            json!({"topic": "t9", "body": "two", "bizKey": "A-1 "}),
        ])
        .await;
    env.wait_ready("t9", &ids).await;
    for id in &ids {
        env.wait_history(id, &["WaitPut", "Delaying", "Ready"])
            .await;
    }
    let browser = Browser::start().await;
    browser.goto(&env.url("/ui/topics/t9")).await;
    browser.wait_for(&ids[1]).await;
    let on = browser.text("nav.tabs a.on").await;
    assert!(on.starts_with("ready") && on.contains('2'), "{on}");
    let tabs = browser.text("nav.tabs").await;
    assert!(tabs.contains("delaying 0"), "{tabs}");
    assert_eq!(
        browser.find_all("td .ws").await.len(),
        1,
        "one key ends in a space"
    );

    browser.goto(&env.url("/ui/restore")).await;
    let mut periodic = String::new();
    for _ in 0..40 {
        browser.goto(&env.url("/ui/restore")).await;
        browser.wait_for("periodic reconciliation").await;
        periodic = browser.text("#periodic").await;
        if periodic.contains("agree") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(periodic.contains("agree"), "{periodic}");

    browser
        .goto(&env.url("/ui?error=Your%20account%20is%20suspended"))
        .await;
    browser.wait_for("Topics").await;
    assert!(!browser.text("body").await.contains("suspended"));

    // A file the dashboard does not have: the API's JSON 404, as for
    // Swagger UI's files.
    let missing = env.get_path("/ui/assets/nope.css").await;
    missing.assert_error(404, "not_found");
    assert!(
        missing.json["message"]
            .as_str()
            .unwrap()
            .contains("nope.css"),
        "{}",
        missing.text
    );
}

//! The admin token: with `--admin-token`, `/delete`, `/reStore*`,
//! `/admin/reconcile` and `/admin/restore` need `Authorization: Bearer
//! TOKEN`; producers and consumers need nothing.

use crate::common::{status, Backend, Env};
use serde_json::json;

const TOKEN: &str = "s3cret";

#[tokio::test(flavor = "multi_thread")]
async fn admin_routes_need_the_token() {
    let env = Env::builder(Backend::Sqlite)
        .arg("--admin-token")
        .arg(TOKEN)
        .start()
        .await;

    // Producers and consumers need no token.
    let id = env
        .push(json!({"topic": "adm", "body": "x", "delay": 60_000}))
        .await;
    let quick = env.push(json!({"topic": "adm2", "body": "y"})).await;
    assert_eq!(env.receive_one("adm2").await.id(), quick);
    env.ack(&quick).await.assert_ok();
    env.wait_history(&id, &["WaitPut", "Delaying"]).await;
    assert_eq!(env.message(&id).await["message"]["status"], "Delaying");
    // The ack's end reached the journal, and Redis let go of it.
    env.wait_status(&quick, status::CONSUMED).await;
    env.wait_journaled().await;

    let before = env.stored();
    let routes = [
        format!("/delete?id={id}"),
        "/reStore?expire=true".to_string(),
        format!("/reStore/{id}"),
        "/admin/reconcile?repair=true".to_string(),
        "/admin/restore".to_string(),
    ];
    for route in &routes {
        for auth in [
            None,
            Some("Bearer wrong"),
            Some("s3cret"),
            Some("Basic czNjcmV0"),
            Some("bearer s3cret"),
            Some("Bearer  s3cret"),
        ] {
            let mut req = env.http.get(env.url(route));
            if let Some(a) = auth {
                req = req.header("Authorization", a);
            }
            let r = env.send(req).await;
            r.assert_error(401, "unauthorized");
            env.assert_unchanged(&before, &format!("{route} with {auth:?}"));
        }
    }
    assert_eq!(env.journal.row(&id).unwrap().status, status::DELAYING);

    // With the token they work.
    let bearer = format!("Bearer {TOKEN}");
    let authed = |path: String| {
        env.send(
            env.http
                .get(env.url(&path))
                .header("Authorization", bearer.as_str()),
        )
    };
    let r = authed("/reStore?expire=true".to_string()).await;
    assert_eq!(r.assert_ok()["alreadyPresent"], 1, "{}", r.text);
    let r = authed(format!("/reStore/{id}")).await;
    assert_eq!(r.assert_ok()["alreadyPresent"], 1, "{}", r.text);
    let r = authed("/admin/reconcile?repair=true".to_string()).await;
    assert_eq!(r.assert_ok()["missing"]["count"], 0, "{}", r.text);
    let r = authed("/admin/restore".to_string()).await;
    assert_eq!(r.assert_ok()["alreadyPresent"], 1, "{}", r.text);
    let r = authed(format!("/delete?id={id}")).await;
    assert_eq!(r.assert_ok(), &json!({"id": id, "result": "deleted"}));
    assert_eq!(env.journal.row(&id).unwrap().status, status::DELETED);
}

/// With `--read-token`, the routes that show message bodies need it (or the
/// admin token); without one, they need the admin token when it is set.
#[tokio::test(flavor = "multi_thread")]
async fn message_bodies_need_the_read_or_admin_token() {
    for read in [Some("r3ad"), None] {
        let mut b = Env::builder(Backend::Sqlite)
            .arg("--admin-token")
            .arg(TOKEN);
        if let Some(r) = read {
            b = b.arg("--read-token").arg(r);
        }
        let env = b.start().await;
        let id = env
            .push(json!({"topic": "secret", "body": "card 4111", "delay": 60_000}))
            .await;
        for path in [format!("/messages/{id}"), "/dead/secret".to_string()] {
            let bare = env.send(env.http.get(env.url(&path))).await;
            bare.assert_error(401, "unauthorized");
            assert!(!bare.text.contains("4111"), "{}", bare.text);
            let wrong = env
                .send(env.http.get(env.url(&path)).bearer_auth("nope"))
                .await;
            wrong.assert_error(401, "unauthorized");
            for token in [Some(TOKEN), read].into_iter().flatten() {
                let r = env
                    .send(env.http.get(env.url(&path)).bearer_auth(token))
                    .await;
                assert_eq!(r.status, 200, "{path} with {token}: {}", r.text);
            }
        }
        let shown = env.message(&id).await;
        assert_eq!(shown["message"]["body"], "card 4111");
    }
}

/// Without an admin token, the original GET routes that change state
/// refuse what a browser says comes from another site (a page elsewhere
/// could otherwise cancel messages through a visitor's browser); the same
/// site and clients that are not browsers keep working.
#[tokio::test(flavor = "multi_thread")]
async fn state_changing_gets_refuse_other_sites() {
    let env = Env::start(Backend::Sqlite).await;
    let id = env
        .push(json!({"topic": "csrf", "body": "x", "delay": 60_000}))
        .await;
    env.wait_scheduled(&id).await;
    let redis = env.redis.snapshot();
    let own = format!("http://127.0.0.1:{}", env.server.port);
    for route in [
        format!("/delete?id={id}"),
        "/reStore?expire=true".to_string(),
        format!("/reStore/{id}"),
        "/admin/reconcile?repair=true".to_string(),
    ] {
        for (name, value) in [
            ("Sec-Fetch-Site", "cross-site"),
            ("Sec-Fetch-Site", "same-site"),
            ("Origin", "https://evil.example"),
            ("Origin", "null"),
        ] {
            let r = env
                .send(env.http.get(env.url(&route)).header(name, value))
                .await;
            r.assert_error(403, "forbidden");
            assert_eq!(env.redis.snapshot(), redis, "{route} with {name}: {value}");
        }
    }
    assert_eq!(env.journal.row(&id).unwrap().status, status::DELAYING);
    // The dashboard's own origin, and a plain client.
    let same = env
        .send(
            env.http
                .get(env.url("/admin/reconcile?repair=false"))
                .header("Origin", &own)
                .header("Sec-Fetch-Site", "same-origin"),
        )
        .await;
    assert_eq!(same.status, 200, "{}", same.text);
    let r = env
        .send(
            env.http
                .get(env.url(&format!("/delete?id={id}")))
                .header("Origin", &own),
        )
        .await;
    assert_eq!(r.assert_ok()["result"], "deleted");
}

/// Dashboard logins: a logout ends the session for good (the cookie no
/// longer works, on this node or any other), and an address that keeps
/// guessing the token is refused for a while.
#[tokio::test(flavor = "multi_thread")]
async fn dashboard_logout_revokes_and_logins_are_throttled() {
    let env = Env::builder(Backend::Sqlite)
        .arg("--admin-token")
        .arg(TOKEN)
        .start()
        .await;
    let http = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = |token: &'static str| {
        http.post(env.url("/ui/login"))
            .form(&[("token", token), ("next", "/ui")])
            .send()
    };
    let r = login(TOKEN).await.unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let page = http
        .get(env.url("/ui"))
        .header("Cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    let csrf = html
        .split(r#"name="csrf" value=""#)
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("a CSRF token on the page")
        .to_string();
    let out = http
        .post(env.url("/ui/logout"))
        .header("Cookie", &cookie)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);
    // The old cookie, replayed: back to the login form.
    let replay = http
        .get(env.url("/ui"))
        .header("Cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert!(replay.status().is_redirection(), "{}", replay.status());
    assert!(replay.headers()["location"]
        .to_str()
        .unwrap()
        .starts_with("/ui/login"));
    // And in Redis for the other nodes.
    let revoked: i64 = redis::cmd("ZCARD")
        .arg(format!("{{{}}}:ui-revoked", env.config.key_prefix))
        .query(&mut env.redis.con())
        .unwrap();
    assert_eq!(revoked, 1);

    for _ in 0..5 {
        assert_eq!(login("guess").await.unwrap().status(), 401);
    }
    let blocked = login(TOKEN).await.unwrap();
    assert_eq!(
        blocked.status(),
        429,
        "the address is throttled, even with the token"
    );
    assert!(blocked.headers().contains_key("retry-after"));
}

/// Every route the API document marks as needing the admin token alone
/// answers 401 without it, with a body it would act on, and changes
/// nothing; the routes that change data are all among them.
#[tokio::test(flavor = "multi_thread")]
async fn every_admin_route_refuses_without_the_token() {
    let env = Env::builder(Backend::Sqlite)
        .arg("--admin-token")
        .arg(TOKEN)
        .start()
        .await;
    let id = env
        .push(json!({"topic": "adm", "body": "x", "delay": 60_000}))
        .await;
    env.wait_history(&id, &["WaitPut", "Delaying"]).await;
    env.wait_journaled().await;
    let doc = env.send(env.http.get(env.url("/openapi.json"))).await;
    let doc = doc.assert_ok().clone();

    let mut admin_only = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let schemes: Vec<&str> = op["security"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_object())
                .flat_map(|s| s.keys().map(String::as_str))
                .collect();
            if schemes == ["adminToken"] {
                admin_only.push((method.to_uppercase(), path.clone()));
            }
        }
    }
    for must in [
        ("GET", "/delete"),
        ("POST", "/cancel"),
        ("POST", "/dead/{target}/requeue"),
        ("GET", "/reStore"),
        ("GET", "/reStore/{id}"),
        ("GET", "/admin/journal"),
        ("GET", "/admin/cluster"),
        ("POST", "/admin/rebalance"),
        ("GET", "/admin/reconcile"),
        ("GET", "/admin/restore"),
        ("POST", "/admin/shards/{shard}/move"),
    ] {
        assert!(
            admin_only.contains(&(must.0.to_string(), must.1.to_string())),
            "{must:?} is not documented as an admin route: {admin_only:?}"
        );
    }

    let before = env.stored();
    for (method, path) in &admin_only {
        // Parameters and bodies that would act on the pushed message.
        let concrete = path
            .replace("{id}", &id)
            .replace("{target}", "adm")
            .replace("{shard}", "0");
        let query = match path.as_str() {
            "/delete" => format!("?id={id}"),
            "/admin/reconcile" => "?repair=true".to_string(),
            "/admin/shards/{shard}/move" => "?to=anyone".to_string(),
            "/reStore" => "?expire=true".to_string(),
            _ => String::new(),
        };
        let url = env.url(&format!("{concrete}{query}"));
        let req = match method.as_str() {
            "POST" => env.http.post(url).json(&json!({"ids": [id]})),
            _ => env.http.get(url),
        };
        let r = env.send(req).await;
        r.assert_error(401, "unauthorized");
        env.assert_unchanged(&before, &format!("{method} {path}"));
    }
    assert_eq!(env.journal.row(&id).unwrap().status, status::DELAYING);
}

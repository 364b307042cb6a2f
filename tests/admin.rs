//! The admin token: with `--admin-token`, `/delete`, `/reStore*`,
//! `/admin/reconcile` and `/admin/restore` need `Authorization: Bearer
//! TOKEN`; producers and consumers need nothing.

mod common;

use common::{status, Backend, Env};
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

    let redis = env.redis.snapshot();
    let journal = env.journal.counts();
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
            assert_eq!(
                env.redis.snapshot(),
                redis,
                "Redis changed after {route} with {auth:?}"
            );
            assert_eq!(
                env.journal.counts(),
                journal,
                "the journal changed after {route} with {auth:?}"
            );
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

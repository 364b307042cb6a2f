//! Local wall-clock times: `deliverAtLocal` with `tz` and `dst` on a push
//! and a reschedule, read at the push with the zone's rules; a time the
//! clock jumps over or passes twice is refused unless `dst` says which
//! instant it means; a cron series' first time on a day the clock jumps.

use chrono::{DateTime, TimeZone};
use serde_json::json;

use crate::common::{now_ms, Backend, Env};

backend_tests!(
    a_local_time_is_delivered_at_its_instant,
    a_time_in_a_gap_or_a_fold_needs_a_rule,
    a_reschedule_takes_a_local_time
);

fn instant(rfc3339: &str) -> i64 {
    DateTime::parse_from_rfc3339(rfc3339)
        .unwrap()
        .timestamp_millis()
}

/// The wall-clock time `at` (epoch ms) reads as in `tz`, as a push gives it.
fn wall(at: i64, tz: chrono_tz::Tz) -> String {
    tz.timestamp_millis_opt(at)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S%.3f")
        .to_string()
}

async fn a_local_time_is_delivered_at_its_instant(b: Backend) {
    let env = Env::start(b).await;
    // Kathmandu is +05:45: a zone read as UTC or as the node's own would
    // be hours off, not milliseconds.
    let kathmandu = chrono_tz::Asia::Kathmandu;
    let due = now_ms() + 1_500;
    let id = env
        .push(json!({"topic": "lt", "body": "tea",
                     "deliverAtLocal": wall(due, kathmandu), "tz": "Asia/Kathmandu"}))
        .await;
    let row = env.wait_scheduled(&id).await;
    assert_eq!(row.due_time, due);
    let got = env.receive_one("lt").await;
    assert_eq!(got.id(), id);
    assert!(got.at >= due, "delivered at {} before {due}", got.at);
    assert_eq!(got.msg["dueTime"].as_i64(), Some(due), "{}", got.msg);
    env.ack(&id).await.assert_ok();

    // A cron series from a local time on the day Berlin's clock jumps over
    // 02:30: its first 02:30 comes at 03:30 +02:00, once.
    let id = env
        .push(json!({"topic": "lt-cron", "body": "nightly",
                     "deliverAtLocal": "2027-03-28T00:00:00", "tz": "Europe/Berlin",
                     "repeat": {"cron": "30 2 * * *", "tz": "Europe/Berlin"}}))
        .await;
    // Beyond the horizon it waits in the journal: read it back.
    let msg = env.message(&id).await;
    assert_eq!(
        msg["message"]["dueTime"].as_i64(),
        Some(instant("2027-03-28T03:30:00+02:00")),
        "{msg}"
    );
}

async fn a_time_in_a_gap_or_a_fold_needs_a_rule(b: Backend) {
    let env = Env::start(b).await;
    let before = env.stored();
    // Berlin's clock jumps from 02:00 to 03:00 on 2027-03-28.
    let gap = json!({"topic": "lt", "body": "b", "deliverAtLocal": "2027-03-28T02:30:00",
                     "tz": "Europe/Berlin"});
    let r = env.post_json("/push", &gap).await;
    r.assert_error(400, "invalid_delay");
    let said = r.json["message"].as_str().unwrap_or_default().to_string();
    assert!(
        said.contains("does not exist in Europe/Berlin")
            && said.contains("01:30:00.000 +01:00")
            && said.contains("03:30:00.000 +02:00"),
        "{said}"
    );
    let mut reject = gap.clone();
    reject["dst"] = json!("reject");
    env.post_json("/push", &reject)
        .await
        .assert_error(400, "invalid_delay");
    // It passes 02:30 twice on 2027-10-31.
    let fold = json!({"topic": "lt", "body": "b", "deliverAtLocal": "2027-10-31T02:30:00",
                      "tz": "Europe/Berlin"});
    let r = env.post_json("/push", &fold).await;
    r.assert_error(400, "invalid_delay");
    assert!(
        r.json["message"]
            .as_str()
            .is_some_and(|m| m.contains("happens twice")),
        "{}",
        r.json
    );
    // Bad local times and zones, and the fields out of place.
    for bad in [
        json!({"topic": "lt", "body": "b", "deliverAtLocal": "2027-03-28T09:00:00"}),
        json!({"topic": "lt", "body": "b", "deliverAtLocal": "2027-03-28T09:00:00Z", "tz": "UTC"}),
        json!({"topic": "lt", "body": "b", "deliverAtLocal": "2027-03-28T09:00:00", "tz": "Mars/Olympus"}),
        json!({"topic": "lt", "body": "b", "deliverAtLocal": "2027-03-28T09:00:00", "tz": "UTC", "dst": "first"}),
        json!({"topic": "lt", "body": "b", "deliverAtLocal": "2027-03-28T09:00:00", "tz": "UTC", "delay": 5}),
        json!({"topic": "lt", "body": "b", "tz": "Europe/Berlin", "delay": 5}),
    ] {
        env.post_json("/push", &bad)
            .await
            .assert_error(400, "invalid_delay");
    }
    env.assert_unchanged(&before, "refused local times");

    // With a rule each is one instant.
    for (mut msg, dst, at) in [
        (gap.clone(), "earlier", "2027-03-28T01:30:00+01:00"),
        (gap, "later", "2027-03-28T03:30:00+02:00"),
        (fold.clone(), "earlier", "2027-10-31T02:30:00+02:00"),
        (fold, "later", "2027-10-31T02:30:00+01:00"),
    ] {
        msg["dst"] = json!(dst);
        let id = env.push(msg).await;
        let msg = env.message(&id).await;
        assert_eq!(
            msg["message"]["dueTime"].as_i64(),
            Some(instant(at)),
            "{dst} {at}: {msg}"
        );
    }
}

async fn a_reschedule_takes_a_local_time(b: Backend) {
    let env = Env::start(b).await;
    let id = env
        .push(json!({"topic": "lt", "body": "b", "delay": 3_600_000}))
        .await;
    let r = env
        .post_json(
            "/reschedule",
            &json!({"ids": [id], "deliverAtLocal": "2027-10-31T02:30:00",
                    "tz": "America/Sao_Paulo"}),
        )
        .await;
    let body = r.assert_ok();
    let due = instant("2027-10-31T02:30:00-03:00");
    assert_eq!(body["results"][0]["dueTime"].as_i64(), Some(due), "{body}");
    env.post_json(
        "/reschedule",
        &json!({"ids": [id], "deliverAtLocal": "2027-10-31T02:30:00", "tz": "Europe/Berlin"}),
    )
    .await
    .assert_error(400, "invalid_delay");
    assert_eq!(
        env.message(&id).await["message"]["dueTime"].as_i64(),
        Some(due)
    );
}

//! The HTTP side of a test's [`Env`]: requests to its server and what
//! they answered.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{now_ms, Env};

/// An HTTP answer: status and JSON body (`Value::Null` when it is not JSON).
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub json: Value,
    pub text: String,
}

impl Reply {
    /// Asserts the status and the JSON error code, and that the body is an
    /// error document `{"error": string, "message": string}`.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "status of {}", self.text);
        assert_eq!(self.json["error"], code, "error code of {}", self.text);
        assert!(
            self.json["message"].as_str().is_some_and(|m| !m.is_empty()),
            "error body without a message: {}",
            self.text
        );
    }

    #[track_caller]
    pub fn assert_ok(&self) -> &Value {
        assert_eq!(self.status, 200, "expected 200, got {}", self.text);
        &self.json
    }
}

/// A delivered message with the time (epoch ms) the consumer received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub at: i64,
    pub msg: Value,
}

impl Received {
    pub fn id(&self) -> &str {
        id_of(&self.msg)
    }
}

pub fn id_of(msg: &Value) -> &str {
    msg["id"]
        .as_str()
        .unwrap_or_else(|| panic!("message without a string id: {msg}"))
}

impl Env {
    async fn reply(resp: reqwest::Response) -> Reply {
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("read the response body");
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply { status, json, text }
    }

    pub async fn send(&self, req: reqwest::RequestBuilder) -> Reply {
        Env::reply(req.send().await.expect("HTTP request")).await
    }

    pub async fn get_path(&self, path: &str) -> Reply {
        self.send(self.http.get(self.url(path))).await
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Reply {
        self.send(self.http.post(self.url(path)).json(body)).await
    }

    pub async fn post_raw(&self, path: &str, content_type: &str, body: impl Into<String>) -> Reply {
        let req = self
            .http
            .post(self.url(path))
            .header("Content-Type", content_type)
            .body(body.into());
        self.send(req).await
    }

    /// `POST /push`, expecting 200; returns the id.
    pub async fn push(&self, msg: Value) -> String {
        let r = self.post_json("/push", &msg).await;
        id_of(r.assert_ok()).to_string()
    }

    /// `POST /push/batch`, expecting 200; returns the ids.
    pub async fn push_batch(&self, messages: Vec<Value>) -> Vec<String> {
        let r = self
            .post_json("/push/batch", &json!({ "messages": messages }))
            .await;
        r.assert_ok()["ids"]
            .as_array()
            .unwrap_or_else(|| panic!("no ids in {}", r.text))
            .iter()
            .map(|v| v.as_str().expect("ids are strings").to_string())
            .collect()
    }

    /// One long poll `GET /get/{topic}?timeout=S&count=N`, expecting 200.
    pub async fn poll(&self, topic: &str, timeout_s: u64, count: usize) -> Vec<Received> {
        let r = self
            .get_path(&format!("/get/{topic}?timeout={timeout_s}&count={count}"))
            .await;
        let at = now_ms();
        let list = r.assert_ok()["messages"]
            .as_array()
            .unwrap_or_else(|| panic!("no messages in {}", r.text))
            .clone();
        list.into_iter().map(|msg| Received { at, msg }).collect()
    }

    /// Long-polls until `n` messages arrived or `within` passed.
    pub async fn collect(&self, topic: &str, n: usize, within: Duration) -> Vec<Received> {
        let deadline = Instant::now() + within;
        let mut got = Vec::new();
        while got.len() < n && Instant::now() < deadline {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .as_secs()
                .clamp(1, 5);
            got.extend(self.poll(topic, left, 100).await);
        }
        got
    }

    /// Long-polls until one message arrives (within 10 s) and returns it.
    pub async fn receive_one(&self, topic: &str) -> Received {
        let got = self.collect(topic, 1, Duration::from_secs(10)).await;
        assert_eq!(
            got.len(),
            1,
            "expected exactly one message on {topic}, got {got:?}"
        );
        got.into_iter().next().unwrap()
    }

    /// Asserts that a poll of `timeout_s` seconds returns nothing.
    pub async fn assert_nothing(&self, topic: &str, timeout_s: u64) {
        let got = self.poll(topic, timeout_s, 100).await;
        assert!(
            got.is_empty(),
            "expected no message on {topic}, got {got:?}"
        );
    }

    pub async fn ack(&self, id: &str) -> Reply {
        self.send(self.http.post(self.url(&format!("/ack/{id}"))))
            .await
    }

    pub async fn delete(&self, id: &str) -> Reply {
        self.get_path(&format!("/delete?id={id}")).await
    }

    /// `GET /messages/{id}`, with the server's read or admin token when it
    /// has one.
    pub async fn message(&self, id: &str) -> Value {
        let mut req = self.http.get(self.url(&format!("/messages/{id}")));
        if let Some(token) = self.reader_token() {
            req = req.bearer_auth(token);
        }
        self.send(req).await.assert_ok().clone()
    }

    /// The token the server's body-reading routes take, if it has one.
    pub fn reader_token(&self) -> Option<String> {
        let args = &self.config.extra_args;
        ["--read-token", "--admin-token"].iter().find_map(|flag| {
            args.iter()
                .position(|a| a == flag)
                .and_then(|i| args.get(i + 1).cloned())
        })
    }

    /// Status names of the message's history, as `GET /messages/{id}` shows it.
    pub async fn history_statuses(&self, id: &str) -> Vec<String> {
        let m = self.message(id).await;
        m["history"]
            .as_array()
            .expect("history")
            .iter()
            .map(|h| h["status"].as_str().unwrap().to_string())
            .collect()
    }
}

//! A headless Chromium driven over chromedriver's WebDriver HTTP API
//! (plain JSON over HTTP): each [`Browser`] starts its own chromedriver on
//! a free port and its own Chromium with a fresh profile, and stops both
//! when dropped.
//!
//! `DELAYQ_CHROMEDRIVER` and `DELAYQ_CHROMIUM` name the programs
//! (default `chromedriver` and `/usr/bin/chromium`, Debian's packages,
//! which `scripts/test` installs).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::free_port;

/// How long [`Browser::wait_for`] waits.
const WAIT: Duration = Duration::from_secs(15);

/// WebDriver's key for an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

pub struct Browser {
    http: reqwest::Client,
    base: String,
    session: String,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn start() -> Browser {
        let driver_bin =
            std::env::var("DELAYQ_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
        let chromium =
            std::env::var("DELAYQ_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let port = free_port();
        let driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run {driver_bin} ({e}): install chromium and chromium-driver (scripts/test does)")
            });
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        loop {
            let ready = match http.get(format!("{base}/status")).send().await {
                Ok(r) => r
                    .json::<Value>()
                    .await
                    .ok()
                    .map(|v| v["value"]["ready"] == true),
                Err(_) => None,
            };
            if ready == Some(true) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "chromedriver did not answer on port {port}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::Builder::new()
            .prefix("delayq-chromium-")
            .tempdir()
            .unwrap();
        let args = [
            "--headless".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--window-size=1360,900".into(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
        }}});
        let mut browser = Browser {
            http,
            base,
            session: String::new(),
            driver,
            _profile: profile,
        };
        let v = browser.call("POST", "/session", caps).await;
        browser.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {v}"))
            .to_string();
        browser
    }

    /// One WebDriver command; its `value`.
    async fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", self.base);
        let req = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self
                .http
                .post(url)
                .header("Content-Type", "application/json")
                .body(body.to_string()),
        };
        let resp = req.send().await.expect("WebDriver request");
        let status = resp.status();
        let v: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap_or(Value::Null);
        assert!(
            status.is_success(),
            "WebDriver {method} {path}: {status} {v}"
        );
        v["value"].clone()
    }

    async fn session_call(&self, method: &str, path: &str, body: Value) -> Value {
        let path = format!("/session/{}{path}", self.session);
        self.call(method, &path, body).await
    }

    pub async fn goto(&self, url: &str) {
        self.session_call("POST", "/url", json!({"url": url})).await;
    }

    pub async fn current_url(&self) -> String {
        self.session_call("GET", "/url", Value::Null)
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Runs `script` in the page (its `arguments` are `args`); its result.
    pub async fn script(&self, script: &str, args: Value) -> Value {
        self.session_call(
            "POST",
            "/execute/sync",
            json!({"script": script, "args": args}),
        )
        .await
    }

    /// The elements matching a CSS selector.
    pub async fn find_all(&self, css: &str) -> Vec<String> {
        let v = self
            .session_call(
                "POST",
                "/elements",
                json!({"using": "css selector", "value": css}),
            )
            .await;
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e[ELEMENT].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first element matching `css`, waiting for it to appear.
    pub async fn find(&self, css: &str) -> String {
        let started = Instant::now();
        loop {
            if let Some(e) = self.find_all(css).await.into_iter().next() {
                return e;
            }
            assert!(
                started.elapsed() < WAIT,
                "no element {css} on {}: {}",
                self.current_url().await,
                self.text("body").await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn click(&self, element: &str) {
        self.session_call("POST", &format!("/element/{element}/click"), json!({}))
            .await;
    }

    pub async fn type_into(&self, element: &str, text: &str) {
        self.session_call(
            "POST",
            &format!("/element/{element}/value"),
            json!({"text": text}),
        )
        .await;
    }

    /// The visible text of the first element matching `css` ("" when none).
    pub async fn text(&self, css: &str) -> String {
        self.script(
            "var e = document.querySelector(arguments[0]); return e ? e.innerText : '';",
            json!([css]),
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// Waits until the page's text contains `needle`.
    pub async fn wait_for(&self, needle: &str) {
        let started = Instant::now();
        loop {
            let text = self.text("body").await;
            if text.contains(needle) {
                return;
            }
            assert!(
                started.elapsed() < WAIT,
                "{} never showed {needle:?}; it shows:\n{text}",
                self.current_url().await
            );
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    /// A cookie's value, HttpOnly ones included.
    pub async fn cookie(&self, name: &str) -> Option<String> {
        let all = self.session_call("GET", "/cookie", Value::Null).await;
        all.as_array()?
            .iter()
            .find(|c| c["name"] == name)
            .and_then(|c| c["value"].as_str().map(String::from))
    }

    /// Accepts the page's confirm() dialog.
    pub async fn accept_dialog(&self) {
        self.session_call("POST", "/alert/accept", json!({})).await;
    }

    /// Saves a PNG of the whole window.
    pub async fn screenshot(&self, path: &Path) {
        let b64 = self.session_call("GET", "/screenshot", Value::Null).await;
        let png = decode_base64(b64.as_str().expect("a screenshot"));
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::write(path, png).unwrap();
    }

    /// Sets the window's size (screenshots are this size).
    pub async fn resize(&self, width: u32, height: u32) {
        self.session_call(
            "POST",
            "/window/rect",
            json!({"width": width, "height": height}),
        )
        .await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Deleting the session closes Chromium; then chromedriver, this
        // test's own child, is stopped. Drop cannot wait on async code:
        // the DELETE is written by hand on a plain socket.
        use std::io::{Read, Write};
        let host = self.base.trim_start_matches("http://").to_string();
        if let Ok(mut s) = std::net::TcpStream::connect(&host) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = write!(
                s,
                "DELETE /session/{} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
                self.session
            );
            let _ = s.read_to_end(&mut Vec::new());
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for v in text.bytes().filter_map(value) {
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

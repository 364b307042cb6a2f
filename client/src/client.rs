//! [`Client`]: one typed method per route, over one keep-alive connection
//! pool.
//!
//! Each request waits as long as what it asked for can take, so a node
//! that stops answering (a frozen process still accepts connections) costs
//! a bounded wait, never a stall: a request about one message (push, ack,
//! nack, cancel) 5 s by default, a batch or bulk cancel 60 s, a long poll
//! its own timeout plus 3 s. A client given several addresses
//! ([`ClientBuilder::also`]: nodes, or balancers) moves on to the next one
//! after a request that got no answer or a 502, 503 or 504, so the caller's
//! next attempt (the [`Consumer`](crate::Consumer)'s next poll) goes
//! elsewhere. The client never sends a request twice by itself: whether a
//! push that got no answer may be sent again is the caller's call (with a
//! `bizKey` it may: the server returns the first push's id).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use delayq_proto::{
    AckAndGetRequest, AckBatchReply, AckRequest, CancelBizKey, CancelIds, CancelPrefix,
    CancelRequest, Dst, ErrorBody, Forecast, NackBatchReply, NackRequest, PauseState, PrefixCounts,
    PushBatchReply, RescheduleRequest, TopicList,
};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;

use crate::error::{Error, ErrorCode};
use crate::message::{Delivery, MessageId, MessageView, NewMessage, Status};
use crate::reply::CancelOutcome;
use crate::reply::{
    AckAndPollReply, AckResult, CancelEach, CancelOne, MessagePage, NackResult, PushReply,
    RescheduleEach,
};
use delayq_proto::{epoch_ms, millis};

/// Most ids the server takes in one `POST /ack`, `POST /nack` or poll.
pub const MAX_ACK_IDS: usize = 100;
/// Most messages in one `POST /push/batch`.
pub const MAX_PUSH_BATCH: usize = 1_000;
/// Most ids in one `POST /cancel`.
pub const MAX_CANCEL_IDS: usize = 1_000;
/// Most messages one poll may ask for.
pub const MAX_POLL_COUNT: usize = 100;
/// Longest long poll the server waits.
pub const MAX_POLL_TIMEOUT: Duration = Duration::from_secs(300);
/// How much longer than its long poll a poll request may take: the
/// shipped nginx answers 504 at the poll's timeout + 1 s when the node
/// does not.
const POLL_MARGIN: Duration = Duration::from_secs(3);

/// A delayq server's HTTP API. Cheap to clone: clones share one connection
/// pool, and which address is in use.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    bases: Arc<[Arc<str>]>,
    /// The address in use: an index into `bases`, moved on after a request
    /// that got no answer.
    current: Arc<AtomicUsize>,
    timeout: Duration,
    bulk_timeout: Duration,
    admin_token: Option<Arc<str>>,
}

/// Settings of a [`Client`], from [`Client::builder`].
pub struct ClientBuilder {
    urls: Vec<String>,
    timeout: Duration,
    bulk_timeout: Duration,
    connect_timeout: Duration,
    idle_per_host: usize,
    admin_token: Option<String>,
    ca_files: Vec<std::path::PathBuf>,
}

/// How long a request may take.
#[derive(Clone, Copy)]
enum Wait {
    /// About one message, or a few ids: answered at once.
    Quick,
    /// A batch, a bulk cancel.
    Bulk,
    /// A long poll of this long.
    Poll(Duration),
}

impl ClientBuilder {
    /// How long a request about one message (push, ack, nack, cancel by id
    /// or bizKey) may take (default 5 s): a node answers them in
    /// milliseconds, and says so itself within about 2 s when its journal
    /// is slow.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long a batch push, an ack or cancel of many ids, or a cancel by
    /// bizKey prefix may take (default 60 s).
    pub fn bulk_timeout(mut self, timeout: Duration) -> Self {
        self.bulk_timeout = timeout;
        self
    }

    /// Another address of the same deployment (a node, or a balancer in
    /// front of the nodes). Requests go to one address at a time; one that
    /// gets no answer, or a 502, 503 or 504, moves the client on to the
    /// next for the requests after it.
    pub fn also(mut self, url: &str) -> Self {
        self.urls.push(url.to_string());
        self
    }

    /// How long opening a connection may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Idle keep-alive connections kept open (default 64): as many as
    /// requests run at once, so none has to open a new one.
    pub fn pool_idle_per_host(mut self, n: usize) -> Self {
        self.idle_per_host = n;
        self
    }

    /// A PEM file of CA certificates to trust for `https://` addresses,
    /// besides the platform's (a node serving `--tls-cert` signed by a
    /// private CA, or a balancer's). Read when the client is built.
    pub fn tls_ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.ca_files.push(path.into());
        self
    }

    /// The server's `--admin-token`, sent as `Authorization: Bearer` on the
    /// routes that need it (cancels).
    pub fn admin_token(mut self, token: impl Into<String>) -> Self {
        self.admin_token = Some(token.into());
        self
    }

    pub fn build(self) -> Result<Client, Error> {
        let bad = |url: &str, reason: &str| Error::Url {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        for raw in &self.urls {
            let url = reqwest::Url::parse(raw).map_err(|e| bad(raw, &e.to_string()))?;
            if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
                return Err(bad(raw, "give http://HOST:PORT or https://HOST:PORT"));
            }
            if url.query().is_some() || url.fragment().is_some() {
                return Err(bad(raw, "the base URL takes no query or fragment"));
            }
        }
        let mut http = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .pool_max_idle_per_host(self.idle_per_host)
            .tcp_nodelay(true);
        for path in &self.ca_files {
            let tls = |reason: String| Error::Tls {
                path: path.clone(),
                reason,
            };
            let pem = std::fs::read(path).map_err(|e| tls(e.to_string()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| tls(format!("not a PEM file of certificates: {e}")))?;
            if certs.is_empty() {
                return Err(tls("holds no certificate (PEM, BEGIN CERTIFICATE)".into()));
            }
            for cert in certs {
                http = http.add_root_certificate(cert);
            }
        }
        let http = http
            .build()
            .map_err(|e| bad(&self.urls[0], &e.to_string()))?;
        Ok(Client {
            http,
            bases: self
                .urls
                .iter()
                .map(|u| Arc::from(u.trim_end_matches('/')))
                .collect(),
            current: Arc::new(AtomicUsize::new(0)),
            timeout: self.timeout,
            bulk_timeout: self.bulk_timeout,
            admin_token: self.admin_token.map(Into::into),
        })
    }
}

impl Client {
    /// A client of the server at `url` (e.g. `http://127.0.0.1:7070`), with
    /// the default settings.
    pub fn new(url: &str) -> Result<Client, Error> {
        Client::builder(url).build()
    }

    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            urls: vec![url.to_string()],
            timeout: Duration::from_secs(5),
            bulk_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(2),
            idle_per_host: 64,
            admin_token: None,
            ca_files: Vec::new(),
        }
    }

    /// The base URL requests go to now.
    pub fn url(&self) -> &str {
        &self.bases[self.current.load(Ordering::Relaxed) % self.bases.len()]
    }

    /// After a request to `base` got no answer: the next address, unless
    /// another request moved on already.
    fn move_on(&self, from: usize) {
        if self.bases.len() > 1 {
            let next = (from + 1) % self.bases.len();
            let _ = self
                .current
                .compare_exchange(from, next, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// `POST /push`: answered once the message is durable in the journal.
    pub async fn push(&self, message: &NewMessage) -> Result<PushReply, Error> {
        self.call(Method::POST, "/push".into(), Some(message), Wait::Quick)
            .await
    }

    /// `POST /push/batch` (1 to 1000 messages): all durable, or none
    /// accepted. The ids come in the messages' order.
    pub async fn push_batch(&self, messages: &[NewMessage]) -> Result<Vec<MessageId>, Error> {
        let reply: PushBatchReply = self
            .call(
                Method::POST,
                "/push/batch".into(),
                Some(&json!({ "messages": messages })),
                Wait::Bulk,
            )
            .await?;
        if reply.ids.len() != messages.len() {
            return Err(Error::Decode {
                method: "POST",
                path: "/push/batch".into(),
                reason: format!("{} ids for {} messages", reply.ids.len(), messages.len()),
            });
        }
        Ok(reply.ids)
    }

    /// `GET /delete?id=`: cancels one message; an unknown id is
    /// [`CancelOutcome::NotFound`].
    pub async fn cancel(&self, id: MessageId) -> Result<CancelOutcome, Error> {
        let reply: Result<CancelOne, Error> = self
            .call(
                Method::GET,
                format!("/delete?id={id}"),
                None::<&()>,
                Wait::Quick,
            )
            .await;
        match reply {
            Ok(one) => Ok(one.result),
            Err(Error::Api {
                status: 404,
                code: ErrorCode::NotFound,
                ..
            }) => Ok(CancelOutcome::NotFound),
            Err(e) => Err(e),
        }
    }

    /// `POST /reschedule` with ids (1 to 1000): each not handed out yet
    /// moves to `to`, keeping its id; a result per id.
    pub async fn reschedule_ids(
        &self,
        ids: &[MessageId],
        to: &Reschedule,
    ) -> Result<RescheduleEach, Error> {
        let body = RescheduleRequest {
            ids: Some(ids.to_vec()),
            ..to.body()
        };
        self.call(Method::POST, "/reschedule".into(), Some(&body), Wait::Bulk)
            .await
    }

    /// `POST /reschedule` with a topic and `bizKey`: the live message
    /// holding the key moves to `to`. When no live message holds it the
    /// server answers 404: [`Error::Api`] with code
    /// [`ErrorCode::NotFound`](crate::ErrorCode::NotFound).
    pub async fn reschedule_biz_key(
        &self,
        topic: &str,
        biz_key: &str,
        to: &Reschedule,
    ) -> Result<RescheduleEach, Error> {
        let body = RescheduleRequest {
            topic: Some(topic.to_string()),
            biz_key: Some(biz_key.to_string()),
            ..to.body()
        };
        self.call(Method::POST, "/reschedule".into(), Some(&body), Wait::Quick)
            .await
    }

    /// `GET /messages?topic=&bizKey=`: the live message of `topic`
    /// holding `biz_key` (compared exactly), if any.
    pub async fn find_biz_key(
        &self,
        topic: &str,
        biz_key: &str,
    ) -> Result<Option<MessageView>, Error> {
        let page = self.search(topic, &Search::BizKey(biz_key), None).await?;
        Ok(page.messages.into_iter().next())
    }

    /// `GET /messages?topic=…`: one page (`after` the `next` of the page
    /// before) of a topic's messages in id order, as `search` selects
    /// them.
    pub async fn search(
        &self,
        topic: &str,
        search: &Search<'_>,
        after: Option<MessageId>,
    ) -> Result<MessagePage, Error> {
        let mut query = format!("topic={}", encode(topic));
        let mut param = |name: &str, value: &str| {
            query.push_str(&format!("&{name}={}", encode(value)));
        };
        match search {
            Search::BizKey(key) => param("bizKey", key),
            Search::BizKeyPrefix { prefix, status } => {
                param("bizKeyPrefix", prefix);
                if let Some(s) = status {
                    param("status", &format!("{s:?}"));
                }
            }
            Search::Status(s) => param("status", &format!("{s:?}")),
        }
        if let Some(a) = after {
            param("after", &a.to_string());
        }
        self.call(
            Method::GET,
            format!("/messages?{query}"),
            None::<&()>,
            Wait::Quick,
        )
        .await
    }

    /// `GET /topics`: every topic with its counts by status, whether it is
    /// paused, and its oldest message waiting ready.
    pub async fn topics(&self) -> Result<TopicList, Error> {
        self.call(Method::GET, "/topics".into(), None::<&()>, Wait::Quick)
            .await
    }

    /// `GET /forecast` (`topic` None) or `GET /topics/{topic}/forecast`:
    /// how many messages fall due per `bucket` (e.g. `"1m"`) over `span`
    /// (e.g. `"24h"`) from now on. A topic's bucket too large to read whole
    /// is an estimate with its 95 % interval (`low`, `high`).
    pub async fn forecast(
        &self,
        topic: Option<&str>,
        bucket: &str,
        span: &str,
    ) -> Result<Forecast, Error> {
        let path = match topic {
            Some(t) => format!("/topics/{}/forecast", encode(t)),
            None => "/forecast".to_string(),
        };
        let query = format!("?bucket={}&span={}", encode(bucket), encode(span));
        self.call(Method::GET, path + &query, None::<&()>, Wait::Bulk)
            .await
    }

    /// `POST /topics/{topic}/pause`: nothing of the topic is handed out or
    /// forwarded, on any node, until [`Client::resume`]. Pushes, cancels
    /// and acks go on. Calling it again is harmless (and completes a pause
    /// an outage cut short).
    pub async fn pause(&self, topic: &str) -> Result<PauseState, Error> {
        self.call(
            Method::POST,
            format!("/topics/{topic}/pause"),
            None::<&()>,
            Wait::Quick,
        )
        .await
    }

    /// `POST /topics/{topic}/resume`: the topic is handed out again.
    pub async fn resume(&self, topic: &str) -> Result<PauseState, Error> {
        self.call(
            Method::POST,
            format!("/topics/{topic}/resume"),
            None::<&()>,
            Wait::Quick,
        )
        .await
    }

    /// `POST /cancel` with ids (1 to 1000): a result per id.
    pub async fn cancel_ids(&self, ids: &[MessageId]) -> Result<CancelEach, Error> {
        self.call(
            Method::POST,
            "/cancel".into(),
            Some(&CancelRequest::Ids(CancelIds { ids: ids.to_vec() })),
            Wait::Bulk,
        )
        .await
    }

    /// `POST /cancel` with a topic and `bizKey`: the live message holding
    /// the key. When no live message holds it the server answers 404:
    /// [`Error::Api`] with code [`ErrorCode::NotFound`](crate::ErrorCode::NotFound).
    pub async fn cancel_biz_key(&self, topic: &str, biz_key: &str) -> Result<CancelEach, Error> {
        self.call(
            Method::POST,
            "/cancel".into(),
            Some(&CancelRequest::BizKey(CancelBizKey {
                topic: topic.to_string(),
                biz_key: biz_key.to_string(),
            })),
            Wait::Quick,
        )
        .await
    }

    /// `POST /cancel` with a topic and `bizKeyPrefix`: every live message of
    /// the topic whose key starts with the prefix; counts per outcome.
    pub async fn cancel_biz_key_prefix(
        &self,
        topic: &str,
        prefix: &str,
    ) -> Result<PrefixCounts, Error> {
        self.call(
            Method::POST,
            "/cancel".into(),
            Some(&CancelRequest::Prefix(CancelPrefix {
                topic: topic.to_string(),
                biz_key_prefix: prefix.to_string(),
            })),
            Wait::Bulk,
        )
        .await
    }

    /// One long poll of `topic`: acks `ack` (at most 100 deliveries) and waits up to
    /// `timeout` (whole seconds, at most 300) for at most `count` (1 to 100)
    /// due messages, in one round trip (`POST /get/{topic}`; without acks,
    /// `GET /get/{topic}`). Each message received is `Consuming`: ack it
    /// within its `ttl`, or it is delivered again.
    ///
    /// Acks carried by a poll are applied before the answer and journaled
    /// within milliseconds after it. [`Consumer`](crate::Consumer) runs
    /// this in a loop.
    pub async fn poll(
        &self,
        topic: &str,
        ack: &[Delivery],
        count: usize,
        timeout: Duration,
    ) -> Result<AckAndPollReply, Error> {
        let seconds = timeout.min(MAX_POLL_TIMEOUT).as_secs();
        let wait = Wait::Poll(Duration::from_secs(seconds));
        if ack.is_empty() {
            let path = format!("/get/{topic}?timeout={seconds}&count={count}");
            self.call(Method::GET, path, None::<&()>, wait).await
        } else {
            // The timeout in the query, where a balancer can bound the wait.
            let body = AckAndGetRequest {
                ack: ack.to_vec(),
                count: Some(count as i64),
                timeout: None,
            };
            let path = format!("/get/{topic}?timeout={seconds}");
            self.call(Method::POST, path, Some(&body), wait).await
        }
    }

    /// `POST /ack`: acks the deliveries (a message's id, or its
    /// [`Delivery`] with the receipt it was handed out with), 100 per
    /// request, each request answered once the journal committed it. A
    /// result per id.
    pub async fn ack(&self, ids: &[Delivery]) -> Result<Vec<AckResult>, Error> {
        let mut results = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(MAX_ACK_IDS) {
            let body = AckRequest {
                ids: chunk.to_vec(),
            };
            let reply: AckBatchReply = self
                .call(Method::POST, "/ack".into(), Some(&body), Wait::Quick)
                .await?;
            results.extend(reply.results);
        }
        Ok(results)
    }

    /// `POST /ack/{id}`: acks one message. A message not handed out is a 409
    /// with [`ErrorCode::NotInFlight`].
    pub async fn ack_one(&self, id: MessageId) -> Result<(), Error> {
        self.ack_delivery(&Delivery::from(id)).await
    }

    /// `POST /ack/{id}?receipt=R`: acks one delivery. Another delivery than
    /// the one the receipt names (the message handed to another consumer
    /// since) is a 409 with [`ErrorCode::StaleDelivery`].
    pub async fn ack_delivery(&self, delivery: &Delivery) -> Result<(), Error> {
        let path = match &delivery.receipt {
            Some(r) => format!("/ack/{}?receipt={r}", delivery.id),
            None => format!("/ack/{}", delivery.id),
        };
        let _: serde_json::Value = self
            .call(Method::POST, path, None::<&()>, Wait::Quick)
            .await?;
        Ok(())
    }

    /// `POST /nack`: the messages could not be handled. With a delay (at
    /// most one day), each is delivered again after it; without, after its
    /// `retry` policy's wait (at once without a policy). On its last attempt
    /// a message is `Dead`. 100 ids per request; a result per id.
    pub async fn nack(
        &self,
        ids: &[Delivery],
        delay: Option<Duration>,
    ) -> Result<Vec<NackResult>, Error> {
        let mut results = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(MAX_ACK_IDS) {
            let body = NackRequest {
                ids: chunk.to_vec(),
                delay: delay.map(millis),
            };
            let reply: NackBatchReply = self
                .call(Method::POST, "/nack".into(), Some(&body), Wait::Quick)
                .await?;
            results.extend(reply.results);
        }
        Ok(results)
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: String,
        body: Option<&(impl Serialize + ?Sized)>,
        wait: Wait,
    ) -> Result<T, Error> {
        let verb: &'static str = if method == Method::GET { "GET" } else { "POST" };
        let at = self.current.load(Ordering::Relaxed) % self.bases.len();
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.bases[at]))
            .timeout(match wait {
                Wait::Quick => self.timeout,
                Wait::Bulk => self.bulk_timeout,
                Wait::Poll(t) => t + POLL_MARGIN,
            });
        if let Some(body) = body {
            req = req.json(body);
        }
        if let Some(token) = &self.admin_token {
            req = req.bearer_auth(token);
        }
        let http_error = |source: reqwest::Error| Error::Http {
            method: verb,
            path: path.clone(),
            what: if source.is_timeout() {
                "timed out"
            } else if crate::error::untrusted_certificate(&source) {
                crate::error::UNTRUSTED
            } else if source.is_connect() {
                "cannot connect"
            } else {
                "no answer"
            },
            source,
        };
        let resp = req.send().await.map_err(|e| {
            self.move_on(at);
            http_error(e)
        })?;
        let status = resp.status();
        if matches!(status.as_u16(), 502..=504) {
            self.move_on(at);
        }
        let bytes = resp.bytes().await.map_err(|e| {
            self.move_on(at);
            http_error(e)
        })?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| Error::Decode {
                method: verb,
                path,
                reason: e.to_string(),
            });
        }
        match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(e) => Err(Error::Api {
                method: verb,
                path,
                status: status.as_u16(),
                code: e.error,
                message: e.message,
            }),
            Err(_) => Err(Error::Status {
                method: verb,
                path,
                status: status.as_u16(),
                body: String::from_utf8_lossy(&bytes).chars().take(300).collect(),
            }),
        }
    }
}

/// What [`Client::search`] selects, among a topic's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Search<'a> {
    /// The live message holding this bizKey.
    BizKey(&'a str),
    /// Live messages whose bizKey starts with `prefix`, in one live status
    /// when given.
    BizKeyPrefix {
        prefix: &'a str,
        status: Option<Status>,
    },
    /// Messages in one status.
    Status(Status),
}

/// `value` as a query string value: unreserved characters as they are,
/// every other byte as `%XX`.
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Where [`Client::reschedule_ids`] and [`Client::reschedule_biz_key`]
/// move messages: a new time (a delay from now, a time, or a local
/// wall-clock time in a zone), a new priority, or both.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reschedule {
    delay: Option<Duration>,
    at: Option<SystemTime>,
    /// Wall-clock time, IANA zone, and the rule for a DST gap or fold.
    local: Option<(String, String, Dst)>,
    priority: Option<u8>,
    series: bool,
}

impl Reschedule {
    /// Due `delay` from now.
    pub fn delay(delay: Duration) -> Self {
        Reschedule {
            delay: Some(delay),
            ..Self::default()
        }
    }

    /// Due at `at` (in the past: now).
    pub fn at(at: SystemTime) -> Self {
        Reschedule {
            at: Some(at),
            ..Self::default()
        }
    }

    /// Due at a local wall-clock time (`"2027-03-28T09:00:00"`, no offset)
    /// in an IANA zone (`"Europe/Berlin"`), read by the server; `dst` says
    /// which instant a time the zone's clock jumps over or passes twice
    /// means ([`Dst::Reject`]: refused with `invalid_delay`).
    pub fn local(wall: impl Into<String>, tz: impl Into<String>, dst: Dst) -> Self {
        Reschedule {
            local: Some((wall.into(), tz.into(), dst)),
            ..Self::default()
        }
    }

    /// The time kept, the priority changed.
    pub fn priority_only(priority: u8) -> Self {
        Reschedule {
            priority: Some(priority),
            ..Self::default()
        }
    }

    /// A new priority too.
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = Some(priority);
        self
    }

    /// A recurring message's whole series moves: the occurrences after
    /// the pending one follow from its new time. Only with a new time
    /// ([`Reschedule::delay`], [`Reschedule::at`] or
    /// [`Reschedule::local`]); the server refuses
    /// it with a priority alone.
    pub fn series(mut self) -> Self {
        self.series = true;
        self
    }

    /// The request with where to; the caller names which messages.
    fn body(&self) -> RescheduleRequest {
        RescheduleRequest {
            delay: self.delay.map(millis),
            deliver_at: self.at.map(epoch_ms),
            deliver_at_local: self.local.as_ref().map(|l| l.0.clone()),
            tz: self.local.as_ref().map(|l| l.1.clone()),
            dst: self
                .local
                .as_ref()
                .map(|l| l.2)
                .filter(|d| *d != Dst::Reject),
            priority: self.priority.map(i64::from),
            series: self.series.then_some(true),
            ..RescheduleRequest::default()
        }
    }
}

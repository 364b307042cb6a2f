//! Forwarding: the due messages of a topic are delivered into the message
//! broker a company already runs (RabbitMQ, NATS JetStream) or to an HTTP
//! webhook, instead of waiting for a consumer to long-poll them.
//!
//! A rule is `TOPIC=URL` (`--forward`, repeatable; `DELAYQ_FORWARD`, rules
//! separated by spaces):
//!
//! | URL | delivers to |
//! |---|---|
//! | `amqp://USER:PASS@HOST:PORT/VHOST?exchange=X&routingKey=K` | RabbitMQ, with publisher confirms; default exchange `""` and routing key the topic (the queue named after it) |
//! | `nats://HOST:PORT?subject=S` | NATS JetStream, awaiting the stream's ack; default subject the topic |
//! | `tls://HOST:PORT?subject=S` | the same over TLS |
//! | `amqps://…` | RabbitMQ over TLS, as `amqp://` |
//! | `http://…`, `https://…` | a webhook: `POST` of the message, signed when `--forward-secret` is set |
//!
//! Every node runs a forwarder per rule. It is a consumer of the topic
//! inside delayq: it claims due messages (as `GET /get/{topic}` would,
//! so a message goes to one node), hands each to the broker, and acks it
//! only once the broker or the webhook confirmed it. A failure is a nack:
//! the message's retry policy decides when it is tried again, or, without
//! one, a back-off of 1 s doubling to 5 min; after `maxAttempts` it is
//! `Dead`. While the broker is unreachable the forwarder claims nothing,
//! so an outage costs no attempts. Delivery is at least once: a node that
//! dies between the broker's confirm and the ack delivers the message
//! again after its ttl (NATS drops such a repeat by its `Nats-Msg-Id`).
//!
//! What is sent is the message as a poll shows it (JSON: `id`, `topic`,
//! `body`, `dueTime`, `attempts`, …). A forwarded topic should have no
//! long-polling consumers of its own: they would take messages from it.

mod delivery;
mod nats;
mod rabbitmq;
mod webhook;

pub use delivery::ForwardError;
pub use webhook::signature;

use std::str::FromStr;
use std::time::Duration;

use tokio::sync::watch;

use crate::message::{MessageId, MessageView, Receipt};
use crate::metrics::metrics;
use crate::queue::consume::{self, AckJournal};
use crate::queue::Queue;

/// Messages claimed per round.
const BATCH: usize = 100;
/// How long one claim waits for due messages.
const POLL_SECONDS: u64 = 5;
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// The receipt a view was handed out with, read back.
fn receipt(v: &MessageView) -> Option<Receipt> {
    v.receipt.as_deref().and_then(|r| r.parse().ok())
}

/// The wait before another try of a message without a retry policy:
/// 1 s after the first failure, doubling up to this.
const RETRY_MAX_MS: i64 = 5 * 60 * 1000;

/// Where one topic's messages go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub topic: String,
    pub target: Target,
}

#[derive(Clone, PartialEq, Eq)]
pub enum Target {
    RabbitMq {
        /// The AMQP URI without delayq's own parameters.
        uri: String,
        exchange: String,
        routing_key: String,
    },
    Nats {
        url: String,
        subject: String,
    },
    Webhook {
        url: String,
    },
}

/// Shown with its URL's secrets hidden.
impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("kind", &self.kind())
            .field("to", &redacted(self))
            .finish()
    }
}

impl Target {
    /// The kind of sink, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Target::RabbitMq { .. } => "rabbitmq",
            Target::Nats { .. } => "nats",
            Target::Webhook { .. } => "webhook",
        }
    }
}

impl FromStr for Rule {
    type Err = String;

    /// `TOPIC=URL`.
    fn from_str(s: &str) -> Result<Rule, String> {
        let (topic, url) = s
            .split_once('=')
            .ok_or_else(|| format!("'{s}' is not a forwarding rule: TOPIC=URL"))?;
        if !crate::message::valid_topic(topic) {
            return Err(format!(
                "'{topic}' is not a topic: 1 to 128 characters of A-Z a-z 0-9 . _ : -"
            ));
        }
        let (scheme, _) = url.split_once("://").ok_or_else(|| {
            format!(
                "'{}' is not a URL (amqp(s)://, nats://, tls://, http:// or https://)",
                crate::redact::url(url)
            )
        })?;
        let (base, mut params) = split_query(url);
        let mut take = |name: &str| {
            params
                .iter()
                .position(|(k, _)| k == name)
                .map(|i| params.remove(i).1)
        };
        let target = match scheme {
            "amqp" | "amqps" => {
                let exchange = take("exchange").unwrap_or_default();
                let routing_key = take("routingKey").unwrap_or_else(|| topic.to_string());
                Target::RabbitMq {
                    uri: join_query(&base, &params),
                    exchange,
                    routing_key,
                }
            }
            "nats" | "tls" => {
                let subject = take("subject").unwrap_or_else(|| topic.to_string());
                if let Some((k, _)) = params.first() {
                    return Err(format!(
                        "unknown parameter '{k}' in a {scheme}:// rule (subject)"
                    ));
                }
                Target::Nats { url: base, subject }
            }
            "http" | "https" => Target::Webhook {
                url: url.to_string(),
            },
            other => {
                return Err(format!(
                    "cannot forward to '{other}://': amqp(s)://, nats://, tls:// (NATS over TLS), http:// or https://"
                ))
            }
        };
        Ok(Rule {
            topic: topic.to_string(),
            target,
        })
    }
}

/// `base?a=1&b=2` → (`base`, [(a, 1), (b, 2)]).
fn split_query(url: &str) -> (String, Vec<(String, String)>) {
    match url.split_once('?') {
        None => (url.to_string(), Vec::new()),
        Some((base, query)) => (
            base.to_string(),
            query
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| match p.split_once('=') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => (p.to_string(), String::new()),
                })
                .collect(),
        ),
    }
}

fn join_query(base: &str, params: &[(String, String)]) -> String {
    if params.is_empty() {
        return base.to_string();
    }
    let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{base}?{}", query.join("&"))
}

/// The rule's URL with any password hidden, for logs.
pub fn redacted(target: &Target) -> String {
    let url = match target {
        Target::RabbitMq { uri, .. } => uri,
        Target::Nats { url, .. } => url,
        Target::Webhook { url } => url,
    };
    crate::redact::url(url)
}

/// A connected destination.
enum Sink {
    RabbitMq(rabbitmq::Sink),
    Nats(nats::Sink),
    Webhook(webhook::Sink),
}

impl Sink {
    async fn connect(target: &Target, secret: Option<&str>) -> Result<Sink, ForwardError> {
        Ok(match target {
            Target::RabbitMq {
                uri,
                exchange,
                routing_key,
            } => Sink::RabbitMq(rabbitmq::Sink::connect(uri, exchange, routing_key).await?),
            Target::Nats { url, subject } => Sink::Nats(nats::Sink::connect(url, subject).await?),
            Target::Webhook { url } => Sink::Webhook(webhook::Sink::new(url, secret)?),
        })
    }

    /// Hands every message over and waits for each confirm: one outcome
    /// per message, in order.
    async fn publish(&self, messages: &[(MessageView, Vec<u8>)]) -> Vec<Result<(), ForwardError>> {
        match self {
            Sink::RabbitMq(s) => s.publish(messages).await,
            Sink::Nats(s) => s.publish(messages).await,
            Sink::Webhook(s) => s.publish(messages).await,
        }
    }
}

/// Starts one forwarder per rule; each stops when `stop` turns true,
/// after finishing (and acking) what it holds.
pub fn start(
    queue: Queue,
    rules: &[Rule],
    secret: Option<String>,
    stop: watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    rules
        .iter()
        .map(|rule| {
            tracing::info!(topic = %rule.topic, sink = rule.target.kind(), to = %redacted(&rule.target), "forwarding");
            actix::spawn(run(queue.clone(), rule.clone(), secret.clone(), stop.clone()))
        })
        .collect()
}

/// Waits `d`, or less when told to stop; true when told to stop.
async fn pause(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => *stop.borrow(),
        _ = stop.changed() => true,
    }
}

/// Back-off with jitter: a random wait between half and all of the
/// current step, which doubles up to [`BACKOFF_MAX`].
struct Backoff(Duration);

impl Backoff {
    fn next(&mut self) -> Duration {
        let step = self.0;
        self.0 = (self.0 * 2).min(BACKOFF_MAX);
        step / 2 + step.mul_f64(fastrand::f64() / 2.0)
    }

    fn reset(&mut self) {
        self.0 = BACKOFF_MIN;
    }
}

async fn run(queue: Queue, rule: Rule, secret: Option<String>, mut stop: watch::Receiver<bool>) {
    let (topic, kind) = (rule.topic.as_str(), rule.target.kind());
    let mut sink: Option<Sink> = None;
    let mut backoff = Backoff(BACKOFF_MIN);
    let m = metrics();
    while !*stop.borrow() {
        let Some(s) = &sink else {
            match Sink::connect(&rule.target, secret.as_deref()).await {
                Ok(s) => {
                    tracing::info!(topic, sink = kind, "forwarding: connected");
                    sink = Some(s);
                }
                Err(e) => {
                    tracing::warn!(topic, sink = kind, error = %e, "forwarding: cannot connect; retrying");
                    if pause(backoff.next(), &mut stop).await {
                        return;
                    }
                }
            }
            continue;
        };
        let polled = tokio::select! {
            r = consume::poll(&queue, topic, BATCH, POLL_SECONDS) => r,
            _ = stop.changed() => return,
        };
        let views = match polled {
            // The node is shutting down: nothing more is handed out.
            Ok(v) if v.is_empty() && consume::closing() => {
                let _ = stop.changed().await;
                return;
            }
            Ok(v) if v.is_empty() => continue,
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(topic, error = %e, "forwarding: cannot claim messages; retrying");
                if pause(backoff.next(), &mut stop).await {
                    return;
                }
                continue;
            }
        };
        let messages: Vec<(MessageView, Vec<u8>)> = views
            .into_iter()
            .map(|v| {
                let payload = serde_json::to_vec(&v).expect("a message serializes");
                (v, payload)
            })
            .collect();
        let outcomes = s.publish(&messages).await;
        let mut acks = Vec::new();
        let mut nacks = Vec::new();
        let mut unreachable = 0;
        for ((v, _), outcome) in messages.iter().zip(outcomes) {
            let id = v.message.id;
            match outcome {
                // The delivery's receipt: a forward that outlived its ttl
                // (the message handed out again meanwhile) acks nothing.
                Ok(()) => acks.push(consume::Ack {
                    id,
                    occurrence: v.message.occurrence.map(|o| o.number),
                    receipt: receipt(v),
                }),
                Err(e) => {
                    if matches!(e, ForwardError::Unreachable(_)) {
                        unreachable += 1;
                    }
                    tracing::warn!(topic, sink = kind, id = %id, attempts = v.attempts, error = %e, "forwarding failed; the message is tried again by its retry policy");
                    nacks.push((id, retry_wait(v), receipt(v)));
                }
            }
        }
        m.forwarded(topic, kind, acks.len() as u64, nacks.len() as u64);
        settle(&queue, topic, &acks, &nacks).await;
        if unreachable > 0 {
            // Reconnect, and claim nothing more until the sink answers.
            sink = None;
            if pause(backoff.next(), &mut stop).await {
                return;
            }
        } else {
            backoff.reset();
        }
    }
}

/// The wait a failed message gets: none of ours when it has a retry
/// policy (the policy decides), else 1 s doubling per attempt.
fn retry_wait(v: &MessageView) -> Option<i64> {
    if v.message.retry.is_some() {
        return None;
    }
    let doublings = (v.attempts - 1).clamp(0, 20) as u32;
    Some((1000i64 << doublings).min(RETRY_MAX_MS))
}

/// Acks what the sink confirmed and nacks the rest. A queue error here
/// (Redis unreachable) leaves the messages in flight: they come back after
/// their ttl and are forwarded again.
async fn settle(
    queue: &Queue,
    topic: &str,
    acks: &[consume::Ack],
    nacks: &[(MessageId, Option<i64>, Option<crate::message::Receipt>)],
) {
    if !acks.is_empty() {
        if let Err(e) = consume::ack_deliveries(queue, acks, AckJournal::Queued).await {
            tracing::warn!(topic, error = %e, count = acks.len(), "forwarded messages not acked; they are forwarded again after their ttl");
        }
    }
    if !nacks.is_empty() {
        if let Err(e) = consume::nack(queue, nacks).await {
            tracing::warn!(topic, error = %e, count = nacks.len(), "failed forwards not nacked; they are tried again after their ttl");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        let r: Rule = "orders=amqp://u:p@127.0.0.1:5672/%2f?exchange=ex&routingKey=k&heartbeat=10"
            .parse()
            .unwrap();
        assert_eq!(r.topic, "orders");
        assert_eq!(
            r.target,
            Target::RabbitMq {
                uri: "amqp://u:p@127.0.0.1:5672/%2f?heartbeat=10".into(),
                exchange: "ex".into(),
                routing_key: "k".into()
            }
        );
        let r: Rule = "a.b=amqp://127.0.0.1".parse().unwrap();
        assert_eq!(
            r.target,
            Target::RabbitMq {
                uri: "amqp://127.0.0.1".into(),
                exchange: "".into(),
                routing_key: "a.b".into()
            }
        );
        let r: Rule = "t=nats://127.0.0.1:4222?subject=x.y".parse().unwrap();
        assert_eq!(
            r.target,
            Target::Nats {
                url: "nats://127.0.0.1:4222".into(),
                subject: "x.y".into()
            }
        );
        let r: Rule = "t=https://example.test/hook?a=1".parse().unwrap();
        assert_eq!(
            r.target,
            Target::Webhook {
                url: "https://example.test/hook?a=1".into()
            }
        );
        for bad in [
            "orders",
            "=amqp://h",
            "bad topic=amqp://h",
            "t=ftp://h",
            "t=h:1",
            "t=nats://h?stream=x",
        ] {
            assert!(bad.parse::<Rule>().is_err(), "{bad}");
        }
    }

    #[test]
    fn backoff_stays_within_its_bounds() {
        let mut b = Backoff(BACKOFF_MIN);
        for _ in 0..20 {
            let d = b.next();
            assert!(d >= BACKOFF_MIN / 2 && d <= BACKOFF_MAX, "{d:?}");
        }
        b.reset();
        assert!(b.next() <= BACKOFF_MIN);
    }
}

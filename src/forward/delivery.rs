//! What every sink (RabbitMQ, NATS, the webhook) shares: how long it waits,
//! the id a delivery carries, and how handing a message over fails.

use std::time::Duration;

use crate::message::MessageView;

/// How long connecting to a broker may take.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a broker may take to confirm a message.
pub(super) const CONFIRM_TIMEOUT: Duration = Duration::from_secs(10);

/// The id a broker may deduplicate a delivery by: the message's id, and
/// for a recurring message its occurrence.
pub(super) fn delivery_id(m: &MessageView) -> String {
    match m.message.occurrence {
        Some(o) => format!("{}-{}", m.message.id, o.number),
        None => m.message.id.to_string(),
    }
}

/// Why a message was not forwarded.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// The broker (or the webhook's host) cannot be reached: the sink is
    /// connected anew before anything more is claimed.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The broker or the webhook answered, and refused this message.
    #[error("refused: {0}")]
    Refused(String),
}

/// An error with its causes ("error sending request: … invalid peer
/// certificate: UnknownIssuer").
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

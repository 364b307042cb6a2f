//! NATS JetStream (`async-nats`): a message counts as forwarded once the
//! stream acked it. `Nats-Msg-Id` carries the message's id (and
//! occurrence), so the stream drops a repeat within its duplicate window.

use async_nats::jetstream;
use async_nats::HeaderMap;

use super::delivery::{delivery_id, error_chain, ForwardError, CONFIRM_TIMEOUT, CONNECT_TIMEOUT};
use crate::message::MessageView;

pub struct Sink {
    jetstream: jetstream::Context,
    subject: String,
}

impl Sink {
    pub async fn connect(url: &str, subject: &str) -> Result<Sink, ForwardError> {
        // tls:// turns TLS on (async-nats's scheme); it runs on the same
        // rustls configuration as every other link.
        let client = async_nats::ConnectOptions::new()
            .tls_client_config((*crate::tls::client_config()).clone())
            .connection_timeout(CONNECT_TIMEOUT)
            .connect(url)
            .await
            .map_err(|e| ForwardError::Unreachable(crate::tls::explain(&error_chain(&e))))?;
        let mut jetstream = jetstream::new(client);
        jetstream.set_timeout(CONFIRM_TIMEOUT);
        Ok(Sink {
            jetstream,
            subject: subject.to_string(),
        })
    }

    pub async fn publish(
        &self,
        messages: &[(MessageView, Vec<u8>)],
    ) -> Vec<Result<(), ForwardError>> {
        let mut pending = Vec::with_capacity(messages.len());
        for (view, payload) in messages {
            let mut headers = HeaderMap::new();
            headers.insert("Nats-Msg-Id", delivery_id(view).as_str());
            headers.insert("Content-Type", "application/json");
            pending.push(
                self.jetstream
                    .publish_with_headers(self.subject.clone(), headers, payload.clone().into())
                    .await,
            );
        }
        let mut outcomes = Vec::with_capacity(messages.len());
        for published in pending {
            outcomes.push(match published {
                Err(e) => Err(ForwardError::Unreachable(e.to_string())),
                Ok(ack) => match ack.await {
                    Ok(_) => Ok(()),
                    Err(e) => match e.kind() {
                        jetstream::context::PublishErrorKind::StreamNotFound => {
                            Err(ForwardError::Refused(format!(
                                "no JetStream stream takes subject '{}'",
                                self.subject
                            )))
                        }
                        _ => Err(ForwardError::Unreachable(e.to_string())),
                    },
                },
            });
        }
        outcomes
    }
}

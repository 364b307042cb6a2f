//! RabbitMQ over AMQP 0-9-1 (`lapin`), with publisher confirms: a message
//! counts as forwarded once the broker confirmed it and did not return it
//! as unroutable (every publish is `mandatory`).

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::Confirmation;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use super::delivery::{delivery_id, ForwardError, CONFIRM_TIMEOUT, CONNECT_TIMEOUT};
use crate::message::MessageView;

pub struct Sink {
    _connection: Connection,
    channel: Channel,
    exchange: String,
    routing_key: String,
}

impl Sink {
    pub async fn connect(
        uri: &str,
        exchange: &str,
        routing_key: &str,
    ) -> Result<Sink, ForwardError> {
        let unreachable =
            |e: lapin::Error| ForwardError::Unreachable(crate::tls::explain(&e.to_string()));
        let connection = tokio::time::timeout(CONNECT_TIMEOUT, async {
            Connection::connect_with_config(
                uri,
                ConnectionProperties::default(),
                amqp_config(),
                lapin::runtime::default_runtime()?,
            )
            .await
        })
        .await
        .map_err(|_| ForwardError::Unreachable("connecting timed out".into()))?
        .map_err(unreachable)?;
        let channel = connection.create_channel().await.map_err(unreachable)?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(unreachable)?;
        Ok(Sink {
            _connection: connection,
            channel,
            exchange: exchange.to_string(),
            routing_key: routing_key.to_string(),
        })
    }

    pub async fn publish(
        &self,
        messages: &[(MessageView, Vec<u8>)],
    ) -> Vec<Result<(), ForwardError>> {
        // Every publish first, then the confirms: they arrive pipelined.
        let mut pending = Vec::with_capacity(messages.len());
        for (view, payload) in messages {
            let properties = BasicProperties::default()
                .with_message_id(delivery_id(view).into())
                .with_content_type("application/json".into())
                .with_delivery_mode(2)
                .with_timestamp((view.message.due_time / 1000).max(0) as u64);
            pending.push(
                self.channel
                    .basic_publish(
                        self.exchange.as_str().into(),
                        self.routing_key.as_str().into(),
                        BasicPublishOptions {
                            mandatory: true,
                            ..Default::default()
                        },
                        payload,
                        properties,
                    )
                    .await,
            );
        }
        let mut outcomes = Vec::with_capacity(messages.len());
        for published in pending {
            outcomes.push(match published {
                Err(e) => Err(ForwardError::Unreachable(e.to_string())),
                Ok(confirm) => match tokio::time::timeout(CONFIRM_TIMEOUT, confirm).await {
                    Err(_) => Err(ForwardError::Unreachable(
                        "no confirm from RabbitMQ in time".into(),
                    )),
                    Ok(Err(e)) => Err(ForwardError::Unreachable(e.to_string())),
                    Ok(Ok(Confirmation::Ack(None))) => Ok(()),
                    Ok(Ok(Confirmation::Ack(Some(returned)))) => {
                        Err(ForwardError::Refused(format!(
                            "unroutable: exchange '{}' routes '{}' to no queue ({})",
                            self.exchange, self.routing_key, returned.reply_text
                        )))
                    }
                    Ok(Ok(Confirmation::Nack(_))) => {
                        Err(ForwardError::Refused("RabbitMQ nacked the message".into()))
                    }
                    Ok(Ok(Confirmation::NotRequested)) => {
                        Err(ForwardError::Refused("RabbitMQ did not confirm".into()))
                    }
                },
            });
        }
        outcomes
    }
}

/// RabbitMQ's TLS settings: `--tls-ca-file` on top of the platform's
/// roots, and the client certificate.
fn amqp_config() -> lapin::tcp::OwnedTLSConfig {
    let t = crate::tls::trust();
    lapin::tcp::OwnedTLSConfig {
        identity: t
            .identity
            .as_ref()
            .map(|(pem, key)| lapin::tcp::OwnedIdentity::PKCS8 {
                pem: pem.clone(),
                key: key.clone(),
            }),
        cert_chain: t.ca_pem.clone(),
    }
}

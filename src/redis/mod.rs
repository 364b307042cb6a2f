//! Redis: the schedule. Key names ([`keys`]), the stored record ([`record`]),
//! the atomic steps as Lua ([`scripts`]), the connection, and the checks
//! and repairs of the reconciler and the restore cursor ([`inspect`]), and
//! the journal spill list ([`spill`]).

pub mod inspect;
pub mod keys;
pub mod record;
pub mod reply;
pub mod schedule;
pub mod scripts;
pub mod spill;

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// A client of the Redis at `url`; `rediss://` speaks TLS with the roots
/// and client certificate of [`crate::tls`].
pub fn client(url: &str) -> redis::RedisResult<redis::Client> {
    if url.starts_with("rediss://") {
        redis::Client::build_with_tls(url, crate::tls::redis_certificates())
    } else {
        redis::Client::open(url)
    }
}

/// Opens a multiplexed, self-reconnecting connection. Commands fail after
/// `response_timeout` instead of hanging while Redis is away.
pub async fn connect(url: &str) -> redis::RedisResult<ConnectionManager> {
    let client = client(url)?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(5)))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(500));
    ConnectionManager::new_with_config(client, config).await
}

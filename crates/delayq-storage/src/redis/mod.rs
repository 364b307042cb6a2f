//! Redis: the schedule. Key names ([`keys`]), the stored record ([`record`]),
//! the atomic steps as Lua ([`scripts`]), the connection, and the checks
//! and repairs of the reconciler and the restore cursor ([`inspect`]), and
//! the journal spill list ([`spill`]).

pub mod conn;
pub mod inspect;
pub mod keys;
pub mod record;
pub mod reply;
pub mod schedule;
pub mod scripts;
pub mod spill;

pub use conn::{connect, Conn};

/// A client of the Redis at `url`; `rediss://` speaks TLS with the roots
/// and client certificate of [`crate::tls`].
pub fn client(url: &str) -> redis::RedisResult<redis::Client> {
    if url.starts_with("rediss://") {
        redis::Client::build_with_tls(url, conn::redis_certificates())
    } else {
        redis::Client::open(url)
    }
}

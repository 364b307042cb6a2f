//! Redis: the schedule. Key names ([`keys`]), the stored record ([`record`]),
//! the atomic steps as Lua ([`scripts`]), the connection, and the checks
//! and repairs of the reconciler and the restore cursor ([`inspect`]), and
//! the journal spill list ([`spill`]).

/// A handle on one concern of the schedule: `$name<'a>`, taken with
/// `RedisSchedule::$take()`, reading the schedule's connection, keys and
/// scripts through `Deref`.
macro_rules! schedule_handle {
    ($(#[$doc:meta])* $name:ident, $take:ident, $short:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub struct $name<'a>(&'a $crate::redis::schedule::RedisSchedule);

        impl $crate::redis::schedule::RedisSchedule {
            #[doc = $short]
            pub fn $take(&self) -> $name<'_> {
                $name(self)
            }
        }

        impl std::ops::Deref for $name<'_> {
            type Target = $crate::redis::schedule::RedisSchedule;

            fn deref(&self) -> &Self::Target {
                self.0
            }
        }
    };
}

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

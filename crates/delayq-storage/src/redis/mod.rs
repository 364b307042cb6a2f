//! Redis: the schedule. Key names ([`keys`]), the stored record ([`record`]),
//! the atomic steps as Lua ([`scripts`]), the connection, and the checks
//! and repairs of the reconciler and the restore cursor ([`inspect`]), and
//! the journal spill list ([`spill`]).

pub mod conn;
pub mod forecast;
pub mod inspect;
pub mod keys;
pub mod record;
pub mod reply;
pub mod schedule;
pub mod scripts;
pub mod spill;

pub use conn::{client, connect, Conn};

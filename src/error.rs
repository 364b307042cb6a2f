//! Error policy.
//!
//! - Each layer has one `thiserror` enum: [`JournalError`] (database),
//!   [`RedisError`] (Redis: the schedule, its scripts and the actors that
//!   write to it), `ApiError` (HTTP, in `api::error`, which knows the
//!   others; nothing here knows HTTP). Lower
//!   errors convert into higher ones with `From`; `anyhow` is used only in
//!   `main` and start-up code, where an error ends the process.
//! - `ApiError` is what clients see: every variant maps to one HTTP status
//!   and one stable `error` code, rendered as `{"error": code, "message": text}`.
//!   Bad input is a 4xx and is rejected before anything is written.
//! - An outage (Redis, database) is a 503 with a code naming the service. A
//!   message is accepted (200) only once it is durable in the journal; status
//!   changes already accepted are queued and retried, never dropped.
//! - Messages for operators go to the log with the error's own text; secrets
//!   (database passwords) are redacted before they reach an error.

pub use delayq_storage::error::{JournalError, RedisError};

/// The journal actor did not answer: a journal error to its callers.
pub fn journal_unreachable(e: actix::MailboxError) -> JournalError {
    JournalError::Mailbox(e.to_string())
}

/// The router (the actor in front of Redis) did not answer: a Redis error
/// to its callers.
pub fn router_unreachable(e: actix::MailboxError) -> RedisError {
    RedisError::Mailbox(e.to_string())
}

/// The stable `error` codes of the API, what a client branches on, and
/// the error document: shared with the Rust client through `delayq-proto`,
/// so a code is never spelled two ways.
pub use delayq_proto::{ErrorBody, ErrorCode};

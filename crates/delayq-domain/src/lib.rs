//! delayq's domain: the message and the rules it lives by, with no HTTP,
//! Redis or SQL in sight (this crate's dependencies say so).
//!
//! - [`message`]: a producer's input checked into a [`message::Draft`],
//!   the receipt naming one delivery, a recurring message's next
//!   occurrence;
//! - [`input`]: the limits and whole-number rules every field passes, and
//!   [`input::Invalid`], a refusal with its code;
//! - [`ids`]: Snowflake ids, handed out only under a confirmed worker
//!   lease;
//! - [`retry`]: what a failed delivery leads to; [`repeat`]: when a
//!   recurring message's occurrences are due;
//! - [`limit`]: a topic's rate limit and concurrency cap, and how a cap is
//!   shared among shards;
//! - [`redact`]: the secrets of URLs hidden before they reach a log, an
//!   error or a page;
//! - [`faults`]: named fault points a test turns on to plant a bug or a
//!   delay (off unless `DELAYQ_FAULTS` names them);
//! - [`clock`]: the one clock every due time and deadline is measured on
//!   (Redis's, as this process estimates it from the readings the storage
//!   layer hands it).
//!
//! The shapes these travel in over HTTP ([`delayq_proto::Message`],
//! [`delayq_proto::Status`], [`delayq_proto::MessageId`]…) are the wire
//! crate's, re-exported where the rules use them.

pub mod clock;
pub mod faults;
pub mod ids;
pub mod input;
pub mod limit;
pub mod local;
pub mod message;
pub mod redact;
pub mod repeat;
pub mod retry;

//! Start-up and shutdown of a node, and the command-line restore.
//!
//! [`serve`] runs a node, in named steps from start-up to shutdown;
//! [`duties`] are what a serving node does in the background; [`spill`]
//! keeps in Redis the status changes the journal did not take at shutdown;
//! [`tools`] are the command-line restore, reshard and reconcile; [`open`]
//! opens the journal and Redis for both.

mod duties;
mod https;
mod open;
mod serve;
mod spill;
mod tools;

pub use serve::serve;
pub use tools::{reconcile, reshard, restore};

//! Waiting, with a deadline, for something the server does in its own time.
//!
//! [`wait_until`] calls a check again and again until it gives a value, and
//! panics when the time is up. The check answers with an [`Option`] (`None`:
//! not yet) or a [`Result`] whose error says what it saw instead; that last
//! error goes into the panic message, so a failure says how far it got.

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

/// How long [`wait_until`] and [`wait_until_blocking`] sleep between checks.
pub const POLL_EVERY: Duration = Duration::from_millis(50);

/// What a check answers: a value (done) or not yet, perhaps with what it
/// saw instead.
pub trait Check {
    type Value;
    /// `Ok(value)` when done; `Err(what was seen)` when not yet.
    fn done(self) -> Result<Self::Value, Option<String>>;
}

impl<T> Check for Option<T> {
    type Value = T;
    fn done(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: Display> Check for Result<T, E> {
    type Value = T;
    fn done(self) -> Result<T, Option<String>> {
        self.map_err(|e| Some(e.to_string()))
    }
}

#[track_caller]
fn gave_up(what: &str, waited: Duration, within: Duration, last: Option<String>) -> ! {
    match last {
        Some(last) => panic!("waited {waited:?} (of {within:?}) for {what}; last seen: {last}"),
        None => panic!("waited {waited:?} (of {within:?}) for {what}"),
    }
}

/// Runs `check` every [`POLL_EVERY`] until it gives a value, and returns
/// that value. Panics with `what`, the time waited and what the check last
/// saw when `within` passes first.
pub async fn wait_until<C, F, Fut>(what: &str, within: Duration, check: F) -> C::Value
where
    C: Check,
    F: FnMut() -> Fut,
    Fut: Future<Output = C>,
{
    wait_every(what, within, POLL_EVERY, check).await
}

/// [`wait_until`], checking every `every` instead (for checks that cost
/// the server something, or watch a process that takes seconds).
pub async fn wait_every<C, F, Fut>(
    what: &str,
    within: Duration,
    every: Duration,
    mut check: F,
) -> C::Value
where
    C: Check,
    F: FnMut() -> Fut,
    Fut: Future<Output = C>,
{
    let start = Instant::now();
    loop {
        let last = match check().await.done() {
            Ok(value) => return value,
            Err(last) => last,
        };
        let waited = start.elapsed();
        if waited >= within {
            gave_up(what, waited, within, last);
        }
        tokio::time::sleep(every.min(within - waited)).await;
    }
}

/// [`wait_until`] for code outside the runtime: sleeps the thread between
/// checks.
pub fn wait_until_blocking<C: Check>(
    what: &str,
    within: Duration,
    check: impl FnMut() -> C,
) -> C::Value {
    wait_every_blocking(what, within, POLL_EVERY, check)
}

/// [`wait_every`] for code outside the runtime.
pub fn wait_every_blocking<C: Check>(
    what: &str,
    within: Duration,
    every: Duration,
    mut check: impl FnMut() -> C,
) -> C::Value {
    let start = Instant::now();
    loop {
        let last = match check().done() {
            Ok(value) => return value,
            Err(last) => last,
        };
        let waited = start.elapsed();
        if waited >= within {
            gave_up(what, waited, within, last);
        }
        std::thread::sleep(every.min(within - waited));
    }
}

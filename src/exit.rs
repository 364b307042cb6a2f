//! How the process ends.
//!
//! libpq and the MySQL client link OpenSSL, whose exit handler (run by the
//! C library's `exit`, as a return from `main` or [`std::process::exit`]
//! does) frees OpenSSL's tables. The journal pools make connections on
//! threads of their own, which nothing joins: one still opening a
//! connection when that handler runs crashes the process with SIGSEGV,
//! and a clean stop on PostgreSQL over TLS exited with signal 11 about one
//! time in ten. So delayq ends the process with `_exit`, which runs no
//! exit handler, once what it must finish has finished (the journal
//! flushed, the leases released) and stdout and stderr are flushed.

use std::io::Write;

/// Flushes stdout and stderr and ends the process with `code`, without
/// the C library's exit handlers.
pub fn now(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: `_exit` takes no pointer and never returns; what Rust would
    // do at exit (flushing stdout) is done above.
    unsafe { libc::_exit(code) }
}

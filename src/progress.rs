//! How the command-line tools (`delayq restore`, `delayq reconcile`) show
//! their progress on stderr. On a terminal: a bar with the rows done, the
//! rate and the time left (indicatif), its total counted before the run
//! starts. Anywhere else (CI, a pipe, a log file): one plain line per page,
//! for scripts and logs to keep. Either way stdout carries only the
//! report.
//!
//! Log lines written while a bar is shown go above it: the tools log
//! through [`stderr`], which sets the bar aside for each line.

use std::io::{self, IsTerminal, Write};
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// The bar on the screen, if any, for [`stderr`] to write around.
static SHOWN: Mutex<Option<ProgressBar>> = Mutex::new(None);

const TICK: Duration = Duration::from_millis(200);

/// Whether a bar is shown: stderr is a terminal.
pub fn wanted() -> bool {
    io::stderr().is_terminal()
}

/// A tool run's progress: a bar, or plain lines.
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar over `total` rows named `what` when [`wanted`] (None when the
    /// total is unknown: rate and count only), else plain lines.
    pub fn start(what: &str, total: Option<u64>) -> Progress {
        if !wanted() {
            return Progress { bar: None };
        }
        let (bar, template) = match total {
            Some(n) => (
                ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr()),
                "{spinner} {prefix} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} rows, \
                 {rate}, ETA {eta}\n  {msg}",
            ),
            None => (
                ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
                "{spinner} {prefix} [{elapsed_precise}] {human_pos} rows, {rate}\n  {msg}",
            ),
        };
        let style = ProgressStyle::with_template(template)
            .expect("a valid template")
            .with_key("rate", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0} rows/s", s.per_sec());
            })
            .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(what.to_string());
        bar.enable_steady_tick(TICK);
        *SHOWN.lock().unwrap_or_else(|p| p.into_inner()) = Some(bar.clone());
        Progress { bar: Some(bar) }
    }

    /// After a page: `done` rows so far, `counts` under the bar, or the
    /// plain `line` when there is no bar.
    pub fn update(
        &self,
        done: u64,
        counts: impl FnOnce() -> String,
        line: impl FnOnce() -> String,
    ) {
        match &self.bar {
            Some(bar) => {
                // Rows added while it runs are scanned too.
                if bar.length().is_some_and(|n| done > n) {
                    bar.set_length(done);
                }
                bar.set_position(done);
                bar.set_message(counts());
            }
            None => eprintln!("{}", line()),
        }
    }
}

impl Drop for Progress {
    /// Leaves the bar where it stopped, done or not.
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            *SHOWN.lock().unwrap_or_else(|p| p.into_inner()) = None;
            bar.abandon();
        }
    }
}

/// Stderr for log lines, written above the bar while one is shown.
pub struct Stderr;

/// The log writer of the command line (`tracing_subscriber`'s
/// `with_writer(delayq::progress::stderr)`).
pub fn stderr() -> Stderr {
    Stderr
}

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let shown = SHOWN.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match shown {
            Some(bar) => bar.suspend(|| io::stderr().write_all(buf))?,
            None => io::stderr().write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

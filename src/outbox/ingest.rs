//! The ingester: two threads per node with `--outbox-url`, each holding its own
//! connection to the application's database, that takes committed rows,
//! has the node push them, deletes them and commits (see [`super`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::table::{Outbox, Row};
use crate::error::JournalError;
use crate::journal::store::OutboxRows;
use crate::message::{now_ms, parse_draft, Draft, OnDuplicate};
use crate::queue::{Accepted, Queue, QueueError};

/// Passes run at once, each on a thread and a connection of its own:
/// while one waits for its push, another takes and deletes its rows
/// (`SKIP LOCKED` gives each other rows).
const PASSES: usize = 2;
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// How often a PostgreSQL connection is looked at for notifications while
/// the ingester waits: a look reads the socket, it sends nothing.
const NOTICE_EVERY: Duration = Duration::from_millis(3);

/// `--outbox-*`.
#[derive(Debug, Clone)]
pub struct Settings {
    pub url: String,
    pub table: String,
    pub poll: Duration,
    pub batch: u32,
    /// `--max-body-bytes`: a row's body is held to what a push is.
    pub max_body: usize,
}

/// What a pass asks of the node's runtime.
enum Ask {
    /// Push these drafts, one outbox row each.
    Push {
        drafts: Vec<Draft>,
        rows: OutboxRows,
        reply: std::sync::mpsc::Sender<Result<Vec<Accepted>, QueueError>>,
    },
    /// Forget the records of rows whose delete committed.
    Forget { source: String, rows: Vec<i64> },
}

/// How long a pass waits for its push before it rolls back (the push may
/// still commit: the next pass then finds its rows recorded).
const PUSH_WAIT: Duration = Duration::from_secs(30);
/// The longest `error` written into a refused row.
const REASON_MAX: usize = 1_000;

/// The running ingester.
pub struct Ingester {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Starts the ingester: its thread, and the task on this node's runtime
/// that pushes what the thread takes.
pub fn start(queue: Queue, settings: Settings) -> Ingester {
    let (tx, mut rx) = mpsc::unbounded_channel::<Ask>();
    actix::spawn(async move {
        while let Some(ask) = rx.recv().await {
            match ask {
                Ask::Push {
                    drafts,
                    rows,
                    reply,
                } => {
                    let _ = reply.send(queue.push_outbox(drafts, rows).await);
                }
                Ask::Forget { source, rows } => {
                    // Left for retention when it fails: a record of a row
                    // no longer in the outbox is never read.
                    if let Err(e) = queue.forget_outbox_rows(source, rows).await {
                        tracing::debug!(error = %e, "outbox: records of deleted rows kept for now");
                    }
                }
            }
        }
    });
    let stop = Arc::new(AtomicBool::new(false));
    let threads = (0..PASSES)
        .map(|i| {
            let (settings, tx, stopping) = (settings.clone(), tx.clone(), stop.clone());
            std::thread::Builder::new()
                .name(format!("outbox-{i}"))
                .spawn(move || run(&settings, &tx, &stopping))
                .expect("a thread for the outbox")
        })
        .collect();
    Ingester { stop, threads }
}

impl Ingester {
    /// Lets the pass under way finish (its rows pushed and deleted, or
    /// rolled back), then stops.
    pub async fn stop(self) {
        self.stop.store(true, Ordering::Release);
        let deadline = Instant::now() + Duration::from_secs(30);
        let finished = |t: &[std::thread::JoinHandle<()>]| t.iter().all(|t| t.is_finished());
        while !finished(&self.threads) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if !finished(&self.threads) {
            tracing::warn!("the outbox pass under way did not end in 30 s; its rows stay in the outbox (the transaction rolls back)");
        }
    }
}

enum PassError {
    /// The application's database: the connection is made again.
    Database(anyhow::Error),
    /// The push (journal, Redis, no worker id): the rows wait.
    Push(String),
}

impl From<anyhow::Error> for PassError {
    fn from(e: anyhow::Error) -> Self {
        PassError::Database(e)
    }
}

fn run(s: &Settings, pushes: &mpsc::UnboundedSender<Ask>, stop: &AtomicBool) {
    let mut backoff = BACKOFF_MIN;
    let mut outbox: Option<Outbox> = None;
    while !stop.load(Ordering::Acquire) {
        let ob = match &mut outbox {
            Some(ob) => ob,
            None => match Outbox::connect(&s.url, &s.table) {
                Ok(ob) => {
                    tracing::info!(table = %s.table, source = %ob.source, "pushing the rows of the outbox as they are committed");
                    outbox.insert(ob)
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "outbox: cannot read the table; trying again");
                    pause(stop, backoff);
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    continue;
                }
            },
        };
        match pass(ob, s, pushes) {
            Ok(taken) => {
                backoff = BACKOFF_MIN;
                if taken < s.batch as usize {
                    wait(ob, s.poll, stop);
                }
            }
            Err(PassError::Database(e)) => {
                crate::metrics::metrics().outbox_failed.inc();
                tracing::warn!(error = %format!("{e:#}"), retry_in = ?backoff, "outbox: the application's database failed mid-pass; its rows stay (rolled back), reconnecting");
                outbox = None;
                pause(stop, backoff);
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
            Err(PassError::Push(e)) => {
                crate::metrics::metrics().outbox_failed.inc();
                tracing::warn!(error = %e, retry_in = ?backoff, "outbox: rows not pushed; they stay in the outbox and are tried again");
                if ob.rollback().is_err() {
                    outbox = None;
                }
                pause(stop, backoff);
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

/// One transaction: take rows, push them, delete them. Returns how many
/// rows it took.
fn pass(
    ob: &mut Outbox,
    s: &Settings,
    pushes: &mpsc::UnboundedSender<Ask>,
) -> Result<usize, PassError> {
    let t0 = Instant::now();
    ob.begin()?;
    let rows = ob.take(s.batch)?;
    let t_take = t0.elapsed();
    let now = now_ms();
    // While passes fail, the rows they take keep getting older: shown.
    let oldest = rows
        .iter()
        .map(|r| r.created_at)
        .min()
        .map_or(0, |c| now - c);
    crate::metrics::metrics()
        .outbox_oldest
        .set(oldest.max(0) as f64 / 1000.0);
    if rows.is_empty() {
        ob.commit()?;
        return Ok(0);
    }
    let mut good = Vec::new();
    let mut refused = 0;
    for row in &rows {
        match draft_of(row, s.max_body, now) {
            Ok(d) => good.push((d, row.id, row.created_at)),
            Err(why) => {
                refuse(ob, s, row.id, &why)?;
                refused += 1;
            }
        }
    }
    let pushed = match push(ob, pushes, &good) {
        Ok(()) => good,
        // A row the journal refuses (a value its database will not
        // store) would fail every batch it is in: each row is pushed
        // alone, and those refused are marked.
        Err(Refused(e)) if good.len() > 1 => {
            tracing::warn!(error = %e, rows = good.len(), "outbox: the journal refused a row of the batch; pushing the rows one by one");
            let mut kept = Vec::new();
            for one in good {
                match push(ob, pushes, std::slice::from_ref(&one)) {
                    Ok(()) => kept.push(one),
                    Err(Refused(e)) => {
                        refuse(ob, s, one.1, &format!("journal_refused: {e}"))?;
                        refused += 1;
                    }
                    Err(Failed(e)) => return Err(e),
                }
            }
            kept
        }
        Err(Refused(e)) => {
            let (_, id, _) = good[0];
            refuse(ob, s, id, &format!("journal_refused: {e}"))?;
            refused += 1;
            Vec::new()
        }
        Err(Failed(e)) => return Err(e),
    };
    let ids: Vec<i64> = pushed.iter().map(|(_, id, _)| *id).collect();
    if !ids.is_empty() {
        tracing::debug!(rows = ids.len(), ?t_take, pushed_at = ?t0.elapsed(), "outbox pass: pushed");
        if crate::faults::on("outbox_stop_after_push") {
            tracing::error!(
                "fault outbox_stop_after_push: killing this process between the push and the delete"
            );
            // SAFETY: kill(2) of this process with SIGKILL, as kill -9
            // sends it: no core file, no clean-up.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
        ob.delete(&ids)
            .map_err(|e| e.context("deleting the rows pushed"))?;
    }
    ob.commit().map_err(|e| e.context("committing the pass"))?;
    tracing::debug!(rows = rows.len(), took = ?t0.elapsed(), "outbox pass: deleted and committed");
    let m = crate::metrics::metrics();
    m.outbox_pushed.inc_by(ids.len() as u64);
    m.outbox_refused.inc_by(refused);
    let done = now_ms();
    for (_, _, created) in &pushed {
        m.outbox_lag
            .observe((done - created).max(0) as f64 / 1000.0);
    }
    if !ids.is_empty() {
        let _ = pushes.send(Ask::Forget {
            source: ob.source.clone(),
            rows: ids,
        });
    }
    Ok(rows.len())
}

/// Why a push of rows did not happen.
enum PushFailed {
    /// The journal's database refused a row (a value it will not store).
    Refused(String),
    /// Anything else: the pass rolls back.
    Failed(PassError),
}
use PushFailed::{Failed, Refused};

/// Has the node push `rows` (draft, row id, created_at) and waits for it:
/// durable in the journal with the rows' records, and scheduled in Redis.
fn push(
    ob: &Outbox,
    pushes: &mpsc::UnboundedSender<Ask>,
    rows: &[(Draft, i64, i64)],
) -> Result<(), PushFailed> {
    if rows.is_empty() {
        return Ok(());
    }
    let (reply, answer) = std::sync::mpsc::channel();
    let ask = Ask::Push {
        drafts: rows.iter().map(|(d, _, _)| d.clone()).collect(),
        rows: OutboxRows {
            source: ob.source.clone(),
            rows: rows.iter().map(|(_, id, _)| *id).collect(),
            created: rows.iter().map(|(_, _, c)| *c).collect(),
            again: false,
        },
        reply,
    };
    let failed = |e: String| Failed(PassError::Push(e));
    pushes
        .send(ask)
        .map_err(|_| failed("the node is stopping".into()))?;
    match answer.recv_timeout(PUSH_WAIT) {
        Ok(Ok(_)) => Ok(()),
        // Refused by a journal that takes other writes (see
        // Journal::insert_outbox); one that takes none is an outage.
        Ok(Err(QueueError::Journal(JournalError::Refused(e)))) => Err(Refused(e)),
        // NotScheduled (journaled, Redis out) too: the rows stay, and the
        // next pass schedules their messages when it finds them recorded.
        Ok(Err(e)) => Err(failed(e.to_string())),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(failed(format!(
            "no answer from the push within {PUSH_WAIT:?}"
        ))),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            Err(failed("the node is stopping".into()))
        }
    }
}

/// Marks a row refused, with why (control characters shown escaped, at
/// most [`REASON_MAX`] bytes, so that the database takes it).
fn refuse(ob: &mut Outbox, s: &Settings, id: i64, why: &str) -> Result<(), PassError> {
    let mut reason = String::with_capacity(why.len());
    for c in why.chars() {
        if c.is_control() {
            reason.extend(c.escape_default());
        } else {
            reason.push(c);
        }
    }
    if reason.len() > REASON_MAX {
        let mut cut = REASON_MAX;
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        reason.truncate(cut);
        reason.push('…');
    }
    tracing::warn!(row = id, table = %s.table, why = %reason, "outbox row refused: its error column says why");
    ob.refuse(id, &reason)
        .map_err(|e| PassError::Database(e.context(format!("marking row {id} refused"))))
}

/// A row's message, or why it cannot be pushed (`code: message`, as
/// `POST /push` would answer it).
fn draft_of(row: &Row, max_body: usize, now: i64) -> Result<Draft, String> {
    let value: serde_json::Value = serde_json::from_str(&row.message)
        .map_err(|e| format!("invalid_json: the message is not JSON: {e}"))?;
    let draft =
        parse_draft(&value, max_body, now).map_err(|e| format!("{}: {}", e.code, e.message))?;
    if draft.on_duplicate != OnDuplicate::Keep {
        return Err("invalid_field: onDuplicate \"replace\" and \"extend\" are not taken from an outbox (a row is pushed as a new message, or keeps the live one of its bizKey)".into());
    }
    Ok(draft)
}

/// Waits up to `poll`, or until a commit of new rows is announced, or the
/// node stops.
fn wait(ob: &mut Outbox, poll: Duration, stop: &AtomicBool) {
    let until = Instant::now() + poll;
    loop {
        match ob.notified() {
            Ok(true) => return,
            Ok(false) => {}
            // The next pass meets the broken connection.
            Err(_) => return,
        }
        let now = Instant::now();
        if now >= until || stop.load(Ordering::Acquire) {
            return;
        }
        let step = if ob.notifies() {
            NOTICE_EVERY
        } else {
            Duration::from_millis(50)
        };
        std::thread::sleep(step.min(until - now));
    }
}

fn pause(stop: &AtomicBool, d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until && !stop.load(Ordering::Acquire) {
        std::thread::sleep(
            Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())),
        );
    }
}

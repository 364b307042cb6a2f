//! The ingester: one thread per node with `--outbox-url`, holding its own
//! connection to the application's database, that takes committed rows,
//! has the node push them, deletes them and commits (see [`super`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::table::{Outbox, Row};
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

struct PushAsk {
    drafts: Vec<Draft>,
    rows: OutboxRows,
    reply: oneshot::Sender<Result<Vec<Accepted>, QueueError>>,
}

/// The running ingester.
pub struct Ingester {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Starts the ingester: its thread, and the task on this node's runtime
/// that pushes what the thread takes.
pub fn start(queue: Queue, settings: Settings) -> Ingester {
    let (tx, mut rx) = mpsc::unbounded_channel::<PushAsk>();
    actix::spawn(async move {
        while let Some(ask) = rx.recv().await {
            let result = queue.push_outbox(ask.drafts, ask.rows).await;
            let _ = ask.reply.send(result);
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

fn run(s: &Settings, pushes: &mpsc::UnboundedSender<PushAsk>, stop: &AtomicBool) {
    let mut backoff = BACKOFF_MIN;
    let mut outbox: Option<Outbox> = None;
    while !stop.load(Ordering::Acquire) {
        let ob = match &mut outbox {
            Some(ob) => ob,
            None => match Outbox::connect(&s.url, &s.table) {
                Ok(ob) => {
                    tracing::info!(table = %s.table, source = %ob.source, "pushing the rows of the outbox as they are committed");
                    backoff = BACKOFF_MIN;
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
                tracing::warn!(error = %format!("{e:#}"), "outbox: the database failed mid-pass; its rows stay (rolled back), reconnecting");
                outbox = None;
                pause(stop, backoff);
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
            Err(PassError::Push(e)) => {
                tracing::warn!(error = %e, "outbox: rows not pushed; they stay in the outbox and are tried again");
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
    pushes: &mpsc::UnboundedSender<PushAsk>,
) -> Result<usize, PassError> {
    let t0 = Instant::now();
    ob.begin()?;
    let rows = ob.take(s.batch)?;
    let t_take = t0.elapsed();
    if rows.is_empty() {
        ob.commit()?;
        return Ok(0);
    }
    let now = now_ms();
    let (mut drafts, mut ids, mut created) = (Vec::new(), Vec::new(), Vec::new());
    let mut refused = 0;
    for row in &rows {
        match draft_of(row, s.max_body, now) {
            Ok(d) => {
                drafts.push(d);
                ids.push(row.id);
                created.push(row.created_at);
            }
            Err(why) => {
                tracing::warn!(row = row.id, table = %s.table, why, "outbox row refused: its error column says why");
                ob.refuse(row.id, &why)?;
                refused += 1;
            }
        }
    }
    if !drafts.is_empty() {
        let (reply, answer) = oneshot::channel();
        let rows = OutboxRows {
            source: ob.source.clone(),
            rows: ids.clone(),
        };
        let stopping = || PassError::Push("the node is stopping".into());
        pushes
            .send(PushAsk {
                drafts,
                rows,
                reply,
            })
            .map_err(|_| stopping())?;
        match answer.blocking_recv().map_err(|_| stopping())? {
            Ok(_) => {}
            // Durable in the journal with the rows' record: scheduled by
            // the reconciler or the next restore.
            Err(QueueError::NotScheduled(e)) => {
                tracing::warn!(error = %e, "outbox rows pushed into the journal, not yet into Redis");
            }
            Err(e) => return Err(PassError::Push(e.to_string())),
        }
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
        ob.delete(&ids)?;
    }
    ob.commit()?;
    tracing::debug!(rows = rows.len(), took = ?t0.elapsed(), "outbox pass: deleted and committed");
    let m = crate::metrics::metrics();
    m.outbox_pushed.inc_by(ids.len() as u64);
    m.outbox_refused.inc_by(refused);
    let done = now_ms();
    for c in created {
        m.outbox_lag.observe((done - c).max(0) as f64 / 1000.0);
    }
    Ok(rows.len())
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

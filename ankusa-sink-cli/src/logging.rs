//! Where the process's log lines go: stderr, without ever blocking, panicking or stalling
//! delivery.
//!
//! `tracing_subscriber`'s writer would write stderr on the delivering thread (a stderr pipe
//! nobody reads blocks the one runtime thread) and, when a write fails, report it with
//! `eprintln!`, which panics when stderr cannot be written: an attempt task died mid-way
//! and the run hung. Here each line is handed to a thread of its own through a bounded
//! queue: a line the queue has no room for, or that stderr refuses, is dropped and counted
//! in [`WRITE_ERRORS`]. The log sink's own line is the exception: it is the sink's
//! delivery, written on the delivering thread so a failed write fails the delivery
//! ([`ankusa_sink_log::ReportingWriter`]).

use std::io::Write as _;
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::writer::EitherWriter;

/// Log lines dropped: stderr refused them (closed, full device) or they came faster than
/// stderr took them. `ankusa_log_write_errors_total` on `/metrics`.
pub(crate) const WRITE_ERRORS: &str = "ankusa_log_write_errors_total";

/// Lines queued for stderr, at most; past it a line is dropped (and counted).
const QUEUE_LINES: usize = 4096;

enum Msg {
    Line(Vec<u8>),
    /// Answer once every line queued before it was written (or dropped).
    Flush(std::sync::mpsc::Sender<()>),
}

static QUEUE: OnceLock<SyncSender<Msg>> = OnceLock::new();

/// The writer of every log line (see the module's text).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stderr;

impl Stderr {
    /// Start the stderr thread; `None` if it cannot be started (then lines are dropped).
    pub(crate) fn start() -> Self {
        let (tx, rx) = sync_channel(QUEUE_LINES);
        let started = std::thread::Builder::new()
            .name("ankusa-log".into())
            .spawn(move || write_lines(&rx))
            .is_ok();
        if started {
            let _ = QUEUE.set(tx);
        }
        Stderr
    }
}

fn dropped() {
    metrics::counter!(WRITE_ERRORS).increment(1);
}

fn write_lines(rx: &Receiver<Msg>) {
    let mut err = std::io::stderr();
    for msg in rx {
        match msg {
            Msg::Line(line) => {
                if err.write_all(&line).and_then(|()| err.flush()).is_err() {
                    dropped();
                }
            }
            Msg::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// Make the counter show on `/metrics` from the start (at 0): call once the recorder is
/// installed.
pub(crate) fn register_metrics() {
    metrics::counter!(WRITE_ERRORS).increment(0);
}

/// Wait (at most `timeout`) until the lines logged so far are written: at exit, so the
/// last lines are not lost, yet a stderr nobody reads cannot hold the process.
pub(crate) fn flush(timeout: Duration) {
    let Some(tx) = QUEUE.get() else { return };
    let deadline = Instant::now() + timeout;
    let (done, wait) = std::sync::mpsc::channel();
    let mut msg = Msg::Flush(done);
    loop {
        match tx.try_send(msg) {
            Ok(()) => break,
            Err(TrySendError::Full(m)) if Instant::now() < deadline => {
                msg = m;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => return,
        }
    }
    let _ = wait.recv_timeout(deadline.saturating_duration_since(Instant::now()));
}

/// One log line on its way to the queue: sent whole when the formatter is done with it.
#[derive(Debug)]
pub(crate) struct Line(Vec<u8>);

impl std::io::Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let line = std::mem::take(&mut self.0);
        match QUEUE.get() {
            Some(tx) if tx.try_send(Msg::Line(line)).is_ok() => {}
            _ => dropped(),
        }
    }
}

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = EitherWriter<Line, ankusa_sink_log::ReportingWriter<std::io::Stderr>>;

    fn make_writer(&'a self) -> Self::Writer {
        EitherWriter::A(Line(Vec::new()))
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        if meta.target() == ankusa_sink_log::TARGET {
            EitherWriter::B(ankusa_sink_log::ReportingWriter(std::io::stderr()))
        } else {
            self.make_writer()
        }
    }
}

/// Whether a report limited by `last` may be logged now, at most once per `every`; when it
/// may, `last` becomes now. For errors that repeat on every record or batch (a full disk, a
/// collector that is down), whose log may itself be what is failing.
pub(crate) fn due(last: &std::sync::Mutex<Option<Instant>>, every: Duration) -> bool {
    let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
    let due = last.is_none_or(|t| t.elapsed() >= every);
    if due {
        *last = Some(Instant::now());
    }
    due
}

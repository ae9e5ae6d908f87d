//! SIGINT and SIGTERM for one run: while it runs, each stops it (a [`Stop::Signal`]);
//! once it returns, they act as they did before it started. `tokio::signal` cannot give
//! that: its handlers stay for the life of the process, so after `run_with` returned, a
//! host that never handled these signals could no longer be interrupted (each was caught
//! and dropped).
//!
//! The handlers are `signal-hook` actions (removable, unlike tokio's): a pipe per signal,
//! read on the runtime. A process that did not catch a signal before its first run (Linux:
//! `SigCgt` in `/proc/self/status`; elsewhere it is taken as caught) gets the default
//! action back, emulated by a `signal-hook` action armed whenever no run watches: the
//! process ends by the signal as it would have. A host that catches it (its own handler,
//! `tokio::signal`) keeps its handling, untouched.

use crate::hooks::Stop;
use signal_hook::SigId;
use signal_hook::consts::{SIGINT, SIGTERM};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

/// The signals a run watches.
const SIGNALS: [i32; 2] = [SIGINT, SIGTERM];

/// The default actions given back between runs: one flag per signal the process did not
/// catch before its first run, and how many runs watch now.
struct Defaults {
    armed: Vec<Arc<AtomicBool>>,
    runs: usize,
}

static DEFAULTS: Mutex<Option<Defaults>> = Mutex::new(None);

/// A run's watch on SIGINT and SIGTERM; dropping it removes its handlers.
pub(crate) struct SignalWatch {
    ids: Vec<SigId>,
    reader: Option<tokio::task::JoinHandle<()>>,
}

/// Watch SIGINT and SIGTERM for a run (on the runtime): the first one received is sent as
/// the run's stop. A signal whose handler cannot be installed is not watched (as before:
/// the run then cannot be stopped by it, nor is it stopped by a failure to watch).
pub(crate) fn watch() -> (Arc<watch::Sender<Option<Stop>>>, SignalWatch) {
    let (tx, _) = watch::channel(None);
    let tx = Arc::new(tx);
    begin_run();
    let mut ids = Vec::new();
    let mut readers = Vec::new();
    for sig in SIGNALS {
        let Ok((read, write)) = StdUnixStream::pair() else {
            continue;
        };
        // The write end belongs to the action: closed when it is removed.
        let Ok(id) = signal_hook::low_level::pipe::register(sig, write) else {
            continue;
        };
        ids.push(id);
        if read.set_nonblocking(true).is_ok()
            && let Ok(read) = tokio::net::UnixStream::from_std(read)
        {
            readers.push((sig, read));
        }
    }
    let sender = tx.clone();
    // `select_all` of nothing panics: with no handler installed there is nothing to read.
    let reader = (!readers.is_empty()).then(|| {
        tokio::spawn(async move {
            let first =
                futures_util::future::select_all(readers.into_iter().map(|(sig, mut r)| {
                    Box::pin(async move {
                        let mut byte = [0u8; 1];
                        match r.read(&mut byte).await {
                            Ok(n) if n > 0 => sig,
                            // Closed or failed: this signal is not watched any more.
                            _ => std::future::pending().await,
                        }
                    })
                }));
            let (sig, _, _) = first.await;
            sender.send_replace(Some(Stop::Signal(sig)));
        })
    });
    (tx, SignalWatch { ids, reader })
}

impl Drop for SignalWatch {
    fn drop(&mut self) {
        // The default back first: a signal in between ends the process, as it would once
        // the run is over, rather than being dropped.
        end_run();
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
        if let Some(r) = self.reader.take() {
            r.abort();
        }
    }
}

fn defaults() -> std::sync::MutexGuard<'static, Option<Defaults>> {
    DEFAULTS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A run starts: the first in the process registers the emulated default of each signal
/// the process did not catch (disarmed while any run watches).
fn begin_run() {
    let mut d = defaults();
    let d = d.get_or_insert_with(|| {
        let caught = caught_signals();
        let armed = SIGNALS
            .iter()
            .filter(|&&sig| caught.is_some_and(|mask| mask & (1 << (sig - 1)) == 0))
            .filter_map(|&sig| {
                let flag = Arc::new(AtomicBool::new(false));
                signal_hook::flag::register_conditional_default(sig, flag.clone())
                    .ok()
                    .map(|_| flag)
            })
            .collect();
        Defaults { armed, runs: 0 }
    });
    d.runs += 1;
    for f in &d.armed {
        f.store(false, Ordering::SeqCst);
    }
}

/// A run ended: with none left, the signals act by default again.
fn end_run() {
    let mut d = defaults();
    if let Some(d) = d.as_mut() {
        d.runs = d.runs.saturating_sub(1);
        if d.runs == 0 {
            for f in &d.armed {
                f.store(true, Ordering::SeqCst);
            }
        }
    }
}

/// The signals this process catches now (bit `n - 1` for signal `n`), from
/// `/proc/self/status`; `None` where that cannot be read.
fn caught_signals() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_caught(&status)
}

fn parse_caught(status: &str) -> Option<u64> {
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))?
        .trim();
    u64::from_str_radix(mask, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caught_mask_is_read_from_the_status_file() {
        let status = "Name:\tx\nSigIgn:\t0000000000001000\nSigCgt:\t0000000180000002\n";
        let mask = parse_caught(status).unwrap();
        assert_ne!(mask & (1 << (SIGINT - 1)), 0);
        assert_eq!(mask & (1 << (SIGTERM - 1)), 0);
        assert_eq!(parse_caught("Name:\tx\n"), None);
    }
}

//! Every thread's logs, for the captures that ask: the process-wide subscriber each
//! conformance case's log check runs through.
//!
//! A sink logs on threads and tasks the case never sees (a client's connection task, a
//! library's callback thread), so a capture on the case's own thread would miss exactly the
//! line that leaks. The testkit installs one global subscriber (once per process, unless the
//! test binary installed its own with [`global_layer`] in it) that hands every event and span
//! to the captures attached to it; while none is attached it asks for nothing, so tests that
//! run no case pay nothing.

use super::{Fields, LogCapture};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The target of the line each case logs to prove its capture hears the sink's threads.
const CANARY_TARGET: &str = "ankusa_sink_testkit::canary";

/// What the global layer hands events to.
#[derive(Clone)]
enum Tap {
    Capture(LogCapture),
    Scan(Arc<SecretScan>),
}

#[derive(Default)]
struct Hub {
    taps: RwLock<Vec<(u64, Tap)>>,
    attached: AtomicUsize,
    next: AtomicU64,
}

fn hub() -> &'static Hub {
    static HUB: OnceLock<Hub> = OnceLock::new();
    HUB.get_or_init(Hub::default)
}

impl Hub {
    fn attach(&self, tap: Tap) -> GlobalGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.taps
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push((id, tap));
        self.attached.fetch_add(1, Ordering::SeqCst);
        // Callsites cached as "never" while nothing was attached must be asked again.
        tracing::callsite::rebuild_interest_cache();
        GlobalGuard { id }
    }

    fn taps(&self) -> Vec<Tap> {
        let taps = self.taps.read().unwrap_or_else(PoisonError::into_inner);
        taps.iter().map(|(_, t)| t.clone()).collect()
    }
}

/// Detaches what [`LogCapture::attach_global`] attached when dropped.
#[derive(Debug)]
#[must_use = "the capture is detached when the guard is dropped"]
pub struct GlobalGuard {
    id: u64,
}

impl Drop for GlobalGuard {
    fn drop(&mut self) {
        let hub = hub();
        let mut taps = hub.taps.write().unwrap_or_else(PoisonError::into_inner);
        let before = taps.len();
        taps.retain(|(id, _)| *id != self.id);
        if taps.len() < before {
            hub.attached.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// The layer that hands every event and span of the process to the captures attached to
/// it ([`LogCapture::attach_global`], and each conformance case's own secret scan).
///
/// The testkit installs it as the global subscriber when a case first runs. A test binary
/// that installs a global subscriber of its own adds this layer to it
/// (`tracing_subscriber::registry().with(my_layer).with(global_layer())`), or every case
/// fails, saying its logs cannot be captured.
#[derive(Debug, Clone, Copy)]
pub struct GlobalLayer {
    /// Installed by the testkit: ask for nothing while nothing is attached. Inside another
    /// subscriber this layer must not filter for the others.
    filtering: bool,
}

/// The layer to add to a test binary's own global subscriber; see [`GlobalLayer`].
pub fn global_layer() -> GlobalLayer {
    GlobalLayer { filtering: false }
}

/// Make the testkit's subscriber (every event and span handed to the attached captures)
/// the process's global default, and route the `log` crate's records into it, unless a
/// global subscriber is set already (then it must hold [`global_layer`]). Idempotent; what
/// every case calls first.
pub fn install_global() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        use tracing_subscriber::layer::SubscriberExt as _;
        // An error means a global subscriber (or `log` logger) exists already.
        let _ = tracing_subscriber::registry()
            .with(GlobalLayer { filtering: true })
            .try_init();
    });
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for GlobalLayer {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        let _ = meta;
        if self.filtering {
            // Decided per event: captures come and go.
            Interest::sometimes()
        } else {
            Interest::always()
        }
    }

    fn enabled(&self, meta: &Metadata<'_>, _: Context<'_, S>) -> bool {
        let _ = meta;
        !self.filtering || hub().attached.load(Ordering::Relaxed) > 0
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut text = None;
        for tap in hub().taps() {
            match tap {
                Tap::Capture(c) => c.on_new_span(attrs, id, ctx.clone()),
                Tap::Scan(s) => {
                    let text = text.get_or_insert_with(|| {
                        let mut line = format!("span {}", attrs.metadata().name());
                        attrs.record(&mut Fields::line(&mut line));
                        line
                    });
                    s.line(attrs.metadata(), text);
                }
            }
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let mut text = None;
        for tap in hub().taps() {
            match tap {
                Tap::Capture(c) => c.on_record(id, values, ctx.clone()),
                Tap::Scan(s) => {
                    let Some(meta) = ctx.metadata(id) else {
                        continue;
                    };
                    let text = text.get_or_insert_with(|| {
                        let mut line = format!("span {}", meta.name());
                        values.record(&mut Fields::line(&mut line));
                        line
                    });
                    s.line(meta, text);
                }
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut text = None;
        for tap in hub().taps() {
            match tap {
                Tap::Capture(c) => c.on_event(event, ctx.clone()),
                Tap::Scan(s) => {
                    let text = text.get_or_insert_with(|| {
                        let mut line = String::new();
                        event.record(&mut Fields::line(&mut line));
                        line
                    });
                    s.line(event.metadata(), text);
                }
            }
        }
    }
}

impl LogCapture {
    /// Capture every thread's events and spans (not only this one's) until the guard is
    /// dropped, through the testkit's global subscriber ([`install_global`], done here
    /// when needed): for logs written on a client's own threads or tasks. A capture can
    /// be attached and set as a thread default at once; it then sees that thread's lines
    /// once.
    pub fn attach_global(&self) -> GlobalGuard {
        install_global();
        hub().attach(Tap::Capture(self.clone()))
    }
}

/// A case's log check: every line of every thread searched for the planted secrets while
/// the case runs, without keeping the lines (a volume case logs many).
pub(crate) struct SecretScan {
    secrets: Vec<String>,
    canary: String,
    state: Mutex<ScanState>,
}

#[derive(Default)]
struct ScanState {
    canary_seen: bool,
    /// Each leak, described with the secret replaced.
    leaks: Vec<String>,
}

impl SecretScan {
    /// Start searching every line of the process for `secrets`, and log the canary that
    /// proves the search hears this thread; the scan ends when the guard is dropped.
    pub(crate) fn start(secrets: Vec<String>) -> (Arc<SecretScan>, GlobalGuard) {
        install_global();
        let canary = crate::support::unique_name("canary");
        let scan = Arc::new(SecretScan {
            secrets: secrets.into_iter().filter(|s| !s.is_empty()).collect(),
            canary,
            state: Mutex::default(),
        });
        let guard = hub().attach(Tap::Scan(Arc::clone(&scan)));
        tracing::trace!(target: CANARY_TARGET, canary = %scan.canary, "log capture check");
        (scan, guard)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ScanState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn line(&self, meta: &Metadata<'_>, text: &str) {
        let leaked: Vec<&String> = self.secrets.iter().filter(|s| text.contains(*s)).collect();
        let mut state = self.lock();
        if meta.target() == CANARY_TARGET && text.contains(&self.canary) {
            state.canary_seen = true;
        }
        if !leaked.is_empty() && state.leaks.len() < 10 {
            let mut shown = text.to_owned();
            for s in &self.secrets {
                shown = shown.replace(s.as_str(), "<planted secret>");
            }
            state.leaks.push(format!(
                "a planted secret appears in a log line ({} {}): {}",
                level_name(meta.level()),
                meta.target(),
                shown
            ));
        }
    }

    /// Whether this thread's lines reached the scan (the canary arrived).
    pub(crate) fn hears(&self) -> bool {
        self.lock().canary_seen
    }

    /// The leaks found, each described without the secret.
    pub(crate) fn leaks(&self) -> Vec<String> {
        self.lock().leaks.clone()
    }
}

fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::TRACE => "TRACE",
        Level::DEBUG => "DEBUG",
        Level::INFO => "INFO",
        Level::WARN => "WARN",
        Level::ERROR => "ERROR",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_hears_other_threads_and_finds_secrets_without_keeping_them() {
        let (scan, guard) = SecretScan::start(vec!["s3cr3t-planted".into()]);
        assert!(scan.hears());
        std::thread::spawn(|| {
            tracing::trace!(target: "some_client::conn", password = "s3cr3t-planted", "login");
        })
        .join()
        .unwrap();
        drop(guard);
        tracing::error!("s3cr3t-planted after the scan ended");
        let leaks = scan.leaks();
        assert_eq!(leaks.len(), 1, "{leaks:?}");
        assert!(leaks[0].contains("TRACE some_client::conn"), "{}", leaks[0]);
        assert!(
            leaks[0].contains("password=<planted secret>"),
            "{}",
            leaks[0]
        );
        assert!(!leaks[0].contains("s3cr3t-planted"));
    }

    #[test]
    fn an_attached_capture_hears_other_threads_until_detached() {
        let logs = LogCapture::for_targets(&["attached_capture_test"]);
        let guard = logs.attach_global();
        std::thread::spawn(|| tracing::warn!(target: "attached_capture_test", "from afar"))
            .join()
            .unwrap();
        drop(guard);
        tracing::warn!(target: "attached_capture_test", "after");
        assert_eq!(logs.warnings(), ["WARN message=from afar"]);
    }
}

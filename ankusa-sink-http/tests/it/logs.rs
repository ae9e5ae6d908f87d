//! Captures what the sink logs (every level, every field) on the current thread, with a
//! minimal `tracing` subscriber: enough to check that no secret reaches a log line.

use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::DefaultGuard;
use tracing::{Event, Level, Metadata, Subscriber};

/// Every event logged on this thread while it lives, one line each:
/// `LEVEL message field=value ...`.
pub(crate) struct Logs {
    lines: Arc<Mutex<Vec<(Level, String)>>>,
    _guard: DefaultGuard,
}

impl Logs {
    /// All captured lines, joined.
    pub(crate) fn text(&self) -> String {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The captured WARN lines.
    pub(crate) fn warnings(&self) -> Vec<String> {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .filter(|(level, _)| *level == Level::WARN)
            .map(|(_, l)| l.clone())
            .collect()
    }
}

/// Start capturing on the current thread (a `#[tokio::test]` runs its runtime, and the
/// connections reqwest spawns, on this one thread).
pub(crate) fn capture() -> Logs {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let guard = tracing::subscriber::set_default(Capture(lines.clone()));
    Logs {
        lines,
        _guard: guard,
    }
}

struct Capture(Arc<Mutex<Vec<(Level, String)>>>);

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={value}", field.name());
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        // Span fields are recorded too: a secret in a span is as visible as in an event.
        let mut line = Line(format!("span {}", attrs.metadata().name()));
        attrs.record(&mut line);
        self.0
            .lock()
            .unwrap()
            .push((*attrs.metadata().level(), line.0));
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, values: &Record<'_>) {
        let mut line = Line("span record".to_owned());
        values.record(&mut line);
        self.0.lock().unwrap().push((Level::TRACE, line.0));
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut line = Line(event.metadata().level().to_string());
        event.record(&mut line);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), line.0));
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

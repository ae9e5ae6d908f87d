//! What a run's two inputs share: `deliver`/`forward` (deliver.rs) and `forward --from`
//! (from_source.rs) both hold the run's sinks by name, stop for the same reasons and make a
//! hook of an envelope the same way. Its own module so that neither imports the other for it.

use ankusa_dispatch::Hook;
use ankusa_sink_core::{Envelope, Sink};
use std::sync::Arc;

/// Why a run stopped taking new hooks before its input ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// SIGINT or SIGTERM (the signal number).
    Signal(i32),
    /// Outcome lines can no longer be written: delivering more would report nothing.
    Output,
}

/// A sink of the run, under its name (the config file's stem, or `log`).
pub(crate) struct NamedSink {
    pub(crate) name: String,
    pub(crate) sink: Arc<dyn Sink>,
    /// Its sink file's `[dispatch]` table.
    pub(crate) dispatch: ankusa_sinks::DispatchTable,
    /// Where its long retry waits are parked (`park`, `park_from`), built.
    pub(crate) park: Option<ParkSink>,
}

/// A sink's park destination: the sink that writes it, the source file that reads it back
/// (paths resolved against the sink file's directory), and the threshold.
pub(crate) struct ParkSink {
    pub(crate) sink: Arc<dyn Sink>,
    pub(crate) from: std::path::PathBuf,
    pub(crate) after: std::time::Duration,
}

/// The hook of an envelope: attempts join the trace of the `traceparent` header the hook
/// arrived with (and pass on its `tracestate`), as a forward from a source makes it.
pub(crate) fn hook_of(env: impl Into<Arc<Envelope>>) -> Hook {
    ankusa_dispatch::forward::traced_hook(env)
}

//! The log sink.

use crate::config::LogConfig;
use crate::error::LogError;
use ankusa_message::{Body, EmptyValues, Layout, Outgoing};
use ankusa_sink_core::{Capabilities, Ctx, Envelope, Failure, Sink, async_trait};
use std::io::Write as _;

/// One structured `tracing` line per hook (`hook_id`, `source_id`, `tenant_id`, `attempt`,
/// `size`, at info level, target `ankusa::sink::log`), and optionally its Message v1 JSON
/// on stdout. A line that could not be written fails the delivery (transient) where the
/// subscriber says so ([`ReportingWriter`](crate::ReportingWriter)).
///
/// Not durable: `Ok` means the line was handed to the logger, which outlives nothing. No
/// inline threshold, no batching, nothing to describe, no preflight.
#[derive(Debug, Clone)]
pub struct LogSink {
    config: LogConfig,
    /// Message v1, always inline (no threshold).
    layout: Layout,
}

impl Default for LogSink {
    fn default() -> Self {
        LogSink::new(LogConfig::default())
    }
}

impl LogSink {
    /// A log sink with these options.
    pub fn new(config: LogConfig) -> Self {
        LogSink {
            config,
            layout: Layout::message(None, EmptyValues::Drop),
        }
    }

    /// The options.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
}

#[async_trait]
impl Sink for LogSink {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        crate::report::clear();
        tracing::info!(
            target: "ankusa::sink::log",
            hook_id = env.id(),
            source_id = env.source_id(),
            tenant_id = env.tenant_id(),
            attempt = ctx.attempt.get(),
            size = env.size(),
            "hook delivered"
        );
        // Known only where the subscriber writes through a `ReportingWriter` (the CLI).
        if let Some(e) = crate::report::take() {
            return Err(LogError::Stderr(e).into());
        }
        if self.config.messages {
            let mut line = match Outgoing::new(env, ctx, &self.layout)?.into_body() {
                Body::Message(json) => json,
                Body::Raw(raw) => raw.to_vec(),
            };
            line.push(b'\n');
            // One write of the whole line under the lock, so concurrent lines never interleave.
            let mut out = std::io::stdout().lock();
            out.write_all(&line).map_err(LogError::Stdout)?;
        }
        Ok(())
    }

    /// Not durable: a line on stdout is handed over, nothing stored it.
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(false, None)
    }
}

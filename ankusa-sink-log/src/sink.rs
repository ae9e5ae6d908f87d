//! The log sink.

use crate::config::LogConfig;
use ankusa_sink_core::{Ctx, Envelope, Failure, Sink, async_trait, message};
use std::io::Write as _;

/// One structured `tracing` line per hook (`hook_id`, `source_id`, `tenant_id`, `attempt`,
/// `size`, at info level, target `ankusa::sink::log`), and optionally its Message v1 JSON
/// on stdout.
///
/// Not durable: `Ok` means the line was handed to the logger, which outlives nothing. No
/// inline threshold, no batching, nothing to describe, no preflight.
#[derive(Debug, Clone, Default)]
pub struct LogSink {
    config: LogConfig,
}

impl LogSink {
    /// A log sink with these options.
    pub fn new(config: LogConfig) -> Self {
        LogSink { config }
    }

    /// The options.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
}

#[async_trait]
impl Sink for LogSink {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        tracing::info!(
            target: "ankusa::sink::log",
            hook_id = env.id(),
            source_id = env.source_id(),
            tenant_id = env.tenant_id(),
            attempt = ctx.attempt(),
            size = env.size(),
            "hook delivered"
        );
        if self.config.messages {
            let mut line = message::encode(env, ctx, None)?;
            line.push(b'\n');
            // One write of the whole line under the lock, so concurrent lines never interleave.
            let mut out = std::io::stdout().lock();
            out.write_all(&line).map_err(crate::error::classify)?;
        }
        Ok(())
    }

    fn durable(&self) -> bool {
        false
    }
}

//! `forward --from SOURCE.toml`: hooks from a durable source (a Kafka consumer group, a
//! RabbitMQ queue, a NATS JetStream consumer), each acknowledged to its source only after
//! every sink has delivered it or dead-lettered it. The loop itself is
//! `ankusa_dispatch::forward`; here are the CLI's parts: the file, the flags, the checks.

use crate::UsageError;
use crate::hooks::NamedSink;
use ankusa_sinks::SourceConfig;
use ankusa_source::{Source, SourceOptions};
use serde::Serialize;
use std::num::NonZeroUsize;
use std::path::Path;
use std::time::Duration;

/// Open the source of a `--from` file.
pub(crate) async fn open(
    path: &Path,
    options: &SourceOptions,
) -> Result<Box<dyn Source>, UsageError> {
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|e| UsageError(format!("cannot read --from {}: {e}", path.display())))?;
    let config = SourceConfig::from_toml_str(&text)
        .map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
    config
        .open(options)
        .await
        .map_err(|e| UsageError(format!("{}: {e}", path.display())))
}

/// `--from` acknowledges a record once every sink took it: a sink that keeps nothing
/// (`Capabilities::durable` false: the log, a Redis channel) would make that acknowledgement
/// remove the only stored copy. Refused (exit 2, each such sink named) unless `allow`; with
/// it, one WARN line says which sinks.
pub(crate) fn refuse_non_durable(sinks: &[NamedSink], allow: bool) -> Result<(), UsageError> {
    let names: Vec<&str> = sinks
        .iter()
        .filter(|s| !ankusa_sink_core::safe_capabilities(&*s.sink).is_ok_and(|c| c.durable))
        .map(|s| s.name.as_str())
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    let list = names.join(", ");
    if !allow {
        return Err(UsageError(format!(
            "--from acknowledges each record to its source once every sink took it, and              these sinks keep nothing: {list}; the source would lose those records. Use              durable sinks, or pass --allow-non-durable to accept that"
        )));
    }
    tracing::warn!(
        sinks = %list,
        "--allow-non-durable: records are acknowledged to the source once these sinks, which          keep nothing, took them: {list}"
    );
    Ok(())
}

/// The options every source is opened with.
pub(crate) fn options(
    max_unacked: u64,
    max_unacked_bytes: u64,
    attempt_timeout: Duration,
    concurrency: usize,
) -> SourceOptions {
    let nonzero = |n: u64| {
        NonZeroUsize::new(usize::try_from(n).unwrap_or(usize::MAX)).unwrap_or(NonZeroUsize::MIN)
    };
    SourceOptions::new(
        nonzero(max_unacked),
        attempt_timeout,
        NonZeroUsize::new(concurrency).unwrap_or(NonZeroUsize::MIN),
    )
    .with_max_unacked_bytes(nonzero(max_unacked_bytes))
}

/// The `--json` line of a record that is not a hook.
#[derive(Serialize)]
pub(crate) struct InvalidRecordLine<'a> {
    pub(crate) position: &'a str,
    pub(crate) outcome: &'static str,
    pub(crate) reason: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn non_durable_sinks_are_named_and_refused_unless_allowed() {
        let log = ankusa_sinks::SinkConfig::log().build().await.unwrap();
        let named = |name: &str| NamedSink {
            name: name.into(),
            sink: log.clone(),
            dispatch: ankusa_sinks::DispatchTable::default(),
        };
        let sinks = [named("log"), named("audit")];
        let e = refuse_non_durable(&sinks, false).unwrap_err().0;
        assert!(
            e.contains("log, audit") && e.contains("--allow-non-durable"),
            "{e}"
        );
        assert!(refuse_non_durable(&sinks, true).is_ok());
        assert!(refuse_non_durable(&[], false).is_ok());
    }
}

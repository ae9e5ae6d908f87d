//! `forward --from SOURCE.toml`: hooks from a durable source (a Kafka consumer group, a
//! RabbitMQ queue, a NATS JetStream consumer), each acknowledged to its source only after
//! every sink has delivered it or dead-lettered it. The loop itself is
//! `ankusa_dispatch::forward`; here are the CLI's parts: the file, the flags, the checks.

use crate::UsageError;
use crate::hooks::NamedSink;
use ankusa_sinks::SourceConfig;
use ankusa_source::{Source, SourceError, SourceOptions};
use serde::Serialize;
use std::num::NonZeroUsize;
use std::path::Path;
use std::time::Duration;

/// The sources a `--from` run reads.
pub(crate) struct Opened {
    pub(crate) main: Main,
    /// Each parking sink's park destination, read back (`park_from`), by sink name.
    pub(crate) parks: Vec<(String, Box<dyn Source>)>,
}

/// The `--from` file's sources.
pub(crate) enum Main {
    /// One source every sink shares: a record is acknowledged once every sink took it.
    Shared(Box<dyn Source>),
    /// A source per sink, by sink name: each sink's records are acknowledged on their own.
    PerSink(Vec<(String, Box<dyn Source>)>),
}

/// Open the sources of a `--from` file for `sinks`: with several sinks, each reads through
/// a source of its own (`SourceConfig::for_sink`: its own consumer group, durable consumer
/// or queue, and its own window), so one failing sink holds back no other; a source that
/// cannot be split (an AMQP file naming only a queue) is shared, with a WARN saying so.
///
/// A redrive reads its dead letters once, for every sink (each record names its own), and
/// reads no park destination.
pub(crate) async fn open(
    path: &Path,
    options: &SourceOptions,
    named: &[NamedSink],
    redrive: bool,
) -> Result<Opened, OpenError> {
    if redrive {
        let config = read_config(path, "--from", &path.display().to_string()).await?;
        let source = config
            .open(options)
            .await
            .map_err(|e| OpenError::of(path.display(), e))?;
        return Ok(Opened {
            main: Main::Shared(source),
            parks: Vec::new(),
        });
    }
    let parks = open_parks(named, options).await?;
    let sinks: Vec<String> = named.iter().map(|s| s.name.clone()).collect();
    let main = open_main(path, options, &sinks).await?;
    Ok(Opened { main, parks })
}

/// The park destination of each sink that parks, opened as a source; an INFO line for
/// each sink that does not (its long waits stay in memory, holding their records).
async fn open_parks(
    named: &[NamedSink],
    options: &SourceOptions,
) -> Result<Vec<(String, Box<dyn Source>)>, OpenError> {
    let mut parks = Vec::new();
    for s in named {
        let Some(p) = &s.park else {
            tracing::info!(
                sink = %s.name,
                "sink {} has no park destination ([dispatch] park, park_from): a retry due \
                 far off waits in memory, holding its source record and a window place",
                s.name
            );
            continue;
        };
        let label = format!("park_from {} (sink {})", p.from.display(), s.name);
        let config = read_config(&p.from, "park_from", &label).await?;
        let source = config
            .open(options)
            .await
            .map_err(|e| OpenError::of(&label, e))?;
        tracing::info!(
            sink = %s.name,
            source = %config.reads_as(),
            after_s = p.after.as_secs(),
            "parking retries due {} s or more away, read back through this source",
            p.after.as_secs()
        );
        parks.push((s.name.clone(), source));
    }
    Ok(parks)
}

/// Why a source could not be opened at start: its configuration (exit 2), or a source that
/// did not answer (exit 69: a network fault or a broker down, for a supervisor to retry).
#[derive(Debug)]
pub(crate) enum OpenError {
    /// The files, the options, or what the broker said of them.
    Usage(UsageError),
    /// [`SourceError::Fatal`] at open: unreachable, or not answering in time.
    Unavailable(String),
}

impl From<UsageError> for OpenError {
    fn from(e: UsageError) -> Self {
        OpenError::Usage(e)
    }
}

impl OpenError {
    /// The error of opening the source `label` names.
    pub(crate) fn of(label: impl std::fmt::Display, e: SourceError) -> Self {
        match e {
            SourceError::Config(_) => OpenError::Usage(UsageError(format!("{label}: {e}"))),
            _ => OpenError::Unavailable(format!("{label}: {e}")),
        }
    }
}

/// The source file at `path` (given as `flag`), parsed; a parse error starts with `label`.
pub(crate) async fn read_config(
    path: &Path,
    flag: &str,
    label: &str,
) -> Result<SourceConfig, UsageError> {
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|e| UsageError(format!("cannot read {flag} {}: {e}", path.display())))?;
    SourceConfig::from_toml_str(&text).map_err(|e| UsageError(format!("{label}: {e}")))
}

/// The `--from` file's source(s) for `sinks`.
async fn open_main(
    path: &Path,
    options: &SourceOptions,
    sinks: &[String],
) -> Result<Main, OpenError> {
    let at = |e: &dyn std::fmt::Display| UsageError(format!("{}: {e}", path.display()));
    let config = read_config(path, "--from", &path.display().to_string()).await?;
    let configs = match split(&config, sinks).map_err(|e| at(&e))? {
        Some(configs) => configs,
        None => {
            if sinks.len() > 1 {
                tracing::warn!(
                    source = %config.reads_as(),
                    "--from {}: this {} source cannot be read once per sink (an amqp source \
                     needs `exchange` for that), so every sink shares it: a sink that fails \
                     holds back the records of the others until it delivers or dead-letters \
                     them",
                    path.display(),
                    config.kind()
                );
            }
            let source = config
                .open(options)
                .await
                .map_err(|e| OpenError::of(path.display(), e))?;
            return Ok(Main::Shared(source));
        }
    };
    let mut sources = Vec::with_capacity(configs.len());
    for (sink, c) in configs {
        tracing::info!(sink = %sink, source = %c.reads_as(), "reading --from once for this sink");
        let source = c
            .open(options)
            .await
            .map_err(|e| OpenError::of(format!("{} (for sink {sink})", path.display()), e))?;
        sources.push((sink, source));
    }
    Ok(Main::PerSink(sources))
}

/// The config of each sink's own source, or `None` to share one: one sink reads the file
/// as it is (its group, consumer or queue keeps its name); several read one each, unless
/// the source cannot be split. Two sinks whose names make the same broker name are refused.
fn split(
    config: &SourceConfig,
    sinks: &[String],
) -> Result<Option<Vec<(String, SourceConfig)>>, String> {
    if sinks.len() < 2 {
        return Ok(None);
    }
    let mut configs: Vec<(String, SourceConfig)> = Vec::with_capacity(sinks.len());
    for sink in sinks {
        let Some(c) = config.for_sink(sink).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        if let Some((other, _)) = configs.iter().find(|(_, o)| o.reads_as() == c.reads_as()) {
            return Err(format!(
                "sinks `{other}` and `{sink}` would read the same {}: rename one of their files",
                c.reads_as()
            ));
        }
        configs.push((sink.clone(), c));
    }
    Ok(Some(configs))
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

    #[cfg(all(feature = "kafka", feature = "amqp", feature = "nats"))]
    #[test]
    fn several_sinks_read_a_source_each_unless_it_cannot_be_split() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let kafka = SourceConfig::from_toml_str(
            "type = \"kafka\"\nbrokers = [\"127.0.0.1:9092\"]\ntopic = \"t\"\ngroup = \"g\"",
        )
        .unwrap();
        assert!(
            split(&kafka, &names(&["one"])).unwrap().is_none(),
            "one sink: as written"
        );
        let two = split(&kafka, &names(&["good", "bad http"]))
            .unwrap()
            .unwrap();
        let groups: Vec<_> = two
            .iter()
            .map(|(s, c)| (s.as_str(), c.reads_as()))
            .collect();
        assert_eq!(
            groups,
            [
                ("good", "group g-good".into()),
                ("bad http", "group g-bad_http".into())
            ]
        );
        let e = split(&kafka, &names(&["a b", "a_b"])).unwrap_err();
        assert!(e.contains("`a b` and `a_b`"), "{e}");
        let nats = SourceConfig::from_toml_str(
            "type = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\nstream = \"S\"\nconsumer = \"fwd\"",
        )
        .unwrap();
        let two = split(&nats, &names(&["a.b", "c"])).unwrap().unwrap();
        assert_eq!(two[0].1.reads_as(), "consumer fwd-a_b");
        let queue_only = SourceConfig::from_toml_str(
            "type = \"amqp\"\nurl = \"amqp://127.0.0.1:5672/%2f\"\nqueue = \"q\"",
        )
        .unwrap();
        assert!(
            split(&queue_only, &names(&["a", "b"])).unwrap().is_none(),
            "shared"
        );
        let bound = SourceConfig::from_toml_str(
            "type = \"amqp\"\nurl = \"amqp://127.0.0.1:5672/%2f\"\nqueue = \"q\"\nexchange = \"x\"",
        )
        .unwrap();
        let two = split(&bound, &names(&["a", "b"])).unwrap().unwrap();
        assert_eq!(two[1].1.reads_as(), "queue q-b");
        let long = split(&bound, &names(&[&"s".repeat(300), "b"])).unwrap_err();
        assert!(long.contains("255"), "{long}");
    }

    #[tokio::test]
    async fn non_durable_sinks_are_named_and_refused_unless_allowed() {
        let log = ankusa_sinks::SinkConfig::log().build().await.unwrap();
        let named = |name: &str| NamedSink {
            name: name.into(),
            sink: log.clone(),
            dispatch: ankusa_sinks::DispatchTable::default(),
            park: None,
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

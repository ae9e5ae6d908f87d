#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
// The `ankusa-sink` binary (src/main.rs) is `main_with(Registry::builtin())` plus its global
// allocator: a library must not choose the allocator of the program that links it.

mod asyncapi;
mod dead_letters;
mod deliver;
mod from_source;
mod gen_cmd;
mod hooks;
mod lines;
mod logging;
mod metrics_server;
mod otlp;
mod output;
mod signals;

use ankusa_sink_core::{Check, Sink, Subject, safe_describe};
use ankusa_sinks::{Registry, SinkConfig};
use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Exit code for bad usage, config or input.
const EXIT_USAGE: u8 = 2;
/// Exit code when a delivery or check failed.
const EXIT_FAILED: u8 = 3;
/// Exit code when `check` has no way to check the sink (nothing was checked).
const EXIT_NOT_CHECKED: u8 = 4;
/// Exit code when an outcome line or a dead letter could not be written (sysexits'
/// EX_IOERR).
const EXIT_OUTPUT: u8 = 74;
/// Exit code when the dispatcher's scheduler task died, a bug (sysexits' EX_SOFTWARE).
const EXIT_SOFTWARE: u8 = 70;
/// Exit code when the `--from` source did not answer at start: unreachable or not
/// answering in time, not a configuration error (sysexits' EX_UNAVAILABLE).
const EXIT_UNAVAILABLE: u8 = 69;

/// Say why the source could not be opened, and the exit code for it: nothing was read.
fn source_unavailable(why: &str) -> ExitCode {
    output::note(&format!(
        "ankusa-sink: the source did not answer (try again; nothing was read): {}",
        output::escape_control(why)
    ));
    ExitCode::from(EXIT_UNAVAILABLE)
}

#[derive(Parser, Debug)]
#[command(
    name = "ankusa-sink",
    version,
    about = "Deliver Ankusa hooks to any sink, by config"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Deliver one hook.
    Deliver(DeliverArgs),
    /// Deliver envelopes given as JSON lines, concurrently.
    Forward(ForwardArgs),
    /// Print sample envelopes as JSON lines (input for `forward`).
    Gen(GenArgs),
    /// Preflight: the destination exists and the credentials are accepted; publishes nothing.
    Check(SinkArg),
    /// Print the sink's capabilities: durable, inline threshold, batched.
    Info(InfoArgs),
    /// Print where the sink publishes (JSON), or an AsyncAPI 3.0 document for several sinks.
    Describe(DescribeArgs),
    /// Inspect dead letters (a dead-letter file, or the source a dead-letter sink feeds)
    /// without taking any.
    #[command(subcommand)]
    DeadLetters(DeadLettersCommand),
}

#[derive(Subcommand, Debug)]
enum DeadLettersCommand {
    /// Counts by sink, class, reason (its first part, no values), tenant and hour.
    Stats(DeadLettersArgs),
    /// One line per matching dead letter: id, sink, class, reason, attempts, first and last
    /// attempt times (never bodies or headers).
    List(DeadLettersArgs),
}

#[derive(Args, Debug)]
struct DeadLettersArgs {
    /// The source a --dead-letter sink feeds (a TOML file tagged by `type`): its records
    /// present now are read and every one is left in place (released, never acknowledged).
    #[arg(
        long,
        value_name = "SOURCE.toml",
        conflicts_with = "input",
        required_unless_present = "input"
    )]
    from: Option<PathBuf>,
    /// A dead-letter file (JSON lines), or `-` for stdin.
    #[arg(long, value_name = "FILE")]
    input: Option<String>,
    #[command(flatten)]
    filter: FilterArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// With --from: records read at most (held unacknowledged until the end).
    #[arg(long, default_value_t = 1_000_000, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_records: u64,
}

#[derive(Args, Debug)]
struct SinkArg {
    /// A sink config file (TOML, tagged by `type`), or `log` for the embedded default.
    #[arg(long)]
    sink: String,
}

#[derive(Args, Debug)]
struct SinksArg {
    /// A sink config file (TOML, tagged by `type`), or `log` for the embedded default.
    /// Repeat for fan-out: every hook goes to every sink. A sink is named by its file's
    /// stem (`amqp.toml` -> `amqp`) in outcome lines, metrics and dead letters.
    #[arg(long = "sink", required = true, value_name = "FILE")]
    sinks: Vec<String>,
}

#[derive(Args, Debug)]
struct DispatchArgs {
    /// Check bodies over a sink's inline threshold in once, here: `file:///abs/dir`,
    /// `memory://`, or `s3://bucket` (the usual AWS environment, `AWS_ENDPOINT_URL` too).
    #[arg(long, value_name = "URL")]
    claim_store: Option<String>,
    /// Store each (hook, sink) whose final outcome is not ok: a value ending in `.toml` is
    /// a sink file (one that keeps what it takes: Kafka, AMQP, SQS, SNS, Pub/Sub, NATS, a
    /// Redis stream, Kinesis), each dead letter sent as a message whose body is its record;
    /// any other value is a JSON-lines file appended to (the envelope plus a `dead_letter`
    /// object). `forward --input FILE` or `forward --from SOURCE.toml --redrive` redrives
    /// them. With --retry its pairs are `dead_lettered`; without a dead-letter destination
    /// nothing is stored, and a pair that gives up is `failed`.
    #[arg(long, value_name = "FILE|SINK.toml")]
    dead_letter: Option<PathBuf>,
    /// Serve Prometheus metrics at `http://HOST:PORT/metrics` while the command runs.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// With --metrics-addr: answer only requests that carry this token as `Authorization:
    /// Bearer TOKEN` (401 otherwise); the token is the file's first line. For a listener
    /// bound beyond loopback.
    #[arg(long, value_name = "PATH", requires = "metrics_addr")]
    metrics_token_file: Option<PathBuf>,
    /// Consecutive transient or retry-after failures that open a sink's circuit breaker.
    #[arg(long, default_value_t = 5, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    breaker_failures: u32,
    /// Attempts of one tenant in flight at once per sink, at most (0: no cap). Whatever
    /// the cap, each sink serves the tenants with waiting hooks round robin.
    #[arg(long, default_value_t = 0, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    tenant_concurrency: u32,
    /// Seconds an open circuit breaker holds attempts before one probe (at most a day).
    #[arg(long, default_value_t = 30, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(0..=86_400))]
    breaker_open: u64,
    /// On SIGINT or SIGTERM: seconds to let attempts in flight finish (at most a day).
    #[arg(long, default_value_t = 30, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(0..=86_400))]
    drain_timeout: u64,
    /// Export every attempt span over OTLP/HTTP (protobuf) to this collector URL
    /// (`http://HOST:4318` gets `/v1/traces`; headers from OTEL_EXPORTER_OTLP_HEADERS).
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// Let OTEL_EXPORTER_OTLP_HEADERS go to an http:// collector that is not loopback
    /// (cleartext): refused without it.
    #[arg(long, requires = "otlp_endpoint")]
    otlp_allow_insecure: bool,
}

/// Which dead letters a redrive, `dead-letters stats` or `dead-letters list` takes: every
/// filter given must hold.
#[derive(Args, Debug, Default)]
struct FilterArgs {
    /// Only dead letters of this sink (its name: the sink file's stem).
    #[arg(long, value_name = "NAME")]
    only_sink: Option<String>,
    /// Only hooks of this tenant.
    #[arg(long, value_name = "TENANT")]
    only_tenant: Option<String>,
    /// Only failures of this class (`config`, `retry_after`, `transient`) or error class
    /// (`permanent`, which holds `config` too; `throttled`, which is `retry_after`).
    #[arg(long, value_name = "CLASS", value_parser = parse_class)]
    only_class: Option<String>,
    /// Only dead letters whose last attempt was at or after this time (RFC 3339).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    since: Option<i64>,
    /// Only dead letters whose last attempt was before this time (RFC 3339).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    until: Option<i64>,
    /// Only dead letters whose reason contains this text.
    #[arg(long, value_name = "TEXT")]
    reason_contains: Option<String>,
}

impl FilterArgs {
    fn filter(&self) -> ankusa_dispatch::record::RecordFilter {
        let mut f = ankusa_dispatch::record::RecordFilter::new().between(self.since, self.until);
        if let Some(s) = &self.only_sink {
            f = f.sink(s);
        }
        if let Some(t) = &self.only_tenant {
            f = f.tenant(t);
        }
        if let Some(c) = &self.only_class {
            f = f.class(c);
        }
        if let Some(r) = &self.reason_contains {
            f = f.reason_contains(r);
        }
        f
    }
}

/// An RFC 3339 time (any offset) as Unix milliseconds.
fn parse_time(s: &str) -> Result<i64, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|e| format!("not an RFC 3339 time (2026-12-07T10:00:00Z, or with an offset): {e}"))
}

/// A failure class or error class `--only-class` takes.
fn parse_class(s: &str) -> Result<String, String> {
    const CLASSES: [&str; 5] = [
        "permanent",
        "config",
        "retry_after",
        "transient",
        "throttled",
    ];
    if CLASSES.contains(&s) {
        Ok(s.to_owned())
    } else {
        Err(format!("one of {}", CLASSES.join(", ")))
    }
}

/// `--max-unacked-bytes`' most: 1 TiB.
const MAX_TIB: u64 = 1 << 40;
/// `--max-line-bytes`' most: 4 GiB (a 1 GiB body, base64, with its envelope fits).
const MAX_LINE_BYTES: u64 = 4 << 30;

/// `--concurrency`: attempts in flight, 1 to [`ankusa_dispatch::MAX_CONCURRENCY`] (more
/// panicked the dispatcher: past what a semaphore counts).
fn parse_concurrency(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=ankusa_dispatch::MAX_CONCURRENCY).contains(&n) => Ok(n),
        _ => Err(format!(
            "a number from 1 to {}",
            ankusa_dispatch::MAX_CONCURRENCY
        )),
    }
}

/// A positive, finite rate of hooks per second.
fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && (0.001..=1_000_000.0).contains(&r) => Ok(r),
        _ => Err("a number of hooks per second from 0.001 to 1000000".to_owned()),
    }
}

#[derive(Args, Debug)]
struct RetryArgs {
    /// Retry by the dispatch rules until delivered or given up (dead-lettered to
    /// --dead-letter, if given).
    #[arg(long)]
    retry: bool,
    /// With --retry: dead-letter a hook still failing this many seconds after its first
    /// attempt (at most 365 days).
    #[arg(long, default_value_t = 86_400, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(0..=31_536_000))]
    max_elapsed: u64,
    /// With --retry: give up after this many attempts (1 to 1000000).
    #[arg(long, default_value_t = 84, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_attempts: u32,
    /// Abandon an attempt that has not answered after this many seconds (transient; 1 to
    /// 86400).
    #[arg(long, default_value_t = 30, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    attempt_timeout: u64,
    /// One JSON outcome line per hook on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct DeliverArgs {
    #[command(flatten)]
    sink: SinksArg,
    /// The body: a file, or `-` for stdin. Default: empty.
    #[arg(long)]
    body: Option<String>,
    /// Hook id (default: a new ULID).
    #[arg(long)]
    id: Option<String>,
    /// Source id.
    #[arg(long, default_value = "cli")]
    source_id: String,
    /// Tenant.
    #[arg(long)]
    tenant: Option<String>,
    /// A provider header, `name: value`; repeatable.
    #[arg(long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// The body's content type.
    #[arg(long)]
    content_type: Option<String>,
    /// The provider event key.
    #[arg(long)]
    dedupe_key: Option<String>,
    /// Deliver as part of this replay job.
    #[arg(long)]
    replay_id: Option<String>,
    /// The attempt number of the first attempt (1 to 1000000).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    attempt: u32,
    #[command(flatten)]
    retry: RetryArgs,
    #[command(flatten)]
    dispatch: DispatchArgs,
}

#[derive(Args, Debug)]
struct ForwardArgs {
    #[command(flatten)]
    sink: SinksArg,
    /// Envelopes as JSON lines (body in `body_base64`): a file, or `-` for stdin.
    #[arg(long, default_value = "-")]
    input: String,
    /// Read hooks from a durable source instead of --input: a TOML file tagged by `type`
    /// (`kafka`, `amqp`, `nats`, `sqs`). Each record is acknowledged only after every sink has
    /// delivered it or dead-lettered it; runs until SIGINT or SIGTERM.
    #[arg(long, value_name = "SOURCE.toml", conflicts_with = "input")]
    from: Option<PathBuf>,
    /// With --from: records read and not yet acknowledged, at most (a slow sink slows
    /// reading instead of growing memory).
    #[arg(long, default_value_t = 1024, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_unacked: u64,
    /// With --from: bytes of records read and not yet acknowledged, at most; what each
    /// source fetches ahead (AMQP prefetch, Kafka fetch queue, NATS pull) is sized by it
    /// too. A record larger than this goes through alone.
    #[arg(long, default_value_t = 268_435_456, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..=MAX_TIB))]
    max_unacked_bytes: u64,
    /// With --from: accept sinks that keep nothing (`log`, a Redis channel): each record is
    /// acknowledged, so removed from the source, once such a sink took it. Without it,
    /// `--from` refuses them.
    #[arg(long, requires = "from")]
    allow_non_durable: bool,
    /// Deliveries in flight at once, over every sink. Default: each sink's own pipeline
    /// window (Kafka, NATS, Redis, Pub/Sub: 1024 deliveries; AMQP: its max_inflight, 4096
    /// by default; SQS/SNS with batching: 320), and 32 shared by the sinks that make one
    /// request per delivery (HTTP, log, SQS/SNS without batching). 1 to 1000000.
    #[arg(long, value_name = "N", value_parser = parse_concurrency)]
    concurrency: Option<usize>,
    /// With --input: read past the first N lines without delivering or reporting them,
    /// to resume a stopped run (its summary names N).
    #[arg(long, default_value_t = 0, value_name = "N", conflicts_with = "from")]
    skip_lines: u64,
    /// An input line longer than this is reported invalid without being held in memory; a
    /// --from record longer than this is reported invalid, dead-lettered and acknowledged.
    #[arg(long, default_value_t = 64 * 1024 * 1024, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..=MAX_LINE_BYTES))]
    max_line_bytes: u64,
    /// With --from: the source holds dead letters (a --dead-letter sink's destination).
    /// Each one the filters match goes to the sink it died at alone (give that sink's
    /// --sink), keeping its id and carrying this run's replay id; the others are left in
    /// the source. Reads the dead letters present when it starts, then stops with a
    /// summary. Needs --dead-letter: one that fails again is stored there, never lost.
    /// (--input always replays a dead-letter line to its sink.)
    #[arg(long, requires_all = ["from", "dead_letter"])]
    redrive: bool,
    #[command(flatten)]
    filter: FilterArgs,
    /// Submit at most N hooks a second (evenly spaced), so a redrive cannot starve live
    /// traffic. Default: no limit.
    #[arg(long, value_name = "N", value_parser = parse_rate)]
    rate: Option<f64>,
    #[command(flatten)]
    retry: RetryArgs,
    #[command(flatten)]
    dispatch: DispatchArgs,
}

#[derive(Args, Debug)]
struct GenArgs {
    /// How many envelopes.
    #[arg(long, default_value_t = 10)]
    count: u64,
    /// Body bytes of each (at most 1 GiB).
    #[arg(long, default_value_t = 256)]
    size: u64,
    /// Source id.
    #[arg(long, default_value = "gen")]
    source_id: String,
    /// Tenant.
    #[arg(long)]
    tenant: Option<String>,
}

#[derive(Args, Debug)]
struct InfoArgs {
    #[command(flatten)]
    sink: SinkArg,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct DescribeArgs {
    /// Sink config files (or `log`); several give an AsyncAPI 3.0 document.
    #[arg(long, required = true)]
    sink: Vec<String>,
    /// The source the description is for.
    #[arg(long)]
    source_id: String,
    /// The tenant, if fixed.
    #[arg(long)]
    tenant: Option<String>,
}

/// A failure to report with exit code 2.
#[derive(Debug)]
struct UsageError(String);

impl<E: std::fmt::Display> From<E> for UsageError {
    fn from(e: E) -> Self {
        UsageError(e.to_string())
    }
}

async fn load_config(
    registry: &Registry,
    spec: &str,
) -> Result<(SinkConfig, ankusa_sinks::DispatchTable), UsageError> {
    if spec == "log" {
        return Ok((SinkConfig::log(), ankusa_sinks::DispatchTable::default()));
    }
    let text = tokio::fs::read_to_string(spec)
        .await
        .map_err(|e| UsageError(format!("cannot read sink config {spec}: {e}")))?;
    let parsed = if PathBuf::from(spec).extension().is_some_and(|e| e == "json") {
        registry.parse_sink_file_json(&text)
    } else {
        registry.parse_sink_file_toml(&text)
    };
    parsed.map_err(|e| UsageError(format!("{spec}: {e}")))
}

/// The sinks of a run, each named by its config file's stem (or `log`).
async fn load_sinks(
    registry: &Registry,
    specs: &[String],
    json: bool,
) -> Result<Vec<hooks::NamedSink>, UsageError> {
    let mut sinks: Vec<hooks::NamedSink> = Vec::new();
    for spec in specs {
        let name = if spec == "log" {
            "log".to_owned()
        } else {
            std::path::Path::new(spec)
                .file_stem()
                .and_then(|s| s.to_str())
                .ok_or_else(|| UsageError(format!("--sink {spec}: no file name")))?
                .to_owned()
        };
        if sinks.iter().any(|s| s.name == name) {
            return Err(UsageError(format!(
                "two --sink files are named `{name}`: each sink is named by its file's stem, rename one"
            )));
        }
        let (config, dispatch, sink) = load_sink_file(registry, spec).await?;
        refuse_mixed_stdout(&config, json)?;
        let park = match &dispatch.park {
            Some(p) => Some(load_park(registry, spec, p).await?),
            None => None,
        };
        sinks.push(hooks::NamedSink {
            name,
            sink,
            dispatch,
            park,
        });
    }
    Ok(sinks)
}

/// The run's dead-letter destination: a sink file (`.toml`; it must keep what it takes) or
/// a JSON-lines file, locked for the run.
async fn load_dead_letter(
    registry: &Registry,
    d: &DispatchArgs,
) -> Result<Option<ankusa_dispatch::DeadLetter>, UsageError> {
    let Some(path) = &d.dead_letter else {
        return Ok(None);
    };
    if path.extension().is_none_or(|e| e != "toml") {
        return ankusa_dispatch::DeadLetter::jsonl(path)
            .map(Some)
            .map_err(|e| UsageError(e.to_string()));
    }
    let spec = path.to_string_lossy();
    let (_, _, sink) = load_sink_file(registry, &spec)
        .await
        .map_err(|e| UsageError(format!("--dead-letter {}", e.0)))?;
    if !ankusa_sink_core::safe_capabilities(&*sink).is_ok_and(|c| c.durable) {
        return Err(UsageError(format!(
            "--dead-letter {spec}: a dead-letter sink must keep what it takes (a Kafka topic, \
             a RabbitMQ queue, an SQS queue, a JetStream subject, a Redis stream, ...): a dead \
             letter lives only there"
        )));
    }
    Ok(Some(ankusa_dispatch::DeadLetter::sink(sink)))
}

/// The park destination of the sink file `spec`: its `park` sink file built (it must keep
/// what it takes) and its `park_from` source file found, both relative to `spec`'s
/// directory.
async fn load_park(
    registry: &Registry,
    spec: &str,
    p: &ankusa_sinks::ParkTable,
) -> Result<hooks::ParkSink, UsageError> {
    let dir = std::path::Path::new(spec)
        .parent()
        .unwrap_or(std::path::Path::new("."));
    let sink_path = dir.join(&p.sink);
    let from = dir.join(&p.from);
    let sink_spec = sink_path.to_string_lossy().into_owned();
    let (_, _, sink) = load_sink_file(registry, &sink_spec)
        .await
        .map_err(|e| UsageError(format!("{spec}: [dispatch] park: {}", e.0)))?;
    if !ankusa_sink_core::safe_capabilities(&*sink).is_ok_and(|c| c.durable) {
        return Err(UsageError(format!(
            "{spec}: [dispatch] park = {}: a park destination must keep what it takes (a \
             Kafka topic, a JetStream subject, a RabbitMQ queue): a parked hook lives only there",
            p.sink.display()
        )));
    }
    if !from.is_file() {
        return Err(UsageError(format!(
            "{spec}: [dispatch] park_from = {}: no such file",
            p.from.display()
        )));
    }
    Ok(hooks::ParkSink {
        sink,
        from,
        after: std::time::Duration::from_secs(u64::from(p.after_seconds.get())),
    })
}

/// Serve `GET /metrics` for the run (Prometheus text), with `--metrics-token-file`'s token
/// if given; an address that cannot be bound, or a token file that cannot be read, is a
/// usage error naming it.
fn serve_metrics(d: &DispatchArgs) -> Result<(), UsageError> {
    let Some(addr) = d.metrics_addr else {
        return Ok(());
    };
    let token = d
        .metrics_token_file
        .as_deref()
        .map(metrics_server::read_token)
        .transpose()
        .map_err(UsageError)?;
    metrics_server::start(addr, token)
        .map_err(|e| UsageError(format!("--metrics-addr {addr}: {e}")))
}

async fn load_sink(
    registry: &Registry,
    spec: &str,
) -> Result<(SinkConfig, Arc<dyn Sink>), UsageError> {
    let (config, _, sink) = load_sink_file(registry, spec).await?;
    Ok((config, sink))
}

/// A sink file's sink, built, and its `[dispatch]` table.
async fn load_sink_file(
    registry: &Registry,
    spec: &str,
) -> Result<(SinkConfig, ankusa_sinks::DispatchTable, Arc<dyn Sink>), UsageError> {
    let (config, dispatch) = load_config(registry, spec).await?;
    let sink = config
        .build()
        .await
        .map_err(|e| UsageError(format!("{spec}: {e}")))?;
    Ok((config, dispatch, sink))
}

/// Client-library log targets that print what must not reach a log: lapin logs a returned
/// message (the hook body) at WARN and its frames, the login frame with the password
/// included, at trace. Off unless `RUST_LOG` names the target itself.
const SILENCED_TARGETS: [&str; 4] = ["lapin", "amq_protocol", "amq_protocol_tcp", "tcp_stream"];
/// HTTP and TLS stacks log requests, headers and frames at debug and trace: at most `warn`
/// unless `RUST_LOG` names the target itself.
const QUIET_TARGETS: [&str; 11] = [
    "hyper",
    "hyper_util",
    "h2",
    "reqwest",
    "rustls",
    "tonic",
    "tower",
    "aws_smithy_runtime",
    "aws_smithy_http_client",
    "aws_sigv4",
    "google_cloud_gax",
];

/// The filter for `RUST_LOG` (default `info`), with the client targets above held down
/// unless the spec names them.
fn log_directives(spec: &str) -> String {
    let named = |target: &str| {
        spec.split(',').any(|d| {
            let t = d.split('=').next().unwrap_or("").trim();
            t == target || t.starts_with(&format!("{target}::"))
        })
    };
    let mut out = spec.to_owned();
    for (targets, level) in [(&SILENCED_TARGETS[..], "off"), (&QUIET_TARGETS[..], "warn")] {
        for t in targets {
            if !named(t) {
                out.push_str(&format!(",{t}={level}"));
            }
        }
    }
    if !wants_attempt_spans(spec) {
        out.push_str(&format!(",{ATTEMPT_TARGET}=warn"));
    }
    out
}

/// The dispatcher's per-attempt span (at info): formatting its fields for the log costs
/// more CPU per delivery than the Kafka sink's own work, and the sinks log from their
/// connection tasks, outside it. On when `RUST_LOG` asks for debug or names the dispatcher.
const ATTEMPT_TARGET: &str = "ankusa_dispatch::attempt";

fn wants_attempt_spans(spec: &str) -> bool {
    spec.split(',').any(|d| {
        let (target, level) = match d.split_once('=') {
            Some((t, l)) => (t.trim(), Some(l.trim())),
            None => (d.trim(), None),
        };
        let dispatcher = target == "ankusa_dispatch" || target.starts_with("ankusa_dispatch::");
        let verbose = level.is_none()
            && (target.eq_ignore_ascii_case("debug") || target.eq_ignore_ascii_case("trace"));
        dispatcher || verbose
    })
}

/// The log on stderr, and with `otlp` the attempt spans exported as well (whatever
/// `RUST_LOG` says of them: each layer has its own filter then).
fn init_logging(otlp: Option<&otlp::Otlp>) {
    use tracing_subscriber::prelude::*;
    let spec = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned());
    let filter = tracing_subscriber::EnvFilter::try_new(log_directives(&spec))
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(log_directives("info")))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = match otlp {
        // One global filter: a span no layer wants costs a branch.
        None => tracing_subscriber::registry()
            .with(filter)
            .with(log_layer())
            .try_init(),
        Some(o) => tracing_subscriber::registry()
            .with(log_layer().with_filter(filter))
            .with(
                tracing_opentelemetry::layer()
                    .with_tracer(o.tracer())
                    .with_filter(tracing_subscriber::filter::filter_fn(otlp::exported)),
            )
            .try_init(),
    };
}

/// The log lines on stderr (through [`logging::Stderr`]'s writer thread).
fn log_layer<S>() -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer()
        .with_writer(logging::Stderr::start())
        // Its report of a failed write is an `eprintln!`, which panics when stderr is
        // what failed: failed writes are counted by the writer instead.
        .log_internal_errors(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
}

/// The `--otlp-endpoint` of a command that dispatches, with its `--otlp-allow-insecure`.
fn otlp_endpoint(cli: &Cli) -> Option<(&str, bool)> {
    let d = match &cli.command {
        Command::Deliver(a) => &a.dispatch,
        Command::Forward(a) => &a.dispatch,
        _ => return None,
    };
    Some((d.otlp_endpoint.as_deref()?, d.otlp_allow_insecure))
}

/// Write a command's result to stdout: exit code `EXIT_OUTPUT` if it could not be.
fn print(line: &str, code: ExitCode) -> ExitCode {
    if output::Output::new().stdout_line(line) {
        code
    } else {
        ExitCode::from(EXIT_OUTPUT)
    }
}

/// The log sink's `messages = true` writes Message v1 lines on stdout, where `--json`
/// writes outcome lines: one stream cannot carry both.
fn refuse_mixed_stdout(config: &SinkConfig, json: bool) -> Result<(), UsageError> {
    if let SinkConfig::Log(c) = config
        && c.messages()
        && json
    {
        return Err(UsageError(
            "the log sink's `messages = true` writes Message v1 lines on stdout, where \
             --json writes outcome lines: use one or the other"
                .into(),
        ));
    }
    Ok(())
}

async fn run(cli: Cli, registry: &Registry) -> Result<ExitCode, UsageError> {
    match cli.command {
        Command::Gen(a) => gen_cmd::run(&a),
        Command::Deliver(a) => {
            serve_metrics(&a.dispatch)?;
            logging::register_metrics();
            if a.dispatch.otlp_endpoint.is_some() {
                otlp::register_metrics();
            }
            let sinks = load_sinks(registry, &a.sink.sinks, a.retry.json).await?;
            let dl = load_dead_letter(registry, &a.dispatch).await?;
            // Removed when the run returns (dropped at the end of this arm).
            let (stop, _signals) = signals::watch();
            deliver::deliver_one(&a, sinks, dl, stop).await
        }
        Command::Forward(a) => {
            serve_metrics(&a.dispatch)?;
            logging::register_metrics();
            if a.dispatch.otlp_endpoint.is_some() {
                otlp::register_metrics();
            }
            let sinks = load_sinks(registry, &a.sink.sinks, a.retry.json).await?;
            if a.from.is_some() && !a.filter.filter().is_empty() && !a.redrive {
                return Err(UsageError(
                    "--only-*, --since, --until and --reason-contains select dead letters: with \
                     --from, add --redrive"
                        .into(),
                ));
            }
            let dl = load_dead_letter(registry, &a.dispatch).await?;
            let (stop, _signals) = signals::watch();
            deliver::forward(&a, sinks, dl, stop).await
        }
        Command::DeadLetters(c) => dead_letters::run(c).await,
        Command::Check(a) => check(registry, &a).await,
        Command::Info(a) => info(registry, &a).await,
        Command::Describe(a) => describe(registry, &a).await,
    }
}

/// `check`: the sink's preflight, as text and an exit code.
async fn check(registry: &Registry, a: &SinkArg) -> Result<ExitCode, UsageError> {
    let (config, sink) = load_sink(registry, &a.sink).await?;
    Ok(match sink.check().await {
        Ok(Check::Passed) => print(
            &format!("check passed: {} sink", config.kind()),
            ExitCode::SUCCESS,
        ),
        Ok(Check::Reachable) => print(
            &format!(
                "check passed: the {} sink's destination accepts connections (whether it \
                 takes the hook is known only by delivering)",
                config.kind()
            ),
            ExitCode::SUCCESS,
        ),
        Ok(_) => print(
            &format!(
                "not checked: the {} sink has no preflight check",
                config.kind()
            ),
            ExitCode::from(EXIT_NOT_CHECKED),
        ),
        Err(f) => print(
            &format!("check failed: {}", output::escape_control(&f.to_string())),
            ExitCode::from(EXIT_FAILED),
        ),
    })
}

/// `info`: what the sink says of itself.
async fn info(registry: &Registry, a: &InfoArgs) -> Result<ExitCode, UsageError> {
    let (config, sink) = load_sink(registry, &a.sink.sink).await?;
    // The one statement of the sink's facts; the top-level fields repeat three of them
    // (the output contract predates the manifest).
    let capabilities = ankusa_sink_core::safe_capabilities(&sink)
        .map_err(|e| UsageError(format!("capabilities failed: {e}")))?;
    let info = serde_json::json!({
        "type": config.kind(),
        "durable": capabilities.durable,
        "inline_max_bytes": capabilities.inline_max_bytes.map(|n| n.get()),
        "batched": capabilities.batched,
        "capabilities": capabilities,
    });
    let text = if a.json {
        info.to_string()
    } else {
        let caps = &info["capabilities"];
        format!(
            "type:             {}\ndurable:          {}\ninline_max_bytes: {}\nbatched:          {}\n\
             ok means:         {}\nmax message:      {}\nordering:         {}\n\
             dedupe window s:  {}\nbatch:            {}\nauth:             {}",
            config.kind(),
            info["durable"],
            info["inline_max_bytes"],
            info["batched"],
            caps["ok_means"],
            caps["max_message"],
            caps["ordering"],
            caps["dedupe_window_s"],
            caps["batch"],
            caps["auth"],
        )
    };
    Ok(print(&text, ExitCode::SUCCESS))
}

/// `describe`: one sink's description, or an AsyncAPI document for several.
async fn describe(registry: &Registry, a: &DescribeArgs) -> Result<ExitCode, UsageError> {
    if a.source_id.trim().is_empty() {
        return Err(UsageError("--source-id must not be empty".into()));
    }
    if let Some(t) = &a.tenant {
        ankusa_sink_core::validate_tenant(t)?;
    }
    let subject = Subject::new(a.source_id.clone(), a.tenant.clone());
    let mut described = Vec::new();
    let mut capabilities = Vec::new();
    for spec in &a.sink {
        let (config, sink) = load_sink(registry, spec).await?;
        described.push((config.kind(), safe_describe(&sink, &subject)));
        capabilities.push(ankusa_sink_core::safe_capabilities(&sink).ok());
    }
    let out = if let [(_, one)] = described.as_slice() {
        serde_json::to_value(one)?
    } else {
        asyncapi::document(&subject, &described, &capabilities)
    };
    Ok(print(
        &serde_json::to_string_pretty(&out)?,
        ExitCode::SUCCESS,
    ))
}

/// Run the `ankusa-sink` command line of this process (`std::env::args_os()`) with the sink
/// types of `registry`: what a `main` that adds sinks of its own returns. As
/// [`run_with`].
pub fn main_with(registry: Registry) -> ExitCode {
    run_with(registry, std::env::args_os())
}

/// Run the `ankusa-sink` command line `args` (the program name first, as
/// `std::env::args_os()` gives it) with the sink types of `registry`, and return its exit
/// code. Usage errors, `--help` and `--version` are printed as the binary prints them and
/// return their code instead of exiting the process.
///
/// The command runs on a Tokio runtime of its own. Called within another runtime (in a
/// task, or in `block_on`), where a second one cannot start on the same thread, it runs on
/// a thread of its own and this call blocks until it ends, as any blocking call would:
/// call it from `spawn_blocking` (or a thread of yours) to keep a worker free.
///
/// `deliver` and `forward` handle SIGINT and SIGTERM while they run (a signal stops the
/// run: see the exit codes); when the call returns, the handlers are removed and each
/// signal acts as it did before: a process that did not handle it ends by it again, one
/// that handles it (its own handler, `tokio::signal`) keeps its handling.
pub fn run_with<I, T>(registry: Registry, args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if tokio::runtime::Handle::try_current().is_err() {
        return run_here(registry, args);
    }
    // Starting our runtime on a runtime's thread would panic ("cannot start a runtime from
    // within a runtime"): run on a thread of our own, with a main thread's stack.
    std::thread::scope(|s| {
        let thread = std::thread::Builder::new()
            .name("ankusa-sink".into())
            .stack_size(8 << 20)
            .spawn_scoped(s, move || run_here(registry, args));
        match thread {
            Ok(t) => t
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(e) => {
                output::note(&format!(
                    "ankusa-sink: cannot start a thread for the run: {e}"
                ));
                ExitCode::from(EXIT_FAILED)
            }
        }
    })
}

/// [`run_with`] on this thread, which must not be in a runtime.
fn run_here(registry: Registry, args: Vec<OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // What `Cli::parse` does, without ending the process: help and version on
            // stdout with 0, usage errors on stderr with 2.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(EXIT_USAGE));
        }
    };
    let otlp = match otlp_endpoint(&cli).map(|(raw, insecure)| {
        otlp::endpoint(raw, otlp::headers_set(), insecure).and_then(|e| otlp::Otlp::start(&e))
    }) {
        None => None,
        Some(Ok(o)) => Some(o),
        Some(Err(msg)) => {
            output::note(&format!("ankusa-sink: {}", output::escape_control(&msg)));
            return ExitCode::from(EXIT_USAGE);
        }
    };
    init_logging(otlp.as_ref());
    // One thread runs every task: a delivery is a handful of short steps (submit, schedule,
    // publish, report) handed between tasks, and on one thread those hand-offs are queue
    // pushes rather than wake-ups of another thread. Input parsing has a thread of its own
    // (`lines`), the clients theirs (librdkafka, the blocking pool).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            output::note(&format!("ankusa-sink: cannot start the runtime: {e}"));
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let code = match rt.block_on(run(cli, &registry)) {
        Ok(code) => code,
        Err(UsageError(msg)) => {
            output::note(&format!("ankusa-sink: {}", output::escape_control(&msg)));
            ExitCode::from(EXIT_USAGE)
        }
    };
    // A read of stdin may still be blocked on its thread after a stop: don't wait for it.
    rt.shutdown_background();
    if let Some(o) = otlp {
        o.shutdown();
    }
    logging::flush(std::time::Duration::from_millis(500));
    code
}

#[cfg(test)]
mod tests {
    use super::{ExitCode, Registry, log_directives, run_with};

    /// `run_with` is a library call: clap's own exits (help, version, usage errors) come
    /// back as exit codes instead of ending the caller's process.
    #[test]
    fn help_version_and_usage_errors_return_their_code() {
        let run = |args: &[&str]| run_with(Registry::builtin(), args.iter().copied());
        // A usage error first: had it exited, the test binary would have ended with 2.
        assert_eq!(
            run(&["ankusa-sink", "forward", "--bogus"]),
            ExitCode::from(super::EXIT_USAGE)
        );
        assert_eq!(run(&["ankusa-sink"]), ExitCode::from(super::EXIT_USAGE));
        assert_eq!(run(&["ankusa-sink", "--version"]), ExitCode::SUCCESS);
        assert_eq!(run(&["ankusa-sink", "gen", "--help"]), ExitCode::SUCCESS);
    }

    const FORWARD_NOTHING: [&str; 6] = [
        "ankusa-sink",
        "forward",
        "--sink",
        "log",
        "--input",
        "/dev/null",
    ];

    /// Inside a runtime (here a current-thread one, in `block_on`), `run_with` used to
    /// panic ("cannot start a runtime from within a runtime"); it runs the command on a
    /// thread of its own.
    #[tokio::test]
    async fn run_with_inside_a_runtime_runs_the_command() {
        assert_eq!(
            run_with(Registry::builtin(), FORWARD_NOTHING),
            ExitCode::SUCCESS
        );
        assert_eq!(
            run_with(Registry::builtin(), ["ankusa-sink", "gen", "--count", "0"]),
            ExitCode::SUCCESS
        );
        // A task of a multi-thread runtime too.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let code = rt
            .spawn(async { run_with(Registry::builtin(), FORWARD_NOTHING) })
            .await
            .unwrap();
        assert_eq!(code, ExitCode::SUCCESS);
        rt.shutdown_background();
    }

    /// What [`signals_act_as_before_once_it_returns`] runs in a process of its own: a run
    /// that watches signals, a line once it returned, then a wait the signal must cut.
    #[test]
    #[ignore = "a child process of signals_act_as_before_once_it_returns"]
    fn signal_child() {
        if std::env::var_os("ANKUSA_SIGNAL_CHILD").is_none() {
            return;
        }
        assert_eq!(
            run_with(Registry::builtin(), FORWARD_NOTHING),
            ExitCode::SUCCESS
        );
        println!("ANKUSA-SIGNAL-CHILD-RETURNED");
        std::thread::sleep(std::time::Duration::from_secs(30));
    }

    /// Once `run_with` returned, SIGINT and SIGTERM end a process that did not handle them,
    /// as before the call: `tokio::signal`'s handlers stayed and dropped each one.
    #[test]
    fn signals_act_as_before_once_it_returns() {
        use std::io::BufRead as _;
        use std::os::unix::process::ExitStatusExt as _;
        for (sig, number) in [("-INT", 2), ("-TERM", 15)] {
            let mut child = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "tests::signal_child", "--ignored", "--nocapture"])
                .env("ANKUSA_SIGNAL_CHILD", "1")
                .env("RUST_LOG", "off")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
            let returned = stdout
                .lines()
                .map_while(Result::ok)
                .any(|l| l.contains("ANKUSA-SIGNAL-CHILD-RETURNED"));
            assert!(returned, "the child's run did not return");
            let sent = std::process::Command::new("kill")
                .args([sig, &child.id().to_string()])
                .status()
                .unwrap();
            assert!(sent.success());
            // Had the signal been dropped, the child would sleep on and exit 0.
            let status = child.wait().unwrap();
            assert_eq!(status.signal(), Some(number), "{sig}: {status:?}");
        }
    }

    #[test]
    fn client_targets_are_held_down_unless_named() {
        let d = log_directives("trace");
        assert!(d.starts_with("trace,"), "{d}");
        assert!(
            d.contains(",lapin=off") && d.contains(",amq_protocol=off"),
            "{d}"
        );
        assert!(d.contains(",h2=warn") && d.contains(",hyper=warn"), "{d}");
        let d = log_directives("info,lapin=trace,h2::codec=debug");
        assert!(!d.contains("lapin=off"), "{d}");
        assert!(!d.contains(",h2=warn"), "{d}");
        assert!(d.contains("amq_protocol=off"), "{d}");
        tracing_subscriber::EnvFilter::try_new(log_directives("debug")).unwrap();
    }

    #[test]
    fn attempt_spans_are_off_at_info_unless_asked_for() {
        for spec in ["info", "warn", "info,ankusa_sink_kafka=debug"] {
            assert!(
                log_directives(spec).ends_with(",ankusa_dispatch::attempt=warn"),
                "{spec}"
            );
        }
        for spec in [
            "debug",
            "TRACE",
            "info,ankusa_dispatch=info",
            "ankusa_dispatch::attempt",
        ] {
            assert!(
                !log_directives(spec).contains("ankusa_dispatch::attempt=warn"),
                "{spec}"
            );
        }
    }
}

//! `ankusa-sink`: send hooks to a sink, test its credentials, and see why a delivery fails.
//!
//! Exit codes: 0 all delivered (or check passed), 2 bad usage, config or input,
//! 3 at least one delivery (or the check) failed.

mod asyncapi;
mod deliver;
mod gen_cmd;

use ankusa_sink_core::{Check, Sink, Subject, resolve_describe};
use ankusa_sinks::SinkConfig;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Exit code for bad usage, config or input.
const EXIT_USAGE: u8 = 2;
/// Exit code when a delivery or check failed.
const EXIT_FAILED: u8 = 3;

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
}

#[derive(Args, Debug)]
struct SinkArg {
    /// A sink config file (TOML, tagged by `type`), or `log` for the embedded default.
    #[arg(long)]
    sink: String,
}

#[derive(Args, Debug)]
struct RetryArgs {
    /// Retry by the dispatch rules until delivered or dead-lettered.
    #[arg(long)]
    retry: bool,
    /// With --retry: dead-letter a hook still failing this many seconds after its first attempt.
    #[arg(long, default_value_t = 86_400, value_name = "SECONDS")]
    max_elapsed: u64,
    /// With --retry: give up after this many attempts.
    #[arg(long, default_value_t = 84, value_name = "N")]
    max_attempts: u32,
    /// Abandon an attempt that has not answered after this many seconds (transient).
    #[arg(long, default_value_t = 30, value_name = "SECONDS")]
    attempt_timeout: u64,
    /// One JSON outcome line per hook on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct DeliverArgs {
    #[command(flatten)]
    sink: SinkArg,
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
    /// The attempt number of the first attempt.
    #[arg(long, default_value_t = 1)]
    attempt: u32,
    #[command(flatten)]
    retry: RetryArgs,
}

#[derive(Args, Debug)]
struct ForwardArgs {
    #[command(flatten)]
    sink: SinkArg,
    /// Envelopes as JSON lines (body in `body_base64`): a file, or `-` for stdin.
    #[arg(long, default_value = "-")]
    input: String,
    /// Deliveries in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    #[command(flatten)]
    retry: RetryArgs,
}

#[derive(Args, Debug)]
struct GenArgs {
    /// How many envelopes.
    #[arg(long, default_value_t = 10)]
    count: u64,
    /// Body bytes of each.
    #[arg(long, default_value_t = 256)]
    size: usize,
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

async fn load_config(spec: &str) -> Result<SinkConfig, UsageError> {
    if spec == "log" {
        return Ok(SinkConfig::log());
    }
    let text = tokio::fs::read_to_string(spec)
        .await
        .map_err(|e| UsageError(format!("cannot read sink config {spec}: {e}")))?;
    let parsed = if PathBuf::from(spec).extension().is_some_and(|e| e == "json") {
        SinkConfig::from_json_str(&text)
    } else {
        SinkConfig::from_toml_str(&text)
    };
    parsed.map_err(|e| UsageError(format!("{spec}: {e}")))
}

async fn load_sink(spec: &str) -> Result<(SinkConfig, Arc<dyn Sink>), UsageError> {
    let config = load_config(spec).await?;
    let sink = config
        .build()
        .await
        .map_err(|e| UsageError(format!("{spec}: {e}")))?;
    Ok((config, sink))
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

async fn run(cli: Cli) -> Result<ExitCode, UsageError> {
    match cli.command {
        Command::Gen(a) => gen_cmd::run(&a).map(|()| ExitCode::SUCCESS),
        Command::Deliver(a) => {
            let (config, sink) = load_sink(&a.sink.sink).await?;
            deliver::deliver_one(&a, config.kind(), sink).await
        }
        Command::Forward(a) => {
            let (config, sink) = load_sink(&a.sink.sink).await?;
            deliver::forward(&a, config.kind(), sink).await
        }
        Command::Check(a) => {
            let (config, sink) = load_sink(&a.sink).await?;
            match sink.check().await {
                Ok(Check::Passed) => {
                    println!("check passed: {} sink", config.kind());
                    Ok(ExitCode::SUCCESS)
                }
                Ok(Check::Unsupported) => {
                    println!("the {} sink has no preflight check", config.kind());
                    Ok(ExitCode::SUCCESS)
                }
                Err(f) => {
                    println!("check failed: {f}");
                    Ok(ExitCode::from(EXIT_FAILED))
                }
            }
        }
        Command::Info(a) => {
            let (config, sink) = load_sink(&a.sink.sink).await?;
            let threshold = ankusa_sink_core::resolve_inline_max_bytes(&sink)
                .map_err(|e| UsageError(e.to_string()))?;
            let info = serde_json::json!({
                "type": config.kind(),
                "durable": ankusa_sink_core::resolve_durable(&sink),
                "inline_max_bytes": threshold.map(|n| n.get()),
                "batched": ankusa_sink_core::resolve_batched(&sink),
            });
            if a.json {
                println!("{info}");
            } else {
                println!("type:             {}", config.kind());
                println!("durable:          {}", info["durable"]);
                println!("inline_max_bytes: {}", info["inline_max_bytes"]);
                println!("batched:          {}", info["batched"]);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Describe(a) => {
            let subject = Subject::new(a.source_id.clone(), a.tenant.clone());
            let mut described = Vec::new();
            for spec in &a.sink {
                let (config, sink) = load_sink(spec).await?;
                described.push((config.kind(), resolve_describe(&sink, &subject)));
            }
            let out = if let [(_, one)] = described.as_slice() {
                serde_json::to_value(one)?
            } else {
                asyncapi::document(&subject, &described)
            };
            println!("{}", serde_json::to_string_pretty(&out)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ankusa-sink: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(UsageError(msg)) => {
            eprintln!("ankusa-sink: {msg}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

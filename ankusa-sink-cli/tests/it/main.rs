//! End to end through the `ankusa-sink` binary.

/// Return from the test unless it may use each broker named (`ANKUSA_TEST_BROKERS`: 0
/// skips it with a `SKIP` line; 1 or unset fails it when one cannot be reached).
macro_rules! needs {
    ($($broker:literal),+) => {
        $(ankusa_sink_testkit::require_broker!($broker, crate::broker_addr($broker));)+
    };
}

mod amqp_fanout;
mod asyncapi;
mod aws_streams;
mod brokers;
mod capabilities;
mod cloudevents;
mod config_errors;
mod dead_letters;
mod dispatch_brokers;
mod dispatch_http;
mod from_amqp;
mod from_kafka;
mod from_nats;
mod from_source;
mod hardening;
mod http;
mod isolation;
mod log_sink;
mod metrics_listener;
mod mqtt_sink;
mod nats;
mod operator_faults;
mod pubsub;
mod ranges;
mod redis_sink;
mod signed;
mod tenants;
mod trace_context;

use ankusa_sink_testkit::support::unique_name;
use async_nats::jetstream::{self, stream};
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// The binary under test.
fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ankusa-sink"));
    c.env("RUST_LOG", "warn");
    // Never let the AWS credential chain reach for instance metadata off loopback.
    c.env("AWS_EC2_METADATA_DISABLED", "true");
    c
}

/// Run with `args`, returning the output.
fn run(args: &[&str]) -> Output {
    run_with(args, &[])
}

/// [`run`] with `env` for the child.
fn run_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    bin()
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs")
}

/// Spawn with `args` and `stdin`, stdout and stderr piped.
fn spawn_piped(args: &[&str], stdin: impl Into<Stdio>) -> Child {
    bin()
        .args(args)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs")
}

/// `forward --sink log --input INPUT` with `extra` arguments.
fn forward_log(input: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "forward",
        "--sink",
        "log",
        "--input",
        input.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run(&args)
}

/// `host:port` of a broker the tests use, by the name `needs!` gives it.
fn broker_addr(broker: &str) -> String {
    match broker {
        "Kafka" => from_kafka::brokers()
            .split(',')
            .next()
            .unwrap_or_default()
            .to_owned(),
        "RabbitMQ" => {
            let url = amqp_url();
            let after_login = url.rsplit('@').next().unwrap_or_default().to_owned();
            let host = after_login.trim_start_matches("amqp://");
            host.split('/').next().unwrap_or_default().to_owned()
        }
        "NATS" => "127.0.0.1:4222".to_owned(),
        "Redis" => "127.0.0.1:6379".to_owned(),
        "Mosquitto" => "127.0.0.1:1883".to_owned(),
        "Pub/Sub emulator" => "127.0.0.1:8085".to_owned(),
        "moto" => "127.0.0.1:4566".to_owned(),
        other => panic!("no address for the broker {other}"),
    }
}

/// RabbitMQ: `ANKUSA_AMQP_URL`, default the broker the test script starts.
fn amqp_url() -> String {
    std::env::var("ANKUSA_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// A connection to RabbitMQ and a channel on it.
async fn amqp_channel() -> (Connection, Channel) {
    let conn = Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .expect("RabbitMQ on ANKUSA_AMQP_URL (run scripts/services/rabbitmq.sh)");
    let ch = conn.create_channel().await.unwrap();
    (conn, ch)
}

/// A fresh queue with the default options; its name.
async fn amqp_queue(ch: &Channel) -> String {
    let queue = unique_name("cli-q");
    ch.queue_declare(
        queue.as_str().into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    queue
}

/// The NATS server the test script starts.
const NATS_URL: &str = "nats://127.0.0.1:4222";

/// A fresh JetStream stream on [`NATS_URL`]: the context, the stream's name and the one
/// subject it takes.
async fn nats_stream(prefix: &str) -> (jetstream::Context, String, String) {
    let name = unique_name(prefix).replace(['-', '.'], "_");
    let subject = format!("ankusa.cli.{name}");
    let client = async_nats::connect(NATS_URL)
        .await
        .expect("NATS is running (scripts/services/nats.sh)");
    let js = jetstream::new(client);
    js.create_stream(stream::Config {
        name: name.clone(),
        subjects: vec![subject.clone()],
        ..Default::default()
    })
    .await
    .unwrap();
    (js, name, subject)
}

/// A file in a fresh temp dir, unique per call.
fn temp_file(name: &str, contents: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique_name("ankusa-cli"));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, contents).unwrap();
    // Private, as a dead-letter file must be (one the run finds in place is refused
    // otherwise) and as a sink file with credentials should be.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

/// `check` passes and one `deliver --id ID --json` is exactly ok, with `env` for the child.
fn check_then_deliver(sink: &Path, id: &str, env: &[(&str, &str)]) {
    let sink = sink.to_str().unwrap();
    let out = run_with(&["check", "--sink", sink], env);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("check passed"),
        "{}",
        text(&out.stdout)
    );
    let out = run_with(&["deliver", "--sink", sink, "--id", id, "--json"], env);
    assert_delivered(&out, id, sink_name(sink), 1);
}

/// [`check_then_deliver`] of `id`, then 20 generated hooks of 300 bytes through `forward
/// --json --concurrency 16`, which exits 0: 21 messages at the sink.
fn check_deliver_then_forward_20(sink: &Path, id: &str) {
    check_then_deliver(sink, id, &[]);
    let hooks = temp_file(
        "hooks.jsonl",
        &text(&run(&["gen", "--count", "20", "--size", "300"]).stdout),
    );
    let out = bin()
        .args(["forward", "--sink", sink.to_str().unwrap(), "--input"])
        .arg(&hooks)
        .args(["--json", "--concurrency", "16"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// `out` exited 0 and its stdout is exactly the ok line of `id` at `sink`.
fn assert_delivered(out: &Output, id: &str, sink: &str, attempts: u32) {
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        format!(r#"{{"id":"{id}","sink":"{sink}","outcome":"ok","attempts":{attempts}}}"#)
    );
}

/// `check` of `sink` fails (exit 3) and says it is the config; the output, for more checks.
fn check_says_config(sink: &Path, env: &[(&str, &str)]) -> Output {
    let out = run_with(&["check", "--sink", sink.to_str().unwrap()], env);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("config"),
        "{}",
        text(&out.stdout)
    );
    out
}

/// `deliver --json` to `sink` fails (exit 3) with class config.
fn deliver_says_config(sink: &Path, env: &[(&str, &str)]) {
    let out = run_with(
        &["deliver", "--sink", sink.to_str().unwrap(), "--json"],
        env,
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(r#""class":"config""#),
        "{}",
        text(&out.stdout)
    );
}

/// `describe` of `sink` passes and prints none of `secrets`, on stdout or stderr.
fn assert_describe_hides(sink: &Path, secrets: &[&str]) {
    let out = run(&[
        "describe",
        "--sink",
        sink.to_str().unwrap(),
        "--source-id",
        "s",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for printed in [text(&out.stdout), text(&out.stderr)] {
        for secret in secrets {
            assert!(!printed.contains(secret), "{secret} printed: {printed}");
        }
    }
}

/// The name a sink file gets in outcome lines: its stem.
fn sink_name(path: &str) -> &str {
    Path::new(path)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or(path)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Each line of `--json` output, parsed.
fn json_lines(bytes: &[u8]) -> Vec<Value> {
    text(bytes)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// A loopback address nothing listens on (just released).
fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// `/metrics` of a run, or `None` while nothing answers there.
fn scrape(addr: std::net::SocketAddr) -> Option<String> {
    use std::io::{Read as _, Write as _};
    let mut c = std::net::TcpStream::connect(addr).ok()?;
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok()?;
    c.write_all(b"GET /metrics HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
        .ok()?;
    let mut out = String::new();
    c.read_to_string(&mut out).ok()?;
    out.starts_with("HTTP/1.1 200").then_some(out)
}

/// The value of the series `name{sink="<sink>"}` in a scrape, or of `name` without labels
/// when `sink` is empty.
fn metric(scraped: &str, name: &str, sink: &str) -> Option<f64> {
    let prefix = if sink.is_empty() {
        format!("{name} ")
    } else {
        format!("{name}{{sink=\"{sink}\"}} ")
    };
    scraped
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// A child's stdout, line by line, read on a thread of its own (a pipe nobody reads would
/// stall the child).
fn stdout_lines(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead as _;
    let stdout = child.stdout.take().expect("stdout piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

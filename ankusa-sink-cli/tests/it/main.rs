//! End to end through the `ankusa-sink` binary.

mod asyncapi;
mod brokers;
mod capabilities;
mod cloudevents;
mod config_errors;
mod dispatch_brokers;
mod dispatch_http;
mod from_amqp;
mod from_kafka;
mod from_nats;
mod from_source;
mod hardening;
mod http;
mod log_sink;
mod nats;
mod pubsub;
mod redis_sink;
mod signed;

use ankusa_sink_testkit::support::unique_name;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

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
    bin()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs")
}

/// RabbitMQ: `ANKUSA_AMQP_URL`, default the broker the test script starts.
fn amqp_url() -> String {
    std::env::var("ANKUSA_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// A file in a fresh temp dir, unique per call.
fn temp_file(name: &str, contents: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique_name("ankusa-cli"));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, contents).unwrap();
    p
}

/// `check` passes and one `deliver --id ID --json` is exactly ok, with `env` for the child.
fn check_then_deliver(sink: &std::path::Path, id: &str, env: &[(&str, &str)]) {
    let sink = sink.to_str().unwrap();
    let out = bin()
        .args(["check", "--sink", sink])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
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
    let out = bin()
        .args(["deliver", "--sink", sink, "--id", id, "--json"])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        format!(
            r#"{{"id":"{id}","sink":"{}","outcome":"ok","attempts":1}}"#,
            sink_name(sink)
        )
    );
}

/// The name a sink file gets in outcome lines: its stem.
fn sink_name(path: &str) -> &str {
    std::path::Path::new(path)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or(path)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

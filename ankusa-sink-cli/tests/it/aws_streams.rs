//! Kinesis and EventBridge end to end through sink files: `check`, `deliver` and a batched
//! `forward` to moto, every record and event read back by boto3
//! (`scripts/interop/aws_streams_read.py`, which checks each Message v1, the partition key,
//! the event's source and detail type), then decoded again here with `ankusa_message::decode`; a
//! missing stream or bus is config for `check` and `deliver`; a `[signing]` table, which
//! neither service can carry, is refused when the file is read.

use super::signed::python;
use super::{check_says_config, deliver_says_config, run, temp_file, text};
use ankusa_sink_testkit::support::unique_name;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

const AWS_ENV: [(&str, &str); 3] = [
    ("AWS_ACCESS_KEY_ID", "testing"),
    ("AWS_SECRET_ACCESS_KEY", "testing"),
    ("AWS_EC2_METADATA_DISABLED", "true"),
];

const MOTO: &str = "region = \"us-east-1\"\nendpoint = \"http://127.0.0.1:4566\"\n";

#[test]
fn kinesis_and_eventbridge_deliver_what_boto3_reads_back() {
    needs!("moto");
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/interop/aws_streams_read.py");
    let out = Command::new(python())
        .env("RUST_LOG", "warn")
        .arg(script)
        .arg("--cli")
        .arg(env!("CARGO_BIN_EXE_ankusa-sink"))
        .output()
        .expect("python runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "boto3 read back otherwise:\n{stderr}");
    let read: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    for sink in ["kinesis", "eventbridge"] {
        let messages = read[sink].as_array().unwrap_or_else(|| panic!("{read}"));
        assert_eq!(messages.len(), 22, "{sink}: 2 delivered, 20 forwarded");
        let mut delivered = 0;
        for m in messages {
            let body = STANDARD.decode(m["body_b64"].as_str().unwrap()).unwrap();
            let msg = ankusa_message::decode(&body).unwrap_or_else(|e| panic!("{sink}: {e}"));
            if msg.id.starts_with("streams-") {
                delivered += 1;
                assert_eq!(msg.tenant_id.as_deref(), Some("acme"), "{sink}");
                assert_eq!(msg.source_id, "stripe", "{sink}");
                if sink == "kinesis" {
                    assert_eq!(m["headers"]["partition_key"], "acme:stripe:evt_1");
                }
            } else {
                assert_eq!(msg.source_id, "gen", "{sink}: {}", msg.id);
            }
        }
        assert_eq!(delivered, 2, "{sink}");
    }
}

/// The example files parse and build (nothing is contacted).
#[test]
fn the_example_files_build() {
    for ty in ["kinesis", "eventbridge"] {
        let example =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../examples/sinks/{ty}.toml"));
        let out = run(&["info", "--sink", example.to_str().unwrap(), "--json"]);
        assert_eq!(out.status.code(), Some(0), "{ty}: {}", text(&out.stderr));
        let info: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(info["type"], ty);
        assert_eq!(info["batched"], true, "{info}");
    }
}

#[test]
fn a_missing_stream_or_bus_is_config_and_signing_is_refused() {
    needs!("moto");
    let stream = temp_file(
        "kinesis.toml",
        &format!(
            "type = \"kinesis\"\nstream = \"{}\"\n{MOTO}",
            unique_name("cli-absent")
        ),
    );
    let out = check_says_config(&stream, &AWS_ENV);
    assert!(
        text(&out.stdout).contains("ResourceNotFoundException"),
        "{}",
        text(&out.stdout)
    );
    deliver_says_config(&stream, &AWS_ENV);
    let bus = temp_file(
        "eventbridge.toml",
        &format!(
            "type = \"eventbridge\"\nevent_bus_name = \"{}\"\nsource = \"com.example\"\n{MOTO}",
            unique_name("cli-absent")
        ),
    );
    check_says_config(&bus, &AWS_ENV);
    deliver_says_config(&bus, &AWS_ENV);

    for (name, keys) in [
        ("kinesis.toml", "type = \"kinesis\"\nstream = \"s\"\n"),
        (
            "eventbridge.toml",
            "type = \"eventbridge\"\nsource = \"com.example\"\n",
        ),
    ] {
        let signed = temp_file(
            name,
            &format!(
                "{keys}{MOTO}[signing]\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\n"
            ),
        );
        let out = run(&["check", "--sink", signed.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        let said = text(&out.stderr);
        assert!(said.contains("`signing` is not supported"), "{said}");
        assert!(!said.contains("MfKQ9r8"), "{said}");
        let aws_source = temp_file(
            name,
            "type = \"eventbridge\"\nsource = \"aws.events\"\nregion = \"us-east-1\"\n",
        );
        let out = run(&["check", "--sink", aws_source.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains("reserved for AWS"));
    }
}

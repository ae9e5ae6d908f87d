//! CloudEvents end to end: `deliver` to the HTTP, Kafka, AMQP and Pub/Sub sinks with
//! `format = "cloudevents"` and `"cloudevents-structured"`, every message read back and
//! parsed by the official CloudEvents SDK for Python (`scripts/interop/cloudevents_read.py`,
//! which checks each event's attributes, extensions and data).

use super::signed::python;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

#[test]
fn http_kafka_amqp_and_pubsub_send_what_the_cloudevents_sdk_reads() {
    needs!("Kafka", "RabbitMQ", "Pub/Sub emulator");
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/interop/cloudevents_read.py");
    let out = Command::new(python())
        .arg(script)
        .arg("--cli")
        .arg(env!("CARGO_BIN_EXE_ankusa-sink"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("python runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the CloudEvents SDK refused:\n{stderr}"
    );
    let read: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    for target in ["http", "kafka", "amqp", "pubsub"] {
        for mode in ["binary", "structured"] {
            let events = read[target][mode]
                .as_array()
                .unwrap_or_else(|| panic!("{read}"));
            assert_eq!(events.len(), 2, "{target} {mode}: {read}");
        }
    }
    assert_eq!(
        read["kafka"]["structured"][0]["type"],
        "com.example.hook.v1"
    );
}

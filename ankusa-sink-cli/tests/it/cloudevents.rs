//! Message parity end to end: every message-publishing sink (HTTP, Kafka, AMQP, Pub/Sub,
//! SQS, SNS, NATS JetStream, Redis streams, MQTT) in every `format` (Message v1 — HTTP's
//! raw body —, `cloudevents`, `cloudevents-structured`), unsigned and signed, through
//! `deliver`, every message read back by independent consumers
//! (`scripts/interop/cloudevents_read.py`: each broker's own Python client, the official
//! CloudEvents SDK for Python, the Standard Webhooks reference library), which check each
//! message's attributes, extensions, data, trace context and signature. One script run
//! (one CLI run per variant and hook, to all nine sinks at once); one table of rows here,
//! each named in the failure message.

use super::signed::python;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

/// The sinks that publish a message, as the script names them.
const ADAPTERS: [&str; 9] = [
    "http", "kafka", "amqp", "pubsub", "sqs", "sns", "nats", "redis", "mqtt",
];

/// Each `format` of a sink file (`message` for Message v1, HTTP's raw body: no key) and
/// the script's variant for it.
const FORMATS: [(&str, &str); 3] = [
    ("message", "message"),
    ("cloudevents", "binary"),
    ("cloudevents-structured", "structured"),
];

/// A fresh 32-byte key as a `whsec_` secret.
fn secret() -> String {
    let key: [u8; 32] = rand::random();
    format!("whsec_{}", STANDARD.encode(key))
}

/// One row of the table: an adapter in a format, signed or not.
struct Row {
    adapter: &'static str,
    format: &'static str,
    variant: String,
    signed: bool,
}

impl Row {
    /// How many messages the consumer reads back: both hooks, except on SQS and SNS in
    /// binary mode, which refuse the binary hook's data (not UTF-8; checked permanent by
    /// the script).
    fn want(&self) -> usize {
        if self.format == "cloudevents" && matches!(self.adapter, "sqs" | "sns") {
            1
        } else {
            2
        }
    }
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let signed = if self.signed { "signed" } else { "unsigned" };
        write!(f, "({}, format = {}, {signed})", self.adapter, self.format)
    }
}

fn rows() -> Vec<Row> {
    let mut rows = Vec::new();
    for adapter in ADAPTERS {
        for (format, variant) in FORMATS {
            for signed in [false, true] {
                let variant = if signed {
                    format!("{variant}+signed")
                } else {
                    variant.to_owned()
                };
                rows.push(Row {
                    adapter,
                    format,
                    variant,
                    signed,
                });
            }
        }
    }
    rows
}

#[test]
fn every_adapter_format_and_signing_is_read_back_by_independent_consumers() {
    needs!(
        "Kafka",
        "RabbitMQ",
        "Pub/Sub emulator",
        "moto",
        "NATS",
        "Redis",
        "Mosquitto"
    );
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/interop/cloudevents_read.py");
    let (old, new) = (secret(), secret());
    let out = Command::new(python())
        .arg(script)
        .arg("--cli")
        .arg(env!("CARGO_BIN_EXE_ankusa-sink"))
        .args(["--secret", &old, "--secret", &new])
        .env("RUST_LOG", "warn")
        .output()
        .expect("python runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let read: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("the script printed no JSON object ({e}); its stderr:\n{stderr}")
    });
    // The failed checks, each `<adapter> <variant>: ...` (stderr also holds the brokers'
    // client logs).
    let problems: Vec<&str> = read["problems"]
        .as_array()
        .unwrap_or_else(|| panic!("no problems list: {read}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let rows = rows();
    let mut failures = Vec::new();
    for row in &rows {
        let prefix = format!("{} {}:", row.adapter, row.variant);
        let mine: Vec<&&str> = problems.iter().filter(|p| p.starts_with(&prefix)).collect();
        let got = read[row.adapter][&row.variant]
            .as_array()
            .map_or(0, Vec::len);
        if got != row.want() || !mine.is_empty() {
            failures.push(format!(
                "{row}: read back {got} of {} messages; {mine:?}",
                row.want()
            ));
        }
    }
    // A problem no row owns (a delivery run that failed as a whole, a cleanup): named by
    // the variant it mentions, else as it is.
    for p in &problems {
        let owned = rows
            .iter()
            .any(|r| p.starts_with(&format!("{} {}:", r.adapter, r.variant)));
        if !owned {
            failures.push(format!("every row of the run: {p}"));
        }
    }
    assert!(
        failures.is_empty() && out.status.success(),
        "{} of {} rows failed:\n{}\n(stderr:\n{stderr})",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
    // Spot checks of what the consumers saw.
    assert_eq!(
        read["kafka"]["structured"][0]["type"],
        "com.example.hook.v1"
    );
    assert_eq!(
        read["sqs"]["binary+signed"][0]["type"],
        "ankusa.hook.received"
    );
}

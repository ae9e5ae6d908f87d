//! Signed broker messages end to end: `deliver` with a `[signing]` table to every Message v1
//! sink, each message read back by its broker's own Python client and verified with the
//! Standard Webhooks reference library (`scripts/interop/signed_messages.py`, which also
//! proves a tampered body and a stale timestamp fail), then verified again here with
//! `ankusa_message::verify`, under each key of the rotation. The script also checks each message's
//! W3C trace context: a child of the hook's `traceparent` with its `tracestate`, or a new
//! trace for a hook without one.

use ankusa_message::VerifiedError;
use ankusa_message::signing::{Signer, VerifyError};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::time::SystemTime;

/// The interop venv's Python (`scripts/services/interop.sh`).
pub(crate) fn python() -> PathBuf {
    ankusa_sink_testkit::support::interop_python()
}

/// A fresh 32-byte key as a `whsec_` secret.
fn secret() -> String {
    let key: [u8; 32] = rand::random();
    format!("whsec_{}", STANDARD.encode(key))
}

#[test]
fn every_message_v1_sink_signs_what_python_consumers_verify() {
    needs!(
        "Kafka",
        "RabbitMQ",
        "moto",
        "Pub/Sub emulator",
        "NATS",
        "Redis",
        "Mosquitto"
    );
    let (old, new) = (secret(), secret());
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/interop/signed_messages.py");
    let cli = env!("CARGO_BIN_EXE_ankusa-sink");
    let out = Command::new(python())
        .env("RUST_LOG", "warn")
        .arg(script)
        .arg("--cli")
        .arg(cli)
        .args(["--secret", &old, "--secret", &new])
        .output()
        .expect("python runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Python consumers refused:\n{stderr}"
    );
    let read: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let brokers = read.as_object().unwrap();
    assert_eq!(brokers.len(), 8, "{:?}", brokers.keys());

    let (both, only_old, only_new) = (
        Signer::new([&old, &new]).unwrap(),
        Signer::new([&old]).unwrap(),
        Signer::new([&new]).unwrap(),
    );
    let other = Signer::new([secret()]).unwrap();
    for (broker, messages) in brokers {
        let messages = messages.as_array().unwrap();
        assert_eq!(messages.len(), 2, "{broker}");
        for (m, replay) in messages.iter().zip([None, Some("replay-7")]) {
            let h = |name: &str| m["headers"][name].as_str().unwrap_or_default().to_owned();
            let body = STANDARD.decode(m["body_b64"].as_str().unwrap()).unwrap();
            let check = |signer: &Signer| {
                ankusa_message::verify(
                    signer,
                    &h("webhook-id"),
                    &h("webhook-timestamp"),
                    &h("webhook-signature"),
                    &body,
                    SystemTime::now(),
                )
            };
            for signer in [&both, &only_old, &only_new] {
                let msg = check(signer).unwrap_or_else(|e| panic!("{broker}: {e}"));
                assert_eq!(msg.replay_id.as_deref(), replay, "{broker}");
                assert_eq!(msg.tenant_id.as_deref(), Some("acme"), "{broker}");
            }
            assert!(
                matches!(
                    check(&other),
                    Err(VerifiedError::Signature(VerifyError::NoMatch))
                ),
                "{broker}: a key outside the rotation verified"
            );
        }
    }
    // SQS and SNS stay within 10 attributes, leaving out values the body carries: the
    // traced hook (7 + 3 signing + traceparent and tracestate) its message version and
    // dedupe key, the replay (8 + 3 + traceparent) its message version and replay id.
    for broker in ["sqs", "sns"] {
        for (m, gone) in read[broker].as_array().unwrap().iter().zip([
            ["ankusa_message_version", "ankusa_dedupe_key"],
            ["ankusa_message_version", "ankusa_replay_id"],
        ]) {
            let headers = m["headers"].as_object().unwrap();
            assert_eq!(headers.len(), 10, "{broker}: {headers:?}");
            assert!(headers.contains_key("traceparent"), "{broker}");
            for g in gone {
                assert!(!headers.contains_key(g), "{broker}: {g}");
            }
        }
    }
}

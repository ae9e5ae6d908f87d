//! The MQTT sink through the binary, by config only, against the Mosquitto on
//! 127.0.0.1:1883, read back by Python's paho-mqtt (`scripts/interop/brokers.py mqtt-read`).

use super::signed::python;
use super::{
    assert_describe_hides, check_deliver_then_forward_20, deliver_says_config, run_with, temp_file,
    text,
};
use ankusa_sink_testkit::support::unique_name;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn mqtt_addr() -> String {
    std::env::var("ANKUSA_MQTT_ADDR").unwrap_or_else(|_| "127.0.0.1:1883".to_owned())
}

/// A paho-mqtt subscriber to `topic` for `count` messages, subscribed once this returns;
/// `finish` gives what it read.
struct Reader(std::process::Child, BufReader<std::process::ChildStdout>);

impl Reader {
    fn start(topic: &str, count: usize) -> Reader {
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/interop/brokers.py");
        let mut child = Command::new(python())
            .arg(script)
            .args(["mqtt-read", "--topic", topic, "--count", &count.to_string()])
            .env("ANKUSA_MQTT_ADDR", mqtt_addr())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python runs");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        Reader(child, out)
    }

    fn finish(mut self) -> Vec<Value> {
        let mut line = String::new();
        self.1.read_line(&mut line).unwrap();
        assert!(self.0.wait().unwrap().success(), "{line}");
        serde_json::from_str::<Value>(&line)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }
}

#[test]
fn mqtt_from_a_config_file_read_back_by_paho() {
    needs!("Mosquitto");
    let topic = format!("cli/{}", unique_name("mqtt"));
    let reader = Reader::start(&topic, 21);
    let f = temp_file(
        "mqtt.toml",
        &format!(
            "type = \"mqtt\"\nurl = \"mqtt://{}\"\ntopic = \"{topic}\"\n",
            mqtt_addr()
        ),
    );
    check_deliver_then_forward_20(&f, "m-1");
    let got = reader.finish();
    assert_eq!(got.len(), 21);
    let mut ids = Vec::new();
    for m in &got {
        assert_eq!(m["content_type"], "application/json");
        let body = STANDARD.decode(m["payload_b64"].as_str().unwrap()).unwrap();
        let msg = ankusa_message::decode(&body).expect("Message v1");
        assert_eq!(
            m["user_properties"][0],
            serde_json::json!(["ankusa_id", msg.id])
        );
        ids.push(msg.id);
    }
    assert!(ids.contains(&"m-1".to_owned()), "{ids:?}");
    // The example file passes the preflight (which publishes nothing).
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/sinks/mqtt.toml");
    let out = run_with(
        &["check", "--sink", example.to_str().unwrap()],
        &[("ANKUSA_MQTT_URL", &format!("mqtt://{}", mqtt_addr()))],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

#[test]
fn mqtt_topic_without_subscriber_is_config_and_never_shows_the_password() {
    needs!("Mosquitto");
    let f = temp_file(
        "mqtt.toml",
        &format!(
            "type = \"mqtt\"\nurl = \"mqtt://{}\"\ntopic = \"{}\"\nusername = \"u\"\npassword = \"cli-mqtt-pa55word\"\n",
            mqtt_addr(),
            unique_name("cli-nobody")
        ),
    );
    deliver_says_config(&f, &[]);
    assert_describe_hides(&f, &["cli-mqtt-pa55word"]);
}

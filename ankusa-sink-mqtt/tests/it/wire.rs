//! What reaches an MQTT 5 subscriber, read back by an independent client (Python's
//! `paho-mqtt`, through `scripts/interop/brokers.py mqtt-read`): the payload, Content Type
//! and user properties against `ankusa-message`'s `Outgoing` for the same hook, a CloudEvent in binary
//! mode by the CloudEvents MQTT binding; then `describe`, `durable` and `check`.

use crate::common::{shared_addr, shared_url, unique_name};
use ankusa_message::MessageOptions;
use ankusa_message::cloudevents::{CloudEvents, Mode};
use ankusa_message::template::{AbsentTenant, KeyTemplate};
use ankusa_message::{Attr, DEFAULT_INLINE_MAX_BYTES, EmptyValues, Layout, Outgoing};
use ankusa_sink_core::{Check, Ctx, Envelope, Payload, Secret, Sink, Subject};
use ankusa_sink_mqtt::{MqttConfig, MqttSink};
use ankusa_sink_testkit::support::{interop_python, wire_hooks};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, BufReader};

/// What Python's paho-mqtt read: one JSON object per message.
struct Reader {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Reader {
    /// Subscribes to `topic` for `count` messages; returns once the broker granted it.
    async fn start(topic: &str, count: usize) -> Reader {
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/interop/brokers.py");
        let mut child = tokio::process::Command::new(interop_python())
            .arg(script)
            .args(["mqtt-read", "--topic", topic, "--count", &count.to_string()])
            .env("ANKUSA_MQTT_ADDR", shared_addr())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("python runs");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("ready"));
        Reader { child, lines }
    }

    async fn messages(mut self) -> Vec<Value> {
        let line = self
            .lines
            .next_line()
            .await
            .unwrap()
            .expect("one JSON line");
        assert!(self.child.wait().await.unwrap().success(), "{line}");
        serde_json::from_str::<Value>(&line)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }
}

fn payload(m: &Value) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(m["payload_b64"].as_str().unwrap())
        .unwrap()
}

fn user_properties(m: &Value) -> Vec<(String, String)> {
    m["user_properties"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p[0].as_str().unwrap().to_owned(),
                p[1].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Every attribute of `out` but the content type, in order, as `as_attr()` names them.
fn expected(out: &Outgoing<'_>) -> Vec<(String, String)> {
    out.attributes()
        .iter()
        .filter(|(a, _)| *a != Attr::ContentType)
        .map(|(a, v)| (a.as_attr().to_owned(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn paho_reads_the_message_its_content_type_and_the_kafka_header_names() {
    ankusa_sink_testkit::require_broker!("Mosquitto", crate::common::shared_addr());
    let source = unique_name("src");
    let topic = format!("wire/{source}");
    let reader = Reader::start(&topic, 3).await;
    let sink = MqttSink::new(MqttConfig::with_template(&shared_url(), "wire/{source_id}").unwrap())
        .unwrap();
    let layout = Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), EmptyValues::Keep);
    let mut want = Vec::new();
    for (e, ctx) in &wire_hooks(&source) {
        sink.deliver(e, ctx).await.unwrap();
        let out = Outgoing::new(e, ctx, &layout).unwrap();
        want.push((expected(&out), out.body().to_vec()));
    }
    // A CloudEvent in binary mode to the same topic.
    let ce = CloudEvents::new(Mode::Binary, "com.example.hook").unwrap();
    let ce_sink = MqttSink::new(
        MqttConfig::new(&shared_url(), &topic)
            .unwrap()
            .with_message(MessageOptions::new().with_cloudevents(Some(ce.clone()))),
    )
    .unwrap();
    let raw = Envelope::builder(unique_name("h"), source.as_str(), &b"raw text"[..])
        .tenant_id("acme")
        .content_type("text/plain")
        .build()
        .unwrap();
    ce_sink
        .deliver(&raw, &Ctx::for_envelope(&raw))
        .await
        .unwrap();

    let got = reader.messages().await;
    assert_eq!(got.len(), 3, "{got:?}");
    for (m, (props, body)) in got.iter().zip(&want) {
        assert_eq!(m["topic"], topic.as_str());
        assert_eq!(m["content_type"], "application/json");
        assert_eq!(m["retain"], false);
        assert_eq!(&user_properties(m), props);
        assert_eq!(&payload(m), body);
        ankusa_message::decode(&payload(m)).expect("Message v1");
    }
    // The tenantless hook keeps ankusa_tenant_id as ""; the replay names itself.
    assert!(user_properties(&got[0]).contains(&("ankusa_tenant_id".into(), String::new())));
    assert!(user_properties(&got[1]).contains(&("ankusa_replay_id".into(), "rp-1".into())));
    // The CloudEvent: the raw body, its content type, every attribute a user property.
    let m = &got[2];
    assert_eq!(payload(m), b"raw text");
    assert_eq!(m["content_type"], "text/plain");
    let props = user_properties(m);
    let get = |k: &str| props.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("specversion"), Some("1.0"));
    assert_eq!(get("type"), Some("com.example.hook"));
    assert_eq!(get("id"), Some(raw.id()));
    assert_eq!(get("source"), Some(format!("/sources/{source}").as_str()));
    assert_eq!(get("datacontenttype"), None);
    assert_eq!(get("ankusa_id"), Some(raw.id()));
    let layout = Layout::message(None, EmptyValues::Keep)
        .with_key(KeyTemplate::literal(&topic, AbsentTenant::Default))
        .with_cloudevents(ce);
    let ctx = Ctx::for_envelope(&raw);
    let out = Outgoing::new(&raw, &ctx, &layout).unwrap();
    let mut want = expected(&out);
    want.extend(
        out.cloudevent_attributes()
            .iter()
            .filter(|(n, _)| *n != "datacontenttype")
            .map(|(n, v)| ((*n).to_owned(), v.to_string())),
    );
    assert_eq!(props, want);
}

#[tokio::test]
async fn describe_durable_and_check() {
    ankusa_sink_testkit::require_broker!("Mosquitto", crate::common::shared_addr());
    let sink = MqttSink::new(
        MqttConfig::with_template(&shared_url(), "hooks/{tenant_id}/{source_id}")
            .unwrap()
            .with_credentials("ankusa", Secret::new("desc-pa55"))
            .unwrap()
            .with_durable(true)
            .with_retain(true),
    )
    .unwrap();
    assert!(sink.capabilities().durable);
    let d = sink
        .describe(&Subject::new("stripe", Some("acme".into())))
        .unwrap();
    assert_eq!(d.protocol, "mqtt");
    assert_eq!(d.payload, Payload::Message);
    assert_eq!(d.address.as_deref(), Some("hooks/acme/stripe"));
    assert_eq!(d.host.as_deref(), Some(shared_addr().as_str()));
    assert_eq!(d.operation_bindings["mqtt"]["qos"], 1);
    assert_eq!(d.operation_bindings["mqtt"]["retain"], true);
    let dump = format!("{d:?} {sink:?}");
    assert!(!dump.contains("desc-pa55"), "{dump}");
    // The shared broker takes any login: check() connects and says it is reachable.
    assert_eq!(sink.check().await.unwrap(), Check::Reachable);
    let plain = MqttSink::new(MqttConfig::new(&shared_url(), "s").unwrap()).unwrap();
    assert!(!plain.capabilities().durable);
}

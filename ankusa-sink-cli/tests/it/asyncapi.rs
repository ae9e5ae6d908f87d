//! `describe` over every sink that carries Message v1, validated against the official
//! AsyncAPI 3.0 JSON Schema (npm `@asyncapi/specs`) with PyPI's `jsonschema`, both
//! installed by scripts/services/asyncapi.sh.

use super::{bin, temp_file, text};
use serde_json::Value;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::Stdio;

const VALIDATE: &str = r#"
import json, sys
from jsonschema import Draft7Validator
schema = json.load(open(sys.argv[1]))
errors = list(Draft7Validator(schema).iter_errors(json.load(sys.stdin)))
def leaves(e):
    if not e.context:
        yield e
    for c in e.context:
        yield from leaves(c)
for e in errors:
    for leaf in leaves(e):
        print("/".join(map(str, leaf.absolute_path)), leaf.message[:200])
sys.exit(1 if errors else 0)
"#;

fn tools() -> (PathBuf, PathBuf) {
    let dir = std::env::var_os("ANKUSA_ASYNCAPI_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/ankusa-sinks/asyncapi"))
        })
        .expect("ANKUSA_ASYNCAPI_DIR or HOME is set");
    let (schema, python) = (dir.join("asyncapi-3.0.0.json"), dir.join("venv/bin/python"));
    assert!(
        schema.exists() && python.exists(),
        "{} is incomplete: run scripts/services/asyncapi.sh",
        dir.display()
    );
    (schema, python)
}

/// Whether the official schema accepts `doc`, and what it said.
fn validate(doc: &Value) -> (bool, String) {
    let (schema, python) = tools();
    let mut child = std::process::Command::new(python)
        .args(["-c", VALIDATE])
        .arg(schema)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(doc.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    match out.status.code() {
        Some(0) => (true, said),
        Some(1) => (false, said),
        _ => panic!("the validator failed: {said}"),
    }
}

#[test]
fn describe_of_every_message_sink_is_a_valid_asyncapi_3_document() {
    let files = [
        (
            "kafka.toml",
            "type = \"kafka\"\nbrokers = [\"127.0.0.1:9092\"]\ntopic = \"hooks\"\nkey = \"{tenant_id}/{source_id}\"\n",
        ),
        (
            "kafka2.toml",
            "type = \"kafka\"\nbrokers = [\"127.0.0.1:9092\"]\ntopic = \"audit\"\n",
        ),
        (
            "amqp.toml",
            "type = \"amqp\"\nurl = \"amqp://guest:guest@127.0.0.1:5672/%2f\"\nexchange = \"hooks\"\n",
        ),
        (
            "pubsub.toml",
            "type = \"pubsub\"\nproject = \"p\"\ntopic = \"t\"\nendpoint = \"http://127.0.0.1:8085\"\nordering_key = \"fixed\"\n",
        ),
        (
            "pubsub2.toml",
            "type = \"pubsub\"\nproject = \"p\"\ntopic = \"t2\"\nendpoint = \"http://127.0.0.1:8085\"\nordering_key = \"{tenant_id}\"\n",
        ),
        (
            "sqs.toml",
            "type = \"sqs\"\nqueue_url = \"http://127.0.0.1:4566/000000000000/q.fifo\"\nregion = \"us-east-1\"\n",
        ),
        (
            "sns.toml",
            "type = \"sns\"\ntopic_arn = \"arn:aws:sns:us-east-1:000000000000:t\"\nregion = \"us-east-1\"\nendpoint = \"http://127.0.0.1:4566\"\n",
        ),
        (
            "kinesis.toml",
            "type = \"kinesis\"\nstream = \"hooks\"\nregion = \"us-east-1\"\nendpoint = \"http://127.0.0.1:4566\"\n",
        ),
        (
            "eventbridge.toml",
            "type = \"eventbridge\"\nsource = \"com.example\"\nevent_bus_name = \"hooks\"\nregion = \"us-east-1\"\nendpoint = \"http://127.0.0.1:4566\"\n",
        ),
        (
            "nats.toml",
            "type = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\nsubject = \"hooks.{source_id}\"\n",
        ),
        (
            "redis.toml",
            "type = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\nstream = \"hooks\"\n",
        ),
        (
            "mqtt.toml",
            "type = \"mqtt\"\nurl = \"mqtt://127.0.0.1:1883\"\ntopic_template = \"hooks/{source_id}\"\n",
        ),
        (
            "http.toml",
            "type = \"http\"\nurl = \"https://example.com/hook\"\n",
        ),
    ];
    let mut args = vec!["describe".to_owned(), "--source-id".into(), "stripe".into()];
    for (name, body) in files {
        args.push("--sink".into());
        args.push(temp_file(name, body).to_str().unwrap().to_owned());
    }
    args.extend(["--sink".into(), "log".into()]);
    let out = bin()
        .args(&args)
        .envs([
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (valid, said) = validate(&doc);
    assert!(
        valid,
        "the official schema refused describe's document:\n{said}\n{doc:#}"
    );

    // Every Message v1 sink has a channel; HTTP (raw body) and log have none; the two
    // Kafka sinks on one broker share one server.
    let channels = doc["channels"].as_object().unwrap();
    assert_eq!(channels.len(), 12, "{:?}", channels.keys());
    assert!(
        channels
            .keys()
            .all(|c| !c.starts_with("http") && !c.starts_with("log"))
    );
    assert_eq!(
        doc["channels"]["kafka0"]["servers"],
        doc["channels"]["kafka1"]["servers"]
    );
    let servers = doc["servers"].as_object().unwrap();
    assert_eq!(servers.len(), 10, "{:?}", servers.keys());
    assert_eq!(doc["servers"]["mqtt9"]["protocol"], "mqtt");
    assert_eq!(doc["channels"]["mqtt11"]["address"], "hooks/stripe");
    assert_eq!(
        doc["operations"]["publish_mqtt11"]["bindings"]["mqtt"]["qos"], 1,
        "{doc:#}"
    );
    assert_eq!(
        doc["channels"]["kafka0"]["bindings"]["kafka"]["topic"],
        "hooks"
    );
    let kafka_message = &doc["components"]["messages"]["kafka0"];
    assert_eq!(
        kafka_message["bindings"]["kafka"]["key"]["type"], "string",
        "{kafka_message:#}"
    );
    assert_eq!(
        doc["components"]["messages"]["pubsub3"]["bindings"]["googlepubsub"]["orderingKey"],
        "fixed"
    );
    assert_eq!(
        doc["components"]["schemas"]["SinkMessageV1"],
        ankusa_message::json_schema()
    );
    // Each message carries its sink's capability manifest (a specification extension).
    let caps = &kafka_message["x-ankusa-capabilities"];
    assert_eq!(caps["max_message"]["bytes"], 1_000_000, "{kafka_message:#}");
    assert_eq!(caps["ordering"]["kind"], "per_key");
    for (name, m) in doc["components"]["messages"].as_object().unwrap() {
        assert!(
            m["x-ankusa-capabilities"]["ok_means"].is_string(),
            "{name}: {m:#}"
        );
    }

    // The check can fail: the Kafka key back in the channel binding, where the bindings
    // specification has no such field, is refused.
    let mut misplaced = doc.clone();
    misplaced["channels"]["kafka0"]["bindings"]["kafka"]["key"] =
        kafka_message["bindings"]["kafka"]["key"].clone();
    let (valid, said) = validate(&misplaced);
    assert!(!valid, "a Kafka key in the channel binding passed");
    assert!(
        said.contains("channels/kafka0/bindings/kafka") && said.contains("'key'"),
        "{said}"
    );
}

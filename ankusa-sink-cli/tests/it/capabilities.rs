//! `info --json`'s `capabilities`: every sink type's manifest from its config file alone
//! (nothing is contacted), and no secret in it.

use super::{run, temp_file};
use serde_json::{Value, json};

const AWS: &str = "region = \"us-east-1\"\nendpoint = \"http://127.0.0.1:4566\"\n";
const PLANTED: &str = "planted-s3cr3t-value";

fn caps(name: &str, toml: &str) -> Value {
    let f = temp_file(name, toml);
    let out = run(&["info", "--sink", f.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{name}: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!text.contains(PLANTED), "{name}: a secret in info: {text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["capabilities"]["durable"], v["durable"], "{name}");
    assert_eq!(v["capabilities"]["batched"], v["batched"], "{name}");
    assert_eq!(
        v["capabilities"]["inline_max_bytes"], v["inline_max_bytes"],
        "{name}"
    );
    v["capabilities"].clone()
}

#[test]
fn every_sink_type_states_its_capabilities() {
    let c = caps(
        "kafka.toml",
        &format!(
            "type = \"kafka\"\nbrokers = [\"127.0.0.1:9092\"]\ntopic = \"t\"\n\
             sasl = {{ mechanism = \"scram_sha_256\", username = \"u\", password = \"{PLANTED}\" }}\n"
        ),
    );
    assert_eq!(c["ok_means"], "stored");
    assert_eq!(
        c["max_message"],
        json!({"bytes": 1_000_000, "counts": "value + key", "source": "destination_default"})
    );
    assert_eq!(
        c["ordering"],
        json!({"kind": "per_key", "key": "{tenant_id}/{source_id}"})
    );
    assert_eq!(c["auth"], json!(["sasl_scram-sha-256"]));

    let c = caps(
        "amqp.toml",
        &format!(
            "type = \"amqp\"\nurl = \"amqp://u:{PLANTED}@127.0.0.1:5672/%2f\"\nexchange = \"x\"\n\
             max_message_bytes = 4096\n"
        ),
    );
    assert_eq!(c["max_message"]["source"], "configured");
    assert_eq!(c["max_message"]["bytes"], 4096);
    assert_eq!(c["ordering"]["kind"], "none");
    assert_eq!(c["auth"], json!(["plain"]));

    let c = caps(
        "sqs.toml",
        &format!(
            "type = \"sqs\"\nqueue_url = \"http://127.0.0.1:4566/123456789012/q.fifo\"\n{AWS}\
             credentials = {{ access_key_id = \"AKIAX\", secret_access_key = \"{PLANTED}\" }}\n"
        ),
    );
    assert_eq!(c["max_message"]["bytes"], 1_048_576);
    assert_eq!(c["dedupe_window_s"], 300);
    assert_eq!(
        c["ordering"],
        json!({"kind": "per_key", "key": "{tenant_id}/{source_id}"})
    );
    assert_eq!(
        c["batch"],
        json!({"max_messages": 10, "max_bytes": 1_048_576, "linger_ms": 10})
    );
    assert_eq!(c["auth"], json!(["static_credentials"]));

    let c = caps(
        "sns.toml",
        &format!(
            "type = \"sns\"\ntopic_arn = \"arn:aws:sns:us-east-1:123456789012:t\"\n{AWS}batching = false\n"
        ),
    );
    assert_eq!(c["max_message"]["bytes"], 262_144);
    assert_eq!(
        c["dedupe_window_s"],
        Value::Null,
        "standard topics do not dedupe"
    );
    assert_eq!(
        (c["batched"].as_bool(), &c["batch"]),
        (Some(false), &Value::Null)
    );
    assert_eq!(c["auth"], json!(["default_credential_chain"]));

    let c = caps(
        "kinesis.toml",
        &format!(
            "type = \"kinesis\"\nstream = \"s\"\n{AWS}partition_key_template = \"{{tenant_id}}\"\n\
             batching = false\n\
             credentials = {{ access_key_id = \"AKIAX\", secret_access_key = \"{PLANTED}\" }}\n"
        ),
    );
    assert_eq!(
        c["max_message"],
        json!({"bytes": 1_048_576, "counts": "data + partition key", "source": "destination_default"})
    );
    assert_eq!(
        c["ordering"],
        json!({"kind": "per_key", "key": "{tenant_id}"})
    );
    assert_eq!(c["batch"], Value::Null);
    assert_eq!(c["auth"], json!(["static_credentials"]));
    let c = caps(
        "eventbridge.toml",
        &format!("type = \"eventbridge\"\nsource = \"com.example\"\n{AWS}"),
    );
    assert_eq!(c["max_message"]["bytes"], 262_144);
    assert_eq!(c["ordering"]["kind"], "none");
    assert_eq!(
        c["batch"],
        json!({"max_messages": 10, "max_bytes": 262_144, "linger_ms": 10})
    );

    let c = caps(
        "pubsub.toml",
        "type = \"pubsub\"\nproject = \"p\"\ntopic = \"t\"\nendpoint = \"http://127.0.0.1:8085\"\n\
         ordering_key = \"{tenant_id}\"\n",
    );
    assert_eq!(c["max_message"]["bytes"], 10_000_000);
    assert_eq!(c["ordering"]["key"], "{tenant_id}");
    assert_eq!(c["batch"]["max_messages"], 100);
    assert_eq!(c["auth"], json!(["anonymous"]));

    let c = caps(
        "nats.toml",
        &format!(
            "type = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\nsubject = \"s\"\ntoken = \"{PLANTED}\"\n"
        ),
    );
    assert_eq!(c["auth"], json!(["token"]));
    assert_eq!(
        c["max_message"],
        Value::Null,
        "the server's max_payload is not known offline"
    );

    let c = caps(
        "stream.toml",
        "type = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\nstream = \"hooks.{source_id}\"\n",
    );
    assert_eq!(
        (c["ok_means"].as_str(), c["durable"].as_bool()),
        (Some("stored"), Some(false))
    );
    assert_eq!(c["ordering"]["key"], "hooks.{source_id}");
    let c = caps(
        "channel.toml",
        &format!(
            "type = \"redis\"\nurl = \"redis://:{PLANTED}@127.0.0.1:6379\"\nchannel = \"c\"\n"
        ),
    );
    assert_eq!(c["ok_means"], "sent");
    assert_eq!(c["auth"], json!(["password"]));

    let c = caps(
        "http.toml",
        &format!(
            "type = \"http\"\nurl = \"https://u:{PLANTED}@hooks.example.invalid/in\"\n\
             secrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\n"
        ),
    );
    assert_eq!(
        c["auth"],
        json!(["authorization_header", "standard_webhooks_signing", "tls"])
    );
    assert_eq!(c["max_message"], Value::Null);
}

/// The workspace README's table of what each sink promises at its defaults, row by row,
/// against `info --json` for a default config of each type.
#[test]
fn the_readme_table_is_what_info_reports() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let row = |sink: &str| -> Vec<String> {
        let prefix = format!("| `{sink}` |");
        let line = readme
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no README row for {sink}"));
        line.split('|')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let defaults = [
        ("kafka", "type = \"kafka\"\nbrokers = [\"127.0.0.1:9092\"]\ntopic = \"t\"\n".to_owned()),
        ("amqp", "type = \"amqp\"\nurl = \"amqp://127.0.0.1:5672/%2f\"\nexchange = \"x\"\n".to_owned()),
        ("sqs", format!("type = \"sqs\"\nqueue_url = \"http://127.0.0.1:4566/123456789012/q\"\n{AWS}")),
        ("sns", format!("type = \"sns\"\ntopic_arn = \"arn:aws:sns:us-east-1:123456789012:t\"\n{AWS}")),
        ("kinesis", format!("type = \"kinesis\"\nstream = \"s\"\n{AWS}")),
        ("eventbridge", format!("type = \"eventbridge\"\nsource = \"com.example\"\n{AWS}")),
        ("pubsub", "type = \"pubsub\"\nproject = \"p\"\ntopic = \"t\"\nendpoint = \"http://127.0.0.1:8085\"\n".to_owned()),
        ("nats", "type = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\nsubject = \"s\"\n".to_owned()),
        ("redis", "type = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\nstream = \"s\"\n".to_owned()),
        ("mqtt", "type = \"mqtt\"\nurl = \"mqtt://127.0.0.1:1883\"\ntopic = \"t\"\n".to_owned()),
        ("http", "type = \"http\"\nurl = \"http://127.0.0.1:9/in\"\n".to_owned()),
    ];
    for (sink, toml) in defaults {
        let c = caps(&format!("{sink}.toml"), &toml);
        let cells = row(sink);
        assert!(
            cells[1].starts_with(c["ok_means"].as_str().unwrap()),
            "{sink}: {cells:?} {c}"
        );
        match &c["max_message"] {
            Value::Null => assert!(
                cells[2].starts_with("the ") || cells[2] == "none",
                "{sink}: {cells:?}"
            ),
            m => assert_eq!(
                cells[2],
                format!("{} ({})", m["bytes"], m["counts"].as_str().unwrap()),
                "{sink}"
            ),
        }
        let ordering = match c["ordering"]["kind"].as_str().unwrap() {
            "per_key" => "per key",
            other => other,
        };
        assert!(cells[3].starts_with(ordering), "{sink}: {cells:?} {c}");
        let dedupe = match &c["dedupe_window_s"] {
            Value::Null => "none".to_owned(),
            s => format!("{s} s"),
        };
        assert!(
            cells[4].starts_with(&dedupe) || (dedupe == "none" && cells[4] == "the stream's"),
            "{sink}: {cells:?} {c}"
        );
    }
    let log = row("log");
    assert_eq!(log[1], "sent");
}

/// The workspace README's crate table lists every workspace member, each under its
/// package name, and nothing else.
#[test]
fn the_readme_crate_table_is_the_workspace() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let manifest = std::fs::read_to_string(format!("{root}/Cargo.toml")).unwrap();
    let members: std::collections::BTreeSet<String> = manifest
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .unwrap()
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty())
        .collect();
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let table = readme.split("## Crates").nth(1).unwrap();
    let rows: std::collections::BTreeMap<String, String> = table
        .lines()
        .skip_while(|l| !l.starts_with("| [`"))
        .take_while(|l| l.starts_with("| [`"))
        .map(|l| {
            let name = l.split('`').nth(1).unwrap().to_owned();
            let dir = l.split("](").nth(1).unwrap().split(')').next().unwrap();
            (dir.to_owned(), name)
        })
        .collect();
    assert_eq!(
        rows.keys()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>(),
        members,
        "README crate table vs workspace members"
    );
    for (dir, name) in rows {
        let m = std::fs::read_to_string(format!("{root}/{dir}/Cargo.toml")).unwrap();
        assert!(
            m.contains(&format!("name = \"{name}\"")),
            "{dir} is not the package {name}"
        );
    }
}

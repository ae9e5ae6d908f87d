//! The `ankusa-sink-with-example` binary: the whole `ankusa-sink` command with this sink as
//! `type = "example"`, run as a user runs it, against the real Redis on 127.0.0.1:6379
//! (`ANKUSA_REDIS_ADDR` to change it).

use ankusa_sink_testkit::ankusa_message;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_ankusa-sink-with-example");

/// The committed sink file.
fn example_toml() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("example.toml")
}

fn redis_addr() -> String {
    std::env::var("ANKUSA_REDIS_ADDR").unwrap_or_else(|_| "127.0.0.1:6379".into())
}

/// A name unique to this process and call.
fn unique(tag: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    format!(
        "cli-{tag}-{}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run the binary")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// One stream entry as `XRANGE` returns it: its id and its fields.
type Entry = (String, Vec<(String, Vec<u8>)>);

/// A stream on the real Redis and a directory for the run's files, both removed on drop
/// (pass or fail).
struct Scratch {
    admin: redis::Connection,
    stream: String,
    dir: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let client = redis::Client::open(format!("redis://{}", redis_addr())).unwrap();
        let mut admin = client.get_connection().expect("Redis on ANKUSA_REDIS_ADDR");
        let stream = unique("stream");
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&stream)
            .arg("readers")
            .arg("$")
            .arg("MKSTREAM")
            .query(&mut admin)
            .unwrap();
        let dir = std::env::temp_dir().join(unique("dir"));
        std::fs::create_dir(&dir).unwrap();
        Scratch { admin, stream, dir }
    }

    /// The Message v1 entries of the stream, decoded.
    fn messages(&mut self) -> Vec<ankusa_message::Message> {
        let entries: Vec<Entry> = redis::cmd("XRANGE")
            .arg(&self.stream)
            .arg("-")
            .arg("+")
            .query(&mut self.admin)
            .unwrap();
        entries
            .iter()
            .flat_map(|(_, fields)| fields.iter())
            .map(|(field, bytes)| {
                assert_eq!(field, redis_stream_sink::FIELD);
                ankusa_message::decode(bytes).unwrap()
            })
            .collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _: Result<(), _> = redis::cmd("DEL").arg(&self.stream).query(&mut self.admin);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn info_reads_the_example_sink_file() {
    let file = example_toml();
    let file = file.to_str().unwrap();
    let out = run(&["info", "--json", "--sink", file]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["type"], "example");
    assert_eq!(info["durable"], false, "example.toml says durable = false");
    assert_eq!(info["inline_max_bytes"], 65536);
    assert_eq!(info["capabilities"]["ok_means"], "stored");

    let out = run(&["info", "--sink", file]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("type:             example\n"),
        "{}",
        text(&out.stdout)
    );
    // The built-in types are still there.
    let out = run(&["info", "--json", "--sink", "log"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["type"],
        "log"
    );
}

#[test]
fn sink_file_errors_name_the_type_and_key_never_the_password() {
    let scratch = Scratch::new();
    let write = |name: &str, body: &str| {
        let path = scratch.dir.join(name);
        std::fs::write(&path, body).unwrap();
        path.to_str().unwrap().to_owned()
    };
    // An unknown type lists every type of the binary's registry, `example` last.
    let file = write("typo.toml", "type = \"exampel\"\n");
    let out = run(&["info", "--sink", &file]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains(
            "unknown sink type `exampel` (known: log, http, kafka, amqp, sqs, sns, kinesis, eventbridge, pubsub, nats, redis, mqtt, example)"
        ),
        "{}",
        text(&out.stderr)
    );
    // The example's own keys get the registry's treatment: unknown keys, and an unusable
    // URL refused when the file is read, without quoting it.
    let file = write(
        "bad.toml",
        "type = \"example\"\nurl = \"rediss+nope://u:planted-pa55@h\"\nstream = \"s\"\ndurable = false\n",
    );
    let out = run(&["check", "--sink", &file]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("example sink config: url is not a usable redis URL"),
        "{err}"
    );
    assert!(!err.contains("planted-pa55"), "{err}");
    let file = write(
        "unknown.toml",
        "type = \"example\"\nurl = \"redis://127.0.0.1\"\nstream = \"s\"\ndurable = false\nstraem = \"t\"\n",
    );
    let out = run(&["info", "--sink", &file]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("example sink config: key `straem`: unknown field `straem`"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn forward_delivers_gen_output_through_the_example_sink_file() {
    let mut scratch = Scratch::new();
    // The committed file, pointed at this run's stream (and Redis).
    let committed = std::fs::read_to_string(example_toml()).unwrap();
    let (url_line, stream_line) = (
        "url = \"redis://127.0.0.1:6379\"",
        "stream = \"ankusa-example-hooks\"",
    );
    assert!(committed.contains(url_line) && committed.contains(stream_line));
    let toml = committed
        .replace(url_line, &format!("url = \"redis://{}\"", redis_addr()))
        .replace(stream_line, &format!("stream = \"{}\"", scratch.stream));
    let sink = scratch.dir.join("example.toml");
    std::fs::write(&sink, toml).unwrap();

    let out = run(&["gen", "--count", "25", "--size", "300", "--tenant", "acme"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let input = scratch.dir.join("hooks.jsonl");
    std::fs::write(&input, &out.stdout).unwrap();
    let generated: BTreeSet<String> = text(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(generated.len(), 25);

    let out = run(&[
        "forward",
        "--sink",
        sink.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut reported = BTreeSet::new();
    for line in text(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["outcome"], "ok", "{line}");
        assert_eq!(v["sink"], "example", "named by the file's stem: {line}");
        reported.insert(v["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(reported, generated);

    let messages = scratch.messages();
    assert_eq!(messages.len(), 25, "each hook appended once");
    let stored: BTreeSet<String> = messages.iter().map(|m| m.id.clone()).collect();
    assert_eq!(stored, generated);
    assert!(
        messages
            .iter()
            .all(|m| m.tenant_id.as_deref() == Some("acme"))
    );
}

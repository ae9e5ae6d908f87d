//! The Pub/Sub sink through the binary, against the emulator the test script starts.

use super::{check_then_deliver, run, temp_file};
use ankusa_sink_testkit::support::unique_name;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

fn emulator() -> String {
    std::env::var("ANKUSA_PUBSUB_EMULATOR_HOST").unwrap_or_else(|_| "127.0.0.1:8085".into())
}

/// One plain HTTP/1.1 request to the emulator's REST API; returns the status code.
fn rest(method: &str, path: &str) -> u16 {
    rest_with(method, path, "{}")
}

/// [`rest`] with a JSON body.
fn rest_with(method: &str, path: &str, body: &str) -> u16 {
    let mut s = TcpStream::connect(emulator()).expect("the Pub/Sub emulator is running");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        emulator(),
        body.len()
    )
    .unwrap();
    // Only the status line matters; the emulator may keep the connection open.
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut status = String::new();
    BufReader::new(s).read_line(&mut status).unwrap();
    status.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn config(topic: &str) -> std::path::PathBuf {
    temp_file(
        "pubsub.toml",
        &format!(
            "type = \"pubsub\"\nproject = \"ankusa-cli\"\ntopic = \"{topic}\"\nendpoint = \"http://{}\"\n",
            emulator()
        ),
    )
}

#[test]
fn pubsub_from_a_config_file() {
    needs!("Pub/Sub emulator");
    let topic = unique_name("cli");
    assert_eq!(
        rest("PUT", &format!("/v1/projects/ankusa-cli/topics/{topic}")),
        200
    );
    let sink = config(&topic);
    // No subscription yet: Pub/Sub would drop the message, and check says so.
    let out = run(&["check", "--sink", sink.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("config: topic") && said.contains("has no subscription"),
        "{said}"
    );
    let sub = format!("/v1/projects/ankusa-cli/subscriptions/{topic}-sub");
    let body = format!(r#"{{"topic":"projects/ankusa-cli/topics/{topic}"}}"#);
    assert_eq!(rest_with("PUT", &sub, &body), 200);
    check_then_deliver(&sink, "ps-1", &[]);
    let out = run(&["info", "--sink", sink.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["inline_max_bytes"], 65_536);

    let missing = config(&format!("{topic}-missing"));
    let out = run(&["deliver", "--sink", missing.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["class"], "config");
    assert_eq!(v["error_class"], "permanent");
    let out = run(&["check", "--sink", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(rest("DELETE", &sub), 200);
    assert_eq!(
        rest("DELETE", &format!("/v1/projects/ankusa-cli/topics/{topic}")),
        200
    );
}

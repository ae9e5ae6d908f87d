//! The HTTP sink through the binary, against scripted servers on 127.0.0.1.

use super::{assert_delivered, assert_describe_hides, run, temp_file, text};
use ankusa_bench_support::http::read_request_blocking;
use std::io::Write;
use std::net::TcpListener;
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// A server answering each request with the next scripted response (the last repeats),
/// recording when each request arrived.
pub(super) struct Scripted {
    pub(super) url: String,
    pub(super) arrivals: Arc<Mutex<Vec<Instant>>>,
}

pub(super) fn serve(responses: Vec<&'static str>) -> Scripted {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let seen = arrivals.clone();
    thread::spawn(move || {
        for (i, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { return };
            let _ = read_request_blocking(&mut stream, &mut Vec::new());
            seen.lock().unwrap().push(Instant::now());
            let resp = responses[i.min(responses.len() - 1)];
            let _ = stream.write_all(resp.as_bytes());
        }
    });
    Scripted { url, arrivals }
}

pub(super) fn http_sink(url: &str) -> std::path::PathBuf {
    temp_file(
        "http.toml",
        &format!("type = \"http\"\nurl = \"{url}\"\ntimeout_ms = 2000\n"),
    )
}

/// `deliver --json` to a fresh server answering `responses`, with `args` besides.
pub(super) fn deliver_to(responses: Vec<&'static str>, args: &[&str]) -> (Scripted, Output) {
    let server = serve(responses);
    let sink = http_sink(&server.url);
    let mut all = vec!["deliver", "--sink", sink.to_str().unwrap(), "--json"];
    all.extend_from_slice(args);
    let out = run(&all);
    (server, out)
}

pub(super) const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
pub(super) const UNAVAILABLE: &str =
    "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
pub(super) const THROTTLED: &str = "HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
pub(super) const GONE: &str = "HTTP/1.1 410 Gone\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

#[test]
fn retry_rides_out_a_503_then_delivers() {
    let (server, out) = deliver_to(
        vec![UNAVAILABLE, UNAVAILABLE, OK],
        &["--id", "h-503", "--retry"],
    );
    assert_delivered(&out, "h-503", "http", 3);
    assert_eq!(server.arrivals.lock().unwrap().len(), 3);
}

#[test]
fn retry_honours_retry_after() {
    let (server, out) = deliver_to(vec![THROTTLED, OK], &["--id", "h-429", "--retry"]);
    assert_delivered(&out, "h-429", "http", 2);
    let arrivals = server.arrivals.lock().unwrap();
    let gap = arrivals[1] - arrivals[0];
    assert!(
        gap >= Duration::from_millis(950),
        "waited only {gap:?} after Retry-After: 1"
    );
}

#[test]
fn failures_report_their_class_and_exit_3() {
    let (_, out) = deliver_to(vec![THROTTLED], &["--id", "h-t"]);
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcome"], "failed");
    assert_eq!(v["class"], "retry_after");
    assert_eq!(v["error_class"], "throttled");
    assert_eq!(v["retry_after_ms"], 1000);
    assert_eq!(v["attempts"], 1);
    // The exact line, field order included.
    let line = text(&out.stdout);
    assert!(
        line.starts_with(
            r#"{"id":"h-t","sink":"http","outcome":"failed","class":"retry_after","error_class":"throttled","retry_after_ms":1000,"reason":""#
        ),
        "{line}"
    );
    assert!(line.trim_end().ends_with(r#","attempts":1}"#), "{line}");

    // Given up on with nowhere to store it: `failed`, never `dead_lettered` (issue 61).
    let (server, out) = deliver_to(vec![GONE], &["--id", "h-g", "--retry"]);
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcome"], "failed");
    assert_eq!(v["class"], "permanent");
    assert_eq!(v["retry_after_ms"], serde_json::Value::Null);
    assert_eq!(
        server.arrivals.lock().unwrap().len(),
        1,
        "permanent is never retried"
    );
}

#[test]
fn http_config_errors_and_secrets() {
    let f = temp_file("bad.toml", "type = \"http\"\nurl = \"ftp://x/\"\n");
    let out = run(&["info", "--sink", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("not http or https"),
        "{}",
        text(&out.stderr)
    );

    let f = temp_file(
        "d.toml",
        "type = \"http\"\nurl = \"https://user:hunter2@example.invalid/hook?token=t0ps3cret\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\n",
    );
    assert_describe_hides(
        &f,
        &["hunter2", "t0ps3cret", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
    );
    let out = run(&["info", "--sink", f.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["durable"], true);
}

//! Faults an operator runs into, through the binary: each of these used to loop forever,
//! panic, abort, wait far past its limit or print what it must not.

use super::http::{OK, THROTTLED, UNAVAILABLE, deliver_to, http_sink, serve};
use super::{bin, forward_log, json_lines, run, spawn_piped, temp_file, text};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Output, Stdio};
use std::time::{Duration, Instant};

/// Wait for `child` at most `limit`; kill it and fail if it is still running.
pub(super) fn wait_within(mut child: Child, limit: Duration, what: &str) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("{what}: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

pub(super) fn hooks(count: usize) -> String {
    text(&run(&["gen", "--count", &count.to_string(), "--size", "64"]).stdout)
}

pub(super) fn signal(child: &Child, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

/// `forward --json` with `args` and every stdio piped, `hooks(n)` written to its stdin,
/// which stays open: only a signal ends the run.
fn forward_held_open(args: &[&str], n: usize) -> (Child, ChildStdin) {
    let mut all = vec!["forward", "--json"];
    all.extend_from_slice(args);
    let mut child = spawn_piped(&all, Stdio::piped());
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(hooks(n).as_bytes()).unwrap();
    stdin.flush().unwrap();
    (child, stdin)
}

/// Send `sig`; the run must exit `code` within 30 s, its stdin still open until then.
fn stopped_by(child: Child, stdin: ChildStdin, sig: &str, code: i32) -> Output {
    signal(&child, sig);
    let out = wait_within(
        child,
        Duration::from_secs(30),
        &format!("forward after {sig}"),
    );
    drop(stdin);
    assert_eq!(out.status.code(), Some(code), "{}", text(&out.stderr));
    out
}

#[test]
fn forward_from_a_directory_stops_with_a_clear_error() {
    let dir = temp_file("x", "").parent().unwrap().to_owned();
    let child = spawn_piped(
        &["forward", "--sink", "log", "--input", dir.to_str().unwrap()],
        Stdio::null(),
    );
    let out = wait_within(child, Duration::from_secs(30), "forward from a directory");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("reading the input failed"), "{stderr}");
    assert!(
        stderr.len() < 1000,
        "one error, not a loop: {} bytes",
        stderr.len()
    );
}

#[test]
fn a_closed_stdout_stops_the_run_with_exit_74_not_a_panic() {
    let input = temp_file("hooks.jsonl", &hooks(3000));
    let mut child = spawn_piped(
        &[
            "forward",
            "--sink",
            "log",
            "--json",
            "--concurrency",
            "4",
            "--input",
            input.to_str().unwrap(),
        ],
        Stdio::null(),
    );
    // Like `| head -1`: read one outcome line, then close the pipe.
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains(r#""outcome":"ok""#), "{first}");
    let out = wait_within(child, Duration::from_secs(60), "forward into a closed pipe");
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(74), "{stderr}");
}

#[test]
fn a_full_stderr_loses_no_outcome_line() {
    let input = temp_file("hooks.jsonl", &hooks(50));
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = bin()
        .args(["forward", "--sink", "log", "--json"])
        .args(["--input", input.to_str().unwrap()])
        .stdin(Stdio::null())
        .stderr(full)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "a summary that cannot be written is dropped"
    );
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 50);
    assert!(stdout.lines().all(|l| l.contains(r#""outcome":"ok""#)));
}

#[test]
fn gen_refuses_a_size_it_cannot_hold() {
    let out = run(&["gen", "--count", "1", "--size", "99999999999"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("--size 99999999999 is over the limit"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
}

#[test]
fn max_elapsed_is_not_outwaited_by_a_long_retry_after() {
    const WAIT_120: &str = "HTTP/1.1 429 Too Many Requests\r\nretry-after: 120\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
    let server = serve(vec![WAIT_120]);
    let sink = http_sink(&server.url);
    let child = spawn_piped(
        &[
            "deliver",
            "--sink",
            sink.to_str().unwrap(),
            "--id",
            "h-ra",
            "--retry",
            "--max-elapsed",
            "5",
            "--json",
        ],
        Stdio::null(),
    );
    // Before: it slept the whole 120 s. Anything close to that is the old behaviour.
    let out = wait_within(child, Duration::from_secs(60), "--max-elapsed 5");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // No --dead-letter: given up on, stored nowhere.
    assert_eq!(v["outcome"], "failed");
    assert_eq!(v["error_class"], "throttled");
    assert_eq!(v["retry_after_ms"], 120_000);
    assert_eq!(v["attempts"], 1, "the retry would start past the horizon");
    assert_eq!(server.arrivals.lock().unwrap().len(), 1);

    // Retry-After: 1 within a 5 s horizon is still honoured, then given up on in time.
    let (_, out) = deliver_to(vec![THROTTLED], &["--retry", "--max-elapsed", "5"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcome"], "failed");
    assert!(v["attempts"].as_u64().unwrap() >= 2, "{v}");
}

#[test]
fn long_and_non_utf8_lines_are_invalid_with_their_line_number() {
    let good = hooks(2);
    let mut good = good.lines();
    let mut input = Vec::new();
    input.extend_from_slice(good.next().unwrap().as_bytes());
    input.extend_from_slice(b"\n");
    input.extend(std::iter::repeat_n(b'x', 3_000_000));
    input.extend_from_slice(b"\n\xff\xfe{}\n");
    input.extend_from_slice(good.next().unwrap().as_bytes());
    input.extend_from_slice(b"\n");
    let path = temp_file("mixed.jsonl", "");
    std::fs::write(&path, input).unwrap();
    let out = forward_log(&path, &["--json", "--max-line-bytes", "1000000"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.iter().filter(|l| l["outcome"] == "ok").count(), 2);
    let mut invalid: Vec<(u64, String)> = lines
        .iter()
        .filter(|l| l["outcome"] == "invalid")
        .map(|l| {
            (
                l["line"].as_u64().unwrap(),
                l["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    invalid.sort();
    assert_eq!(invalid.len(), 2, "{invalid:?}");
    assert_eq!(invalid[0].0, 2);
    assert!(invalid[0].1.contains("--max-line-bytes"), "{invalid:?}");
    assert_eq!(invalid[1].0, 3);
    assert!(invalid[1].1.contains("not UTF-8"), "{invalid:?}");
}

#[test]
fn invalid_envelopes_never_echo_their_values() {
    let line = r#"{"id":"h","source_id":"s","body_base64":"","headers":"Bearer SECRETVALUE"}"#;
    let input = temp_file("bad.jsonl", line);
    let out = forward_log(&input, &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("input line 1: not a valid envelope"),
        "{stderr}"
    );
    assert!(!stderr.contains("SECRETVALUE"), "{stderr}");
}

#[test]
fn zero_and_empty_values_are_usage_errors() {
    for args in [
        &["deliver", "--sink", "log", "--retry", "--max-attempts", "0"][..],
        &["deliver", "--sink", "log", "--attempt-timeout", "0"],
        &["forward", "--sink", "log", "--max-line-bytes", "0"],
        &["describe", "--sink", "log", "--source-id", ""],
        &[
            "describe",
            "--sink",
            "log",
            "--source-id",
            "s",
            "--tenant",
            "a.b",
        ],
    ] {
        let out = run(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let f = temp_file("log.toml", "type = \"log\"\nmessages = true\n");
    let out = run(&["deliver", "--sink", f.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("use one or the other"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn sigterm_drains_and_reports_every_hook_read() {
    let server = serve(vec![UNAVAILABLE]);
    let sink = http_sink(&server.url);
    // stdin stays open: the run would go on for --max-elapsed (a day) without the signal.
    let (child, stdin) = forward_held_open(
        &[
            "--sink",
            sink.to_str().unwrap(),
            "--retry",
            "--concurrency",
            "8",
        ],
        5,
    );
    let start = Instant::now();
    while server.arrivals.lock().unwrap().len() < 5 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "hooks never attempted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = stopped_by(child, stdin, "-TERM", 143);
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.len(), 5, "one line per hook read: {lines:?}");
    for l in &lines {
        assert_eq!(l["outcome"], "abandoned", "{l}");
        assert_eq!(l["class"], "transient", "{l}");
    }
    assert!(
        text(&out.stderr).contains("abandoned 5"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn sigint_stops_reading_and_keeps_the_delivered_lines() {
    let (mut child, stdin) = forward_held_open(&["--sink", "log"], 3);
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    for _ in 0..3 {
        let mut l = String::new();
        stdout.read_line(&mut l).unwrap();
        assert!(l.contains(r#""outcome":"ok""#), "{l}");
    }
    let out = stopped_by(child, stdin, "-INT", 130);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "", "no line for a hook never read");
    assert!(
        text(&out.stderr).contains("delivered 3 failed 0"),
        "{}",
        text(&out.stderr)
    );
}

/// A stored hook dated in year 10000 (`received_at` 253402300800000 ms): RFC 3339, the
/// CloudEvents `time`, cannot write it, and formatting it panicked the CloudEvents sinks.
/// `forward --input` reports the line invalid, and the other hooks go out as CloudEvents.
#[test]
fn a_hook_dated_in_year_10000_is_an_invalid_line_and_the_others_go_out() {
    let hooks = hooks(3);
    let mut lines: Vec<String> = hooks.lines().map(str::to_owned).collect();
    let mut late: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
    late["received_at"] = serde_json::json!(253_402_300_800_000_i64);
    lines[1] = late.to_string();
    let input = temp_file("year-10000.jsonl", &(lines.join("\n") + "\n"));
    let server = serve(vec![OK]);
    let sink = temp_file(
        "ce.toml",
        &format!(
            "type = \"http\"\nurl = \"{}\"\ntimeout_ms = 2000\nformat = \"cloudevents\"\n",
            server.url
        ),
    );
    let child = spawn_piped(
        &[
            "forward",
            "--json",
            "--sink",
            sink.to_str().unwrap(),
            "--input",
            input.to_str().unwrap(),
        ],
        Stdio::null(),
    );
    let out = wait_within(child, Duration::from_secs(60), "forward");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let outcomes = json_lines(&out.stdout);
    assert_eq!(outcomes.len(), 3, "{}", text(&out.stdout));
    let invalid: Vec<_> = outcomes
        .iter()
        .filter(|l| l["outcome"] == "invalid")
        .collect();
    assert_eq!(invalid.len(), 1, "{outcomes:?}");
    assert_eq!(invalid[0]["line"], 2);
    let reason = invalid[0]["reason"].as_str().unwrap();
    assert!(reason.contains("before year 10000"), "{reason}");
    let ok: Vec<_> = outcomes.iter().filter(|l| l["outcome"] == "ok").collect();
    assert_eq!(ok.len(), 2, "{outcomes:?}");
    assert_eq!(server.arrivals.lock().unwrap().len(), 2);
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panick"), "{stderr}");
}

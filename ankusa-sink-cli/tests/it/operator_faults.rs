//! The operator's own machine failing under a run: stderr that cannot be written, dead
//! letters on a full device, a torn dead-letter file, a dead-letter path that is a symlink,
//! a durable source whose dead letters cannot be stored. Each of these used to hang the
//! run, loop, or report what did not happen.

use super::from_amqp::Broker;
use super::from_source::{Collector, envelopes, wait_until};
use super::hardening::{hooks, signal, wait_within};
use super::http::{GONE, http_sink, serve};
use super::{bin, free_addr, json_lines, metric, scrape, temp_file, text};
use ankusa_sink_testkit::support::unique_name;
use std::ffi::OsStr;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Output, Stdio};
use std::time::Duration;

/// SIGTERM to the forwarder `child`: it exits 143 within 30 s and leaves `queue` (no
/// consumer) within 10 s.
fn sigterm_and_leave(child: Child, queue: &Broker) {
    signal(&child, "-TERM");
    let out = wait_within(child, Duration::from_secs(30), "forward after SIGTERM");
    assert_eq!(out.status.code(), Some(143));
    wait_until(
        Duration::from_secs(10),
        "the forwarder left the queue",
        || queue.counts().1 == 0,
    );
}

pub(super) fn dev_full() -> std::fs::File {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap()
}

/// `forward --json` of `input` with `args`, stderr on `/dev/full`, logging at info; its
/// stdout (in a file: a pipe read only at the end would stall it).
fn forward_stderr_full(input: &Path, args: &[&str]) -> Output {
    let stdout = input.with_file_name(unique_name("out"));
    let child = bin()
        .env("RUST_LOG", "info")
        .args(["forward", "--json", "--input"])
        .arg(input)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(dev_full())
        .spawn()
        .unwrap();
    let mut out = wait_within(
        child,
        Duration::from_secs(60),
        "forward with stderr on /dev/full",
    );
    out.stdout = std::fs::read(&stdout).unwrap();
    out
}

/// An HTTP sink pointed at a port nothing listens on.
fn closed_port_sink() -> PathBuf {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    http_sink(&format!("http://127.0.0.1:{port}/hook"))
}

#[test]
fn stderr_on_a_full_device_never_stalls_a_run() {
    let input = temp_file("hooks.jsonl", &hooks(2000));
    // A sink that fails every hook: its breaker opens after five, and the run without
    // retries still answers every hook at once instead of holding them for probes.
    let dead = closed_port_sink();
    let out = forward_stderr_full(&input, &["--sink", dead.to_str().unwrap()]);
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.len(), 2000, "one outcome line per hook");
    assert!(
        lines.iter().all(|l| l["outcome"] == "failed"),
        "{:?}",
        lines[1999]
    );
    assert_eq!(out.status.code(), Some(3));

    // The log sink's line goes to stderr: it cannot be written, so the delivery fails,
    // transient, naming stderr.
    let out = forward_stderr_full(&input, &["--sink", "log"]);
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.len(), 2000, "one outcome line per hook");
    let mut named = 0;
    for l in &lines {
        assert_eq!(l["outcome"], "failed", "{l}");
        assert_eq!(l["class"], "transient", "{l}");
        // The first few name stderr; then the breaker opens and fails the rest at once.
        let reason = l["reason"].as_str().unwrap();
        named += usize::from(reason.starts_with("writing stderr"));
        assert!(
            reason.starts_with("writing stderr") || reason.starts_with("circuit breaker open"),
            "{l}"
        );
    }
    assert!(named >= 5, "{named} failures name stderr");
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn failed_log_writes_are_dropped_and_counted() {
    let addr = free_addr();
    let dead = closed_port_sink();
    let mut child = bin()
        .env("RUST_LOG", "info")
        .args(["forward", "--json", "--sink", dead.to_str().unwrap()])
        .args(["--metrics-addr", &addr.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(dev_full())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Failures open the breaker, which logs a warning: a line stderr refuses.
    stdin.write_all(hooks(20).as_bytes()).unwrap();
    stdin.flush().unwrap();
    wait_until(
        Duration::from_secs(30),
        "a failed log write counted",
        || {
            scrape(addr)
                .and_then(|m| metric(&m, "ankusa_log_write_errors_total", ""))
                .is_some_and(|n| n >= 1.0)
        },
    );
    drop(stdin);
    let out = wait_within(child, Duration::from_secs(30), "forward after its input");
    assert_eq!(json_lines(&out.stdout).len(), 20);
    assert_eq!(out.status.code(), Some(3));
}

/// `forward --retry --json` of `n` hooks to a sink answering 410, dead letters in `dl`.
fn dead_letter_gone(input: &Path, dl: &Path, extra: &[&str]) -> (Output, PathBuf) {
    let server = serve(vec![GONE]);
    let sink = http_sink(&server.url);
    let sink = rename(&sink, "gone.toml");
    let out = bin()
        .args(["forward", "--json", "--retry", "--input"])
        .arg(input)
        .args(["--sink", sink.to_str().unwrap(), "--dead-letter"])
        .arg(dl)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out, sink)
}

/// `forward --json --input DL` with the sink file `sink` rewritten to point at a healthy
/// collector (a dead letter replays only to the sink it names).
fn replay_to_a_collector(dl: &Path, sink: &Path) -> Output {
    let collector = Collector::start();
    let config = format!("type = \"http\"\nurl = \"{}\"\n", collector.url);
    std::fs::write(sink, config).unwrap();
    bin()
        .args(["forward", "--json", "--input"])
        .arg(dl)
        .arg("--sink")
        .arg(sink)
        .output()
        .unwrap()
}

/// `path` renamed to `name` in its directory (a sink is named by its file's stem).
fn rename(path: &Path, name: &str) -> PathBuf {
    let to = path.with_file_name(name);
    std::fs::rename(path, &to).unwrap();
    to
}

#[test]
fn a_dead_letter_that_cannot_be_written_is_failed_with_its_error_and_exits_74() {
    let input = temp_file("hooks.jsonl", &hooks(5));
    let (out, _) = dead_letter_gone(&input, Path::new("/dev/full"), &[]);
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.len(), 5, "{}", text(&out.stderr));
    for l in &lines {
        assert_eq!(l["outcome"], "failed", "never dead_lettered: {l}");
        assert_eq!(l["class"], "permanent", "{l}");
        let e = l["dead_letter_error"]
            .as_str()
            .unwrap_or_else(|| panic!("{l}"));
        assert!(e.contains("No space left on device"), "{e}");
    }
    assert_eq!(out.status.code(), Some(74), "{}", text(&out.stderr));
}

/// Mount a tmpfs of `size` at a fresh directory; `None` (after saying why) where this
/// process may not mount.
fn tmpfs(size: &str) -> Option<Tmpfs> {
    let dir = std::env::temp_dir().join(unique_name("ankusa-tmpfs"));
    std::fs::create_dir_all(&dir).unwrap();
    let ok = std::process::Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size},mode=0700"),
            "tmpfs",
        ])
        .arg(&dir)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let _ = std::fs::remove_dir(&dir);
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: cannot mount a tmpfs here (not root, or no mount permission); \
             /dev/full tests the same ENOSPC"
        );
        return None;
    }
    Some(Tmpfs(dir))
}

struct Tmpfs(PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Fill the filesystem at `dir` until fewer than `room` bytes are free.
fn fill(dir: &Path, room: u64) -> PathBuf {
    let filler = dir.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let chunk = vec![b'x'; 512];
    loop {
        if f.write_all(&chunk).is_err() {
            break;
        }
        let free = std::process::Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(dir)
            .output()
            .unwrap();
        let free: u64 = text(&free.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or(0);
        if free < room {
            break;
        }
    }
    let _ = f.sync_all();
    filler
}

#[test]
fn dead_letters_on_a_filling_disk_are_whole_lines_or_failed() {
    let Some(fs) = tmpfs("64k") else { return };
    let dl = fs.0.join("dead.jsonl");
    // Room for a few records of 1 KiB bodies, not for all twenty.
    let filler = fill(&fs.0, 6 * 1024);
    let body = "x".repeat(700);
    let input: String = envelopes(&unique_name("full"), 20)
        .into_iter()
        .map(|(id, _)| {
            let env = ankusa_sink_core::Envelope::builder(id, "src", body.clone())
                .build()
                .unwrap();
            serde_json::to_string(&env).unwrap() + "\n"
        })
        .collect();
    let input = temp_file("hooks.jsonl", &input);
    let (out, sink) = dead_letter_gone(&input, &dl, &["--concurrency", "1"]);
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.len(), 20);
    let stored = lines
        .iter()
        .filter(|l| l["outcome"] == "dead_lettered")
        .count();
    let unstored = lines
        .iter()
        .filter(|l| l["outcome"] == "failed" && l["dead_letter_error"].is_string())
        .count();
    assert_eq!(stored + unstored, 20, "{lines:?}");
    assert!(
        stored > 0 && unstored > 0,
        "the disk filled mid-run: {stored} stored"
    );
    assert_eq!(out.status.code(), Some(74));
    // Every stored record is one whole line; nothing torn is left behind.
    let file = std::fs::read(&dl).unwrap();
    assert!(file.ends_with(b"\n"));
    assert_eq!(json_lines(&file).len(), stored, "only whole records");
    // Space again: the next run appends after the last whole line, and every record
    // replays (to a sink of the same name, now healthy).
    std::fs::remove_file(filler).unwrap();
    let (out, _) = dead_letter_gone(&input, &dl, &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let file = std::fs::read(&dl).unwrap();
    assert_eq!(json_lines(&file).len(), stored + 20);
    let replay = replay_to_a_collector(&dl, &sink);
    assert_eq!(replay.status.code(), Some(0), "{}", text(&replay.stderr));
    assert_eq!(json_lines(&replay.stdout).len(), stored + 20);
}

#[test]
fn a_torn_last_line_is_ended_before_the_next_record_and_replay_goes_on() {
    let input = temp_file("hooks.jsonl", &hooks(2));
    let dl = input.with_file_name("dead.jsonl");
    let (out, sink) = dead_letter_gone(&input, &dl, &["--max-attempts", "1"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    // A crash or a full disk cut the next record short: no final newline.
    let mut f = std::fs::OpenOptions::new().append(true).open(&dl).unwrap();
    f.write_all(br#"{"id":"torn","source_id":"s","body_b"#)
        .unwrap();
    drop(f);
    let (out, _) = dead_letter_gone(&input, &dl, &["--max-attempts", "1"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let file = text(&std::fs::read(&dl).unwrap());
    let lines: Vec<&str> = file.lines().collect();
    assert_eq!(lines.len(), 5, "{file}");
    assert!(
        lines[2].ends_with("\"body_b"),
        "the torn line stays a line of its own"
    );
    // Replayed: the torn line is invalid (line 3), every whole record is delivered.
    let replay = replay_to_a_collector(&dl, &sink);
    let out = json_lines(&replay.stdout);
    assert_eq!(out.iter().filter(|l| l["outcome"] == "ok").count(), 4);
    let invalid: Vec<_> = out.iter().filter(|l| l["outcome"] == "invalid").collect();
    assert_eq!(invalid.len(), 1, "{out:?}");
    assert_eq!(invalid[0]["line"], 3);
    assert_eq!(replay.status.code(), Some(2), "an invalid line: exit 2");
}

#[test]
fn an_existing_dead_letter_file_others_can_read_is_refused_with_its_mode() {
    use std::os::unix::fs::PermissionsExt as _;
    let dl = temp_file("dead.jsonl", "");
    std::fs::set_permissions(&dl, std::fs::Permissions::from_mode(0o644)).unwrap();
    let input = temp_file("hooks.jsonl", &hooks(1));
    let (out, _) = dead_letter_gone(&input, &dl, &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(dl.to_str().unwrap()), "{stderr}");
    assert!(stderr.contains("mode 0644"), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing delivered");
    assert_eq!(std::fs::read(&dl).unwrap(), b"", "nothing written");
}

#[test]
fn the_dead_letter_file_is_private_never_a_symlink_and_keeps_no_credentials() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = temp_file("x", "").with_file_name("");
    let target = dir.join("elsewhere.jsonl");
    std::fs::write(&target, "").unwrap();
    let link = dir.join("dead.jsonl");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let input = temp_file("hooks.jsonl", &hooks(1));
    let (out, _) = dead_letter_gone(&input, &link, &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("symbolic link"), "{stderr}");
    assert!(stderr.contains(link.to_str().unwrap()), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing delivered");
    assert_eq!(
        std::fs::read(&target).unwrap(),
        b"",
        "nothing written through it"
    );

    // A new file is the owner's alone; the provider's credentials never reach it.
    let env = ankusa_sink_core::Envelope::builder("h-cred", "stripe", "{}")
        .header("Authorization", "Bearer SECRET-BEARER")
        .header("X-Api-Key", "SECRET-KEY")
        .header("Cf-Access-Client-Secret", "SECRET-CF")
        .header("Stripe-Signature", "t=1,v1=kept")
        .build()
        .unwrap();
    let input = temp_file("cred.jsonl", &(serde_json::to_string(&env).unwrap() + "\n"));
    let dl = input.with_file_name("private.jsonl");
    let (out, _) = dead_letter_gone(&input, &dl, &["--max-attempts", "1"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let mode = std::fs::metadata(&dl).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let file = text(&std::fs::read(&dl).unwrap());
    assert!(!file.contains("SECRET"), "{file}");
    assert!(
        file.contains("t=1,v1=kept"),
        "forwardable headers stay: {file}"
    );
}

#[test]
fn from_a_durable_source_an_unwritable_dead_letter_holds_its_hook_and_pauses_intake() {
    needs!("RabbitMQ");
    const N: usize = 40;
    let hooks = envelopes(&unique_name("held"), N);
    let queue = Broker::new();
    queue.publish(hooks.iter().map(|(_, b)| b.as_slice()));
    let source = queue.source_file("");
    let gone = serve(vec![GONE]);
    let gone_sink = rename(&http_sink(&gone.url), "gone.toml");
    let healthy = Collector::start();
    let addr = free_addr();
    let err = temp_file("forward.err", "");
    let out = err.with_file_name("forward.out");
    let child: Child = bin()
        .env("RUST_LOG", "info")
        .args(["forward", "--json", "--retry", "--from"])
        .arg(&source)
        .args(["--sink", gone_sink.to_str().unwrap(), "--sink"])
        .arg(healthy.sink_file())
        .args([
            "--dead-letter",
            "/dev/full",
            "--metrics-addr",
            &addr.to_string(),
        ])
        .args(["--max-unacked", "8", "--drain-timeout", "5"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(30), "dead letters blocked", || {
        scrape(addr).and_then(|m| metric(&m, "ankusa_dispatch_dead_letter_blocked", ""))
            == Some(1.0)
    });
    // Held: no redelivery, so the healthy sink sees each hook once; intake paused, so it
    // sees no more than the forwarder had read.
    std::thread::sleep(Duration::from_secs(4));
    let seen = healthy.distinct();
    assert!(seen <= 8, "intake paused at the window: {seen} hooks read");
    assert_eq!(healthy.duplicates(), 0, "no hook came back from the broker");
    let lines = json_lines(&std::fs::read(&out).unwrap());
    assert!(
        lines.iter().all(|l| l["outcome"] != "dead_lettered"),
        "no dead letter was stored: {lines:?}"
    );
    let stderr = text(&std::fs::read(&err).unwrap());
    assert_eq!(
        stderr.matches("a dead letter cannot be stored").count(),
        1,
        "logged once a minute at most: {stderr}"
    );
    // Stopped: what was held goes back to the queue; nothing was acknowledged.
    sigterm_and_leave(child, &queue);
    assert_eq!(
        queue.counts().0,
        N as u32,
        "every record is back in the queue"
    );
}

/// `forward --json --metrics-addr` to `sinks`, its stdin held open (nothing delivered),
/// and its first `/metrics`.
fn first_scrape(sinks: &[&OsStr]) -> (Child, ChildStdin, String) {
    let addr = free_addr();
    let mut c = bin();
    c.args(["forward", "--json", "--metrics-addr", &addr.to_string()]);
    for s in sinks {
        c.arg("--sink").arg(s);
    }
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let mut scraped = String::new();
    wait_until(Duration::from_secs(20), "a first scrape", || {
        scraped = scrape(addr).unwrap_or_default();
        !scraped.is_empty()
    });
    (child, stdin, scraped)
}

/// `hooks` as dead-letter records naming `sink` (a replay delivers each to that sink).
fn records_for(hooks: &[serde_json::Value], sink: &str) -> String {
    hooks
        .iter()
        .map(|h| {
            let mut h = h.clone();
            h["dead_letter"] = serde_json::json!({
                "sink": sink, "class": "transient", "error_class": "transient",
                "reason": "down", "attempts": 1, "first_attempt_ms": 0, "last_attempt_ms": 0
            });
            h.to_string() + "\n"
        })
        .collect()
}

#[test]
fn a_stopped_run_names_the_line_to_resume_after_and_skip_lines_resumes_there() {
    let dead = rename(&closed_port_sink(), "dead.toml");
    let all = json_lines(hooks(30).as_bytes());
    // Lines 1-10 replay to the log sink (finished at once), 11-30 to a sink that is down
    // (waiting for retries when the run is stopped).
    let input = records_for(&all[..10], "log") + &records_for(&all[10..], "dead");
    let mut child = bin()
        .args(["forward", "--json", "--retry", "--sink", "log", "--sink"])
        .arg(&dead)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    signal(&child, "-TERM");
    let out = wait_within(child, Duration::from_secs(40), "forward after SIGTERM");
    drop(stdin);
    assert_eq!(out.status.code(), Some(143));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "input lines read: 30, every line through 10 finished: resume with --skip-lines 10"
        ),
        "{stderr}"
    );
    // Resumed past the first 25 lines: only the last five are read.
    let input = temp_file("hooks.jsonl", &hooks_text(&all));
    let out = bin()
        .args([
            "forward",
            "--json",
            "--sink",
            "log",
            "--skip-lines",
            "25",
            "--input",
        ])
        .arg(&input)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let ids: Vec<serde_json::Value> = json_lines(&out.stdout)
        .iter()
        .map(|l| l["id"].clone())
        .collect();
    let want: Vec<serde_json::Value> = all[25..].iter().map(|l| l["id"].clone()).collect();
    assert_eq!(ids, want);
}

fn hooks_text(hooks: &[serde_json::Value]) -> String {
    hooks.iter().map(|h| h.to_string() + "\n").collect()
}

#[test]
fn an_outage_is_logged_and_its_held_hooks_counted_as_waiting() {
    let collector = Collector::start();
    collector.set_down(true);
    let sink = rename(&collector.sink_file(), "down.toml");
    let addr = free_addr();
    let err = temp_file("forward.err", "");
    let mut child = bin()
        .env("RUST_LOG", "info")
        .args([
            "forward",
            "--json",
            "--retry",
            "--sink",
            sink.to_str().unwrap(),
        ])
        .args(["--breaker-failures", "2", "--breaker-open", "1"])
        .args(["--metrics-addr", &addr.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(hooks(10).as_bytes()).unwrap();
    stdin.flush().unwrap();
    let log = || text(&std::fs::read(&err).unwrap());
    wait_until(Duration::from_secs(20), "the breaker opened", || {
        log().contains("circuit breaker opened")
    });
    assert!(log().contains("sink=\"down\""), "{}", log());
    // Every hook waits: for a retry, or behind the open breaker.
    wait_until(Duration::from_secs(20), "all ten waiting", || {
        scrape(addr).and_then(|m| metric(&m, "ankusa_dispatch_waiting_retry", "")) == Some(10.0)
    });
    collector.set_down(false);
    wait_until(Duration::from_secs(30), "all delivered", || {
        collector.distinct() == 10
    });
    let text = log();
    assert!(text.contains("circuit breaker half-open"), "{text}");
    assert!(text.contains("circuit breaker closed"), "{text}");
    wait_until(Duration::from_secs(10), "nothing waiting", || {
        scrape(addr).and_then(|m| metric(&m, "ankusa_dispatch_waiting_retry", "")) == Some(0.0)
    });
    drop(stdin);
    let out = wait_within(child, Duration::from_secs(30), "forward after its input");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn an_undecodable_record_whose_dead_letter_cannot_be_written_is_held_not_looped() {
    needs!("RabbitMQ");
    let queue = Broker::new();
    queue.publish([&b"not json"[..]]);
    let source = queue.source_file("");
    let healthy = Collector::start();
    let out = temp_file("forward.out", "");
    let child = bin()
        .args(["forward", "--json", "--retry", "--from"])
        .arg(&source)
        .arg("--sink")
        .arg(healthy.sink_file())
        .args(["--dead-letter", "/dev/full", "--drain-timeout", "5"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let invalid = || {
        json_lines(&std::fs::read(&out).unwrap())
            .iter()
            .filter(|l| l["outcome"] == "invalid")
            .count()
    };
    wait_until(Duration::from_secs(20), "the invalid record", || {
        invalid() >= 1
    });
    // Released to the broker, it came back about once a second for ever.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(invalid(), 1, "held, not redelivered");
    sigterm_and_leave(child, &queue);
    assert_eq!(
        queue.counts().0,
        1,
        "released at the stop: back in the queue"
    );
}

/// The `ankusa_*` metric names in `text` (a histogram's `_sum` and `_count` series named
/// by their metric).
fn metric_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("ankusa_"))
        .map(|w| {
            let w = w
                .strip_suffix("_sum")
                .or_else(|| w.strip_suffix("_count"))
                .unwrap_or(w);
            w.to_owned()
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

#[test]
fn every_metric_the_alerts_and_the_dashboard_name_is_on_metrics_from_the_start() {
    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy");
    let rules = std::fs::read_to_string(format!("{deploy}/prometheus/ankusa-alerts.yml")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{deploy}/grafana/ankusa-dispatch.json")).unwrap(),
    )
    .unwrap();
    // Every query of every panel, and the variables' queries.
    let mut queries = String::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            queries.push_str(t["expr"].as_str().unwrap());
            queries.push('\n');
        }
    }
    for v in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["definition"].as_str() {
            queries.push_str(q);
        }
    }
    let from_dashboard = metric_names(&queries);
    assert!(from_dashboard.len() >= 9, "{from_dashboard:?}");
    for wanted in [
        "ankusa_dispatch_outcomes_total",
        "ankusa_dispatch_attempt_duration_seconds",
        "ankusa_dispatch_breaker_open",
        "ankusa_dispatch_waiting_retry",
        "ankusa_dispatch_concurrency_limit",
        "ankusa_dispatch_tenants_waiting",
    ] {
        assert!(
            from_dashboard.iter().any(|n| n == wanted),
            "the dashboard shows {wanted}"
        );
    }
    let mut names = metric_names(&rules);
    assert!(names.len() >= 6, "{names:?}");
    names.extend(from_dashboard);
    names.sort_unstable();
    names.dedup();
    // Nothing delivered yet: every series is there, at zero.
    let (child, stdin, scraped) = first_scrape(&[OsStr::new("log")]);
    for name in &names {
        let series = scraped
            .lines()
            .find(|l| !l.starts_with('#') && l.starts_with(name.as_str()))
            .unwrap_or_else(|| panic!("{name} is not on /metrics at the start:\n{scraped}"));
        // At zero until it moves (a gauge of limits holds its limit).
        if name != "ankusa_dispatch_concurrency_limit" {
            assert!(series.ends_with(" 0"), "{series}");
        }
    }
    drop(stdin);
    let out = wait_within(child, Duration::from_secs(20), "forward of no input");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_sink_files_dispatch_table_sets_its_concurrency_rate_and_refuses_bad_keys() {
    let dir = temp_file("x", "").with_file_name("");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let fixed = write(
        "fixed.toml",
        "type = \"log\"\n[dispatch]\nconcurrency = 3\n",
    );
    let adaptive = write(
        "adaptive.toml",
        "type = \"log\"\n[dispatch]\nconcurrency = \"adaptive\"\nmax_concurrency = 40\n",
    );
    let (child, stdin, m) = first_scrape(&[fixed.as_os_str(), adaptive.as_os_str()]);
    assert_eq!(
        metric(&m, "ankusa_dispatch_concurrency_limit", "fixed"),
        Some(3.0)
    );
    assert_eq!(
        metric(&m, "ankusa_dispatch_concurrency_limit", "adaptive"),
        Some(1.0),
        "an adaptive limit starts at 1"
    );
    drop(stdin);
    wait_within(child, Duration::from_secs(20), "forward of no input");

    // A rate: 12 hooks at 20 a second cannot take less than half a second.
    let rated = write(
        "rated.toml",
        "type = \"log\"\n[dispatch]\nrate_per_second = 20\n",
    );
    let input = temp_file("hooks.jsonl", &hooks(12));
    let t = std::time::Instant::now();
    let out = bin()
        .args(["forward", "--json", "--input"])
        .arg(&input)
        .arg("--sink")
        .arg(&rated)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(json_lines(&out.stdout).len(), 12);
    assert!(
        t.elapsed() >= Duration::from_millis(480),
        "{:?}",
        t.elapsed()
    );

    // A bad key or value: exit 2, the key named, nothing delivered.
    let bad = write(
        "bad.toml",
        "type = \"log\"\n[dispatch]\nconcurrency = \"fast\"\n",
    );
    let out = bin()
        .args(["forward", "--json", "--input"])
        .arg(&input)
        .arg("--sink")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("concurrency"),
        "{}",
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    // The other commands read the same file.
    let out = bin().args(["info", "--sink"]).arg(&fixed).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn a_second_run_naming_the_same_dead_letter_file_exits_2_naming_it_and_the_holder() {
    let dl = temp_file("dead.jsonl", "");
    let d = dl.to_str().unwrap();
    // The first run holds the file while it reads its (open) stdin.
    let mut first = bin()
        .args(["forward", "--sink", "log", "--dead-letter", d])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = first.id();
    // The first run holds its lock once it has opened the file (its `flock` is listed).
    wait_until(
        Duration::from_secs(20),
        "the first run holds the file",
        || {
            std::fs::read_to_string("/proc/locks")
                .unwrap_or_default()
                .lines()
                .any(|l| l.split_whitespace().nth(4) == Some(pid.to_string().as_str()))
        },
    );
    let out = bin()
        .args(["forward", "--sink", "log", "--dead-letter", d])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(d) && err.contains(&format!("pid {pid}")),
        "{err}"
    );
    drop(first.stdin.take());
    assert_eq!(first.wait().unwrap().code(), Some(0));
    // Free again once the first run ended.
    let out = bin()
        .args(["forward", "--sink", "log", "--dead-letter", d])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

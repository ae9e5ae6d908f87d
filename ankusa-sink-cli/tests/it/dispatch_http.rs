//! The dispatcher through the binary, against scripted HTTP servers on 127.0.0.1: dead letters,
//! the horizon, retries that hold no slot, the breaker, metrics and replays.

use super::hardening::{hooks, signal, wait_within};
use super::http::{GONE, OK, UNAVAILABLE};
use super::{
    bin, free_addr, json_lines, metric, run, scrape, spawn_piped, stdout_lines, temp_file, text,
};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const WAIT_120: &str = "HTTP/1.1 429 Too Many Requests\r\nretry-after: 120\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
const WAIT_3600: &str = "HTTP/1.1 429 Too Many Requests\r\nretry-after: 3600\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
const UNAUTHORIZED: &str =
    "HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
const NOT_FOUND: &str = "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// One request a [`Server`] answered: its header lines (names lowercased) and body.
pub(super) struct Request {
    headers: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
}

impl Request {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A server answering every request with `response`, a thread per connection (a run may
/// hold many connections at once), recording each request.
pub(super) struct Server {
    pub(super) url: String,
    pub(super) requests: Arc<Mutex<Vec<Request>>>,
}

impl Server {
    fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

pub(super) fn server_on(listener: TcpListener, response: &'static str) -> Server {
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let seen = seen.clone();
            thread::spawn(move || answer(stream, response, &seen));
        }
    });
    Server { url, requests }
}

fn answer(mut stream: TcpStream, response: &str, seen: &Mutex<Vec<Request>>) {
    if read_request(&stream, seen) {
        let _ = stream.write_all(response.as_bytes());
    }
}

/// Read one whole request from `stream` and record it; false when none came.
fn read_request(stream: &TcpStream, seen: &Mutex<Vec<Request>>) -> bool {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(clone) = stream.try_clone() else {
        return false;
    };
    let mut reader = BufReader::new(clone);
    let mut headers = Vec::new();
    let mut len = 0usize;
    let mut first = true;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            // Closed before a whole head: no request.
            return false;
        }
        if line == "\r\n" {
            break;
        }
        if std::mem::take(&mut first) {
            continue;
        }
        if let Some((name, value)) = line.split_once(':') {
            let name = name.trim().to_ascii_lowercase();
            let value = value.trim().to_owned();
            if name == "content-length" {
                len = value.parse().unwrap_or(0);
            }
            headers.push((name, value));
        }
    }
    let mut body = vec![0; len];
    if reader.read_exact(&mut body).is_err() {
        return false;
    }
    seen.lock().unwrap().push(Request { headers, body });
    true
}

/// A server that reads the first request and never answers it (the connection held open),
/// and answers every later one with `response`.
fn silent_first(response: &'static str) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            if read_request(&stream, &seen) {
                if seen.lock().unwrap().len() == 1 {
                    held.push(stream);
                } else {
                    let _ = stream.write_all(response.as_bytes());
                }
            }
        }
    });
    Server { url, requests }
}

/// An HTTP sink config file named `<name>.toml` (the sink's name in outcome lines).
fn sink_file(name: &str, url: &str) -> PathBuf {
    temp_file(
        &format!("{name}.toml"),
        &format!("type = \"http\"\nurl = \"{url}\"\ntimeout_ms = 2000\n"),
    )
}

/// A server answering every request with `response`, and a sink file `name.toml` for it.
fn target(name: &str, response: &'static str) -> (Server, PathBuf) {
    let server = server_on(TcpListener::bind("127.0.0.1:0").unwrap(), response);
    let sink = sink_file(name, &server.url);
    (server, sink)
}

/// `forward --json` with `args`: it must exit `code` with `n` outcome lines, returned.
fn forward_lines(args: &[&str], code: i32, n: usize) -> Vec<Value> {
    let mut all = vec!["forward", "--json"];
    all.extend_from_slice(args);
    let out = run(&all);
    assert_eq!(out.status.code(), Some(code), "{}", text(&out.stderr));
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.len(), n, "{lines:?}");
    lines
}

/// Close the run's stdin: it must exit `code` within 30 s (`err`, its stderr file).
fn close_and_wait(child: Child, stdin: ChildStdin, err: &Path, code: i32, what: &str) {
    drop(stdin);
    let out = wait_within(child, Duration::from_secs(30), what);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        std::fs::read_to_string(err).unwrap()
    );
}

/// A path for a file the run creates, in a fresh temp dir.
fn fresh_path(name: &str) -> PathBuf {
    temp_file("unused", "").with_file_name(name)
}

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The lines of a dead-letter file.
fn dead_letters(path: &Path) -> Vec<Value> {
    json_lines(&std::fs::read(path).unwrap())
}

/// Spawn the binary with stdin and stdout piped; stderr goes to a file, so a chatty run can
/// never block on a full pipe.
fn spawn(args: &[&str]) -> (Child, ChildStdin, mpsc::Receiver<String>, PathBuf) {
    let err = fresh_path("stderr.txt");
    let mut child = bin()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let rx = stdout_lines(&mut child);
    (child, stdin, rx, err)
}

/// The next outcome line, waiting at most until `deadline`.
fn next_line(rx: &mpsc::Receiver<String>, deadline: Instant, what: &str) -> Value {
    let left = deadline.saturating_duration_since(Instant::now());
    let line = rx
        .recv_timeout(left)
        .unwrap_or_else(|e| panic!("{what}: no outcome line ({e:?})"));
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// Scrape until `pred` holds of it, at most `limit`.
fn scrape_until(
    addr: SocketAddr,
    limit: Duration,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> String {
    let start = Instant::now();
    let mut last = None;
    loop {
        if let Some(m) = scrape(addr) {
            if pred(&m) {
                return m;
            }
            last = Some(m);
        }
        assert!(
            start.elapsed() < limit,
            "{what} within {limit:?}; last scrape:\n{}",
            last.unwrap_or_default()
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// The keys a dead-letter object has, exactly.
const DEAD_LETTER_KEYS: [&str; 8] = [
    "attempts",
    "class",
    "error_class",
    "first_attempt_ms",
    "last_attempt_ms",
    "may_have_landed",
    "reason",
    "sink",
];

/// Check one dead-letter line: its envelope is exactly `envelope`; returns its
/// `dead_letter` object after checking the fields every record has.
fn split_dead_letter(line: &Value, envelope: &Value, started_ms: i64, ended_ms: i64) -> Value {
    let mut env = line.clone();
    let dead = env
        .as_object_mut()
        .and_then(|m| m.remove("dead_letter"))
        .unwrap_or_else(|| panic!("no dead_letter object: {line}"));
    assert_eq!(&env, envelope, "the envelope, as gen prints it");
    let keys: Vec<&str> = dead
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, DEAD_LETTER_KEYS, "{dead}");
    assert!(!dead["reason"].as_str().unwrap().is_empty(), "{dead}");
    let first = dead["first_attempt_ms"].as_i64().unwrap();
    let last = dead["last_attempt_ms"].as_i64().unwrap();
    assert!(
        started_ms <= first && first <= last && last <= ended_ms,
        "attempt times {first}..{last} outside the run {started_ms}..{ended_ms}"
    );
    dead
}

/// `gen` lines and their JSON.
fn gen_hooks(n: usize) -> (String, Vec<Value>) {
    let lines = hooks(n);
    let values = json_lines(lines.as_bytes());
    assert_eq!(values.len(), n);
    (lines, values)
}

/// Forward `n` gen hooks to a 410 sink named `name` with `--retry --dead-letter F`: checks
/// the run and F, returns the hooks and F.
fn dead_letter_410(name: &str, n: usize) -> (Vec<Value>, PathBuf) {
    let (server, sink) = target(name, GONE);
    let (lines, envelopes) = gen_hooks(n);
    let input = temp_file("in.jsonl", &lines);
    let dl = fresh_path("dead.jsonl");
    let started = now_ms();
    let outcomes = forward_lines(
        &[
            "--sink",
            s(&sink),
            "--input",
            s(&input),
            "--retry",
            "--dead-letter",
            s(&dl),
        ],
        3,
        n,
    );
    let ended = now_ms();
    for o in &outcomes {
        assert_eq!(o["outcome"], "dead_lettered", "{o}");
        assert_eq!(o["sink"], name, "{o}");
        assert_eq!(o["class"], "permanent", "{o}");
        assert_eq!(o["attempts"], 1, "{o}");
    }
    assert_eq!(server.count(), n, "permanent is never retried");
    let records = dead_letters(&dl);
    assert_eq!(records.len(), n, "one line per dead letter");
    for env in &envelopes {
        let record = records
            .iter()
            .find(|r| r["id"] == env["id"])
            .unwrap_or_else(|| panic!("no dead letter for {}", env["id"]));
        let dead = split_dead_letter(record, env, started, ended);
        assert_eq!(dead["sink"], name);
        assert_eq!(dead["class"], "permanent");
        assert_eq!(dead["error_class"], "permanent");
        assert_eq!(dead["attempts"], 1);
    }
    (envelopes, dl)
}

#[test]
fn a_410_lands_in_the_dead_letter_file_as_permanent() {
    dead_letter_410("gone", 1);
}

#[test]
fn a_503_dead_letters_transient_at_max_elapsed() {
    let (server, sink) = target("flaky", UNAVAILABLE);
    let dl = fresh_path("dead.jsonl");
    let started = now_ms();
    let start = Instant::now();
    let (child, stdin, rx, err) = spawn(&[
        "deliver",
        "--sink",
        s(&sink),
        "--id",
        "h-503",
        "--retry",
        "--max-elapsed",
        "3",
        "--dead-letter",
        s(&dl),
        "--json",
    ]);
    drop(stdin);
    let out = wait_within(child, Duration::from_secs(60), "--max-elapsed 3");
    let took = start.elapsed();
    let ended = now_ms();
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(took < Duration::from_secs(30), "took {took:?}: {stderr}");
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let line: Value = serde_json::from_str(&rx.recv().unwrap()).unwrap();
    assert_eq!(line["outcome"], "dead_lettered", "{line}");
    assert_eq!(line["error_class"], "transient", "{line}");
    let records = dead_letters(&dl);
    assert_eq!(records.len(), 1, "{records:?}");
    let dead = records[0]["dead_letter"].clone();
    assert_eq!(records[0]["id"], "h-503");
    assert_eq!(dead["sink"], "flaky");
    assert_eq!(dead["class"], "transient");
    assert_eq!(dead["error_class"], "transient");
    let attempts = dead["attempts"].as_u64().unwrap();
    assert!(attempts > 1, "retried before the horizon: {dead}");
    assert_eq!(attempts as usize, server.count(), "{dead}");
    let (first, last) = (
        dead["first_attempt_ms"].as_i64().unwrap(),
        dead["last_attempt_ms"].as_i64().unwrap(),
    );
    assert!(started <= first && first < last && last <= ended, "{dead}");
    assert!(
        last - first <= 3000,
        "no attempt starts past the horizon: {dead}"
    );
}

#[test]
fn a_429_longer_than_the_horizon_dead_letters_throttled_after_one_attempt() {
    let (server, sink) = target("busy", WAIT_120);
    let dl = fresh_path("dead.jsonl");
    let start = Instant::now();
    let (mut child, stdin, rx, err) = spawn(&[
        "deliver",
        "--sink",
        s(&sink),
        "--id",
        "h-ra",
        "--retry",
        "--max-elapsed",
        "5",
        "--dead-letter",
        s(&dl),
        "--json",
    ]);
    drop(stdin);
    let line = next_line(
        &rx,
        start + Duration::from_secs(60),
        "Retry-After 120 over --max-elapsed 5",
    );
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "waited {:?}",
        start.elapsed()
    );
    let code = child.wait().unwrap().code();
    assert_eq!(code, Some(3), "{}", std::fs::read_to_string(&err).unwrap());
    assert_eq!(line["outcome"], "dead_lettered", "{line}");
    assert_eq!(line["sink"], "busy", "{line}");
    assert_eq!(line["error_class"], "throttled", "{line}");
    assert_eq!(line["attempts"], 1, "{line}");
    assert_eq!(server.count(), 1);
    let records = dead_letters(&dl);
    assert_eq!(records.len(), 1, "{records:?}");
    let dead = &records[0]["dead_letter"];
    assert_eq!(records[0]["id"], "h-ra");
    assert_eq!(dead["sink"], "busy");
    assert_eq!(dead["class"], "retry_after");
    assert_eq!(dead["error_class"], "throttled");
    assert_eq!(dead["attempts"], 1);
}

#[test]
fn hooks_waiting_on_retry_after_hold_no_slot_and_sigterm_abandons_each() {
    const N: usize = 5000;
    let (server, slow) = target("slow", WAIT_3600);
    let (lines, envelopes) = gen_hooks(N);
    let ids: BTreeSet<String> = envelopes
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    let input = temp_file("in.jsonl", &lines);
    let (child, stdin, rx, err) = spawn(&[
        "forward",
        "--sink",
        s(&slow),
        "--sink",
        "log",
        "--retry",
        "--concurrency",
        "4",
        "--drain-timeout",
        "5",
        "--input",
        s(&input),
        "--json",
    ]);
    // Every log line comes while the slow sink's hooks wait out their hour: with a slot
    // held per waiting hook, 4 of them would stop the run here.
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut log_ok = BTreeSet::new();
    while log_ok.len() < N {
        let l = next_line(&rx, deadline, "the log sink's lines");
        assert_eq!(l["sink"], "log", "only log lines while slow waits: {l}");
        assert_eq!(l["outcome"], "ok", "{l}");
        assert!(
            log_ok.insert(l["id"].as_str().unwrap().to_owned()),
            "twice: {l}"
        );
    }
    assert_eq!(log_ok, ids);
    let asked = server.count();
    assert!(
        (1..=N).contains(&asked),
        "the slow sink was tried: {asked} requests"
    );
    // The input is read and every hook left waits an hour: the forwarder sleeps. (Its
    // loop once kept polling the finished reader's channel: a core at 100 % for the hour.)
    let before = cpu_ticks(child.id());
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_ticks(child.id()) - before;
    assert!(
        used < 50,
        "{used} ticks of CPU in 2 s while every hook waits"
    );
    signal(&child, "-TERM");
    let out = wait_within(child, Duration::from_secs(60), "forward after SIGTERM");
    drop(stdin);
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert_eq!(out.status.code(), Some(143), "{stderr}");
    let rest: Vec<Value> = rx
        .iter()
        .map(|l| serde_json::from_str(&l).unwrap())
        .collect();
    assert_eq!(rest.len(), N, "one line per hook per sink, 2N in all");
    let mut abandoned = BTreeSet::new();
    let mut by_class: BTreeMap<String, usize> = BTreeMap::new();
    for l in &rest {
        assert_eq!(l["sink"], "slow", "{l}");
        assert_eq!(l["outcome"], "abandoned", "{l}");
        assert!(
            abandoned.insert(l["id"].as_str().unwrap().to_owned()),
            "twice: {l}"
        );
        *by_class
            .entry(l["class"].as_str().unwrap_or("none").to_owned())
            .or_default() += 1;
    }
    assert_eq!(abandoned, ids);
    assert!(
        by_class.get("retry_after").copied().unwrap_or(0) >= 1,
        "the hooks that were tried say why they wait: {by_class:?}"
    );
    assert!(stderr.contains(&format!("abandoned {N}")), "{stderr}");
}

#[test]
fn the_breaker_opens_on_a_dead_port_holds_attempts_and_closes_when_it_returns() {
    const N: usize = 20;
    let port = free_addr();
    let sink = sink_file("down", &format!("http://{port}/hook"));
    let metrics = free_addr();
    let (child, mut stdin, rx, err) = spawn(&[
        "forward",
        "--sink",
        s(&sink),
        "--retry",
        "--breaker-failures",
        "3",
        "--breaker-open",
        "2",
        "--metrics-addr",
        &metrics.to_string(),
        "--json",
    ]);
    let (lines, envelopes) = gen_hooks(N);
    stdin.write_all(lines.as_bytes()).unwrap();
    stdin.flush().unwrap();
    let attempts = |m: &str| metric(m, "ankusa_dispatch_attempts_total", "down").unwrap_or(0.0);
    let open = |m: &str| metric(m, "ankusa_dispatch_breaker_open", "down");
    let m = scrape_until(metrics, Duration::from_secs(30), "breaker open", |m| {
        open(m) == Some(1.0)
    });
    // While open, attempts wait: at most one probe per 2 s open period. Without a breaker,
    // 20 hooks backing off from 100 ms would make dozens of attempts in this window.
    let before = attempts(&m);
    let first = m;
    thread::sleep(Duration::from_secs(3));
    let m = scrape(metrics).expect("metrics while open");
    let after = attempts(&m);
    assert_eq!(open(&m), Some(1.0), "still open:\n{m}");
    // Both scrapes in the message: this failed once under a loaded suite (0 -> 21), not
    // since; what the exporter said then is what will explain it.
    assert!(
        after - before <= 2.0,
        "attempts went {before} -> {after} while the breaker was open\n\
         first scrape:\n{first}\nsecond:\n{m}\nstderr: {}",
        std::fs::read_to_string(&err).unwrap_or_default()
    );
    assert!(rx.try_recv().is_err(), "no hook finished yet");

    // The port comes back: a probe gets through, the breaker closes, every hook delivers.
    let server = server_on(TcpListener::bind(port).unwrap(), OK);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut ok = BTreeSet::new();
    while ok.len() < N {
        let l = next_line(&rx, deadline, "deliveries after the port returned");
        assert_eq!(l["outcome"], "ok", "{l}");
        assert_eq!(l["sink"], "down", "{l}");
        ok.insert(l["id"].as_str().unwrap().to_owned());
    }
    let want: BTreeSet<String> = envelopes
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ok, want);
    assert_eq!(server.count(), N, "each hook delivered once");
    scrape_until(metrics, Duration::from_secs(10), "breaker closed", |m| {
        open(m) == Some(0.0)
    });
    close_and_wait(child, stdin, &err, 0, "forward after stdin closed");
}

#[test]
fn config_errors_are_counted_on_metrics() {
    for (name, response, retry) in [
        ("denied", UNAUTHORIZED, true),
        ("nowhere", NOT_FOUND, false),
    ] {
        let (server, sink) = target(name, response);
        let metrics = free_addr();
        let addr = metrics.to_string();
        let mut args = vec!["forward", "--sink", s(&sink), "--metrics-addr", &addr];
        args.extend(["--json"]);
        if retry {
            args.push("--retry");
        }
        let (child, mut stdin, rx, err) = spawn(&args);
        stdin.write_all(hooks(2).as_bytes()).unwrap();
        stdin.flush().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        for _ in 0..2 {
            let l = next_line(&rx, deadline, name);
            // No --dead-letter: nothing is stored, so never `dead_lettered`.
            assert_eq!(l["outcome"], "failed", "{l}");
            assert_eq!(l["class"], "config", "{l}");
            assert_eq!(l["sink"], name, "{l}");
        }
        // stdin still open: the run, and its /metrics, are still up.
        let m = scrape_until(metrics, Duration::from_secs(10), "config errors", |m| {
            metric(m, "ankusa_dispatch_config_errors_total", name).is_some()
        });
        assert_eq!(
            metric(&m, "ankusa_dispatch_config_errors_total", name),
            Some(2.0),
            "{m}"
        );
        assert_eq!(
            metric(&m, "ankusa_dispatch_attempts_total", name),
            Some(2.0),
            "config is never retried:\n{m}"
        );
        assert_eq!(
            metric(&m, "ankusa_dispatch_breaker_open", name),
            Some(0.0),
            "config failures never open the breaker:\n{m}"
        );
        close_and_wait(child, stdin, &err, 3, name);
        assert_eq!(server.count(), 2);
    }
}

#[test]
fn a_dead_letter_file_replays_with_one_replay_id_per_run() {
    const N: usize = 3;
    let (envelopes, dl) = dead_letter_410("target", N);
    let ids: BTreeSet<&str> = envelopes
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();

    let mut replay_ids = Vec::new();
    for _ in 0..2 {
        // The same sink name, now pointing to a server that takes them.
        let (server, sink) = target("target", OK);
        let lines = forward_lines(&["--input", s(&dl), "--sink", s(&sink)], 0, N);
        for l in &lines {
            assert_eq!(l["outcome"], "ok", "{l}");
            assert_eq!(l["sink"], "target", "{l}");
        }
        let got: BTreeSet<&str> = lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
        assert_eq!(got, ids);
        let requests = server.requests.lock().unwrap();
        assert_eq!(requests.len(), N);
        let seen: BTreeSet<String> = requests
            .iter()
            .map(|r| {
                r.header("x-ankusa-replay-id")
                    .expect("a replay carries its replay id")
                    .to_owned()
            })
            .collect();
        assert_eq!(seen.len(), 1, "one replay id per run: {seen:?}");
        let id = seen.into_iter().next().unwrap();
        assert!(!id.is_empty());
        replay_ids.push(id);
    }
    assert_ne!(replay_ids[0], replay_ids[1], "a fresh replay id per run");

    // With fan-out, a dead letter goes back only to the sink it names.
    let (server, sink) = target("target", OK);
    let lines = forward_lines(
        &["--input", s(&dl), "--sink", "log", "--sink", s(&sink)],
        0,
        N,
    );
    assert!(lines.iter().all(|l| l["sink"] == "target"), "{lines:?}");
    assert_eq!(server.count(), N);

    // A dead letter naming a sink the run does not have.
    let (server, other) = target("other", OK);
    let lines = forward_lines(&["--input", s(&dl), "--sink", s(&other)], 3, N);
    for l in &lines {
        assert_eq!(l["outcome"], "failed", "{l}");
        assert_eq!(l["sink"], "target", "{l}");
        assert_eq!(l["class"], "config", "{l}");
    }
    assert_eq!(server.count(), 0, "never sent to another sink");
}

/// `deliver --json --id ID` with `extra` to sinks `a` and `b`, answering `to_a` and `to_b`:
/// each is sent the hook once.
fn deliver_to_a_and_b(to_a: &'static str, to_b: &'static str, id: &str, extra: &[&str]) -> Output {
    let ((a, fa), (b, fb)) = (target("a", to_a), target("b", to_b));
    let mut args = vec![
        "deliver",
        "--sink",
        s(&fa),
        "--sink",
        s(&fb),
        "--id",
        id,
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = run(&args);
    assert_eq!((a.count(), b.count()), (1, 1), "{}", text(&out.stderr));
    out
}

#[test]
fn deliver_fans_out_one_line_per_sink() {
    let out = deliver_to_a_and_b(OK, OK, "h-fan", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            r#"{"id":"h-fan","sink":"a","outcome":"ok","attempts":1}"#,
            r#"{"id":"h-fan","sink":"b","outcome":"ok","attempts":1}"#,
        ]
    );

    // One sink refuses for good: the other still delivers, the run exits 3, and without
    // --retry the failed pair is what lands in the dead-letter file.
    let dl = fresh_path("dead.jsonl");
    let out = deliver_to_a_and_b(OK, GONE, "h-fan2", &["--dead-letter", s(&dl)]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.len(), 2, "{lines:?}");
    let by_sink: BTreeMap<&str, &Value> = lines
        .iter()
        .map(|l| (l["sink"].as_str().unwrap(), l))
        .collect();
    assert_eq!(by_sink["a"]["outcome"], "ok");
    assert_eq!(by_sink["b"]["outcome"], "failed");
    assert_eq!(by_sink["b"]["class"], "permanent");
    let records = dead_letters(&dl);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["id"], "h-fan2");
    assert_eq!(records[0]["dead_letter"]["sink"], "b");
}

#[test]
fn a_dead_letter_file_is_never_its_own_input() {
    let (_, dl) = dead_letter_410("again", 3);
    let before = std::fs::read(&dl).unwrap();
    let (server, sink) = target("again", GONE);
    // Before: each failed replay was appended to the file being read, and read again.
    for stdin_is_the_file in [false, true] {
        let mut args = vec!["forward", "--sink", s(&sink), "--dead-letter", s(&dl)];
        args.extend(["--json", "--input"]);
        let child = if stdin_is_the_file {
            args.push("-");
            spawn_piped(&args, std::fs::File::open(&dl).unwrap())
        } else {
            args.push(s(&dl));
            spawn_piped(&args, Stdio::null())
        };
        let out = wait_within(child, Duration::from_secs(30), "replaying into itself");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("is the input"), "{stderr}");
        assert_eq!(std::fs::read(&dl).unwrap(), before, "the file is untouched");
    }
    assert_eq!(server.count(), 0);
}

/// An attempt whose request left and got no answer may have landed: the dispatcher retries
/// it under the same idempotency key, counts the retry, and the outcome lines say so.
#[test]
fn a_request_left_unanswered_is_retried_under_the_same_idempotency_key_and_counted() {
    let server = silent_first(OK);
    let sink = sink_file("silent", &server.url);
    let metrics = free_addr();
    let addr = metrics.to_string();
    let args = [
        "forward",
        "--sink",
        s(&sink),
        "--metrics-addr",
        &addr,
        "--json",
        "--retry",
    ];
    let (child, mut stdin, rx, err) = spawn(&args);
    stdin.write_all(hooks(1).as_bytes()).unwrap();
    stdin.flush().unwrap();
    let l = next_line(&rx, Instant::now() + Duration::from_secs(60), "silent");
    assert_eq!(
        (l["outcome"].as_str(), l["attempts"].as_u64()),
        (Some("ok"), Some(2)),
        "{l}"
    );
    assert!(
        l.get("may_have_landed").is_none(),
        "no key on ok lines: {l}"
    );
    let m = scrape_until(metrics, Duration::from_secs(10), "the retry count", |m| {
        metric(m, "ankusa_dispatch_may_have_landed_retries_total", "silent").is_some()
    });
    assert_eq!(
        metric(
            &m,
            "ankusa_dispatch_may_have_landed_retries_total",
            "silent"
        ),
        Some(1.0),
        "{m}"
    );
    close_and_wait(child, stdin, &err, 0, "silent");
    let requests = server.requests.lock().unwrap();
    assert_eq!(requests.len(), 2);
    let keys: Vec<_> = requests
        .iter()
        .map(|r| r.header("x-ankusa-idempotency-key").unwrap().to_owned())
        .collect();
    assert_eq!(
        keys[0], keys[1],
        "the retry carries the first attempt's key"
    );
    assert_eq!(
        requests[0].header("x-ankusa-id"),
        requests[1].header("x-ankusa-id")
    );
}

/// `may_have_landed` on `failed` lines: true for a request that left unanswered, false for a
/// port nothing listens on, null when `--attempt-timeout` cut the attempt off (the sink
/// could not say).
#[test]
fn failed_lines_say_whether_the_hook_may_have_landed() {
    let landed = |sink: &Path, extra: &[&str]| {
        let mut args = vec!["deliver", "--sink", s(sink), "--json"];
        args.extend(extra);
        let out = run(&args);
        let l: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
        assert_eq!(l["outcome"], "failed", "{l}");
        l["may_have_landed"].clone()
    };
    let silent = silent_first(OK);
    assert_eq!(
        landed(&sink_file("silent", &silent.url), &[]),
        Value::Bool(true)
    );
    let closed = format!("http://{}/hook", free_addr());
    assert_eq!(
        landed(&sink_file("closed", &closed), &[]),
        Value::Bool(false)
    );
    let cut = silent_first(OK);
    let slow = temp_file(
        "slow.toml",
        &format!(
            "type = \"http\"\nurl = \"{}\"\ntimeout_ms = 30000\n",
            cut.url
        ),
    );
    assert_eq!(landed(&slow, &["--attempt-timeout", "1"]), Value::Null);
}

/// User + system CPU time of process `pid` so far, in clock ticks (`/proc/<pid>/stat`).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

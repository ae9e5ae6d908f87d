//! `--metrics-addr` under clients that never finish a request, with the run's descriptor
//! limit lowered: the listener used to keep every such connection, spin on `accept` once the
//! descriptors ran out (a warning per try, gigabytes of stderr) and leave none to the sinks.

use super::hardening::hooks;
use super::http::{OK, http_sink, serve};
use super::{free_addr, metric, stdout_lines, text};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// The connection timeout the runs below get (`ANKUSA_METRICS_IDLE_TIMEOUT_MS`, read by debug
/// builds only): 10 s per round of held connections would make each test a minute long.
const TIMEOUT_MS: &str = "1000";
/// What a flood's warning line starts with.
const ACCEPT_FAILED: &str = "metrics listener: accepting a connection failed";
/// A request head cut off before its empty line: the server waits for the rest.
const HALF_HEAD: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n";
/// How long any one step below may take before the test fails: far more than it needs.
const PATIENCE: Duration = Duration::from_secs(60);

/// A `forward --json` run serving metrics, stdin held open.
struct Run {
    child: Child,
    /// `None` once closed.
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr: PathBuf,
    metrics: SocketAddr,
    /// Outcome lines read so far.
    read: usize,
}

/// `forward --json --sink SINK --metrics-addr ... args`, its descriptor limit lowered to
/// `nofile` (soft and hard) by the shell: setting it in `pre_exec` would need `unsafe`.
fn forward(nofile: Option<u32>, sink: &str, args: &[&str]) -> Run {
    forward_with(nofile, sink, args, TIMEOUT_MS, None)
}

/// [`forward`] with the connection timeout `timeout_ms`, and `token` sent with every scrape
/// (the run given `--metrics-token-file` of it).
fn forward_with(
    nofile: Option<u32>,
    sink: &str,
    args: &[&str],
    timeout_ms: &str,
    token: Option<&str>,
) -> Run {
    let metrics = free_addr();
    let dir = std::env::temp_dir().join(ankusa_sink_testkit::support::unique_name("metrics"));
    std::fs::create_dir_all(&dir).unwrap();
    let stderr = dir.join("stderr.txt");
    let limit = nofile.map_or_else(String::new, |n| format!("ulimit -n {n} && "));
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("{limit}exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_ankusa-sink"))
        .args(["forward", "--json", "--sink", sink])
        .args(["--metrics-addr", &metrics.to_string()])
        .args(args)
        .env("RUST_LOG", "warn")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("ANKUSA_METRICS_IDLE_TIMEOUT_MS", timeout_ms)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // A file: a run that floods stderr must not block on a full pipe.
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let lines = stdout_lines(&mut child);
    let run = Run {
        child,
        stdin: Some(stdin),
        lines,
        stderr,
        metrics,
        read: 0,
    };
    // Up once a scrape is answered.
    let start = Instant::now();
    while get_with(run.metrics, "/metrics", token).is_none() {
        assert!(start.elapsed() < PATIENCE, "no /metrics at {}", run.metrics);
        thread::sleep(Duration::from_millis(50));
    }
    run
}

impl Run {
    /// Write `n` hooks to the run's stdin.
    fn send_hooks(&mut self, n: usize) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(hooks(n).as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// The run's stderr so far; it must be short.
    fn short_stderr(&self) -> String {
        let stderr = std::fs::read_to_string(&self.stderr).unwrap();
        assert!(stderr.len() < 4096, "{}", head_of(&stderr));
        stderr
    }

    /// Close stdin; the run must exit 0 with `n` ok outcome lines in all (`next_ok` counts
    /// those read before) and a short stderr, which is returned.
    fn finish(mut self, n: usize) -> String {
        drop(self.stdin.take());
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "forward still running {PATIENCE:?} after its input ended"
            );
            thread::sleep(Duration::from_millis(20));
        };
        let stderr = self.short_stderr();
        assert_eq!(status.code(), Some(0), "{stderr}");
        let lines: Vec<String> = self.lines.iter().collect();
        assert_eq!(self.read + lines.len(), n, "{lines:?}");
        for line in &lines {
            assert!(line.contains(r#""outcome":"ok""#), "{line}");
        }
        stderr
    }
}

impl Drop for Run {
    /// A failed test leaves no run behind (one spinning on `accept` fills the disk), and no
    /// files.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(dir) = self.stderr.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The start of a possibly huge text, for a failure message.
fn head_of(s: &str) -> String {
    format!(
        "{} bytes: {}",
        s.len(),
        s.chars().take(2000).collect::<String>()
    )
}

/// Send `request` on a fresh connection and read the answer until the server closes;
/// `None` if the connection fails.
fn exchange(addr: SocketAddr, request: &[u8]) -> Option<String> {
    let mut c = TcpStream::connect(addr).ok()?;
    c.set_read_timeout(Some(PATIENCE)).ok()?;
    c.write_all(request).ok()?;
    let mut out = Vec::new();
    c.read_to_end(&mut out).ok()?;
    Some(text(&out))
}

/// `GET path`'s answer when it is a 200.
fn get(addr: SocketAddr, path: &str) -> Option<String> {
    get_with(addr, path, None)
}

/// [`get`] with `Authorization: Bearer TOKEN` when a token is given.
fn get_with(addr: SocketAddr, path: &str, token: Option<&str>) -> Option<String> {
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n");
    exchange(addr, request.as_bytes()).filter(|a| a.starts_with("HTTP/1.1 200 OK\r\n"))
}

/// `n` connections that each sent half a request head and wait.
fn half_requests(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(HALF_HEAD).unwrap();
            c
        })
        .collect()
}

/// Every one of `held` is closed by the server (each waits for its turn in the accept queue
/// first), all within [`PATIENCE`].
fn all_closed_by_the_server(held: Vec<TcpStream>) {
    let deadline = Instant::now() + PATIENCE;
    for (i, mut c) in held.into_iter().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        c.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        let mut buf = [0u8; 256];
        match c.read(&mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
            Ok(n) => panic!("connection {i}: an answer to half a head: {:?}", &buf[..n]),
            Err(e) => panic!("connection {i} still open after {PATIENCE:?}: {e}"),
        }
    }
}

/// The next outcome line of `run`, which must be ok.
fn next_ok(run: &mut Run, what: &str) {
    let line = run
        .lines
        .recv_timeout(PATIENCE)
        .unwrap_or_else(|e| panic!("{what}: no outcome line ({e:?})"));
    assert!(line.contains(r#""outcome":"ok""#), "{what}: {line}");
    run.read += 1;
}

/// Lines of `stderr` reporting failed accepts; at most one per 10 s of a run that lasted at
/// most `lasted`.
fn accept_reports(stderr: &str, lasted: Duration) -> usize {
    let n = stderr.lines().filter(|l| l.contains(ACCEPT_FAILED)).count();
    let allowed = 1 + usize::try_from(lasted.as_secs() / 10).unwrap();
    assert!(
        n <= allowed,
        "{n} accept reports in {lasted:?}: {}",
        head_of(stderr)
    );
    n
}

#[test]
fn half_sent_requests_past_the_descriptor_limit_cost_a_log_line_not_a_flood() {
    let started = Instant::now();
    // 40 descriptors: about 10 are the run's own, so the listener runs out long before its
    // 64 connections, and `accept` fails with EMFILE while connections wait.
    let mut run = forward(Some(40), "log", &[]);
    let held = half_requests(run.metrics, 100);

    // The log sink needs no descriptor: delivery goes on while the listener has none left.
    run.send_hooks(50);
    for _ in 0..50 {
        next_ok(&mut run, "a hook while the listener is out of descriptors");
    }
    run.short_stderr();
    // A scrape waits in the accept queue behind the held connections, which time out.
    let scraped = get(run.metrics, "/metrics").expect("a scrape through the flood");
    assert_eq!(
        metric(&scraped, "ankusa_dispatch_attempts_total", "log"),
        Some(50.0),
        "{scraped}"
    );
    all_closed_by_the_server(held);
    assert!(get(run.metrics, "/metrics").is_some(), "a scrape after");

    let stderr = run.finish(50);
    // Proof the limit was hit (the test is about that path), and reported, not repeated.
    assert!(
        accept_reports(&stderr, started.elapsed()) >= 1,
        "{}",
        head_of(&stderr)
    );
}

#[test]
fn half_sent_requests_beyond_the_descriptor_limit_leave_an_http_sink_its_sockets() {
    let started = Instant::now();
    let server = serve(vec![OK]);
    let sink = http_sink(&server.url);
    // 128 descriptors: the listener's 64 connections leave the HTTP sink the rest.
    let mut run = forward(Some(128), sink.to_str().unwrap(), &["--concurrency", "4"]);
    // More connections than the run may have descriptors: 64 are served, the rest queue.
    let held = half_requests(run.metrics, 200);

    // Each delivery opens a new connection (the server closes every one).
    run.send_hooks(20);
    for _ in 0..20 {
        next_ok(&mut run, "an HTTP delivery while /metrics is flooded");
    }
    run.short_stderr();
    assert_eq!(server.arrivals.lock().unwrap().len(), 20);
    let scraped = get(run.metrics, "/metrics").expect("a scrape through the flood");
    assert_eq!(
        metric(&scraped, "ankusa_dispatch_attempts_total", "http"),
        Some(20.0),
        "{scraped}"
    );
    all_closed_by_the_server(held);

    let stderr = run.finish(20);
    let _ = std::fs::remove_dir_all(sink.parent().unwrap());
    // The cap kept the listener from running out: not one failed accept.
    assert_eq!(
        accept_reports(&stderr, started.elapsed()),
        0,
        "{}",
        head_of(&stderr)
    );
}

#[test]
fn metrics_answers_get_metrics_and_refuses_the_rest() {
    let mut run = forward(None, "log", &[]);
    run.send_hooks(3);
    for _ in 0..3 {
        next_ok(&mut run, "a hook");
    }
    let addr = run.metrics;
    let ok = get(addr, "/metrics").unwrap();
    let (head, body) = ok.split_once("\r\n\r\n").unwrap();
    let head = head.to_ascii_lowercase();
    assert!(
        head.contains("\r\ncontent-type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert!(head.contains("\r\nconnection: close"), "{head}");
    assert!(
        head.contains(&format!("\r\ncontent-length: {}", body.len())),
        "{head}"
    );
    assert_eq!(
        metric(body, "ankusa_dispatch_attempts_total", "log"),
        Some(3.0),
        "{body}"
    );
    assert!(get(addr, "/metrics?name=x").is_some());

    let status = |request: &str| {
        let answer = exchange(addr, request.as_bytes()).expect("an answer");
        answer.lines().next().unwrap_or_default().to_owned()
    };
    for path in ["/", "/health", "/metrics/", "/other"] {
        assert_eq!(
            status(&format!(
                "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )),
            "HTTP/1.1 404 Not Found",
            "{path}"
        );
    }
    for method in ["POST", "HEAD", "PUT"] {
        let answer = exchange(
            addr,
            format!(
                "{method} /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
                 Content-Length: 2\r\n\r\n{{}}"
            )
            .as_bytes(),
        )
        .unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
            "{method}: {answer}"
        );
        assert!(answer.contains("\r\nAllow: GET\r\n"), "{answer}");
    }
    assert_eq!(status("hello\r\n\r\n"), "HTTP/1.1 400 Bad Request");

    // A connection that sends nothing is closed at the timeout, and so is one that stopped
    // halfway; scrapes go on meanwhile.
    let silent = TcpStream::connect(addr).unwrap();
    let half = half_requests(addr, 1);
    assert!(get(addr, "/metrics").is_some());
    all_closed_by_the_server(vec![silent]);
    all_closed_by_the_server(half);

    let stderr = run.finish(3);
    assert!(!stderr.contains(" WARN "), "{stderr}");
}

#[test]
fn a_metrics_address_in_use_is_a_usage_error_naming_it() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = super::bin()
        .args(["forward", "--sink", "log", "--metrics-addr", &addr])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("--metrics-addr {addr}")),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
}

/// Issue 64, finding 11: connections that never send a request used to hold every slot
/// until their timeout (here 10 minutes) while a scrape waited in the kernel's queue. Now
/// the one open longest without a request is closed to make room.
#[test]
fn idle_connections_cannot_starve_a_scrape() {
    let run = forward_with(None, "log", &[], "600000", None);
    let addr = run.metrics;
    // Every slot taken twice over by connections that stopped halfway, and more that sent
    // nothing at all.
    let mut held = half_requests(addr, 128);
    held.extend((0..64).map(|_| TcpStream::connect(addr).unwrap()));
    for i in 0..3 {
        // `exchange` waits PATIENCE (60 s) at most: far less than the idle timeout.
        let scraped = get(addr, "/metrics").unwrap_or_else(|| panic!("scrape {i} starved"));
        assert!(scraped.contains("ankusa_dispatch_"), "{scraped}");
    }
    drop(held);
    run.finish(0);
}

/// `--metrics-token-file`: every request must carry the file's first line as a bearer
/// token (401 otherwise), and the token is never written to the log.
#[test]
fn a_metrics_token_file_guards_the_listener() {
    const TOKEN: &str = "tok-3f9a1c7e55b2-metrics";
    let dir = std::env::temp_dir().join(ankusa_sink_testkit::support::unique_name("token"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("metrics.token");
    std::fs::write(&file, format!("{TOKEN}\nsecond line ignored\n")).unwrap();
    let path = file.to_str().unwrap();
    let mut run = forward_with(
        None,
        "log",
        &["--metrics-token-file", path],
        TIMEOUT_MS,
        Some(TOKEN),
    );
    run.send_hooks(1);
    next_ok(&mut run, "a hook");
    let addr = run.metrics;
    let scraped = get_with(addr, "/metrics", Some(TOKEN)).expect("a scrape with the token");
    assert!(
        scraped.contains("ankusa_dispatch_attempts_total"),
        "{scraped}"
    );
    for request in [
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_owned(),
        format!(
            "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}x\r\n\
             Connection: close\r\n\r\n"
        ),
        format!(
            "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {TOKEN}\r\n\
             Connection: close\r\n\r\n"
        ),
        "GET /other HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_owned(),
    ] {
        let answer = exchange(addr, request.as_bytes()).expect("an answer");
        assert!(
            answer.starts_with("HTTP/1.1 401 Unauthorized\r\n"),
            "{request:?}: {answer}"
        );
        assert!(answer.contains("\r\nWWW-Authenticate: Bearer"), "{answer}");
        assert!(!answer.contains("ankusa_dispatch"), "{answer}");
    }
    let stderr = run.finish(1);
    assert!(!stderr.contains(TOKEN), "{stderr}");

    // The flag needs --metrics-addr, and a file without a token is a usage error naming
    // the flag, never the content.
    let out = super::run(&["forward", "--sink", "log", "--metrics-token-file", path]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    std::fs::write(&file, "\n").unwrap();
    let metrics = free_addr().to_string();
    let out = super::run(&[
        "forward",
        "--sink",
        "log",
        "--input",
        "/dev/null",
        "--metrics-addr",
        &metrics,
        "--metrics-token-file",
        path,
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--metrics-token-file"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

//! What every `forward --from` test shares: a collecting HTTP sink on 127.0.0.1 that can
//! be taken down and brought back, forwarder processes, and waiting.

use super::{bin, json_lines, temp_file};
use base64::Engine as _;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// An HTTP destination that counts each hook id it took (`x-ankusa-id`), keeping
/// connections alive; while down it answers 503 and counts nothing.
pub(super) struct Collector {
    pub(super) url: String,
    seen: Arc<Mutex<HashMap<String, u32>>>,
    down: Arc<AtomicBool>,
    refused: Arc<std::sync::atomic::AtomicU64>,
    retry_after: Arc<std::sync::atomic::AtomicU64>,
}

impl Collector {
    pub(super) fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        let c = Collector {
            url,
            seen: Arc::default(),
            down: Arc::default(),
            refused: Arc::default(),
            retry_after: Arc::default(),
        };
        let (seen, down, refused) = (c.seen.clone(), c.down.clone(), c.refused.clone());
        let retry_after = c.retry_after.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (seen, down, refused) = (seen.clone(), down.clone(), refused.clone());
                let retry_after = retry_after.clone();
                thread::spawn(move || serve(stream, &seen, &down, &refused, &retry_after));
            }
        });
        c
    }

    /// While down, answer 503 with `Retry-After: secs` (0: without one).
    pub(super) fn set_retry_after(&self, secs: u64) {
        self.retry_after.store(secs, Ordering::SeqCst);
    }

    /// Answer 503 (`true`) or take hooks (`false`).
    pub(super) fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Requests answered 503 so far.
    pub(super) fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }

    /// Distinct hook ids taken.
    pub(super) fn distinct(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Deliveries beyond the first of each hook.
    pub(super) fn duplicates(&self) -> u64 {
        self.seen
            .lock()
            .unwrap()
            .values()
            .map(|&n| u64::from(n - 1))
            .sum()
    }

    /// Whether this hook id was taken.
    pub(super) fn has(&self, id: &str) -> bool {
        self.seen.lock().unwrap().contains_key(id)
    }

    /// An HTTP sink config for this collector.
    pub(super) fn sink_file(&self) -> PathBuf {
        self.sink_file_named("collector")
    }

    /// An HTTP sink config for this collector, in a file whose stem (the sink's name in
    /// the run) is `stem`.
    pub(super) fn sink_file_named(&self, stem: &str) -> PathBuf {
        temp_file(
            &format!("{stem}.toml"),
            &format!(
                "type = \"http\"\nurl = \"{}\"\ntimeout_ms = 5000\n",
                self.url
            ),
        )
    }
}

fn serve(
    stream: TcpStream,
    seen: &Mutex<HashMap<String, u32>>,
    down: &AtomicBool,
    refused: &std::sync::atomic::AtomicU64,
    retry_after: &std::sync::atomic::AtomicU64,
) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let (mut len, mut id) = (0usize, None);
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':') {
                let n = n.trim().to_ascii_lowercase();
                if n == "content-length" {
                    len = v.trim().parse().unwrap_or(0);
                } else if n == "x-ankusa-id" {
                    id = Some(v.trim().to_owned());
                }
            }
        }
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let response = if down.load(Ordering::SeqCst) {
            refused.fetch_add(1, Ordering::SeqCst);
            match retry_after.load(Ordering::SeqCst) {
                0 => "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n".to_owned(),
                s => format!(
                    "HTTP/1.1 503 Service Unavailable\r\nretry-after: {s}\r\ncontent-length: 0\r\n\r\n"
                ),
            }
        } else {
            if let Some(id) = id {
                *seen.lock().unwrap().entry(id).or_default() += 1;
            }
            "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_owned()
        };
        if out.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// A `forward --from` process; its `--json` lines go to a file (a pipe nobody reads
/// would stall it).
pub(super) struct Forwarder {
    pub(super) child: Child,
    pub(super) out: PathBuf,
    pub(super) err: PathBuf,
}

impl Forwarder {
    pub(super) fn spawn(
        source: &Path,
        sink: &Path,
        dead_letter: Option<&Path>,
        extra: &[&str],
    ) -> Self {
        let out = temp_file("forward.out", "");
        let err = temp_file("forward.err", "");
        let mut c = bin();
        c.args(["forward", "--from"])
            .arg(source)
            .arg("--sink")
            .arg(sink)
            .args(["--json", "--retry", "--drain-timeout", "10"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap());
        if let Some(dl) = dead_letter {
            c.arg("--dead-letter").arg(dl);
        }
        Forwarder {
            child: c.spawn().expect("the binary runs"),
            out,
            err,
        }
    }

    /// SIGTERM, then wait for the exit within `limit`; its exit code.
    pub(super) fn stop(mut self, limit: Duration) -> Option<i32> {
        super::hardening::signal(&self.child, "-TERM");
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            if t0.elapsed() > limit {
                let _ = self.child.kill();
                panic!(
                    "a forwarder did not stop within {limit:?} of SIGTERM: {}",
                    self.stderr()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL: no drain, no commit, no goodbye.
    pub(super) fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its outcome lines so far, parsed.
    pub(super) fn lines(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    pub(super) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }
}

impl Drop for Forwarder {
    // A test that fails midway must not leave its forwarders running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Wait until `done` holds, polling; panics with `what` after `limit`.
pub(super) fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < limit, "timed out after {limit:?}: {what}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// `count` envelopes as the `gen` format's JSON, ids `{prefix}-{i}`.
pub(super) fn envelopes(prefix: &str, count: usize) -> Vec<(String, Vec<u8>)> {
    (0..count)
        .map(|i| {
            let id = format!("{prefix}-{i}");
            let env =
                ankusa_sink_core::Envelope::builder(id.clone(), "src", format!("{{\"n\":{i}}}"))
                    .tenant_id("acme")
                    .content_type("application/json")
                    .build()
                    .unwrap();
            (id, serde_json::to_vec(&env).unwrap())
        })
        .collect()
}

/// The one line of dead-letter file `path`: `raw`, which no sink saw, kept as permanent.
pub(super) fn the_dead_letter(path: &Path, raw: &[u8]) -> serde_json::Value {
    let mut dead = json_lines(&std::fs::read(path).unwrap());
    assert_eq!(dead.len(), 1, "{dead:?}");
    let dead = dead.remove(0);
    assert_eq!(
        dead["raw_base64"],
        base64::engine::general_purpose::STANDARD.encode(raw)
    );
    assert_eq!(dead["dead_letter"]["sink"], serde_json::Value::Null);
    assert_eq!(dead["dead_letter"]["class"], "permanent");
    dead
}

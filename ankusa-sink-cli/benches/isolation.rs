//! One bad destination (issue 60): `forward --from` with two HTTP sinks, one of which answers
//! 503 throughout, against the same run with the good sink alone, for each source that can
//! be read once per sink (Kafka, NATS JetStream, RabbitMQ through an exchange).
//!
//! For each source, `ISOLATION_REPS` (default 3) times, interleaved:
//! 1. **good alone**: the release `ankusa-sink forward --from SRC --sink good.toml --retry`
//!    into an in-process HTTP/1.1 endpoint answering 200; hooks/s from the first hook the
//!    endpoint takes to the last (group joins and consumer set-up are left out).
//! 2. **good + bad**: the same with `--sink bad.toml`, an endpoint answering 503 (no
//!    Retry-After) for the whole measurement; good's hooks/s and the forwarder's peak RSS
//!    (`VmHWM`, read just before it is killed): bad's backlog waits in the broker, bad
//!    holding its window (`--max-unacked`, 1024) and, for Kafka, librdkafka's read-ahead
//!    (sized by `--max-unacked-bytes`, at most 64 MiB queued).
//!
//! Then once: 3. **kill -9 and restart**: good + bad (503), kill -9 once good has half the
//! hooks, restart, let good finish, bring bad up (200) and let it drain; duplicates per
//! sink (deliveries beyond the first of each `x-ankusa-id`) and hooks lost (0 expected).
//!
//! Every measurement fills a fresh topic (3 partitions), stream or exchange with its queues
//! with `ISOLATION_HOOKS` (default 20,000) hooks of 1 KiB before the forwarder starts, and
//! deletes it after. The forwarder runs at its defaults plus `--retry`; the Kafka source
//! sets `session.timeout.ms` 6000 (so that the restart's group rejoins in seconds).
//! Environment: `ISOLATION_SOURCES` (default `kafka nats amqp`), `ISOLATION_FORWARD_ARGS`
//! (more arguments for every forwarder, e.g. `--max-unacked-bytes 4194304`),
//! `ANKUSA_KAFKA_BROKERS` (127.0.0.1:9092), `ANKUSA_NATS_URL` (nats://127.0.0.1:4222),
//! `ANKUSA_AMQP_URL` (amqp://guest:guest@127.0.0.1:5672/%2f).

#[path = "../tests/it/amqp_fanout.rs"]
mod amqp_fanout;
mod kafka;
use amqp_fanout::{delete_all, durable_fanout, publish_confirmed};
use async_nats::jetstream;
use lapin::options::{QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long any one wait may take before the bench gives up (and says what it waited for).
const LIMIT: Duration = Duration::from_secs(300);

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn nats_url() -> String {
    env_or("ANKUSA_NATS_URL", "nats://127.0.0.1:4222")
}

fn amqp_url() -> String {
    env_or("ANKUSA_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", ulid::Ulid::new().to_string().to_lowercase())
}

/// The load average now (1, 5, 15 minutes).
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The peak resident set of `pid`, kB (`VmHWM`).
fn vm_hwm_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------
// The HTTP endpoint: keep-alive HTTP/1.1, a thread per connection, counting each hook id.

#[derive(Default)]
struct Seen {
    ids: HashMap<Box<[u8]>, u32>,
    first: Option<Instant>,
    last_new: Option<Instant>,
}

#[derive(Default)]
struct Shared {
    up: AtomicBool,
    refused: AtomicU64,
    seen: Mutex<Seen>,
}

/// An HTTP destination on 127.0.0.1 answering 200 (counting each `x-ankusa-id`, with the
/// time of the first hook and of the last new one) or, while down, 503 without Retry-After.
struct Endpoint {
    url: String,
    s: Arc<Shared>,
}

impl Endpoint {
    fn start(up: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        let s = Arc::new(Shared::default());
        s.up.store(up, Ordering::SeqCst);
        let shared = s.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let s = shared.clone();
                std::thread::spawn(move || serve(stream, &s));
            }
        });
        Endpoint { url, s }
    }

    fn set_up(&self, up: bool) {
        self.s.up.store(up, Ordering::SeqCst);
    }

    fn distinct(&self) -> usize {
        self.s.seen.lock().unwrap().ids.len()
    }

    fn duplicates(&self) -> u64 {
        let seen = self.s.seen.lock().unwrap();
        seen.ids.values().map(|&n| u64::from(n - 1)).sum()
    }

    fn refused(&self) -> u64 {
        self.s.refused.load(Ordering::SeqCst)
    }

    /// Hooks/s from the first hook taken to the last new one.
    fn rate(&self) -> f64 {
        let seen = self.s.seen.lock().unwrap();
        let took = match (seen.first, seen.last_new) {
            (Some(a), Some(b)) => b - a,
            _ => Duration::ZERO,
        };
        (seen.ids.len().saturating_sub(1)) as f64 / took.as_secs_f64().max(1e-3)
    }

    /// Its sink file `dir/<stem>.toml` (the stem is the sink's name in the run).
    fn sink_file(&self, dir: &Path, stem: &str) -> PathBuf {
        let p = dir.join(format!("{stem}.toml"));
        std::fs::write(&p, format!("type = \"http\"\nurl = \"{}\"\n", self.url)).unwrap();
        p
    }
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
const UNAVAILABLE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n";

fn serve(stream: TcpStream, s: &Shared) {
    let _ = stream.set_nodelay(true);
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut r = BufReader::with_capacity(64 * 1024, stream);
    let (mut line, mut body) = (Vec::with_capacity(256), Vec::new());
    loop {
        line.clear();
        // The request line (any method and path).
        if r.read_until(b'\n', &mut line).unwrap_or(0) == 0 {
            return;
        }
        let (mut len, mut id) = (0usize, None::<Box<[u8]>>);
        loop {
            line.clear();
            if r.read_until(b'\n', &mut line).unwrap_or(0) == 0 {
                return;
            }
            let h = line.trim_ascii();
            if h.is_empty() {
                break;
            }
            let Some(colon) = h.iter().position(|&b| b == b':') else {
                continue;
            };
            let (name, value) = (&h[..colon], h[colon + 1..].trim_ascii());
            if name.eq_ignore_ascii_case(b"content-length") {
                len = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
            } else if name.eq_ignore_ascii_case(b"x-ankusa-id") {
                id = Some(value.into());
            }
        }
        body.resize(len, 0);
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let response = if s.up.load(Ordering::Relaxed) {
            if let Some(id) = id {
                let now = Instant::now();
                let mut g = s.seen.lock().unwrap();
                let seen = &mut *g;
                seen.first.get_or_insert(now);
                let n = seen.ids.entry(id).or_insert(0);
                *n += 1;
                if *n == 1 {
                    seen.last_new = Some(now);
                }
            }
            OK
        } else {
            s.refused.fetch_add(1, Ordering::Relaxed);
            UNAVAILABLE
        };
        if out.write_all(response).is_err() {
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------
// The sources: a fresh one per measurement, filled before the forwarder starts.

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Kafka,
    Nats,
    Amqp,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Kafka => "kafka",
            Kind::Nats => "nats",
            Kind::Amqp => "amqp",
        }
    }
}

/// A filled source, its `--from` file, and what to delete after.
#[derive(Clone)]
enum Src {
    Kafka {
        file: PathBuf,
        topic: String,
    },
    Nats {
        file: PathBuf,
        stream: String,
    },
    Amqp {
        file: PathBuf,
        base: String,
        exchange: String,
        queues: Vec<String>,
    },
}

impl Src {
    fn file(&self) -> &Path {
        match self {
            Src::Kafka { file, .. } | Src::Nats { file, .. } | Src::Amqp { file, .. } => file,
        }
    }

    /// A fresh source of `kind` in `dir` holding `hooks`, for the sinks `sinks` (by name:
    /// RabbitMQ only routes to queues bound before the publish, so each sink's queue,
    /// `<queue>-<sink>`, or the file's own queue for one sink, is declared and bound here,
    /// as the forwarder declares it). A fill that fails (the brokers are shared with test
    /// suites that close connections) is deleted and made again, at most 3 times.
    async fn create(kind: Kind, dir: &Path, hooks: &Arc<Vec<Vec<u8>>>, sinks: &[&str]) -> Src {
        for attempt in 1..=3 {
            let src = Src::new(kind, dir, sinks);
            let (s, h) = (src.clone(), hooks.clone());
            match tokio::spawn(async move { s.fill(&h).await }).await {
                Ok(()) => return src,
                Err(e) if attempt < 3 => {
                    eprintln!("{}: filling the source failed ({e}): again", kind.name());
                    src.delete().await;
                }
                Err(e) => panic!("{}: filling the source failed 3 times: {e}", kind.name()),
            }
        }
        unreachable!()
    }

    /// Fresh names, nothing created yet.
    fn new(kind: Kind, dir: &Path, sinks: &[&str]) -> Src {
        let file = dir.join("source.toml");
        match kind {
            Kind::Kafka => Src::Kafka {
                file,
                topic: unique("iso"),
            },
            Kind::Nats => Src::Nats {
                file,
                stream: unique("iso").replace('-', "_"),
            },
            Kind::Amqp => {
                let base = unique("iso-q");
                let queues = if sinks.len() < 2 {
                    vec![base.clone()]
                } else {
                    sinks.iter().map(|s| format!("{base}-{s}")).collect()
                };
                Src::Amqp {
                    file,
                    base,
                    exchange: unique("iso-x"),
                    queues,
                }
            }
        }
    }

    /// Create it, fill it with `hooks` and write its `--from` file; panics on any failure.
    async fn fill(&self, hooks: &[Vec<u8>]) {
        match self {
            Src::Kafka { file, topic } => {
                kafka::create(&kafka::admin(), topic).await;
                kafka::fill(topic, hooks).await;
                std::fs::write(
                    file,
                    format!(
                        "type = \"kafka\"\nbrokers = [\"{}\"]\ntopic = \"{topic}\"\ngroup = \"{}\"\n\
                         [properties]\n\"session.timeout.ms\" = \"6000\"\n\
                         \"heartbeat.interval.ms\" = \"500\"\n",
                        kafka::brokers(),
                        unique("fwd")
                    ),
                )
                .unwrap();
            }
            Src::Nats { file, stream } => {
                let subject = format!("ankusa.bench.{stream}");
                let js = jetstream::new(async_nats::connect(nats_url()).await.unwrap());
                js.create_stream(jetstream::stream::Config {
                    name: stream.clone(),
                    subjects: vec![subject.clone()],
                    ..Default::default()
                })
                .await
                .unwrap();
                for chunk in hooks.chunks(1024) {
                    let mut acks = Vec::with_capacity(chunk.len());
                    for h in chunk {
                        acks.push(js.publish(subject.clone(), h.clone().into()).await.unwrap());
                    }
                    for a in acks {
                        a.await.unwrap();
                    }
                }
                std::fs::write(
                    file,
                    format!(
                        "type = \"nats\"\nurl = \"{}\"\nstream = \"{stream}\"\nconsumer = \"fwd\"\n",
                        nats_url()
                    ),
                )
                .unwrap();
            }
            Src::Amqp {
                file,
                base,
                exchange,
                queues,
            } => {
                let conn = Connection::connect(&amqp_url(), ConnectionProperties::default())
                    .await
                    .unwrap();
                let ch = conn.create_channel().await.unwrap();
                durable_fanout(&ch, exchange).await;
                for q in queues {
                    ch.queue_declare(
                        q.as_str().into(),
                        QueueDeclareOptions {
                            durable: true,
                            ..Default::default()
                        },
                        FieldTable::default(),
                    )
                    .await
                    .unwrap();
                    ch.queue_bind(
                        q.as_str().into(),
                        exchange.as_str().into(),
                        "#".into(),
                        QueueBindOptions::default(),
                        FieldTable::default(),
                    )
                    .await
                    .unwrap();
                }
                publish_confirmed(&ch, exchange, hooks, 1024).await;
                let _ = conn.close(200, "filled".into()).await;
                std::fs::write(
                    file,
                    format!(
                        "type = \"amqp\"\nurl = \"{}\"\nqueue = \"{base}\"\nexchange = \"{exchange}\"\n",
                        amqp_url()
                    ),
                )
                .unwrap();
            }
        }
    }

    /// Delete it, best effort; no forwarder may still read it (a Kafka consumer fetching a
    /// deleted topic from tansu crashes librdkafka).
    async fn delete(self) {
        match self {
            Src::Kafka { topic, .. } => kafka::delete(&kafka::admin(), &topic).await,
            Src::Nats { stream, .. } => {
                if let Ok(c) = async_nats::connect(nats_url()).await {
                    let _ = jetstream::new(c).delete_stream(&stream).await;
                }
            }
            Src::Amqp {
                exchange, queues, ..
            } => {
                let Ok(conn) =
                    Connection::connect(&amqp_url(), ConnectionProperties::default()).await
                else {
                    return;
                };
                let Ok(ch) = conn.create_channel().await else {
                    return;
                };
                delete_all(&ch, &exchange, &queues).await;
                let _ = conn.close(200, "deleted".into()).await;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The forwarder.

/// `forward --from SRC --sink S... --retry` at its defaults (plus `ISOLATION_FORWARD_ARGS`);
/// stderr to `err` (appended).
struct Forwarder {
    child: Child,
    err: PathBuf,
}

impl Forwarder {
    fn spawn(src: &Path, sinks: &[&Path], err: &Path) -> Self {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ankusa-sink"));
        c.args(["forward", "--from"]).arg(src);
        for s in sinks {
            c.arg("--sink").arg(s);
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(err)
            .unwrap();
        let extra = std::env::var("ISOLATION_FORWARD_ARGS").unwrap_or_default();
        let child = c
            .arg("--retry")
            .args(extra.split_whitespace())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Forwarder {
            child,
            err: err.to_owned(),
        }
    }

    fn peak_rss_kb(&self) -> u64 {
        vm_hwm_kb(self.child.id())
    }

    /// Wait until `done` holds; panics with `what` and the forwarder's stderr if it takes
    /// longer than [`LIMIT`] or the forwarder exits.
    async fn wait_until(&mut self, what: &str, mut done: impl FnMut() -> bool) {
        let t0 = Instant::now();
        while !done() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the forwarder exited ({status}) before {what}: {}",
                    self.stderr()
                );
            }
            assert!(
                t0.elapsed() < LIMIT,
                "timed out after {LIMIT:?}: {what}: {}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn stderr(&self) -> String {
        let s = std::fs::read_to_string(&self.err).unwrap_or_default();
        let tail: Vec<&str> = s.lines().rev().take(20).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// SIGKILL: no drain, no commit.
    fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM (it drains and commits), SIGKILL if it has not exited after 60 s.
    async fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let t0 = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) {
            if t0.elapsed() > Duration::from_secs(60) {
                eprintln!("the forwarder did not stop within 60 s of SIGTERM: killed");
                let _ = self.child.kill();
                let _ = self.child.wait();
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

// ---------------------------------------------------------------------------------------
// The measurements.

/// One run of (1) or (2).
struct Run {
    rate: f64,
    rss_kb: u64,
}

/// (1) good alone, or (2) good + bad (503 throughout): good's hooks/s and the peak RSS.
async fn measure(kind: Kind, n: usize, with_bad: bool, label: &str) -> Run {
    let dir = std::env::temp_dir().join(unique("bench-iso"));
    std::fs::create_dir_all(&dir).unwrap();
    let sinks: &[&str] = if with_bad {
        &["good", "bad"]
    } else {
        &["good"]
    };
    let src = Src::create(kind, &dir, &Arc::new(kafka::hooks(&unique("h"), n)), sinks).await;
    let good = Endpoint::start(true);
    let bad = Endpoint::start(false);
    let mut files = vec![good.sink_file(&dir, "good")];
    if with_bad {
        files.push(bad.sink_file(&dir, "bad"));
    }
    let files: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let before = load();
    let mut f = Forwarder::spawn(src.file(), &files, &dir.join("forward.err"));
    f.wait_until("good has every hook", || good.distinct() == n)
        .await;
    let rss_kb = f.peak_rss_kb();
    let rate = good.rate();
    // The source is deleted next: nothing to drain or commit.
    f.kill9();
    let after = load();
    let bad_note = if with_bad {
        format!(
            "; bad: {} hooks taken, {} requests refused",
            bad.distinct(),
            bad.refused()
        )
    } else {
        String::new()
    };
    println!(
        "{}: {label}: good {rate:.0} hooks/s, peak RSS {:.1} MB{bad_note} (load {before} -> {after})",
        kind.name(),
        rss_kb as f64 / 1024.0
    );
    src.delete().await;
    let _ = std::fs::remove_dir_all(&dir);
    Run { rate, rss_kb }
}

/// (3): good + bad (503), kill -9 once good has half the hooks, restart, good finishes, bad
/// comes up and drains: duplicates of good and bad, hooks lost over both.
async fn kill_and_restart(kind: Kind, n: usize) -> (u64, u64, usize) {
    let dir = std::env::temp_dir().join(unique("bench-iso"));
    std::fs::create_dir_all(&dir).unwrap();
    let src = Src::create(
        kind,
        &dir,
        &Arc::new(kafka::hooks(&unique("h"), n)),
        &["good", "bad"],
    )
    .await;
    let good = Endpoint::start(true);
    let bad = Endpoint::start(false);
    let (gf, bf) = (good.sink_file(&dir, "good"), bad.sink_file(&dir, "bad"));
    let files = [gf.as_path(), bf.as_path()];
    let err = dir.join("forward.err");
    let before = load();
    let t0 = Instant::now();
    let mut f = Forwarder::spawn(src.file(), &files, &err);
    f.wait_until("good has half the hooks", || good.distinct() >= n / 2)
        .await;
    let at_kill = good.distinct();
    f.kill9();
    let mut f = Forwarder::spawn(src.file(), &files, &err);
    f.wait_until("good, after the restart, has every hook", || {
        good.distinct() == n
    })
    .await;
    let bad_before = bad.distinct();
    let refused = bad.refused();
    bad.set_up(true);
    f.wait_until("bad, back, has every hook", || bad.distinct() == n)
        .await;
    // Let anything still in flight land before counting.
    tokio::time::sleep(Duration::from_secs(2)).await;
    f.stop().await;
    let after = load();
    let (dup_good, dup_bad) = (good.duplicates(), bad.duplicates());
    let lost = (n - good.distinct()) + (n - bad.distinct());
    println!(
        "{}: kill -9 at good {at_kill}/{n} (bad {bad_before}, {refused} refused), restart, \
         bad up: good {} distinct, {dup_good} duplicates; bad {} distinct, {dup_bad} duplicates; \
         lost {lost} ({:.0} s, load {before} -> {after})",
        kind.name(),
        good.distinct(),
        bad.distinct(),
        t0.elapsed().as_secs_f64()
    );
    src.delete().await;
    let _ = std::fs::remove_dir_all(&dir);
    (dup_good, dup_bad, lost)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let number = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
            .max(1)
    };
    let n = number("ISOLATION_HOOKS", 20_000).max(2);
    let reps = number("ISOLATION_REPS", 3);
    let kinds: Vec<Kind> = env_or("ISOLATION_SOURCES", "kafka nats amqp")
        .split_whitespace()
        .map(|s| match s {
            "kafka" => Kind::Kafka,
            "nats" => Kind::Nats,
            "amqp" => Kind::Amqp,
            other => panic!("ISOLATION_SOURCES: unknown source {other}"),
        })
        .collect();
    println!(
        "isolation: {n} hooks of 1 KiB per measurement, {reps} rep(s) of (1) and (2), \
         `forward --from SRC --sink good.toml [--sink bad.toml] --retry {}`, load {}",
        std::env::var("ISOLATION_FORWARD_ARGS").unwrap_or_default(),
        load()
    );
    let t0 = Instant::now();
    let mut rows = Vec::new();
    for kind in kinds {
        let (mut alone, mut with_bad) = (Vec::new(), Vec::new());
        let (mut rss_alone, mut rss_bad) = (0u64, 0u64);
        for rep in 1..=reps {
            let r = measure(kind, n, false, &format!("good alone (rep {rep}/{reps})")).await;
            alone.push(r.rate);
            rss_alone = rss_alone.max(r.rss_kb);
            let r = measure(kind, n, true, &format!("good + bad (rep {rep}/{reps})")).await;
            with_bad.push(r.rate);
            rss_bad = rss_bad.max(r.rss_kb);
        }
        let (a, b) = (median(&mut alone), median(&mut with_bad));
        println!(
            "{}: good alone {a:.0} hooks/s, good with bad {b:.0} hooks/s (medians): {:.2} \
             (target >= 0.9); peak RSS {:.1} MB alone, {:.1} MB with bad",
            kind.name(),
            b / a,
            rss_alone as f64 / 1024.0,
            rss_bad as f64 / 1024.0
        );
        let (dg, db, lost) = kill_and_restart(kind, n).await;
        rows.push(format!(
            "| {} | {a:.0} | {b:.0} | {:.2} | {:.1} / {:.1} MB | {dg} / {db} | {lost} |",
            kind.name(),
            b / a,
            rss_alone as f64 / 1024.0,
            rss_bad as f64 / 1024.0
        ));
    }
    println!(
        "\n{n} hooks, medians of {reps}, {:.0} s in all, load {} at the end\n",
        t0.elapsed().as_secs_f64(),
        load()
    );
    println!(
        "| source | good alone hooks/s | good with bad hooks/s | ratio | peak RSS alone / with bad | duplicates after kill -9, good / bad | lost |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!("{r}");
    }
    // Every figure is printed; leave without running librdkafka's teardown.
    std::process::exit(0);
}

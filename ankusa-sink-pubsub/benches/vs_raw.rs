//! PubSubSink vs the raw google-cloud-pubsub `Publisher` (same endpoint, anonymous
//! credentials, `NeverRetry`, same batching thresholds) against the emulator on
//! 127.0.0.1:8085.
//!
//! `cargo bench -p ankusa-sink-pubsub --bench vs_raw`; JSON to `$BENCH_OUT_DIR/pubsub.json`
//! (default `target/bench-results/`). Every run publishes to a fresh topic (created and
//! deleted through the emulator's REST API). The raw side sends the same data (a Message v1
//! body encoded once) and attributes; the sink encodes and sizes per delivery.
//! Knobs: `BENCH_SCALE`; `--only sink|raw [--batched | --profile <conc> <n> <body>]`.
#![allow(missing_docs)]

use ankusa_sink_core::{Ctx, Envelope, attributes, message, safe_deliver};
use ankusa_sink_pubsub::{Auth, PubSubConfig, PubSubSink};
use google_cloud_gax::retry_policy::NeverRetry;
use google_cloud_pubsub::client::{BasePublisher, Publisher};
use google_cloud_pubsub::model::Message;
use serde_json::{Value, json};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const PROJECT: &str = "ankusa-bench";
const REPS: usize = 3;
const DEADLINE: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Sink,
    Raw,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Sink => "sink",
            Mode::Raw => "raw",
        }
    }
}

fn host() -> String {
    std::env::var("ANKUSA_PUBSUB_EMULATOR_HOST").unwrap_or_else(|_| "127.0.0.1:8085".into())
}

fn endpoint() -> String {
    format!("http://{}", host())
}

static NAME: AtomicUsize = AtomicUsize::new(0);

fn unique() -> String {
    format!(
        "bench-{}-{}",
        std::process::id(),
        NAME.fetch_add(1, Ordering::Relaxed)
    )
}

async fn create_topic(http: &reqwest::Client, topic: &str) {
    let url = format!("{}/v1/projects/{PROJECT}/topics/{topic}", endpoint());
    let resp = http.put(url).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200, "create topic {topic}");
}

async fn delete_topic(http: &reqwest::Client, topic: &str) {
    let url = format!("{}/v1/projects/{PROJECT}/topics/{topic}", endpoint());
    let _ = http.delete(url).send().await;
}

type BoxFut = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
type Op = Arc<dyn Fn(usize) -> BoxFut + Send + Sync>;

struct Workload {
    env: Arc<Envelope>,
    /// The Message v1 data and attributes the sink would send (raw sends them as is).
    msg: Message,
}

fn workload(body_bytes: usize) -> Workload {
    let pad = "x".repeat(body_bytes - 10);
    let raw = format!("{{\"pad\":\"{pad}\"}}");
    let env = Envelope::builder("01JBENCH0000000000000000", "stripe", raw.into_bytes())
        .tenant_id("acme")
        .received_at(1_700_000_000_000)
        .content_type("application/json")
        .build()
        .unwrap();
    let ctx = Ctx::for_envelope(&env);
    let data =
        message::encode(&env, &ctx, Some(ankusa_sink_core::DEFAULT_INLINE_MAX_BYTES)).unwrap();
    let msg = Message::new()
        .set_data(data)
        .set_attributes(attributes(&env, &ctx));
    Workload {
        env: Arc::new(env),
        msg,
    }
}

fn config(topic: &str) -> PubSubConfig {
    PubSubConfig::new(PROJECT, topic)
        .with_endpoint(endpoint())
        .with_auth(Auth::Anonymous)
        .with_timeout(DEADLINE)
}

async fn sink_op(topic: &str, w: &Workload, batched: bool) -> Op {
    let sink = Arc::new(PubSubSink::new(config(topic)).await.unwrap());
    let env = Arc::clone(&w.env);
    let ctx = Arc::new(Ctx::for_envelope(&env).with_batch(batched));
    Arc::new(move |_| {
        let (sink, env, ctx) = (Arc::clone(&sink), Arc::clone(&env), Arc::clone(&ctx));
        Box::pin(async move {
            safe_deliver(&*sink, &env, &ctx, Some(DEADLINE))
                .await
                .map_err(|f| f.to_string())
        })
    })
}

/// The client configured as the sink configures its own: immediate (1 message, no delay)
/// or batched (the config's count, bytes and delay).
async fn raw_op(topic: &str, w: &Workload, batched: bool) -> Op {
    let cfg = config(topic);
    let base = BasePublisher::builder()
        .with_endpoint(endpoint())
        .with_retry_policy(NeverRetry)
        .with_credentials(google_cloud_auth::credentials::anonymous::Builder::new().build())
        .build()
        .await
        .unwrap();
    let name = format!("projects/{PROJECT}/topics/{topic}");
    let publisher: Publisher = if batched {
        base.publisher(name)
            .set_message_count_threshold(cfg.batch.max_messages.get())
            .set_byte_threshold(cfg.batch.max_bytes.get())
            .set_delay_threshold(cfg.batch.delay())
            .build()
    } else {
        base.publisher(name)
            .set_message_count_threshold(1)
            .set_delay_threshold(Duration::ZERO)
            .build()
    };
    let publisher = Arc::new(publisher);
    let msg = w.msg.clone();
    Arc::new(move |_| {
        let fut = publisher.publish(msg.clone());
        Box::pin(async move {
            match tokio::time::timeout(DEADLINE, fut).await {
                Ok(Ok(id)) if !id.is_empty() => Ok(()),
                Ok(Ok(_)) => Err("no message id".into()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("timeout".into()),
            }
        })
    })
}

async fn drive(op: Op, units: usize, workers: usize) -> (f64, Vec<u64>) {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..workers.min(units) {
        let (op, next) = (Arc::clone(&op), Arc::clone(&next));
        set.spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= units {
                    break;
                }
                let t = Instant::now();
                if let Err(e) = op(i).await {
                    panic!("delivery {i} failed: {e}");
                }
                lat.push(t.elapsed().as_micros() as u64);
            }
            lat
        });
    }
    let mut lat = Vec::with_capacity(units);
    while let Some(r) = set.join_next().await {
        lat.extend(r.unwrap());
    }
    (start.elapsed().as_secs_f64(), lat)
}

#[derive(Debug, Clone)]
struct Run {
    mode: Mode,
    batched: bool,
    concurrency: usize,
    body_bytes: usize,
    deliveries: usize,
    seconds: f64,
    p50_us: f64,
    p99_us: f64,
}

impl Run {
    fn per_sec(&self) -> f64 {
        self.deliveries as f64 / self.seconds
    }
    fn json(&self) -> Value {
        json!({
            "mode": self.mode.name(),
            "variant": if self.batched { "batched" } else { "default" },
            "concurrency": self.concurrency,
            "body_bytes": self.body_bytes,
            "deliveries": self.deliveries,
            "seconds": (self.seconds * 1000.0).round() / 1000.0,
            "per_sec": self.per_sec().round(),
            "p50_us": self.p50_us.round(),
            "p99_us": self.p99_us.round(),
            "requests_per_delivery": null,
        })
    }
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64
}

struct Spec {
    batched: bool,
    concurrency: usize,
    body_bytes: usize,
    deliveries: usize,
}

async fn run_once(http: &reqwest::Client, mode: Mode, s: &Spec) -> Run {
    let w = workload(s.body_bytes);
    let topic = unique();
    create_topic(http, &topic).await;
    let op = match mode {
        Mode::Sink => sink_op(&topic, &w, s.batched).await,
        Mode::Raw => raw_op(&topic, &w, s.batched).await,
    };
    let (seconds, mut lat) = drive(op, s.deliveries, s.concurrency).await;
    delete_topic(http, &topic).await;
    lat.sort_unstable();
    Run {
        mode,
        batched: s.batched,
        concurrency: s.concurrency,
        body_bytes: s.body_bytes,
        deliveries: s.deliveries,
        seconds,
        p50_us: pct(&lat, 0.5),
        p99_us: pct(&lat, 0.99),
    }
}

fn specs() -> Vec<Spec> {
    let scale: f64 = std::env::var("BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let n = |x: usize| ((x as f64 * scale) as usize).max(10);
    let mut v = Vec::new();
    for (body_bytes, counts) in [
        (1024, [(1, 2000), (16, 12_000), (256, 20_000)]),
        (65_536, [(1, 1000), (16, 4000), (256, 6000)]),
    ] {
        for (concurrency, deliveries) in counts {
            v.push(Spec {
                batched: false,
                concurrency,
                body_bytes,
                deliveries: n(deliveries),
            });
        }
    }
    for (concurrency, deliveries) in [(16, 2000), (256, 40_000)] {
        v.push(Spec {
            batched: true,
            concurrency,
            body_bytes: 1024,
            deliveries: n(deliveries),
        });
    }
    v
}

/// The sink's own CPU work per delivery, µs, measured in-process: Message v1 encoding
/// (sha256 of the body, base64, JSON) plus the attributes and the `Message`.
fn sink_cpu_us(body_bytes: usize) -> Value {
    let w = workload(body_bytes);
    let ctx = Ctx::for_envelope(&w.env);
    let iters = if body_bytes > 1024 { 300 } else { 5000 };
    let t = Instant::now();
    for _ in 0..iters {
        let data = message::encode(
            &w.env,
            &ctx,
            Some(ankusa_sink_core::DEFAULT_INLINE_MAX_BYTES),
        );
        let msg = Message::new()
            .set_data(data.unwrap())
            .set_attributes(attributes(&w.env, &ctx));
        std::hint::black_box(msg);
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
    json!({"body_bytes": body_bytes, "message_bytes": w.msg.data.len(),
           "encode_us": (us * 10.0).round() / 10.0})
}

/// The median repetition by throughput, with the median p50 and p99 of all repetitions.
fn median(mut runs: Vec<Run>) -> Run {
    let mid = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let p50 = mid(runs.iter().map(|r| r.p50_us).collect());
    let p99 = mid(runs.iter().map(|r| r.p99_us).collect());
    runs.sort_by(|a, b| a.per_sec().total_cmp(&b.per_sec()));
    let mut m = runs[runs.len() / 2].clone();
    (m.p50_us, m.p99_us) = (p50, p99);
    m
}

fn vm_hwm_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Peak RSS of a child process running only `mode` (c=16, 1 KiB).
fn child_rss(mode: Mode) -> u64 {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--only", mode.name()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("VMHWM_KB "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "child --only {}: {}",
                mode.name(),
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

fn out_dir() -> std::path::PathBuf {
    if let Ok(d) = std::env::var("BENCH_OUT_DIR") {
        return d.into();
    }
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-results")
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn bench() {
    let http = http();
    println!(
        "\npubsub vs raw ({}; median of {REPS}, interleaved)",
        endpoint()
    );
    println!(
        "{:<9} {:>5} {:>6} {:>6} | {:>9} {:>9} {:>6} | {:>8} {:>8} | {:>8} {:>8}",
        "variant",
        "conc",
        "body",
        "n",
        "sink/s",
        "raw/s",
        "ratio",
        "s p50us",
        "r p50us",
        "s p99us",
        "r p99us"
    );
    // Warm the emulator's JVM and both paths first (not recorded).
    for mode in [Mode::Sink, Mode::Raw] {
        let warm = Spec {
            batched: false,
            concurrency: 16,
            body_bytes: 1024,
            deliveries: 5000,
        };
        run_once(&http, mode, &warm).await;
    }
    let mut all = Vec::new();
    for s in specs() {
        let (mut sink, mut raw) = (Vec::new(), Vec::new());
        for _ in 0..REPS {
            sink.push(run_once(&http, Mode::Sink, &s).await);
            raw.push(run_once(&http, Mode::Raw, &s).await);
        }
        let (a, b) = (median(sink), median(raw));
        println!(
            "{:<9} {:>5} {:>6} {:>6} | {:>9.0} {:>9.0} {:>6.3} | {:>8.0} {:>8.0} | {:>8.0} {:>8.0}",
            if s.batched { "batched" } else { "default" },
            s.concurrency,
            s.body_bytes,
            s.deliveries,
            a.per_sec(),
            b.per_sec(),
            a.per_sec() / b.per_sec(),
            a.p50_us,
            b.p50_us,
            a.p99_us,
            b.p99_us,
        );
        all.push(a);
        all.push(b);
    }
    let rss_sink = child_rss(Mode::Sink);
    let rss_raw = child_rss(Mode::Raw);
    println!("peak RSS (VmHWM, c=16 1 KiB only): sink {rss_sink} kB, raw {rss_raw} kB");
    let cpu = vec![sink_cpu_us(1024), sink_cpu_us(65_536)];
    println!("sink CPU per delivery (in-process): {cpu:?}");
    let doc = json!({
        "adapter": "pubsub",
        "server": format!("Google Cloud Pub/Sub emulator (Java) on {}", host()),
        "notes": "The emulator, not the client, bounds the absolute figures; compare sink and \
                  raw side by side. One fresh topic per run, after a discarded warm-up of both paths. Raw publishes the same Message v1 \
                  data and attributes, encoded once. default = immediate publisher (1 message, \
                  no delay); batched = ctx.batch through the batching publisher (100 messages, \
                  1 MB, 10 ms), raw with the same thresholds.",
        "runs": all.iter().map(Run::json).collect::<Vec<_>>(),
        "peak_rss_kb": {"sink": rss_sink, "raw": rss_raw},
        "sink_cpu_per_delivery": cpu,
    });
    let dir = out_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("pubsub.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    println!("wrote {}", path.display());
}

async fn only(mode: Mode, batched: bool) {
    // `--batched`: a longer batched run, for profiling.
    let mut s = Spec {
        batched,
        concurrency: if batched { 256 } else { 16 },
        body_bytes: 1024,
        deliveries: if batched { 100_000 } else { 3000 },
    };
    // `--profile <concurrency> <deliveries> <body_bytes>`: a longer run of the default variant.
    if let Some(i) = std::env::args().position(|a| a == "--profile") {
        let arg = |k: usize| std::env::args().nth(i + k).and_then(|v| v.parse().ok());
        s.concurrency = arg(1).unwrap_or(256);
        s.deliveries = arg(2).unwrap_or(50_000);
        s.body_bytes = arg(3).unwrap_or(1024);
    }
    run_once(&http(), mode, &s).await;
    println!("VMHWM_KB {}", vm_hwm_kb());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let only_mode = args.iter().position(|a| a == "--only").map(|i| {
        match args.get(i + 1).map(String::as_str) {
            Some("sink") => Mode::Sink,
            Some("raw") => Mode::Raw,
            other => panic!("--only sink|raw, not {other:?}"),
        }
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match only_mode {
            Some(m) => only(m, args.iter().any(|a| a == "--batched")).await,
            None => bench().await,
        }
    });
}

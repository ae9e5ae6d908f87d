//! SqsSink / SnsSink vs raw aws-sdk-sqs / aws-sdk-sns (same SDK config: region, endpoint,
//! credentials, retries off, timeouts) against moto on 127.0.0.1:4566.
//!
//! `cargo bench -p ankusa-sink-aws --bench vs_raw [-- sqs|sns]`; JSON to
//! `$BENCH_OUT_DIR/{sqs,sns}.json` (default `target/bench-results/`). moto slows down as one
//! queue fills, so every run creates fresh queues/topics of at most 50 messages and deletes
//! them afterwards. The raw side sends the same wire bytes (a Message v1 body encoded once,
//! the same attributes); the sink encodes, sizes and (SQS) MD5-checks per delivery.
//! Knobs: `BENCH_SCALE` (count factor), `BENCH_ONLY=batched`, `BENCH_SQS_PER_DEST_BATCHED`.
#![allow(missing_docs)]

use ankusa_sink_aws::sdk::{aws_sdk_sns, aws_sdk_sqs};
use ankusa_sink_aws::{AwsOptions, SnsConfig, SnsSink, SqsConfig, SqsSink, StaticCredentials};
use ankusa_sink_core::{Ctx, Envelope, Sink, message, safe_deliver};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const ACCOUNT: &str = "123456789012";
const REGION: &str = "us-east-1";
/// Messages per queue/topic (moto's per-message cost grows with the queue's depth).
const PER_DEST: usize = 50;
/// Batched runs: larger blocks, so one sink (one batcher) gets each run of deliveries
/// instead of the in-flight window straddling several (depth stays small next to a request).
const PER_DEST_BATCHED: usize = 500;
/// SQS batched: moto's SQS cost per message grows steeply with the queue's depth (it scans
/// the queue on every send), so batched SQS runs keep 50-message queues; the 256 in flight
/// then straddle ~6 sinks, each flushing a partial batch after linger (see `one_queue`).
const PER_DEST_BATCHED_SQS: usize = 50;
const REPS: usize = 3;
const DEADLINE: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Service {
    Sqs,
    Sns,
}

impl Service {
    fn name(self) -> &'static str {
        match self {
            Service::Sqs => "sqs",
            Service::Sns => "sns",
        }
    }
}

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

fn endpoint() -> String {
    std::env::var("ANKUSA_MOTO_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4566".into())
}

fn options() -> AwsOptions {
    AwsOptions::default()
        .with_region(REGION)
        .with_endpoint(endpoint())
        .with_credentials(StaticCredentials::new(
            "AKIAIOSFODNN7EXAMPLE",
            "moto-secret-not-checked",
        ))
        .with_timeout(Duration::from_secs(30))
}

/// Counts the HTTP requests a client transmits (the aws tests' interceptor).
#[derive(Debug, Clone, Default)]
struct Counter(Arc<AtomicUsize>);

impl aws_sdk_sqs::config::Intercept for Counter {
    fn name(&self) -> &'static str {
        "Counter"
    }
    fn read_before_transmit(
        &self,
        _ctx: &aws_sdk_sqs::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _rc: &aws_sdk_sqs::config::RuntimeComponents,
        _cfg: &mut aws_sdk_sqs::config::ConfigBag,
    ) -> Result<(), aws_sdk_sqs::error::BoxError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// One client pair (SQS, SNS) with the sink's SDK config and a request counter.
#[derive(Clone)]
struct Clients {
    sqs: aws_sdk_sqs::Client,
    sns: aws_sdk_sns::Client,
    counter: Counter,
}

async fn clients(counter: Option<Counter>) -> Clients {
    let ep = endpoint();
    let sqs_cfg = SqsConfig::new(format!("{ep}/{ACCOUNT}/x"), options()).unwrap();
    let sdk = sqs_cfg.sdk_config().await.unwrap();
    let counter = counter.unwrap_or_default();
    let sqs = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::config::Builder::from(&sdk)
            .interceptor(counter.clone())
            .build(),
    );
    let sns_cfg = SnsConfig::new(format!("arn:aws:sns:{REGION}:{ACCOUNT}:x"), options()).unwrap();
    let sdk = sns_cfg.sdk_config().await.unwrap();
    let sns = aws_sdk_sns::Client::from_conf(
        aws_sdk_sns::config::Builder::from(&sdk)
            .interceptor(counter.clone())
            .build(),
    );
    Clients { sqs, sns, counter }
}

static NAME: AtomicUsize = AtomicUsize::new(0);

fn unique(prefix: &str) -> String {
    format!(
        "ankusa-bench-{prefix}-{}-{}",
        std::process::id(),
        NAME.fetch_add(1, Ordering::Relaxed)
    )
}

/// Create `k` queues (URLs) or topics (ARNs).
async fn create(admin: &Clients, svc: Service, k: usize) -> Vec<String> {
    let mut set = tokio::task::JoinSet::new();
    for i in 0..k {
        let a = admin.clone();
        set.spawn(async move {
            let name = unique(svc.name());
            let d = match svc {
                Service::Sqs => a
                    .sqs
                    .create_queue()
                    .queue_name(name)
                    .send()
                    .await
                    .unwrap()
                    .queue_url()
                    .unwrap()
                    .to_owned(),
                Service::Sns => a
                    .sns
                    .create_topic()
                    .name(name)
                    .send()
                    .await
                    .unwrap()
                    .topic_arn()
                    .unwrap()
                    .to_owned(),
            };
            (i, d)
        });
    }
    let mut out = vec![String::new(); k];
    while let Some(r) = set.join_next().await {
        let (i, d) = r.unwrap();
        out[i] = d;
    }
    out
}

async fn delete(admin: &Clients, svc: Service, dests: Vec<String>) {
    let mut set = tokio::task::JoinSet::new();
    for d in dests {
        let a = admin.clone();
        set.spawn(async move {
            match svc {
                Service::Sqs => {
                    let _ = a.sqs.delete_queue().queue_url(d).send().await;
                }
                Service::Sns => {
                    let _ = a.sns.delete_topic().topic_arn(d).send().await;
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
}

type BoxFut = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
/// Sends unit `i` (one delivery, or one raw batch of 10).
type Op = Arc<dyn Fn(usize) -> BoxFut + Send + Sync>;

struct Workload {
    env: Arc<Envelope>,
    /// The Message v1 body the sink would send (raw sends it as is).
    body: Arc<String>,
    attrs: Vec<(&'static str, String)>,
}

fn workload(body_bytes: usize) -> Workload {
    let pad = "x".repeat(body_bytes - 10);
    let raw = format!("{{\"pad\":\"{pad}\"}}");
    assert_eq!(raw.len(), body_bytes);
    let env = Envelope::builder("01JBENCH0000000000000000", "stripe", raw.into_bytes())
        .tenant_id("acme")
        .received_at(1_700_000_000_000)
        .content_type("application/json")
        .build()
        .unwrap();
    let ctx = Ctx::for_envelope(&env);
    let body = message::encode(&env, &ctx, Some(AwsOptions::default().inline_max_bytes)).unwrap();
    let attrs = ankusa_sink_core::attributes(&env, &ctx);
    Workload {
        env: Arc::new(env),
        body: Arc::new(String::from_utf8(body).unwrap()),
        attrs,
    }
}

fn sqs_attrs(w: &Workload) -> HashMap<String, aws_sdk_sqs::types::MessageAttributeValue> {
    w.attrs
        .iter()
        .map(|(k, v)| {
            let a = aws_sdk_sqs::types::MessageAttributeValue::builder()
                .data_type("String")
                .string_value(v)
                .build()
                .unwrap();
            ((*k).to_owned(), a)
        })
        .collect()
}

fn sns_attrs(w: &Workload) -> HashMap<String, aws_sdk_sns::types::MessageAttributeValue> {
    w.attrs
        .iter()
        .map(|(k, v)| {
            let a = aws_sdk_sns::types::MessageAttributeValue::builder()
                .data_type("String")
                .string_value(v)
                .build()
                .unwrap();
            ((*k).to_owned(), a)
        })
        .collect()
}

/// The sink's op: delivery `i` goes to destination `i / PER_DEST`, one sink per destination.
fn sink_op(
    c: &Clients,
    svc: Service,
    dests: &[String],
    w: &Workload,
    batched: bool,
    per_dest: usize,
) -> Op {
    let sinks: Vec<Arc<dyn Sink>> = dests
        .iter()
        .map(|d| -> Arc<dyn Sink> {
            match svc {
                Service::Sqs => Arc::new(SqsSink::from_client(
                    SqsConfig::new(d, options()).unwrap(),
                    c.sqs.clone(),
                )),
                Service::Sns => Arc::new(SnsSink::from_client(
                    SnsConfig::new(d, options()).unwrap(),
                    c.sns.clone(),
                )),
            }
        })
        .collect();
    let sinks = Arc::new(sinks);
    let env = Arc::clone(&w.env);
    let ctx = Arc::new(Ctx::for_envelope(&env).with_batch(batched));
    Arc::new(move |i| {
        let (sinks, env, ctx) = (Arc::clone(&sinks), Arc::clone(&env), Arc::clone(&ctx));
        Box::pin(async move {
            safe_deliver(&*sinks[i / per_dest], &env, &ctx, Some(DEADLINE))
                .await
                .map_err(|f| f.to_string())
        })
    })
}

/// The raw op: `SendMessage` / `Publish` per unit, or (batched) a 10-entry
/// `SendMessageBatch` / `PublishBatch` per unit.
fn raw_op(
    c: &Clients,
    svc: Service,
    dests: &[String],
    w: &Workload,
    batched: bool,
    per_dest: usize,
) -> Op {
    let dests = Arc::new(dests.to_vec());
    let body = Arc::clone(&w.body);
    match svc {
        Service::Sqs => {
            let (client, attrs) = (c.sqs.clone(), Arc::new(sqs_attrs(w)));
            Arc::new(move |i| {
                let (client, attrs, body, dests) = (
                    client.clone(),
                    Arc::clone(&attrs),
                    Arc::clone(&body),
                    Arc::clone(&dests),
                );
                Box::pin(async move {
                    if batched {
                        let entries = (0..10)
                            .map(|j| {
                                aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                                    .id(j.to_string())
                                    .message_body(body.as_str())
                                    .set_message_attributes(Some((*attrs).clone()))
                                    .build()
                                    .unwrap()
                            })
                            .collect();
                        let out = client
                            .send_message_batch()
                            .queue_url(&dests[i * 10 / per_dest])
                            .set_entries(Some(entries))
                            .send()
                            .await
                            .map_err(|e| format!("{e:?}"))?;
                        if out.successful().len() != 10 {
                            return Err(format!("{} of 10 accepted", out.successful().len()));
                        }
                    } else {
                        let out = client
                            .send_message()
                            .queue_url(&dests[i / per_dest])
                            .message_body(body.as_str())
                            .set_message_attributes(Some((*attrs).clone()))
                            .send()
                            .await
                            .map_err(|e| format!("{e:?}"))?;
                        out.message_id().ok_or("no message id")?;
                    }
                    Ok(())
                })
            })
        }
        Service::Sns => {
            let (client, attrs) = (c.sns.clone(), Arc::new(sns_attrs(w)));
            Arc::new(move |i| {
                let (client, attrs, body, dests) = (
                    client.clone(),
                    Arc::clone(&attrs),
                    Arc::clone(&body),
                    Arc::clone(&dests),
                );
                Box::pin(async move {
                    if batched {
                        let entries = (0..10)
                            .map(|j| {
                                aws_sdk_sns::types::PublishBatchRequestEntry::builder()
                                    .id(j.to_string())
                                    .message(body.as_str())
                                    .set_message_attributes(Some((*attrs).clone()))
                                    .build()
                                    .unwrap()
                            })
                            .collect();
                        let out = client
                            .publish_batch()
                            .topic_arn(&dests[i * 10 / per_dest])
                            .set_publish_batch_request_entries(Some(entries))
                            .send()
                            .await
                            .map_err(|e| format!("{e:?}"))?;
                        if out.successful().len() != 10 {
                            return Err(format!("{} of 10 accepted", out.successful().len()));
                        }
                    } else {
                        let out = client
                            .publish()
                            .topic_arn(&dests[i / per_dest])
                            .message(body.as_str())
                            .set_message_attributes(Some((*attrs).clone()))
                            .send()
                            .await
                            .map_err(|e| format!("{e:?}"))?;
                        out.message_id().ok_or("no message id")?;
                    }
                    Ok(())
                })
            })
        }
    }
}

/// `units` calls of `op` by `workers` concurrent tasks; per-unit latencies in µs.
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
                    panic!("unit {i} failed: {e}");
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
    requests: usize,
}

impl Run {
    fn per_sec(&self) -> f64 {
        self.deliveries as f64 / self.seconds
    }
    fn rpd(&self) -> f64 {
        self.requests as f64 / self.deliveries as f64
    }
    fn json(&self) -> Value {
        json!({
            "mode": self.mode.name(),
            "variant": if self.batched { "batched" } else { "unbatched" },
            "concurrency": self.concurrency,
            "body_bytes": self.body_bytes,
            "deliveries": self.deliveries,
            "seconds": (self.seconds * 1000.0).round() / 1000.0,
            "per_sec": self.per_sec().round(),
            "p50_us": self.p50_us.round(),
            "p99_us": self.p99_us.round(),
            "requests_per_delivery": (self.rpd() * 1000.0).round() / 1000.0,
        })
    }
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64
}

struct Spec {
    /// Messages per queue/topic; `None`: the default for the variant.
    per_dest: Option<usize>,
    batched: bool,
    concurrency: usize,
    body_bytes: usize,
    deliveries: usize,
}

async fn run_once(c: &Clients, admin: &Clients, svc: Service, mode: Mode, s: &Spec) -> Run {
    let w = workload(s.body_bytes);
    let per_dest = s.per_dest.unwrap_or(match (s.batched, svc) {
        (false, _) => PER_DEST,
        (true, Service::Sqs) => std::env::var("BENCH_SQS_PER_DEST_BATCHED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(PER_DEST_BATCHED_SQS),
        (true, Service::Sns) => PER_DEST_BATCHED,
    });
    let dests = create(admin, svc, s.deliveries.div_ceil(per_dest)).await;
    let raw_batched = mode == Mode::Raw && s.batched;
    let op = match mode {
        Mode::Sink => sink_op(c, svc, &dests, &w, s.batched, per_dest),
        Mode::Raw => raw_op(c, svc, &dests, &w, s.batched, per_dest),
    };
    // A raw batch carries 10 deliveries; as many messages in flight as the sink may have,
    // at most the sink's 16 batch requests.
    let (units, workers) = if raw_batched {
        (s.deliveries / 10, s.concurrency.div_ceil(10).min(16))
    } else {
        (s.deliveries, s.concurrency)
    };
    let before = c.counter.0.load(Ordering::Relaxed);
    let (seconds, mut lat) = drive(op, units, workers).await;
    let requests = c.counter.0.load(Ordering::Relaxed) - before;
    delete(admin, svc, dests).await;
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
        requests,
    }
}

fn specs() -> Vec<Spec> {
    let scale: f64 = std::env::var("BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let n = |x: usize| ((x as f64 * scale) as usize / 50).max(1) * 50;
    let mut v = Vec::new();
    for (body_bytes, counts) in [
        (1024, [(1, 150), (16, 1000), (256, 800)]),
        (65_536, [(1, 100), (16, 300), (256, 500)]),
    ] {
        for (concurrency, deliveries) in counts {
            v.push(Spec {
                per_dest: None,
                batched: false,
                concurrency,
                body_bytes,
                deliveries: n(deliveries),
            });
        }
    }
    for (concurrency, deliveries) in [(16, 1000), (256, 2000)] {
        v.push(Spec {
            per_dest: None,
            batched: true,
            concurrency,
            body_bytes: 1024,
            deliveries: n(deliveries),
        });
    }
    v
}

/// The sink's own CPU work per delivery, µs, measured in-process: Message v1 encoding
/// (sha256 of the body, base64, JSON), the attributes, and the MD5 the SQS sink checks.
fn sink_cpu_us(body_bytes: usize) -> Value {
    let w = workload(body_bytes);
    let ctx = Ctx::for_envelope(&w.env);
    let iters = if body_bytes > 1024 { 300 } else { 5000 };
    let t = Instant::now();
    for _ in 0..iters {
        let body = message::encode(&w.env, &ctx, Some(AwsOptions::default().inline_max_bytes));
        std::hint::black_box(ankusa_sink_core::attributes(&w.env, &ctx));
        std::hint::black_box(body.unwrap());
    }
    let encode = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
    let t = Instant::now();
    for _ in 0..iters {
        std::hint::black_box(hex::encode(<md5::Md5 as md5::Digest>::digest(
            w.body.as_bytes(),
        )));
    }
    let md5 = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
    json!({"body_bytes": body_bytes, "message_bytes": w.body.len(),
           "encode_us": (encode * 10.0).round() / 10.0, "md5_us": (md5 * 10.0).round() / 10.0})
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

/// Peak RSS of a child process running only `mode` (c=16, 1 KiB, unbatched).
fn child_rss(svc: Service, mode: Mode) -> u64 {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--only", mode.name(), svc.name()])
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
    // CARGO_MANIFEST_DIR is the crate; the workspace's target/ is one level up.
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-results")
}

async fn bench(svc: Service) {
    let admin = clients(None).await;
    let sink_c = clients(None).await;
    let raw_c = clients(None).await;
    println!(
        "\n{} vs raw ({}; median of {REPS} (c=1: 5), interleaved)",
        svc.name(),
        endpoint()
    );
    println!(
        "{:<10} {:>5} {:>6} {:>6} | {:>9} {:>9} {:>6} | {:>8} {:>8} | {:>8} {:>8} | {:>6} {:>6}",
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
        "r p99us",
        "s rpd",
        "r rpd"
    );
    let mut all = Vec::new();
    let only_batched = std::env::var("BENCH_ONLY").is_ok_and(|v| v == "batched");
    for s in specs().into_iter().filter(|s| s.batched || !only_batched) {
        let (mut sink, mut raw) = (Vec::new(), Vec::new());
        let reps = if s.concurrency == 1 { 5 } else { REPS };
        for _ in 0..reps {
            sink.push(run_once(&sink_c, &admin, svc, Mode::Sink, &s).await);
            raw.push(run_once(&raw_c, &admin, svc, Mode::Raw, &s).await);
        }
        let (a, b) = (median(sink), median(raw));
        println!(
            "{:<10} {:>5} {:>6} {:>6} | {:>9.0} {:>9.0} {:>6.3} | {:>8.0} {:>8.0} | {:>8.0} {:>8.0} | {:>6.3} {:>6.3}",
            if s.batched { "batched" } else { "unbatched" },
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
            a.rpd(),
            b.rpd()
        );
        all.push(a);
        all.push(b);
    }
    // Requests per delivery with the whole in-flight window on one sink: one queue of 500
    // (slow on moto: the queue's depth, not the batcher, sets its throughput).
    let one = Spec {
        per_dest: Some(500),
        batched: true,
        concurrency: 256,
        body_bytes: 1024,
        deliveries: 500,
    };
    let one_sink = run_once(&sink_c, &admin, svc, Mode::Sink, &one).await;
    let one_raw = run_once(&raw_c, &admin, svc, Mode::Raw, &one).await;
    println!(
        "batched, one destination, c=256, 500 deliveries: requests/delivery sink {:.3}, raw {:.3}",
        one_sink.rpd(),
        one_raw.rpd()
    );
    let rss_sink = child_rss(svc, Mode::Sink);
    let rss_raw = child_rss(svc, Mode::Raw);
    println!("peak RSS (VmHWM, c=16 1 KiB unbatched only): sink {rss_sink} kB, raw {rss_raw} kB");
    let cpu = vec![sink_cpu_us(1024), sink_cpu_us(65_536)];
    println!("sink CPU per delivery (in-process): {cpu:?}");
    let doc = json!({
        "adapter": svc.name(),
        "server": format!("moto on {} (single Python process)", endpoint()),
        "notes": "moto, not the client, bounds the absolute figures (a few hundred to a few \
                  thousand requests/s on this 2-core machine); compare sink and raw side by \
                  side. Fresh queues/topics of at most 50 messages per run (moto slows as one \
                  queue fills). Raw sends the same Message v1 body and attributes, encoded \
                  once; raw batched = 10-entry batch requests, ceil(concurrency/10) (max 16) \
                  in flight. Batched runs: SNS topics of 500 messages (one sink's batcher sees the \
                  window); SQS queues of 50 (moto rescans a queue on every send), so the 256 \
                  in flight straddle ~6 sinks and each flushes a partial batch after linger: \
                  one_destination_batched shows the batcher alone (500 to one queue/topic). \
                  Requests counted with an SDK interceptor.",
        "runs": all.iter().map(Run::json).collect::<Vec<_>>(),
        "peak_rss_kb": {"sink": rss_sink, "raw": rss_raw},
        "sink_cpu_per_delivery": cpu,
        "one_destination_batched": [one_sink.json(), one_raw.json()],
    });
    let dir = out_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.json", svc.name()));
    std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    println!("wrote {}", path.display());
}

async fn only(svc: Service, mode: Mode) {
    let admin = clients(None).await;
    let c = clients(None).await;
    let s = Spec {
        per_dest: None,
        batched: false,
        concurrency: 16,
        body_bytes: 1024,
        deliveries: 1000,
    };
    run_once(&c, &admin, svc, mode, &s).await;
    println!("VMHWM_KB {}", vm_hwm_kb());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut services = Vec::new();
    let mut only_mode = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "sqs" => services.push(Service::Sqs),
            "sns" => services.push(Service::Sns),
            "--only" => {
                only_mode = match it.next().map(String::as_str) {
                    Some("sink") => Some(Mode::Sink),
                    Some("raw") => Some(Mode::Raw),
                    other => panic!("--only sink|raw, not {other:?}"),
                }
            }
            _ => {} // `--bench` and filters cargo passes
        }
    }
    if services.is_empty() {
        services = vec![Service::Sqs, Service::Sns];
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match only_mode {
            Some(m) => only(services[0], m).await,
            None => {
                for svc in services {
                    bench(svc).await;
                }
            }
        }
    });
}

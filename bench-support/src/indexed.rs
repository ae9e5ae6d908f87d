//! The harness of the AWS (SQS, SNS) and Pub/Sub `vs_raw` benches. Unlike [`vs_raw`](crate::vs_raw),
//! each run gets fresh destinations and an op that takes the unit's index (so a bench can
//! spread units over destinations), runs a fixed count, and a failed unit aborts the bench.
//!
//! A bench implements [`IndexedBench`] (the names its table uses and one run of a
//! [`Spec`]), then [`compare`]s its [`specs`], sink and raw interleaved.

use crate::{Mode, median, pct};
use ankusa_sink_core::{Ctx, Envelope, Sink, safe_deliver};
use serde_json::{Value, json};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Repetitions of each workload, sink and raw interleaved; the median is reported.
pub const REPS: usize = 3;
/// The per-delivery deadline given to `safe_deliver`, as dispatch does.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// What one indexed bench brings to the harness.
pub trait IndexedBench {
    /// The name of the unbatched variant (table and JSON `variant`).
    const UNBATCHED: &'static str;
    /// The width of the table's variant column.
    const VARIANT_WIDTH: usize;
    /// Whether runs count requests (the table's requests-per-delivery columns).
    const COUNTS_REQUESTS: bool;
    /// What one call of an [`Op`] sends, in the failure message.
    const UNIT: &'static str;

    /// One measured run of `spec` in `mode` (fresh destinations, deleted afterwards):
    /// [`drive`] an op, then [`Run::new`].
    fn run_once(&self, mode: Mode, spec: Spec) -> impl Future<Output = Run>;
}

/// One unit's send.
pub type BoxFut = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
/// Sends unit `i` (one delivery, or a bench-defined batch).
pub type Op = Arc<dyn Fn(usize) -> BoxFut + Send + Sync>;

/// The benched envelope: a JSON body of exactly `body_bytes`.
///
/// # Panics
/// When `body_bytes` is under 10 (the JSON around the padding).
pub fn envelope(body_bytes: usize) -> Envelope {
    let pad = "x".repeat(body_bytes - 10);
    let raw = format!("{{\"pad\":\"{pad}\"}}");
    assert_eq!(raw.len(), body_bytes);
    Envelope::builder("01JBENCH0000000000000000", "stripe", raw.into_bytes())
        .tenant_id("acme")
        .received_at(1_700_000_000_000)
        .content_type("application/json")
        .build()
        .unwrap()
}

/// The sink's op: delivery `i` goes to `sinks[i / per_dest]` (one sink: `usize::MAX`).
pub fn sink_op<S: Sink + ?Sized + 'static>(
    sinks: Vec<Arc<S>>,
    per_dest: usize,
    env: &Arc<Envelope>,
    batched: bool,
) -> Op {
    let sinks = Arc::new(sinks);
    let env = Arc::clone(env);
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

/// `units` calls of `op` by `workers` concurrent tasks: seconds, and per-unit latencies
/// in µs.
///
/// # Panics
/// When a unit fails (naming it by [`IndexedBench::UNIT`]).
pub async fn drive<B: IndexedBench>(op: Op, units: usize, workers: usize) -> (f64, Vec<u32>) {
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
                    panic!("{} {i} failed: {e}", B::UNIT);
                }
                lat.push(t.elapsed().as_micros() as u32);
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

/// One measured run.
#[derive(Debug, Clone)]
pub struct Run {
    mode: Mode,
    variant: &'static str,
    concurrency: usize,
    body_bytes: usize,
    deliveries: usize,
    seconds: f64,
    p50_us: f64,
    p99_us: f64,
    /// HTTP requests sent, where the bench counts them.
    requests: Option<usize>,
}

impl Run {
    /// A run of `s` that took `seconds`, from its unsorted per-unit latencies.
    pub fn new<B: IndexedBench>(
        mode: Mode,
        s: Spec,
        seconds: f64,
        mut lat: Vec<u32>,
        requests: Option<usize>,
    ) -> Run {
        lat.sort_unstable();
        Run {
            mode,
            variant: if s.batched { "batched" } else { B::UNBATCHED },
            concurrency: s.concurrency,
            body_bytes: s.body_bytes,
            deliveries: s.deliveries,
            seconds,
            p50_us: pct(&lat, 0.5),
            p99_us: pct(&lat, 0.99),
            requests,
        }
    }

    /// Deliveries per second.
    pub fn per_sec(&self) -> f64 {
        self.deliveries as f64 / self.seconds
    }

    /// Requests per delivery, where counted.
    pub fn rpd(&self) -> Option<f64> {
        self.requests.map(|r| r as f64 / self.deliveries as f64)
    }

    /// The run in the vs_raw JSON schema (`scripts/bench_chart.py` reads it).
    pub fn json(&self) -> Value {
        json!({
            "mode": self.mode.name(),
            "variant": self.variant,
            "concurrency": self.concurrency,
            "body_bytes": self.body_bytes,
            "deliveries": self.deliveries,
            "seconds": (self.seconds * 1000.0).round() / 1000.0,
            "per_sec": self.per_sec().round(),
            "p50_us": self.p50_us.round(),
            "p99_us": self.p99_us.round(),
            "requests_per_delivery": self.rpd().map(|r| (r * 1000.0).round() / 1000.0),
        })
    }
}

/// One workload.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// Through the sink's batching (`ctx.batch`), and raw batch requests.
    pub batched: bool,
    /// Deliveries in flight.
    pub concurrency: usize,
    /// Bytes of each envelope's body.
    pub body_bytes: usize,
    /// Deliveries of the run.
    pub deliveries: usize,
}

/// The unbatched workloads (body bytes, [(concurrency, deliveries)]) then the batched ones
/// (1 KiB bodies); each count is scaled by `BENCH_SCALE` (default 1), then `round`ed.
pub fn specs(
    unbatched: [(usize, [(usize, usize); 3]); 2],
    batched: [(usize, usize); 2],
    round: impl Fn(usize) -> usize,
) -> Vec<Spec> {
    let scale: f64 = std::env::var("BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let n = |x: usize| round((x as f64 * scale) as usize);
    let mut v = Vec::new();
    for (body_bytes, counts) in unbatched {
        for (concurrency, deliveries) in counts {
            v.push(Spec {
                batched: false,
                concurrency,
                body_bytes,
                deliveries: n(deliveries),
            });
        }
    }
    for (concurrency, deliveries) in batched {
        v.push(Spec {
            batched: true,
            concurrency,
            body_bytes: 1024,
            deliveries: n(deliveries),
        });
    }
    v
}

/// µs per call of `f`, in-process: 5000 calls for 1 KiB bodies, 300 for larger ones.
pub fn cpu_us(body_bytes: usize, mut f: impl FnMut()) -> f64 {
    let iters = if body_bytes > 1024 { 300 } else { 5000 };
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    t.elapsed().as_secs_f64() * 1e6 / iters as f64
}

/// The median repetition by throughput, with the median p50 and p99 of all repetitions.
fn median_run(mut runs: Vec<Run>) -> Run {
    let p50 = median(runs.iter().map(|r| r.p50_us).collect());
    let p99 = median(runs.iter().map(|r| r.p99_us).collect());
    runs.sort_by(|a, b| a.per_sec().total_cmp(&b.per_sec()));
    let mut m = runs[runs.len() / 2].clone();
    (m.p50_us, m.p99_us) = (p50, p99);
    m
}

/// Every spec `reps(spec)` times, sink and raw interleaved, printing a table row of the
/// medians per spec; returns the medians (sink, raw per spec) for the JSON `runs`.
pub async fn compare<B: IndexedBench>(
    bench: &B,
    specs: Vec<Spec>,
    reps: impl Fn(&Spec) -> usize,
) -> Vec<Run> {
    let mut header = format!(
        "{:<w$} {:>5} {:>6} {:>6} | {:>9} {:>9} {:>6} | {:>8} {:>8} | {:>8} {:>8}",
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
        w = B::VARIANT_WIDTH
    );
    if B::COUNTS_REQUESTS {
        header += &format!(" | {:>6} {:>6}", "s rpd", "r rpd");
    }
    println!("{header}");
    let mut all = Vec::new();
    for s in specs {
        let (mut sink, mut raw) = (Vec::new(), Vec::new());
        for _ in 0..reps(&s) {
            sink.push(bench.run_once(Mode::Sink, s).await);
            raw.push(bench.run_once(Mode::Raw, s).await);
        }
        let (a, b) = (median_run(sink), median_run(raw));
        let mut row = format!(
            "{:<w$} {:>5} {:>6} {:>6} | {:>9.0} {:>9.0} {:>6.3} | {:>8.0} {:>8.0} | {:>8.0} {:>8.0}",
            a.variant,
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
            w = B::VARIANT_WIDTH
        );
        if let (Some(ar), Some(br)) = (a.rpd(), b.rpd()) {
            row += &format!(" | {ar:>6.3} {br:>6.3}");
        }
        println!("{row}");
        all.push(a);
        all.push(b);
    }
    all
}

/// Peak RSS, kB, of a child running `mode` only (`--only <mode> <extra>`).
///
/// # Panics
/// When the child does not report it (with the child's stderr).
pub fn child_rss(mode: Mode, extra: &[&str]) -> u64 {
    crate::child_peak_rss(mode, extra)
        .unwrap_or_else(|stderr| panic!("child --only {}: {stderr}", mode.name()))
}

/// The benches' runtime: two workers, the machine's cores.
///
/// # Panics
/// When the runtime cannot start.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

//! The vs_raw harness of the HTTP, AMQP and Kafka benches: every workload of [`WORKLOADS`]
//! through the sink and through the raw client, interleaved, [`REPS`] times each, with a
//! count calibrated from a warm-up; medians go to `<out_dir>/<ADAPTER>.json`.
//!
//! A bench implements [`VsRawBench`] and its `main` calls [`run`]. Arguments:
//! - none: the comparison, then the peak memory of each side in an `--only` child;
//! - `--only sink|raw|raw_encode`: the peak-memory child (concurrency 256, 1 KiB then
//!   64 KiB; `raw_encode` where the bench has [`VsRawBench::raw_encode_op`]);
//! - `--only sink|raw|raw_encode --profile <concurrency> <deliveries> <body_bytes>`: one
//!   longer run of one workload, to attach a profiler to one mode.

use crate::{
    Mode, child_peak_rss, child_peak_rss_of, median, only_child_arg, pct, print_vm_hwm,
    write_results,
};
use ankusa_message::TraceContext;
use ankusa_sink_core::{Ctx, Envelope, Sink, safe_deliver};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Repetitions of each workload, sink and raw interleaved; the median is reported.
pub const REPS: usize = 3;
/// Each timed run aims at this long (the count is calibrated from a warm-up, then bounded).
const TARGET_SECS: f64 = 1.0;
/// Deliveries of one timed run, at most.
const MAX_N: usize = 20_000;
/// (concurrency, body bytes) of every measured workload.
pub const WORKLOADS: &[(usize, usize)] = &[
    (1, 1024),
    (16, 1024),
    (256, 1024),
    (1, 65_536),
    (16, 65_536),
    (256, 65_536),
];
/// The per-delivery deadline given to `safe_deliver`, as dispatch does.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// One delivery: `true` when it was accepted.
pub type Op = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync>;

/// What one adapter's vs_raw bench brings to the harness.
pub trait VsRawBench {
    /// The adapter's name: the results file `<ADAPTER>.json` and its `adapter` field.
    const ADAPTER: &'static str;
    /// Deliveries of one timed run, at least.
    const MIN_N: usize;
    /// Bytes of bodies per timed run, at most (what the broker can hold between purges).
    const MAX_BYTES: usize;
    /// Deliveries (1 KiB, 64 KiB) of the `--only` memory run, at concurrency 256.
    const ONLY_N: (usize, usize);

    /// The sink's type.
    type Sink: Sink + 'static;

    /// The sink under test.
    fn sink(&self) -> &Arc<Self::Sink>;

    /// The raw client's delivery of `env`: the same bytes, headers and settings the sink
    /// sends (anything derived from `env` is computed here, once, not per delivery).
    fn raw_op(&self, env: &Arc<Envelope>) -> Op;

    /// The raw client handed the hook instead of its encoded bytes: per delivery, the
    /// Message v1 encode any sender of the format pays ([`Outgoing::new`] with the sink's
    /// layout, the fastest encoder there is), then the same request as [`raw_op`]. Its runs
    /// (mode `raw_encode`) split the sink's gap to `raw` into the format's own cost and the
    /// sink's overhead beyond it. `None` (the default): not measured.
    ///
    /// [`Outgoing::new`]: ankusa_message::Outgoing::new
    /// [`raw_op`]: VsRawBench::raw_op
    fn raw_encode_op(&self, _env: &Arc<Envelope>) -> Option<Op> {
        None
    }

    /// Runs, untimed, after every run (AMQP purges its queue). Nothing by default.
    fn after_run(&self) -> impl Future<Output = ()> {
        async {}
    }

    /// Runs once the measuring is over, before the peak-memory children start (deletes what
    /// the bench created). Nothing by default.
    fn teardown(&self) -> impl Future<Output = ()> {
        async {}
    }
}

/// The hook every HTTP/AMQP/Kafka bench delivers: a tenant, a dedupe key and two provider
/// headers, so the sink's per-delivery header and Message v1 work is all exercised.
pub fn envelope(size: usize) -> Envelope {
    Envelope::builder("01JBENCHHOOK000000000000000", "stripe", vec![b'x'; size])
        .tenant_id("acme")
        .content_type("application/json")
        .dedupe_key("evt_1")
        .header("Stripe-Signature", "t=1,v1=abc")
        .header("User-Agent", "Stripe/1.0")
        .build()
        .unwrap()
}

/// The context a raw client's message is made from, once: a trace context like the one
/// the sink sends on every delivery, so both sides send the same attributes (the raw side
/// a fixed value: it pays no id generation).
pub fn raw_ctx(env: &Envelope) -> Ctx {
    let trace = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        .expect("a valid traceparent");
    Ctx::for_envelope(env).with_extension(trace)
}

/// The sink side of every workload: a fresh `Ctx` with a new trace context and
/// `safe_deliver` with dispatch's deadline per delivery, as a dispatcher calls a sink (the
/// sink sends the `traceparent` as dispatch's attempts make it send one).
fn sink_op<S: Sink + 'static>(sink: &Arc<S>, env: &Arc<Envelope>) -> Op {
    let (sink, env) = (Arc::clone(sink), Arc::clone(env));
    Arc::new(move || {
        let (sink, env) = (Arc::clone(&sink), Arc::clone(&env));
        Box::pin(async move {
            let ctx = Ctx::for_envelope(&env).with_extension(TraceContext::root());
            safe_deliver(&*sink, &env, &ctx, Some(DEADLINE))
                .await
                .is_ok()
        })
    })
}

/// The op of `mode` for `body`-byte deliveries.
fn op<B: VsRawBench>(bench: &B, mode: Mode, body: usize) -> Op {
    let env = Arc::new(envelope(body));
    match mode {
        Mode::Sink => sink_op(bench.sink(), &env),
        Mode::Raw => bench.raw_op(&env),
    }
}

struct Sample {
    seconds: f64,
    lat_us: Vec<u32>,
    errors: usize,
}

/// `n` calls of `op`, `concurrency` at a time.
async fn measure(op: &Op, concurrency: usize, n: usize) -> Sample {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (op, next) = (Arc::clone(op), Arc::clone(&next));
        tasks.spawn(async move {
            let mut lat = Vec::with_capacity(n / concurrency + 1);
            let mut errors = 0;
            while next.fetch_add(1, Ordering::Relaxed) < n {
                let t = Instant::now();
                if !op().await {
                    errors += 1;
                }
                lat.push(t.elapsed().as_micros() as u32);
            }
            (lat, errors)
        });
    }
    let mut lat_us = Vec::with_capacity(n);
    let mut errors = 0;
    while let Some(r) = tasks.join_next().await {
        let (l, e) = r.expect("worker panicked");
        lat_us.extend(l);
        errors += e;
    }
    let seconds = start.elapsed().as_secs_f64();
    lat_us.sort_unstable();
    Sample {
        seconds,
        lat_us,
        errors,
    }
}

/// Microseconds to build a hook's envelope and its body digest, the part of Message v1
/// encoding a hook pays once (every sink and retry of it shares the digest), so neither
/// side's timed runs include it: reported on its own line and in the JSON.
fn envelope_cost_us(body: usize) -> f64 {
    let n = (8 * 1024 * 1024 / body).clamp(16, 10_000);
    let start = Instant::now();
    for _ in 0..n {
        let env = envelope(body);
        std::hint::black_box(env.body_sha256());
    }
    start.elapsed().as_secs_f64() * 1e6 / n as f64
}

/// The mode name of [`VsRawBench::raw_encode_op`]'s runs.
pub const RAW_ENCODE: &str = "raw_encode";

/// Interleaved sink/raw (and raw_encode, where the bench has it) runs of every workload
/// (`after_run` after each); returns the JSON `runs`.
async fn compare<B: VsRawBench>(bench: &B) -> Vec<serde_json::Value> {
    println!(
        "{:<10} {:>5} {:>7} {:>7} {:>12} {:>10} {:>10} {:>7}",
        "mode", "conc", "body", "n", "per_sec", "p50_us", "p99_us", "errors"
    );
    let mut runs = Vec::new();
    for &(conc, body) in WORKLOADS {
        let mut sides = vec![
            (Mode::Sink.name(), op(bench, Mode::Sink, body)),
            (Mode::Raw.name(), op(bench, Mode::Raw, body)),
        ];
        if let Some(encode) = bench.raw_encode_op(&Arc::new(envelope(body))) {
            sides.push((RAW_ENCODE, encode));
        }
        let warm_n = (4 * conc).max(100);
        let mut warm_seconds = Vec::with_capacity(sides.len());
        for (_, op) in &sides {
            warm_seconds.push(measure(op, conc, warm_n).await.seconds);
            bench.after_run().await;
        }
        // The sink's warm-up calibrates the count of every side.
        let rate = warm_n as f64 / warm_seconds[0];
        let n = ((rate * TARGET_SECS) as usize)
            .min(B::MAX_BYTES / body)
            .clamp(B::MIN_N.max(conc), MAX_N);
        let mut per = vec![(Vec::new(), Vec::new(), Vec::new()); sides.len()];
        for _ in 0..REPS {
            for (i, (mode, op)) in sides.iter().enumerate() {
                let s = measure(op, conc, n).await;
                bench.after_run().await;
                let per_sec = n as f64 / s.seconds;
                let (p50, p99) = (pct(&s.lat_us, 0.50), pct(&s.lat_us, 0.99));
                println!(
                    "{mode:<10} {conc:>5} {body:>7} {n:>7} {per_sec:>12.0} {p50:>10.0} {p99:>10.0} {:>7}",
                    s.errors
                );
                if s.errors > 0 {
                    eprintln!("warning: {} failed deliveries in {mode} run", s.errors);
                }
                per[i].0.push(per_sec);
                per[i].1.push(p50);
                per[i].2.push(p99);
            }
        }
        for (i, (mode, _)) in sides.iter().enumerate() {
            let per_sec = median(per[i].0.clone());
            runs.push(serde_json::json!({
                "mode": mode, "variant": "default", "concurrency": conc, "body_bytes": body,
                "deliveries": n, "seconds": n as f64 / per_sec, "per_sec": per_sec,
                "p50_us": median(per[i].1.clone()), "p99_us": median(per[i].2.clone()),
                "requests_per_delivery": serde_json::Value::Null,
            }));
        }
    }
    runs
}

/// The `--only` child: the memory run, or with `--profile` one longer run of one workload.
/// `mode` is `None` for `raw_encode`.
async fn only<B: VsRawBench>(bench: &B, mode: Option<Mode>, args: &[String]) {
    let name = mode.map_or(RAW_ENCODE, Mode::name);
    let op = |body: usize| match mode {
        Some(mode) => op(bench, mode, body),
        None => bench
            .raw_encode_op(&Arc::new(envelope(body)))
            .expect("--only raw_encode: this bench has no raw_encode side"),
    };
    if let Some(i) = args.iter().position(|a| a == "--profile") {
        let arg = |k: usize, default: usize| {
            args.get(i + k)
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let (conc, n, body) = (arg(1, 16), arg(2, 200_000), arg(3, 1024));
        let s = measure(&op(body), conc, n).await;
        bench.after_run().await;
        println!(
            "{name} c={conc} body={body} n={n}: {:.0}/s, errors {}",
            n as f64 / s.seconds,
            s.errors
        );
        return;
    }
    for (body, n) in [(1024, B::ONLY_N.0), (65_536, B::ONLY_N.1)] {
        measure(&op(body), 256, n).await;
        bench.after_run().await;
    }
    print_vm_hwm();
}

/// The whole bench: `setup` (on the bench's runtime), then the comparison and each side's
/// peak memory, written to `<out_dir>/<ADAPTER>.json`, or the `--only` child's run.
///
/// # Panics
/// When the runtime cannot start, or the results cannot be written.
pub fn run<B: VsRawBench>(setup: impl Future<Output = B>) {
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let bench = setup.await;
        if let Some(mode) = only_child_arg(&args) {
            only(&bench, mode, &args).await;
            bench.teardown().await;
            return;
        }
        let envelope_us: serde_json::Map<String, serde_json::Value> = [1024, 65_536]
            .into_iter()
            .map(|body| {
                let us = envelope_cost_us(body);
                println!("envelope + body digest, once per hook: {body:>7} B {us:>8.1} us");
                (body.to_string(), serde_json::json!(us))
            })
            .collect();
        let runs = compare(&bench).await;
        bench.teardown().await;
        let rss = [Mode::Sink, Mode::Raw].map(|m| child_peak_rss(m, &[]).ok());
        // Each delivery encoding its own Message v1, as the sink does: the memory the
        // format itself costs at 256 in flight.
        let rss_encode = bench
            .raw_encode_op(&Arc::new(envelope(1024)))
            .and_then(|_| child_peak_rss_of(RAW_ENCODE, &[]).ok());
        let doc = serde_json::json!({
            "adapter": B::ADAPTER,
            "runs": runs,
            "envelope_us": envelope_us,
            "peak_rss_kb": { "sink": rss[0], "raw": rss[1], RAW_ENCODE: rss_encode },
        });
        let path = write_results(B::ADAPTER, &doc);
        println!(
            "peak RSS kB: sink {:?}, raw {:?}, {RAW_ENCODE} {rss_encode:?}; wrote {}",
            rss[0],
            rss[1],
            path.display()
        );
    });
}

// The vs_raw measurement harness, shared by textual inclusion (`include!`) so it can use
// each bench's constants (ADAPTER, REPS, WORKLOADS, ...) and imports. Used by the HTTP,
// AMQP and Kafka `vs_raw` benches. Each bench defines what differs: ADAPTER, MIN_N,
// MAX_BYTES and ONLY_N.

// pct, median, out_dir, vm_hwm_kb: shared with the AWS and Pub/Sub harness.
include!("bench_util.rs");

/// Repetitions of each workload, sink and raw interleaved; the median is reported.
const REPS: usize = 3;
/// Each timed run aims at this long (the count is calibrated from a warm-up, then bounded).
const TARGET_SECS: f64 = 1.0;
const MAX_N: usize = 20_000;
/// (concurrency, body bytes) of every measured workload.
const WORKLOADS: &[(usize, usize)] = &[
    (1, 1024),
    (16, 1024),
    (256, 1024),
    (1, 65_536),
    (16, 65_536),
    (256, 65_536),
];
/// The per-delivery deadline given to `safe_deliver`, as dispatch does.
const DEADLINE: Duration = Duration::from_secs(30);

/// The hook every HTTP/AMQP/Kafka bench delivers: a tenant, a dedupe key and two provider
/// headers, so the sink's per-delivery header and Message v1 work is all exercised.
fn envelope(size: usize) -> Envelope {
    Envelope::builder("01JBENCHHOOK000000000000000", "stripe", vec![b'x'; size])
        .tenant_id("acme")
        .content_type("application/json")
        .dedupe_key("evt_1")
        .header("Stripe-Signature", "t=1,v1=abc")
        .header("User-Agent", "Stripe/1.0")
        .build()
        .unwrap()
}

type Op = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync>;

/// The sink side of every workload: a fresh `Ctx` and `safe_deliver` with dispatch's
/// deadline per delivery, as a dispatcher calls a sink.
fn sink_op<S: ankusa_sink_core::Sink + 'static>(sink: &Arc<S>, env: &Arc<Envelope>) -> Op {
    let (sink, env) = (Arc::clone(sink), Arc::clone(env));
    Arc::new(move || {
        let (sink, env) = (Arc::clone(&sink), Arc::clone(&env));
        Box::pin(async move {
            let ctx = ankusa_sink_core::Ctx::for_envelope(&env);
            ankusa_sink_core::safe_deliver(&*sink, &env, &ctx, Some(DEADLINE))
                .await
                .is_ok()
        })
    })
}

struct Sample {
    seconds: f64,
    lat_us: Vec<u32>,
    errors: usize,
}

/// `n` calls of `op`, `concurrency` at a time.
async fn run(op: &Op, concurrency: usize, n: usize) -> Sample {
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

type After<'a> = &'a (dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Sync);

/// Interleaved sink/raw runs of every workload (`after` runs, untimed, after each run);
/// returns the JSON `runs`.
async fn compare(ops: impl Fn(&str, usize) -> Op, after: After<'_>) -> Vec<serde_json::Value> {
    println!(
        "{:<5} {:>5} {:>7} {:>7} {:>12} {:>10} {:>10} {:>7}",
        "mode", "conc", "body", "n", "per_sec", "p50_us", "p99_us", "errors"
    );
    let mut runs = Vec::new();
    for &(conc, body) in WORKLOADS {
        let (sink, raw) = (ops("sink", body), ops("raw", body));
        let warm_n = (4 * conc).max(100);
        let warm = run(&sink, conc, warm_n).await;
        after().await;
        run(&raw, conc, warm_n).await;
        after().await;
        let rate = warm_n as f64 / warm.seconds;
        let n = ((rate * TARGET_SECS) as usize)
            .min(MAX_BYTES / body)
            .clamp(MIN_N.max(conc), MAX_N);
        let mut per = [
            (Vec::new(), Vec::new(), Vec::new()),
            (Vec::new(), Vec::new(), Vec::new()),
        ];
        for _ in 0..REPS {
            for (i, (mode, op)) in [("sink", &sink), ("raw", &raw)].into_iter().enumerate() {
                let s = run(op, conc, n).await;
                after().await;
                let per_sec = n as f64 / s.seconds;
                let (p50, p99) = (pct(&s.lat_us, 0.50), pct(&s.lat_us, 0.99));
                println!(
                    "{mode:<5} {conc:>5} {body:>7} {n:>7} {per_sec:>12.0} {p50:>10.0} {p99:>10.0} {:>7}",
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
        for (i, mode) in ["sink", "raw"].into_iter().enumerate() {
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

/// Peak RSS of a child process running only `mode` at concurrency 256.
fn peak_rss(mode: &str) -> Option<u64> {
    let out = std::process::Command::new(std::env::current_exe().ok()?)
        .args(["--only", mode])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("VMHWM_KB="))
        .and_then(|v| v.trim().parse().ok())
}

/// `--only sink|raw`: the peak-memory child (concurrency 256, 1 KiB then 64 KiB).
/// `--only sink|raw --profile <concurrency> <deliveries> <body_bytes>`: one longer run of
/// one workload, to attach a profiler to one mode.
async fn only(ops: impl Fn(&str, usize) -> Op, after: After<'_>, mode: &str) {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--profile") {
        let arg = |k: usize, default: usize| {
            args.get(i + k)
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let (conc, n, body) = (arg(1, 16), arg(2, 200_000), arg(3, 1024));
        let s = run(&ops(mode, body), conc, n).await;
        after().await;
        println!(
            "{mode} c={conc} body={body} n={n}: {:.0}/s, errors {}",
            n as f64 / s.seconds,
            s.errors
        );
        return;
    }
    for (body, n) in [(1024, ONLY_N.0), (65_536, ONLY_N.1)] {
        run(&ops(mode, body), 256, n).await;
        after().await;
    }
    println!("VMHWM_KB={}", vm_hwm_kb());
}

fn write_json(runs: Vec<serde_json::Value>, rss: (Option<u64>, Option<u64>)) {
    let doc = serde_json::json!({
        "adapter": ADAPTER,
        "runs": runs,
        "peak_rss_kb": { "sink": rss.0, "raw": rss.1 },
    });
    let dir = out_dir();
    std::fs::create_dir_all(&dir).expect("create the results dir");
    let path = dir.join(format!("{ADAPTER}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).expect("write results");
    println!(
        "peak RSS kB: sink {:?}, raw {:?}; wrote {}",
        rss.0,
        rss.1,
        path.display()
    );
}

fn only_mode() -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .find(|w| w[0] == "--only")
        .map(|w| w[1].clone())
}

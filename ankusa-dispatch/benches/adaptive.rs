//! Adaptive concurrency against the best fixed one (issue 52), through the real HTTP sink:
//! - a server whose latency is 10 ms up to 32 requests in flight and grows linearly beyond
//!   (10 ms x in flight / 32): fixed concurrency swept 1..512, then adaptive (max 512).
//!   Target: adaptive at least 0.9 of the best fixed throughput, its p99 at most 1.2x that
//!   setting's.
//! - a server that answers 429 (`Retry-After: 1`) above 200 requests/s: adaptive holds
//!   429s under 5 % of requests.
//!
//! `cargo bench -p ankusa-dispatch --bench adaptive`.

use ankusa_dispatch::{BreakerConfig, Concurrency, DispatchConfig, Dispatcher, Hook, Outcome};
use ankusa_sink_core::{Ctx, Envelope, Failure, Sink, async_trait};
use ankusa_sink_http::HttpSink;
mod endpoint;

use endpoint::{Server, serve};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// 10 ms up to 32 in flight, then linearly more.
fn queueing(s: &Server) -> (Duration, bool) {
    let n = s.in_flight.load(Ordering::SeqCst).max(1) as u64;
    (Duration::from_micros(10_000 * n.max(32) / 32), false)
}

/// 10 ms, but 429 at once above 200 requests in the last second.
fn rate_limited(s: &Server) -> (Duration, bool) {
    let now = Instant::now();
    let mut recent = s.recent.lock().unwrap();
    while recent
        .front()
        .is_some_and(|t| now.duration_since(*t) > Duration::from_secs(1))
    {
        recent.pop_front();
    }
    if recent.len() >= 200 {
        return (Duration::ZERO, true);
    }
    recent.push_back(now);
    (Duration::from_millis(10), false)
}

/// The HTTP sink, each attempt's round trip recorded while `recording`.
#[derive(Debug)]
struct Timed {
    inner: HttpSink,
    recording: AtomicBool,
    rtts: Mutex<Vec<Duration>>,
}

#[async_trait]
impl Sink for Timed {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let t = Instant::now();
        let r = self.inner.deliver(env, ctx).await;
        if self.recording.load(Ordering::Relaxed) {
            self.rtts.lock().unwrap().push(t.elapsed());
        }
        r
    }
}

struct Measured {
    per_s: f64,
    p99_ms: f64,
}

/// Feed hooks for `warm + measure`; throughput and p99 over `measure`.
async fn run(url: &str, c: Concurrency, warm: Duration, measure: Duration) -> Measured {
    let sink = Arc::new(Timed {
        inner: HttpSink::builder(url.to_owned())
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap(),
        recording: AtomicBool::new(false),
        rtts: Mutex::new(Vec::new()),
    });
    let (d, mut out) = Dispatcher::builder()
        .sink("http", sink.clone())
        .sink_concurrency("http", c)
        // The breaker would stop the 429 run after five throttles in a row: this measures
        // the limit alone.
        .config(
            DispatchConfig::default()
                .with_breaker(BreakerConfig::new(1_000_000, Duration::from_secs(1))),
        )
        .build()
        .unwrap();
    let feeder = {
        let d = d.clone();
        tokio::spawn(async move {
            for i in 0.. {
                let env = Envelope::builder(format!("h{i}"), "bench", vec![b'x'; 256])
                    .build()
                    .unwrap();
                if d.submit(Hook::new(env)).await.is_err() {
                    return;
                }
            }
        })
    };
    let start = Instant::now();
    let mut delivered = 0u64;
    let mut measuring = false;
    let mut measure_start = start;
    loop {
        let remaining = (start + warm + measure).saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            break;
        }
        let Ok(Some(x)) = tokio::time::timeout(remaining, out.recv()).await else {
            break;
        };
        if !measuring && start.elapsed() >= warm {
            measuring = true;
            measure_start = Instant::now();
            sink.recording.store(true, Ordering::Relaxed);
        }
        if measuring && matches!(x.outcome, Outcome::Delivered) {
            delivered += 1;
        }
    }
    let secs = measure_start.elapsed().as_secs_f64();
    sink.recording.store(false, Ordering::Relaxed);
    feeder.abort();
    let _ = d.shutdown(Duration::ZERO).await;
    while out.recv().await.is_some() {}
    let mut rtts = std::mem::take(&mut *sink.rtts.lock().unwrap());
    rtts.sort_unstable();
    let p99 = rtts
        .get(rtts.len().saturating_sub(1) * 99 / 100)
        .copied()
        .unwrap_or_default();
    Measured {
        per_s: delivered as f64 / secs.max(1e-9),
        p99_ms: p99.as_secs_f64() * 1000.0,
    }
}

fn main() {
    ankusa_bench_support::indexed::runtime().block_on(async {
        let (url, _) = serve(queueing).await;
        let (warm, measure) = (Duration::from_millis(700), Duration::from_secs(2));
        let mut best: Option<(usize, Measured)> = None;
        for c in [1, 2, 4, 8, 16, 32, 64, 128, 256, 512] {
            let m = run(&url, Concurrency::Fixed(c), warm, measure).await;
            println!(
                "adaptive: fixed c={c:<3} {:>8.0} hooks/s  p99 {:>6.1} ms",
                m.per_s, m.p99_ms
            );
            if best.as_ref().is_none_or(|(_, b)| m.per_s > b.per_s) {
                best = Some((c, m));
            }
        }
        let (bc, b) = best.expect("swept");
        let a = run(
            &url,
            Concurrency::Adaptive { max: 512 },
            Duration::from_secs(3),
            measure,
        )
        .await;
        println!(
            "adaptive: adaptive    {:>8.0} hooks/s  p99 {:>6.1} ms: {:.2} of the best fixed (c={bc}), \
             p99 {:.2}x its (targets >= 0.90, <= 1.20)",
            a.per_s,
            a.p99_ms,
            a.per_s / b.per_s,
            a.p99_ms / b.p99_ms
        );

        let (url, server) = serve(rate_limited).await;
        let before = (
            server.requests.load(Ordering::SeqCst),
            server.refused.load(Ordering::SeqCst),
        );
        let m = run(
            &url,
            Concurrency::Adaptive { max: 512 },
            Duration::from_secs(2),
            Duration::from_secs(6),
        )
        .await;
        let requests = server.requests.load(Ordering::SeqCst) - before.0;
        let refused = server.refused.load(Ordering::SeqCst) - before.1;
        println!(
            "adaptive: against 429 above 200 requests/s: {:.0} hooks/s, {refused} of {requests} \
             requests refused ({:.1} %, target < 5 %)",
            m.per_s,
            100.0 * refused as f64 / requests.max(1) as f64
        );
    });
}

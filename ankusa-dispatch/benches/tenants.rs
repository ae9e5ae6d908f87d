//! Tenant fairness: tenant A's 20,000-hook backlog and tenant B's 100 hooks to one HTTP
//! endpoint answering in 50 ms, through the real HTTP sink at the CLI's default
//! concurrency for it (32). Target (issue 52): B's last hook completes within 2x the time
//! B's 100 hooks take alone. `cargo bench -p ankusa-dispatch --bench tenants`.

use ankusa_dispatch::{DispatchConfig, Dispatcher, Hook, Outcome};
use ankusa_sink_core::Envelope;
use ankusa_sink_http::HttpSink;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod endpoint;

fn hook(tenant: &str, i: usize) -> Hook {
    let env = Envelope::builder(format!("{tenant}-{i}"), "bench", vec![b'x'; 256])
        .tenant_id(tenant)
        .build()
        .unwrap();
    Hook::new(env)
}

/// Seconds from B's first submit until B's last hook is delivered, with `backlog` hooks of
/// tenant A submitted first (and still being submitted).
async fn b_finishes(url: &str, backlog: usize, b: usize) -> f64 {
    let sink = Arc::new(HttpSink::builder(url.to_owned()).build().unwrap());
    let (d, mut out) = Dispatcher::builder()
        .sink("http", sink)
        .config(DispatchConfig::default().with_concurrency(32))
        .build()
        .unwrap();
    let a = {
        let d = d.clone();
        tokio::spawn(async move {
            for i in 0..backlog {
                d.submit(hook("a", i)).await.unwrap();
            }
        })
    };
    // A's backlog is in first: the intake full of A's hooks.
    tokio::time::sleep(Duration::from_millis(if backlog > 0 { 200 } else { 0 })).await;
    let start = Instant::now();
    let bs = {
        let d = d.clone();
        tokio::spawn(async move {
            for i in 0..b {
                d.submit(hook("b", i)).await.unwrap();
            }
        })
    };
    let mut left = b;
    let mut took = 0.0;
    while let Some(x) = out.recv().await {
        assert!(matches!(x.outcome, Outcome::Delivered), "{x:?}");
        if x.envelope.tenant_id() == Some("b") {
            left -= 1;
            if left == 0 {
                took = start.elapsed().as_secs_f64();
                break;
            }
        }
    }
    bs.await.unwrap();
    a.abort();
    // What A still has in flight ends here, not in the next run.
    let _ = d.shutdown(Duration::ZERO).await;
    while out.recv().await.is_some() {}
    took
}

fn main() {
    ankusa_bench_support::indexed::runtime().block_on(async {
        let (url, _) = endpoint::serve(|_| (Duration::from_millis(50), false)).await;
        // Warm the connection pool once.
        b_finishes(&url, 0, 64).await;
        let mut alone = Vec::new();
        let mut shared = Vec::new();
        for _ in 0..5 {
            alone.push(b_finishes(&url, 0, 100).await);
            shared.push(b_finishes(&url, 20_000, 100).await);
        }
        alone.sort_by(f64::total_cmp);
        shared.sort_by(f64::total_cmp);
        let (a, s) = (alone[2], shared[2]);
        println!(
            "tenants: B's 100 hooks alone {a:.3} s; behind A's 20,000-hook backlog {s:.3} s; \
             ratio {:.2} (target <= 2.0; medians of 5)",
            s / a
        );
        println!("tenants: runs alone {alone:?}, shared {shared:?}");
    });
}

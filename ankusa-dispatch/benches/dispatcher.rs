//! The dispatcher's own overhead per delivery: hooks through a `Dispatcher` to a sink that
//! accepts at once, against the same sink called directly (attempt span + `safe_deliver`,
//! what the CLI did before the dispatcher). `cargo bench -p ankusa-dispatch --bench dispatcher`.

use ankusa_bench_support::median;
use ankusa_dispatch::{DispatchConfig, Dispatcher, Hook, Outcome, attempt};
use ankusa_sink_core::{Ctx, Envelope, Failure, Sink, async_trait, safe_deliver};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Accept;

#[async_trait]
impl Sink for Accept {
    async fn deliver(&self, _: &Envelope, _: &Ctx) -> Result<(), Failure> {
        Ok(())
    }
}

fn envelope(i: usize) -> Envelope {
    Envelope::builder(format!("01JBENCH{i:019}"), "stripe", vec![b'x'; 1024])
        .tenant_id("acme")
        .build()
        .unwrap()
}

/// µs per delivery through a dispatcher with `sinks` sinks (fan-out) and `concurrency`.
async fn through_dispatcher(n: usize, sinks: usize, concurrency: usize) -> f64 {
    let mut b = Dispatcher::builder();
    for s in 0..sinks {
        b = b.sink(format!("s{s}"), Arc::new(Accept));
    }
    let config = DispatchConfig::default().with_concurrency(concurrency);
    let (d, mut out) = b.config(config).build().unwrap();
    let envs: Vec<Envelope> = (0..n).map(envelope).collect();
    let start = Instant::now();
    let feeder = {
        let d = d.clone();
        tokio::spawn(async move {
            for env in envs {
                d.submit(Hook::new(env)).await.unwrap();
            }
        })
    };
    for _ in 0..n * sinks {
        let got = out.recv().await.unwrap();
        assert!(matches!(got.outcome, Outcome::Delivered));
    }
    let took = start.elapsed();
    feeder.await.unwrap();
    d.shutdown(Duration::from_secs(1)).await;
    took.as_secs_f64() * 1e6 / (n * sinks) as f64
}

/// µs per delivery calling the sink directly, one at a time.
async fn direct(n: usize) -> f64 {
    let envs: Vec<Envelope> = (0..n).map(envelope).collect();
    let start = Instant::now();
    for env in &envs {
        let ctx = Ctx::for_envelope(env);
        attempt(
            "s0",
            env,
            &ctx,
            safe_deliver(&Accept, env, &ctx, Some(Duration::from_secs(30))),
        )
        .await
        .unwrap();
    }
    start.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn main() {
    const N: usize = 50_000;
    const REPS: usize = 7;
    for (flavor, rt) in [
        (
            "current_thread",
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        ),
        (
            "multi_thread",
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .unwrap(),
        ),
    ] {
        let raw = median((0..REPS).map(|_| rt.block_on(direct(N))).collect());
        println!("{flavor:<15} direct attempt + safe_deliver     {raw:>7.2} us/delivery");
        for (sinks, conc) in [(1, 1), (1, 32), (2, 32)] {
            let us = median(
                (0..REPS)
                    .map(|_| rt.block_on(through_dispatcher(N, sinks, conc)))
                    .collect(),
            );
            println!(
                "{flavor:<15} dispatcher sinks={sinks} concurrency={conc:<3} {us:>7.2} us/delivery (overhead {:>5.2} us)",
                us - raw
            );
        }
    }
}

//! The dispatcher's own overhead per delivery: hooks through a `Dispatcher` to a sink that
//! accepts at once, against the same sink called directly (attempt span + `safe_deliver`,
//! what the CLI did before the dispatcher) and against a task per attempt awaited one at a
//! time (the least a caller following the specification does). The deliveries are received
//! on a task of the runtime, as `Deliveries` advises; one row per runtime receives them in
//! `block_on` instead, on a thread outside a multi-thread runtime's workers.
//! `cargo bench -p ankusa-dispatch --bench dispatcher`.

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

/// µs per delivery with a task per attempt (what the specification asks of every caller),
/// each awaited before the next.
async fn task_per_attempt(n: usize) -> f64 {
    let envs: Vec<Arc<Envelope>> = (0..n).map(|i| Arc::new(envelope(i))).collect();
    let start = Instant::now();
    for env in envs {
        tokio::spawn(async move {
            let ctx = Ctx::for_envelope(&env);
            let deadline = Some(Duration::from_secs(30));
            attempt(
                "s0",
                &env,
                &ctx,
                safe_deliver(&Accept, &env, &ctx, deadline),
            )
            .await
        })
        .await
        .unwrap()
        .unwrap();
    }
    start.elapsed().as_secs_f64() * 1e6 / n as f64
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

/// `run` on `rt`: in a task of the runtime (`on_task`), or in the future `block_on` runs.
fn run_on(
    rt: &tokio::runtime::Runtime,
    on_task: bool,
    run: impl std::future::Future<Output = f64> + Send + 'static,
) -> f64 {
    rt.block_on(async {
        if on_task {
            tokio::spawn(run).await.unwrap()
        } else {
            run.await
        }
    })
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
        let label = "direct attempt + safe_deliver";
        println!("{flavor:<15} {label:<52} {raw:>7.2} us/delivery");
        for on_task in [true, false] {
            let task = median(
                (0..REPS)
                    .map(|_| run_on(&rt, on_task, task_per_attempt(N)))
                    .collect(),
            );
            let at = if on_task { "" } else { " in block_on" };
            let label = format!("a task per attempt, awaited{at}");
            println!("{flavor:<15} {label:<52} {task:>7.2} us/delivery");
        }
        let rows = [(1, 1, true), (1, 32, true), (2, 32, true), (1, 1, false)];
        for (sinks, conc, on_task) in rows {
            let us = median(
                (0..REPS)
                    .map(|_| run_on(&rt, on_task, through_dispatcher(N, sinks, conc)))
                    .collect(),
            );
            let at = if on_task { "" } else { " in block_on" };
            let label = format!("dispatcher sinks={sinks} concurrency={conc}{at}");
            println!(
                "{flavor:<15} {label:<52} {us:>7.2} us/delivery (overhead {:>5.2} us)",
                us - raw
            );
        }
    }
}

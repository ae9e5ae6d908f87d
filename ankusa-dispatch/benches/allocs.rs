//! Heap allocations per operation, counted exactly with dhat's allocator.
//! `cargo bench -p ankusa-dispatch --bench allocs`.

mod shared;

use ankusa_dispatch::{BreakerConfig, DispatchConfig, DispatchPolicy, Dispatcher, Hook, attempt};
use ankusa_sink_core::{Ctx, Envelope, Failure, Reason, Sink, async_trait, safe_deliver};
use ankusa_sink_testkit::support::current_thread_runtime;
use shared::{Noop, decide_each_class, silent_subscriber};

/// Asks for an hour's pause on every delivery: its hooks wait in the retry queue.
#[derive(Debug)]
struct Throttled;

#[async_trait]
impl Sink for Throttled {
    async fn deliver(&self, _: &Envelope, _: &Ctx) -> Result<(), Failure> {
        Err(Failure::retry_after_ms(
            3_600_000,
            Reason("slow down".into()),
        ))
    }
}

/// Bytes held per waiting hook, and allocations while 10,000 hooks wait a second.
fn waiting_hooks(rt: &tokio::runtime::Runtime) {
    const N: usize = 10_000;
    rt.block_on(async {
        let (d, _out) = Dispatcher::builder()
            .sink("slow", std::sync::Arc::new(Throttled))
            // A breaker that never opens: every hook waits in the retry queue, none is held.
            .config(DispatchConfig::default().with_breaker(BreakerConfig::new(
                u32::MAX,
                std::time::Duration::from_secs(1),
            )))
            .build()
            .unwrap();
        let envs: Vec<Envelope> = (0..N)
            .map(|i| {
                Envelope::builder(format!("h{i}"), "stripe", vec![b'x'; 1024])
                    .build()
                    .unwrap()
            })
            .collect();
        let before = dhat::HeapStats::get();
        for env in envs {
            d.submit(Hook::new(env)).await.unwrap();
        }
        let start = std::time::Instant::now();
        while d.waiting() < N {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "only {} of {N} hooks waiting",
                d.waiting()
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let held = dhat::HeapStats::get();
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let after = dhat::HeapStats::get();
        println!(
            "{:<40} {:>12.1} {:>14.0}",
            "10k hooks waiting 1 s (per hook)",
            (after.total_blocks - held.total_blocks) as f64 / N as f64,
            (after.total_bytes - held.total_bytes) as f64 / N as f64,
        );
        println!(
            "{:<40} {:>12} {:>14.0}",
            "heap held per waiting hook (1 KiB body)",
            "",
            (held.curr_bytes as f64 - before.curr_bytes as f64) / N as f64,
        );
        d.shutdown(std::time::Duration::ZERO).await;
    });
}

/// Allocations per hook through a dispatcher to one sink that accepts at once, from
/// `submit` to its `Delivery` received and dropped (the envelopes are built before).
fn through_dispatcher(rt: &tokio::runtime::Runtime) -> (f64, f64) {
    const N: usize = 10_000;
    rt.block_on(async {
        let (d, mut out) = Dispatcher::builder()
            .sink("noop", std::sync::Arc::new(Noop))
            .build()
            .unwrap();
        let envs = |from: usize, n: usize| -> Vec<Envelope> {
            (from..from + n)
                .map(|i| {
                    Envelope::builder(format!("h{i}"), "stripe", vec![b'x'; 1024])
                        .build()
                        .unwrap()
                })
                .collect()
        };
        // One pass first: the dispatcher's maps and queues reach their working size.
        let mut stats = Vec::new();
        for batch in [envs(0, N), envs(N, N)] {
            let before = dhat::HeapStats::get();
            let feeder = {
                let d = d.clone();
                tokio::spawn(async move {
                    for env in batch {
                        d.submit(Hook::new(env)).await.unwrap();
                    }
                })
            };
            for _ in 0..N {
                assert!(out.recv().await.is_some());
            }
            feeder.await.unwrap();
            let after = dhat::HeapStats::get();
            stats.push((
                (after.total_blocks - before.total_blocks) as f64 / N as f64,
                (after.total_bytes - before.total_bytes) as f64 / N as f64,
            ));
        }
        d.shutdown(std::time::Duration::ZERO).await;
        stats[1]
    })
}

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// Allocations (blocks, bytes) per call of `f`, averaged over `n` calls.
fn per_op(n: u64, mut f: impl FnMut()) -> (f64, f64) {
    f();
    let before = dhat::HeapStats::get();
    for _ in 0..n {
        f();
    }
    let after = dhat::HeapStats::get();
    (
        (after.total_blocks - before.total_blocks) as f64 / n as f64,
        (after.total_bytes - before.total_bytes) as f64 / n as f64,
    )
}

fn row(name: &str, (allocs, bytes): (f64, f64)) {
    println!("{name:<40} {allocs:>12.1} {bytes:>14.0}");
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let rt = current_thread_runtime();
    // One delivery through the attempt span and `safe_deliver`, as dispatch makes it.
    let attempt_once = |env: &Envelope, ctx: &Ctx| {
        rt.block_on(attempt(
            "noop",
            env,
            ctx,
            safe_deliver(&Noop, env, ctx, None),
        ))
        .unwrap();
    };
    println!("{:<40} {:>12} {:>14}", "operation", "allocs/op", "bytes/op");
    let envs: Vec<Envelope> = [1024usize, 65_536]
        .into_iter()
        .map(|size| {
            Envelope::builder("01JBENCHHOOK000000000000000", "stripe", vec![b'x'; size])
                .tenant_id("acme")
                .header("Stripe-Signature", "t=1")
                .build()
                .unwrap()
        })
        .collect();
    for env in &envs {
        let size = env.size();
        let ctx = Ctx::for_envelope(env);
        row(
            &format!("message_v1_encode {size} B"),
            per_op(1000, || {
                std::hint::black_box(ankusa_message::encode(env, &ctx, None).unwrap());
            }),
        );
        row(
            &format!("safe_deliver {size} B"),
            per_op(1000, || {
                rt.block_on(safe_deliver(&Noop, env, &ctx, None)).unwrap();
            }),
        );
        row(
            &format!("attempt + safe_deliver {size} B"),
            per_op(1000, || attempt_once(env, &ctx)),
        );
    }
    // Classification: a failure built and classed, and dispatch's decision on each class.
    row(
        "failure_new_and_class",
        per_op(1000, || {
            let f = Failure::transient(Reason(String::new()));
            std::hint::black_box(f.class().error_class());
        }),
    );
    let policy = DispatchPolicy::default();
    let mut rng = rand::rng();
    row(
        "dispatch_decide (4 classes)",
        per_op(1000, || decide_each_class(&policy, &mut rng)),
    );
    // The attempt span with a subscriber that records every span and writes nowhere.
    let _guard = tracing::subscriber::set_default(silent_subscriber());
    let ctx = Ctx::for_envelope(&envs[0]);
    row(
        "attempt + safe_deliver, fmt subscriber",
        per_op(1000, || attempt_once(&envs[0], &ctx)),
    );
    drop(_guard);
    row(
        "a hook through the dispatcher, 1 sink",
        through_dispatcher(&rt),
    );
    waiting_hooks(&rt);
}

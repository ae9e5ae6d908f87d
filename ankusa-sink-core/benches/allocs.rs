//! Heap allocations per operation, counted exactly with dhat's allocator.
//! `cargo bench -p ankusa-sink-core --bench allocs`.

use ankusa_sink_core::dispatch::{DispatchPolicy, decide};
use ankusa_sink_core::{
    Class, Ctx, Envelope, Failure, Reason, Sink, async_trait, attempt, message, safe_deliver,
};
use std::num::NonZeroU64;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

#[derive(Debug)]
struct Noop;

#[async_trait]
impl Sink for Noop {
    async fn deliver(&self, _: &Envelope, _: &Ctx) -> Result<(), Failure> {
        Ok(())
    }
}

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

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    println!("{:<40} {:>12} {:>14}", "operation", "allocs/op", "bytes/op");
    for size in [1024usize, 65_536] {
        let env = Envelope::builder("01JBENCHHOOK000000000000000", "stripe", vec![b'x'; size])
            .tenant_id("acme")
            .header("Stripe-Signature", "t=1")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env);
        let (a, b) = per_op(1000, || {
            std::hint::black_box(message::encode(&env, &ctx, None).unwrap());
        });
        println!(
            "{:<40} {a:>12.1} {b:>14.0}",
            format!("message_v1_encode {size} B")
        );
        let (a, b) = per_op(1000, || {
            rt.block_on(safe_deliver(&Noop, &env, &ctx, None)).unwrap();
        });
        println!(
            "{:<40} {a:>12.1} {b:>14.0}",
            format!("safe_deliver {size} B")
        );
        let (a, b) = per_op(1000, || {
            rt.block_on(attempt(
                "noop",
                &env,
                &ctx,
                safe_deliver(&Noop, &env, &ctx, None),
            ))
            .unwrap();
        });
        println!(
            "{:<40} {a:>12.1} {b:>14.0}",
            format!("attempt + safe_deliver {size} B")
        );
    }
    // Classification: a failure built and classed, and dispatch's decision on each class.
    let (a, b) = per_op(1000, || {
        let f = Failure::transient(Reason(String::new()));
        std::hint::black_box(f.error_class());
    });
    println!("{:<40} {a:>12.1} {b:>14.0}", "failure_new_and_class");
    let policy = DispatchPolicy::default();
    let mut rng = rand::rng();
    let classes = [
        Class::Permanent,
        Class::Config,
        Class::RetryAfter(NonZeroU64::new(1500).unwrap()),
        Class::Transient,
    ];
    let (a, b) = per_op(1000, || {
        for class in classes {
            std::hint::black_box(decide(class, 3, 0, 1_000, &policy, &mut rng));
        }
    });
    println!("{:<40} {a:>12.1} {b:>14.0}", "dispatch_decide (4 classes)");
    // The attempt span with a subscriber that records every span and writes nowhere.
    let env = Envelope::builder("01JBENCHHOOK000000000000000", "stripe", vec![b'x'; 1024])
        .tenant_id("acme")
        .build()
        .unwrap();
    let ctx = Ctx::for_envelope(&env);
    let sub = tracing_subscriber::fmt()
        .with_writer(std::io::sink)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(sub);
    let (a, b) = per_op(1000, || {
        rt.block_on(attempt(
            "noop",
            &env,
            &ctx,
            safe_deliver(&Noop, &env, &ctx, None),
        ))
        .unwrap();
    });
    println!(
        "{:<40} {a:>12.1} {b:>14.0}",
        "attempt + safe_deliver, fmt subscriber"
    );
}

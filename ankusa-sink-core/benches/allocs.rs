//! Heap allocations per operation, counted exactly with dhat's allocator.
//! `cargo bench -p ankusa-sink-core --bench allocs`.

use ankusa_sink_core::{Ctx, Envelope, Failure, Sink, async_trait, attempt, message, safe_deliver};

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
    println!("{:<34} {:>12} {:>14}", "operation", "allocs/op", "bytes/op");
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
            "{:<34} {a:>12.1} {b:>14.0}",
            format!("message_v1_encode {size} B")
        );
        let (a, b) = per_op(1000, || {
            rt.block_on(safe_deliver(&Noop, &env, &ctx, None)).unwrap();
        });
        println!(
            "{:<34} {a:>12.1} {b:>14.0}",
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
            "{:<34} {a:>12.1} {b:>14.0}",
            format!("attempt + safe_deliver {size} B")
        );
    }
}

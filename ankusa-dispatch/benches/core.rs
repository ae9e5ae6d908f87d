//! Core overhead per delivery: Message v1 encoding, classification, `safe_deliver`, and the
//! attempt span with and without a subscriber. `cargo bench -p ankusa-dispatch --bench core`.

mod shared;

use ankusa_bench_support::vs_raw::envelope;
use ankusa_dispatch::{DispatchPolicy, attempt};
use ankusa_sink_core::{Ctx, Failure, Reason, safe_deliver};
use ankusa_sink_testkit::support::current_thread_runtime;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use shared::{Noop, decide_each_class, silent_subscriber};
use std::hint::black_box;

fn encoding(c: &mut Criterion) {
    let mut g = c.benchmark_group("message_v1_encode");
    for size in [1024usize, 65_536] {
        let env = envelope(size);
        let ctx = Ctx::for_envelope(&env);
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::from_parameter(size), &env, |b, env| {
            b.iter(|| ankusa_message::encode(black_box(env), &ctx, None).unwrap())
        });
    }
    g.finish();
}

fn classification(c: &mut Criterion) {
    let policy = DispatchPolicy::default();
    let mut rng = rand::rng();
    c.bench_function("dispatch_decide", |b| {
        b.iter(|| decide_each_class(&policy, &mut rng))
    });
    c.bench_function("failure_new_and_class", |b| {
        b.iter(|| {
            let f = Failure::transient(Reason(String::new()));
            black_box(f.class().error_class())
        })
    });
}

fn delivery(c: &mut Criterion) {
    let rt = current_thread_runtime();
    let env = envelope(1024);
    let ctx = Ctx::for_envelope(&env);
    c.bench_function("safe_deliver_noop", |b| {
        b.to_async(&rt)
            .iter(|| async { safe_deliver(&Noop, &env, &ctx, None).await.unwrap() })
    });
    c.bench_function("attempt_span_no_subscriber", |b| {
        b.to_async(&rt).iter(|| async {
            attempt("noop", &env, &ctx, safe_deliver(&Noop, &env, &ctx, None))
                .await
                .unwrap()
        })
    });
    let _guard = tracing::subscriber::set_default(silent_subscriber());
    c.bench_function("attempt_span_with_subscriber", |b| {
        b.to_async(&rt).iter(|| async {
            attempt("noop", &env, &ctx, safe_deliver(&Noop, &env, &ctx, None))
                .await
                .unwrap()
        })
    });
    // The whole core path of one 1 KiB delivery: span + safe_deliver + Message v1 encode.
    drop(_guard);
    c.bench_function("core_path_1kib", |b| {
        b.to_async(&rt).iter(|| async {
            attempt("noop", &env, &ctx, async {
                black_box(ankusa_message::encode(&env, &ctx, None)?);
                safe_deliver(&Noop, &env, &ctx, None).await
            })
            .await
            .unwrap()
        })
    });
}

criterion_group!(benches, encoding, classification, delivery);
criterion_main!(benches);

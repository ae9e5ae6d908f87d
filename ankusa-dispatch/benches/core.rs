//! Core overhead per delivery: Message v1 encoding, classification, `safe_deliver`, and the
//! attempt span with and without a subscriber. `cargo bench -p ankusa-dispatch --bench core`.

use ankusa_bench_support::vs_raw::envelope;
use ankusa_dispatch::{DispatchPolicy, attempt, decide};
use ankusa_sink_core::{
    Class, Ctx, Envelope, Failure, Reason, Sink, async_trait, message, safe_deliver,
};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::num::NonZeroU64;

#[derive(Debug)]
struct Noop;

#[async_trait]
impl Sink for Noop {
    async fn deliver(&self, _: &Envelope, _: &Ctx) -> Result<(), Failure> {
        Ok(())
    }
}

fn encoding(c: &mut Criterion) {
    let mut g = c.benchmark_group("message_v1_encode");
    for size in [1024usize, 65_536] {
        let env = envelope(size);
        let ctx = Ctx::for_envelope(&env);
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::from_parameter(size), &env, |b, env| {
            b.iter(|| message::encode(black_box(env), &ctx, None).unwrap())
        });
    }
    g.finish();
}

fn classification(c: &mut Criterion) {
    let policy = DispatchPolicy::default();
    let mut rng = rand::rng();
    let classes = [
        Class::Permanent,
        Class::Config,
        Class::RetryAfter(NonZeroU64::new(1500).unwrap()),
        Class::Transient,
    ];
    c.bench_function("dispatch_decide", |b| {
        b.iter(|| {
            for class in classes {
                black_box(decide(black_box(class), 3, 0, 1_000, &policy, &mut rng));
            }
        })
    });
    c.bench_function("failure_new_and_class", |b| {
        b.iter(|| {
            let f = Failure::transient(Reason(String::new()));
            black_box(f.error_class())
        })
    });
}

fn delivery(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
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
    // A subscriber that enables every span but writes nothing: the cost of the span itself.
    let sub = tracing_subscriber::fmt()
        .with_writer(std::io::sink)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(sub);
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
                black_box(message::encode(&env, &ctx, None)?);
                safe_deliver(&Noop, &env, &ctx, None).await
            })
            .await
            .unwrap()
        })
    });
}

criterion_group!(benches, encoding, classification, delivery);
criterion_main!(benches);

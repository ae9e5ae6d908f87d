//! Core overhead per delivery: Message v1 encoding, classification, `safe_deliver`, and the
//! attempt span with and without a subscriber. `cargo bench -p ankusa-sink-core --bench core`.

use ankusa_sink_core::dispatch::{DispatchPolicy, decide};
use ankusa_sink_core::{
    Class, Ctx, Envelope, Failure, Reason, Sink, async_trait, attempt, message, safe_deliver,
};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Noop;

#[async_trait]
impl Sink for Noop {
    async fn deliver(&self, _: &Envelope, _: &Ctx) -> Result<(), Failure> {
        Ok(())
    }
}

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

/// Time `f` over `iters` fresh copies of `env` (its digest not yet computed). The copies
/// are made and dropped outside the timing, in chunks; each output is dropped inside it,
/// as in a plain `iter` (holding thousands of 88 KB outputs would time page faults).
fn fresh_copies(env: &Envelope, iters: u64, mut f: impl FnMut(&Envelope)) -> Duration {
    let mut timed = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let chunk = left.min(10_000);
        let envs: Vec<Envelope> = (0..chunk).map(|_| env.clone()).collect();
        let started = Instant::now();
        envs.iter().for_each(&mut f);
        timed += started.elapsed();
        left -= chunk;
    }
    timed
}

/// `message_v1_encode`: a hook's first encode (a fresh envelope each time, made outside the
/// timing, so the body's SHA-256 is computed in it). `message_v1_encode_again`: the same
/// envelope encoded again, as on a retry or for a second sink (the digest is kept).
fn encoding(c: &mut Criterion) {
    let mut g = c.benchmark_group("message_v1_encode");
    for size in [1024usize, 65_536] {
        let env = envelope(size);
        let ctx = Ctx::for_envelope(&env);
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::from_parameter(size), &env, |b, env| {
            b.iter_custom(|iters| {
                fresh_copies(env, iters, |env| {
                    black_box(message::encode(black_box(env), &ctx, None).unwrap());
                })
            })
        });
    }
    g.finish();
    // What the adapter benches charge the sink per delivery for a fresh envelope copy.
    let env = envelope(1024);
    c.bench_function("envelope_rebuild", |b| {
        b.iter(|| black_box(env.to_builder().build().unwrap()))
    });
    let mut g = c.benchmark_group("message_v1_encode_again");
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
    // The whole core path of one 1 KiB delivery: span + safe_deliver + Message v1 encode,
    // on a fresh envelope each time (its first encode: the digest is computed).
    drop(_guard);
    c.bench_function("core_path_1kib", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let (env, ctx) = (&env, &ctx);
            async move {
                // Clones are made (and dropped) outside the timed part, in chunks.
                let mut timed = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let chunk = left.min(10_000);
                    let envs: Vec<Envelope> = (0..chunk).map(|_| env.clone()).collect();
                    let started = Instant::now();
                    for env in &envs {
                        attempt("noop", env, ctx, async {
                            black_box(message::encode(env, ctx, None)?);
                            safe_deliver(&Noop, env, ctx, None).await
                        })
                        .await
                        .unwrap();
                    }
                    timed += started.elapsed();
                    drop(envs);
                    left -= chunk;
                }
                timed
            }
        })
    });
}

criterion_group!(benches, encoding, classification, delivery);
criterion_main!(benches);

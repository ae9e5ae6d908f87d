//! Check-in throughput of 1 MiB bodies on the local filesystem store (fsynced writes):
//! one one-claim pack per body (`single`) against 16 bodies packed into one object
//! (`packed`, one put per 16 MiB pack).
//!
//! `cargo bench -p ankusa-claimcheck --bench checkin`

use ankusa_claimcheck::{ClaimConfig, ClaimItem, ClaimStore};
use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::{Duration, Instant};

const BODY: usize = 1024 * 1024;
const PACKED: usize = 16;

fn checkin(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let store = ClaimStore::local(dir.path(), ClaimConfig::default()).expect("local store");
    let body = Bytes::from((0..BODY).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    // Written packs are removed between measurements, outside the timed part.
    let clean = || {
        let _ = std::fs::remove_dir_all(dir.path().join("claims"));
    };

    let mut group = c.benchmark_group("checkin_1MiB");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));

    group.throughput(Throughput::Bytes(BODY as u64));
    group.bench_function("single", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            rt.block_on(async {
                for _ in 0..iters {
                    let claim = store
                        .check_in(ClaimItem::new("bench", body.clone()))
                        .await
                        .expect("check in");
                    black_box(claim);
                }
            });
            let took = start.elapsed();
            clean();
            took
        });
    });

    group.throughput(Throughput::Bytes((BODY * PACKED) as u64));
    group.bench_function("packed_16", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            rt.block_on(async {
                for _ in 0..iters {
                    let items = (0..PACKED)
                        .map(|_| ClaimItem::new("bench", body.clone()))
                        .collect();
                    for claim in store.check_in_batch(items).await {
                        black_box(claim.expect("check in"));
                    }
                }
            });
            let took = start.elapsed();
            clean();
            took
        });
    });
    group.finish();
}

criterion_group!(benches, checkin);
criterion_main!(benches);

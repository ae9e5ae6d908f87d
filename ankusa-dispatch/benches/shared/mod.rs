//! What the `core` and `allocs` benches both measure with, so that their time and their
//! allocations are of the same operations.

use ankusa_dispatch::{DispatchPolicy, decide};
use ankusa_sink_core::{Class, Ctx, Envelope, Failure, Sink, async_trait};
use rand::RngCore;
use std::hint::black_box;
use std::num::NonZeroU64;

/// Accepts every delivery at once: what is measured is everything around the sink.
#[derive(Debug)]
pub(crate) struct Noop;

#[async_trait]
impl Sink for Noop {
    async fn deliver(&self, _: &Envelope, _: &Ctx) -> Result<(), Failure> {
        Ok(())
    }
}

/// Dispatch's decision on one failure of each class it treats apart.
pub(crate) fn decide_each_class(policy: &DispatchPolicy, rng: &mut dyn RngCore) {
    let classes = [
        Class::Permanent,
        Class::Config,
        Class::RetryAfter(NonZeroU64::new(1500).unwrap()),
        Class::Transient,
    ];
    for class in classes {
        black_box(decide(black_box(class), 3, 0, 1_000, policy, rng));
    }
}

/// A subscriber that enables every span up to INFO and writes nothing: the cost of the
/// attempt span itself.
pub(crate) fn silent_subscriber() -> impl tracing::Subscriber + Send + Sync {
    tracing_subscriber::fmt()
        .with_writer(std::io::sink)
        .with_max_level(tracing::Level::INFO)
        .finish()
}

//! Deliberately broken sinks: each must be caught by the case named for its defect.

use ankusa_sink_core::message::encode;
use ankusa_sink_core::{
    BoxError, Class, Ctx, Description, Envelope, Failure, Payload, Sink, Subject, async_trait,
};
use ankusa_sink_testkit::memory::{MemoryHarness, MemorySink};
use ankusa_sink_testkit::{Case, Fault, Harness, Outcome, Setup, run_all, run_case};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Defect {
    AcksWithoutStoring,
    LeaksSecretInDescribe,
    MissingIsTransient,
    DropsEveryTenth,
    ResendsAcceptedBatchItems,
    Panics,
    InlinesOversizedBody,
}

#[derive(Debug)]
struct Broken {
    inner: MemorySink,
    defect: Defect,
    token: String,
    count: AtomicU64,
}

#[async_trait]
impl Sink for Broken {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        match self.defect {
            Defect::AcksWithoutStoring => Ok(()),
            Defect::MissingIsTransient => self.inner.deliver(env, ctx).await.map_err(|f| {
                if f.class() == Class::Config {
                    Failure::transient(f)
                } else {
                    f
                }
            }),
            Defect::DropsEveryTenth => {
                if self.count.fetch_add(1, Ordering::Relaxed) % 10 == 9 {
                    Ok(())
                } else {
                    self.inner.deliver(env, ctx).await
                }
            }
            Defect::ResendsAcceptedBatchItems => {
                self.inner.deliver(env, ctx).await?;
                if ctx.batch {
                    self.inner.deliver(env, ctx).await?;
                }
                Ok(())
            }
            Defect::Panics => panic!("broken sink panics"),
            Defect::InlinesOversizedBody => {
                let msg = encode(env, ctx, None)?;
                self.inner
                    .broker()
                    .publish(self.inner.queue(), Some(&self.token), msg)
                    .map_err(|e| ankusa_sink_testkit::memory::classify(e, ctx.attempt()))
            }
            Defect::LeaksSecretInDescribe => self.inner.deliver(env, ctx).await,
        }
    }
    fn durable(&self) -> bool {
        self.inner.durable()
    }
    fn inline_max_bytes(&self) -> Option<NonZeroUsize> {
        self.inner.inline_max_bytes()
    }
    fn batched(&self) -> bool {
        self.defect == Defect::ResendsAcceptedBatchItems || self.inner.batched()
    }
    fn describe(&self, subject: &Subject) -> Option<Description> {
        if self.defect == Defect::LeaksSecretInDescribe {
            let mut d = Description::new("memory", Payload::Message);
            d.host = Some(format!("memory://user:{}@localhost", self.token));
            return Some(d);
        }
        self.inner.describe(subject)
    }
}

struct BrokenHarness {
    inner: MemoryHarness,
    defect: Defect,
    token: String,
}

impl BrokenHarness {
    fn new(defect: Defect) -> Self {
        let inner = MemoryHarness::new();
        // The harness's token is its first planted secret.
        let token = inner.secrets()[0].clone();
        BrokenHarness {
            inner,
            defect,
            token,
        }
    }
    fn wrap(&self, s: Setup<MemorySink>) -> Setup<Broken> {
        Setup {
            sink: Broken {
                inner: s.sink,
                defect: self.defect,
                token: self.token.clone(),
                count: AtomicU64::new(0),
            },
            probe: s.probe,
            body_size: s.body_size,
        }
    }
}

#[async_trait]
impl Harness for BrokenHarness {
    type Sink = Broken;
    async fn destination(&self) -> Result<Setup<Broken>, BoxError> {
        Ok(self.wrap(self.inner.destination().await?))
    }
    async fn fault(&self, fault: Fault) -> Result<Option<Setup<Broken>>, BoxError> {
        Ok(self.inner.fault(fault).await?.map(|s| self.wrap(s)))
    }
    fn secrets(&self) -> Vec<String> {
        self.inner.secrets()
    }
    fn can_restart(&self) -> bool {
        true
    }
    fn read_timeout(&self) -> std::time::Duration {
        // Every delivery here is synchronous: what is missing after 2 s never arrives.
        std::time::Duration::from_secs(2)
    }
    async fn stop(&self) -> Result<(), BoxError> {
        self.inner.stop().await
    }
    async fn start(&self) -> Result<(), BoxError> {
        self.inner.start().await
    }
}

async fn caught(defect: Defect, case: Case) -> String {
    match run_case(&BrokenHarness::new(defect), case).await {
        Outcome::Fail(why) => why,
        other => panic!("{defect:?} should fail {case}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_without_storing_is_caught() {
    let why = caught(Defect::AcksWithoutStoring, Case::RoundTrip).await;
    assert!(why.contains("never reached the destination"), "{why}");
    caught(Defect::AcksWithoutStoring, Case::Durability).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_in_describe_is_caught() {
    let why = caught(Defect::LeaksSecretInDescribe, Case::Contract).await;
    assert!(why.contains("describe"), "{why}");
    assert!(
        !why.contains("planted-token"),
        "the report itself must not leak: {why}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_destination_as_transient_is_caught() {
    let why = caught(Defect::MissingIsTransient, Case::ClassifyMissingDestination).await;
    assert!(why.contains("must be config"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_every_tenth_is_caught() {
    let why = caught(Defect::DropsEveryTenth, Case::Concurrency).await;
    assert!(why.starts_with("20 of 200"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resending_accepted_batch_items_is_caught() {
    let why = caught(Defect::ResendsAcceptedBatchItems, Case::Batching).await;
    assert!(why.contains("2 times"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panicking_sink_is_caught_and_the_suite_survives() {
    let why = caught(Defect::Panics, Case::PanicSafety).await;
    assert!(why.contains("panicked"), "{why}");
    // The whole suite still runs to the end and reports every case.
    let report = run_all(&BrokenHarness::new(Defect::Panics)).await;
    assert_eq!(report.outcomes.len(), Case::ALL.len());
    assert!(report.failures().contains(&Case::RoundTrip));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inlining_an_oversized_body_is_caught() {
    let why = caught(Defect::InlinesOversizedBody, Case::InlineBoundary).await;
    assert!(why.contains("without ctx.claim returned Ok"), "{why}");
}

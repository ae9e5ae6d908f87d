//! The testkit's own tests: the reference sink passes every case, and every deliberately
//! broken sink is caught by the case named for its defect.

mod broken;

use ankusa_sink_core::{BoxError, Sink, async_trait};
use ankusa_sink_testkit::memory::MemoryHarness;
use ankusa_sink_testkit::{Case, Fault, Harness, Outcome, Setup, run_all, run_case};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_sink_passes_every_case_without_skips() {
    let report = run_all(&MemoryHarness::new()).await;
    report.assert_passed();
    for (case, outcome) in &report.outcomes {
        match (case, outcome) {
            // The plain reference sink does not batch: the one honest skip.
            (Case::Batching, Outcome::Skip(_)) => {}
            (_, Outcome::Pass(_)) => {}
            other => panic!("unexpected outcome {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_reference_sink_passes_batching() {
    let h = MemoryHarness::new().batched();
    let outcome = run_case(&h, Case::Batching).await;
    assert!(matches!(outcome, Outcome::Pass(_)), "{outcome:?}");
}

/// The same reference, behind `Arc<dyn Sink>`, as dispatchers hold it.
struct DynHarness(MemoryHarness);

fn erase(s: Setup<ankusa_sink_testkit::memory::MemorySink>) -> Setup<Arc<dyn Sink>> {
    Setup {
        sink: Arc::new(s.sink),
        probe: s.probe,
        body_size: s.body_size,
    }
}

#[async_trait]
impl Harness for DynHarness {
    type Sink = Arc<dyn Sink>;
    async fn destination(&self) -> Result<Setup<Arc<dyn Sink>>, BoxError> {
        Ok(erase(self.0.destination().await?))
    }
    async fn fault(&self, fault: Fault) -> Result<Option<Setup<Arc<dyn Sink>>>, BoxError> {
        Ok(self.0.fault(fault).await?.map(erase))
    }
    fn secrets(&self) -> Vec<String> {
        self.0.secrets()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dyn_sink_passes() {
    let report = run_all(&DynHarness(MemoryHarness::new())).await;
    report.assert_passed();
    assert!(report.outcome(Case::Recovery).unwrap().is_skip());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skips_are_skips_not_passes() {
    /// Provokes nothing and has no probe.
    struct Bare;
    #[async_trait]
    impl Harness for Bare {
        type Sink = ankusa_sink_testkit::memory::MemorySink;
        async fn destination(&self) -> Result<Setup<Self::Sink>, BoxError> {
            let h = MemoryHarness::new();
            let sink = h.sink_on(h.broker());
            Ok(Setup::new(sink))
        }
    }
    let report = run_all(&Bare).await;
    report.assert_passed();
    for case in [
        Case::RoundTrip,
        Case::ClassifyMissingDestination,
        Case::ClassifyRefusedCredential,
        Case::ClassifyUnreachable,
        Case::ClassifyThrottled,
        Case::ClassifyOversized,
        Case::Concurrency,
        Case::Durability,
        Case::Batching,
        Case::Recovery,
    ] {
        assert!(
            report.outcome(case).unwrap().is_skip(),
            "{case} should skip"
        );
    }
}

mod generated {
    // The macro's tests run like any other: `cargo test generated::round_trip`.
    ankusa_sink_testkit::conformance_suite!(ankusa_sink_testkit::memory::MemoryHarness::new());
}

//! The testkit's own tests: the reference sink passes every case, and every deliberately
//! broken sink is caught by the case named for its defect.

/// `#[async_trait] impl Harness for $harness` with `$items`, and the rest as the memory
/// harness in its `inner` field has it, except that the sink reports landing and the
/// destination restarts.
macro_rules! harness_over_memory {
    ($harness:ty { $($items:tt)* }) => {
        #[async_trait]
        impl Harness for $harness {
            $($items)*
            fn check_detects(&self, fault: Fault) -> bool {
                self.inner.check_detects(fault)
            }
            fn secrets(&self) -> Vec<String> {
                self.inner.secrets()
            }
            fn reports_landing(&self) -> bool {
                true
            }
            fn can_restart(&self) -> bool {
                true
            }
            async fn stop(&self) -> Result<(), BoxError> {
                self.inner.stop().await
            }
            async fn start(&self) -> Result<(), BoxError> {
                self.inner.start().await
            }
            fn can_restart_destination(&self) -> bool {
                true
            }
            async fn restart_destination(&self) -> Result<(), BoxError> {
                self.inner.restart_destination().await
            }
        }
    };
}

mod broken;
mod lies;
mod round_three;

use ankusa_sink_core::{BoxError, Sink, async_trait};
use ankusa_sink_testkit::memory::{MemoryHarness, MemorySink};
use ankusa_sink_testkit::{Case, Fault, Harness, Outcome, Output, Setup, run_all_with, run_case};
use std::collections::HashSet;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_sink_passes_every_case() {
    let h = MemoryHarness::new();
    let report = run_all_with(&h, Output::Quiet).await;
    report.assert_certified();
    assert_eq!(report.harness, "MemoryHarness");
    // The plain reference sink does not batch: the one honest skip, with its reason.
    let skips = report.skips();
    assert_eq!(skips.len(), 1, "{report}");
    assert_eq!(skips[0].0, Case::Batching);
    assert!(
        skips[0].1.contains("capabilities().batched is false"),
        "{}",
        skips[0].1
    );
    // Every case deleted every queue it made.
    assert!(
        h.broker().queue_names().is_empty(),
        "{:?}",
        h.broker().queue_names()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_reference_sink_passes_everything_without_a_skip() {
    let h = MemoryHarness::new().batched();
    let report = run_all_with(&h, Output::Quiet).await;
    report.assert_certified();
    assert!(report.skips().is_empty(), "{report}");
    let batching = report.outcome(Case::Batching).unwrap().text().to_owned();
    assert!(
        batching.contains("in ") && batching.contains(" requests"),
        "{batching}"
    );
    assert!(h.broker().queue_names().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_reference_really_batches() {
    let h = MemoryHarness::new().batched();
    let setup = h.destination(Case::Batching).await.unwrap();
    let envs: Vec<_> = (0..20)
        .map(|i| {
            ankusa_sink_core::Envelope::builder(format!("b-{i}"), "s", "{}")
                .build()
                .unwrap()
        })
        .collect();
    let before = setup.sink.broker().requests();
    futures_util::future::join_all(envs.iter().map(|e| {
        let ctx = ankusa_sink_core::Ctx::for_envelope(e).with_batch(true);
        let sink = &setup.sink;
        async move { sink.deliver(e, &ctx).await.unwrap() }
    }))
    .await;
    let requests = setup.sink.broker().requests() - before;
    assert!(
        requests <= 4,
        "20 batched deliveries took {requests} requests"
    );
    assert_eq!(setup.sink.broker().messages(setup.sink.queue()).len(), 20);
}

/// The same reference, behind `Arc<dyn Sink>`, as dispatchers hold it.
struct DynHarness(MemoryHarness);

fn erase(s: Setup<MemorySink>) -> Setup<Arc<dyn Sink>> {
    s.map_sink(|sink| Arc::new(sink) as Arc<dyn Sink>)
}

#[async_trait]
impl Harness for DynHarness {
    type Sink = Arc<dyn Sink>;
    async fn destination(&self, case: Case) -> Result<Setup<Arc<dyn Sink>>, BoxError> {
        Ok(erase(self.0.destination(case).await?))
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
    let h = DynHarness(MemoryHarness::new());
    let report = run_all_with(&h, Output::Quiet).await;
    report.assert_passed();
    assert_eq!(report.harness, "DynHarness");
    assert!(report.outcome(Case::Recovery).unwrap().is_skip());
    assert!(h.0.broker().queue_names().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skips_are_skips_not_passes() {
    /// Provokes nothing, has no probe, and its sink takes no credentials.
    struct Bare;
    #[async_trait]
    impl Harness for Bare {
        type Sink = MemorySink;
        async fn destination(&self, _case: Case) -> Result<Setup<Self::Sink>, BoxError> {
            let h = MemoryHarness::new();
            Ok(Setup::new(h.sink_on(h.broker())))
        }
        fn takes_credentials(&self) -> bool {
            false
        }
    }
    let report = run_all_with(&Bare, Output::Quiet).await;
    report.assert_passed();
    let kinds: Vec<(Case, &Outcome)> = report.outcomes.iter().map(|(c, o)| (*c, o)).collect();
    let skipped: HashSet<Case> = report.skips().into_iter().map(|(c, _)| c).collect();
    for case in [
        Case::Contract,
        Case::RoundTrip,
        Case::Redelivery,
        Case::ClassifyMissingDestination,
        Case::ClassifyRefusedCredential,
        Case::ClassifyUnreachable,
        Case::ClassifyThrottled,
        Case::ClassifyOversized,
        Case::ClassifyUnacknowledged,
        Case::ClassifyWarmMissingDestination,
        Case::ClassifyWarmRefusedCredential,
        Case::ClassifyWarmUnreachable,
        Case::ClassifyWarmThrottled,
        Case::ClassifyWarmOversized,
        Case::ClassifyWarmUnacknowledged,
        Case::Concurrency,
        Case::Volume,
        Case::Durability,
        Case::Batching,
        Case::Recovery,
    ] {
        assert!(skipped.contains(&case), "{case} should skip: {report}");
    }
    for (case, why) in report.skips() {
        assert!(!why.is_empty(), "{case} skipped without a reason");
    }
    // What the harness did not give is "not provided": every fault, the restart, the probe.
    // What the sink does not claim (credentials, batching) is "impossible".
    for (case, outcome) in kinds {
        let not_provided = case.certifies()
            || matches!(
                case,
                Case::RoundTrip
                    | Case::Redelivery
                    | Case::InlineBoundary
                    | Case::Concurrency
                    | Case::Volume
                    | Case::Durability
            );
        if outcome.is_skip() {
            assert_eq!(outcome.is_not_provided(), not_provided, "{case}: {outcome}");
        }
    }
    // Passing is not certifying: 13 cases that certify were not provided.
    assert!(!report.is_certified());
    assert!(
        report
            .verdict()
            .to_string()
            .starts_with("passed with 13 unprovided cases (classify_"),
        "{}",
        report.verdict()
    );
}

#[test]
fn the_case_list_is_declared_once_and_consistent() {
    let names: HashSet<&str> = Case::ALL.iter().map(|c| c.name()).collect();
    assert_eq!(names.len(), Case::ALL.len());
    for case in Case::ALL {
        assert_eq!(Case::from_name(case.name()), Some(case));
        assert_eq!(case.to_string(), case.name());
        assert!(case.doc().ends_with('.'), "{case}: {}", case.doc());
    }
    assert_eq!(Case::from_name("no_such_case"), None);
}

#[test]
fn the_core_crate_is_reexported() {
    // A harness can name every core type through the testkit alone.
    let env = ankusa_sink_testkit::ankusa_sink_core::Envelope::builder("h", "s", "{}")
        .build()
        .unwrap();
    assert_eq!(env.id(), "h");
}

#[tokio::test]
async fn run_case_works_on_a_current_thread_runtime() {
    let h = MemoryHarness::new().batched();
    for case in Case::ALL {
        let outcome = run_case(&h, case).await;
        assert!(matches!(outcome, Outcome::Pass(_)), "{case}: {outcome:?}");
    }
    // The certifying cases are the fault cases, cold and warm, and recovery.
    let certifying: Vec<&str> = Case::ALL
        .iter()
        .filter(|c| c.certifies())
        .map(|c| c.name())
        .collect();
    assert_eq!(certifying.len(), 13, "{certifying:?}");
    assert!(
        certifying
            .iter()
            .all(|n| n.starts_with("classify_") || *n == "recovery")
    );
}

mod generated {
    // The macro's tests run like any other: `cargo test generated::round_trip`.
    ankusa_sink_testkit::conformance_suite!(ankusa_sink_testkit::memory::MemoryHarness::new());
}

mod generated_per_case {
    use ankusa_sink_testkit::Case;
    use ankusa_sink_testkit::memory::MemoryHarness;
    // One case gets a harness of its own: the batching one.
    ankusa_sink_testkit::conformance_suite!(|case| if case == Case::Batching {
        MemoryHarness::new().batched()
    } else {
        MemoryHarness::new()
    });
}

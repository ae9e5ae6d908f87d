#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod harness;
pub mod memory;
mod suite;
pub mod support;

pub use harness::{Expect, Fault, Harness, MixedBatch, Probe, Received, Setup};
pub use suite::{Case, Outcome, run_case};

use std::fmt;
use std::io::Write as _;

/// Print one case's outcome straight to the terminal (libtest's capture of `println!`
/// would hide skips, which must be visible).
fn report_line(case: Case, outcome: &Outcome) {
    let _ = writeln!(std::io::stderr(), "ankusa-testkit {case}: {outcome}");
}

/// Run every case, in order, printing one line per case.
pub async fn run_all<H: Harness>(harness: &H) -> Report {
    let mut outcomes = Vec::new();
    for case in Case::ALL {
        let outcome = run_case(harness, case).await;
        report_line(case, &outcome);
        outcomes.push((case, outcome));
    }
    Report { outcomes }
}

/// The outcomes of a whole run.
#[derive(Debug, Clone)]
pub struct Report {
    /// Each case and what it found.
    pub outcomes: Vec<(Case, Outcome)>,
}

impl Report {
    /// The outcome of one case.
    pub fn outcome(&self, case: Case) -> Option<&Outcome> {
        self.outcomes
            .iter()
            .find(|(c, _)| *c == case)
            .map(|(_, o)| o)
    }
    /// The failed cases.
    pub fn failures(&self) -> Vec<Case> {
        self.outcomes
            .iter()
            .filter(|(_, o)| o.is_fail())
            .map(|(c, _)| *c)
            .collect()
    }
    /// Panic, listing every failure, unless no case failed.
    pub fn assert_passed(&self) {
        let failed: Vec<String> = self
            .outcomes
            .iter()
            .filter(|(_, o)| o.is_fail())
            .map(|(c, o)| format!("{c}: {o}"))
            .collect();
        assert!(
            failed.is_empty(),
            "conformance failures:\n{}",
            failed.join("\n")
        );
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (case, outcome) in &self.outcomes {
            writeln!(f, "{case:<30} {outcome}")?;
        }
        Ok(())
    }
}

/// Run one case on a fresh multi-threaded runtime, print its outcome, and panic if it
/// failed. What the [`conformance_suite!`] tests call.
pub fn run_blocking<H: Harness>(make: impl FnOnce() -> H, case: Case) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let outcome = rt.block_on(async {
        let harness = make();
        run_case(&harness, case).await
    });
    report_line(case, &outcome);
    if let Outcome::Fail(why) = outcome {
        panic!("conformance case {case} failed: {why}");
    }
}

/// Generate one `#[test]` per conformance case, named after it, so `cargo test contract`
/// filters as usual. `$make` is evaluated once per test to build the harness.
///
/// ```ignore
/// mod conformance {
///     ankusa_sink_testkit::conformance_suite!(crate::MyHarness::new());
/// }
/// ```
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@cases $make;
            contract => Contract,
            round_trip => RoundTrip,
            inline_boundary => InlineBoundary,
            classify_missing_destination => ClassifyMissingDestination,
            classify_refused_credential => ClassifyRefusedCredential,
            classify_unreachable => ClassifyUnreachable,
            classify_throttled => ClassifyThrottled,
            classify_oversized => ClassifyOversized,
            concurrency => Concurrency,
            durability => Durability,
            panic_safety => PanicSafety,
            batching => Batching,
            recovery => Recovery,
        );
    };
    (@cases $make:expr; $($name:ident => $case:ident,)*) => {
        $(
            #[test]
            fn $name() {
                $crate::run_blocking(|| $make, $crate::Case::$case);
            }
        )*
    };
}

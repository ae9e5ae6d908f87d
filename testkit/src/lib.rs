#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod harness;
pub mod memory;
mod suite;
pub mod support;

pub use harness::{Expect, Fault, Harness, MixedBatch, Probe, Received, Setup, Teardown};
pub use suite::{Case, Outcome, run_case};

/// The core crate this testkit is built on, so a harness needs one dependency.
pub use ankusa_sink_core;

use std::fmt;
use std::io::Write as _;
use std::time::Duration;

/// How soon after its ack a durable sink's hook must be readable through the probe, in
/// the `durability` case: 2 s, from the moment `deliver` returned `Ok` to the moment a
/// probe read that shows the hook returned.
///
/// Measured on the project's own adapters against real brokers on one 2-core machine
/// (worst of 20 hooks, probe reads polled every 5 ms, four runs), the slowest was SNS on
/// moto at 190 ms, Kafka 60 ms, AMQP 13 ms (table in the testkit README); 2 s leaves ten
/// times that for a loaded CI machine while catching a sink that acks before the
/// destination has the hook.
pub const DURABILITY_BOUND: Duration = Duration::from_secs(2);

/// The one list of conformance cases, handed to `$callback!` after `[$($args)*]`.
///
/// Each entry: `test_name => Variant: runner_path, "one-line doc";`. Everything that
/// enumerates cases ([`Case`], `Case::ALL`, `Case::name`, `Case::doc`, [`run_case`]'s
/// dispatch, [`conformance_suite!`]) is generated from it: a new case is one line here plus
/// its module.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_cases {
    ($callback:path; $($args:tt)*) => {
        $callback! { [$($args)*]
            contract => Contract: contract::run,
                "Capabilities answer without panicking; planted secrets appear in no describe, Debug or failure, and describe holds no URL userinfo; no secrets planted is a skip, or a failure when the sink takes credentials.";
            round_trip => RoundTrip: round_trip::run,
                "Varied envelopes all return Ok and read back exactly; a replay of an already-delivered hook arrives as a second copy carrying its replay id; duplicates are counted.";
            inline_boundary => InlineBoundary: inline::run,
                "Exactly inline_max_bytes is inline; one more byte travels as ctx.claim, and is refused without one.";
            classify_missing_destination => ClassifyMissingDestination: classify::missing_destination,
                "A missing destination is config, and check() says config too.";
            classify_refused_credential => ClassifyRefusedCredential: classify::refused_credential,
                "A refused credential is config, and check() says config too.";
            classify_unreachable => ClassifyUnreachable: classify::unreachable,
                "An unreachable destination is transient within the deadline.";
            classify_throttled => ClassifyThrottled: classify::throttled,
                "A throttle is retry-after with 0 < ms <= 1 h.";
            classify_oversized => ClassifyOversized: classify::oversized,
                "A body the destination never takes is permanent, and nothing is delivered.";
            classify_unacknowledged => ClassifyUnacknowledged: classify::unacknowledged,
                "A destination that takes the write but never acknowledges it never gets an Ok: the sink answers a retryable failure within the deadline.";
            concurrency => Concurrency: concurrency::run,
                "200 concurrent deliveries all return Ok and all read back.";
            durability => Durability: durability::run,
                "A durable sink's every Ok is readable within DURABILITY_BOUND of the ack.";
            panic_safety => PanicSafety: panic_safety::run,
                "Odd inputs never make the sink panic; a panic is a failure, not a crash.";
            batching => Batching: batching::run,
                "A batching sink gives each delivery its own result, sends accepted items once and refused ones never, and batches where the probe can tell.";
            recovery => Recovery: recovery::run,
                "Deliveries fail transient while the destination is down and succeed afterwards without rebuilding the sink.";
        }
    };
}

/// Where [`run_all_with`] prints each case's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Output {
    /// One line per case on stderr, straight to the terminal (libtest's capture of
    /// `println!` would hide skips, which must be visible).
    #[default]
    Stderr,
    /// Nothing printed: read the [`Report`].
    Quiet,
}

/// Print one case's outcome, labelled with the harness.
fn report_line(harness: &str, case: Case, outcome: &Outcome) {
    let _ = writeln!(
        std::io::stderr(),
        "ankusa-testkit [{harness}] {case}: {outcome}"
    );
}

/// Run every case, in order, printing one line per case on stderr.
pub async fn run_all<H: Harness>(harness: &H) -> Report {
    run_all_with(harness, Output::Stderr).await
}

/// Run every case, in order, printing per `output`.
pub async fn run_all_with<H: Harness>(harness: &H, output: Output) -> Report {
    let name = harness.name();
    let mut outcomes = Vec::new();
    for case in Case::ALL {
        let outcome = run_case(harness, case).await;
        if output == Output::Stderr {
            report_line(&name, case, &outcome);
        }
        outcomes.push((case, outcome));
    }
    Report {
        harness: name,
        outcomes,
    }
}

/// The outcomes of a whole run.
#[derive(Debug, Clone)]
pub struct Report {
    /// The harness's [`name`](Harness::name).
    pub harness: String,
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
    /// The skipped cases, each with its reason.
    pub fn skips(&self) -> Vec<(Case, &str)> {
        self.outcomes
            .iter()
            .filter(|(_, o)| o.is_skip())
            .map(|(c, o)| (*c, o.text()))
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
            "conformance failures of {}:\n{}",
            self.harness,
            failed.join("\n")
        );
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (case, outcome) in &self.outcomes {
            writeln!(f, "[{}] {case:<30} {outcome}", self.harness)?;
        }
        Ok(())
    }
}

/// Run one case on a fresh multi-threaded runtime, print its outcome, and panic if it
/// failed. What the [`conformance_suite!`] tests call; `make` builds the harness for the
/// case, inside the runtime.
pub fn run_blocking<H: Harness>(make: impl FnOnce(Case) -> H, case: Case) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let (name, outcome) = rt.block_on(async {
        let harness = make(case);
        let outcome = run_case(&harness, case).await;
        (harness.name(), outcome)
    });
    report_line(&name, case, &outcome);
    if let Outcome::Fail(why) = outcome {
        panic!("conformance case {case} of {name} failed: {why}");
    }
}

/// Generate one `#[test]` per conformance case, named after it, so `cargo test
/// conformance::round_trip` filters as usual.
///
/// Two forms:
/// - `conformance_suite!(expr)`: `expr` is evaluated once per test to build the harness.
/// - `conformance_suite!(|case| expr)`: a per-case constructor; `case` is the [`Case`] the
///   test runs. Use it when one case needs a different harness, e.g. an exclusive lock or a
///   private broker for `recovery`.
///
/// Each test runs its case on its own multi-threaded runtime ([`run_blocking`]); the
/// calling crate needs no tokio macros.
///
/// ```ignore
/// mod conformance {
///     ankusa_sink_testkit::conformance_suite!(crate::MyHarness::new());
/// }
/// mod per_case {
///     use ankusa_sink_testkit::Case;
///     ankusa_sink_testkit::conformance_suite!(|case| crate::MyHarness::new(case == Case::Recovery));
/// }
/// ```
#[macro_export]
macro_rules! conformance_suite {
    (|$case:ident| $make:expr) => {
        $crate::__with_cases!($crate::__conformance_tests; |$case| $make);
    };
    ($make:expr) => {
        $crate::__with_cases!($crate::__conformance_tests; |_| $make);
    };
}

/// The tests of [`conformance_suite!`], one per case of [`__with_cases!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ([|$case:pat_param| $make:expr] $($name:ident => $variant:ident : $run:path, $doc:literal;)*) => {
        $(
            #[doc = $doc]
            #[test]
            fn $name() {
                $crate::run_blocking(|$case: $crate::Case| $make, $crate::Case::$variant);
            }
        )*
    };
}

#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod case;
mod harness;
pub mod memory;
mod suite;
pub mod support;

pub use case::Case;
pub use harness::{
    Expect, Fault, Harness, Heard, MixedBatch, Probe, Received, Setup, Teardown, WarmFault,
};
pub use suite::{Outcome, run_case};

/// Re-exported so a harness builds messages with the same wire crate the adapters use.
pub use ankusa_message;
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

/// How many hooks the `volume` case delivers at least: 5,000 (a harness may raise it with
/// [`Harness::volume`]). A sink losing one delivery in 500 loses ten here, while the
/// project's adapters deliver and read back 5,000 against their local brokers in seconds
/// (figures in the testkit README).
pub const VOLUME: usize = 5_000;

/// How many small hooks a `classify_warm_*` case delivers through the sink, each `Ok`,
/// before the harness provokes the fault: enough for a client to have connected, learned
/// its metadata and pipelined (see [`WarmFault`]).
pub const WARM_DELIVERIES: usize = 5;

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
                "Capabilities answer without panicking; planted secrets appear in no describe, Debug or failure, and describe holds no URL userinfo; a fault produced a failure to search (else nothing was checked: a failure); no secrets planted is a skip, or a failure when the sink takes credentials.";
            round_trip => RoundTrip: round_trip::run,
                "Varied envelopes all return Ok and read back exactly; a replay of an already-delivered hook arrives as a second copy carrying its replay id; duplicates are counted.";
            redelivery => Redelivery: redelivery::run,
                "The same hook delivered three times (the first delivery, a plain retry, a replay): every copy read back carries the hook's idempotency key; a sink that declares dedupe keeps one copy per key and replay, within its window or forever.";
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
            classify_warm_missing_destination => ClassifyWarmMissingDestination: classify::warm_missing_destination,
                "After deliveries that succeeded, the same sink meets a destination that went missing: config, and check() never passes.";
            classify_warm_refused_credential => ClassifyWarmRefusedCredential: classify::warm_refused_credential,
                "After deliveries that succeeded, the same sink meets a credential the destination now refuses: config, and check() never passes.";
            classify_warm_unreachable => ClassifyWarmUnreachable: classify::warm_unreachable,
                "After deliveries that succeeded, the same sink meets a destination that went away: transient within the deadline, and check() neither passes nor says reachable.";
            classify_warm_throttled => ClassifyWarmThrottled: classify::warm_throttled,
                "After deliveries that succeeded, the same sink meets a throttle: retry-after with 0 < ms <= 1 h, or throttled.";
            classify_warm_oversized => ClassifyWarmOversized: classify::warm_oversized,
                "After deliveries that succeeded, the same sink meets a body the destination never takes: permanent, and nothing is delivered.";
            classify_warm_unacknowledged => ClassifyWarmUnacknowledged: classify::warm_unacknowledged,
                "After deliveries that succeeded, the destination goes silent on the sink's open connections: never an Ok, a retryable failure within the deadline.";
            concurrency => Concurrency: concurrency::run,
                "200 concurrent deliveries all return Ok and all read back.";
            volume => Volume: volume::run,
                "At least 5,000 deliveries (VOLUME, or Harness::volume) all return Ok and every one reads back exactly: nothing lost; duplicates counted.";
            durability => Durability: durability::run,
                "A durable sink's every Ok is readable within DURABILITY_BOUND of the ack, and still readable after Harness::restart_destination (a not provided skip without it).";
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

/// Run every case, in order, printing per `output` (the verdict last).
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
    let report = Report {
        harness: name,
        outcomes,
    };
    if output == Output::Stderr {
        let _ = writeln!(
            std::io::stderr(),
            "ankusa-testkit [{}]: {}",
            report.harness,
            report.verdict()
        );
    }
    report
}

/// What a whole run says of the sink: see [`Report::verdict`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// No case failed, and every case that [`certifies`](Case::certifies) ran or was an
    /// impossible skip.
    Certified,
    /// No case failed, but these cases that certify were not provided by the harness.
    Passed {
        /// The certifying cases the harness did not provide.
        unprovided: Vec<Case>,
    },
    /// These cases failed.
    Failed {
        /// The failed cases.
        failures: Vec<Case>,
    },
}

impl fmt::Display for Verdict {
    /// `certified`, `passed with N unprovided cases (a, b)`, `FAILED N cases (a, b)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |cases: &[Case]| {
            cases
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Verdict::Certified => f.write_str("certified"),
            Verdict::Passed { unprovided } => write!(
                f,
                "passed with {} unprovided cases ({}): not certified",
                unprovided.len(),
                list(unprovided)
            ),
            Verdict::Failed { failures } => {
                write!(f, "FAILED {} cases ({})", failures.len(), list(failures))
            }
        }
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
    /// The skipped cases of both kinds (impossible and not provided), each with its reason.
    pub fn skips(&self) -> Vec<(Case, &str)> {
        self.outcomes
            .iter()
            .filter(|(_, o)| o.is_skip())
            .map(|(c, o)| (*c, o.text()))
            .collect()
    }
    /// The **not provided** skips (any case), each with its reason.
    pub fn unprovided(&self) -> Vec<(Case, &str)> {
        self.outcomes
            .iter()
            .filter(|(_, o)| o.is_not_provided())
            .map(|(c, o)| (*c, o.text()))
            .collect()
    }
    /// What the run says of the sink: failed when a case failed; else certified when no
    /// case that [`certifies`](Case::certifies) (the fault cases and `recovery`) is a
    /// **not provided** skip; else passed with that many unprovided cases.
    pub fn verdict(&self) -> Verdict {
        let failures = self.failures();
        if !failures.is_empty() {
            return Verdict::Failed { failures };
        }
        let unprovided: Vec<Case> = self
            .outcomes
            .iter()
            .filter(|(c, o)| c.certifies() && o.is_not_provided())
            .map(|(c, _)| *c)
            .collect();
        if unprovided.is_empty() {
            Verdict::Certified
        } else {
            Verdict::Passed { unprovided }
        }
    }
    /// Whether the verdict is [`Verdict::Certified`].
    pub fn is_certified(&self) -> bool {
        self.verdict() == Verdict::Certified
    }
    /// Panic, listing every failure, unless no case failed; otherwise print the verdict on
    /// stderr: `certified`, or `passed with N unprovided cases (...)`.
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
        let _ = writeln!(
            std::io::stderr(),
            "ankusa-testkit [{}]: {}",
            self.harness,
            self.verdict()
        );
    }
    /// Panic unless the verdict is [`Verdict::Certified`]: listing every failure and every
    /// case that certifies the harness did not provide, with its reason.
    pub fn assert_certified(&self) {
        let verdict = self.verdict();
        let wrong: Vec<String> = self
            .outcomes
            .iter()
            .filter(|(c, o)| o.is_fail() || (c.certifies() && o.is_not_provided()))
            .map(|(c, o)| format!("{c}: {o}"))
            .collect();
        assert!(
            verdict == Verdict::Certified,
            "{} is not certified: {verdict}\n{}",
            self.harness,
            wrong.join("\n")
        );
    }
}

impl fmt::Display for Report {
    /// One line per case, then the verdict.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (case, outcome) in &self.outcomes {
            writeln!(f, "[{}] {case:<34} {outcome}", self.harness)?;
        }
        writeln!(f, "[{}] {}", self.harness, self.verdict())
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
/// Either form may start with `broker NAME, ADDR;` (`broker "RabbitMQ", "127.0.0.1:5672";
/// |case| ...`): each test then first asks [`require_broker!`] whether it may use that
/// broker (`ANKUSA_TEST_BROKERS=0` skips it with a `SKIP` line; otherwise a broker that
/// cannot be reached fails it).
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
    (broker $broker:expr, $addr:expr; |$case:ident| $make:expr) => {
        $crate::__with_cases!($crate::__conformance_tests;
            { $crate::require_broker!($broker, $addr); } |$case| $make);
    };
    (broker $broker:expr, $addr:expr; $make:expr) => {
        $crate::__with_cases!($crate::__conformance_tests;
            { $crate::require_broker!($broker, $addr); } |_| $make);
    };
    (|$case:ident| $make:expr) => {
        $crate::__with_cases!($crate::__conformance_tests; {} |$case| $make);
    };
    ($make:expr) => {
        $crate::__with_cases!($crate::__conformance_tests; {} |_| $make);
    };
}

/// The tests of [`conformance_suite!`], one per case of [`__with_cases!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ([$guard:block |$case:pat_param| $make:expr] $($name:ident => $variant:ident : $run:path, $doc:literal;)*) => {
        $(
            #[doc = $doc]
            #[test]
            fn $name() {
                $guard
                $crate::run_blocking(|$case: $crate::Case| $make, $crate::Case::$variant);
            }
        )*
    };
}

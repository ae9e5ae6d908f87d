//! Issue 50's six sinks that lie once they are warm (each passed the whole suite before it
//! provoked faults on warm sinks, delivered 5,000 hooks, captured logs, searched a failure's
//! reason `Debug` and judged `check()`), and the two harness lies: a `contract` that checked
//! no failure, and a declined fault that certified. Each is caught here, by the case named.

use ankusa_message::encode;
use ankusa_sink_core::{
    BoxError, Check, Ctx, Description, Envelope, Failure, Sink, Subject, async_trait,
};
use ankusa_sink_testkit::memory::{MemoryError, MemoryHarness, MemorySink};
use ankusa_sink_testkit::{
    Case, Fault, Harness, Outcome, Output, Setup, Verdict, WarmFault, run_all_with, run_case,
};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lie {
    /// Honest until its first delivery succeeded; from then on checks the message and its
    /// connection, hands the publish to a task and returns `Ok` at once (no ack awaited).
    HonestOnlyWhileConnecting,
    /// Returns `Ok` and sends nothing for one delivery in 500.
    DropsOneIn500,
    /// Logs its token (on another thread) when the broker is unavailable.
    LogsTokenOnConnectionErrors,
    /// Once it has delivered, fails with its token in the text while the broker is down.
    TokenInFailuresAfterConnecting,
    /// Every failure's reason prints the token in its `Debug` (its `Display` is clean).
    TokenInReasonDebug,
    /// `check()` answers `Reachable` whatever the broker says.
    CheckSaysReachable,
}

#[derive(Debug)]
struct Liar {
    inner: MemorySink,
    lie: Lie,
    delivered: AtomicBool,
    count: AtomicU64,
}

/// A reason whose `Display` is clean and whose `Debug` carries the token.
struct LeakyReason {
    text: String,
    token: String,
}

impl fmt::Display for LeakyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for LeakyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LeakyReason({:?}, token: {:?})", self.text, self.token)
    }
}

impl std::error::Error for LeakyReason {}

fn unavailable(f: &Failure) -> bool {
    matches!(
        f.reason().downcast_ref::<MemoryError>(),
        Some(MemoryError::Unavailable)
    )
}

impl Liar {
    fn token(&self) -> String {
        self.inner.token().unwrap_or_default().to_owned()
    }
}

#[async_trait]
impl Sink for Liar {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        match self.lie {
            // Connected, the client checks the message and its connection locally, queues
            // the publish and says Ok; only the broker's ack is never awaited.
            Lie::HonestOnlyWhileConnecting
                if self.delivered.load(Ordering::SeqCst) && !self.inner.broker().is_down() =>
            {
                encode(env, ctx, self.inner.capabilities().inline_max_bytes)?;
                let (sink, env, ctx) = (self.inner.clone(), env.clone(), ctx.clone());
                tokio::spawn(async move { sink.deliver(&env, &ctx).await });
                return Ok(());
            }
            Lie::DropsOneIn500 if self.count.fetch_add(1, Ordering::Relaxed) % 500 == 499 => {
                return Ok(());
            }
            _ => {}
        }
        let res = self.inner.deliver(env, ctx).await;
        if res.is_ok() {
            self.delivered.store(true, Ordering::SeqCst);
        }
        res.map_err(|f| match self.lie {
            Lie::LogsTokenOnConnectionErrors if unavailable(&f) => {
                let token = self.token();
                // Logged from another thread, as a client's connection task would.
                std::thread::scope(|s| {
                    s.spawn(|| {
                        tracing::debug!(target: "liar::conn", %token, "connection failed, retrying")
                    });
                });
                f
            }
            Lie::TokenInFailuresAfterConnecting
                if unavailable(&f) && self.delivered.load(Ordering::SeqCst) =>
            {
                Failure::transient(format!(
                    "broker unavailable; reconnecting with token {}",
                    self.token()
                ))
                .with_may_have_landed(Some(false))
            }
            Lie::TokenInReasonDebug => {
                let landed = f.may_have_landed();
                let reason = LeakyReason {
                    text: f.reason().to_string(),
                    token: self.token(),
                };
                Failure::new(f.class(), reason).with_may_have_landed(landed)
            }
            _ => f,
        })
    }
    fn capabilities(&self) -> ankusa_sink_core::Capabilities {
        self.inner.capabilities()
    }
    fn describe(&self, subject: &Subject) -> Option<Description> {
        self.inner.describe(subject)
    }
    async fn check(&self) -> Result<Check, Failure> {
        if self.lie == Lie::CheckSaysReachable {
            return Ok(Check::Reachable);
        }
        self.inner.check().await
    }
}

/// The memory harness, every sink wrapped in one liar.
struct LiarHarness {
    inner: MemoryHarness,
    lie: Lie,
}

impl LiarHarness {
    fn new(lie: Lie) -> Self {
        LiarHarness {
            inner: MemoryHarness::new(),
            lie,
        }
    }
    fn wrap(&self, inner: MemorySink) -> Liar {
        Liar {
            inner,
            lie: self.lie,
            delivered: AtomicBool::new(false),
            count: AtomicU64::new(0),
        }
    }
}

harness_over_memory!(LiarHarness {
    type Sink = Liar;
    async fn destination(&self, case: Case) -> Result<Setup<Liar>, BoxError> {
        Ok(self
            .inner
            .destination(case)
            .await?
            .map_sink(|s| self.wrap(s)))
    }
    async fn fault(&self, fault: Fault) -> Result<Option<Setup<Liar>>, BoxError> {
        Ok(self
            .inner
            .fault(fault)
            .await?
            .map(|s| s.map_sink(|s| self.wrap(s))))
    }
    async fn warm_fault(&self, fault: Fault) -> Result<Option<WarmFault<Liar>>, BoxError> {
        Ok(self
            .inner
            .warm_fault(fault)
            .await?
            .map(|w| w.map_sink(|s| self.wrap(s))))
    }
    fn deadline(&self) -> Duration {
        // Every honest delivery here answers in milliseconds.
        Duration::from_secs(2)
    }
    fn read_timeout(&self) -> Duration {
        // Every delivery here is synchronous: what is missing after 2 s never arrives.
        Duration::from_secs(2)
    }
});

async fn outcome(lie: Lie, case: Case) -> Outcome {
    run_case(&LiarHarness::new(lie), case).await
}

async fn caught(lie: Lie, case: Case) -> String {
    match outcome(lie, case).await {
        Outcome::Fail(why) => why,
        other => panic!("{lie:?} should fail {case}, got {other:?}"),
    }
}

async fn passes(lie: Lie, case: Case) {
    let got = outcome(lie, case).await;
    assert!(got.is_pass(), "{lie:?} passes {case}: {got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn honest_only_while_connecting_is_caught_on_a_warm_sink() {
    // Cold, it is honest: the stalled broker meets its first delivery.
    passes(Lie::HonestOnlyWhileConnecting, Case::ClassifyUnacknowledged).await;
    let why = caught(
        Lie::HonestOnlyWhileConnecting,
        Case::ClassifyWarmUnacknowledged,
    )
    .await;
    assert!(
        why.contains("after 5 successful deliveries on the same sink, yet the sink returned Ok"),
        "{why}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_one_in_500_is_caught_by_volume() {
    // 200 deliveries do not reach the 500th.
    passes(Lie::DropsOneIn500, Case::Concurrency).await;
    let why = caught(Lie::DropsOneIn500, Case::Volume).await;
    assert!(
        why.starts_with("10 of 5000 delivered hooks (each returned Ok) never reached"),
        "{why}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_in_a_log_line_on_connection_errors_is_caught() {
    let why = caught(Lie::LogsTokenOnConnectionErrors, Case::ClassifyUnreachable).await;
    assert!(
        why.contains(
            "a planted secret appears in a log line (DEBUG liar::conn): \
             message=connection failed, retrying token=<planted secret>"
        ),
        "{why}"
    );
    assert!(!why.contains("planted-token-"), "the report leaks: {why}");
    // The outage of `recovery` and the warm unreachable fault log it too.
    caught(Lie::LogsTokenOnConnectionErrors, Case::Recovery).await;
    caught(
        Lie::LogsTokenOnConnectionErrors,
        Case::ClassifyWarmUnreachable,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_in_failures_only_after_connecting_is_caught() {
    // Never connected, it fails cleanly.
    passes(
        Lie::TokenInFailuresAfterConnecting,
        Case::ClassifyUnreachable,
    )
    .await;
    for case in [Case::ClassifyWarmUnreachable, Case::Recovery] {
        let why = caught(Lie::TokenInFailuresAfterConnecting, case).await;
        assert!(
            why.contains("a planted secret appears in the Display of a delivery's failure"),
            "{case}: {why}"
        );
        assert!(!why.contains("planted-token-"), "the report leaks: {why}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_only_in_the_reasons_debug_is_caught() {
    let why = caught(Lie::TokenInReasonDebug, Case::ClassifyMissingDestination).await;
    assert!(
        why.contains("a planted secret appears in the reason's Debug of a delivery's failure"),
        "{why}"
    );
    // The failure's own Display and Debug are clean: only the reason's Debug shows it.
    let h = LiarHarness::new(Lie::TokenInReasonDebug);
    let setup = h.fault(Fault::MissingDestination).await.unwrap().unwrap();
    let env = Envelope::builder("h", "s", "{}").build().unwrap();
    let f = setup
        .sink
        .deliver(&env, &Ctx::for_envelope(&env))
        .await
        .unwrap_err();
    let token = setup.sink.token();
    for shown in [format!("{f}"), format!("{f:#}"), format!("{f:?}")] {
        assert!(!shown.contains(&token), "{shown}");
    }
    assert!(format!("{:?}", f.reason()).contains(&token));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_answering_reachable_where_nothing_listens_is_caught() {
    for case in [Case::ClassifyUnreachable, Case::ClassifyWarmUnreachable] {
        let why = caught(Lie::CheckSaysReachable, case).await;
        assert!(
            why.contains("check() answered Reachable where nothing listens"),
            "{case}: {why}"
        );
    }
    // The memory harness says its check() tells a missing queue: Reachable is a lie there.
    let why = caught(Lie::CheckSaysReachable, Case::ClassifyMissingDestination).await;
    assert!(why.contains("Harness::check_detects"), "{why}");
}

/// The memory harness with one thing withheld or declared.
struct Partial {
    inner: MemoryHarness,
    /// `fault` and `warm_fault` return `None` for these.
    declined: Vec<Fault>,
    /// `fault_impossible` names these.
    impossible: Vec<Fault>,
    /// `not_provided` names these.
    cases: Vec<Case>,
}

impl Partial {
    fn new(declined: &[Fault], impossible: &[Fault]) -> Self {
        Partial {
            inner: MemoryHarness::new(),
            declined: declined.to_vec(),
            impossible: impossible.to_vec(),
            cases: Vec::new(),
        }
    }
}

harness_over_memory!(Partial {
    type Sink = MemorySink;
    async fn destination(&self, case: Case) -> Result<Setup<MemorySink>, BoxError> {
        self.inner.destination(case).await
    }
    async fn fault(&self, fault: Fault) -> Result<Option<Setup<MemorySink>>, BoxError> {
        if self.declined.contains(&fault) {
            return Ok(None);
        }
        self.inner.fault(fault).await
    }
    async fn warm_fault(&self, fault: Fault) -> Result<Option<WarmFault<MemorySink>>, BoxError> {
        if self.declined.contains(&fault) {
            return Ok(None);
        }
        self.inner.warm_fault(fault).await
    }
    fn fault_impossible(&self, fault: Fault) -> Option<String> {
        self.impossible
            .contains(&fault)
            .then(|| "this broker has no throttle".to_owned())
    }
    fn not_provided(&self, case: Case) -> Option<String> {
        self.cases
            .contains(&case)
            .then(|| "the emulator takes minutes for it".to_owned())
    }
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_fails_when_no_failure_was_checked_for_secrets() {
    let h = Partial::new(
        &[
            Fault::MissingDestination,
            Fault::RefusedCredential,
            Fault::Unreachable,
        ],
        &[],
    );
    match run_case(&h, Case::Contract).await {
        Outcome::Fail(why) => assert!(
            why.starts_with("no fault produced a failure, so no failure was searched"),
            "{why}"
        ),
        other => panic!("a contract that checked no failure passed: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_fault_is_not_provided_and_keeps_the_report_from_certifying() {
    let h = Partial::new(&[Fault::Throttled], &[]);
    let report = run_all_with(&h, Output::Quiet).await;
    report.assert_passed();
    for case in [Case::ClassifyThrottled, Case::ClassifyWarmThrottled] {
        let o = report.outcome(case).unwrap();
        assert!(o.is_not_provided(), "{case}: {o:?}");
        assert!(
            o.to_string()
                .starts_with("SKIP not provided (the harness does not provoke Throttled"),
            "{o}"
        );
    }
    assert_eq!(
        report.verdict(),
        Verdict::Passed {
            unprovided: vec![Case::ClassifyThrottled, Case::ClassifyWarmThrottled]
        }
    );
    assert!(!report.is_certified());
    assert!(
        report.to_string().ends_with(
            "passed with 2 unprovided cases (classify_throttled, classify_warm_throttled): \
             not certified\n"
        ),
        "{report}"
    );
    let refused = std::panic::catch_unwind(|| report.assert_certified())
        .expect_err("assert_certified accepted unprovided cases");
    let text = refused
        .downcast_ref::<String>()
        .map(String::as_str)
        .unwrap_or_default();
    assert!(text.contains("is not certified"), "{text}");
    assert!(
        text.contains("classify_warm_throttled: SKIP not provided"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impossible_fault_is_a_skip_that_still_certifies() {
    let h = Partial::new(&[Fault::Throttled], &[Fault::Throttled]);
    let report = run_all_with(&h, Output::Quiet).await;
    let o = report.outcome(Case::ClassifyWarmThrottled).unwrap();
    assert!(
        matches!(o, Outcome::Skip(why) if why.contains("this broker has no throttle")),
        "{o:?}"
    );
    report.assert_certified();
    assert!(report.unprovided().is_empty(), "{report}");
}

#[tokio::test]
async fn a_case_whose_logs_cannot_be_heard_fails() {
    // A thread default of someone else's takes the case's events (current-thread runtime:
    // the whole case runs on this thread).
    let h = MemoryHarness::new();
    let _theirs = tracing::subscriber::set_default(tracing_subscriber::registry());
    let o = run_case(&h, Case::PanicSafety).await;
    assert!(
        matches!(&o, Outcome::Fail(why) if why.contains("logs could not be searched")),
        "{o:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_case_the_harness_declines_is_not_provided_without_a_destination() {
    let mut h = Partial::new(&[], &[]);
    h.cases = vec![Case::Volume, Case::ClassifyWarmThrottled];
    let report = run_all_with(&h, Output::Quiet).await;
    report.assert_passed();
    for case in [Case::Volume, Case::ClassifyWarmThrottled] {
        let o = report.outcome(case).unwrap();
        assert_eq!(
            o,
            &Outcome::NotProvided(
                "the harness does not run this case: the emulator takes minutes for it".into()
            ),
            "{case}"
        );
    }
    // Volume does not certify; the warm throttle does.
    assert_eq!(
        report.verdict(),
        Verdict::Passed {
            unprovided: vec![Case::ClassifyWarmThrottled]
        }
    );
    // Every queue the other cases made was torn down.
    assert!(h.inner.broker().queue_names().is_empty());
}

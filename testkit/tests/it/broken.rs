//! Deliberately broken sinks and harnesses: each must be caught by the case named for its
//! defect.

use ankusa_message::encode;
use ankusa_sink_core::{
    BoxError, Class, Ctx, Description, Envelope, Failure, Payload, Sink, Subject, async_trait,
};
use ankusa_sink_testkit::memory::{MemoryError, MemoryHarness, MemorySink, Publish};
use ankusa_sink_testkit::{
    Case, Fault, Harness, MixedBatch, Outcome, Probe, Received, Setup, WarmFault, run_all_with,
    run_case,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Defect {
    /// Returns Ok and does nothing.
    AcksWithoutStoring,
    /// Hands the publish to a task and returns Ok at once.
    FireAndForget,
    /// Returns Ok, stores 3 s later.
    WriteBehind,
    /// Waits for the ack, but calls its own ack timeout a success.
    OkOnAckTimeout,
    /// Waits for the ack forever (no ack timeout of its own).
    WaitsForeverForTheAck,
    /// Uses the plain hook id as the broker's dedupe id: replays are swallowed.
    DedupeByHookId,
    /// Claims `batched()` but sends every delivery on its own.
    FakeBatching,
    /// Buffers while the broker is down and says Ok.
    OkWhileDown,
    LeaksSecretInDescribe,
    MissingIsTransient,
    DropsEveryTenth,
    ResendsAcceptedBatchItems,
    Panics,
    InlinesOversizedBody,
    /// Says a message may have landed when nothing was sent.
    ClaimsLandedWhenNothingWasSent,
    /// Says nothing landed when the broker took the write and never acked it.
    ClaimsNothingLandedOnAckTimeout,
    /// Never says whether a failed message may have landed.
    SaysNothingOfLanding,
    /// Its capability manifest contradicts itself (durable, yet `Ok` means only sent).
    ManifestDisagrees,
    /// Its manifest says one delivery per request; it batches more.
    BatchesPastItsLimit,
}

#[derive(Debug)]
pub(crate) struct Broken {
    inner: MemorySink,
    defect: Defect,
    count: AtomicU64,
}

impl Broken {
    /// Publish `env` as the inner sink would, but with this dedupe id.
    async fn publish_with_dedupe_id(
        &self,
        env: &Envelope,
        ctx: &Ctx,
        dedupe_id: String,
    ) -> Result<(), Failure> {
        let msg = Publish {
            bytes: encode(env, ctx, self.inner.capabilities().inline_max_bytes)?,
            dedupe_id: Some(dedupe_id),
        };
        self.inner
            .broker()
            .publish(self.inner.queue(), self.inner.token(), msg)
            .await
            .map_err(Failure::from)
    }
}

#[async_trait]
impl Sink for Broken {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        match self.defect {
            Defect::AcksWithoutStoring => Ok(()),
            Defect::FireAndForget => {
                let (sink, env, ctx) = (self.inner.clone(), env.clone(), ctx.clone());
                tokio::spawn(async move { sink.deliver(&env, &ctx).await });
                Ok(())
            }
            Defect::WriteBehind => {
                let (sink, env, ctx) = (self.inner.clone(), env.clone(), ctx.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    sink.deliver(&env, &ctx).await
                });
                Ok(())
            }
            Defect::OkOnAckTimeout => match self.inner.deliver(env, ctx).await {
                Err(f)
                    if matches!(
                        f.reason().downcast_ref::<MemoryError>(),
                        Some(MemoryError::AckTimeout { .. })
                    ) =>
                {
                    Ok(())
                }
                other => other,
            },
            Defect::WaitsForeverForTheAck => {
                let patient = self
                    .inner
                    .clone()
                    .with_ack_timeout(Duration::from_secs(3600));
                patient.deliver(env, ctx).await
            }
            Defect::DedupeByHookId => {
                self.publish_with_dedupe_id(env, ctx, env.id().to_owned())
                    .await
            }
            Defect::FakeBatching => {
                self.inner
                    .deliver(env, &ctx.clone().with_batch(false))
                    .await
            }
            Defect::OkWhileDown => {
                if self.inner.broker().is_down() {
                    return Ok(());
                }
                self.inner.deliver(env, ctx).await
            }
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
                    // A retry with a new dedupe id, as a sink that re-sends the whole batch.
                    self.publish_with_dedupe_id(env, ctx, format!("{}:again", env.id()))
                        .await?;
                }
                Ok(())
            }
            Defect::Panics => panic!("broken sink panics"),
            Defect::InlinesOversizedBody => {
                let msg = Publish {
                    bytes: encode(env, ctx, None)?,
                    dedupe_id: None,
                };
                self.inner
                    .broker()
                    .publish(self.inner.queue(), self.inner.token(), msg)
                    .await
                    .map_err(Failure::from)
            }
            Defect::LeaksSecretInDescribe => self.inner.deliver(env, ctx).await,
            Defect::ClaimsLandedWhenNothingWasSent => {
                self.inner
                    .deliver(env, ctx)
                    .await
                    .map_err(|f| match f.may_have_landed() {
                        Some(false) => f.with_may_have_landed(Some(true)),
                        _ => f,
                    })
            }
            Defect::ClaimsNothingLandedOnAckTimeout => {
                self.inner
                    .deliver(env, ctx)
                    .await
                    .map_err(|f| match f.may_have_landed() {
                        Some(true) => f.with_may_have_landed(Some(false)),
                        _ => f,
                    })
            }
            Defect::ManifestDisagrees | Defect::BatchesPastItsLimit => {
                self.inner.deliver(env, ctx).await
            }
            Defect::SaysNothingOfLanding => self
                .inner
                .deliver(env, ctx)
                .await
                .map_err(|f| f.with_may_have_landed(None)),
        }
    }
    fn capabilities(&self) -> ankusa_sink_core::Capabilities {
        if self.defect == Defect::ManifestDisagrees {
            // Durable, yet an Ok is only "sent": dispatch cannot act on both.
            return ankusa_sink_core::Capabilities::new(
                true,
                self.inner.capabilities().inline_max_bytes,
            )
            .with_ok_means(ankusa_sink_core::OkMeans::Sent);
        }
        if matches!(
            self.defect,
            Defect::ResendsAcceptedBatchItems | Defect::FakeBatching
        ) {
            return self.inner.capabilities().with_batch(None);
        }
        if self.defect == Defect::BatchesPastItsLimit {
            return self
                .inner
                .capabilities()
                .with_batch(Some(ankusa_sink_core::BatchLimits {
                    max_messages: 1,
                    max_bytes: 1 << 20,
                    linger_ms: 0,
                }));
        }
        self.inner.capabilities()
    }
    fn describe(&self, subject: &Subject) -> Option<Description> {
        if self.defect == Defect::LeaksSecretInDescribe {
            let mut d = Description::new("memory", Payload::Message);
            d.host = Some(format!(
                "memory://user:{}@localhost",
                self.inner.token().unwrap_or_default()
            ));
            return Some(d);
        }
        self.inner.describe(subject)
    }
}

pub(crate) struct BrokenHarness {
    pub(crate) inner: MemoryHarness,
    defect: Defect,
}

impl BrokenHarness {
    pub(crate) fn new(defect: Defect) -> Self {
        BrokenHarness {
            inner: MemoryHarness::new(),
            defect,
        }
    }
    fn wrap(&self, s: Setup<MemorySink>) -> Setup<Broken> {
        s.map_sink(|inner| Broken {
            inner,
            defect: self.defect,
            count: AtomicU64::new(0),
        })
    }
}

#[async_trait]
impl Harness for BrokenHarness {
    type Sink = Broken;
    async fn destination(&self, case: Case) -> Result<Setup<Broken>, BoxError> {
        Ok(self.wrap(self.inner.destination(case).await?))
    }
    async fn fault(&self, fault: Fault) -> Result<Option<Setup<Broken>>, BoxError> {
        Ok(self.inner.fault(fault).await?.map(|s| self.wrap(s)))
    }
    async fn warm_fault(&self, fault: Fault) -> Result<Option<WarmFault<Broken>>, BoxError> {
        Ok(self.inner.warm_fault(fault).await?.map(|w| {
            let (defect, setup) = (self.defect, w);
            setup.map_sink(|inner| Broken {
                inner,
                defect,
                count: AtomicU64::new(0),
            })
        }))
    }
    fn secrets(&self) -> Vec<String> {
        self.inner.secrets()
    }
    fn can_restart(&self) -> bool {
        true
    }
    fn reports_landing(&self) -> bool {
        self.inner.reports_landing()
    }
    fn deadline(&self) -> Duration {
        // Every honest delivery here answers in milliseconds.
        Duration::from_secs(2)
    }
    fn read_timeout(&self) -> Duration {
        // Every delivery here is synchronous: what is missing after 2 s never arrives.
        Duration::from_secs(2)
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
    let why = caught(Defect::AcksWithoutStoring, Case::ClassifyUnacknowledged).await;
    assert!(why.contains("acked a hook nobody stored"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fire_and_forget_is_caught_by_the_unacknowledged_destination() {
    // Against a broker that stores at once, fire and forget looks fine...
    let h = BrokenHarness::new(Defect::FireAndForget);
    assert!(run_case(&h, Case::RoundTrip).await.is_pass());
    // ...until the destination never acknowledges.
    let why = caught(Defect::FireAndForget, Case::ClassifyUnacknowledged).await;
    assert!(why.contains("returned Ok"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ok_on_its_own_ack_timeout_is_caught() {
    let why = caught(Defect::OkOnAckTimeout, Case::ClassifyUnacknowledged).await;
    assert!(why.contains("acked a hook nobody stored"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_forever_for_an_ack_is_caught() {
    let why = caught(Defect::WaitsForeverForTheAck, Case::ClassifyUnacknowledged).await;
    assert!(why.contains("past the"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_behind_is_caught_by_the_durability_bound() {
    let why = caught(Defect::WriteBehind, Case::Durability).await;
    assert!(why.contains("not readable within 2s of the ack"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_swallowed_by_dedupe_are_caught() {
    let why = caught(Defect::DedupeByHookId, Case::RoundTrip).await;
    assert!(why.contains("none with replay id"), "{why}");
    assert!(why.contains("holds 1 copies"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_batching_is_caught() {
    let why = caught(Defect::FakeBatching, Case::Batching).await;
    assert!(why.contains("requests of one hook each"), "{why}");
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
    // Warm, transient answers are taken for the cut connection only for a while.
    let why = caught(
        Defect::MissingIsTransient,
        Case::ClassifyWarmMissingDestination,
    )
    .await;
    assert!(
        why.contains("must be config, got transient") && why.contains("after 5 successful"),
        "{why}"
    );
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
    let report = run_all_with(
        &BrokenHarness::new(Defect::Panics),
        ankusa_sink_testkit::Output::Quiet,
    )
    .await;
    assert_eq!(report.outcomes.len(), Case::ALL.len());
    assert!(report.failures().contains(&Case::RoundTrip));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inlining_an_oversized_body_is_caught() {
    let why = caught(Defect::InlinesOversizedBody, Case::InlineBoundary).await;
    assert!(why.contains("without ctx.claim returned Ok"), "{why}");
}

/// On `#[tokio::test]`'s default current-thread runtime: the case fails midway (Ok while
/// down), the destination is started again, and nothing panics.
#[tokio::test]
async fn recovery_failing_midway_on_a_current_thread_runtime_restarts_without_a_panic() {
    let h = BrokenHarness::new(Defect::OkWhileDown);
    let outcome = run_case(&h, Case::Recovery).await;
    match &outcome {
        Outcome::Fail(why) => assert!(why.contains("was down returned Ok"), "{why}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(
        !h.inner.broker().is_down(),
        "the broker was not started again"
    );
    // The honest sink passes the same case on the same runtime.
    let honest = run_case(&MemoryHarness::new(), Case::Recovery).await;
    assert!(honest.is_pass(), "{honest:?}");
}

/// A harness with one defect of its own around the honest memory harness.
struct OddHarness {
    inner: MemoryHarness,
    odd: Odd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Odd {
    /// Plants no secret although the sink takes a token.
    NoSecrets,
    /// Plants no secret, and says the sink takes no credentials.
    NoCredentials,
    /// A probe that never answers.
    HungProbe,
    /// An oversized body over the sink's inline threshold.
    OversizedOverInline,
    /// A teardown that fails.
    FailingTeardown,
    /// `destination()` panics.
    PanickingDestination,
    /// `stop()` panics after stopping, `start()` works.
    PanickingStop,
}

struct HungProbe;

#[async_trait]
impl Probe for HungProbe {
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        std::future::pending().await
    }
}

#[async_trait]
impl Harness for OddHarness {
    type Sink = MemorySink;
    async fn destination(&self, case: Case) -> Result<Setup<MemorySink>, BoxError> {
        let setup = self.inner.destination(case).await?;
        Ok(match self.odd {
            Odd::HungProbe => Setup::new(setup.sink).with_probe(HungProbe),
            Odd::FailingTeardown => setup
                .with_teardown(|| async { Err::<(), BoxError>("the queue is still there".into()) }),
            Odd::PanickingDestination => panic!("destination() panics"),
            _ => setup,
        })
    }
    async fn fault(&self, fault: Fault) -> Result<Option<Setup<MemorySink>>, BoxError> {
        let setup = self.inner.fault(fault).await?;
        Ok(match (self.odd, fault) {
            (Odd::OversizedOverInline, Fault::Oversized) => setup.map(|s| {
                let size = s.sink.capabilities().inline_max_bytes.unwrap().get() + 1;
                s.with_body_size(size)
            }),
            _ => setup,
        })
    }
    async fn mixed_batch(&self) -> Result<Option<MixedBatch<MemorySink>>, BoxError> {
        self.inner.mixed_batch().await
    }
    fn secrets(&self) -> Vec<String> {
        match self.odd {
            Odd::NoSecrets | Odd::NoCredentials => Vec::new(),
            _ => self.inner.secrets(),
        }
    }
    fn takes_credentials(&self) -> bool {
        self.odd != Odd::NoCredentials
    }
    fn probe_timeout(&self) -> Duration {
        Duration::from_millis(300)
    }
    fn can_restart(&self) -> bool {
        true
    }
    async fn stop(&self) -> Result<(), BoxError> {
        self.inner.stop().await?;
        if self.odd == Odd::PanickingStop {
            panic!("stop() panics");
        }
        Ok(())
    }
    async fn start(&self) -> Result<(), BoxError> {
        self.inner.start().await
    }
}

async fn odd(odd: Odd, case: Case) -> Outcome {
    let h = OddHarness {
        inner: MemoryHarness::new(),
        odd,
    };
    run_case(&h, case).await
}

#[tokio::test]
async fn no_secrets_planted_fails_when_the_sink_takes_credentials() {
    let o = odd(Odd::NoSecrets, Case::Contract).await;
    assert!(
        matches!(&o, Outcome::Fail(why) if why.contains("plants no secrets")),
        "{o:?}"
    );
}

#[tokio::test]
async fn no_secrets_planted_is_a_skip_with_its_reason_when_there_are_none() {
    let o = odd(Odd::NoCredentials, Case::Contract).await;
    assert!(
        matches!(&o, Outcome::Skip(why) if why.contains("no secret is planted")),
        "{o:?}"
    );
}

#[tokio::test]
async fn a_hung_probe_fails_the_case_with_its_reason() {
    for case in [Case::RoundTrip, Case::Durability, Case::Concurrency] {
        let o = odd(Odd::HungProbe, case).await;
        assert!(
            matches!(&o, Outcome::Fail(why) if why.contains("the probe did not answer within 300ms")),
            "{case}: {o:?}"
        );
    }
}

#[tokio::test]
async fn an_oversized_body_over_the_inline_threshold_is_explained() {
    let o = odd(Odd::OversizedOverInline, Case::ClassifyOversized).await;
    assert!(
        matches!(&o, Outcome::Fail(why) if why.contains("is over the sink's inline_max_bytes")),
        "{o:?}"
    );
}

#[tokio::test]
async fn a_failing_teardown_fails_the_case() {
    let o = odd(Odd::FailingTeardown, Case::RoundTrip).await;
    assert!(
        matches!(&o, Outcome::Fail(why) if why.contains("a teardown failed: the queue is still there")),
        "{o:?}"
    );
}

#[tokio::test]
async fn a_panicking_harness_is_a_failure_not_a_crash() {
    let o = odd(Odd::PanickingDestination, Case::Concurrency).await;
    assert!(
        matches!(&o, Outcome::Fail(why) if why.contains("destination() panics")),
        "{o:?}"
    );
}

#[tokio::test]
async fn a_stop_that_panics_is_followed_by_a_start() {
    let h = OddHarness {
        inner: MemoryHarness::new(),
        odd: Odd::PanickingStop,
    };
    let o = run_case(&h, Case::Recovery).await;
    assert!(
        matches!(&o, Outcome::Fail(why) if why.contains("stop() panicked")),
        "{o:?}"
    );
    assert!(!h.inner.broker().is_down());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_landing_claims_are_caught() {
    let why = caught(
        Defect::ClaimsLandedWhenNothingWasSent,
        Case::ClassifyUnreachable,
    )
    .await;
    assert!(why.contains("may_have_landed is Some(true)"), "{why}");
    caught(
        Defect::ClaimsLandedWhenNothingWasSent,
        Case::ClassifyOversized,
    )
    .await;
    let why = caught(
        Defect::ClaimsNothingLandedOnAckTimeout,
        Case::ClassifyUnacknowledged,
    )
    .await;
    assert!(why.contains("may_have_landed is Some(false)"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silence_on_landing_is_caught_only_where_the_harness_asks() {
    // The memory harness says its sink reports landing: an unknown is a failure there...
    for case in [Case::ClassifyUnreachable, Case::ClassifyUnacknowledged] {
        let why = caught(Defect::SaysNothingOfLanding, case).await;
        assert!(why.contains("Harness::reports_landing"), "{why}");
    }
    // ...and a harness that does not ask accepts it (an outside sink may not know).
    struct Lenient(BrokenHarness);
    #[async_trait]
    impl Harness for Lenient {
        type Sink = Broken;
        async fn destination(&self, case: Case) -> Result<Setup<Broken>, BoxError> {
            self.0.destination(case).await
        }
        async fn fault(&self, fault: Fault) -> Result<Option<Setup<Broken>>, BoxError> {
            self.0.fault(fault).await
        }
        fn deadline(&self) -> Duration {
            self.0.deadline()
        }
    }
    let lenient = Lenient(BrokenHarness::new(Defect::SaysNothingOfLanding));
    for case in [Case::ClassifyUnreachable, Case::ClassifyUnacknowledged] {
        let got = run_case(&lenient, case).await;
        assert!(got.is_pass(), "{case}: {got:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_that_contradicts_the_sink_is_caught() {
    let why = caught(Defect::ManifestDisagrees, Case::Contract).await;
    assert!(why.contains("capabilities() contradicts itself"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_past_the_stated_limit_are_caught() {
    let h = BrokenHarness {
        inner: MemoryHarness::new().batched(),
        defect: Defect::BatchesPastItsLimit,
    };
    let why = match run_case(&h, Case::Batching).await {
        Outcome::Fail(why) => why,
        other => panic!("a batch past the stated limit passed: {other:?}"),
    };
    assert!(
        why.contains("over the sink's own batch.max_messages"),
        "{why}"
    );
}

//! The conformance cases: one module per case (or family), the shared helpers in
//! [`util`], and what every case runs through in [`Cx`].

mod batching;
mod classify;
mod concurrency;
mod contract;
mod durability;
mod inline;
mod panic_safety;
mod recovery;
mod redelivery;
mod round_trip;
mod util;
mod volume;

use crate::case::Case;
use crate::harness::{Fault, Harness, MixedBatch, Probe, Received, Setup, Teardown, WarmFault};
use crate::support::SecretScan;
use ankusa_sink_core::{Check, Ctx, Envelope, Failure, Sink, safe_deliver};
use futures_util::FutureExt as _;
use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// `run_case`'s dispatch, from the one case list in
/// [`__with_cases!`](crate::__with_cases) (the [`Case`] enum itself is generated in
/// `case.rs`, a leaf the harness uses too).
macro_rules! define_dispatch {
    ([] $($name:ident => $case:ident : $run:path, $doc:literal;)*) => {
        async fn dispatch<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
            match cx.case {
                $(Case::$case => $run(cx).await,)*
            }
        }
    };
}

crate::__with_cases!(define_dispatch;);

/// What a case found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every check held; the text says what was checked.
    Pass(String),
    /// An **impossible** skip: the case cannot apply to this sink (a capability it does not
    /// declare: not durable, no batching, no inline threshold, no credentials) or the
    /// harness says the protocol has no such fault
    /// ([`Harness::fault_impossible`](crate::Harness::fault_impossible),
    /// [`Harness::restart_impossible`](crate::Harness::restart_impossible)); the text says
    /// why.
    Skip(String),
    /// A **not provided** skip: the harness did not give the case what it needs (a fault it
    /// does not provoke, a restart it does not do, a probe it does not have). Among the
    /// cases that [`certify`](Case::certifies) it keeps the report from saying
    /// "certified".
    NotProvided(String),
    /// A check failed; the text says which and why.
    Fail(String),
}

impl Outcome {
    /// Whether this is a pass.
    pub fn is_pass(&self) -> bool {
        matches!(self, Outcome::Pass(_))
    }
    /// Whether this is a failure.
    pub fn is_fail(&self) -> bool {
        matches!(self, Outcome::Fail(_))
    }
    /// Whether this is a skip of either kind (impossible or not provided).
    pub fn is_skip(&self) -> bool {
        matches!(self, Outcome::Skip(_) | Outcome::NotProvided(_))
    }
    /// Whether this is a **not provided** skip.
    pub fn is_not_provided(&self) -> bool {
        matches!(self, Outcome::NotProvided(_))
    }
    /// The text: what passed, why it skipped, or why it failed.
    pub fn text(&self) -> &str {
        match self {
            Outcome::Pass(s) | Outcome::Skip(s) | Outcome::NotProvided(s) | Outcome::Fail(s) => s,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Pass(s) => write!(f, "pass ({s})"),
            Outcome::Skip(s) => write!(f, "SKIP impossible ({s})"),
            Outcome::NotProvided(s) => write!(f, "SKIP not provided ({s})"),
            Outcome::Fail(s) => write!(f, "FAIL ({s})"),
        }
    }
}

/// A case's own result: `Err` is a failure with its reason.
type CaseResult = Result<Outcome, String>;

/// Fail the case with the formatted reason unless the condition holds.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}
pub(crate) use ensure;

/// Run one case against the harness.
///
/// # Behavior
/// - Never panics and never hangs: a panic in the case (the harness, a probe) is a failure
///   with the panic's text; every delivery, probe call and harness call is time-limited.
/// - After the case, every [`Setup::with_teardown`] of every setup the case was given is
///   awaited, whatever the case found; a teardown's error fails the case.
/// - Every failure a delivery or `check()` returns is searched for the planted
///   [`secrets`](Harness::secrets) (its `Display`, alternate `Display`, `Debug`, the
///   reason's `Debug` and every source's `Display` and `Debug`), and so is every log line
///   and span of every thread at every level while the case runs, through the testkit's
///   global subscriber ([`support::install_global`](crate::support::install_global)). A
///   secret found fails the case, whatever else it found; so does a capture that cannot
///   hear the case's thread when secrets are planted.
/// - A case the harness declines ([`Harness::not_provided`]) is a not provided skip with
///   its reason; nothing else of the harness is called for it.
/// - Needs no particular runtime: it works on `#[tokio::test]`'s current-thread runtime
///   (with the time driver, which `#[tokio::test]` enables).
pub async fn run_case<H: Harness>(harness: &H, case: Case) -> Outcome {
    let secrets: Vec<String> = harness
        .secrets()
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
    let (scan, listening) = SecretScan::start(secrets.clone());
    let mut cx = Cx {
        h: harness,
        case,
        teardowns: Vec::new(),
        secrets,
        leaks: Mutex::new(Vec::new()),
        inspected: AtomicUsize::new(0),
    };
    let declined = AssertUnwindSafe(async { harness.not_provided(case) })
        .catch_unwind()
        .await;
    let run = async {
        match declined {
            Ok(Some(why)) => Ok(Outcome::NotProvided(format!(
                "the harness does not run this case: {why}"
            ))),
            Ok(None) => dispatch(&mut cx).await,
            Err(payload) => Err(format!(
                "the harness's not_provided() panicked: {}",
                util::panic_text(&*payload)
            )),
        }
    };
    let found = match AssertUnwindSafe(run).catch_unwind().await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(why)) => Outcome::Fail(why),
        Err(payload) => Outcome::Fail(format!(
            "the case panicked (in the harness or its probe): {}",
            util::panic_text(&*payload)
        )),
    };
    let teardowns = std::mem::take(&mut cx.teardowns);
    let mut errors = Vec::new();
    for teardown in teardowns {
        // Called inside the caught future: a teardown that panics when called is caught too.
        let done = AssertUnwindSafe(async { cx.limit("a teardown", teardown()).await })
            .catch_unwind()
            .await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(e),
            Err(payload) => errors.push(format!(
                "a teardown panicked: {}",
                util::panic_text(&*payload)
            )),
        }
    }
    drop(listening);
    if !cx.secrets.is_empty() && !scan.hears() {
        errors.push(
            "the case's logs could not be searched for the planted secrets: a tracing \
             subscriber other than the testkit's took this thread's events (a global \
             subscriber without ankusa_sink_testkit::support::global_layer(), or a thread \
             default set around the case)"
                .to_owned(),
        );
    }
    errors.extend(cx.leaks());
    errors.extend(scan.leaks());
    if errors.is_empty() {
        return found;
    }
    let torn = errors.join("; ");
    match found {
        Outcome::Fail(why) => Outcome::Fail(format!("{why}; {torn}")),
        Outcome::Pass(_) | Outcome::Skip(_) | Outcome::NotProvided(_) => Outcome::Fail(torn),
    }
}

/// What a case runs through: the harness, every call time-limited, every setup's teardown
/// collected for [`run_case`] to await, every failure searched for the planted secrets.
pub(crate) struct Cx<'h, H: Harness> {
    pub(crate) h: &'h H,
    pub(crate) case: Case,
    teardowns: Vec<Teardown>,
    /// The harness's planted secrets, none empty.
    pub(crate) secrets: Vec<String>,
    /// Where a failure showed a secret, without the secret.
    leaks: Mutex<Vec<String>>,
    /// Failures searched so far.
    inspected: AtomicUsize,
}

impl<H: Harness> Cx<'_, H> {
    /// `fut` within the harness timeout; an error or the timeout is the case's failure.
    async fn limit<T, E: fmt::Display>(
        &self,
        what: &str,
        fut: impl Future<Output = Result<T, E>>,
    ) -> Result<T, String> {
        let limit = self.h.harness_timeout();
        match tokio::time::timeout(limit, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(format!("{what} failed: {e}")),
            Err(_) => Err(format!("{what} did not finish within {limit:?}")),
        }
    }

    fn keep(&mut self, setup: &mut Setup<H::Sink>) {
        if let Some(t) = setup.take_teardown() {
            self.teardowns.push(t);
        }
    }

    /// A fresh destination for this case.
    pub(crate) async fn destination(&mut self) -> Result<Setup<H::Sink>, String> {
        let case = self.case;
        let mut setup = self
            .limit("the harness's destination()", self.h.destination(case))
            .await?;
        self.keep(&mut setup);
        Ok(setup)
    }

    /// The harness's setup for `fault`, if it can provoke it.
    pub(crate) async fn fault(&mut self, fault: Fault) -> Result<Option<Setup<H::Sink>>, String> {
        let what = format!("the harness's fault({fault:?})");
        let mut setup = self.limit(&what, self.h.fault(fault)).await?;
        if let Some(s) = setup.as_mut() {
            self.keep(s);
        }
        Ok(setup)
    }

    /// The harness's warm fault, if it provokes `fault` on a warm sink.
    pub(crate) async fn warm_fault(
        &mut self,
        fault: Fault,
    ) -> Result<Option<WarmFault<H::Sink>>, String> {
        let what = format!("the harness's warm_fault({fault:?})");
        let mut warm = self.limit(&what, self.h.warm_fault(fault)).await?;
        if let Some(w) = warm.as_mut() {
            self.keep(&mut w.setup);
        }
        Ok(warm)
    }

    /// The harness's mixed batch, if it has one.
    pub(crate) async fn mixed_batch(&mut self) -> Result<Option<MixedBatch<H::Sink>>, String> {
        let mut mixed = self
            .limit("the harness's mixed_batch()", self.h.mixed_batch())
            .await?;
        if let Some(m) = mixed.as_mut() {
            self.keep(&mut m.setup);
        }
        Ok(mixed)
    }

    /// `restart_destination()` within the harness timeout, a panic included.
    pub(crate) async fn restart_destination(&self) -> Result<(), String> {
        AssertUnwindSafe(self.limit(
            "the harness's restart_destination()",
            self.h.restart_destination(),
        ))
        .catch_unwind()
        .await
        .unwrap_or_else(|p| {
            Err(format!(
                "the harness's restart_destination() panicked: {}",
                util::panic_text(&*p)
            ))
        })
    }

    /// `start()` within the harness timeout, a panic included.
    pub(crate) async fn start(&self) -> Result<(), String> {
        AssertUnwindSafe(self.limit("the harness's start()", self.h.start()))
            .catch_unwind()
            .await
            .unwrap_or_else(|p| {
                Err(format!(
                    "the harness's start() panicked: {}",
                    util::panic_text(&*p)
                ))
            })
    }

    /// One delivery through `safe_deliver` with the harness's deadline; a failure is
    /// searched for the planted secrets.
    pub(crate) async fn deliver<S: Sink + ?Sized>(
        &self,
        sink: &S,
        env: &Envelope,
        ctx: &Ctx,
    ) -> Result<(), Failure> {
        let res = safe_deliver(sink, env, ctx, Some(self.h.deadline())).await;
        if let Err(f) = &res {
            self.inspect("a delivery's failure", f);
        }
        res
    }

    /// `sink.check()` within the deadline, a panic caught; a failure is searched for the
    /// planted secrets.
    pub(crate) async fn check<S: Sink + ?Sized>(
        &self,
        sink: &S,
    ) -> Result<Result<Check, Failure>, String> {
        let deadline = self.h.deadline();
        let res = AssertUnwindSafe(tokio::time::timeout(deadline, sink.check()))
            .catch_unwind()
            .await
            .map_err(|p| format!("check() panicked: {}", util::panic_text(&*p)))?
            .map_err(|_| format!("check() did not answer within the {deadline:?} deadline"))?;
        if let Err(f) = &res {
            self.inspect("check()'s failure", f);
        }
        Ok(res)
    }

    /// Search every text of `f` for the planted secrets, remembering where one shows.
    fn inspect(&self, whose: &str, f: &Failure) {
        self.inspected.fetch_add(1, Ordering::Relaxed);
        if self.secrets.is_empty() {
            return;
        }
        let found = util::failure_texts(f).into_iter().find_map(|(what, text)| {
            self.secrets
                .iter()
                .any(|s| text.contains(s.as_str()))
                .then_some(what)
        });
        if let Some(what) = found {
            let mut leaks = self.leaks.lock().unwrap_or_else(|e| e.into_inner());
            if leaks.len() < 10 {
                leaks.push(format!(
                    "a planted secret appears in {what} of {whose} (class {})",
                    f.class()
                ));
            }
        }
    }

    /// How many failures were searched for the planted secrets so far.
    pub(crate) fn inspected(&self) -> usize {
        self.inspected.load(Ordering::Relaxed)
    }

    fn leaks(&self) -> Vec<String> {
        self.leaks.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// One probe call within the probe timeout.
    pub(crate) async fn read(&self, probe: &dyn Probe) -> Result<Vec<Received>, String> {
        let limit = self.h.probe_timeout();
        match tokio::time::timeout(limit, probe.received()).await {
            Ok(Ok(got)) => Ok(got),
            Ok(Err(e)) => Err(format!("the probe failed: {e}")),
            Err(_) => Err(format!(
                "the probe did not answer within {limit:?} (Harness::probe_timeout)"
            )),
        }
    }

    /// Wait (up to the read timeout) until the probe shows every id in `want`; returns
    /// everything received.
    pub(crate) async fn read_until(
        &self,
        probe: &dyn Probe,
        want: &[&str],
    ) -> Result<Vec<Received>, String> {
        let limit = self.h.read_timeout();
        self.read_until_ok(probe, |got| {
            let seen: HashSet<&str> = got.iter().map(|r| r.id.as_str()).collect();
            let missing: Vec<&str> = want
                .iter()
                .copied()
                .filter(|id| !seen.contains(id))
                .collect();
            match missing.first() {
                None => Ok(()),
                Some(first) => Err(format!(
                    "{} of {} delivered hooks (each returned Ok) never reached the destination \
                     within {limit:?}; first missing: {first}",
                    missing.len(),
                    want.len(),
                )),
            }
        })
        .await
    }

    /// Read until `done` accepts what arrived (returns it), or fail with `done`'s last
    /// reason once the read timeout has passed.
    pub(crate) async fn read_until_ok(
        &self,
        probe: &dyn Probe,
        done: impl Fn(&[Received]) -> Result<(), String>,
    ) -> Result<Vec<Received>, String> {
        let deadline = tokio::time::Instant::now() + self.h.read_timeout();
        let mut pause = Duration::from_millis(20);
        loop {
            let got = self.read(probe).await?;
            match done(&got) {
                Ok(()) => return Ok(got),
                Err(why) if tokio::time::Instant::now() >= deadline => return Err(why),
                Err(_) => {}
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }
}

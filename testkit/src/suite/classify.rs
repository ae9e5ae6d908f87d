//! `classify_*`: each fault the harness can provoke gets the class dispatch needs, on a
//! cold sink (the fault is there from its first delivery) and on a warm one
//! (`classify_warm_*`: the same sink instance delivered successfully first, then the
//! destination showed the fault).

use super::util::{envelope, is_panic, is_timeout};
use super::{CaseResult, Cx, Outcome, ensure};
use crate::WARM_DELIVERIES;
use crate::harness::{Fault, Harness, Probe, Setup};
use ankusa_sink_core::{Check, Class, Ctx, Envelope, Failure, Sink, safe_capabilities};
use std::time::{Duration, Instant};

pub(super) async fn missing_destination<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    classify(cx, Fault::MissingDestination).await
}

pub(super) async fn refused_credential<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    classify(cx, Fault::RefusedCredential).await
}

pub(super) async fn unreachable<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    classify(cx, Fault::Unreachable).await
}

pub(super) async fn throttled<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    classify(cx, Fault::Throttled).await
}

pub(super) async fn oversized<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    classify(cx, Fault::Oversized).await
}

pub(super) async fn unacknowledged<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    classify(cx, Fault::Unacknowledged).await
}

pub(super) async fn warm_missing_destination<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    classify_warm(cx, Fault::MissingDestination).await
}

pub(super) async fn warm_refused_credential<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    classify_warm(cx, Fault::RefusedCredential).await
}

pub(super) async fn warm_unreachable<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    classify_warm(cx, Fault::Unreachable).await
}

pub(super) async fn warm_throttled<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    classify_warm(cx, Fault::Throttled).await
}

pub(super) async fn warm_oversized<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    classify_warm(cx, Fault::Oversized).await
}

pub(super) async fn warm_unacknowledged<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    classify_warm(cx, Fault::Unacknowledged).await
}

/// How long a warm sink may answer transient (the connections the fault cut) before the
/// fault's own class: the sink reconnects and meets the changed destination.
const RETRY_WARM_WITHIN: Duration = Duration::from_secs(10);

/// The warm faults a sink meets through a reconnect, whose first answer may be the cut
/// connection's.
fn retried_warm(fault: Fault) -> bool {
    matches!(
        fault,
        Fault::MissingDestination | Fault::RefusedCredential | Fault::Throttled
    )
}

/// Whether the sink had delivered through the same instance before the fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Temp {
    Cold,
    Warm,
}

/// The skip for a fault the harness did not set up: impossible when the harness says the
/// protocol has no such fault, not provided otherwise.
fn unprovided<H: Harness>(cx: &Cx<'_, H>, fault: Fault, method: &str) -> Outcome {
    if let Some(why) = cx.h.fault_impossible(fault) {
        return Outcome::Skip(format!("{fault:?} cannot exist here: {why}"));
    }
    let why =
        cx.h.fault_skip_reason(fault)
            .unwrap_or_else(|| format!("Harness::{method} returned None"));
    Outcome::NotProvided(format!("the harness does not provoke {fault:?}: {why}"))
}

async fn classify<H: Harness>(cx: &mut Cx<'_, H>, fault: Fault) -> CaseResult {
    let Some(setup) = cx.fault(fault).await? else {
        return Ok(unprovided(cx, fault, "fault"));
    };
    judge(cx, fault, &setup, Temp::Cold).await
}

async fn classify_warm<H: Harness>(cx: &mut Cx<'_, H>, fault: Fault) -> CaseResult {
    let Some(warm) = cx.warm_fault(fault).await? else {
        return Ok(unprovided(cx, fault, "warm_fault"));
    };
    let (setup, provoke) = warm.into_parts();
    let mut ids = Vec::with_capacity(WARM_DELIVERIES);
    let mut warm_up = Vec::with_capacity(WARM_DELIVERIES);
    for i in 0..WARM_DELIVERIES {
        warm_up.push(envelope("warm", format!("{{\"warm\":{i}}}")));
    }
    for (i, env) in warm_up.iter().enumerate() {
        cx.deliver(&setup.sink, env, &Ctx::for_envelope(env))
            .await
            .map_err(|f| {
                format!(
                    "warm-up delivery {} of {WARM_DELIVERIES} failed before {fault:?} was \
                     provoked (the destination of Harness::warm_fault must work until then): {f}",
                    i + 1
                )
            })?;
        ids.push(env.id());
    }
    if let Some(probe) = setup.probe.as_deref() {
        cx.read_until(probe, &ids).await?;
    }
    if let Some(provoke) = provoke {
        let what = format!("provoking {fault:?} (WarmFault::new's closure)");
        cx.limit(&what, provoke()).await?;
    }
    judge(cx, fault, &setup, Temp::Warm).await
}

/// Deliver the fault's hook through `setup`'s sink and judge the failure: its class, how
/// soon it came, what it says of landing, and what `check()` says under the fault.
async fn judge<H: Harness>(
    cx: &mut Cx<'_, H>,
    fault: Fault,
    setup: &Setup<H::Sink>,
    temp: Temp,
) -> CaseResult {
    let body_size = setup.body_size.or_else(|| {
        // The sink's own limit, when it states one: one byte more than the limit travels
        // inline if the threshold allows, and its Message v1 is larger still.
        if fault != Fault::Oversized {
            return None;
        }
        let limit = safe_capabilities(&setup.sink).ok()?.max_message?.bytes;
        usize::try_from(limit).ok()?.checked_add(1)
    });
    let env = fault_envelope(fault, body_size, setup.sink.capabilities().inline_max_bytes)?;
    let started = Instant::now();
    let mut ctx = Ctx::for_envelope(&env);
    let mut res = cx.deliver(&setup.sink, &env, &ctx).await;
    // A warm sink may first meet the connection the fault cut (a server that came back
    // refusing the credential): transient, as dispatch retries it. The fault's own class
    // must follow within RETRY_WARM_WITHIN, as dispatch's next attempts would see it.
    let mut transient_first = 0;
    if temp == Temp::Warm && retried_warm(fault) {
        while let Err(f) = &res {
            if f.class() != Class::Transient || started.elapsed() >= RETRY_WARM_WITHIN {
                break;
            }
            transient_first += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
            ctx = ctx
                .clone()
                .with_attempt(ctx.attempt.get().saturating_add(1));
            res = cx.deliver(&setup.sink, &env, &ctx).await;
        }
    }
    let elapsed = started.elapsed();
    let warm = if temp == Temp::Warm {
        format!(" after {WARM_DELIVERIES} successful deliveries on the same sink")
    } else {
        String::new()
    };
    let Err(f) = res else {
        if fault == Fault::Unacknowledged {
            return Err(format!(
                "the destination never acknowledged the write{warm}, yet the sink returned \
                 Ok: it acked a hook nobody stored (fire and forget, no publisher confirm, \
                 acks=0, or Ok on its own timeout)"
            ));
        }
        return Err(format!("{fault:?}{warm}: delivery returned Ok"));
    };
    ensure!(!is_panic(&f), "{fault:?}{warm}: the sink panicked: {f}");
    expect_class(cx, fault, &f, setup.probe.as_deref(), env.id())
        .await
        .map_err(|why| format!("{why}{warm}"))?;
    // What a silenced destination took: whether anything of the hook left the sink.
    let sent_hook = setup
        .heard()
        .filter(|_| fault == Fault::Unacknowledged)
        .map(|heard| contains(&heard(), env.id().as_bytes()));
    expect_landing(cx.h.reports_landing(), fault, temp, sent_hook, &f)
        .map_err(|why| format!("{why}{warm}"))?;
    let checked = match fault {
        Fault::MissingDestination | Fault::RefusedCredential => {
            check_says_config(cx, fault, &setup.sink).await?
        }
        Fault::Unreachable => check_not_reachable(cx, &setup.sink).await?,
        // A throttle or a limit says nothing of whether the destination is there; an
        // unacknowledging one would only make check() wait.
        Fault::Throttled | Fault::Oversized | Fault::Unacknowledged => String::new(),
    };
    let what = match (temp, transient_first) {
        (Temp::Cold, _) => String::new(),
        (Temp::Warm, 0) => format!("warm ({WARM_DELIVERIES} Ok first): "),
        (Temp::Warm, n) => {
            format!("warm ({WARM_DELIVERIES} Ok first, then {n} transient on the cut connection): ")
        }
    };
    Ok(Outcome::Pass(format!(
        "{what}{} in {} ms{checked}: {f}",
        f.class(),
        elapsed.as_millis()
    )))
}

/// What `f` says of whether the message landed fits `fault`: never a wrong claim, and with
/// `strict` ([`Harness::reports_landing`]) the claim itself.
///
/// A warm sink whose destination went away may have written into a connection the outage
/// cut before it saw the cut: it cannot know that nothing landed, so any answer is right.
///
/// `sent_hook` is what a silenced destination took ([`Setup::with_heard`](crate::Setup::with_heard)):
/// `Some(false)` when nothing of the hook reached it (a new connection whose login met the
/// silence), so `false` is the truth and `true` the cautious answer; with `strict` the
/// sink must still say one of them.
fn expect_landing(
    strict: bool,
    fault: Fault,
    temp: Temp,
    sent_hook: Option<bool>,
    f: &Failure,
) -> Result<(), String> {
    if fault == Fault::Unacknowledged && sent_hook == Some(false) {
        let got = f.may_have_landed();
        ensure!(
            !strict || got.is_some(),
            "{fault:?}: nothing of the hook reached the silent destination, and \
             may_have_landed must say so (Some(false), or Some(true)) \
             (Harness::reports_landing), got None: {f}"
        );
        return Ok(());
    }
    let want = match (fault, temp) {
        (Fault::Unreachable, Temp::Warm) => None,
        (Fault::Unreachable | Fault::Oversized, _) => Some(false),
        (Fault::Unacknowledged, _) => Some(true),
        (Fault::MissingDestination | Fault::RefusedCredential | Fault::Throttled, _) => None,
    };
    let Some(want) = want else {
        return Ok(());
    };
    let got = f.may_have_landed();
    ensure!(
        got != Some(!want),
        "{fault:?}: may_have_landed is {got:?}, which says the opposite of what happened \
         (nothing listens or nothing was sent: false; the destination took the write: true){}",
        match sent_hook {
            Some(true) => "; the silent destination took the hook's bytes",
            _ => "",
        }
    );
    ensure!(
        !strict || got == Some(want),
        "{fault:?}: may_have_landed must be Some({want}) (Harness::reports_landing), got {got:?}: {f}"
    );
    Ok(())
}

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// The hook a fault is provoked with: `body_size` bytes for [`Fault::Oversized`] (which must
/// travel inline), else a small JSON body.
fn fault_envelope(
    fault: Fault,
    body_size: Option<usize>,
    inline_max: Option<std::num::NonZeroUsize>,
) -> Result<Envelope, String> {
    Ok(match (fault, body_size) {
        (Fault::Oversized, Some(n)) => {
            if let Some(max) = inline_max.filter(|m| n > m.get()) {
                return Err(format!(
                    "Setup::body_size ({n}) is over the sink's inline_max_bytes ({max}): such a \
                     body travels as a small claim, never oversized. Pick a body size at most \
                     inline_max_bytes whose encoded message is over the destination's limit \
                     (lower the destination's limit, or raise the sink's inline threshold)"
                ));
            }
            envelope("oversized", vec![b'o'; n])
        }
        (Fault::Oversized, None) => {
            return Err(
                "Fault::Oversized needs Setup::body_size, or a sink whose capabilities() \
                 state max_message"
                    .into(),
            );
        }
        _ => envelope("fault", &b"{}"[..]),
    })
}

/// The failure `f` of a delivery under `fault` has the class dispatch needs (and an
/// oversized hook did not arrive after all).
async fn expect_class<H: Harness>(
    cx: &mut Cx<'_, H>,
    fault: Fault,
    f: &Failure,
    probe: Option<&dyn Probe>,
    id: &str,
) -> Result<(), String> {
    match fault {
        Fault::MissingDestination | Fault::RefusedCredential => {
            ensure!(
                f.class() == Class::Config,
                "{fault:?} must be config, got {f}"
            );
        }
        Fault::Unreachable => {
            ensure!(
                f.class() == Class::Transient,
                "unreachable must be transient, got {f}"
            );
            ensure!(
                !is_timeout(f),
                "unreachable: the sink did not answer within the {:?} deadline",
                cx.h.deadline()
            );
        }
        Fault::Unacknowledged => {
            ensure!(
                !f.class().is_permanent(),
                "an unacknowledged write must be retried (transient or retry-after): the hook \
                 may or may not be stored; got {f}"
            );
            ensure!(
                !is_timeout(f),
                "unacknowledged: the sink waited past the {:?} deadline for an ack; give it an \
                 ack timeout of its own",
                cx.h.deadline()
            );
        }
        Fault::Throttled => match f.class() {
            // Dispatch draws the pause for a throttle that states none.
            Class::Throttled => {}
            class => {
                let ms = class
                    .retry_after_ms()
                    .ok_or_else(|| format!("throttled must be retry-after, got {f}"))?;
                ensure!(
                    ms > 0 && ms <= 3_600_000,
                    "retry-after must be in 1..=3600000 ms, got {ms}"
                );
            }
        },
        Fault::Oversized => {
            ensure!(
                f.class() == Class::Permanent,
                "oversized must be permanent, got {f}"
            );
            if let Some(probe) = probe {
                // Give a wrongly sent body a moment to arrive before declaring none did.
                tokio::time::sleep(Duration::from_millis(300)).await;
                let got = cx.read(probe).await?;
                ensure!(
                    !got.iter().any(|r| r.id == id),
                    "the oversized hook reached the destination"
                );
            }
        }
    }
    Ok(())
}

/// `check()` on a sink facing a missing destination or refused credentials must not pass,
/// a failure it returns must be config, and where the harness says the sink can tell
/// ([`Harness::check_detects`]) it must be that failure.
async fn check_says_config<H: Harness, S: Sink + ?Sized>(
    cx: &mut Cx<'_, H>,
    fault: Fault,
    sink: &S,
) -> Result<String, String> {
    let detects = cx.h.check_detects(fault);
    match cx.check(sink).await? {
        Err(cf) => {
            ensure!(
                cf.class() == Class::Config,
                "check() for {fault:?} must be config, got {cf}"
            );
            Ok("; check() config".to_owned())
        }
        Ok(Check::Passed) => Err(format!("check() passed although {fault:?}")),
        Ok(other) => {
            ensure!(
                !detects,
                "check() answered {other:?} for {fault:?}, but the harness says the sink's \
                 check() can tell (Harness::check_detects): it must fail config"
            );
            // Reachable or no preflight: neither claims the destination is usable.
            Ok(format!("; check() {other:?}"))
        }
    }
}

/// `check()` where nothing listens must not say the destination is there or reachable; a
/// failure it returns must be transient.
async fn check_not_reachable<H: Harness, S: Sink + ?Sized>(
    cx: &mut Cx<'_, H>,
    sink: &S,
) -> Result<String, String> {
    match cx.check(sink).await? {
        Err(cf) => {
            ensure!(
                cf.class() == Class::Transient,
                "check() where nothing listens must fail transient, got {cf}"
            );
            Ok("; check() transient".to_owned())
        }
        Ok(Check::Unsupported) => Ok("; check() unsupported".to_owned()),
        Ok(other) => Err(format!(
            "check() answered {other:?} where nothing listens: it must fail (transient), or \
             say Unsupported when the sink has no preflight"
        )),
    }
}

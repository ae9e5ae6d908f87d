//! `classify_*`: each fault the harness can provoke gets the class dispatch needs.

use super::util::{check_failure_secrets, envelope, is_panic, is_timeout};
use super::{CaseResult, Cx, Outcome, ensure};
use crate::harness::{Fault, Harness, Probe};
use ankusa_sink_core::{Check, Class, Ctx, Envelope, Failure, Sink, resolve_capabilities};
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

async fn classify<H: Harness>(cx: &mut Cx<'_, H>, fault: Fault) -> CaseResult {
    let secrets = cx.h.secrets();
    let Some(setup) = cx.fault(fault).await? else {
        let why =
            cx.h.fault_skip_reason(fault)
                .unwrap_or_else(|| "Harness::fault returned None".to_owned());
        return Ok(Outcome::Skip(format!(
            "the harness cannot provoke {fault:?}: {why}"
        )));
    };
    let body_size = setup.body_size.or_else(|| {
        // The sink's own limit, when it states one: one byte more than the limit travels
        // inline if the threshold allows, and its Message v1 is larger still.
        if fault != Fault::Oversized {
            return None;
        }
        let limit = resolve_capabilities(&setup.sink)?.max_message?.bytes;
        usize::try_from(limit).ok()?.checked_add(1)
    });
    let env = fault_envelope(fault, body_size, setup.sink.inline_max_bytes())?;
    let ctx = Ctx::for_envelope(&env);
    let started = Instant::now();
    let res = cx.deliver(&setup.sink, &env, &ctx).await;
    let elapsed = started.elapsed();
    let Err(f) = res else {
        if fault == Fault::Unacknowledged {
            return Err(
                "the destination never acknowledged the write, yet the sink returned \
                 Ok: it acked a hook nobody stored (fire and forget, no publisher confirm, \
                 acks=0, or Ok on its own timeout)"
                    .into(),
            );
        }
        return Err(format!("{fault:?}: delivery returned Ok"));
    };
    check_failure_secrets(&secrets, &f)?;
    ensure!(!is_panic(&f), "{fault:?}: the sink panicked: {f}");
    expect_class(cx, fault, &f, setup.probe.as_deref(), env.id()).await?;
    expect_landing(cx.h.reports_landing(), fault, &f)?;
    if matches!(fault, Fault::MissingDestination | Fault::RefusedCredential) {
        check_says_config(cx, fault, &setup.sink, &secrets).await?;
    }
    Ok(Outcome::Pass(format!(
        "{} in {} ms: {f}",
        f.class(),
        elapsed.as_millis()
    )))
}

/// What `f` says of whether the message landed fits `fault`: never a wrong claim, and with
/// `strict` ([`Harness::reports_landing`]) the claim itself.
fn expect_landing(strict: bool, fault: Fault, f: &Failure) -> Result<(), String> {
    let want = match fault {
        Fault::Unreachable | Fault::Oversized => Some(false),
        Fault::Unacknowledged => Some(true),
        Fault::MissingDestination | Fault::RefusedCredential | Fault::Throttled => None,
    };
    let Some(want) = want else {
        return Ok(());
    };
    let got = f.may_have_landed();
    ensure!(
        got != Some(!want),
        "{fault:?}: may_have_landed is {got:?}, which says the opposite of what happened \
         (nothing listens or nothing was sent: false; the destination took the write: true)"
    );
    ensure!(
        !strict || got == Some(want),
        "{fault:?}: may_have_landed must be Some({want}) (Harness::reports_landing), got {got:?}: {f}"
    );
    Ok(())
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
/// and a failure it returns must be config.
async fn check_says_config<H: Harness, S: Sink + ?Sized>(
    cx: &mut Cx<'_, H>,
    fault: Fault,
    sink: &S,
    secrets: &[String],
) -> Result<(), String> {
    match cx.check(sink).await? {
        Err(cf) => {
            check_failure_secrets(secrets, &cf)?;
            ensure!(
                cf.class() == Class::Config,
                "check() for {fault:?} must be config, got {cf}"
            );
        }
        Ok(Check::Passed) => {
            return Err(format!("check() passed although {fault:?}"));
        }
        // Reachable or no preflight: neither claims the destination is usable.
        Ok(_) => {}
    }
    Ok(())
}

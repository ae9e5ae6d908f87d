//! `inline_boundary`: exactly `inline_max_bytes` is inline; one byte more travels as
//! `ctx.claim`, and is refused without one.

use super::util::{compare, envelope, fake_claim};
use super::{CaseResult, Cx, Outcome, ensure};
use crate::harness::Harness;
use ankusa_sink_core::{Ctx, Sink};

pub(super) async fn run<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    let setup = cx.destination().await?;
    let Some(max) = setup.sink.capabilities().inline_max_bytes else {
        return Ok(Outcome::Skip(
            "the sink declares no inline threshold (never uses the claim check)".into(),
        ));
    };
    let max = max.get();
    let at = envelope("inline-at", vec![b'a'; max]);
    let over = envelope("inline-over", vec![b'b'; max + 1]);
    let at_ctx = Ctx::for_envelope(&at);
    cx.deliver(&setup.sink, &at, &at_ctx)
        .await
        .map_err(|f| format!("a body of exactly inline_max_bytes ({max}) failed: {f}"))?;
    // Over the threshold with no claim: the sink must refuse (it never checks in itself).
    let bare = envelope("inline-noclaim", vec![b'c'; max + 1]);
    match cx
        .deliver(&setup.sink, &bare, &Ctx::for_envelope(&bare))
        .await
    {
        Ok(()) => {
            return Err(format!(
                "a body of {} bytes (> inline_max_bytes) without ctx.claim returned Ok: \
                 the sink inlined it or checked it in itself",
                max + 1
            ));
        }
        Err(f) => ensure!(
            f.class().is_permanent(),
            "an oversized body without ctx.claim must be a permanent/config failure, got {f}"
        ),
    }
    let claim = fake_claim(&over);
    let over_ctx = Ctx::for_envelope(&over).with_claim(claim.clone());
    cx.deliver(&setup.sink, &over, &over_ctx)
        .await
        .map_err(|f| format!("a body of inline_max_bytes + 1 with ctx.claim failed: {f}"))?;
    let Some(probe) = setup.probe.as_deref() else {
        return Ok(Outcome::NotProvided(
            "no probe: both deliveries returned Ok, what travelled cannot be read back".into(),
        ));
    };
    let got = cx.read_until(probe, &[at.id(), over.id()]).await?;
    for r in got.iter().filter(|r| r.id == at.id()) {
        compare(&at, &at_ctx, r, true)?;
    }
    for r in got.iter().filter(|r| r.id == over.id()) {
        compare(&over, &over_ctx, r, false)?;
        ensure!(
            r.body.is_none(),
            "a body over inline_max_bytes travelled inline"
        );
        ensure!(
            r.claim.as_deref() == Some(claim.reference().to_string().as_str()),
            "expected claim {}, read back {:?}",
            claim.reference(),
            r.claim
        );
    }
    ensure!(
        !got.iter().any(|r| r.id == bare.id()),
        "the refused oversized body still reached the destination"
    );
    Ok(Outcome::Pass(format!(
        "{max} bytes inline, {} bytes by the given claim",
        max + 1
    )))
}

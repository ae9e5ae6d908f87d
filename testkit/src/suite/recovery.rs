//! `recovery`: deliveries fail transient while the destination is down and succeed
//! afterwards without rebuilding the sink.
//!
//! No runtime requirement: the destination is started again by awaiting
//! [`Harness::start`] after the outage checks, whatever they found (a panic in them is
//! caught), never from a `Drop` (which cannot await, and `block_in_place` panics on a
//! current-thread runtime).

use super::util::{envelope, is_timeout, panic_text};
use super::{CaseResult, Cx, Outcome, ensure};
use crate::harness::{Harness, Setup};
use ankusa_sink_core::{Class, Ctx};
use futures_util::FutureExt as _;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

/// How long the same sink may take to deliver again after the restart.
const RECOVER_WITHIN: Duration = Duration::from_secs(60);

pub(super) async fn run<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    if !cx.h.can_restart() {
        if let Some(why) = cx.h.restart_impossible() {
            return Ok(Outcome::Skip(format!(
                "the destination cannot be down: {why}"
            )));
        }
        return Ok(Outcome::NotProvided(
            "the harness does not stop and restart its destination (can_restart() is false)".into(),
        ));
    }
    let setup = cx.destination().await?;
    let first = envelope("before", &b"{}"[..]);
    cx.deliver(&setup.sink, &first, &Ctx::for_envelope(&first))
        .await
        .map_err(|f| format!("delivery before the outage failed: {f}"))?;
    let cx = &*cx;
    let stopped = AssertUnwindSafe(tokio::time::timeout(cx.h.harness_timeout(), cx.h.stop()))
        .catch_unwind()
        .await;
    let stop_failed = match stopped {
        Ok(Ok(Ok(()))) => None,
        // The harness says it stopped nothing: nothing to start again.
        Ok(Ok(Err(e))) => return Err(format!("the harness's stop() failed: {e}")),
        Ok(Err(_)) => Some(format!(
            "the harness's stop() did not finish within {:?}",
            cx.h.harness_timeout()
        )),
        Err(p) => Some(format!(
            "the harness's stop() panicked: {}",
            panic_text(&*p)
        )),
    };
    let during = match stop_failed {
        Some(why) => Err(why),
        None => AssertUnwindSafe(during_outage(cx, &setup))
            .catch_unwind()
            .await
            .unwrap_or_else(|p| {
                Err(format!(
                    "the case panicked during the outage: {}",
                    panic_text(&*p)
                ))
            }),
    };
    // Always start again after a stop, before judging anything.
    let started = cx.start().await;
    match (during, started) {
        (Err(d), Err(s)) => return Err(format!("{d}; then {s}")),
        (Err(d), Ok(())) | (Ok(()), Err(d)) => return Err(d),
        (Ok(()), Ok(())) => {}
    }
    let after = envelope("after", &b"{}"[..]);
    let deadline = Instant::now() + RECOVER_WITHIN;
    let mut attempt = 1;
    loop {
        let ctx = Ctx::for_envelope(&after).with_attempt(attempt);
        match cx.deliver(&setup.sink, &after, &ctx).await {
            Ok(()) => break,
            Err(f) if Instant::now() < deadline && !f.class().is_permanent() => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(f) => {
                return Err(format!(
                    "the same sink did not recover within {RECOVER_WITHIN:?} after the \
                     restart: {f}"
                ));
            }
        }
    }
    if let Some(probe) = setup.probe.as_deref() {
        cx.read_until(probe, &[after.id()]).await?;
    }
    Ok(Outcome::Pass(format!(
        "transient while down, recovered after {attempt} attempts"
    )))
}

async fn during_outage<H: Harness>(cx: &Cx<'_, H>, setup: &Setup<H::Sink>) -> Result<(), String> {
    let during = envelope("during", &b"{}"[..]);
    match cx
        .deliver(&setup.sink, &during, &Ctx::for_envelope(&during))
        .await
    {
        Ok(()) => Err("a delivery while the destination was down returned Ok".into()),
        Err(f) => {
            ensure!(
                f.class() == Class::Transient,
                "a delivery during the outage must be transient, got {f}"
            );
            ensure!(
                !is_timeout(&f),
                "a delivery during the outage hung past the {:?} deadline",
                cx.h.deadline()
            );
            Ok(())
        }
    }
}

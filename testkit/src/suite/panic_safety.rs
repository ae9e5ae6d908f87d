//! `panic_safety`: odd inputs never make the sink panic.

use super::util::{envelope, is_panic, varied_envelopes};
use super::{CaseResult, Cx, Outcome, ensure};
use crate::harness::Harness;
use ankusa_sink_core::{Ctx, Envelope, Sink};

pub(super) async fn run<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    let setup = cx.destination().await?;
    let mut odd: Vec<(Envelope, Ctx)> = varied_envelopes();
    let replay = envelope("replay", &b"{}"[..]);
    let replay_ctx = Ctx::for_envelope(&replay)
        .with_replay_id("replay-odd")
        .with_attempt(2);
    odd.push((replay, replay_ctx));
    let max = setup.sink.capabilities().inline_max_bytes;
    let big = envelope("big", vec![0u8; max.map_or(1 << 20, |m| m.get() + 1)]);
    let big_ctx = Ctx::for_envelope(&big);
    odd.push((big, big_ctx));
    let e = envelope("attempt", &b"{}"[..]);
    let c = Ctx::for_envelope(&e)
        .with_attempt(u32::MAX)
        .with_batch(true);
    odd.push((e, c));
    let mut failures = 0;
    for (env, ctx) in &odd {
        if let Err(f) = cx.deliver(&setup.sink, env, ctx).await {
            ensure!(!is_panic(&f), "delivering {} panicked: {f}", env.id());
            failures += 1;
        }
    }
    Ok(Outcome::Pass(format!(
        "{} odd deliveries without a panic ({failures} refused cleanly)",
        odd.len()
    )))
}

//! `volume`: thousands of deliveries through one sink, every one read back exactly.
//!
//! A sink that loses one delivery in a few hundred (a dropped buffer, a batch entry whose
//! refusal is not checked, an ack matched to the wrong request) passes every case that
//! sends a few hundred; at 5,000 it loses several.

use super::util::{compare, count_by_id, envelope};
use super::{CaseResult, Cx, Outcome, ensure};
use crate::VOLUME;
use crate::harness::Harness;
use ankusa_sink_core::{Capabilities, Ctx, Envelope, safe_capabilities};
use futures_util::{StreamExt as _, stream};
use std::collections::HashMap;
use std::time::Instant;

/// Deliveries in flight at once for a sink that declares no window: the dispatcher's
/// shared window.
const SHARED_WINDOW: usize = 32;

pub(super) async fn run<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    let n = cx.h.volume().max(VOLUME);
    let setup = cx.destination().await?;
    let Some(probe) = setup.probe.as_deref() else {
        return Ok(Outcome::NotProvided(format!(
            "no probe: {n} deliveries could not be read back"
        )));
    };
    let caps = safe_capabilities(&setup.sink).unwrap_or_else(|_| Capabilities::unknown());
    let batch = caps.batched;
    // As the dispatcher keeps them: the sink's own window, else the shared one (twice it
    // for a batching sink, whose batcher waits for companions).
    let window = caps
        .in_flight
        .map_or(
            if batch {
                2 * SHARED_WINDOW
            } else {
                SHARED_WINDOW
            },
            |w| w.deliveries.get(),
        )
        .clamp(1, 1024);
    let envs: Vec<(Envelope, Ctx)> = (0..n)
        .map(|i| {
            let env = envelope("volume", format!("{{\"volume\":{i}}}"));
            let ctx = Ctx::for_envelope(&env).with_batch(batch);
            (env, ctx)
        })
        .collect();
    let started = Instant::now();
    let cx = &*cx;
    let sink = &setup.sink;
    let failed: Vec<String> = stream::iter(&envs)
        .map(|(env, ctx)| async move {
            cx.deliver(sink, env, ctx)
                .await
                .err()
                .map(|f| format!("{}: {f}", env.id()))
        })
        .buffer_unordered(window)
        .filter_map(|failed| async move { failed })
        .collect()
        .await;
    let sent = started.elapsed();
    ensure!(
        failed.is_empty(),
        "{} of {n} deliveries failed; first: {}",
        failed.len(),
        failed[0]
    );
    let ids: Vec<&str> = envs.iter().map(|(e, _)| e.id()).collect();
    let read = Instant::now();
    let got = cx.read_until(probe, &ids).await?;
    let read = read.elapsed();
    let by_id: HashMap<&str, &(Envelope, Ctx)> = envs.iter().map(|e| (e.0.id(), e)).collect();
    for r in &got {
        if let Some((env, ctx)) = by_id.get(r.id.as_str()) {
            compare(env, ctx, r, true)?;
        }
    }
    let counts = count_by_id(&got);
    let dups: usize = ids.iter().map(|id| counts[id] - 1).sum();
    Ok(Outcome::Pass(format!(
        "{n} deliveries ({window} in flight) Ok in {:.1} s, every one read back exactly \
         within {:.1} s more; {dups} duplicates",
        sent.as_secs_f64(),
        read.as_secs_f64()
    )))
}

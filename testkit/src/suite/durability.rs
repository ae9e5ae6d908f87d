//! `durability`: a durable sink's every `Ok` is readable right after the ack, and still
//! there after the destination restarts.

use super::util::envelope;
use super::{CaseResult, Cx, Outcome};
use crate::DURABILITY_BOUND;
use crate::harness::Harness;
use ankusa_sink_core::{Ctx, safe_capabilities};
use std::time::{Duration, Instant};

const HOOKS: usize = 20;

pub(super) async fn run<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    let setup = cx.destination().await?;
    if !safe_capabilities(&setup.sink).is_ok_and(|c| c.durable) {
        return Ok(Outcome::Skip(
            "the sink declares itself not durable (capabilities().durable is false): its Ok \
             promises nothing a consumer could read"
                .into(),
        ));
    }
    let Some(probe) = setup.probe.as_deref() else {
        return Ok(Outcome::NotProvided(
            "no probe: durability after the ack cannot be observed".into(),
        ));
    };
    // A probe's first read may connect or join a group: not part of the bound.
    cx.read(probe).await?;
    let mut latencies = Vec::with_capacity(HOOKS);
    let mut ids = Vec::with_capacity(HOOKS);
    for i in 0..HOOKS {
        let env = envelope("durable", format!("{{\"d\":{i}}}"));
        ids.push(env.id().to_owned());
        cx.deliver(&setup.sink, &env, &Ctx::for_envelope(&env))
            .await
            .map_err(|f| format!("delivery {i} failed: {f}"))?;
        let acked = Instant::now();
        loop {
            let got = cx.read(probe).await?;
            let after = acked.elapsed();
            let seen = got.iter().any(|r| r.id == env.id());
            if seen && after <= DURABILITY_BOUND {
                latencies.push(after);
                break;
            }
            if after >= DURABILITY_BOUND {
                return Err(format!(
                    "delivery {i} returned Ok, but the hook was not readable within \
                     {DURABILITY_BOUND:?} of the ack ({}; read {} ms after it): Ok must mean \
                     the destination has it (a sink that acks before the destination does, \
                     write-behind or fire and forget, fails here)",
                    if seen {
                        "seen only by a slower read"
                    } else {
                        "not seen"
                    },
                    after.as_millis()
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let read = format!(
        "{HOOKS} acked hooks each readable right after the ack: median {:.1} ms, max {:.1} ms \
         (bound {} ms)",
        ms(latencies[HOOKS / 2]),
        ms(latencies[HOOKS - 1]),
        DURABILITY_BOUND.as_millis()
    );
    if !cx.h.can_restart_destination() {
        let why = cx.h.restart_destination_skip_reason().unwrap_or_else(|| {
            "Harness::can_restart_destination is false: whether the destination keeps what \
             it acked across a restart is unchecked"
                .to_owned()
        });
        return Ok(Outcome::NotProvided(format!(
            "{read}; restart of the destination not provided: {why}"
        )));
    }
    let restarted = Instant::now();
    cx.restart_destination().await?;
    let restart_ms = restarted.elapsed().as_millis();
    let want: Vec<&str> = ids.iter().map(String::as_str).collect();
    cx.read_until(probe, &want).await.map_err(|why| {
        format!(
            "after the destination restarted (Harness::restart_destination): {why}. The sink \
             declares durable, so every Ok must outlive a restart: a destination that keeps \
             the hook only in memory (write-behind, fsync or synchronous commit off, a \
             memory-only store) must not be declared durable"
        )
    })?;
    Ok(Outcome::Pass(format!(
        "{read}; all {HOOKS} read back after the destination restarted ({restart_ms} ms)"
    )))
}

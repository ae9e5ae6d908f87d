//! `durability`: a durable sink's every `Ok` is readable right after the ack.

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
    for i in 0..HOOKS {
        let env = envelope("durable", format!("{{\"d\":{i}}}"));
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
    Ok(Outcome::Pass(format!(
        "{HOOKS} acked hooks each readable right after the ack: median {:.1} ms, max {:.1} ms \
         (bound {} ms)",
        ms(latencies[HOOKS / 2]),
        ms(latencies[HOOKS - 1]),
        DURABILITY_BOUND.as_millis()
    )))
}

//! `batching`: a batching sink gives each delivery its own result, sends accepted items
//! once and refused ones never, and (where the destination tells) really batches.

use super::util::{count_by_id, envelope};
use super::{CaseResult, Cx, Outcome, ensure};
use crate::harness::{Expect, Harness, Setup};
use ankusa_sink_core::{Ctx, Envelope, safe_capabilities};
use futures_util::future::join_all;
use std::collections::HashSet;
use std::time::Duration;

/// Each envelope of a batching run and what the destination answers for it.
type Plan = Vec<(Envelope, Expect)>;

pub(super) async fn run<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    // The harness's mixed batch comes with a batching sink of its own.
    let (setup, plan): (Setup<H::Sink>, Option<Plan>) = match cx.mixed_batch().await? {
        Some(m) => {
            ensure!(
                safe_capabilities(&m.setup.sink).is_ok_and(|c| c.batched),
                "the sink of the harness's mixed_batch() does not batch (capabilities().batched \
                 is false)"
            );
            (m.setup, Some(m.envelopes))
        }
        None => {
            let setup = cx.destination().await?;
            if !safe_capabilities(&setup.sink).is_ok_and(|c| c.batched) {
                return Ok(Outcome::Skip(
                    "the harness's destination() builds a sink whose capabilities().batched is \
                     false, and it gives no mixed_batch(): nothing to batch (a batching sink's harness \
                     returns a batching sink from destination() or mixed_batch())"
                        .into(),
                ));
            }
            (setup, None)
        }
    };
    let limit = safe_capabilities(&setup.sink)
        .ok()
        .and_then(|c| c.batch)
        .map(|b| b.max_messages);
    let plan = plan.unwrap_or_else(|| {
        // Past two full batches when the sink states its limit, so one request cannot
        // carry them all.
        let n = limit.and_then(|m| usize::try_from(m).ok()).map_or(30, |m| {
            m.saturating_mul(2).saturating_add(1).clamp(30, 2_001)
        });
        (0..n)
            .map(|i| (envelope("batch", format!("{{\"b\":{i}}}")), Expect::Ok))
            .collect()
    });
    let cx = &*cx;
    let results = join_all(plan.iter().map(|(e, _)| {
        let ctx = Ctx::for_envelope(e).with_batch(true);
        let sink = &setup.sink;
        async move { cx.deliver(sink, e, &ctx).await }
    }))
    .await;
    for ((env, expect), res) in plan.iter().zip(&results) {
        match (expect, res) {
            (Expect::Ok, Ok(())) => {}
            (Expect::Ok, Err(f)) => {
                return Err(format!("{} should be accepted, got {f}", env.id()));
            }
            (Expect::Permanent, Ok(())) => {
                return Err(format!("{} should be refused, got Ok", env.id()));
            }
            (Expect::Permanent, Err(f)) => ensure!(
                f.class().is_permanent(),
                "{} should be refused permanently, got {f}",
                env.id()
            ),
        }
    }
    let accepted: Vec<&str> = plan
        .iter()
        .filter(|(_, x)| *x == Expect::Ok)
        .map(|(e, _)| e.id())
        .collect();
    let Some(probe) = setup.probe.as_deref() else {
        return Ok(Outcome::NotProvided(format!(
            "no probe: {} batched deliveries had their own results, re-sends cannot be seen",
            plan.len()
        )));
    };
    let first = cx.read_until(probe, &accepted).await?;
    // Let any re-send arrive before counting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let later = cx.read(probe).await?;
    let got = if later.len() < first.len() {
        first
    } else {
        later
    };
    let counts = count_by_id(&got);
    for id in &accepted {
        ensure!(
            counts.get(id) == Some(&1),
            "accepted batch item {id} reached the destination {} times",
            counts.get(id).copied().unwrap_or(0)
        );
    }
    for (env, x) in &plan {
        if *x == Expect::Permanent {
            ensure!(
                !counts.contains_key(env.id()),
                "refused batch item {} reached the destination",
                env.id()
            );
        }
    }
    let wanted: HashSet<&str> = accepted.iter().copied().collect();
    let requests: Vec<&str> = got
        .iter()
        .filter(|r| wanted.contains(r.id.as_str()))
        .filter_map(|r| r.request_id.as_deref())
        .collect();
    let grouping = if requests.len() >= 2 {
        let distinct = requests.iter().collect::<HashSet<_>>().len();
        ensure!(
            distinct < requests.len(),
            "{} batched deliveries reached the destination in {distinct} requests of one hook \
             each: the sink claims batched() but sends every delivery on its own",
            requests.len()
        );
        if let Some(max) = limit {
            let mut per_request = std::collections::HashMap::new();
            for r in &requests {
                *per_request.entry(*r).or_insert(0u64) += 1;
            }
            let largest = per_request.values().copied().max().unwrap_or(0);
            ensure!(
                largest <= max,
                "a request carried {largest} deliveries, over the sink's own batch.max_messages \
                 ({max}, capabilities())"
            );
        }
        format!("in {distinct} requests")
    } else {
        "request grouping not observable (the probe fills no Received::request_id)".to_owned()
    };
    Ok(Outcome::Pass(format!(
        "{} batched deliveries, each its own result, accepted items sent once, {grouping}",
        plan.len()
    )))
}

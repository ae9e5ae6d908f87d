//! `concurrency`: 200 concurrent deliveries all Ok and all read back.

use super::util::{count_by_id, envelope};
use super::{CaseResult, Cx, Outcome, ensure};
use crate::harness::Harness;
use ankusa_sink_core::{Ctx, Envelope};
use futures_util::future::join_all;

pub(super) async fn run<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    const N: usize = 200;
    let setup = cx.destination().await?;
    let envs: Vec<Envelope> = (0..N)
        .map(|i| envelope("conc", format!("{{\"n\":{i}}}")))
        .collect();
    let cx = &*cx;
    let results = join_all(envs.iter().map(|e| {
        let ctx = Ctx::for_envelope(e);
        let sink = &setup.sink;
        async move { cx.deliver(sink, e, &ctx).await }
    }))
    .await;
    let failed: Vec<String> = results
        .iter()
        .zip(&envs)
        .filter_map(|(r, e)| r.as_ref().err().map(|f| format!("{}: {f}", e.id())))
        .collect();
    ensure!(
        failed.is_empty(),
        "{} of {N} concurrent deliveries failed; first: {}",
        failed.len(),
        failed[0]
    );
    let Some(probe) = setup.probe.as_deref() else {
        return Ok(Outcome::NotProvided(format!(
            "no probe: {N} concurrent deliveries returned Ok, none can be read back"
        )));
    };
    let ids: Vec<&str> = envs.iter().map(Envelope::id).collect();
    let got = cx.read_until(probe, &ids).await?;
    let counts = count_by_id(&got);
    let dups: usize = ids.iter().map(|id| counts[id] - 1).sum();
    Ok(Outcome::Pass(format!(
        "{N} concurrent deliveries Ok and read back; {dups} duplicates"
    )))
}

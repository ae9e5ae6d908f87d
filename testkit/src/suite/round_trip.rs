//! `round_trip`: varied envelopes read back exactly, and a replay of an already-delivered
//! hook arrives as a second copy carrying its replay id.

use super::util::{compare, count_by_id, envelope, next_id, varied_envelopes};
use super::{CaseResult, Cx, Outcome};
use crate::harness::{Harness, Received};
use ankusa_sink_core::{Ctx, Envelope, Sink};

pub(super) async fn run<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    let setup = cx.destination().await?;
    let max = setup
        .sink
        .capabilities()
        .inline_max_bytes
        .map_or(usize::MAX, |n| n.get());
    let set: Vec<(Envelope, Ctx)> = varied_envelopes()
        .into_iter()
        .filter(|(e, _)| e.body().len() <= max)
        .collect();
    for (env, ctx) in &set {
        if let Err(f) = cx.deliver(&setup.sink, env, ctx).await {
            return Err(format!("delivery of {} failed: {f}", env.id()));
        }
    }
    // A replay job re-sends a hook that was already delivered, with the same id: the
    // destination must get a second copy, which carries the replay id.
    let replayed = envelope("replayed", &b"{\"replay\":true}"[..]);
    let first = Ctx::for_envelope(&replayed);
    let replay_id = next_id("replay");
    let again = Ctx::for_envelope(&replayed).with_replay_id(replay_id.as_str());
    for (ctx, what) in [(&first, "first delivery"), (&again, "replay")] {
        if let Err(f) = cx.deliver(&setup.sink, &replayed, ctx).await {
            return Err(format!("the {what} of {} failed: {f}", replayed.id()));
        }
    }
    let Some(probe) = setup.probe.as_deref() else {
        return Ok(Outcome::NotProvided(format!(
            "no probe: {} deliveries and a replay returned Ok but none can be read back",
            set.len()
        )));
    };
    let mut ids: Vec<&str> = set.iter().map(|(e, _)| e.id()).collect();
    ids.push(replayed.id());
    cx.read_until(probe, &ids).await?;
    let limit = cx.h.read_timeout();
    let got = cx
        .read_until_ok(probe, |got| {
            let copies: Vec<&Received> = got.iter().filter(|r| r.id == replayed.id()).collect();
            let with = |rp: Option<&str>| {
                copies
                    .iter()
                    .any(|r| r.replay_id.as_ref().is_some_and(|x| x.as_deref() == rp))
            };
            // A probe that reads back no replay ids can only count copies.
            let tells = copies.iter().any(|r| r.replay_id.is_some());
            if (tells && with(None) && with(Some(&replay_id))) || (!tells && copies.len() >= 2) {
                return Ok(());
            }
            Err(format!(
                "the replay of the already-delivered hook {} returned Ok, but within {limit:?} \
                 the destination holds {} copies of it and none with replay id {replay_id:?}: \
                 the replay was dropped (a broker dedupe id that is the plain hook id swallows \
                 replays; make it include the replay id)",
                replayed.id(),
                copies.len()
            ))
        })
        .await?;
    for (env, ctx) in &set {
        for r in got.iter().filter(|r| r.id == env.id()) {
            compare(env, ctx, r, true)?;
        }
    }
    for r in got.iter().filter(|r| r.id == replayed.id()) {
        let is_replay = r.replay_id.as_ref().is_some_and(|rp| rp.is_some());
        compare(&replayed, if is_replay { &again } else { &first }, r, true)?;
    }
    let counts = count_by_id(&got);
    let dups: usize = set.iter().map(|(e, _)| counts[e.id()] - 1).sum::<usize>()
        + counts[replayed.id()].saturating_sub(2);
    Ok(Outcome::Pass(format!(
        "{} envelopes read back exactly, a replay of a delivered hook arrived as its own copy; \
         {dups} duplicates",
        set.len()
    )))
}

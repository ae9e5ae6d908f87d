//! `redelivery`: the same hook delivered again, as a plain retry and as a replay; every
//! copy carries the hook's idempotency key, and a sink that declares dedupe keeps one copy
//! per key.

use super::util::{compare, envelope, next_id};
use super::{CaseResult, Cx, Outcome, ensure};
use crate::harness::{Harness, Received};
use ankusa_sink_core::{Ctx, Dedupe, safe_capabilities};
use std::time::{Duration, Instant};

/// How long the case waits, once the copies it needs arrived, for a copy a dedupe should
/// have dropped to show up anyway.
const SETTLE: Duration = Duration::from_millis(300);

pub(super) async fn run<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    let setup = cx.destination().await?;
    let dedupe = safe_capabilities(&setup.sink)
        .map_err(|e| format!("capabilities() must not panic: {e}"))?
        .dedupe();
    // A dedupe key makes the idempotency key differ from the hook id: a sink that keys on
    // the id, or on nothing, shows it.
    let env = envelope("redelivered", &b"{\"again\":true}"[..])
        .to_builder()
        .dedupe_key(next_id("evt"))
        .build()
        .map_err(|e| format!("a test envelope: {e}"))?;
    let key = env.idempotency_key().into_owned();
    let first = Ctx::for_envelope(&env);
    // Dispatch retries a delivery whose answer was lost with the same hook and the next
    // attempt number; a replay job sends the hook again with its replay id.
    let retry = first.clone().with_attempt(2);
    let replay_id = next_id("replay");
    let replay = Ctx::for_envelope(&env).with_replay_id(replay_id.as_str());
    let started = Instant::now();
    for (ctx, what) in [
        (&first, "first delivery"),
        (&retry, "plain retry"),
        (&replay, "replay"),
    ] {
        if let Err(f) = cx.deliver(&setup.sink, &env, ctx).await {
            return Err(format!("the {what} of {} failed: {f}", env.id()));
        }
    }
    let Some(probe) = setup.probe.as_deref() else {
        return Ok(Outcome::NotProvided(
            "no probe: the first delivery, a retry and a replay returned Ok, but their copies \
             cannot be read back"
                .into(),
        ));
    };
    let limit = cx.h.read_timeout();
    let id = env.id().to_owned();
    let enough = |got: &[Received]| {
        let copies: Vec<&Received> = got.iter().filter(|r| r.id == id).collect();
        let tells = copies.iter().any(|r| r.replay_id.is_some());
        let replayed = copies.iter().any(|r| is_replay(r));
        if (tells && replayed && copies.len() >= 2) || (!tells && copies.len() >= 2) {
            return Ok(());
        }
        Err(format!(
            "three deliveries of hook {id} (the first, a plain retry, a replay) returned Ok, \
             but within {limit:?} the destination holds {} copies of it{}: a consumer must \
             find at least the first and the replay under the hook's id (a sink that stores \
             a fresh id per insert loses the hook's identity)",
            copies.len(),
            if tells && !replayed {
                ", none carrying the replay id"
            } else {
                ""
            }
        ))
    };
    cx.read_until_ok(probe, enough).await?;
    // Give a copy the destination should have dropped the time to show up.
    tokio::time::sleep(SETTLE).await;
    let got = cx.read(probe).await?;
    let elapsed = started.elapsed();
    let copies: Vec<&Received> = got.iter().filter(|r| r.id == id).collect();
    for (n, r) in copies.iter().enumerate() {
        let Some(seen) = &r.idempotency_key else {
            return Err(format!(
                "copy {} of hook {id} carries no idempotency key a consumer can see (the \
                 probe read none): redeliveries are certain (a retry after a lost answer, a \
                 replay), and a consumer tells them apart only by the key {key:?}. Store it \
                 with every copy (an attribute, a column, the document id) and read it back \
                 in the probe",
                n + 1
            ));
        };
        ensure!(
            *seen == key,
            "copy {} of hook {id} carries idempotency key {seen:?}, not the hook's {key:?}: \
             a key made afresh per insert makes every redelivery a new hook to consumers",
            n + 1
        );
        let ctx = if is_replay(r) { &replay } else { &first };
        compare(&env, ctx, r, true)?;
    }
    let tells = copies.iter().any(|r| r.replay_id.is_some());
    let replays = copies.iter().filter(|r| is_replay(r)).count();
    let plain = copies.len() - replays;
    let Some(dedupe) = dedupe else {
        return Ok(Outcome::Pass(format!(
            "first delivery, plain retry and replay: {} copies, each with the hook's \
             idempotency key (no dedupe declared: a consumer dedupes on it)",
            copies.len()
        )));
    };
    let window = match dedupe {
        Dedupe::WindowS(s) => format!("a {s} s window"),
        Dedupe::Forever => "no window (forever)".to_owned(),
    };
    if let Dedupe::WindowS(s) = dedupe {
        // A window shorter than the case cannot be judged here: the retry may lawfully be
        // stored again.
        ensure!(
            elapsed < Duration::from_secs(s),
            "the sink declares a dedupe window of {s} s, shorter than this case took \
             ({elapsed:?}): declare the destination's real window"
        );
    }
    if tells {
        ensure!(
            plain == 1 && replays == 1,
            "the sink declares dedupe ({window}), but the destination holds {plain} plain \
             copies and {replays} replay copies of hook {id} after the first delivery, a plain \
             retry and a replay: one copy per key and replay is what it declares (a dedupe id \
             made afresh per insert drops nothing)"
        );
    } else {
        ensure!(
            copies.len() == 2,
            "the sink declares dedupe ({window}), but the destination holds {} copies of hook \
             {id} after the first delivery, a plain retry and a replay: one copy for the \
             delivery and its retry, one for the replay",
            copies.len()
        );
    }
    Ok(Outcome::Pass(format!(
        "first delivery, plain retry and replay: one copy per key and replay, each with the \
         hook's idempotency key (dedupe with {window}, judged {} ms after the first copy)",
        elapsed.as_millis()
    )))
}

/// Whether a copy says it is a replay.
fn is_replay(r: &Received) -> bool {
    r.replay_id.as_ref().is_some_and(Option::is_some)
}

//! `contract`: capabilities answer; planted secrets appear nowhere.

use super::util::{check_secret, envelope, has_userinfo};
use super::{CaseResult, Cx, Outcome, ensure};
use crate::harness::{Fault, Harness};
use ankusa_sink_core::{
    Ctx, Sink, Subject, resolve_batched, resolve_capabilities, resolve_describe, resolve_durable,
    resolve_inline_max_bytes,
};

pub(super) async fn run<H: Harness>(cx: &mut Cx<'_, H>) -> CaseResult {
    let secrets = cx.secrets.clone();
    if secrets.is_empty() && cx.h.takes_credentials() {
        return Err(
            "the harness plants no secrets (Harness::secrets is empty) although the \
             sink's config takes credentials (Harness::takes_credentials): plant a password, \
             token or key in every sink the harness builds and list it in secrets()"
                .into(),
        );
    }
    let setup = cx.destination().await?;
    let sink = &setup.sink;
    resolve_inline_max_bytes(sink).map_err(|e| format!("inline_max_bytes must not panic: {e}"))?;
    let _ = resolve_durable(sink);
    let _ = resolve_batched(sink);
    // The resolvers hide panics; call the methods under catch_unwind to report them.
    let direct = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        (
            sink.durable(),
            sink.batched(),
            sink.inline_max_bytes(),
            sink.describe(&Subject::new("testkit-src", Some("tk_tenant".into()))),
            sink.describe(&Subject::new("testkit-src", None)),
        )
    }));
    let (durable, batched, inline, d1, d2) =
        direct.map_err(|_| "a capability method panicked".to_owned())?;
    let caps = resolve_capabilities(sink).ok_or("capabilities() panicked")?;
    ensure!(
        caps.durable == durable && caps.batched == batched,
        "capabilities() says durable {} batched {}, the methods say {durable} and {batched}",
        caps.durable,
        caps.batched
    );
    ensure!(
        caps.inline_max_bytes == inline.map(std::num::NonZeroUsize::get),
        "capabilities() says inline_max_bytes {:?}, inline_max_bytes() says {inline:?}",
        caps.inline_max_bytes
    );
    ensure!(
        !caps.auth.is_empty(),
        "capabilities().auth is empty: name the modes, or `none`"
    );
    let caps_json = serde_json::to_string(&caps).map_err(|e| e.to_string())?;
    check_secret(&secrets, "capabilities", &caps_json)?;
    for d in [d1, d2, resolve_describe(sink, &Subject::new("x", None))]
        .into_iter()
        .flatten()
    {
        let json = serde_json::to_string(&d).map_err(|e| e.to_string())?;
        check_secret(&secrets, "describe", &json)?;
        check_secret(&secrets, "describe's Debug", &format!("{d:?}"))?;
        let v = serde_json::to_value(&d).map_err(|e| e.to_string())?;
        ensure!(!has_userinfo(&v), "describe contains URL userinfo");
    }
    if secrets.is_empty() {
        return Ok(Outcome::Skip(
            "capabilities answer and describe holds no URL userinfo, but no secret is planted \
             (the harness says the sink's config takes no credentials): leaks in describe, \
             Debug and failures were not looked for"
                .into(),
        ));
    }
    check_secret(&secrets, "the sink's Debug", &format!("{sink:?}"))?;
    check_secret(
        &secrets,
        "the sink's alternate Debug",
        &format!("{sink:#?}"),
    )?;
    drop(setup);
    // Failures of the faults that answer at once must not leak either (every case
    // searches every failure it meets: `Cx::deliver`). A case that met none has checked
    // nothing.
    let before = cx.inspected();
    for fault in [
        Fault::MissingDestination,
        Fault::RefusedCredential,
        Fault::Unreachable,
    ] {
        let Some(s) = cx.fault(fault).await? else {
            continue;
        };
        check_secret(&secrets, "a fault sink's Debug", &format!("{:?}", s.sink))?;
        let env = envelope("contract", &b"{}"[..]);
        let _ = cx.deliver(&s.sink, &env, &Ctx::for_envelope(&env)).await;
        let _ = cx.check(&s.sink).await?;
    }
    let checked = cx.inspected() - before;
    ensure!(
        checked > 0,
        "no fault produced a failure, so no failure was searched for the {} planted secrets: \
         the harness provokes none of the missing destination, refused credential and \
         unreachable faults (Harness::fault), or each delivery and check() under them \
         succeeded",
        secrets.len()
    );
    Ok(Outcome::Pass(format!(
        "{} planted secrets absent from describe, Debug, {checked} fault failures and every \
         log line",
        secrets.len()
    )))
}

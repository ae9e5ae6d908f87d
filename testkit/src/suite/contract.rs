//! `contract`: capabilities answer; planted secrets appear nowhere.

use super::util::{check_secret, envelope, has_userinfo};
use super::{CaseResult, Cx, Outcome, ensure};
use crate::harness::{Fault, Harness};
use ankusa_sink_core::{
    Capabilities, Ctx, OkMeans, Sink, Subject, safe_capabilities, safe_describe,
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
    // Called under catch_unwind, so a panic is reported rather than hidden.
    let direct = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        (
            sink.describe(&Subject::new("testkit-src", Some("tk_tenant".into()))),
            sink.describe(&Subject::new("testkit-src", None)),
        )
    }));
    let (d1, d2) = direct.map_err(|_| "describe() panicked".to_owned())?;
    let caps =
        safe_capabilities(sink).map_err(|e| format!("capabilities() must not panic: {e}"))?;
    if let Some(why) = contradiction(&caps) {
        return Err(format!("capabilities() contradicts itself: {why}"));
    }
    ensure!(
        !caps.auth.is_empty(),
        "capabilities().auth is empty: name the modes, or `none`"
    );
    let caps_json = serde_json::to_string(&caps).map_err(|e| e.to_string())?;
    check_secret(&secrets, "capabilities", &caps_json)?;
    for d in [d1, d2, safe_describe(sink, &Subject::new("x", None))]
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
    let mut configs = check_config(&secrets, "", setup.config_texts())?;
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
        configs += check_config(&secrets, "a fault sink's ", s.config_texts())?;
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
    let configs = if configs == 0 {
        "; no parsed config handed over (Setup::with_config): its Debug was not searched".to_owned()
    } else {
        format!(", {configs} parsed configs' Debug")
    };
    Ok(Outcome::Pass(format!(
        "{} planted secrets absent from describe, Debug, {checked} fault failures and every \
         log line{configs}",
        secrets.len()
    )))
}

/// Search what a setup's parsed config prints ([`Setup::with_config`](crate::Setup::with_config));
/// 1 when there was one to search, else 0.
fn check_config(
    secrets: &[String],
    whose: &str,
    texts: &[(String, String)],
) -> Result<usize, String> {
    for (what, text) in texts {
        check_secret(secrets, &format!("{whose}{what}"), text).map_err(|e| {
            format!(
                "{e}: a parsed sink file prints it wherever it is logged or shown ({{:?}} of \
                 the registry's SinkConfig prints the config's own Debug). Hold the secret as \
                 ankusa_sink_core::Secret, print URLs through redact_url, or write the \
                 config's Debug by hand"
            )
        })?;
    }
    Ok(usize::from(!texts.is_empty()))
}

/// What makes a manifest contradict itself, or `None`: dispatch trusts every field of it, so
/// one that says two things cannot be acted on.
fn contradiction(caps: &Capabilities) -> Option<String> {
    if caps.durable && caps.ok_means == OkMeans::Sent {
        return Some("durable is true, but ok_means says an Ok is only sent".into());
    }
    if caps.dedupe_forever && caps.dedupe_window_s.is_some() {
        return Some(format!(
            "dedupe_forever is true, but dedupe_window_s says {} s",
            caps.dedupe_window_s.unwrap_or_default()
        ));
    }
    if caps.batch.is_some() && !caps.batched {
        return Some("it states batch limits, but batched is false".into());
    }
    if let Some(b) = &caps.batch
        && (b.max_messages == 0 || b.max_bytes == 0)
    {
        return Some(format!(
            "batch limits of {} messages and {} bytes: a batch holds at least one",
            b.max_messages, b.max_bytes
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sink_core::BatchLimits;
    use std::num::NonZeroUsize;

    #[test]
    fn every_contradiction_is_named_and_a_plain_manifest_has_none() {
        let plain = Capabilities::new(true, NonZeroUsize::new(1024));
        assert_eq!(contradiction(&plain), None);
        assert_eq!(contradiction(&plain.clone().with_batch(None)), None);
        // Not durable but stored (a Redis stream without fsync) is no contradiction.
        let stored = Capabilities::new(false, None).with_ok_means(OkMeans::Stored);
        assert_eq!(contradiction(&stored), None);

        let sent = plain.clone().with_ok_means(OkMeans::Sent);
        assert!(contradiction(&sent).unwrap().contains("ok_means"));
        let mut both = plain.clone().with_dedupe_forever();
        both.dedupe_window_s = Some(300);
        assert!(contradiction(&both).unwrap().contains("dedupe_forever"));
        assert_eq!(contradiction(&plain.clone().with_dedupe_forever()), None);
        let mut limits_only = plain.clone().with_batch(Some(BatchLimits {
            max_messages: 10,
            max_bytes: 1 << 20,
            linger_ms: 0,
        }));
        limits_only.batched = false;
        assert!(
            contradiction(&limits_only)
                .unwrap()
                .contains("batched is false")
        );
        let empty_batch = plain.with_batch(Some(BatchLimits {
            max_messages: 0,
            max_bytes: 1 << 20,
            linger_ms: 0,
        }));
        assert!(
            contradiction(&empty_batch)
                .unwrap()
                .contains("at least one")
        );
    }
}

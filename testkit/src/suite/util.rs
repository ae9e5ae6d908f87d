//! Helpers the cases share: test envelopes, field comparison, secret checks.

use super::ensure;
use crate::harness::Received;
use ankusa_sink_core::{Bytes, Claim, ClaimRef, Ctx, Envelope, Failure, SinkFault};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// A unique-per-run id for test envelopes.
pub(crate) fn next_id(tag: &str) -> String {
    crate::support::unique_name(&format!("tk-{tag}"))
}

fn next_seq() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// A small valid envelope for `tag`.
pub(crate) fn envelope(tag: &str, body: impl Into<Bytes>) -> Envelope {
    Envelope::builder(next_id(tag), "testkit-src", body)
        .tenant_id("tk_tenant")
        .received_at(1_700_000_000_000 + (next_seq() as i64))
        .content_type("application/json")
        .build()
        .expect("valid test envelope")
}

/// A claim for `env`'s body, as dispatch would have checked it in.
pub(crate) fn fake_claim(env: &Envelope) -> Claim {
    let tenant = env.tenant_id().unwrap_or("default");
    let r = ClaimRef::new(tenant, ulid::Ulid::new().to_string()).expect("valid tenant");
    Claim::new(r, env.body_sha256().to_owned()).expect("valid digest")
}

/// Fail when any planted secret appears in the text.
pub(crate) fn check_secret(secrets: &[String], what: &str, text: &str) -> Result<(), String> {
    for s in secrets {
        ensure!(
            !s.is_empty() && !text.contains(s.as_str()),
            "a planted secret appears in {what}"
        );
    }
    Ok(())
}

/// Every text a failure shows anyone, each with where it comes from: the failure's
/// `Display`, alternate `Display` and `Debug` (plain and alternate), its reason's `Debug`
/// (which the failure's own `Debug` does not print), and each source of the reason's chain,
/// its `Display` and its `Debug`.
pub(crate) fn failure_texts(f: &Failure) -> Vec<(String, String)> {
    let mut out = vec![
        ("the Display".to_owned(), format!("{f}")),
        ("the alternate Display".to_owned(), format!("{f:#}")),
        ("the Debug".to_owned(), format!("{f:?}")),
        ("the alternate Debug".to_owned(), format!("{f:#?}")),
        ("the reason's Display".to_owned(), format!("{}", f.reason())),
        ("the reason's Debug".to_owned(), format!("{:?}", f.reason())),
        (
            "the reason's alternate Debug".to_owned(),
            format!("{:#?}", f.reason()),
        ),
    ];
    let mut next = f.reason().source();
    let mut depth = 1;
    while let Some(err) = next {
        out.push((format!("source {depth}'s Display"), err.to_string()));
        out.push((format!("source {depth}'s Debug"), format!("{err:?}")));
        next = err.source();
        depth += 1;
    }
    out
}

/// Whether any string in the JSON value is a URL with userinfo.
pub(crate) fn has_userinfo(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::String(s) => {
            url::Url::parse(s).is_ok_and(|u| !u.username().is_empty() || u.password().is_some())
        }
        serde_json::Value::Array(a) => a.iter().any(has_userinfo),
        serde_json::Value::Object(o) => o.values().any(has_userinfo),
        _ => false,
    }
}

/// Whether `safe_deliver` turned a panic into this failure.
pub(crate) fn is_panic(f: &Failure) -> bool {
    matches!(
        f.reason().downcast_ref::<SinkFault>(),
        Some(SinkFault::Panicked(_))
    )
}

/// Whether `safe_deliver` gave up on the sink at the deadline.
pub(crate) fn is_timeout(f: &Failure) -> bool {
    matches!(
        f.reason().downcast_ref::<SinkFault>(),
        Some(SinkFault::Timeout(_))
    )
}

/// A panic payload as text.
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    match SinkFault::panicked(payload) {
        SinkFault::Panicked(text) => text,
        other => other.to_string(),
    }
}

/// How many copies of each id arrived.
pub(crate) fn count_by_id(got: &[Received]) -> HashMap<&str, usize> {
    let mut m = HashMap::new();
    for r in got {
        *m.entry(r.id.as_str()).or_insert(0) += 1;
    }
    m
}

/// Compare what came back with what was sent, field by field where the probe reports it.
pub(crate) fn compare(env: &Envelope, ctx: &Ctx, r: &Received, inline: bool) -> Result<(), String> {
    let id = env.id();
    if let Some(s) = &r.source_id {
        ensure!(
            s == env.source_id(),
            "{id}: source_id {s:?} != {:?}",
            env.source_id()
        );
    }
    if let Some(t) = &r.tenant_id {
        ensure!(
            t.as_deref() == env.tenant_id(),
            "{id}: tenant {t:?} != {:?}",
            env.tenant_id()
        );
    }
    if let Some(k) = &r.idempotency_key {
        ensure!(
            *k == env.idempotency_key(),
            "{id}: idempotency key {k:?} != {:?}",
            env.idempotency_key()
        );
    }
    if let Some(at) = r.received_at {
        ensure!(
            at == env.received_at(),
            "{id}: received_at {at} != {}",
            env.received_at()
        );
    }
    if let Some(rp) = &r.replay_id {
        ensure!(
            *rp == ctx.replay_id,
            "{id}: replay_id {rp:?} != {:?}",
            ctx.replay_id
        );
    }
    if inline {
        ensure!(
            r.claim.is_none(),
            "{id}: expected an inline body, got claim {:?}",
            r.claim
        );
        match &r.body {
            Some(b) => ensure!(
                b == env.body(),
                "{id}: body differs ({} bytes read back, {} sent)",
                b.len(),
                env.body().len()
            ),
            None => return Err(format!("{id}: the probe read back no body")),
        }
    }
    Ok(())
}

/// Varied envelopes, each with its first-attempt context: binary, empty, many large
/// headers, unicode, no tenant, a dedupe key.
pub(crate) fn varied_envelopes() -> Vec<(Envelope, Ctx)> {
    let all_bytes: Vec<u8> = (0..=255u8).collect();
    let mut out = Vec::new();
    let mut push = |env: Envelope| {
        let ctx = Ctx::for_envelope(&env);
        out.push((env, ctx));
    };
    push(envelope("binary", all_bytes));
    push(envelope("empty", Bytes::new()));
    let mut b = envelope("headers", &b"{\"h\":1}"[..]).to_builder();
    for i in 0..40 {
        b = b.header(format!("X-Large-{i}"), "v".repeat(200));
    }
    push(b.build().expect("valid"));
    push(
        envelope("unicode", "{\"ü\":\"ñ\"}")
            .to_builder()
            .header("X-Unicode", "héllo wörld ✓ 日本")
            .header("X-Repeat", "a")
            .header("x-repeat", "b")
            .build()
            .expect("valid"),
    );
    push(
        envelope("notenant", &b"{}"[..])
            .to_builder()
            .tenant(None)
            .build()
            .expect("valid"),
    );
    push(
        envelope("dedupe", &b"{\"evt\":1}"[..])
            .to_builder()
            .dedupe_key("evt_1")
            .build()
            .expect("valid"),
    );
    out
}

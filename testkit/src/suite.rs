//! The conformance cases.

use crate::harness::{Expect, Fault, Harness, Probe, Received, Setup};
use ankusa_sink_core::message::sha256_hex;
use ankusa_sink_core::{
    Bytes, Claim, ClaimRef, Class, Ctx, Envelope, Failure, Sink, SinkFault, Subject,
    resolve_batched, resolve_describe, resolve_durable, resolve_inline_max_bytes, safe_deliver,
};
use futures_util::future::join_all;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Every case of the suite, named as the generated tests are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Case {
    /// Capabilities answer without panicking; thresholds are positive; planted secrets
    /// appear in no `describe`, `Debug` or failure.
    Contract,
    /// Varied envelopes all return Ok and read back exactly; duplicates are reported.
    RoundTrip,
    /// Exactly `inline_max_bytes` is inline; one more byte travels as `ctx.claim`.
    InlineBoundary,
    /// Missing destination is config.
    ClassifyMissingDestination,
    /// Refused credential is config.
    ClassifyRefusedCredential,
    /// Unreachable is transient within a bounded time.
    ClassifyUnreachable,
    /// Throttled is retry-after with `0 < ms <= 1 h`.
    ClassifyThrottled,
    /// Oversized is permanent with nothing delivered.
    ClassifyOversized,
    /// 200 concurrent deliveries all Ok and all read back.
    Concurrency,
    /// A durable sink's every Ok is readable right after the ack.
    Durability,
    /// Odd inputs never make the sink panic; a panic is a failure, not a crash.
    PanicSafety,
    /// A batching sink gives each delivery its own result and never re-sends accepted items.
    Batching,
    /// Deliveries fail transient while the destination is down and succeed afterwards
    /// without rebuilding the sink.
    Recovery,
}

impl Case {
    /// Every case, in suite order.
    pub const ALL: [Case; 13] = [
        Case::Contract,
        Case::RoundTrip,
        Case::InlineBoundary,
        Case::ClassifyMissingDestination,
        Case::ClassifyRefusedCredential,
        Case::ClassifyUnreachable,
        Case::ClassifyThrottled,
        Case::ClassifyOversized,
        Case::Concurrency,
        Case::Durability,
        Case::PanicSafety,
        Case::Batching,
        Case::Recovery,
    ];

    /// The test name.
    pub const fn name(self) -> &'static str {
        match self {
            Case::Contract => "contract",
            Case::RoundTrip => "round_trip",
            Case::InlineBoundary => "inline_boundary",
            Case::ClassifyMissingDestination => "classify_missing_destination",
            Case::ClassifyRefusedCredential => "classify_refused_credential",
            Case::ClassifyUnreachable => "classify_unreachable",
            Case::ClassifyThrottled => "classify_throttled",
            Case::ClassifyOversized => "classify_oversized",
            Case::Concurrency => "concurrency",
            Case::Durability => "durability",
            Case::PanicSafety => "panic_safety",
            Case::Batching => "batching",
            Case::Recovery => "recovery",
        }
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a case found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every check held; the text says what was checked.
    Pass(String),
    /// The case could not run (capability not declared, fault not provokable, no probe).
    Skip(String),
    /// A check failed; the text says which and why.
    Fail(String),
}

impl Outcome {
    /// Whether this is a failure.
    pub fn is_fail(&self) -> bool {
        matches!(self, Outcome::Fail(_))
    }
    /// Whether this is a skip.
    pub fn is_skip(&self) -> bool {
        matches!(self, Outcome::Skip(_))
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Pass(s) => write!(f, "pass ({s})"),
            Outcome::Skip(s) => write!(f, "SKIP ({s})"),
            Outcome::Fail(s) => write!(f, "FAIL ({s})"),
        }
    }
}

type CaseResult = Result<Outcome, String>;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// Run one case against the harness.
pub async fn run_case<H: Harness>(harness: &H, case: Case) -> Outcome {
    let r = match case {
        Case::Contract => contract(harness).await,
        Case::RoundTrip => round_trip(harness).await,
        Case::InlineBoundary => inline_boundary(harness).await,
        Case::ClassifyMissingDestination => classify(harness, Fault::MissingDestination).await,
        Case::ClassifyRefusedCredential => classify(harness, Fault::RefusedCredential).await,
        Case::ClassifyUnreachable => classify(harness, Fault::Unreachable).await,
        Case::ClassifyThrottled => classify(harness, Fault::Throttled).await,
        Case::ClassifyOversized => classify(harness, Fault::Oversized).await,
        Case::Concurrency => concurrency(harness).await,
        Case::Durability => durability(harness).await,
        Case::PanicSafety => panic_safety(harness).await,
        Case::Batching => batching(harness).await,
        Case::Recovery => recovery(harness).await,
    };
    r.unwrap_or_else(Outcome::Fail)
}

/// A unique-per-process id for test envelopes.
fn next_id(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "tk-{tag}-{now:x}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A small valid envelope for `tag`.
fn envelope(tag: &str, body: impl Into<Bytes>) -> Envelope {
    Envelope::builder(next_id(tag), "testkit-src", body)
        .tenant_id("tk_tenant")
        .received_at(1_700_000_000_000 + (next_seq() as i64))
        .content_type("application/json")
        .build()
        .expect("valid test envelope")
}

fn next_seq() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

async fn destination<H: Harness>(h: &H) -> Result<Setup<H::Sink>, String> {
    h.destination()
        .await
        .map_err(|e| format!("harness could not build a destination: {e}"))
}

async fn deliver<H: Harness, S: Sink + ?Sized>(
    h: &H,
    sink: &S,
    env: &Envelope,
    ctx: &Ctx,
) -> Result<(), Failure> {
    safe_deliver(sink, env, ctx, Some(h.deadline())).await
}

/// Fail when any planted secret appears in the text.
fn check_secret(secrets: &[String], what: &str, text: &str) -> Result<(), String> {
    for s in secrets {
        ensure!(
            !s.is_empty() && !text.contains(s.as_str()),
            "a planted secret appears in {what}"
        );
    }
    Ok(())
}

fn check_failure_secrets(secrets: &[String], f: &Failure) -> Result<(), String> {
    check_secret(secrets, "a failure's Display", &format!("{f} / {f:#}"))?;
    check_secret(secrets, "a failure's Debug", &format!("{f:?}"))
}

/// Whether any string in the JSON value is a URL with userinfo.
fn has_userinfo(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::String(s) => {
            url::Url::parse(s).is_ok_and(|u| !u.username().is_empty() || u.password().is_some())
        }
        serde_json::Value::Array(a) => a.iter().any(has_userinfo),
        serde_json::Value::Object(o) => o.values().any(has_userinfo),
        _ => false,
    }
}

fn is_panic(f: &Failure) -> bool {
    matches!(
        f.reason().downcast_ref::<SinkFault>(),
        Some(SinkFault::Panicked(_))
    )
}

/// Wait until the probe shows every id in `want`; returns everything received.
async fn read_until<H: Harness>(
    h: &H,
    probe: &dyn Probe,
    want: &[&str],
) -> Result<Vec<Received>, String> {
    let deadline = Instant::now() + h.read_timeout();
    let mut pause = Duration::from_millis(20);
    loop {
        let got = probe
            .received()
            .await
            .map_err(|e| format!("probe failed: {e}"))?;
        let missing: Vec<&str> = want
            .iter()
            .copied()
            .filter(|id| !got.iter().any(|r| r.id == *id))
            .collect();
        if missing.is_empty() {
            return Ok(got);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{} of {} delivered hooks (each returned Ok) never reached the destination \
                 within {:?}; first missing: {}",
                missing.len(),
                want.len(),
                h.read_timeout(),
                missing[0]
            ));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

fn count_by_id(got: &[Received]) -> HashMap<&str, usize> {
    let mut m = HashMap::new();
    for r in got {
        *m.entry(r.id.as_str()).or_insert(0) += 1;
    }
    m
}

/// Compare what came back with what was sent, field by field where the probe reports it.
fn compare(env: &Envelope, ctx: &Ctx, r: &Received, inline: bool) -> Result<(), String> {
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

async fn contract<H: Harness>(h: &H) -> CaseResult {
    let secrets = h.secrets();
    let setup = destination(h).await?;
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
    let (_, _, _, d1, d2) = direct.map_err(|_| "a capability method panicked".to_owned())?;
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
    check_secret(&secrets, "the sink's Debug", &format!("{sink:?}"))?;
    check_secret(
        &secrets,
        "the sink's alternate Debug",
        &format!("{sink:#?}"),
    )?;
    // Failures from every provokable fault must not leak either.
    let mut checked = 0;
    for fault in [
        Fault::MissingDestination,
        Fault::RefusedCredential,
        Fault::Unreachable,
    ] {
        let Some(s) = h.fault(fault).await.map_err(|e| e.to_string())? else {
            continue;
        };
        check_secret(&secrets, "a fault sink's Debug", &format!("{:?}", s.sink))?;
        let env = envelope("contract", &b"{}"[..]);
        if let Err(f) = deliver(h, &s.sink, &env, &Ctx::for_envelope(&env)).await {
            check_failure_secrets(&secrets, &f)?;
            checked += 1;
        }
        if let Err(f) = s.sink.check().await {
            check_failure_secrets(&secrets, &f)?;
        }
    }
    Ok(Outcome::Pass(format!(
        "{} planted secrets absent from describe, Debug and {checked} fault failures",
        secrets.len()
    )))
}

fn round_trip_set() -> Vec<(Envelope, Ctx)> {
    let all_bytes: Vec<u8> = (0..=255u8).collect();
    let mut out = Vec::new();
    let mut push = |env: Envelope, ctx: Option<Ctx>| {
        let ctx = ctx.unwrap_or_else(|| Ctx::for_envelope(&env));
        out.push((env, ctx));
    };
    push(envelope("binary", all_bytes), None);
    push(envelope("empty", Bytes::new()), None);
    let mut b = envelope("headers", &b"{\"h\":1}"[..]).to_builder();
    for i in 0..40 {
        b = b.header(format!("X-Large-{i}"), "v".repeat(200));
    }
    push(b.build().expect("valid"), None);
    let unicode = envelope("unicode", "{\"ü\":\"ñ\"}")
        .to_builder()
        .header("X-Unicode", "héllo wörld ✓ 日本")
        .header("X-Repeat", "a")
        .header("x-repeat", "b")
        .build()
        .expect("valid");
    push(unicode, None);
    let no_tenant = envelope("notenant", &b"{}"[..])
        .to_builder()
        .tenant(None)
        .build()
        .expect("valid");
    push(no_tenant, None);
    let dedupe = envelope("dedupe", &b"{\"evt\":1}"[..])
        .to_builder()
        .dedupe_key("evt_1")
        .build()
        .expect("valid");
    push(dedupe, None);
    let replay = envelope("replay", &b"{\"replay\":true}"[..]);
    let ctx = Ctx::for_envelope(&replay)
        .with_replay_id("replay-1")
        .with_attempt(2);
    push(replay, Some(ctx));
    out
}

async fn round_trip<H: Harness>(h: &H) -> CaseResult {
    let secrets = h.secrets();
    let setup = destination(h).await?;
    let max = setup
        .sink
        .inline_max_bytes()
        .map_or(usize::MAX, |n| n.get());
    let set: Vec<(Envelope, Ctx)> = round_trip_set()
        .into_iter()
        .filter(|(e, _)| e.body().len() <= max)
        .collect();
    for (env, ctx) in &set {
        if let Err(f) = deliver(h, &setup.sink, env, ctx).await {
            check_failure_secrets(&secrets, &f)?;
            return Err(format!("delivery of {} failed: {f}", env.id()));
        }
    }
    let Some(probe) = setup.probe.as_deref() else {
        return Ok(Outcome::Skip(format!(
            "no probe: {} deliveries returned Ok but none can be read back",
            set.len()
        )));
    };
    let ids: Vec<&str> = set.iter().map(|(e, _)| e.id()).collect();
    let got = read_until(h, probe, &ids).await?;
    let counts = count_by_id(&got);
    for (env, ctx) in &set {
        for r in got.iter().filter(|r| r.id == env.id()) {
            compare(env, ctx, r, true)?;
        }
    }
    let dups: usize = ids.iter().map(|id| counts[id] - 1).sum();
    Ok(Outcome::Pass(format!(
        "{} envelopes read back exactly; {dups} duplicates",
        set.len()
    )))
}

fn fake_claim(env: &Envelope) -> Claim {
    let tenant = env.tenant_id().unwrap_or("default");
    let r = ClaimRef::new(tenant, ulid::Ulid::new()).expect("valid tenant");
    Claim::new(r, sha256_hex(env.body())).expect("valid digest")
}

async fn inline_boundary<H: Harness>(h: &H) -> CaseResult {
    let setup = destination(h).await?;
    let Some(max) = setup.sink.inline_max_bytes() else {
        return Ok(Outcome::Skip(
            "the sink declares no inline threshold (never uses the claim check)".into(),
        ));
    };
    let max = max.get();
    let at = envelope("inline-at", vec![b'a'; max]);
    let over = envelope("inline-over", vec![b'b'; max + 1]);
    let at_ctx = Ctx::for_envelope(&at);
    deliver(h, &setup.sink, &at, &at_ctx)
        .await
        .map_err(|f| format!("a body of exactly inline_max_bytes ({max}) failed: {f}"))?;
    // Over the threshold with no claim: the sink must refuse (it never checks in itself).
    let bare = envelope("inline-noclaim", vec![b'c'; max + 1]);
    match deliver(h, &setup.sink, &bare, &Ctx::for_envelope(&bare)).await {
        Ok(()) => {
            return Err(format!(
                "a body of {} bytes (> inline_max_bytes) without ctx.claim returned Ok: \
                 the sink inlined it or checked it in itself",
                max + 1
            ));
        }
        Err(f) => ensure!(
            f.class().is_permanent(),
            "an oversized body without ctx.claim must be a permanent/config failure, got {f}"
        ),
    }
    let claim = fake_claim(&over);
    let over_ctx = Ctx::for_envelope(&over).with_claim(claim.clone());
    deliver(h, &setup.sink, &over, &over_ctx)
        .await
        .map_err(|f| format!("a body of inline_max_bytes + 1 with ctx.claim failed: {f}"))?;
    let Some(probe) = setup.probe.as_deref() else {
        return Ok(Outcome::Skip(
            "no probe: both deliveries returned Ok, what travelled cannot be read back".into(),
        ));
    };
    let got = read_until(h, probe, &[at.id(), over.id()]).await?;
    for r in got.iter().filter(|r| r.id == at.id()) {
        compare(&at, &at_ctx, r, true)?;
    }
    for r in got.iter().filter(|r| r.id == over.id()) {
        compare(&over, &over_ctx, r, false)?;
        ensure!(
            r.body.is_none(),
            "a body over inline_max_bytes travelled inline"
        );
        ensure!(
            r.claim.as_deref() == Some(claim.reference().to_string().as_str()),
            "expected claim {}, read back {:?}",
            claim.reference(),
            r.claim
        );
    }
    ensure!(
        !got.iter().any(|r| r.id == bare.id()),
        "the refused oversized body still reached the destination"
    );
    Ok(Outcome::Pass(format!(
        "{max} bytes inline, {} bytes by the given claim",
        max + 1
    )))
}

async fn classify<H: Harness>(h: &H, fault: Fault) -> CaseResult {
    let secrets = h.secrets();
    let Some(setup) = h.fault(fault).await.map_err(|e| e.to_string())? else {
        return Ok(Outcome::Skip(format!(
            "the harness cannot provoke {fault:?}"
        )));
    };
    let env = match (fault, setup.body_size) {
        (Fault::Oversized, Some(n)) => envelope("oversized", vec![b'o'; n]),
        (Fault::Oversized, None) => {
            return Err("Fault::Oversized needs Setup::body_size".into());
        }
        _ => envelope("fault", &b"{}"[..]),
    };
    let mut ctx = Ctx::for_envelope(&env);
    if setup
        .sink
        .inline_max_bytes()
        .is_some_and(|m| env.body().len() > m.get())
    {
        ctx = ctx.with_claim(fake_claim(&env));
    }
    let started = Instant::now();
    let res = deliver(h, &setup.sink, &env, &ctx).await;
    let elapsed = started.elapsed();
    let Err(f) = res else {
        return Err(format!("{fault:?}: delivery returned Ok"));
    };
    check_failure_secrets(&secrets, &f)?;
    ensure!(!is_panic(&f), "{fault:?}: the sink panicked: {f}");
    match fault {
        Fault::MissingDestination | Fault::RefusedCredential => {
            ensure!(
                f.class() == Class::Config,
                "{fault:?} must be config, got {f}"
            );
        }
        Fault::Unreachable => {
            ensure!(
                f.class() == Class::Transient,
                "unreachable must be transient, got {f}"
            );
            ensure!(
                !matches!(
                    f.reason().downcast_ref::<SinkFault>(),
                    Some(SinkFault::Timeout(_))
                ),
                "unreachable: the sink did not answer within the {:?} deadline",
                h.deadline()
            );
        }
        Fault::Throttled => {
            let ms = f
                .class()
                .retry_after_ms()
                .ok_or_else(|| format!("throttled must be retry-after, got {f}"))?;
            ensure!(
                ms > 0 && ms <= 3_600_000,
                "retry-after must be in 1..=3600000 ms, got {ms}"
            );
        }
        Fault::Oversized => {
            ensure!(
                f.class() == Class::Permanent,
                "oversized must be permanent, got {f}"
            );
            if let Some(probe) = setup.probe.as_deref() {
                // Give a wrongly sent body a moment to arrive before declaring none did.
                tokio::time::sleep(Duration::from_millis(300)).await;
                let got = probe.received().await.map_err(|e| e.to_string())?;
                ensure!(
                    !got.iter().any(|r| r.id == env.id()),
                    "the oversized hook reached the destination"
                );
            }
        }
    }
    if matches!(fault, Fault::MissingDestination | Fault::RefusedCredential) {
        match setup.sink.check().await {
            Err(cf) => {
                check_failure_secrets(&secrets, &cf)?;
                ensure!(
                    cf.class() == Class::Config,
                    "check() for {fault:?} must be config, got {cf}"
                );
            }
            Ok(ankusa_sink_core::Check::Passed) => {
                return Err(format!("check() passed although {fault:?}"));
            }
            // Reachable or no preflight: neither claims the destination is usable.
            Ok(_) => {}
        }
    }
    Ok(Outcome::Pass(format!(
        "{} in {} ms",
        f.class(),
        elapsed.as_millis()
    )))
}

async fn concurrency<H: Harness>(h: &H) -> CaseResult {
    const N: usize = 200;
    let setup = destination(h).await?;
    let envs: Vec<Envelope> = (0..N)
        .map(|i| envelope("conc", format!("{{\"n\":{i}}}")))
        .collect();
    let results = join_all(envs.iter().map(|e| {
        let ctx = Ctx::for_envelope(e);
        let sink = &setup.sink;
        async move { deliver(h, sink, e, &ctx).await }
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
        return Ok(Outcome::Skip(format!(
            "no probe: {N} concurrent deliveries returned Ok, none can be read back"
        )));
    };
    let ids: Vec<&str> = envs.iter().map(Envelope::id).collect();
    let got = read_until(h, probe, &ids).await?;
    let counts = count_by_id(&got);
    let dups: usize = ids.iter().map(|id| counts[id] - 1).sum();
    Ok(Outcome::Pass(format!(
        "{N} concurrent deliveries Ok and read back; {dups} duplicates"
    )))
}

async fn durability<H: Harness>(h: &H) -> CaseResult {
    let setup = destination(h).await?;
    if !resolve_durable(&setup.sink) {
        return Ok(Outcome::Skip("the sink declares itself not durable".into()));
    }
    let Some(probe) = setup.probe.as_deref() else {
        return Ok(Outcome::Skip(
            "no probe: durability after the ack cannot be observed".into(),
        ));
    };
    for i in 0..20 {
        let env = envelope("durable", format!("{{\"d\":{i}}}"));
        deliver(h, &setup.sink, &env, &Ctx::for_envelope(&env))
            .await
            .map_err(|f| format!("delivery {i} failed: {f}"))?;
        read_until(h, probe, &[env.id()])
            .await
            .map_err(|e| format!("after the ack of delivery {i}: {e}"))?;
    }
    Ok(Outcome::Pass(
        "20 acked deliveries each readable right after the ack".into(),
    ))
}

async fn panic_safety<H: Harness>(h: &H) -> CaseResult {
    let setup = destination(h).await?;
    let mut odd: Vec<(Envelope, Ctx)> = round_trip_set();
    let max = setup.sink.inline_max_bytes();
    let big = envelope("big", vec![0u8; max.map_or(1 << 20, |m| m.get() + 1)]);
    let big_ctx = Ctx::for_envelope(&big);
    odd.push((big, big_ctx));
    let e = envelope("attempt", &b"{}"[..]);
    let c = Ctx::for_envelope(&e)
        .with_attempt(u32::MAX)
        .with_batch(true);
    odd.push((e, c));
    let mut failures = 0;
    for (env, ctx) in &odd {
        if let Err(f) = deliver(h, &setup.sink, env, ctx).await {
            ensure!(!is_panic(&f), "delivering {} panicked: {f}", env.id());
            failures += 1;
        }
    }
    Ok(Outcome::Pass(format!(
        "{} odd deliveries without a panic ({failures} refused cleanly)",
        odd.len()
    )))
}

async fn batching<H: Harness>(h: &H) -> CaseResult {
    let setup = destination(h).await?;
    if !resolve_batched(&setup.sink) {
        return Ok(Outcome::Skip("the sink does not batch".into()));
    }
    let mixed = h.mixed_batch().await.map_err(|e| e.to_string())?;
    let (setup, plan): (Setup<H::Sink>, Vec<(Envelope, Expect)>) = match mixed {
        Some(m) => (m.setup, m.envelopes),
        None => {
            let plan = (0..30)
                .map(|i| (envelope("batch", format!("{{\"b\":{i}}}")), Expect::Ok))
                .collect();
            (setup, plan)
        }
    };
    let results = join_all(plan.iter().map(|(e, _)| {
        let ctx = Ctx::for_envelope(e).with_batch(true);
        let sink = &setup.sink;
        async move { deliver(h, sink, e, &ctx).await }
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
        return Ok(Outcome::Skip(format!(
            "no probe: {} batched deliveries had their own results, re-sends cannot be seen",
            plan.len()
        )));
    };
    let got = read_until(h, probe, &accepted).await?;
    // Let any re-send arrive before counting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = probe
        .received()
        .await
        .map_err(|e| e.to_string())
        .map(|mut later| {
            if later.len() < got.len() {
                later = got;
            }
            later
        })?;
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
    Ok(Outcome::Pass(format!(
        "{} batched deliveries, each its own result, accepted items sent once",
        plan.len()
    )))
}

/// Starts the destination again even when the case fails midway.
struct Restart<'a, H: Harness>(&'a H, bool);

impl<H: Harness> Drop for Restart<'_, H> {
    fn drop(&mut self) {
        if self.1 {
            let h = self.0;
            // Drop cannot await; block this worker thread briefly (the suite runs on a
            // multi-threaded runtime).
            let _ = tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(h.start())
            });
        }
    }
}

async fn recovery<H: Harness>(h: &H) -> CaseResult {
    if !h.can_restart() {
        return Ok(Outcome::Skip(
            "the harness cannot stop and restart its destination".into(),
        ));
    }
    let setup = destination(h).await?;
    let first = envelope("before", &b"{}"[..]);
    deliver(h, &setup.sink, &first, &Ctx::for_envelope(&first))
        .await
        .map_err(|f| format!("delivery before the outage failed: {f}"))?;
    h.stop().await.map_err(|e| format!("stop failed: {e}"))?;
    let mut guard = Restart(h, true);
    let during = envelope("during", &b"{}"[..]);
    match deliver(h, &setup.sink, &during, &Ctx::for_envelope(&during)).await {
        Ok(()) => return Err("a delivery while the destination was down returned Ok".into()),
        Err(f) => {
            ensure!(
                f.class() == Class::Transient,
                "a delivery during the outage must be transient, got {f}"
            );
            ensure!(
                !matches!(
                    f.reason().downcast_ref::<SinkFault>(),
                    Some(SinkFault::Timeout(_))
                ),
                "a delivery during the outage hung past the {:?} deadline",
                h.deadline()
            );
        }
    }
    guard.1 = false;
    h.start().await.map_err(|e| format!("start failed: {e}"))?;
    let after = envelope("after", &b"{}"[..]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut attempt = 1;
    loop {
        let ctx = Ctx::for_envelope(&after).with_attempt(attempt);
        match deliver(h, &setup.sink, &after, &ctx).await {
            Ok(()) => break,
            Err(f) if Instant::now() < deadline && !f.class().is_permanent() => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(f) => {
                return Err(format!(
                    "the same sink did not recover within 60 s after the restart: {f}"
                ));
            }
        }
    }
    if let Some(probe) = setup.probe.as_deref() {
        read_until(h, probe, &[after.id()]).await?;
    }
    Ok(Outcome::Pass(format!(
        "transient while down, recovered after {attempt} attempts"
    )))
}

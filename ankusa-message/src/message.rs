//! Message v1: the one JSON wire format every queue sink sends, byte for byte.
//!
//! | Key | Type | Notes |
//! | --- | --- | --- |
//! | `v` | `1` | |
//! | `id`, `source_id` | string | |
//! | `tenant_id` | string or null | |
//! | `received_at` | integer | Unix ms |
//! | `content_type` | string or null | the provider's content type |
//! | `size` | integer | body bytes |
//! | `dedupe_key`, `replay_id` | string or null | |
//! | `idempotency_key` | string | [`Envelope::idempotency_key`] |
//! | `headers` | object | forwarded provider headers, lowercase ([`forwarded_headers`]) |
//! | `sha256` | 64 lowercase hex | digest of the raw body, inline or claimed |
//! | `body_base64` | string | present iff inline (standard base64, padded) |
//! | `claim` | string | present iff claimed: `urn:ankusa:claim:v1:<tenant>:<ULID>` |
//!
//! [`json_schema`] is this table as a JSON Schema. A sink builds what it sends with
//! [`Outgoing::new`] from its [`Layout`]: the body, the idempotency key, the [`Attr`] list
//! and the key, once; [`encode`] is the same body alone, for code that needs only the bytes.

use crate::forwarding::forwarded_headers;
use ankusa_sink_core::{Ctx, Envelope, Failure};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::num::NonZeroUsize;

/// How the body travels in a Message v1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyMode {
    /// In `body_base64`.
    Inline,
    /// By `claim`.
    Claim,
}

/// Whether a body of `size` bytes goes inline under threshold `max` (`None`: always).
/// Inclusive: exactly `max` bytes is inline.
pub fn body_mode(size: u64, max: Option<NonZeroUsize>) -> BodyMode {
    match max {
        Some(max) if size > max.get() as u64 => BodyMode::Claim,
        _ => BodyMode::Inline,
    }
}

/// The default inline threshold of queue sinks: 64 KiB.
pub const DEFAULT_INLINE_MAX_BYTES: NonZeroUsize = NonZeroUsize::new(65_536).unwrap();

/// Lowercase hex sha256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Why an envelope could not be encoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The body is over the sink's inline threshold and no claim was handed over.
    #[error(
        "body of {size} bytes exceeds inline_max_bytes {max} and ctx.claim is absent: \
         configure a claim-check store in dispatch (ankusa-claimcheck) or raise inline_max_bytes"
    )]
    NoClaim {
        /// Body size.
        size: u64,
        /// The threshold.
        max: usize,
    },
    /// The claim's digest is not the body's.
    #[error("ctx.claim sha256 does not match the body's sha256: the claim is for another body")]
    ClaimDigestMismatch,
    /// The claim is filed under another tenant than the envelope's partition.
    #[error(
        "ctx.claim belongs to tenant {claim:?} but the envelope's partition is {envelope:?}: \
         the claim is for another tenant's body"
    )]
    ClaimTenantMismatch {
        /// The claim's tenant.
        claim: String,
        /// The envelope's partition (its tenant, or `default`).
        envelope: String,
    },
}

impl From<EncodeError> for Failure {
    /// Both are the operator's to fix: a missing claim store, or a dispatcher handing the
    /// wrong claim.
    fn from(e: EncodeError) -> Self {
        // Refused before anything was sent.
        Failure::config(e).with_may_have_landed(Some(false))
    }
}

/// Message v1 JSON written straight into a buffer: member names are literals and a string
/// that needs no escaping is copied whole, where `serde_json` escaped every name and scanned
/// every value byte by byte (a third of the encode). The bytes are `serde_json`'s exactly
/// (a test compares the two on every kind of field).
struct JsonOut<'o>(&'o mut Vec<u8>);

impl JsonOut<'_> {
    /// `,"name":` (or `{"name":` for the first member); `name` needs no escaping.
    fn name(&mut self, first: bool, name: &str) {
        self.0.push(if first { b'{' } else { b',' });
        self.0.push(b'"');
        self.0.extend_from_slice(name.as_bytes());
        self.0.extend_from_slice(b"\":");
    }

    /// A JSON string, escaped as `serde_json` escapes it.
    fn str(&mut self, s: &str) {
        push_json_str(self.0, s);
    }

    fn opt_str(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.str(s),
            None => self.0.extend_from_slice(b"null"),
        }
    }

    fn int(&mut self, n: impl itoa::Integer) {
        self.0
            .extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    }
}

/// Appends `s` to `out` as a JSON string, byte for byte as `serde_json` writes it, without
/// its serializer where nothing needs escaping (the common case: ids, names, base64).
pub fn push_json_str(out: &mut Vec<u8>, s: &str) {
    // No early exit, so the check runs over whole words at a time.
    let plain = s
        .bytes()
        .fold(true, |ok, b| ok & (b >= 0x20) & (b != b'"') & (b != b'\\'));
    if plain {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(out, s).expect("writing to a Vec cannot fail");
    }
}

/// The members of a Message v1 before its body, in the format's order (`body_base64` or
/// `claim` follows).
fn write_members(
    w: &mut JsonOut<'_>,
    env: &Envelope,
    ctx: &Ctx,
    idempotency_key: &str,
    headers: &[(Cow<'_, str>, Cow<'_, str>)],
    sha256: &str,
) {
    w.name(true, "v");
    w.int(1u8);
    w.name(false, "id");
    w.str(env.id());
    w.name(false, "source_id");
    w.str(env.source_id());
    w.name(false, "tenant_id");
    w.opt_str(env.tenant_id());
    w.name(false, "received_at");
    w.int(env.received_at());
    w.name(false, "content_type");
    w.opt_str(env.content_type());
    w.name(false, "size");
    w.int(env.size());
    w.name(false, "dedupe_key");
    w.opt_str(env.dedupe_key());
    w.name(false, "replay_id");
    w.opt_str(ctx.replay_id.as_deref());
    w.name(false, "idempotency_key");
    w.str(idempotency_key);
    w.name(false, "headers");
    w.0.push(b'{');
    for (i, (k, v)) in headers.iter().enumerate() {
        if i > 0 {
            w.0.push(b',');
        }
        w.str(k);
        w.0.push(b':');
        w.str(v);
    }
    w.0.push(b'}');
    w.name(false, "sha256");
    w.str(sha256);
}

/// Encode `env` as Message v1 JSON: the body alone of what [`Outgoing::new`](crate::Outgoing::new) builds with
/// [`Layout::message`](crate::Layout::message)`(inline_max_bytes, _)`, byte for byte.
///
/// A sink builds what it sends with [`Layout`](crate::Layout) (once, in its constructor) and [`Outgoing`](crate::Outgoing)
/// (per delivery): the same body plus the attributes, the signature and the key, computed
/// once. This shorthand is for code that needs only the bytes: tests comparing what a
/// destination holds, consumers, benches.
///
/// # Behavior
/// - Inline (`body_base64`) when `env.size() <= inline_max_bytes` (inclusive) or the
///   threshold is `None`; otherwise `claim` from `ctx.claim`.
/// - `sha256` is the raw body's digest in both cases; a claim whose digest differs is
///   refused ([`EncodeError::ClaimDigestMismatch`]), and so is a claim of another tenant
///   than the envelope's partition ([`EncodeError::ClaimTenantMismatch`]).
/// - Over the threshold with no `ctx.claim`: [`EncodeError::NoClaim`] (a config failure),
///   nothing is checked in here: dispatch checks in once.
/// - Deterministic: the same inputs give the same bytes.
pub fn encode(
    env: &Envelope,
    ctx: &Ctx,
    inline_max_bytes: Option<NonZeroUsize>,
) -> Result<Vec<u8>, EncodeError> {
    let headers = forwarded_headers(env, ctx);
    encode_with(env, ctx, inline_max_bytes, &env.idempotency_key(), &headers)
}

/// [`encode`] with the idempotency key and forwarded headers already computed (by
/// [`Outgoing`], which sends them again as attributes).
pub(crate) fn encode_with(
    env: &Envelope,
    ctx: &Ctx,
    inline_max_bytes: Option<NonZeroUsize>,
    idempotency_key: &str,
    headers: &[(Cow<'_, str>, Cow<'_, str>)],
) -> Result<Vec<u8>, EncodeError> {
    let sha256 = env.body_sha256();
    // The one inline/claim decision, shared with `Fields` for sinks that store columns.
    let claim = match crate::fields::body_or_claim(env, ctx, inline_max_bytes)? {
        crate::fields::BodyRef::Inline(_) => None,
        crate::fields::BodyRef::Claim(r) => Some(r),
    };
    let b64_len = match claim {
        None => base64::encoded_len(env.body().len(), true).expect("a body fits in memory"),
        Some(_) => 0,
    };
    let mut out = Vec::with_capacity(768 + b64_len);
    let mut w = JsonOut(&mut out);
    write_members(&mut w, env, ctx, idempotency_key, headers, sha256);
    match claim {
        Some(r) => {
            w.name(false, "claim");
            w.str(&r.to_string());
        }
        None => {
            // Base64 straight into the output: its alphabet never needs JSON escaping.
            w.name(false, "body_base64");
            w.0.push(b'"');
            // SIMD base64 (AVX2/SSSE3/NEON, detected at run time) writes into the spare
            // capacity: 3x the scalar encoder at 64 KiB and no zero-fill first.
            let start = w.0.len();
            base64_simd::STANDARD.encode_append(env.body(), &mut *w.0);
            debug_assert_eq!(w.0.len() - start, b64_len);
            w.0.push(b'"');
        }
    }
    w.0.push(b'}');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signing::{DEFAULT_TOLERANCE, VerifyError};
    use crate::test_support::{env, nz};
    use crate::{
        Attr, DecodeError, EmptyValues, Layout, MessageBody, Outgoing, VerifiedError, decode,
        json_schema, verify,
    };
    use ankusa_sink_core::{Claim, ClaimRef};
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use bytes::Bytes;
    use serde::ser::SerializeMap;
    use serde::{Serialize, Serializer};
    use std::time::SystemTime;

    #[test]
    fn exact_bytes_inline() {
        let e = env();
        let ctx = Ctx::for_envelope(&e).with_replay_id("r1");
        let out = String::from_utf8(encode(&e, &ctx, Some(nz(5))).unwrap()).unwrap();
        let sha = sha256_hex(b"hello");
        assert_eq!(
            out,
            format!(
                "{{\"v\":1,\"id\":\"h1\",\"source_id\":\"stripe\",\"tenant_id\":\"acme\",\
                 \"received_at\":1700000000123,\"content_type\":\"application/json\",\"size\":5,\
                 \"dedupe_key\":\"evt_1\",\"replay_id\":\"r1\",\
                 \"idempotency_key\":\"acme:stripe:evt_1\",\
                 \"headers\":{{\"stripe-signature\":\"t=1\",\"x-multi\":\"a, b\"}},\
                 \"sha256\":\"{sha}\",\"body_base64\":\"aGVsbG8=\"}}"
            )
        );
        assert_eq!(
            sha,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
    }

    #[test]
    fn nulls_when_absent() {
        let e = Envelope::builder("h", "s", "")
            .received_at(1)
            .build()
            .unwrap();
        let out = encode(&e, &Ctx::for_envelope(&e), None).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert!(v["tenant_id"].is_null() && v["replay_id"].is_null());
        assert!(v["dedupe_key"].is_null() && v["content_type"].is_null());
        assert_eq!(v["headers"], serde_json::json!({}));
        assert_eq!(v["body_base64"], "");
        assert_eq!(v["idempotency_key"], "h");
    }

    #[test]
    fn threshold_is_inclusive_and_claim_is_used_above_it() {
        let e = env();
        let ctx = Ctx::for_envelope(&e);
        assert!(decode(&encode(&e, &ctx, Some(nz(5))).unwrap()).is_ok());
        let err = encode(&e, &ctx, Some(nz(4))).unwrap_err();
        assert!(matches!(err, EncodeError::NoClaim { size: 5, max: 4 }));
        assert_eq!(Failure::from(err).class(), ankusa_sink_core::Class::Config);

        let r: ClaimRef = "urn:ankusa:claim:v1:acme:01ARZ3NDEKTSV4RRFFQ69G5FAV"
            .parse()
            .unwrap();
        let claim = Claim::new(r.clone(), sha256_hex(b"hello")).unwrap();
        let ctx = ctx.with_claim(claim);
        let out = encode(&e, &ctx, Some(nz(4))).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["claim"], r.to_string());
        assert!(v.get("body_base64").is_none());
        assert_eq!(v["sha256"], sha256_hex(b"hello"));
        // Under the threshold the claim is ignored: the body goes inline.
        let v: serde_json::Value =
            serde_json::from_slice(&encode(&e, &ctx, Some(nz(5))).unwrap()).unwrap();
        assert!(v.get("claim").is_none());

        let wrong = Claim::new(r, "0".repeat(64)).unwrap();
        let ctx = Ctx::for_envelope(&e).with_claim(wrong);
        assert!(matches!(
            encode(&e, &ctx, Some(nz(4))),
            Err(EncodeError::ClaimDigestMismatch)
        ));
    }

    #[test]
    fn decode_round_trip_and_verification() {
        let e = env();
        let ctx = Ctx::for_envelope(&e);
        let bytes = encode(&e, &ctx, None).unwrap();
        let m = decode(&bytes).unwrap();
        assert_eq!(m.body, MessageBody::Inline(Bytes::from_static(b"hello")));
        assert_eq!(m.idempotency_key, "acme:stripe:evt_1");
        assert_eq!(m.received_at, 1_700_000_000_123);
        assert_eq!(m.headers[0], ("stripe-signature".into(), "t=1".into()));

        let text = String::from_utf8(bytes).unwrap();
        let tampered = text.replace("aGVsbG8=", "SGVsbG8=");
        assert!(matches!(
            decode(tampered.as_bytes()),
            Err(DecodeError::Digest)
        ));
        let short = text.replace("\"size\":5", "\"size\":6");
        assert!(matches!(
            decode(short.as_bytes()),
            Err(DecodeError::Size { .. })
        ));
        let v2 = text.replace("\"v\":1", "\"v\":2");
        assert!(matches!(
            decode(v2.as_bytes()),
            Err(DecodeError::Version(2))
        ));
        let extra = text.replacen('{', "{\"future\":true,", 1);
        assert!(decode(extra.as_bytes()).is_ok());
        assert!(matches!(decode(b"nope"), Err(DecodeError::Json(_))));
        let none = text.replace(",\"body_base64\":\"aGVsbG8=\"", "");
        assert!(matches!(
            decode(none.as_bytes()),
            Err(DecodeError::BodyOrClaim)
        ));
    }

    // The encoder as it was written with serde_json: the reference for `JsonOut`.
    struct Wire<'a> {
        env: &'a Envelope,
        ctx: &'a Ctx,
        idempotency_key: &'a str,
        headers: &'a [(Cow<'a, str>, Cow<'a, str>)],
        sha256: &'a str,
        claim: Option<&'a ClaimRef>,
    }

    struct HeaderMap<'a>(&'a [(Cow<'a, str>, Cow<'a, str>)]);

    impl Serialize for HeaderMap<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_map(Some(self.0.len()))?;
            for (k, v) in self.0 {
                m.serialize_entry(k, v)?;
            }
            m.end()
        }
    }

    impl Serialize for Wire<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let env = self.env;
            let mut m = s.serialize_map(Some(13))?;
            m.serialize_entry("v", &1)?;
            m.serialize_entry("id", env.id())?;
            m.serialize_entry("source_id", env.source_id())?;
            m.serialize_entry("tenant_id", &env.tenant_id())?;
            m.serialize_entry("received_at", &env.received_at())?;
            m.serialize_entry("content_type", &env.content_type())?;
            m.serialize_entry("size", &env.size())?;
            m.serialize_entry("dedupe_key", &env.dedupe_key())?;
            m.serialize_entry("replay_id", &self.ctx.replay_id)?;
            m.serialize_entry("idempotency_key", self.idempotency_key)?;
            m.serialize_entry("headers", &HeaderMap(self.headers))?;
            m.serialize_entry("sha256", self.sha256)?;
            // An inline body is appended by `encode` as the last member, `body_base64`.
            if let Some(r) = self.claim {
                m.serialize_entry("claim", &r.to_string())?;
            }
            m.end()
        }
    }

    fn encode_by_serde(env: &Envelope, ctx: &Ctx, claim: Option<&ClaimRef>) -> Vec<u8> {
        let headers = forwarded_headers(env, ctx);
        let wire = Wire {
            env,
            ctx,
            idempotency_key: &env.idempotency_key(),
            headers: &headers,
            sha256: env.body_sha256(),
            claim,
        };
        let mut out = serde_json::to_vec(&wire).unwrap();
        if claim.is_none() {
            out.pop();
            out.extend_from_slice(b",\"body_base64\":");
            out.extend_from_slice(&serde_json::to_vec(&STANDARD.encode(env.body())).unwrap());
            out.push(b'}');
        }
        out
    }

    #[test]
    fn the_direct_writer_writes_what_serde_json_wrote() {
        let odd = "q\"b\\s/ctl\u{1}\u{1f}\n\t\r\u{7f} \u{e9}\u{1F600}";
        let plain = Envelope::builder("01J", "src", &b""[..]).build().unwrap();
        // The envelope refuses control characters; the replay id (the caller's) carries them.
        let quoted = "q\"b\\s/ \u{e9}\u{1F600}";
        let full = Envelope::builder(
            format!("id-{quoted}"),
            format!("s{quoted}"),
            vec![0u8, 255, 7],
        )
        .tenant_id("t_1-A")
        .received_at(ankusa_sink_core::MAX_RECEIVED_AT)
        .content_type(format!("ct{quoted}"))
        .dedupe_key(format!("d{quoted}"))
        .header("X-Odd", quoted)
        .header("x-b", "")
        .header("X-B2", "\\")
        .build()
        .unwrap();
        let cases = [
            (env(), None),
            (plain, None),
            (full, Some(format!("r{odd}"))),
        ];
        for (e, replay) in &cases {
            let mut ctx = Ctx::for_envelope(e);
            if let Some(r) = replay {
                ctx = ctx.with_replay_id(r.clone());
            }
            let ours = encode(e, &ctx, None).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&encode_by_serde(e, &ctx, None))
            );
        }
        // A claimed body: `claim` last instead of `body_base64`.
        let e = env();
        let r: ClaimRef = "urn:ankusa:claim:v1:acme:01ARZ3NDEKTSV4RRFFQ69G5FAV"
            .parse()
            .unwrap();
        let ctx =
            Ctx::for_envelope(&e).with_claim(Claim::new(r.clone(), sha256_hex(b"hello")).unwrap());
        assert_eq!(
            String::from_utf8(encode(&e, &ctx, Some(nz(4))).unwrap()).unwrap(),
            String::from_utf8(encode_by_serde(&e, &ctx, Some(&r))).unwrap()
        );
    }

    #[test]
    fn simd_base64_round_trips_every_tail_length() {
        // The SIMD encoder handles blocks and a scalar tail; every length up to a few
        // blocks, plus the 64 KiB default threshold, must decode to the same body.
        let ctx_env = env();
        let ctx = Ctx::for_envelope(&ctx_env);
        for len in (0..=300).chain([65_535, 65_536]) {
            let body: Vec<u8> = (0..len).map(|i| (i * 37 % 256) as u8).collect();
            let e = ctx_env.to_builder().body(body.clone()).build().unwrap();
            let bytes = encode(&e, &ctx, None).unwrap();
            let m = decode(&bytes).unwrap();
            assert_eq!(
                m.body,
                MessageBody::Inline(Bytes::from(body.clone())),
                "len {len}"
            );
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(v["body_base64"], STANDARD.encode(&body), "len {len}");
        }
    }

    fn claimed(tenant: Option<&str>, claim_tenant: &str) -> Result<Vec<u8>, EncodeError> {
        let e = Envelope::builder("h", "s", &b"hello"[..])
            .tenant(tenant.map(str::to_owned))
            .build()
            .unwrap();
        let r = ClaimRef::new(claim_tenant, ulid::Ulid::from_parts(1, 2).to_string()).unwrap();
        let ctx = Ctx::for_envelope(&e).with_claim(Claim::new(r, sha256_hex(b"hello")).unwrap());
        encode(&e, &ctx, Some(nz(1)))
    }

    #[test]
    fn a_claim_is_bound_to_the_message_tenant() {
        // Encode refuses another tenant's claim; the tenantless partition is `default`.
        let err = claimed(Some("acme"), "globex").unwrap_err();
        assert!(matches!(
            &err,
            EncodeError::ClaimTenantMismatch { claim, envelope }
                if claim == "globex" && envelope == "acme"
        ));
        assert_eq!(Failure::from(err).class(), ankusa_sink_core::Class::Config);
        assert!(claimed(None, "acme").is_err());
        let tenantless = claimed(None, ankusa_sink_core::TENANTLESS).unwrap();
        assert!(matches!(
            decode(&tenantless).unwrap().body,
            MessageBody::Claim(_)
        ));
        let own = claimed(Some("acme"), "acme").unwrap();
        assert!(matches!(decode(&own).unwrap().body, MessageBody::Claim(_)));

        // Decode refuses a message whose claim is another tenant's.
        let text = String::from_utf8(own).unwrap();
        let foreign = text.replace("urn:ankusa:claim:v1:acme:", "urn:ankusa:claim:v1:globex:");
        assert!(matches!(
            decode(foreign.as_bytes()),
            Err(DecodeError::ClaimTenant)
        ));
        let dropped = text.replace("\"tenant_id\":\"acme\"", "\"tenant_id\":null");
        assert!(matches!(
            decode(dropped.as_bytes()),
            Err(DecodeError::ClaimTenant)
        ));
        let text = String::from_utf8(tenantless).unwrap();
        let claimed_by_acme = text.replace("\"tenant_id\":null", "\"tenant_id\":\"acme\"");
        assert!(matches!(
            decode(claimed_by_acme.as_bytes()),
            Err(DecodeError::ClaimTenant)
        ));
    }

    #[test]
    fn message_debug_shows_shape_only() {
        let e = Envelope::builder("h", "s", &b"sekrit-body"[..])
            .tenant_id("acme")
            .header("x-team", "sekrit-value")
            .build()
            .unwrap();
        let m = decode(&encode(&e, &Ctx::for_envelope(&e), None).unwrap()).unwrap();
        let d = format!("{m:?}");
        assert!(!d.contains("sekrit") && !d.contains(&m.sha256), "{d}");
        assert!(d.contains("x-team") && d.contains("len: 11"), "{d}");

        let claim = decode(&claimed(Some("acme"), "acme").unwrap()).unwrap();
        let MessageBody::Claim(r) = &claim.body else {
            panic!("claimed")
        };
        let d = format!("{claim:?}");
        assert!(!d.contains(&r.claim_id().to_string()), "{d}");
        assert!(!d.contains(&claim.sha256), "{d}");
        assert!(d.contains("Claim { tenant: \"acme\""), "{d}");
    }

    /// The attribute names a queue sink sends (`EmptyValues::Drop`), in order.
    fn attribute_names(e: &Envelope, ctx: &Ctx) -> Vec<&'static str> {
        let layout = Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), EmptyValues::Drop);
        let out = Outgoing::new(e, ctx, &layout).unwrap();
        out.attributes().iter().map(|(a, _)| a.as_attr()).collect()
    }

    #[test]
    fn attribute_list() {
        let e = env();
        let ctx = Ctx::for_envelope(&e).with_replay_id("r");
        let names = attribute_names(&e, &ctx);
        assert_eq!(
            names,
            [
                "ankusa_id",
                "ankusa_source_id",
                "ankusa_tenant_id",
                "ankusa_message_version",
                "ankusa_idempotency_key",
                "content_type",
                "ankusa_dedupe_key",
                "ankusa_replay_id"
            ]
        );
        let bare = Envelope::builder("h", "s", "")
            .dedupe_key("")
            .build()
            .unwrap();
        let names = attribute_names(&bare, &Ctx::for_envelope(&bare));
        assert_eq!(
            names,
            [
                "ankusa_id",
                "ankusa_source_id",
                "ankusa_message_version",
                "ankusa_idempotency_key",
                "content_type"
            ]
        );
    }

    fn schema_validator() -> (boon::Schemas, boon::SchemaIndex) {
        let mut schemas = boon::Schemas::new();
        let mut compiler = boon::Compiler::new();
        compiler
            .add_resource("urn:ankusa:message-v1", json_schema())
            .unwrap();
        let index = compiler
            .compile("urn:ankusa:message-v1", &mut schemas)
            .unwrap();
        (schemas, index)
    }

    #[test]
    fn encoded_messages_are_valid_against_the_schema() {
        let (schemas, index) = schema_validator();
        let valid = |bytes: &[u8]| {
            let v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
            schemas.validate(&v, index).map_err(|e| e.to_string())
        };
        let inline = env();
        let no_tenant = Envelope::builder("h2", "github", "").build().unwrap();
        let unicode = Envelope::builder("h3", "sørce", "héllo ✓ \u{0}".as_bytes().to_vec())
            .tenant_id("t-1")
            .dedupe_key("ключ \"q\"")
            .content_type("text/plain; charset=utf-8")
            .header("x-note", "naïve ✓ \\ \"")
            .build()
            .unwrap();
        for e in [&inline, &no_tenant, &unicode] {
            let ctx = Ctx::for_envelope(e);
            valid(&encode(e, &ctx, None).unwrap()).unwrap();
            let replay = ctx.with_replay_id("replay-1");
            valid(&encode(e, &replay, None).unwrap()).unwrap();
        }
        for (tenant, claim_tenant) in [(Some("acme"), "acme"), (None, ankusa_sink_core::TENANTLESS)]
        {
            valid(&claimed(tenant, claim_tenant).unwrap()).unwrap();
        }

        // And it says no to what is not a Message v1.
        let text =
            String::from_utf8(encode(&inline, &Ctx::for_envelope(&inline), None).unwrap()).unwrap();
        let claim_too = text.replacen(
            '{',
            "{\"claim\":\"urn:ankusa:claim:v1:acme:01ARZ3NDEKTSV4RRFFQ69G5FAV\",",
            1,
        );
        for bad in [
            text.replace("\"v\":1", "\"v\":2"),
            text.replace(",\"body_base64\":\"aGVsbG8=\"", ""),
            claim_too,
            text.replacen("\"sha256\":\"", "\"sha256\":\"X", 1),
            text.replace("\"received_at\":1700000000123", "\"received_at\":\"soon\""),
        ] {
            assert!(valid(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_schema_names_every_key_the_encoder_writes() {
        let schema = json_schema();
        let props = schema["properties"].as_object().unwrap();
        for bytes in [
            encode(&env(), &Ctx::for_envelope(&env()), None).unwrap(),
            claimed(Some("acme"), "acme").unwrap(),
        ] {
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            for key in v.as_object().unwrap().keys() {
                assert!(props.contains_key(key), "{key} is not in the schema");
            }
        }
    }

    #[test]
    fn verify_checks_signature_freshness_and_the_signed_id() {
        use crate::signing::Signer;
        use std::time::Duration;
        let signer = Signer::new(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).unwrap();
        let env = Envelope::builder("h-9", "stripe", &b"{}"[..])
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env).with_replay_id("r1");
        let layout = Layout::message(None, EmptyValues::Drop).with_signer(signer.clone());
        let out = Outgoing::new(&env, &ctx, &layout).unwrap();
        let get = |a| out.get(a).unwrap().to_owned();
        let (id, ts, sig) = (
            get(Attr::WebhookId),
            get(Attr::WebhookTimestamp),
            get(Attr::WebhookSignature),
        );
        assert_eq!(id, "h-9:replay:r1");
        let now = SystemTime::now();
        let msg = verify(&signer, &id, &ts, &sig, out.body(), now).unwrap();
        assert_eq!(msg.replay_id.as_deref(), Some("r1"));

        let mut tampered = out.body().to_vec();
        let at = tampered.iter().position(|b| *b == b'9').unwrap();
        tampered[at] = b'8';
        assert!(matches!(
            verify(&signer, &id, &ts, &sig, &tampered, now),
            Err(VerifiedError::Signature(VerifyError::NoMatch))
        ));
        let late = now + Duration::from_secs(301);
        assert!(matches!(
            verify(&signer, &id, &ts, &sig, out.body(), late),
            Err(VerifiedError::Signature(VerifyError::OutsideTolerance(_)))
        ));
        // A genuine signature over these bytes, but under another id.
        let ts_n: u64 = ts.parse().unwrap();
        let other = signer.signature("h-9", ts_n, out.body());
        assert!(matches!(
            verify(&signer, "h-9", &ts, &other, out.body(), now),
            Err(VerifiedError::IdMismatch)
        ));
        // Unsigned layouts carry no signature attributes.
        let plain = Outgoing::new(&env, &ctx, &Layout::message(None, EmptyValues::Drop)).unwrap();
        assert!(plain.get(Attr::WebhookSignature).is_none());
    }

    #[test]
    fn a_raw_body_layout_with_a_signer_signs_the_raw_body() {
        use crate::signing::Signer;
        let signer = Signer::new(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).unwrap();
        let env = Envelope::builder("h-raw", "stripe", &b"{\"raw\":1}"[..])
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env).with_replay_id("r2");
        let raw = Layout::raw_body(EmptyValues::Drop).with_signer(signer.clone());
        let out = Outgoing::new(&env, &ctx, &raw).unwrap();
        assert_eq!(out.body(), env.body().as_ref());
        let get = |a| out.get(a).expect("a signer is never dropped").to_owned();
        let (id, ts, sig) = (
            get(Attr::WebhookId),
            get(Attr::WebhookTimestamp),
            get(Attr::WebhookSignature),
        );
        assert_eq!(id, "h-raw:replay:r2");
        signer
            .verify(
                &id,
                &ts,
                &sig,
                env.body(),
                SystemTime::now(),
                DEFAULT_TOLERANCE,
            )
            .unwrap();
        let names: Vec<_> = out.attributes().iter().map(|(a, _)| *a).collect();
        assert_eq!(
            names[names.len() - 3..],
            [
                Attr::WebhookId,
                Attr::WebhookTimestamp,
                Attr::WebhookSignature
            ]
        );
    }
}

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

pub use crate::outgoing::{Attr, Body, EmptyValues, Layout, Outgoing};

use crate::claim::{ClaimRef, ClaimRefError};
use crate::ctx::{Ctx, ForwardHeaders};
use crate::envelope::Envelope;
use crate::failure::Failure;
use crate::signing::{self, DEFAULT_TOLERANCE, Signer, VerifyError};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::LazyLock;
use std::time::SystemTime;

/// The default inline threshold of queue sinks: 64 KiB.
pub const DEFAULT_INLINE_MAX_BYTES: NonZeroUsize = NonZeroUsize::new(65_536).unwrap();

// The forwarding caps' defaults are declared with `Ctx`, which applies them, and
// re-exported here: `message::` is, and stays, their public path.
pub use crate::ctx::{DEFAULT_FORWARD_HEADERS_MAX_BYTES, DEFAULT_MAX_HEADERS};

// Whoever can POST to a catch URL chooses the hook's headers, and forwarded headers reach
// outbound HTTP requests and every Message v1. So three classes never leave: credentials
// (by name: the provider's signature headers are not secrets and stay), headers HTTP or a
// proxy owns (framing, hop-by-hop), and headers a proxy or auth gateway in front of the
// destination would trust (client address, original host/URL/method, asserted identity).

/// Header names never forwarded, whatever the mode (lowercase, exact). See also
/// [`NEVER_FORWARDED_PREFIXES`] and [`NEVER_FORWARDED_PATTERNS`].
pub const NEVER_FORWARDED: &[&str] = &[
    // Credentials not caught by a pattern.
    "authorization",
    "x-authorization",
    "x-functions-key",
    "ocp-apim-subscription-key",
    // Framing and hop-by-hop: HTTP and the sink own them.
    "host",
    "content-length",
    "content-type",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "http2-settings",
    // Proxy trust: the client's address and the request's path through proxies.
    "forwarded",
    "x-forwarded",
    "via",
    "x-real-ip",
    "true-client-ip",
    "cf-connecting-ip",
    "cf-connecting-ipv6",
    "fastly-client-ip",
    "x-client-ip",
    "x-cluster-client-ip",
    "client-ip",
    "x-originating-ip",
    "x-remote-ip",
    "x-remote-addr",
    "x-proxyuser-ip",
    "x-azure-clientip",
    "x-azure-socketip",
    "x-original-forwarded-for",
    // Proxy trust: the original host, URL and method a front end may route or act on.
    "x-host",
    "x-original-host",
    "x-original-url",
    "x-original-uri",
    "x-rewrite-url",
    "x-original-method",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-middleware-subrequest",
    // Identity asserted by an auth proxy in front of the destination: a user, a signed
    // assertion, a client certificate the proxy verified.
    "remote-user",
    "x-remote-user",
    "x-webauth-user",
    "x-authenticated-userid",
    "x-goog-iap-jwt-assertion",
    "x-client-cert",
    "ssl-client-cert",
];

/// Name prefixes never forwarded: ours (`x-ankusa-`), proxy-owned (`proxy-`: proxy
/// credentials and `proxy-connection`), proxy trust (`x-forwarded-`, `x-envoy-`) and
/// identity or credentials of an auth proxy (`x-auth-`, `x-amzn-oidc-`,
/// `x-ms-client-principal`, `x-goog-authenticated-user-`, `cf-access-`: Cloudflare
/// Access's `cf-access-jwt-assertion`, `cf-access-client-id`, `cf-access-client-secret`).
pub const NEVER_FORWARDED_PREFIXES: &[&str] = &[
    "x-ankusa-",
    "proxy-",
    "x-forwarded-",
    "x-envoy-",
    "x-auth-",
    "x-amzn-oidc-",
    "x-ms-client-principal",
    "x-goog-authenticated-user-",
    "cf-access-",
];

/// Substrings that mark a credential: a name containing any is never forwarded
/// (`x-gitlab-token`, `private-token`, `x-webhook-secret`, `api-key`, `set-cookie`, ...).
/// None of them occurs in a provider's signature header name (`stripe-signature`,
/// `x-hub-signature-256`, `webhook-signature`, `x-slack-signature`, ...), which stay.
pub const NEVER_FORWARDED_PATTERNS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "api-key",
    "apikey",
    "api_key",
    "access-key",
    "accesskey",
    "session",
    "credential",
    "cookie",
];

/// Whether a (lowercase) header name may ever be forwarded: not in [`NEVER_FORWARDED`],
/// not starting with one of [`NEVER_FORWARDED_PREFIXES`], not containing one of
/// [`NEVER_FORWARDED_PATTERNS`].
pub fn is_forwardable(lower_name: &str) -> bool {
    let name = lower_name.as_bytes();
    NEVER_FORWARDED_SORTED
        .binary_search_by(|n| by_length_then_bytes(n, name))
        .is_err()
        && !NEVER_FORWARDED_PREFIXES
            .iter()
            .any(|p| name.starts_with(p.as_bytes()))
        && !contains_pattern(name)
}

/// [`NEVER_FORWARDED`] sorted by length, then bytes, for a binary search in which most
/// steps compare lengths only (every header of every delivery is looked up here).
static NEVER_FORWARDED_SORTED: LazyLock<Vec<&'static [u8]>> = LazyLock::new(|| {
    let mut names: Vec<&[u8]> = NEVER_FORWARDED.iter().map(|n| n.as_bytes()).collect();
    names.sort_unstable_by(|a, b| by_length_then_bytes(a, b));
    names
});

fn by_length_then_bytes(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// Which bytes start one of [`NEVER_FORWARDED_PATTERNS`].
const PATTERN_FIRST_BYTES: [bool; 256] = first_bytes(NEVER_FORWARDED_PATTERNS);

const fn first_bytes(needles: &[&str]) -> [bool; 256] {
    let mut table = [false; 256];
    let mut i = 0;
    while i < needles.len() {
        if let Some(&b) = needles[i].as_bytes().first() {
            table[b as usize] = true;
        }
        i += 1;
    }
    table
}

/// Whether `hay` contains one of [`NEVER_FORWARDED_PATTERNS`], in one pass over `hay`: a
/// position whose byte starts no pattern costs one table lookup, and only at the others are
/// the patterns compared. `str::contains` set up a searcher per pattern, ten times the
/// search itself on header-sized names, and comparing every pattern's first byte at every
/// position was most of what is left (every header of every delivery goes through here).
fn contains_pattern(hay: &[u8]) -> bool {
    hay.iter().enumerate().any(|(i, &b)| {
        PATTERN_FIRST_BYTES[usize::from(b)]
            && NEVER_FORWARDED_PATTERNS
                .iter()
                .any(|n| n.as_bytes().first() == Some(&b) && hay[i..].starts_with(n.as_bytes()))
    })
}

/// A header name compared and hashed without regard to ASCII case, so merging looks names
/// up in a map without lowercasing a copy first.
struct Folded<'a>(&'a str);

impl PartialEq for Folded<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0.eq_ignore_ascii_case(other.0)
    }
}

impl Eq for Folded<'_> {}

impl std::hash::Hash for Folded<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for b in self.0.bytes() {
            state.write_u8(b.to_ascii_lowercase());
        }
        state.write_u8(0xff);
    }
}

/// The provider headers a sink forwards, by the rules every sink shares.
///
/// # Behavior
/// - Names are lowercased; the never-forwarded names ([`NEVER_FORWARDED`],
///   [`NEVER_FORWARDED_PREFIXES`], [`NEVER_FORWARDED_PATTERNS`]) are always removed;
///   [`ForwardHeaders::Only`] keeps only the listed names.
/// - A repeated name is one entry, its values joined with `", "` in arrival order, placed
///   where the name first arrived (merged through a map past 16 names: linear in the
///   header count).
/// - Then the limits, deterministically, in first-arrival order: an entry is kept while
///   fewer than `ctx.max_headers` (default [`DEFAULT_MAX_HEADERS`], 100) are kept and its
///   name plus value bytes fit in what is left of `ctx.forward_headers_max_bytes` (default
///   [`DEFAULT_FORWARD_HEADERS_MAX_BYTES`], 16 KiB); an entry that does not fit is dropped
///   and later, smaller ones may still be kept. `None` in either field lifts that cap.
/// - Borrowed from the envelope where it can be (a name already lowercase, a value that
///   was not joined): forwarding allocates only for what it changes.
pub fn forwarded_headers<'a>(env: &'a Envelope, ctx: &Ctx) -> Vec<(Cow<'a, str>, Cow<'a, str>)> {
    // Up to this many distinct names, a repeated name is found by a scan of a stack array
    // (no allocation for a typical hook); past it, through a map (linear in the headers,
    // whatever an attacker sends).
    const SCAN_MAX: usize = 16;
    let mut out: Vec<(Cow<'a, str>, Cow<'a, str>)> = Vec::new();
    // The envelope's spelling of each entry's name, for the first SCAN_MAX entries.
    let mut first: [&'a str; SCAN_MAX] = [""; SCAN_MAX];
    let mut index: Option<HashMap<Folded<'a>, usize>> = None;
    for (name, value) in env.headers() {
        let seen = match &index {
            Some(map) => map.get(&Folded(name)).copied(),
            None => first[..out.len()]
                .iter()
                .position(|n| n.eq_ignore_ascii_case(name)),
        };
        if let Some(at) = seen {
            let joined = out[at].1.to_mut();
            joined.push_str(", ");
            joined.push_str(value);
            continue;
        }
        let lower = if name.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(name.to_ascii_lowercase())
        } else {
            Cow::Borrowed(name.as_str())
        };
        if !is_forwardable(&lower) {
            continue;
        }
        if let ForwardHeaders::Only(allow) = ctx.forward_headers()
            && !allow.iter().any(|a| *a == *lower)
        {
            continue;
        }
        match &mut index {
            Some(map) => {
                map.insert(Folded(name), out.len());
            }
            None if out.len() < SCAN_MAX => first[out.len()] = name,
            None => {
                let mut map: HashMap<Folded<'a>, usize> = first
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (Folded(n), i))
                    .collect();
                map.insert(Folded(name), out.len());
                index = Some(map);
            }
        }
        out.push((lower, Cow::Borrowed(value.as_str())));
    }
    let max_count = ctx.max_headers().map_or(usize::MAX, NonZeroUsize::get);
    let mut budget = ctx
        .forward_headers_max_bytes()
        .map_or(usize::MAX, NonZeroUsize::get);
    let mut kept = 0usize;
    out.retain(|(n, v)| {
        let cost = n.len() + v.len();
        if kept < max_count && cost <= budget {
            kept += 1;
            budget -= cost;
            true
        } else {
            false
        }
    });
    out
}

/// The Message v1 JSON Schema (draft 2020-12 keywords), as text: what
/// [`encode`] writes, checked against it in this crate's tests. AsyncAPI documents embed
/// it ([`json_schema`]).
const JSON_SCHEMA: &str = r#"{
  "type": "object",
  "required": ["v", "id", "source_id", "received_at", "size", "sha256", "dedupe_key",
               "replay_id", "idempotency_key", "headers"],
  "properties": {
    "v": {"const": 1},
    "id": {"type": "string"},
    "source_id": {"type": "string"},
    "tenant_id": {"type": ["string", "null"]},
    "received_at": {"type": "integer", "description": "Unix milliseconds"},
    "content_type": {"type": ["string", "null"]},
    "size": {"type": "integer"},
    "dedupe_key": {"type": ["string", "null"]},
    "replay_id": {"type": ["string", "null"]},
    "idempotency_key": {"type": "string"},
    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
    "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
    "body_base64": {"type": "string", "contentEncoding": "base64"},
    "claim": {"type": "string", "pattern": "^urn:ankusa:claim:v1:[A-Za-z0-9_-]{1,64}:[0-7][0-9A-HJKMNP-TV-Z]{25}$"}
  },
  "oneOf": [{"required": ["body_base64"]}, {"required": ["claim"]}]
}"#;

/// The Message v1 JSON Schema: the module table as a schema, for AsyncAPI documents and
/// consumers' validators. [`encode`]'s output is valid against it.
pub fn json_schema() -> serde_json::Value {
    serde_json::from_str(JSON_SCHEMA).expect("the Message v1 schema is JSON")
}

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

/// Encode `env` as Message v1 JSON: the body alone of what [`Outgoing::new`] builds with
/// [`Layout::message`]`(inline_max_bytes, _)`, byte for byte.
///
/// A sink builds what it sends with [`Layout`] (once, in its constructor) and [`Outgoing`]
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
    encode_with(
        env,
        ctx,
        inline_max_bytes,
        &env.idempotency_key_cow(),
        &headers,
    )
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
    let claim = match body_mode(env.size(), inline_max_bytes) {
        BodyMode::Inline => None,
        BodyMode::Claim => {
            let claim = ctx.claim.as_ref().ok_or(EncodeError::NoClaim {
                size: env.size(),
                max: inline_max_bytes.map_or(0, NonZeroUsize::get),
            })?;
            if claim.sha256() != sha256 {
                return Err(EncodeError::ClaimDigestMismatch);
            }
            if claim.reference().tenant() != env.partition() {
                return Err(EncodeError::ClaimTenantMismatch {
                    claim: claim.reference().tenant().to_owned(),
                    envelope: env.partition().to_owned(),
                });
            }
            Some(claim.reference())
        }
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

/// Why a signed Message v1 was refused by [`verify`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifiedError {
    /// The signature does not hold (see [`VerifyError`]).
    #[error("signature: {0}")]
    Signature(#[from] VerifyError),
    /// The signed bytes are not a Message v1.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// `webhook-id` is not the message's id (or `<id>:replay:<replay_id>`).
    #[error("webhook-id is not the message's id")]
    IdMismatch,
}

/// Verify a signed Message v1 and decode it, for a consumer of a broker sink with a
/// `[signing]` table: `webhook_id`, `webhook_timestamp` and `webhook_signature` are the
/// message's headers (or attributes) of those names, `bytes` the message's body exactly as
/// received, `now` the consumer's clock. The timestamp must be within
/// [`DEFAULT_TOLERANCE`] of `now`, a signature must match
/// one of `signer`'s keys, and `webhook-id` must be the decoded message's id (with
/// `:replay:<replay_id>` for a replay). Dedupe on the returned message's
/// `idempotency_key`: a delivery may come more than once.
///
/// # Errors
/// [`VerifiedError`]: the signature, the decoding, or the id.
///
/// ```
/// use ankusa_sink_core::message::{self, EmptyValues, Layout, Outgoing};
/// use ankusa_sink_core::signing::Signer;
/// use ankusa_sink_core::{Ctx, Envelope};
///
/// let signer = Signer::new(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).unwrap();
/// let env = Envelope::builder("h-1", "stripe", &b"{}"[..]).build().unwrap();
/// let ctx = Ctx::for_envelope(&env);
/// let layout = Layout::message(None, EmptyValues::Drop).with_signer(signer.clone());
/// let out = Outgoing::new(&env, &ctx, &layout).unwrap();
/// let attr = |a| out.get(a).unwrap();
/// let msg = message::verify(
///     &signer,
///     attr(message::Attr::WebhookId),
///     attr(message::Attr::WebhookTimestamp),
///     attr(message::Attr::WebhookSignature),
///     out.body(),
///     std::time::SystemTime::now(),
/// )
/// .unwrap();
/// assert_eq!(msg.id, "h-1");
/// ```
pub fn verify(
    signer: &Signer,
    webhook_id: &str,
    webhook_timestamp: &str,
    webhook_signature: &str,
    bytes: &[u8],
    now: SystemTime,
) -> Result<Message, VerifiedError> {
    signer.verify(
        webhook_id,
        webhook_timestamp,
        webhook_signature,
        bytes,
        now,
        DEFAULT_TOLERANCE,
    )?;
    let msg = decode(bytes)?;
    if signing::webhook_id(&msg.id, msg.replay_id.as_deref()) != webhook_id {
        return Err(VerifiedError::IdMismatch);
    }
    Ok(msg)
}

/// Why a Message v1 could not be decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Not valid JSON or a required field is missing or mistyped.
    #[error("not a Message v1: {0}")]
    Json(#[from] serde_json::Error),
    /// `v` is not 1.
    #[error("unsupported message version {0}")]
    Version(u64),
    /// Neither or both of `body_base64` and `claim`.
    #[error("exactly one of body_base64 and claim must be present")]
    BodyOrClaim,
    /// `body_base64` is not standard padded base64.
    #[error("body_base64 is not valid base64")]
    Base64,
    /// The inline body's length is not `size`.
    #[error("body is {actual} bytes but size says {declared}")]
    Size {
        /// `size` in the message.
        declared: u64,
        /// The decoded body's length.
        actual: u64,
    },
    /// The inline body's digest is not `sha256`.
    #[error("body sha256 does not match the message's sha256")]
    Digest,
    /// A malformed claim reference.
    #[error(transparent)]
    Claim(#[from] ClaimRefError),
    /// The claim is filed under another tenant than the message's `tenant_id` (or, for a
    /// message without one, than `default`): a consumer must not redeem it.
    #[error("the claim's tenant is not the message's tenant_id")]
    ClaimTenant,
}

/// A decoded Message v1.
///
/// `Debug` shows the shape only: header names (not values), the body's length or the
/// claim's tenant, never the body, the claim id or the digest.
#[derive(Clone, PartialEq, Eq)]
pub struct Message {
    /// Hook id.
    pub id: String,
    /// Source id.
    pub source_id: String,
    /// Tenant.
    pub tenant_id: Option<String>,
    /// Unix ms.
    pub received_at: i64,
    /// Provider content type.
    pub content_type: Option<String>,
    /// Body bytes.
    pub size: u64,
    /// Provider event key.
    pub dedupe_key: Option<String>,
    /// Replay job id.
    pub replay_id: Option<String>,
    /// Consumer dedupe key.
    pub idempotency_key: String,
    /// Forwarded headers, in message order.
    pub headers: Vec<(String, String)>,
    /// Lowercase hex sha256 of the raw body.
    pub sha256: String,
    /// The body, inline or by reference.
    pub body: MessageBody,
}

/// The body of a decoded message. `Debug` shows the inline length or the claim's tenant.
#[derive(Clone, PartialEq, Eq)]
pub enum MessageBody {
    /// Inline, verified against `size` and `sha256`.
    Inline(Bytes),
    /// By reference, filed under the message's tenant (checked by [`decode`]); redeem it
    /// and check the digest.
    Claim(ClaimRef),
}

impl std::fmt::Debug for MessageBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MessageBody::Inline(b) => f.debug_struct("Inline").field("len", &b.len()).finish(),
            MessageBody::Claim(r) => f
                .debug_struct("Claim")
                .field("tenant", &r.tenant())
                .finish_non_exhaustive(),
        }
    }
}

impl std::fmt::Debug for Message {
    // Header values and the body may hold provider secrets; the claim id and digest
    // together let a reader of the store redeem the body.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message")
            .field("id", &self.id)
            .field("source_id", &self.source_id)
            .field("tenant_id", &self.tenant_id)
            .field("received_at", &self.received_at)
            .field("content_type", &self.content_type)
            .field("size", &self.size)
            .field("dedupe_key", &self.dedupe_key)
            .field("replay_id", &self.replay_id)
            .field("idempotency_key", &self.idempotency_key)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("body", &self.body)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct WireIn {
    v: u64,
    id: String,
    source_id: String,
    #[serde(default)]
    tenant_id: Option<String>,
    received_at: i64,
    #[serde(default)]
    content_type: Option<String>,
    size: u64,
    #[serde(default)]
    dedupe_key: Option<String>,
    #[serde(default)]
    replay_id: Option<String>,
    idempotency_key: String,
    headers: serde_json::Map<String, serde_json::Value>,
    sha256: String,
    #[serde(default)]
    body_base64: Option<String>,
    #[serde(default)]
    claim: Option<String>,
}

/// Decode a Message v1, verifying an inline body's size and sha256, and that a claim is
/// filed under the message's tenant ([`partition_of`](crate::partition_of) its
/// `tenant_id`): a message naming another tenant's claim is refused
/// ([`DecodeError::ClaimTenant`]). Unknown keys are ignored, as the format requires of
/// consumers.
pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
    let w: WireIn = serde_json::from_slice(bytes)?;
    if w.v != 1 {
        return Err(DecodeError::Version(w.v));
    }
    let body = match (w.body_base64, w.claim) {
        (Some(b64), None) => {
            let body = STANDARD
                .decode(b64.as_bytes())
                .map_err(|_| DecodeError::Base64)?;
            if body.len() as u64 != w.size {
                return Err(DecodeError::Size {
                    declared: w.size,
                    actual: body.len() as u64,
                });
            }
            if sha256_hex(&body) != w.sha256 {
                return Err(DecodeError::Digest);
            }
            MessageBody::Inline(Bytes::from(body))
        }
        (None, Some(urn)) => {
            let reference: ClaimRef = urn.parse()?;
            if reference.tenant() != crate::partition_of(w.tenant_id.as_deref()) {
                return Err(DecodeError::ClaimTenant);
            }
            MessageBody::Claim(reference)
        }
        _ => return Err(DecodeError::BodyOrClaim),
    };
    let headers = w
        .headers
        .into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => (k, s),
            other => (k, other.to_string()),
        })
        .collect();
    Ok(Message {
        id: w.id,
        source_id: w.source_id,
        tenant_id: w.tenant_id,
        received_at: w.received_at,
        content_type: w.content_type,
        size: w.size,
        dedupe_key: w.dedupe_key,
        replay_id: w.replay_id,
        idempotency_key: w.idempotency_key,
        headers,
        sha256: w.sha256,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claim::Claim;
    use serde::ser::SerializeMap;
    use serde::{Serialize, Serializer};

    fn env() -> Envelope {
        Envelope::builder("h1", "stripe", &b"hello"[..])
            .tenant_id("acme")
            .received_at(1_700_000_000_123)
            .content_type("application/json")
            .dedupe_key("evt_1")
            .header("Stripe-Signature", "t=1")
            .header("Authorization", "Bearer x")
            .header("X-Multi", "a")
            .header("x-multi", "b")
            .header("X-Ankusa-Id", "spoof")
            .header("Cookie", "c")
            .build()
            .unwrap()
    }

    fn nz(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).unwrap()
    }

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
        assert_eq!(Failure::from(err).class(), crate::Class::Config);

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
            idempotency_key: &env.idempotency_key_cow(),
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
        .received_at(crate::envelope::MAX_RECEIVED_AT)
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
    fn the_one_pass_pattern_search_decides_as_str_contains_does() {
        let by_contains = |name: &str| {
            !NEVER_FORWARDED.contains(&name)
                && !NEVER_FORWARDED_PREFIXES.iter().any(|p| name.starts_with(p))
                && !NEVER_FORWARDED_PATTERNS.iter().any(|p| name.contains(p))
        };
        let mut names: Vec<String> = ["", "t", "x", "stripe-signature", "x-hub-signature-256"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for p in NEVER_FORWARDED_PATTERNS
            .iter()
            .chain(NEVER_FORWARDED_PREFIXES)
            .chain(NEVER_FORWARDED)
        {
            let cut = &p[..p.len() - 1];
            for (a, b) in [("", ""), ("x-", ""), ("", "-v"), ("a-", "-b"), ("tt", "ss")] {
                names.push(format!("{a}{p}{b}"));
                names.push(format!("{a}{cut}{b}"));
                names.push(format!("{a}{cut}{cut}{b}"));
            }
        }
        for name in &names {
            assert_eq!(is_forwardable(name), by_contains(name), "{name:?}");
        }
        assert!(names.iter().any(|n| is_forwardable(n)));
        assert!(names.iter().any(|n| !is_forwardable(n)));
    }

    #[test]
    fn auth_gateway_credentials_and_identities_are_never_forwarded() {
        // Headers a gateway in front of the destination (Google IAP, Cloudflare Access,
        // Azure Functions and API Management, Kong, nginx ingress, an mTLS terminator, AWS
        // ALB) trusts or takes as the caller's key: whoever POSTs a hook may set them.
        for name in [
            "x-goog-iap-jwt-assertion",
            "cf-access-jwt-assertion",
            "cf-access-client-id",
            "cf-access-client-secret",
            "cf-access-authenticated-user-email",
            "x-functions-key",
            "ocp-apim-subscription-key",
            "x-original-forwarded-for",
            "x-authenticated-userid",
            "x-client-cert",
            "ssl-client-cert",
            "x-amzn-oidc-data",
            "x-amzn-oidc-identity",
            "x-amzn-oidc-accesstoken",
        ] {
            assert!(!is_forwardable(name), "{name}");
            let e = Envelope::builder("h", "s", &b""[..])
                .header(name.to_ascii_uppercase(), "planted")
                .build()
                .unwrap();
            assert!(
                forwarded_headers(&e, &Ctx::for_envelope(&e)).is_empty(),
                "{name}"
            );
        }
        // Near misses stay forwardable: the prefixes are whole words.
        for name in [
            "cf-access",
            "cf-ray",
            "x-client-certainty-score",
            "x-amzn-trace-id",
        ] {
            assert!(is_forwardable(name), "{name}");
        }
    }

    #[test]
    fn forwarding_rules() {
        let e = env();
        let ctx = Ctx::for_envelope(&e);
        assert_eq!(
            forwarded_headers(&e, &ctx),
            vec![
                ("stripe-signature".into(), "t=1".into()),
                ("x-multi".into(), "a, b".into())
            ]
        );
        for name in NEVER_FORWARDED {
            assert!(!is_forwardable(name));
        }
        assert!(!is_forwardable("x-ankusa-anything"));

        let only = ctx
            .clone()
            .with_forward_headers(ForwardHeaders::only(["X-MULTI", "authorization"]).unwrap());
        assert_eq!(
            forwarded_headers(&e, &only),
            vec![("x-multi".into(), "a, b".into())]
        );
        let none = ctx
            .clone()
            .with_forward_headers(ForwardHeaders::Only(vec![]));
        assert!(forwarded_headers(&e, &none).is_empty());
    }

    #[test]
    fn forwarding_borrows_what_it_does_not_change() {
        let e = env();
        let ctx = Ctx::for_envelope(&e);
        let h = forwarded_headers(&e, &ctx);
        // "Stripe-Signature" had to be lowercased; its single value is the envelope's own.
        assert!(matches!(h[0].0, Cow::Owned(_)));
        assert!(matches!(h[0].1, Cow::Borrowed("t=1")));
        // "X-Multi" arrived twice: the joined value is new.
        assert!(matches!(h[1].1, Cow::Owned(_)));
        let lower = Envelope::builder("h", "s", "")
            .header("x-a", "1")
            .build()
            .unwrap();
        let h = forwarded_headers(&lower, &Ctx::for_envelope(&lower));
        assert!(matches!(h[0], (Cow::Borrowed("x-a"), Cow::Borrowed("1"))));
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

    #[test]
    fn forwarding_limits_are_deterministic() {
        let e = Envelope::builder("h", "s", "")
            .header("a", "1234567890")
            .header("b", "1")
            .header("c", "12")
            .header("d", "1")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&e);
        let count = ctx.clone().with_max_headers(nz(2));
        let names = |h: Vec<(Cow<str>, Cow<str>)>| {
            h.into_iter()
                .map(|(n, _)| n.into_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(forwarded_headers(&e, &count)), ["a", "b"]);
        // "a" (11 bytes) does not fit in 6; b (2) and c (3) do; d (2) no longer fits (1 left).
        let bytes = ctx.clone().with_forward_headers_max_bytes(nz(6));
        assert_eq!(names(forwarded_headers(&e, &bytes)), ["b", "c"]);
        for _ in 0..3 {
            assert_eq!(names(forwarded_headers(&e, &bytes)), ["b", "c"]);
        }
    }

    #[test]
    fn forwarded_headers_are_capped_by_default() {
        let many = Envelope::builder("h", "s", "")
            .headers(
                (0..150)
                    .map(|i| (format!("x-h{i:03}"), "v".into()))
                    .collect(),
            )
            .build()
            .unwrap();
        let h = forwarded_headers(&many, &Ctx::for_envelope(&many));
        assert_eq!(h.len(), 100);
        assert_eq!(h[99].0, "x-h099");

        // 20 headers of 1 KiB: 16 KiB holds 15 of them (name + value 1029 bytes each).
        let big = Envelope::builder("h", "s", "")
            .headers(
                (0..20)
                    .map(|i| (format!("x-b{i:02}"), "v".repeat(1024)))
                    .collect(),
            )
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&big);
        let h = forwarded_headers(&big, &ctx);
        let bytes: usize = h.iter().map(|(n, v)| n.len() + v.len()).sum();
        assert_eq!(h.len(), 15);
        assert!(bytes <= 16 * 1024, "{bytes}");
        // The caps stay changeable: raised, or lifted with None.
        let raised = ctx.clone().with_forward_headers_max_bytes(nz(64 * 1024));
        assert_eq!(forwarded_headers(&big, &raised).len(), 20);
        let lifted = Ctx::for_envelope(&many).without_header_caps();
        assert_eq!(forwarded_headers(&many, &lifted).len(), 150);
    }

    #[test]
    fn merging_joins_every_case_of_a_name_in_arrival_order() {
        let mut b = Envelope::builder("h", "s", "");
        for i in 0..500 {
            b = b.header(format!("x-n{i}"), "a");
        }
        for i in 0..500 {
            b = b.header(format!("X-N{i}"), "b");
        }
        let e = b.build().unwrap();
        let ctx = Ctx::for_envelope(&e).without_header_caps();
        let h = forwarded_headers(&e, &ctx);
        // Names found by the scan (the first 16) and through the map (the rest) alike.
        assert_eq!(h.len(), 500);
        for i in [0, 7, 15, 16, 17, 499] {
            assert_eq!(h[i], (format!("x-n{i}").into(), "a, b".into()), "{i}");
        }
        assert!(h.iter().all(|(_, v)| v == "a, b"));
    }

    fn claimed(tenant: Option<&str>, claim_tenant: &str) -> Result<Vec<u8>, EncodeError> {
        let e = Envelope::builder("h", "s", &b"hello"[..])
            .tenant(tenant.map(str::to_owned))
            .build()
            .unwrap();
        let r = ClaimRef::new(claim_tenant, ulid::Ulid::from_parts(1, 2)).unwrap();
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
        assert_eq!(Failure::from(err).class(), crate::Class::Config);
        assert!(claimed(None, "acme").is_err());
        let tenantless = claimed(None, crate::TENANTLESS).unwrap();
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
        for (tenant, claim_tenant) in [(Some("acme"), "acme"), (None, crate::TENANTLESS)] {
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
        // Unsigned layouts carry no signature attributes; raw bodies are never signed here.
        let plain = Outgoing::new(&env, &ctx, &Layout::message(None, EmptyValues::Drop)).unwrap();
        assert!(plain.get(Attr::WebhookSignature).is_none());
        let raw = Layout::raw_body(EmptyValues::Drop).with_signer(signer);
        assert!(
            Outgoing::new(&env, &ctx, &raw)
                .unwrap()
                .get(Attr::WebhookId)
                .is_none()
        );
    }
}

//! The stored hook a sink delivers.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Why an [`Envelope`] (or a tenant id) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvelopeError {
    /// A required text field is empty.
    #[error("envelope field `{0}` must not be empty")]
    Empty(&'static str),
    /// A tenant id outside `[A-Za-z0-9_-]{{1,64}}`.
    #[error("invalid tenant id {0:?}: must match [A-Za-z0-9_-]{{1,64}}")]
    InvalidTenant(String),
    /// `size` disagrees with the body length.
    #[error("envelope size {size} does not match body length {body_len}")]
    SizeMismatch {
        /// The declared size.
        size: u64,
        /// The body's real length.
        body_len: u64,
    },
    /// `received_at` is negative.
    #[error("received_at must be Unix milliseconds >= 0, got {0}")]
    NegativeReceivedAt(i64),
    /// `received_at` is past [`MAX_RECEIVED_AT`] (year 10000 or later).
    #[error(
        "received_at must be Unix milliseconds before year 10000 (at most 253402300799999), \
         got {0}"
    )]
    ReceivedAtTooLate(i64),
    /// A header name that is not an HTTP token.
    #[error("header name {0:?} is not a valid HTTP header name")]
    InvalidHeaderName(String),
    /// A header value with a control character (other than tab).
    #[error("value of header {0:?} contains a control character")]
    InvalidHeaderValue(String),
    /// A text field with a control character.
    #[error("envelope field `{0}` contains a control character")]
    ControlCharacter(&'static str),
    /// The tenant id is [`TENANTLESS`], the partition of hooks without a tenant.
    #[error(
        "tenant id \"default\" is reserved for hooks without a tenant: leave tenant_id unset \
         or choose another id"
    )]
    ReservedTenant,
    /// More headers than [`MAX_ENVELOPE_HEADERS`].
    #[error("envelope has {count} headers; at most {max} are accepted")]
    TooManyHeaders {
        /// How many the envelope has.
        count: usize,
        /// The limit.
        max: usize,
    },
}

/// At most this many headers in an [`Envelope`]: far above what a webhook provider sends,
/// low enough that per-header work stays cheap on every attempt.
pub const MAX_ENVELOPE_HEADERS: usize = 1_000;

/// The latest `received_at` an [`Envelope`] accepts: 9999-12-31T23:59:59.999Z in Unix
/// milliseconds. RFC 3339 (CloudEvents' `time`) has four-digit years, so a later time has
/// no spelling there; a stored hook that claims one is corrupt.
pub const MAX_RECEIVED_AT: i64 = 253_402_300_799_999;

/// The partition of hooks without a tenant: their claim tenant, the first part of their
/// idempotency key (`default:<source>:<dedupe key>`) and their routing keys. Reserved:
/// [`validate_tenant`] refuses it as a tenant id, so a tenant can never share the
/// tenantless hooks' claims, idempotency keys or routes.
pub const TENANTLESS: &str = "default";

/// Check a tenant id: `[A-Za-z0-9_-]{1,64}`, and not the reserved [`TENANTLESS`].
pub fn validate_tenant(tenant: &str) -> Result<(), EnvelopeError> {
    validate_partition(tenant)?;
    if tenant == TENANTLESS {
        return Err(EnvelopeError::ReservedTenant);
    }
    Ok(())
}

/// Check a partition name: a tenant id, or [`TENANTLESS`] (the claim store files
/// tenantless hooks there): `[A-Za-z0-9_-]{1,64}`.
pub fn validate_partition(partition: &str) -> Result<(), EnvelopeError> {
    let ok = (1..=64).contains(&partition.len())
        && partition
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(EnvelopeError::InvalidTenant(partition.to_owned()))
    }
}

/// The verifier's verdict on a hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerificationStatus {
    /// The signature checked out.
    Ok,
    /// The signature did not check out (the hook was still accepted, flagged).
    Failed,
    /// No verifier ran.
    Skipped,
}

/// The verifier's result, carried with the hook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verification {
    /// The verdict.
    pub status: VerificationStatus,
    /// The provider (e.g. `stripe`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The scheme (e.g. `hmac-sha256`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// Why it failed or was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Whether the hook was flagged for review.
    #[serde(default)]
    pub flagged: bool,
}

/// A stored hook: the original request plus its identity.
///
/// Built with [`Envelope::builder`] or deserialized; both validate, so an `Envelope` in hand
/// is always valid: a tenant matching `[A-Za-z0-9_-]{1,64}`, non-empty ids, header names
/// that are HTTP tokens, values without control characters, and `size` equal to the body
/// length. Cloning is cheap (the body is [`Bytes`]).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "EnvelopeRepr", into = "EnvelopeRepr")]
pub struct Envelope {
    id: String,
    source_id: String,
    tenant_id: Option<String>,
    received_at: i64,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    content_type: Option<String>,
    body: Bytes,
    seq: Option<u64>,
    verification: Option<Verification>,
    dedupe_key: Option<String>,
    digest: BodyDigest,
}

/// The body's SHA-256 as lowercase hex, computed at most once per envelope: the body never
/// changes, so every sink and every retry of a hook shares one digest (it is most of the
/// cost of encoding a large Message v1). Not part of equality or `Debug`; a clone takes
/// the digest along.
#[derive(Clone, Default)]
struct BodyDigest(std::sync::OnceLock<[u8; 64]>);

impl PartialEq for BodyDigest {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for BodyDigest {}

impl Envelope {
    /// Start an envelope with its required identity and body. `method` defaults to `POST`,
    /// `path` to `/`, `received_at` to now.
    pub fn builder(
        id: impl Into<String>,
        source_id: impl Into<String>,
        body: impl Into<Bytes>,
    ) -> EnvelopeBuilder {
        EnvelopeBuilder {
            env: Envelope {
                id: id.into(),
                source_id: source_id.into(),
                tenant_id: None,
                received_at: now_ms(),
                method: "POST".into(),
                path: "/".into(),
                headers: Vec::new(),
                content_type: None,
                body: body.into(),
                seq: None,
                verification: None,
                dedupe_key: None,
                digest: BodyDigest::default(),
            },
            size: None,
        }
    }

    /// The hook id (a UUIDv7 at Ankusa's edge); the same on every redelivery.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// The source (catch URL) id.
    pub fn source_id(&self) -> &str {
        &self.source_id
    }
    /// The tenant, if any.
    pub fn tenant_id(&self) -> Option<&str> {
        self.tenant_id.as_deref()
    }
    /// Unix milliseconds when the hook was accepted.
    pub fn received_at(&self) -> i64 {
        self.received_at
    }
    /// The original request method.
    pub fn method(&self) -> &str {
        &self.method
    }
    /// The original request path.
    pub fn path(&self) -> &str {
        &self.path
    }
    /// The original request headers, in arrival order, names as received.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }
    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    /// The provider's content type.
    pub fn content_type(&self) -> Option<&str> {
        self.content_type.as_deref()
    }
    /// The exact raw body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }
    /// The body's SHA-256 as 64 lowercase hex digits (Message v1's `sha256`). Computed on
    /// first use and kept: a hook's fan-out to several sinks and its retries pay it once.
    pub fn body_sha256(&self) -> &str {
        let hex = self.digest.0.get_or_init(|| {
            use sha2::{Digest, Sha256};
            const DIGITS: &[u8; 16] = b"0123456789abcdef";
            let mut hex = [0u8; 64];
            for (i, b) in Sha256::digest(&self.body).iter().enumerate() {
                hex[2 * i] = DIGITS[usize::from(b >> 4)];
                hex[2 * i + 1] = DIGITS[usize::from(b & 0x0f)];
            }
            hex
        });
        std::str::from_utf8(hex).expect("hex is ASCII")
    }
    /// The body length in bytes.
    pub fn size(&self) -> u64 {
        self.body.len() as u64
    }
    /// The sequence number the queue writer assigned at commit.
    pub fn seq(&self) -> Option<u64> {
        self.seq
    }
    /// The verifier's result.
    pub fn verification(&self) -> Option<&Verification> {
        self.verification.as_ref()
    }
    /// The provider event key extracted at ingest.
    pub fn dedupe_key(&self) -> Option<&str> {
        self.dedupe_key.as_deref()
    }
    /// The hook's partition: its tenant, or [`TENANTLESS`] when it has none.
    pub fn partition(&self) -> &str {
        self.tenant_id.as_deref().unwrap_or(TENANTLESS)
    }

    /// The key a consumer deduplicates on: `"<partition>:<source_id>:<dedupe_key>"` (the
    /// partition is the tenant, or [`TENANTLESS`]) when a non-empty dedupe key is set, else
    /// the hook id.
    ///
    /// Borrowed when it is the hook id: most hooks have no dedupe key, and then nothing is
    /// copied.
    pub fn idempotency_key(&self) -> std::borrow::Cow<'_, str> {
        match self.dedupe_key.as_deref() {
            Some(key) if !key.is_empty() => {
                // `join` sizes the string once: `format!` was a sixth of building a
                // delivery's `Outgoing`.
                [self.partition(), self.source_id.as_str(), key]
                    .join(":")
                    .into()
            }
            _ => self.id.as_str().into(),
        }
    }

    /// A copy of this envelope with another body (a builder for variations in tests).
    pub fn to_builder(&self) -> EnvelopeBuilder {
        EnvelopeBuilder {
            env: self.clone(),
            size: None,
        }
    }

    fn validate(&self) -> Result<(), EnvelopeError> {
        if self.id.is_empty() {
            return Err(EnvelopeError::Empty("id"));
        }
        if self.source_id.is_empty() {
            return Err(EnvelopeError::Empty("source_id"));
        }
        if self.method.is_empty() {
            return Err(EnvelopeError::Empty("method"));
        }
        for (field, text) in [
            ("id", &self.id),
            ("source_id", &self.source_id),
            ("method", &self.method),
            ("path", &self.path),
        ] {
            if text.chars().any(char::is_control) {
                return Err(EnvelopeError::ControlCharacter(field));
            }
        }
        for (field, text) in [
            ("content_type", &self.content_type),
            ("dedupe_key", &self.dedupe_key),
        ] {
            if text
                .as_deref()
                .is_some_and(|t| t.chars().any(char::is_control))
            {
                return Err(EnvelopeError::ControlCharacter(field));
            }
        }
        if let Some(t) = &self.tenant_id {
            validate_tenant(t)?;
        }
        if self.received_at < 0 {
            return Err(EnvelopeError::NegativeReceivedAt(self.received_at));
        }
        if self.received_at > MAX_RECEIVED_AT {
            return Err(EnvelopeError::ReceivedAtTooLate(self.received_at));
        }
        if self.headers.len() > MAX_ENVELOPE_HEADERS {
            return Err(EnvelopeError::TooManyHeaders {
                count: self.headers.len(),
                max: MAX_ENVELOPE_HEADERS,
            });
        }
        for (name, value) in &self.headers {
            if name.is_empty() || !name.bytes().all(is_token_byte) {
                return Err(EnvelopeError::InvalidHeaderName(name.clone()));
            }
            if value.chars().any(|c| c.is_control() && c != '\t') {
                return Err(EnvelopeError::InvalidHeaderValue(name.clone()));
            }
        }
        Ok(())
    }
}

/// RFC 9110 `tchar`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl fmt::Debug for Envelope {
    // The body and header values may hold provider secrets, and a catch URL's path or
    // query may carry a token: print their shape only (the path as a stable short hash).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = match self.path.as_str() {
            "" | "/" => self.path.clone(),
            p => crate::describe::redacted_path(p),
        };
        f.debug_struct("Envelope")
            .field("id", &self.id)
            .field("source_id", &self.source_id)
            .field("tenant_id", &self.tenant_id)
            .field("received_at", &self.received_at)
            .field("method", &self.method)
            .field("path", &path)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("content_type", &self.content_type)
            .field("size", &self.body.len())
            .field("seq", &self.seq)
            .field("dedupe_key", &self.dedupe_key)
            .finish_non_exhaustive()
    }
}

/// Builds a validated [`Envelope`].
#[derive(Debug, Clone)]
pub struct EnvelopeBuilder {
    env: Envelope,
    size: Option<u64>,
}

impl EnvelopeBuilder {
    /// Set the tenant.
    pub fn tenant_id(mut self, tenant: impl Into<String>) -> Self {
        self.env.tenant_id = Some(tenant.into());
        self
    }
    /// Set or clear the tenant.
    pub fn tenant(mut self, tenant: Option<String>) -> Self {
        self.env.tenant_id = tenant;
        self
    }
    /// Set the receive time, Unix milliseconds: `0..=`[`MAX_RECEIVED_AT`], checked by
    /// [`build`](Self::build).
    pub fn received_at(mut self, ms: i64) -> Self {
        self.env.received_at = ms;
        self
    }
    /// Set the request method.
    pub fn method(mut self, method: impl Into<String>) -> Self {
        self.env.method = method.into();
        self
    }
    /// Set the request path.
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.env.path = path.into();
        self
    }
    /// Append a header (arrival order is kept).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.headers.push((name.into(), value.into()));
        self
    }
    /// Replace all headers.
    pub fn headers(mut self, headers: Vec<(String, String)>) -> Self {
        self.env.headers = headers;
        self
    }
    /// Set the content type.
    pub fn content_type(mut self, ct: impl Into<String>) -> Self {
        self.env.content_type = Some(ct.into());
        self
    }
    /// Replace the body.
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.env.body = body.into();
        self.env.digest = BodyDigest::default();
        self
    }
    /// Set the sequence number.
    pub fn seq(mut self, seq: u64) -> Self {
        self.env.seq = Some(seq);
        self
    }
    /// Set the verification result.
    pub fn verification(mut self, v: Verification) -> Self {
        self.env.verification = Some(v);
        self
    }
    /// Set the dedupe key.
    pub fn dedupe_key(mut self, key: impl Into<String>) -> Self {
        self.env.dedupe_key = Some(key.into());
        self
    }
    /// Declare the body size; [`build`](Self::build) refuses a size that is not the body
    /// length (a stored hook whose size disagrees with its bytes is corrupt).
    pub fn size(mut self, size: u64) -> Self {
        self.size = Some(size);
        self
    }
    /// Validate and build.
    pub fn build(self) -> Result<Envelope, EnvelopeError> {
        if let Some(size) = self.size {
            let body_len = self.env.body.len() as u64;
            if size != body_len {
                return Err(EnvelopeError::SizeMismatch { size, body_len });
            }
        }
        self.env.validate()?;
        Ok(self.env)
    }
}

/// The serialized form: the body as standard base64, as in JSON-lines input.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvelopeRepr {
    id: String,
    source_id: String,
    #[serde(default)]
    tenant_id: Option<String>,
    received_at: i64,
    #[serde(default = "default_method")]
    method: String,
    #[serde(default = "default_path")]
    path: String,
    #[serde(default)]
    headers: Vec<(String, String)>,
    #[serde(default)]
    content_type: Option<String>,
    #[serde(with = "b64")]
    body_base64: Bytes,
    #[serde(default)]
    seq: Option<u64>,
    #[serde(default)]
    verification: Option<Verification>,
    #[serde(default)]
    dedupe_key: Option<String>,
    #[serde(default)]
    size: Option<u64>,
}

fn default_method() -> String {
    "POST".into()
}
fn default_path() -> String {
    "/".into()
}

mod b64 {
    use bytes::Bytes;
    use serde::{Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(b: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64_simd::STANDARD.encode_to_string(b))
    }
    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        // Decoded straight from the parser's text: no owned copy of the base64 first.
        d.deserialize_str(Body)
    }

    struct Body;

    impl serde::de::Visitor<'_> for Body {
        type Value = Bytes;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a base64 string")
        }

        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Bytes, E> {
            decode(s.as_bytes()).map_err(|e| E::custom(format!("body_base64: {e}")))
        }
    }

    /// Standard base64 with padding, canonical only, SIMD-decoded; on failure, what is
    /// wrong with the text (the SIMD decoder only says that something is).
    pub(super) fn decode(text: &[u8]) -> Result<Bytes, String> {
        base64_simd::STANDARD
            .decode_to_vec(text)
            .map(Bytes::from)
            .map_err(|_| explain(text))
    }

    /// Why `text` is not canonical padded standard base64: the first fault found.
    fn explain(text: &[u8]) -> String {
        let alphabet = |c: u8| c.is_ascii_alphanumeric() || c == b'+' || c == b'/';
        if let Some(i) = text.iter().position(|&c| !alphabet(c) && c != b'=') {
            return format!("invalid byte {:?} at offset {i}", char::from(text[i]));
        }
        if !text.len().is_multiple_of(4) {
            return format!("length {} is not a multiple of 4", text.len());
        }
        let body = text.len() - text.iter().rev().take_while(|&&c| c == b'=').count();
        if text.len() - body > 2 || text[..body].contains(&b'=') {
            return "misplaced padding".to_owned();
        }
        "the last symbol has bits set past the data (not canonical)".to_owned()
    }
}

impl TryFrom<EnvelopeRepr> for Envelope {
    type Error = EnvelopeError;
    fn try_from(r: EnvelopeRepr) -> Result<Self, Self::Error> {
        let env = Envelope {
            id: r.id,
            source_id: r.source_id,
            tenant_id: r.tenant_id,
            received_at: r.received_at,
            method: r.method,
            path: r.path,
            headers: r.headers,
            content_type: r.content_type,
            body: r.body_base64,
            seq: r.seq,
            verification: r.verification,
            dedupe_key: r.dedupe_key,
            digest: BodyDigest::default(),
        };
        // Moved into the builder, not copied by `to_builder`: every string of every parsed
        // envelope was cloned once and the original dropped.
        EnvelopeBuilder { env, size: r.size }.build()
    }
}

impl From<Envelope> for EnvelopeRepr {
    fn from(e: Envelope) -> Self {
        let size = Some(e.body.len() as u64);
        EnvelopeRepr {
            id: e.id,
            source_id: e.source_id,
            tenant_id: e.tenant_id,
            received_at: e.received_at,
            method: e.method,
            path: e.path,
            headers: e.headers,
            content_type: e.content_type,
            body_base64: e.body,
            seq: e.seq,
            verification: e.verification,
            dedupe_key: e.dedupe_key,
            size,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> EnvelopeBuilder {
        Envelope::builder("h1", "stripe", &b"{}"[..]).received_at(1_700_000_000_000)
    }

    #[test]
    fn body_digest_is_computed_once_and_follows_the_body() {
        let e = env().build().unwrap();
        assert_eq!(
            e.body_sha256(),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        let c = e.clone();
        assert_eq!(c.body_sha256(), e.body_sha256());
        assert_eq!(c, e);
        let other = e.to_builder().body(&b"[]"[..]).build().unwrap();
        assert_eq!(
            other.body_sha256(),
            "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"
        );
        let round: Envelope = serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
        assert_eq!(round.body_sha256(), e.body_sha256());
    }

    #[test]
    fn tenant_rule() {
        assert!(validate_tenant("acme_Co-1").is_ok());
        assert!(validate_tenant(&"a".repeat(64)).is_ok());
        for bad in ["", "a.b", "a b", "é", &"a".repeat(65)] {
            assert_eq!(
                validate_tenant(bad),
                Err(EnvelopeError::InvalidTenant(bad.to_owned()))
            );
        }
        let err = env().tenant_id("no/slash").build().unwrap_err();
        assert!(err.to_string().contains("invalid tenant id"), "{err}");
    }

    #[test]
    fn size_must_match_body() {
        assert_eq!(
            env().size(3).build().unwrap_err(),
            EnvelopeError::SizeMismatch {
                size: 3,
                body_len: 2
            }
        );
        assert_eq!(env().size(2).build().unwrap().size(), 2);
    }

    #[test]
    fn idempotency_key_rules() {
        let e = env().tenant_id("acme").dedupe_key("evt_1").build().unwrap();
        assert_eq!(e.idempotency_key(), "acme:stripe:evt_1");
        let e = env().dedupe_key("evt_1").build().unwrap();
        assert_eq!(e.idempotency_key(), "default:stripe:evt_1");
        let a = env().tenant_id("a").dedupe_key("k").build().unwrap();
        let b = env().tenant_id("b").dedupe_key("k").build().unwrap();
        assert_ne!(a.idempotency_key(), b.idempotency_key());
        let e = env().dedupe_key("").build().unwrap();
        assert_eq!(e.idempotency_key(), "h1");
        assert_eq!(env().build().unwrap().idempotency_key(), "h1");
    }

    #[test]
    fn bad_fields_are_clear_errors() {
        assert_eq!(
            Envelope::builder("", "s", "").build().unwrap_err(),
            EnvelopeError::Empty("id")
        );
        assert_eq!(
            Envelope::builder("i", "", "").build().unwrap_err(),
            EnvelopeError::Empty("source_id")
        );
        assert_eq!(
            env().received_at(-1).build().unwrap_err(),
            EnvelopeError::NegativeReceivedAt(-1)
        );
        assert_eq!(
            env().header("bad name", "v").build().unwrap_err(),
            EnvelopeError::InvalidHeaderName("bad name".into())
        );
        assert_eq!(
            env().header("x", "a\r\nb").build().unwrap_err(),
            EnvelopeError::InvalidHeaderValue("x".into())
        );
        // Tabs and non-ASCII text are fine in values.
        assert!(env().header("x", "a\tb ünï").build().is_ok());
        assert_eq!(
            Envelope::builder("a\nb", "s", "").build().unwrap_err(),
            EnvelopeError::ControlCharacter("id")
        );
    }

    #[test]
    fn received_at_at_or_past_year_10000_is_refused() {
        // 253402300800000 is 10000-01-01T00:00:00Z, which RFC 3339 cannot write.
        let last = env().received_at(MAX_RECEIVED_AT).build().unwrap();
        assert_eq!(last.received_at(), 253_402_300_799_999);
        for late in [MAX_RECEIVED_AT + 1, i64::MAX] {
            assert_eq!(
                env().received_at(late).build().unwrap_err(),
                EnvelopeError::ReceivedAtTooLate(late)
            );
        }
        // The same rule when a stored hook is decoded.
        let json = |at: i64| {
            format!(r#"{{"id":"h","source_id":"s","received_at":{at},"body_base64":""}}"#)
        };
        assert!(serde_json::from_str::<Envelope>(&json(MAX_RECEIVED_AT)).is_ok());
        let err = serde_json::from_str::<Envelope>(&json(253_402_300_800_000)).unwrap_err();
        assert!(err.to_string().contains("before year 10000"), "{err}");
    }

    #[test]
    fn header_lookup_is_case_insensitive() {
        let e = env()
            .header("X-Foo", "1")
            .header("x-foo", "2")
            .build()
            .unwrap();
        assert_eq!(e.header("x-FOO"), Some("1"));
        assert_eq!(e.header("nope"), None);
    }

    #[test]
    fn json_round_trip_validates() {
        let e = env()
            .tenant_id("acme")
            .header("X-A", "1")
            .body(vec![0u8, 255, 1])
            .build()
            .unwrap();
        let json = serde_json::to_string(&e).unwrap();
        assert!(json.contains("\"body_base64\":\"AP8B\""), "{json}");
        let back: Envelope = serde_json::from_str(&json).unwrap();
        assert_eq!(back, e);

        let bad = json.replace("\"size\":3", "\"size\":4");
        let err = serde_json::from_str::<Envelope>(&bad).unwrap_err();
        assert!(
            err.to_string().contains("does not match body length"),
            "{err}"
        );
        let bad = json.replace("acme", "a.b");
        assert!(serde_json::from_str::<Envelope>(&bad).is_err());
        let bad = json.replace("AP8B", "***");
        assert!(serde_json::from_str::<Envelope>(&bad).is_err());
    }

    #[test]
    fn the_tenantless_partition_is_reserved() {
        assert_eq!(
            validate_tenant(TENANTLESS),
            Err(EnvelopeError::ReservedTenant)
        );
        assert_eq!(
            env().tenant_id("default").build().unwrap_err(),
            EnvelopeError::ReservedTenant
        );
        let err = serde_json::from_str::<Envelope>(
            r#"{"id":"h","source_id":"s","tenant_id":"default","received_at":1,"body_base64":""}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("reserved"), "{err}");
        // Other ids that merely look like it are ordinary tenants.
        for ok in ["Default", "default1", "defaults"] {
            assert!(validate_tenant(ok).is_ok(), "{ok}");
        }
        // The partition itself stays valid where partitions are named (claim store).
        assert!(validate_partition(TENANTLESS).is_ok());
        assert!(validate_partition("a.b").is_err());
        let none = env().dedupe_key("k").build().unwrap();
        assert_eq!(none.partition(), TENANTLESS);
        assert_eq!(none.idempotency_key(), "default:stripe:k");
        assert_eq!(env().tenant_id("acme").build().unwrap().partition(), "acme");
    }

    #[test]
    fn header_count_is_limited() {
        let headers = |n: usize| (0..n).map(|i| (format!("x-h{i}"), "v".into())).collect();
        assert!(env().headers(headers(MAX_ENVELOPE_HEADERS)).build().is_ok());
        let err = env()
            .headers(headers(MAX_ENVELOPE_HEADERS + 1))
            .build()
            .unwrap_err();
        assert_eq!(
            err,
            EnvelopeError::TooManyHeaders {
                count: 1_001,
                max: 1_000
            }
        );
        assert_eq!(
            err.to_string(),
            "envelope has 1001 headers; at most 1000 are accepted"
        );
    }

    #[test]
    fn debug_hides_the_path() {
        let e = env().path("/in/src_1?token=sekrit-query").build().unwrap();
        let d = format!("{e:?}");
        assert!(!d.contains("sekrit") && !d.contains("src_1"), "{d}");
        assert!(d.contains("REDACTED-PATH-"), "{d}");
        assert!(format!("{:?}", env().build().unwrap()).contains("path: \"/\""));
    }

    #[test]
    fn debug_hides_body_and_header_values() {
        let e = env()
            .header("authorization", "Bearer sekrit")
            .body("sekrit-body")
            .build()
            .unwrap();
        let d = format!("{e:?}");
        assert!(!d.contains("sekrit"), "{d}");
        assert!(d.contains("authorization"));
    }

    #[test]
    fn body_base64_decodes_exactly_as_the_base64_crate_does() {
        use base64::Engine as _;
        let std = base64::engine::general_purpose::STANDARD;
        for text in [
            "",
            "QQ==",
            "QUI=",
            "QUJD",
            "QR==",
            "QUJ=",
            "QQ",
            "QQ=",
            "Q===",
            "QUJD\n",
            "QU JD",
            "////",
            "-_-_",
            "QUJDRA==QQ==",
            "=",
            "QQ==QQ==",
            "YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXo=",
        ] {
            let ours = b64::decode(text.as_bytes()).map(|b| b.to_vec());
            let theirs = std.decode(text);
            if let Err(why) = &ours {
                assert!(!why.is_empty() && why.len() < 80, "{text:?}: {why}");
            }
            assert_eq!(
                ours.is_ok(),
                theirs.is_ok(),
                "{text:?}: {ours:?} vs {theirs:?}"
            );
            if let (Ok(a), Ok(b)) = (ours, theirs) {
                assert_eq!(a, b, "{text:?}");
            }
        }
        let long: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
        let text = std.encode(&long);
        assert_eq!(b64::decode(text.as_bytes()).unwrap(), long);
    }
}

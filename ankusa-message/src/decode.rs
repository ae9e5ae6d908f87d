//! Reading a Message v1 back: [`decode`], and [`verify`] for a signed one.

use crate::message::sha256_hex;
use crate::signing::{self, DEFAULT_TOLERANCE, Signer, VerifyError};
use ankusa_sink_core::{ClaimRef, ClaimRefError, TENANTLESS};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use serde::Deserialize;
use std::time::SystemTime;

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
/// use ankusa_message::{EmptyValues, Layout, Outgoing};
/// use ankusa_message::signing::Signer;
/// use ankusa_sink_core::{Ctx, Envelope};
///
/// let signer = Signer::new(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).unwrap();
/// let env = Envelope::builder("h-1", "stripe", &b"{}"[..]).build().unwrap();
/// let ctx = Ctx::for_envelope(&env);
/// let layout = Layout::message(None, EmptyValues::Drop).with_signer(signer.clone());
/// let out = Outgoing::new(&env, &ctx, &layout).unwrap();
/// let attr = |a| out.get(a).unwrap();
/// let msg = ankusa_message::verify(
///     &signer,
///     attr(ankusa_message::Attr::WebhookId),
///     attr(ankusa_message::Attr::WebhookTimestamp),
///     attr(ankusa_message::Attr::WebhookSignature),
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
/// filed under the message's tenant (the tenant or [`TENANTLESS`] of its
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
            if reference.tenant() != w.tenant_id.as_deref().unwrap_or(TENANTLESS) {
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

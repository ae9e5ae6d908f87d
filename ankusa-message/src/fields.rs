//! [`Fields`]: a hook's fields and its inline/claim decision, for a sink that stores them
//! in columns (a table, a file, a search index) instead of sending a Message v1.

use crate::forwarding::forwarded_headers;
use crate::message::{BodyMode, EncodeError, body_mode};
use ankusa_sink_core::{ClaimRef, Ctx, Envelope};
use bytes::Bytes;
use std::borrow::Cow;
use std::num::NonZeroUsize;

/// Where a hook's body is: inline, or by the claim dispatch checked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyRef<'a> {
    /// The raw body (at most the inline threshold, or no threshold).
    Inline(&'a Bytes),
    /// Over the threshold: the claim reference (`urn:ankusa:claim:v1:<tenant>:<ULID>`) a
    /// consumer fetches the body by.
    Claim(&'a ClaimRef),
}

/// Decide, as [`encode`](crate::encode) decides, whether `env`'s body travels inline
/// under `inline_max_bytes` (`None`: always), or by `ctx.claim`, which must be this body's
/// and this tenant's.
///
/// # Errors
/// Exactly [`encode`](crate::encode)'s: [`EncodeError::NoClaim`] over the threshold
/// without a claim, [`EncodeError::ClaimDigestMismatch`] and
/// [`EncodeError::ClaimTenantMismatch`] for a claim of another body or tenant (all config
/// failures: `?` turns them into a [`Failure`](ankusa_sink_core::Failure)).
pub fn body_or_claim<'a>(
    env: &'a Envelope,
    ctx: &'a Ctx,
    inline_max_bytes: Option<NonZeroUsize>,
) -> Result<BodyRef<'a>, EncodeError> {
    if body_mode(env.size(), inline_max_bytes) == BodyMode::Inline {
        return Ok(BodyRef::Inline(env.body()));
    }
    let claim = ctx.claim.as_ref().ok_or(EncodeError::NoClaim {
        size: env.size(),
        max: inline_max_bytes.map_or(0, NonZeroUsize::get),
    })?;
    if claim.sha256() != env.body_sha256() {
        return Err(EncodeError::ClaimDigestMismatch);
    }
    if claim.reference().tenant() != env.partition() {
        return Err(EncodeError::ClaimTenantMismatch {
            claim: claim.reference().tenant().to_owned(),
            envelope: env.partition().to_owned(),
        });
    }
    Ok(BodyRef::Claim(claim.reference()))
}

/// Everything a Message v1 carries, as fields, without encoding one: for a sink that
/// writes a row, a line or a document per hook.
///
/// # Behavior
/// - The values are the ones [`Outgoing`](crate::Outgoing) and [`encode`](crate::encode)
///   send: the same idempotency key (a consumer dedupes on it: give it a unique key or
///   use it as the document id), the same forwarded headers, the same inline/claim
///   decision ([`body_or_claim`]).
/// - Borrows from the envelope and context; building allocates only the forwarded header
///   list and, for a hook with a dedupe key, the joined idempotency key.
/// - A retry carries the same values; a replay the same ones with its
///   [`replay_id`](Self::replay_id), so a replay is a copy of its own.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Fields<'a> {
    /// The hook id.
    pub id: &'a str,
    /// The source id.
    pub source_id: &'a str,
    /// The tenant, `None` for a tenantless hook.
    pub tenant_id: Option<&'a str>,
    /// Unix ms the hook was received.
    pub received_at: i64,
    /// The consumer's dedupe key ([`Envelope::idempotency_key`]).
    pub idempotency_key: Cow<'a, str>,
    /// The provider's event key, when set and not empty.
    pub dedupe_key: Option<&'a str>,
    /// The replay job, when this delivery is a replay.
    pub replay_id: Option<&'a str>,
    /// The body's content type, as the provider sent it.
    pub content_type: Option<&'a str>,
    /// The headers a consumer may see ([`forwarded_headers`]).
    pub headers: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    /// Lowercase hex sha256 of the raw body, inline or claimed.
    pub sha256: &'a str,
    /// The raw body's size in bytes.
    pub size: u64,
    /// The body, or its claim.
    pub body: BodyRef<'a>,
}

impl<'a> Fields<'a> {
    /// The fields of `env` in this attempt, the body inline up to `inline_max_bytes`.
    ///
    /// # Errors
    /// As [`body_or_claim`].
    pub fn new(
        env: &'a Envelope,
        ctx: &'a Ctx,
        inline_max_bytes: Option<NonZeroUsize>,
    ) -> Result<Self, EncodeError> {
        Ok(Fields {
            id: env.id(),
            source_id: env.source_id(),
            tenant_id: env.tenant_id(),
            received_at: env.received_at(),
            idempotency_key: env.idempotency_key(),
            dedupe_key: env.dedupe_key().filter(|d| !d.is_empty()),
            replay_id: ctx.replay_id.as_deref().filter(|r| !r.is_empty()),
            content_type: env.content_type(),
            headers: forwarded_headers(env, ctx),
            sha256: env.body_sha256(),
            size: env.size(),
            body: body_or_claim(env, ctx, inline_max_bytes)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{env, nz};
    use crate::{MessageBody, decode, encode, sha256_hex};
    use ankusa_sink_core::Claim;

    #[test]
    fn the_fields_are_what_message_v1_carries() {
        let e = env();
        let ctx = Ctx::for_envelope(&e).with_replay_id("r1");
        let f = Fields::new(&e, &ctx, Some(nz(5))).unwrap();
        let m = decode(&encode(&e, &ctx, Some(nz(5))).unwrap()).unwrap();
        assert_eq!(f.id, m.id);
        assert_eq!(f.source_id, m.source_id);
        assert_eq!(f.tenant_id.map(str::to_owned), m.tenant_id);
        assert_eq!(f.received_at, m.received_at);
        assert_eq!(f.idempotency_key, m.idempotency_key);
        assert_eq!(f.replay_id.map(str::to_owned), m.replay_id);
        assert_eq!(f.sha256, sha256_hex(b"hello"));
        assert_eq!(f.size, 5);
        let MessageBody::Inline(b) = m.body else {
            panic!("inline")
        };
        assert_eq!(f.body, BodyRef::Inline(&b));
        // A plain retry: the same idempotency key, no replay id.
        let retry = Ctx::for_envelope(&e).with_attempt(2);
        let again = Fields::new(&e, &retry, Some(nz(5))).unwrap();
        assert_eq!(again.idempotency_key, f.idempotency_key);
        assert_eq!(again.replay_id, None);
    }

    #[test]
    fn the_claim_decision_is_encodes() {
        let e = env();
        let ctx = Ctx::for_envelope(&e);
        // One byte over the threshold without a claim: encode's config error.
        let no_claim = Fields::new(&e, &ctx, Some(nz(4))).unwrap_err();
        assert!(matches!(no_claim, EncodeError::NoClaim { size: 5, max: 4 }));
        assert!(matches!(
            encode(&e, &ctx, Some(nz(4))).unwrap_err(),
            EncodeError::NoClaim { size: 5, max: 4 }
        ));
        let r = ClaimRef::new("acme", ulid::Ulid::from_parts(1, 2).to_string()).unwrap();
        let claimed = ctx
            .clone()
            .with_claim(Claim::new(r.clone(), sha256_hex(b"hello")).unwrap());
        assert_eq!(
            Fields::new(&e, &claimed, Some(nz(4))).unwrap().body,
            BodyRef::Claim(&r)
        );
        let wrong = ctx.with_claim(Claim::new(r, sha256_hex(b"other")).unwrap());
        assert!(matches!(
            body_or_claim(&e, &wrong, Some(nz(4))).unwrap_err(),
            EncodeError::ClaimDigestMismatch
        ));
    }
}

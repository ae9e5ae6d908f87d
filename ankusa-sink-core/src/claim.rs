//! Claim references: how a body too large to send inline travels by reference.

use crate::envelope::validate_partition;
use std::fmt;
use std::str::FromStr;

const PREFIX: &str = "urn:ankusa:claim:v1:";

/// Why a claim reference was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimRefError {
    /// Not `urn:ankusa:claim:v1:<tenant>:<ULID>`.
    #[error("malformed claim reference: expected urn:ankusa:claim:v1:<tenant>:<ULID>")]
    Malformed,
    /// The tenant is outside `[A-Za-z0-9_-]{{1,64}}`.
    #[error("claim reference tenant must match [A-Za-z0-9_-]{{1,64}}")]
    InvalidTenant,
    /// The claim id is not a canonical uppercase 26-character ULID.
    #[error("claim id must be a canonical uppercase 26-character ULID")]
    InvalidId,
    /// The digest is not 64 lowercase hex characters.
    #[error("claim sha256 must be 64 lowercase hex characters")]
    InvalidDigest,
}

/// `urn:ankusa:claim:v1:<tenant>:<claim_id>`, compatible with Ankusa's consumers.
///
/// The tenant is the partition the claim is filed under: the hook's tenant, or
/// [`TENANTLESS`](crate::TENANTLESS) (`default`) for a hook without one.
///
/// The claim id is a canonical ULID: 26 uppercase Crockford base32 characters (no I, L, O,
/// U), the first `0`..=`7`. No case folding is accepted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClaimRef {
    tenant: String,
    claim_id: String,
}

impl ClaimRef {
    /// A reference from its parts: the claim id as a canonical ULID's text
    /// (`ulid.to_string()`).
    pub fn new(
        tenant: impl Into<String>,
        claim_id: impl Into<String>,
    ) -> Result<Self, ClaimRefError> {
        let tenant = tenant.into();
        validate_partition(&tenant).map_err(|_| ClaimRefError::InvalidTenant)?;
        let claim_id = claim_id.into();
        check_claim_id(&claim_id)?;
        Ok(ClaimRef { tenant, claim_id })
    }
    /// The tenant (partition) the claim lives under.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }
    /// The claim id: a canonical ULID's 26 characters (`Ulid::from_string` reads it).
    pub fn claim_id(&self) -> &str {
        &self.claim_id
    }
}

/// Check a claim id the way Ankusa's SDKs do: `[0-7][0-9A-HJKMNP-TV-Z]{25}`, which is
/// exactly a canonical ULID's text (the first digit at most 7 keeps it within 128 bits).
fn check_claim_id(s: &str) -> Result<(), ClaimRefError> {
    let b = s.as_bytes();
    let crockford = |c: u8| c.is_ascii_digit() || (c.is_ascii_uppercase() && !b"ILOU".contains(&c));
    if b.len() != 26 || !(b'0'..=b'7').contains(&b[0]) || !b.iter().all(|&c| crockford(c)) {
        return Err(ClaimRefError::InvalidId);
    }
    Ok(())
}

impl FromStr for ClaimRef {
    type Err = ClaimRefError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s.strip_prefix(PREFIX).ok_or(ClaimRefError::Malformed)?;
        let (tenant, id) = rest.split_once(':').ok_or(ClaimRefError::Malformed)?;
        if id.contains(':') {
            return Err(ClaimRefError::Malformed);
        }
        ClaimRef::new(tenant, id)
    }
}

impl fmt::Display for ClaimRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}{}:{}", self.tenant, self.claim_id)
    }
}

/// A body already checked in: the reference plus the sha256 of the raw body.
///
/// Dispatch checks a body in once and hands the same claim to every sink and every retry
/// in [`Ctx::claim`](crate::Ctx).
///
/// `Debug` shows only the tenant: the reference and the digest together are what a reader
/// of the store needs to redeem the body.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Claim {
    reference: ClaimRef,
    sha256: String,
}

impl Claim {
    /// A claim; `sha256` must be 64 lowercase hex characters.
    pub fn new(reference: ClaimRef, sha256: impl Into<String>) -> Result<Self, ClaimRefError> {
        let sha256 = sha256.into();
        let ok = sha256.len() == 64
            && sha256
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
        if !ok {
            return Err(ClaimRefError::InvalidDigest);
        }
        Ok(Claim { reference, sha256 })
    }
    /// The reference.
    pub fn reference(&self) -> &ClaimRef {
        &self.reference
    }
    /// Lowercase hex sha256 of the raw body.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }
}

impl fmt::Debug for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Claim")
            .field("tenant", &self.reference.tenant)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAV";

    #[test]
    fn round_trip() {
        let urn = format!("urn:ankusa:claim:v1:acme_1-x:{ID}");
        let r: ClaimRef = urn.parse().unwrap();
        assert_eq!(r.tenant(), "acme_1-x");
        assert_eq!(r.claim_id(), ID);
        assert_eq!(r.to_string(), urn);
    }

    #[test]
    fn rejections() {
        let cases = [
            (
                format!("urn:ankusa:claim:v1:acme:{}", ID.to_lowercase()),
                ClaimRefError::InvalidId,
            ),
            (
                format!("urn:ankusa:claim:v1:acme:{}", &ID[..25]),
                ClaimRefError::InvalidId,
            ),
            (
                format!("urn:ankusa:claim:v1:acme:{ID}Z"),
                ClaimRefError::InvalidId,
            ),
            (
                format!("urn:ankusa:claim:v1:acme:8{}", &ID[1..]),
                ClaimRefError::InvalidId,
            ),
            (
                format!("urn:ankusa:claim:v1:acme:{}I", &ID[..25]),
                ClaimRefError::InvalidId,
            ),
            (
                format!("urn:ankusa:claim:v1:acme:{}L", &ID[..25]),
                ClaimRefError::InvalidId,
            ),
            (
                format!("urn:ankusa:claim:v1:acme:{}O", &ID[..25]),
                ClaimRefError::InvalidId,
            ),
            (
                format!("urn:ankusa:claim:v1:acme:{}U", &ID[..25]),
                ClaimRefError::InvalidId,
            ),
            (
                format!("urn:ankusa:claim:v1:acme:{ID}:x"),
                ClaimRefError::Malformed,
            ),
            (
                format!("urn:ankusa:claim:v1:acme:{ID}\n"),
                ClaimRefError::InvalidId,
            ),
            (
                format!("urn:ankusa:claim:v1:a.b:{ID}"),
                ClaimRefError::InvalidTenant,
            ),
            (
                format!("urn:ankusa:claim:v1:{}:{ID}", "a".repeat(65)),
                ClaimRefError::InvalidTenant,
            ),
            (
                format!("urn:ankusa:claim:v1::{ID}"),
                ClaimRefError::InvalidTenant,
            ),
            (
                format!("urn:ankusa:claim:v2:acme:{ID}"),
                ClaimRefError::Malformed,
            ),
            (
                "urn:ankusa:claim:v1:acme:obj:0:10:sha256-ab".to_owned(),
                ClaimRefError::Malformed,
            ),
        ];
        for (input, want) in cases {
            assert_eq!(input.parse::<ClaimRef>(), Err(want), "{input:?}");
        }
    }

    #[test]
    fn the_tenantless_partition_is_a_claim_tenant() {
        let r: ClaimRef = format!("urn:ankusa:claim:v1:default:{ID}").parse().unwrap();
        assert_eq!(r.tenant(), crate::TENANTLESS);
        assert!(ClaimRef::new(crate::TENANTLESS, r.claim_id()).is_ok());
    }

    #[test]
    fn debug_of_a_claim_shows_no_capability() {
        let r: ClaimRef = format!("urn:ankusa:claim:v1:acme:{ID}").parse().unwrap();
        let sha = "ab".repeat(32);
        let d = format!("{:?}", Claim::new(r, sha.clone()).unwrap());
        assert!(!d.contains(ID) && !d.contains(&sha), "{d}");
        assert!(d.contains("acme"), "{d}");
    }

    #[test]
    fn digest_must_be_lowercase_hex() {
        let r: ClaimRef = format!("urn:ankusa:claim:v1:t:{ID}").parse().unwrap();
        assert!(Claim::new(r.clone(), "a".repeat(64)).is_ok());
        assert_eq!(
            Claim::new(r.clone(), "A".repeat(64)),
            Err(ClaimRefError::InvalidDigest)
        );
        assert_eq!(
            Claim::new(r, "a".repeat(63)),
            Err(ClaimRefError::InvalidDigest)
        );
    }
}

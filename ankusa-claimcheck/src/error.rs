//! The claim-check error taxonomy, and the one place store errors are classified.
//!
//! | Error | When | [`Class`] |
//! | --- | --- | --- |
//! | [`InvalidRef`](ClaimError::InvalidRef) | malformed reference, bad tenant or id in it, a digest that is not 64 lowercase hex | permanent |
//! | [`InvalidTenant`](ClaimError::InvalidTenant) | checking in under a tenant outside `[A-Za-z0-9_-]{1,64}` | permanent |
//! | [`NotFound`](ClaimError::NotFound) | no pack, or a position past the pack's index | permanent |
//! | [`IntegrityMismatch`](ClaimError::IntegrityMismatch) | the bytes read do not hash to the expected sha256 | permanent |
//! | [`WrongTenant`](ClaimError::WrongTenant) | the reference is filed under another tenant than the reader's message | permanent |
//! | [`SizeMismatch`](ClaimError::SizeMismatch) | the store's index gives the claim another length than the message declares | permanent |
//! | [`ReadTooLarge`](ClaimError::ReadTooLarge) | a read over [`ClaimConfig::max_read_bytes`](crate::ClaimConfig::max_read_bytes) | permanent |
//! | [`CorruptPack`](ClaimError::CorruptPack) | the object at the pack's key is not a claim pack, or is cut short | permanent |
//! | [`TooLarge`](ClaimError::TooLarge) | a body (or pack) that cannot fit a non-ZIP64 pack under 4 GiB | permanent |
//! | [`Forbidden`](ClaimError::Forbidden) | the store refused the credentials (`PermissionDenied`, `Unauthenticated`) | config |
//! | [`StoreConfig`](ClaimError::StoreConfig) | the store cannot do this at all (missing bucket on write, unsupported operation, bad path or key) | config |
//! | [`Unavailable`](ClaimError::Unavailable) | anything else the store answered: connection refused, timeout, 5xx, I/O | transient |

use ankusa_sink_core::{ClaimRefError, Class, Failure};
use std::fmt;
use std::sync::Arc;

/// An `object_store` error, shared so one failed pack upload can fail each of its claims.
///
/// `Display` is the store's own text, which already includes its causes; use
/// [`inner`](StoreError::inner) for the typed error.
#[derive(Clone)]
pub struct StoreError(Arc<object_store::Error>);

impl StoreError {
    pub(crate) fn new(e: object_store::Error) -> Self {
        StoreError(Arc::new(e))
    }
    /// The typed `object_store` error.
    pub fn inner(&self) -> &object_store::Error {
        &self.0
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl std::error::Error for StoreError {}

/// Why a check-in, a locate, a read or a redeem failed. See the module table for classes.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimError {
    /// The reference or digest handed over is not well formed.
    #[error("invalid claim reference")]
    InvalidRef(#[source] ClaimRefError),
    /// A check-in under a tenant outside `[A-Za-z0-9_-]{1,64}`.
    #[error("invalid tenant {0:?}: a claim tenant must match [A-Za-z0-9_-]{{1,64}}")]
    InvalidTenant(String),
    /// No such claim: no pack at the key, or a position past the pack's index.
    #[error("claim {reference} not found")]
    NotFound {
        /// The claim's URN.
        reference: String,
    },
    /// The claim's bytes do not hash to the digest the message carried.
    #[error("claim {reference} failed its integrity check: sha256 {actual}, expected {expected}")]
    IntegrityMismatch {
        /// The claim's URN.
        reference: String,
        /// The digest the caller expected.
        expected: String,
        /// The digest of the bytes read.
        actual: String,
    },
    /// The reference is filed under another tenant than the one the reader expects (the
    /// tenant of the message that carried it, or `default` for a message without one).
    #[error("claim {reference} does not belong to tenant {expected:?}")]
    WrongTenant {
        /// The claim's URN.
        reference: String,
        /// The partition the reader expected.
        expected: String,
    },
    /// The store's index gives the claim another length than the message declared: the
    /// bytes are not read.
    #[error("claim {reference} is {actual} bytes in the store but the message declares {declared}")]
    SizeMismatch {
        /// The claim's URN.
        reference: String,
        /// The size the message declared.
        declared: u64,
        /// The length the store's index gives.
        actual: u64,
    },
    /// A read larger than the configured cap: the bytes are not read.
    #[error("reading {size} bytes of claim {reference} exceeds max_read_bytes {max}")]
    ReadTooLarge {
        /// The claim's URN.
        reference: String,
        /// The bytes the read would bring into memory.
        size: u64,
        /// [`ClaimConfig::max_read_bytes`](crate::ClaimConfig::max_read_bytes).
        max: u64,
    },
    /// The object at the pack's key is not a claim pack.
    #[error("object {key} is not a claim pack: {detail}")]
    CorruptPack {
        /// The storage key.
        key: String,
        /// What is wrong.
        detail: &'static str,
    },
    /// A body, or a pack, that cannot fit a pack (a non-ZIP64 archive under 4 GiB).
    #[error("{size} bytes cannot be checked in: a claim pack holds at most {max} bytes of bodies")]
    TooLarge {
        /// The bytes asked for.
        size: u64,
        /// The most a pack holds.
        max: u64,
    },
    /// The store refused the credentials: the operator's to fix.
    #[error("claim store refused the credentials")]
    Forbidden(#[source] StoreError),
    /// The store cannot serve this request as configured: the operator's to fix.
    #[error("claim store is misconfigured")]
    StoreConfig(#[source] StoreError),
    /// The store did not answer, or failed: try again later.
    #[error("claim store unavailable")]
    Unavailable(#[source] StoreError),
}

impl ClaimError {
    /// The delivery class of this error (see the module table).
    pub fn class(&self) -> Class {
        match self {
            ClaimError::InvalidRef(_)
            | ClaimError::InvalidTenant(_)
            | ClaimError::NotFound { .. }
            | ClaimError::IntegrityMismatch { .. }
            | ClaimError::WrongTenant { .. }
            | ClaimError::SizeMismatch { .. }
            | ClaimError::ReadTooLarge { .. }
            | ClaimError::CorruptPack { .. }
            | ClaimError::TooLarge { .. } => Class::Permanent,
            ClaimError::Forbidden(_) | ClaimError::StoreConfig(_) => Class::Config,
            ClaimError::Unavailable(_) => Class::Transient,
        }
    }

    /// Whether a later try may succeed without anyone changing anything.
    pub fn is_transient(&self) -> bool {
        self.class() == Class::Transient
    }
}

impl From<ClaimRefError> for ClaimError {
    fn from(e: ClaimRefError) -> Self {
        ClaimError::InvalidRef(e)
    }
}

impl From<ClaimError> for Failure {
    /// A claim-check failure comes before the delivery: nothing reached the destination.
    fn from(e: ClaimError) -> Self {
        Failure::new(e.class(), e).with_may_have_landed(Some(false))
    }
}

/// What an operation on the store was for: a missing object means something else when
/// writing (the bucket is gone) than when reading (the claim is gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op<'a> {
    /// Writing a pack.
    Put,
    /// Reading the claim with this URN.
    Read(&'a str),
}

/// Classify an `object_store` error, on its typed variant only.
pub(crate) fn classify(e: object_store::Error, op: Op<'_>) -> ClaimError {
    use object_store::Error as E;
    match (&e, op) {
        (E::NotFound { .. }, Op::Read(reference)) => ClaimError::NotFound {
            reference: reference.to_owned(),
        },
        (E::PermissionDenied { .. } | E::Unauthenticated { .. }, _) => {
            ClaimError::Forbidden(StoreError::new(e))
        }
        // Writing never expects "not found": the bucket or container does not exist.
        (E::NotFound { .. }, Op::Put)
        | (
            E::NotSupported { .. }
            | E::NotImplemented { .. }
            | E::UnknownConfigurationKey { .. }
            | E::InvalidPath { .. },
            _,
        ) => ClaimError::StoreConfig(StoreError::new(e)),
        // Generic (transport, 5xx, I/O), JoinError, and anything a later version adds.
        _ => ClaimError::Unavailable(StoreError::new(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::Error as E;

    fn src() -> Box<dyn std::error::Error + Send + Sync> {
        "boom".into()
    }

    fn path() -> String {
        "claims/x".into()
    }

    #[test]
    fn every_store_variant_has_its_class() {
        let urn = "urn:ankusa:claim:v1:t:01ARZ3NDEKTSV4RRFFQ69G5FAV";
        let rows: Vec<(E, Op<'_>, Class)> = vec![
            (
                E::NotFound {
                    path: path(),
                    source: src(),
                },
                Op::Read(urn),
                Class::Permanent,
            ),
            (
                E::NotFound {
                    path: path(),
                    source: src(),
                },
                Op::Put,
                Class::Config,
            ),
            (
                E::PermissionDenied {
                    path: path(),
                    source: src(),
                },
                Op::Read(urn),
                Class::Config,
            ),
            (
                E::Unauthenticated {
                    path: path(),
                    source: src(),
                },
                Op::Put,
                Class::Config,
            ),
            (E::NotSupported { source: src() }, Op::Put, Class::Config),
            (
                E::NotImplemented {
                    operation: "x".into(),
                    implementer: "y".into(),
                },
                Op::Put,
                Class::Config,
            ),
            (
                E::UnknownConfigurationKey {
                    store: "S3",
                    key: "k".into(),
                },
                Op::Put,
                Class::Config,
            ),
            (
                E::Generic {
                    store: "S3",
                    source: src(),
                },
                Op::Put,
                Class::Transient,
            ),
            (
                E::Generic {
                    store: "S3",
                    source: src(),
                },
                Op::Read(urn),
                Class::Transient,
            ),
            (
                E::Precondition {
                    path: path(),
                    source: src(),
                },
                Op::Put,
                Class::Transient,
            ),
            (
                E::AlreadyExists {
                    path: path(),
                    source: src(),
                },
                Op::Put,
                Class::Transient,
            ),
        ];
        for (err, op, want) in rows {
            let text = err.to_string();
            assert_eq!(classify(err, op).class(), want, "{text} {op:?}");
        }
        match classify(
            E::NotFound {
                path: path(),
                source: src(),
            },
            Op::Read(urn),
        ) {
            ClaimError::NotFound { reference } => assert_eq!(reference, urn),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn claim_errors_become_failures_of_their_class() {
        let cases = [
            (
                ClaimError::InvalidRef(ClaimRefError::Malformed),
                Class::Permanent,
            ),
            (ClaimError::InvalidTenant("a.b".into()), Class::Permanent),
            (
                ClaimError::NotFound {
                    reference: "r".into(),
                },
                Class::Permanent,
            ),
            (
                ClaimError::IntegrityMismatch {
                    reference: "r".into(),
                    expected: "a".into(),
                    actual: "b".into(),
                },
                Class::Permanent,
            ),
            (
                ClaimError::CorruptPack {
                    key: "k".into(),
                    detail: "d",
                },
                Class::Permanent,
            ),
            (ClaimError::TooLarge { size: 1, max: 0 }, Class::Permanent),
            (
                ClaimError::WrongTenant {
                    reference: "r".into(),
                    expected: "t".into(),
                },
                Class::Permanent,
            ),
            (
                ClaimError::SizeMismatch {
                    reference: "r".into(),
                    declared: 1,
                    actual: 2,
                },
                Class::Permanent,
            ),
            (
                ClaimError::ReadTooLarge {
                    reference: "r".into(),
                    size: 2,
                    max: 1,
                },
                Class::Permanent,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(Failure::from(e).class(), want);
        }
        let f = Failure::from(classify(
            E::Generic {
                store: "S3",
                source: src(),
            },
            Op::Put,
        ));
        assert_eq!(f.class(), Class::Transient);
        assert_eq!(
            f.to_string(),
            "transient: claim store unavailable: Generic S3 error: boom"
        );
    }
}

#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod capabilities;
mod claim;
mod ctx;
mod describe;
mod envelope;
mod failure;
mod secret;
mod sink;

pub use capabilities::{
    BatchLimits, Capabilities, Dedupe, InFlight, LimitSource, OkMeans, Ordering, SizeLimit,
};
pub use claim::{Claim, ClaimRef, ClaimRefError};
pub use ctx::Ctx;
pub use describe::{Description, Payload, Subject};
pub use envelope::{
    Envelope, EnvelopeBuilder, EnvelopeError, MAX_ENVELOPE_HEADERS, MAX_RECEIVED_AT, TENANTLESS,
    Verification, VerificationStatus, validate_partition, validate_tenant,
};
pub use failure::{BoxError, Class, ErrorClass, Failure, Reason, error_classes};
pub use secret::{Secret, SecretEnvError};
pub use sink::{Check, Sink, SinkFault, safe_capabilities, safe_deliver, safe_describe};

/// Re-exported so sink authors use the same `async_trait` the trait is declared with.
pub use async_trait::async_trait;
/// Re-exported: envelope bodies are [`bytes::Bytes`].
pub use bytes::Bytes;

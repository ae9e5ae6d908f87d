#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod capabilities;
mod claim;
mod ctx;
mod describe;
mod envelope;
mod failure;
mod forwarding;
mod secret;
mod sink;
mod trace;

pub use capabilities::{
    BatchLimits, Capabilities, InFlight, LimitSource, OkMeans, Ordering, SizeLimit,
};
pub use claim::{BodyMode, Claim, ClaimRef, ClaimRefError, body_mode, parse_claim_id};
pub use ctx::{
    Ctx, DEFAULT_FORWARD_HEADERS_MAX_BYTES, DEFAULT_MAX_HEADERS, Extensions, ForwardHeaders,
};
pub use describe::{
    Description, Payload, REDACTED, Subject, host_port, is_loopback_host, redact_url,
    redact_url_keep_path, redacted_path,
};
pub use envelope::{
    Envelope, EnvelopeBuilder, EnvelopeError, MAX_ENVELOPE_HEADERS, MAX_RECEIVED_AT, TENANTLESS,
    Verification, VerificationStatus, partition_of, validate_partition, validate_tenant,
};
pub use failure::{
    BoxError, Class, ErrorClass, Failure, MAX_REASON_TEXT, Reason, error_classes, escape_invisible,
    printable, socket_failure,
};
pub use forwarding::{
    NEVER_FORWARDED, NEVER_FORWARDED_PATTERNS, NEVER_FORWARDED_PREFIXES, forwarded_headers,
    is_forwardable,
};
pub use secret::{Secret, SecretEnvError};
pub use sink::{
    Check, Sink, SinkFault, safe_capabilities, safe_deliver, safe_describe, timeout_ms,
};
pub use trace::{MAX_TRACESTATE_BYTES, TraceContext};

/// Re-exported so sink authors use the same `async_trait` the trait is declared with.
pub use async_trait::async_trait;
/// Re-exported: envelope bodies are [`bytes::Bytes`].
pub use bytes::Bytes;

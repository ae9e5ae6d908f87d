#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod cloudevents;
mod decode;
mod fields;
mod forwarding;
mod message;
mod options;
mod outgoing;
mod schema;
pub mod signing;
pub mod template;
#[cfg(test)]
mod test_support;
mod trace;

pub use decode::{DecodeError, Message, MessageBody, VerifiedError, decode, verify};
pub use fields::{BodyRef, Fields, body_or_claim};
pub use forwarding::{
    DEFAULT_FORWARD_HEADERS_MAX_BYTES, DEFAULT_MAX_HEADERS, ForwardHeaders, HeaderPolicy,
    NEVER_FORWARDED, NEVER_FORWARDED_PATTERNS, NEVER_FORWARDED_PREFIXES, forwarded_headers,
    is_forwardable,
};
pub use message::{
    BodyMode, DEFAULT_INLINE_MAX_BYTES, EncodeError, body_mode, encode, push_json_str, sha256_hex,
};
pub use options::{MessageOption, MessageOptions, OptionsError};
pub use outgoing::{Attr, Body, EmptyValues, Layout, Outgoing, RecordAttrs};
pub use schema::json_schema;
pub use trace::{MAX_TRACESTATE_BYTES, TraceContext};

/// The workspace README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

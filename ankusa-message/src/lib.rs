#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod cloudevents;
mod decode;
mod message;
mod options;
mod outgoing;
mod schema;
pub mod signing;
pub mod template;

pub use decode::{DecodeError, Message, MessageBody, VerifiedError, decode, verify};
pub use message::{DEFAULT_INLINE_MAX_BYTES, EncodeError, encode, push_json_str, sha256_hex};
pub use options::{MessageOption, MessageOptions, OptionsError};
pub use outgoing::{Attr, Body, EmptyValues, Layout, Outgoing};
pub use schema::json_schema;

/// The workspace README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

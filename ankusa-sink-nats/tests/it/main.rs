//! One integration binary: conformance, the classification table, the wire format.

mod classify;
mod common;
mod conformance;
#[cfg(feature = "source")]
mod source;
mod wire;

//! One integration binary: conformance, the classification table, the wire format.

mod classify;
mod common;
mod conformance;
mod poison;
#[cfg(feature = "source")]
mod source;
mod wire;

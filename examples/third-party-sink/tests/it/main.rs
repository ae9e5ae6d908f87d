//! The example sink's tests: the conformance suite against a real Redis, and its
//! `ankusa-sink-with-example` binary run from its sink file.

mod cli;
mod conformance;

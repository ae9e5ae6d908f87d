//! The example sink's tests: the conformance suite against a real Redis.

mod conformance;

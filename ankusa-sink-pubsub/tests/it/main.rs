//! Integration tests for the Pub/Sub sink: the official emulator (scripts/services/pubsub.sh,
//! `ANKUSA_PUBSUB_EMULATOR_HOST`, default `127.0.0.1:8085`), a scripted loopback gRPC/REST
//! server for the statuses the emulator cannot produce, and the conformance suite.

mod common;
mod conformance;
mod emulator;
mod poison;
mod scripted;

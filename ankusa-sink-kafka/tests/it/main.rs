//! Integration tests against a real Kafka-protocol broker (tansu, started by
//! `scripts/services/kafka.sh`) and librdkafka's in-process mock cluster.

mod common;
mod conformance;
#[cfg(feature = "source")]
mod lag;
mod mock;
mod outage;
mod poison;
mod roundtrip;

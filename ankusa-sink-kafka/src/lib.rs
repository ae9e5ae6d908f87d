#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod client;
mod config;
mod error;
mod sink;

pub use config::{
    Compression, ConfigError, DEFAULT_CLIENT_ID, DEFAULT_KEY, DEFAULT_MAX_RECORD_BYTES,
    DEFAULT_PRODUCE_TIMEOUT_MS, KafkaConfig, KeyTemplate, OWNED_PROPERTIES, SaslConfig,
    SaslMechanism, Secret, TlsConfig, is_sensitive_property, validate_topic,
};
pub use error::{KafkaFailure, Verdict, verdict};
pub use sink::KafkaSink;

/// Re-exported: the librdkafka binding whose error codes [`verdict`] classifies.
pub use rdkafka;

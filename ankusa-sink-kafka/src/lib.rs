#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod client;
mod config;
mod connection;
mod error;
mod outgoing;
mod properties;
mod property_rules;
mod replication;
mod sink;
#[cfg(feature = "source")]
mod source;

pub use config::{
    Compression, ConfigError, DEFAULT_CLIENT_ID, DEFAULT_KEY, DEFAULT_MAX_RECORD_BYTES,
    DEFAULT_PRODUCE_TIMEOUT_MS, KafkaConfig, SaslConfig, SaslMechanism, TlsConfig,
};
pub use error::KafkaError;
pub use sink::KafkaSink;
#[cfg(feature = "source")]
pub use source::{DEFAULT_SOURCE_CLIENT_ID, KafkaSource, KafkaSourceConfig, Start};

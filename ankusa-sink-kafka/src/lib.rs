#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod client;
mod config;
mod error;
mod outgoing;
mod properties;
mod sink;

pub use config::{
    Compression, ConfigError, DEFAULT_CLIENT_ID, DEFAULT_KEY, DEFAULT_MAX_RECORD_BYTES,
    DEFAULT_PRODUCE_TIMEOUT_MS, KafkaConfig, SaslConfig, SaslMechanism, TlsConfig,
};
pub use error::KafkaError;
pub use sink::KafkaSink;

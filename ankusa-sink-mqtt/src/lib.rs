#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod config;
mod error;
mod outgoing;
mod sink;

pub use config::{
    ConfigError, DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, MAX_TOPIC_BYTES, MqttConfig,
    NoSubscriber,
};
pub use error::MqttError;
pub use sink::MqttSink;

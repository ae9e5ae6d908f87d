#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod config;
mod connection;
mod error;
mod outgoing;
mod sink;
#[cfg(feature = "source")]
mod source;

pub use config::{ConfigError, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PUBLISH_TIMEOUT, NatsConfig};
pub use error::NatsError;
pub use sink::NatsSink;
#[cfg(feature = "source")]
pub use source::{MIN_CREATED_ACK_WAIT, NatsSource, NatsSourceConfig};

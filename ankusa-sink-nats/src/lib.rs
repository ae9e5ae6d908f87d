#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod config;
mod error;
mod outgoing;
mod sink;

pub use config::{ConfigError, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PUBLISH_TIMEOUT, NatsConfig};
pub use error::NatsError;
pub use sink::NatsSink;

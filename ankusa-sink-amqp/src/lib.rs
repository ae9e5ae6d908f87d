#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod broker_url;
mod config;
mod config_error;
mod connection;
mod driver;
mod error;
mod outgoing;
mod sink;
#[cfg(feature = "source")]
mod source;

pub use config::{AmqpConfig, ExchangeType};
pub use config_error::ConfigError;
pub use error::{AmqpError, ClientError, Stage};
pub use sink::AmqpSink;
#[cfg(feature = "source")]
pub use source::{AmqpSource, AmqpSourceConfig};

#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod config;
pub mod error;
mod sink;

pub use config::{Auth, BatchOptions, ConfigError, OrderingKey, PubSubConfig};
pub use error::{MAX_REASON_TEXT, PubSubError, classify};
pub use sink::PubSubSink;

#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod config;
mod error;
mod outgoing;
mod sink;

pub use config::{Auth, ConfigError, PubSubBatch, PubSubConfig};
pub use error::PubSubError;
pub use sink::PubSubSink;

#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod config;
mod env;

pub use config::{ConfigError, KNOWN_TYPES, SinkConfig};

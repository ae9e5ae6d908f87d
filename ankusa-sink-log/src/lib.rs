#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod config;
mod error;
mod sink;

pub use config::LogConfig;
pub use error::LogError;
pub use sink::LogSink;

#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod config;
mod error;
pub mod report;
mod sink;

pub use config::LogConfig;
pub use error::LogError;
pub use report::{ReportingWriter, TARGET};
pub use sink::LogSink;

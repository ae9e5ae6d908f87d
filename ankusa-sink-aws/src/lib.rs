#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
// With neither service enabled only the config types remain; the shared machinery idles.
#![cfg_attr(
    not(any(feature = "sqs", feature = "sns")),
    allow(dead_code, unused_macros, unused_imports)
)]

mod config;
mod error;
mod sink;
#[cfg(feature = "sns")]
mod sns;
#[cfg(feature = "sqs")]
mod sqs;

pub use config::{
    AWS_MAX_MESSAGE_BYTES, AwsOptions, BatchOptions, ConfigError, SNS_MAX_MESSAGE_BYTES,
    SQS_MAX_BATCH_BYTES, SQS_MAX_MESSAGE_BYTES, SnsConfig, SqsConfig, StaticCredentials,
};
pub use error::{AwsError, MAX_REASON_TEXT, SinkError};
#[cfg(feature = "sns")]
pub use sns::SnsSink;
#[cfg(feature = "sqs")]
pub use sqs::SqsSink;

/// The SDK crates this sink is built on, so callers can build clients (e.g. with
/// interceptors) for `SqsSink::from_client` / `SnsSink::from_client` with the same versions.
pub mod sdk {
    pub use aws_config;
    #[cfg(feature = "sns")]
    pub use aws_sdk_sns;
    #[cfg(feature = "sqs")]
    pub use aws_sdk_sqs;
}

#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
// With neither service enabled only the config types remain; the shared machinery idles.
#![cfg_attr(
    not(any(feature = "sqs", feature = "sns")),
    allow(dead_code, unused_macros, unused_imports)
)]

mod config;
mod error;
mod outgoing;
mod sink;
#[cfg(feature = "sns")]
mod sns;
#[cfg(feature = "sqs")]
mod sqs;

pub use config::{
    AWS_MAX_MESSAGE_BYTES, AwsBatch, AwsOptions, ConfigError, SNS_MAX_MESSAGE_BYTES,
    SQS_MAX_BATCH_BYTES, SQS_MAX_MESSAGE_BYTES, SnsConfig, SqsConfig, StaticCredentials,
};
pub use error::AwsError;
#[cfg(feature = "sns")]
pub use sns::SnsSink;
#[cfg(feature = "sqs")]
pub use sqs::SqsSink;

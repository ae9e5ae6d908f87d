#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
// With neither SQS nor SNS enabled their FIFO ids, attributes and by-id batch results
// idle; with no service at all, only the config types remain.
#![cfg_attr(
    not(any(feature = "sqs", feature = "sns")),
    allow(dead_code, unused_macros, unused_imports)
)]

mod config;
mod error;
#[cfg(feature = "eventbridge")]
mod eventbridge;
#[cfg(feature = "kinesis")]
mod kinesis;
mod outgoing;
mod sink;
#[cfg(feature = "sns")]
mod sns;
#[cfg(feature = "source")]
mod source;
#[cfg(feature = "sqs")]
mod sqs;

pub use config::{
    AWS_MAX_MESSAGE_BYTES, AwsBatch, AwsOptions, ConfigError, EVENTBRIDGE_MAX_ENTRY_BYTES,
    EventBridgeConfig, KINESIS_MAX_BATCH_BYTES, KINESIS_MAX_BATCH_RECORDS,
    KINESIS_MAX_RECORD_BYTES, KinesisConfig, SNS_MAX_MESSAGE_BYTES, SQS_MAX_BATCH_BYTES,
    SQS_MAX_MESSAGE_BYTES, SnsConfig, SqsConfig, StaticCredentials,
};
pub use error::AwsError;
#[cfg(feature = "eventbridge")]
pub use eventbridge::EventBridgeSink;
#[cfg(feature = "kinesis")]
pub use kinesis::KinesisSink;
#[cfg(feature = "sns")]
pub use sns::SnsSink;
#[cfg(feature = "source")]
pub use source::{SqsSource, SqsSourceConfig};
#[cfg(feature = "sqs")]
pub use sqs::SqsSink;

#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod batcher;
mod subscribers;

pub use batcher::{BatchConfig, BatchError, BatchSend, Batcher};
pub use subscribers::{
    DEFAULT_SUBSCRIBER_CHECK_INTERVAL, MAX_SUBSCRIBER_CHECK_INTERVAL, SubscriberCache,
    subscriber_check_interval,
};

#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod batcher;
mod flatten;
mod subscribers;

pub use batcher::{BatchConfig, BatchError, BatchSend, Batcher};
pub use flatten::keyed;
pub use subscribers::{
    DEFAULT_SUBSCRIBER_CHECK_INTERVAL, MAX_SUBSCRIBER_CHECK_INTERVAL, SubscriberCache,
    subscriber_check_interval,
};

/// Used by [`keyed_flatten!`]; not part of the API.
#[doc(hidden)]
pub use serde as __serde;
/// Used by [`keyed_flatten!`]; not part of the API.
#[doc(hidden)]
pub use serde_path_to_error as __serde_path_to_error;

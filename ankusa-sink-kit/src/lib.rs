#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod aimd;
mod batcher;
mod flatten;
mod redact;
mod represent;
mod subscribers;
mod text;

pub use aimd::Aimd;
pub use batcher::{BatchConfig, BatchError, BatchSend, Batcher};
pub use flatten::keyed;
pub use redact::{
    REDACTED, host_port, is_loopback_host, redact_path_query, redact_url, redact_url_keep_path,
    redacted_path,
};
pub use represent::{Unrepresentable, check_text, is_noncharacter};
pub use subscribers::{
    DEFAULT_SUBSCRIBER_CHECK_INTERVAL, MAX_SUBSCRIBER_CHECK_INTERVAL, SubscriberCache,
    subscriber_check_interval,
};
pub use text::{MAX_REASON_TEXT, escape_invisible, printable, socket_failure, timeout_ms};

/// Used by [`keyed_flatten!`]; not part of the API.
#[doc(hidden)]
pub use serde as __serde;
/// Used by [`keyed_flatten!`]; not part of the API.
#[doc(hidden)]
pub use serde_path_to_error as __serde_path_to_error;

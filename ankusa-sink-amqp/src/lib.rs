#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod config;
mod error;
mod sink;

pub use config::{
    AmqpConfig, AmqpConfigBuilder, ConfigError, DEFAULT_CONFIRM_TIMEOUT, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_INFLIGHT, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_ROUTING_KEY_TEMPLATE, ExchangeType,
    MAX_SHORT_STRING, RoutingKey,
};
pub use error::{AmqpError, MAX_REASON_TEXT, Stage, classify, reply_code};
pub use sink::{
    AmqpSink, HEADER_DEDUPE_KEY, HEADER_IDEMPOTENCY_KEY, HEADER_REPLAY_ID, RECONNECT_PAUSE,
    properties,
};

/// Re-exported so callers name lapin's types (errors, properties) from the same version.
pub use lapin;

#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod config;
mod error;
mod outgoing;
mod sink;

pub use config::{
    ConfigError, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_TIMEOUT, NoSubscriber, RedisConfig, Target,
};
pub use error::{Op, RedisError};
pub use outgoing::MESSAGE_FIELD;
pub use sink::RedisSink;

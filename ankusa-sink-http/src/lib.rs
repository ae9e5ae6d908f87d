#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod config;
mod error;
mod outgoing;
mod signing;
mod sink;

pub use config::{
    ConfigError, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, HttpConfig,
    HttpMethod, HttpSinkBuilder,
};
pub use error::{HttpError, TransportKind};
pub use signing::{MIN_SECRET_BYTES, Signer};
pub use sink::{DEFAULT_CONTENT_TYPE, HttpSink, USER_AGENT};

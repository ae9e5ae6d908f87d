#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod config;
pub mod error;
mod signing;
mod sink;

pub use config::{
    ConfigError, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, HttpConfig,
    HttpMethod, HttpSinkBuilder, SecretValue, TlsRoots,
};
pub use error::{HttpError, TransportKind, parse_retry_after};
pub use signing::{MIN_SECRET_BYTES, Signer};
pub use sink::{DEFAULT_CONTENT_TYPE, HttpSink, USER_AGENT};

#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod config;
mod error;
mod guard;
mod oauth2;
mod outgoing;
mod sink;
mod status_classes;

pub use config::{
    ConfigError, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, HttpConfig,
    HttpMethod, HttpSinkBuilder,
};
pub use error::{HttpError, TransportKind};
pub use guard::AddressGuard;
pub use oauth2::TokenError;
pub use sink::{DEFAULT_CONTENT_TYPE, HttpSink, USER_AGENT};
pub use status_classes::{BadStatusKey, StatusClass, StatusClasses};

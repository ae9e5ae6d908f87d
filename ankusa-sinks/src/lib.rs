#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod config;
mod config_error;
mod dispatch;
mod env;
mod registered;
mod registry;
mod scrub;
mod source;

pub use config::{KNOWN_TYPES, SinkConfig, message_options};
pub use config_error::ConfigError;
pub use dispatch::{
    ConcurrencySetting, DEFAULT_MAX_CONCURRENCY, DEFAULT_PARK_AFTER_SECONDS, DispatchTable,
    ParkTable,
};
pub use env::EnvAccess;
pub use registered::RegisteredConfig;
pub use registry::{RegisterError, Registry};
pub use source::{KNOWN_SOURCE_TYPES, SourceConfig, SourceConfigError};

/// Deserialize JSON input (an envelope, say) so that an error names the key path and what
/// was wrong, never a value from the input: serde's own messages quote the value.
pub fn from_json_value<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, String> {
    scrub::from_value(value)
}

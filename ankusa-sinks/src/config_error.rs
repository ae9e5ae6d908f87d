//! Why a sink config was refused: one error for parsing, `${VAR}` expansion and building.
//! Its own module so that `config` and `env`, which both return it, need not import each
//! other for it. Public as `ankusa_sinks::ConfigError`, as it always was.

/// Why a sink config was refused. Messages name the key, type or feature at fault and never
/// echo a configured value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file is not valid TOML (or JSON).
    #[error("sink config is not valid {format}: {detail}")]
    Syntax {
        /// `TOML` or `JSON`.
        format: &'static str,
        /// Where and what, without the source text.
        detail: String,
    },
    /// No `type` key.
    #[error("sink config is missing field `type` (one of: {})", known.join(", "))]
    MissingType {
        /// The types the registry that parsed it knows ([`Registry::types`](crate::Registry::types)).
        known: Vec<&'static str>,
    },
    /// `type` is not a string.
    #[error("sink config field `type` must be a string")]
    TypeNotString,
    /// `type` names no sink.
    #[error("unknown sink type `{ty}` (known: {})", known.join(", "))]
    UnknownType {
        /// The type the config names.
        ty: String,
        /// The types the registry that parsed it knows ([`Registry::types`](crate::Registry::types)):
        /// [`KNOWN_TYPES`](crate::KNOWN_TYPES), then those registered, in registration order.
        known: Vec<&'static str>,
    },
    /// The type exists but its cargo feature is off.
    #[error("sink type `{ty}` is not compiled in: enable the `{feature}` feature of ankusa-sinks")]
    NotCompiled {
        /// The type.
        ty: String,
        /// The feature that brings it.
        feature: &'static str,
    },
    /// A key is unknown, missing or has the wrong type.
    #[error("{ty} sink config: {detail}")]
    Field {
        /// The sink type.
        ty: &'static str,
        /// The key path and what is wrong (the kind of value found, never the value).
        detail: String,
    },
    /// A message option (`format`, `cloudevents_type`, `[signing]`, `inline_max_bytes`)
    /// the sink type cannot honour.
    #[error(
        "{ty} sink config: `{key}` is not supported by the {ty} sink ({})",
        if supported.is_empty() {
            "it takes no message options".to_owned()
        } else {
            format!("its message options: {}", supported.join(", "))
        }
    )]
    UnsupportedMessageOption {
        /// The sink type.
        ty: &'static str,
        /// The key as written.
        key: String,
        /// The message options the type takes, by key.
        supported: Vec<&'static str>,
    },
    /// A `${VAR}` reference could not be resolved.
    #[error("sink config key {path}: {detail}")]
    Env {
        /// Dotted key path.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// The adapter refused the options (bad URL, invalid value, ...).
    #[error("{ty} sink: {reason}")]
    Build {
        /// The sink type.
        ty: &'static str,
        /// The adapter's reason.
        reason: String,
    },
}

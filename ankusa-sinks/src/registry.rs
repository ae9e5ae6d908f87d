//! The open registry: the built-in sink types plus those other crates register.

use crate::config::{KNOWN_TYPES, SinkConfig, built, options, syntax};
use crate::config_error::ConfigError;
use crate::env::EnvAccess;
use crate::registered::{BuildFn, RegisteredConfig};
use ankusa_sink_core::Sink;
use serde::de::DeserializeOwned;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

/// A registered type's parser: the table (without `type`, `${VAR}` expanded) to its config.
type ParseFn = dyn Fn(toml::Value) -> Result<RegisteredConfig, ConfigError> + Send + Sync;

/// The sink types a sink file may name: the built-in ones ([`KNOWN_TYPES`], each behind its
/// cargo feature) and those other crates register, each with its config type and builder.
///
/// [`SinkConfig::from_toml_str`] and its siblings parse with [`Registry::builtin`]; a
/// program that adds a sink of its own parses with its registry instead, and hands it to
/// the CLI with `ankusa_sink_cli::run_with`.
///
/// # Behavior
/// - A registered type's table (everything but `type`, after `${VAR}` expansion) is
///   deserialized into its config type the way the built-in ones are: an error names the
///   key path and the kind of value found, never the value, and starts `<type> sink config:`.
/// - Its builder runs in [`SinkConfig::build`]; an `Err` becomes [`ConfigError::Build`]
///   with the error's text and its `source()` chain, so it must never hold a secret.
/// - A type name is taken once: a built-in name (compiled in or not) or one registered
///   before is refused with [`RegisterError::Duplicate`], so a sink file means one thing.
/// - Unknown and missing `type` errors list [`types`](Registry::types).
///
/// ```
/// use ankusa_sink_core::{Capabilities, Ctx, Envelope, Failure, Sink, async_trait};
/// use ankusa_sinks::{Registry, SinkConfig};
///
/// /// The keys of a `type = "null"` sink file.
/// #[derive(Debug, Clone, serde::Deserialize)]
/// #[serde(deny_unknown_fields)]
/// struct NullConfig {
///     label: String,
/// }
///
/// #[derive(Debug)]
/// struct NullSink;
///
/// #[async_trait]
/// impl Sink for NullSink {
///     async fn deliver(&self, _: &Envelope, _: &Ctx) -> Result<(), Failure> {
///         Ok(())
///     }
///     fn capabilities(&self) -> Capabilities {
///         Capabilities::new(false, None)
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let registry = Registry::builtin()
///     .register("null", |_: NullConfig| Ok::<_, std::convert::Infallible>(NullSink))
///     .unwrap();
/// let config = registry.parse_toml_str("type = \"null\"\nlabel = \"x\"").unwrap();
/// assert_eq!(config.kind(), "null");
/// let sink = config.build().await.unwrap();
/// assert!(!sink.capabilities().durable);
///
/// // Built-in types parse as they always did; an unknown type lists every registered one.
/// assert_eq!(registry.parse_toml_str("type = \"log\"").unwrap().kind(), "log");
/// let err = registry.parse_toml_str("type = \"nul\"").unwrap_err().to_string();
/// assert!(err.ends_with("pubsub, nats, redis, mqtt, null)"), "{err}");
/// # }
/// ```
#[derive(Clone, Default)]
pub struct Registry {
    registered: Vec<Registration>,
}

/// One type another crate registered.
#[derive(Clone)]
struct Registration {
    ty: &'static str,
    parse: Arc<ParseFn>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("types", &self.types())
            .finish()
    }
}

/// Why [`Registry::register`] refused a type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// The name is a built-in type (compiled in or not) or was registered before.
    #[error("sink type `{0}` is already registered")]
    Duplicate(&'static str),
    /// The name is empty or not made of lowercase ASCII letters, digits, `-` and `_`.
    #[error("sink type name `{0}` must be lowercase ASCII letters, digits, `-` and `_`")]
    InvalidName(&'static str),
}

impl Registry {
    /// The built-in types only ([`KNOWN_TYPES`]): what [`SinkConfig::from_toml_str`] parses
    /// with, and the `ankusa-sink` binary's registry.
    pub const fn builtin() -> Self {
        Registry {
            registered: Vec::new(),
        }
    }

    /// Every type a sink file may name: [`KNOWN_TYPES`] (compiled in or not), then the
    /// registered ones in registration order.
    pub fn types(&self) -> Vec<&'static str> {
        KNOWN_TYPES
            .iter()
            .copied()
            .chain(self.registered.iter().map(|r| r.ty))
            .collect()
    }

    /// Register `ty`: a sink file with `type = "<ty>"` is deserialized as `C` (declare it
    /// `#[serde(deny_unknown_fields)]` so a misspelt key is an error) and built by `build`,
    /// which runs when the sink is built ([`SinkConfig::build`], inside the caller's Tokio
    /// runtime) and may fail with any error (never holding a secret: its text is the
    /// message). `C`'s `Debug` is the config's, so it must not print a secret either.
    ///
    /// # Errors
    /// [`RegisterError::Duplicate`] for a name already taken, built-in ones included;
    /// [`RegisterError::InvalidName`] for a name that is not lowercase letters, digits,
    /// `-` and `_`.
    pub fn register<C, S, E>(
        self,
        ty: &'static str,
        build: impl Fn(C) -> Result<S, E> + Send + Sync + 'static,
    ) -> Result<Self, RegisterError>
    where
        C: DeserializeOwned + Clone + fmt::Debug + Send + Sync + 'static,
        S: Sink + 'static,
        E: std::error::Error,
    {
        let build: Arc<BuildFn<C>> =
            Arc::new(move |c| Box::pin(std::future::ready(built(ty, build(c)))));
        self.add(ty, build)
    }

    /// [`register`](Self::register) for a builder that must `.await` (one that resolves
    /// credentials or connects before it can answer).
    ///
    /// # Errors
    /// As [`register`](Self::register).
    pub fn register_async<C, S, E, F>(
        self,
        ty: &'static str,
        build: impl Fn(C) -> F + Send + Sync + 'static,
    ) -> Result<Self, RegisterError>
    where
        C: DeserializeOwned + Clone + fmt::Debug + Send + Sync + 'static,
        S: Sink + 'static,
        E: std::error::Error,
        F: Future<Output = Result<S, E>> + Send + 'static,
    {
        let build: Arc<BuildFn<C>> = Arc::new(move |c| {
            let building = build(c);
            Box::pin(async move { built(ty, building.await) })
        });
        self.add(ty, build)
    }

    fn add<C>(mut self, ty: &'static str, build: Arc<BuildFn<C>>) -> Result<Self, RegisterError>
    where
        C: DeserializeOwned + Clone + fmt::Debug + Send + Sync + 'static,
    {
        let valid = !ty.is_empty()
            && ty
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !valid {
            return Err(RegisterError::InvalidName(ty));
        }
        if self.types().contains(&ty) {
            return Err(RegisterError::Duplicate(ty));
        }
        let parse: Arc<ParseFn> = Arc::new(move |value| {
            let config: C = options(ty, value)?;
            Ok(RegisteredConfig::new(ty, config, build.clone()))
        });
        self.registered.push(Registration { ty, parse });
        Ok(self)
    }

    /// Parse a TOML document whose top level is the sink's table. `${VAR}` references may
    /// read any environment variable: the config is trusted input (see [`EnvAccess`]).
    pub fn parse_toml_str(&self, text: &str) -> Result<SinkConfig, ConfigError> {
        self.parse_toml_str_with(text, &EnvAccess::Any)
    }

    /// [`parse_toml_str`](Self::parse_toml_str) with a limit on the environment variables
    /// the config may read: [`EnvAccess::None`] for configs written by someone you do not
    /// trust.
    pub fn parse_toml_str_with(
        &self,
        text: &str,
        env: &EnvAccess,
    ) -> Result<SinkConfig, ConfigError> {
        let table: toml::Table = toml::from_str(text).map_err(|e| syntax("TOML", text, &e))?;
        self.parse_table_with(table, env)
    }

    /// Parse a whole sink file: the sink's config and its `[dispatch]` table (how the
    /// dispatcher runs it; empty when the file has none). `${VAR}` references may read
    /// any environment variable, as in [`parse_toml_str`](Self::parse_toml_str).
    pub fn parse_sink_file_toml(
        &self,
        text: &str,
    ) -> Result<(SinkConfig, crate::DispatchTable), ConfigError> {
        let table: toml::Table = toml::from_str(text).map_err(|e| syntax("TOML", text, &e))?;
        self.parse_sink_file_table(table, &EnvAccess::Any)
    }

    /// [`parse_sink_file_toml`](Self::parse_sink_file_toml) of a JSON object.
    pub fn parse_sink_file_json(
        &self,
        text: &str,
    ) -> Result<(SinkConfig, crate::DispatchTable), ConfigError> {
        let table = json_table(text)?;
        self.parse_sink_file_table(table, &EnvAccess::Any)
    }

    /// [`parse_sink_file_toml`](Self::parse_sink_file_toml) of a parsed table, with a limit
    /// on the environment variables it may read.
    pub fn parse_sink_file_table(
        &self,
        mut table: toml::Table,
        env: &EnvAccess,
    ) -> Result<(SinkConfig, crate::DispatchTable), ConfigError> {
        let dispatch = match table.remove("dispatch") {
            None => crate::DispatchTable::default(),
            Some(mut v) => {
                crate::env::expand(&mut v, "dispatch", env)?;
                crate::DispatchTable::parse(v)?
            }
        };
        Ok((self.parse_table_with(table, env)?, dispatch))
    }

    /// Parse a JSON object (same keys as TOML). Trusted input, like
    /// [`parse_toml_str`](Self::parse_toml_str).
    pub fn parse_json_str(&self, text: &str) -> Result<SinkConfig, ConfigError> {
        self.parse_json_str_with(text, &EnvAccess::Any)
    }

    /// [`parse_json_str`](Self::parse_json_str) with a limit on the environment variables
    /// the config may read.
    pub fn parse_json_str_with(
        &self,
        text: &str,
        env: &EnvAccess,
    ) -> Result<SinkConfig, ConfigError> {
        self.parse_table_with(json_table(text)?, env)
    }

    /// Build from a parsed table: read `type`, expand `${VAR}` references (any variable),
    /// then let the type's own config deserialize the rest.
    pub fn parse_table(&self, table: toml::Table) -> Result<SinkConfig, ConfigError> {
        self.parse_table_with(table, &EnvAccess::Any)
    }

    /// [`parse_table`](Self::parse_table) with a limit on the environment variables the
    /// config may read.
    pub fn parse_table_with(
        &self,
        mut table: toml::Table,
        env: &EnvAccess,
    ) -> Result<SinkConfig, ConfigError> {
        if table.contains_key("dispatch") {
            // The dispatcher's, not the sink's: read where it is applied, never dropped.
            return Err(ConfigError::Field {
                ty: "dispatch",
                detail: "the [dispatch] table is read with the whole sink file \
                         (Registry::parse_sink_file_toml), not with the sink's config alone"
                    .into(),
            });
        }
        let ty = match table.remove("type") {
            Some(toml::Value::String(s)) => s,
            Some(_) => return Err(ConfigError::TypeNotString),
            None => {
                return Err(ConfigError::MissingType {
                    known: self.types(),
                });
            }
        };
        let mut value = toml::Value::Table(table);
        crate::env::expand(&mut value, "", env)?;
        if KNOWN_TYPES.contains(&ty.as_str()) {
            return SinkConfig::parse_builtin(ty, value);
        }
        match self.registered.iter().find(|r| r.ty == ty) {
            Some(r) => (r.parse)(value).map(SinkConfig::Registered),
            None => Err(ConfigError::UnknownType {
                ty,
                known: self.types(),
            }),
        }
    }
}

/// Parsing with the built-in types only (a [`Registry`] with more parses its own).
impl SinkConfig {
    /// Parse a TOML document whose top level is the sink's table. `${VAR}` references may
    /// read any environment variable: the config is trusted input (see [`EnvAccess`]).
    /// Only the built-in types: a registry with more is [`Registry::parse_toml_str`].
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        Registry::builtin().parse_toml_str(text)
    }

    /// [`from_toml_str`](Self::from_toml_str) with a limit on the environment variables the
    /// config may read: [`EnvAccess::None`] for configs written by someone you do not trust.
    pub fn from_toml_str_with(text: &str, env: &EnvAccess) -> Result<Self, ConfigError> {
        Registry::builtin().parse_toml_str_with(text, env)
    }

    /// Parse a JSON object (same keys as TOML). Trusted input, like
    /// [`from_toml_str`](Self::from_toml_str).
    pub fn from_json_str(text: &str) -> Result<Self, ConfigError> {
        Registry::builtin().parse_json_str(text)
    }

    /// [`from_json_str`](Self::from_json_str) with a limit on the environment variables the
    /// config may read.
    pub fn from_json_str_with(text: &str, env: &EnvAccess) -> Result<Self, ConfigError> {
        Registry::builtin().parse_json_str_with(text, env)
    }

    /// Build from a parsed table: read `type`, expand `${VAR}` references (any variable),
    /// then let the adapter's own config deserialize the rest (unknown keys are refused).
    pub fn from_table(table: toml::Table) -> Result<Self, ConfigError> {
        Registry::builtin().parse_table(table)
    }

    /// [`from_table`](Self::from_table) with a limit on the environment variables the
    /// config may read.
    pub fn from_table_with(table: toml::Table, env: &EnvAccess) -> Result<Self, ConfigError> {
        Registry::builtin().parse_table_with(table, env)
    }
}

/// A JSON object as a table (errors name the position, never the text).
fn json_table(text: &str) -> Result<toml::Table, ConfigError> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| ConfigError::Syntax {
        format: "JSON",
        detail: format!(
            "line {}, column {}: {:?}",
            e.line(),
            e.column(),
            e.classify()
        ),
    })?;
    toml::Table::try_from(value).map_err(|e| ConfigError::Syntax {
        format: "JSON",
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sink_core::{Ctx, Envelope, Failure, async_trait};
    use serde::Deserialize;

    /// A third party's config: one required key, one optional, unknown keys refused.
    #[derive(Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct ExampleConfig {
        stream: String,
        #[serde(default)]
        password: Option<String>,
    }

    impl fmt::Debug for ExampleConfig {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("ExampleConfig")
                .field("stream", &self.stream)
                .field("password", &self.password.as_ref().map(|_| "REDACTED"))
                .finish()
        }
    }

    struct ExampleSink {
        stream: String,
    }

    impl fmt::Debug for ExampleSink {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_tuple("ExampleSink").field(&self.stream).finish()
        }
    }

    #[async_trait]
    impl Sink for ExampleSink {
        async fn deliver(&self, _: &Envelope, _: &Ctx) -> Result<(), Failure> {
            Ok(())
        }
        fn capabilities(&self) -> ankusa_sink_core::Capabilities {
            ankusa_sink_core::Capabilities::new(false, None)
        }
    }

    /// The builder's refusal, as an adapter's error would be.
    #[derive(Debug, thiserror::Error)]
    #[error("stream name `{0}` is reserved")]
    struct Reserved(String);

    fn build(c: ExampleConfig) -> Result<ExampleSink, Reserved> {
        if c.stream == "reserved" {
            return Err(Reserved(c.stream));
        }
        Ok(ExampleSink { stream: c.stream })
    }

    fn registry() -> Registry {
        Registry::builtin().register("example", build).unwrap()
    }

    const ALL: &str = "log, http, kafka, amqp, sqs, sns, kinesis, eventbridge, pubsub, nats, redis, mqtt, example";

    #[tokio::test]
    async fn a_registered_type_builds_from_toml_and_json() {
        let r = registry();
        for config in [
            r.parse_toml_str("type = \"example\"\nstream = \"s1\"")
                .unwrap(),
            r.parse_json_str(r#"{"type":"example","stream":"s1"}"#)
                .unwrap(),
        ] {
            assert_eq!(config.kind(), "example");
            let SinkConfig::Registered(ref registered) = config else {
                panic!("not a registered config: {config:?}");
            };
            assert_eq!(registered.config::<ExampleConfig>().unwrap().stream, "s1");
            assert!(registered.config::<String>().is_none());
            let sink = config.build().await.unwrap();
            assert!(!sink.capabilities().durable);
            assert!(format!("{sink:?}").contains("s1"), "{sink:?}");
        }
    }

    #[tokio::test]
    async fn registered_types_get_the_same_checks_as_built_in_ones() {
        let r = registry();
        let err = |text: &str| r.parse_toml_str(text).unwrap_err().to_string();
        let e = err("type = \"example\"\nstream = \"s\"\nstraem = 1");
        assert!(
            e.starts_with("example sink config: ") && e.contains("unknown field `straem`"),
            "{e}"
        );
        assert!(err("type = \"example\"").contains("missing field `stream`"));
        // A wrong type names the key, never the value.
        let e = err("type = \"example\"\nstream = \"s\"\npassword = [\"hunter2-planted\"]");
        assert!(e.contains("key `password`: wrong type"), "{e}");
        assert!(!e.contains("hunter2-planted"), "{e}");
        // `${VAR}` expansion and its limits apply.
        let e = r
            .parse_toml_str_with("type = \"example\"\nstream = \"${HOME}\"", &EnvAccess::None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("may not read environment variables"), "{e}");
        let home = std::env::var("HOME").unwrap();
        let c = r
            .parse_toml_str(
                "type = \"example\"\nstream = \"${HOME}\"\npassword = \"hunter2-planted\"",
            )
            .unwrap();
        let SinkConfig::Registered(ref registered) = c else {
            panic!("{c:?}");
        };
        assert_eq!(registered.config::<ExampleConfig>().unwrap().stream, home);
        // Debug is the config's own, which leaves the password out.
        let debug = format!("{c:?}");
        assert!(
            debug.contains("\"example\"") && !debug.contains("hunter2-planted"),
            "{debug}"
        );
        // The builder's refusal is a build error naming the type.
        let e = r
            .parse_toml_str("type = \"example\"\nstream = \"reserved\"")
            .unwrap()
            .build()
            .await
            .unwrap_err();
        assert!(matches!(e, ConfigError::Build { ty: "example", .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "example sink: stream name `reserved` is reserved"
        );
    }

    #[tokio::test]
    async fn an_async_builder_is_awaited() {
        let r = Registry::builtin()
            .register_async("example-async", |c: ExampleConfig| async move {
                tokio::task::yield_now().await;
                build(c)
            })
            .unwrap();
        let sink = r
            .parse_toml_str("type = \"example-async\"\nstream = \"s2\"")
            .unwrap()
            .build()
            .await
            .unwrap();
        assert!(format!("{sink:?}").contains("s2"));
        let e = r
            .parse_toml_str("type = \"example-async\"\nstream = \"reserved\"")
            .unwrap()
            .build()
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                ConfigError::Build {
                    ty: "example-async",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[tokio::test]
    async fn built_in_types_are_unchanged_by_registrations() {
        let r = registry();
        let c = r.parse_toml_str("type = \"log\"\nmessages = true").unwrap();
        assert!(matches!(c, SinkConfig::Log(ref log) if log.messages()));
        assert!(c.build().await.is_ok());
        // The same errors, word for word, as SinkConfig's own parser.
        for text in [
            "type = \"log\"\nmesages = true",
            "type = \"log\"\nmessages = \"yes\"",
            "type = 3",
            "type = \"log\"\nmessages = \"secret-value",
        ] {
            assert_eq!(
                r.parse_toml_str(text).unwrap_err().to_string(),
                SinkConfig::from_toml_str(text).unwrap_err().to_string(),
                "{text}"
            );
        }
        #[cfg(not(feature = "http"))]
        assert!(
            r.parse_toml_str("type = \"http\"\nurl = \"http://127.0.0.1/\"")
                .unwrap_err()
                .to_string()
                .contains("enable the `http` feature")
        );
        #[cfg(feature = "http")]
        assert_eq!(
            r.parse_toml_str("type = \"http\"\nurl = \"http://127.0.0.1:9/\"")
                .unwrap()
                .kind(),
            "http"
        );
    }

    #[test]
    fn unknown_and_missing_types_list_every_registered_type() {
        let r = registry();
        assert_eq!(r.types().join(", "), ALL);
        let e = r.parse_toml_str("type = \"exampel\"").unwrap_err();
        assert!(matches!(e, ConfigError::UnknownType { ref ty, .. } if ty == "exampel"));
        assert_eq!(
            e.to_string(),
            format!("unknown sink type `exampel` (known: {ALL})")
        );
        assert_eq!(
            r.parse_json_str(r#"{"stream":"s"}"#)
                .unwrap_err()
                .to_string(),
            format!("sink config is missing field `type` (one of: {ALL})")
        );
        // The built-in registry lists what it always listed.
        let e = SinkConfig::from_toml_str("type = \"example\"").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown sink type `example` (known: log, http, kafka, amqp, sqs, sns, kinesis, eventbridge, pubsub, nats, redis, mqtt)"
        );
    }

    #[test]
    fn a_name_is_registered_once() {
        let twice = registry().register("example", build).unwrap_err();
        assert_eq!(twice, RegisterError::Duplicate("example"));
        assert_eq!(
            twice.to_string(),
            "sink type `example` is already registered"
        );
        // Built-in names are taken whether or not their feature is compiled in.
        for ty in KNOWN_TYPES {
            assert_eq!(
                Registry::builtin().register(ty, build).unwrap_err(),
                RegisterError::Duplicate(ty)
            );
        }
        for bad in ["", "Example", "ex ample", "ex.ample"] {
            assert_eq!(
                Registry::builtin().register(bad, build).unwrap_err(),
                RegisterError::InvalidName(bad)
            );
        }
    }
}

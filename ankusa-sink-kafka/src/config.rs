//! The Kafka sink's configuration: the operator's keys ([`Repr`]), validated once into an
//! always-valid [`KafkaConfig`], with `with_*` builders that re-check what they change.
//! The librdkafka properties it becomes are in `properties.rs`; the rules on extra
//! properties it enforces, in `property_rules.rs`.

use crate::connection::{KafkaConnection, split_servers};
pub use crate::connection::{SaslConfig, SaslMechanism, TlsConfig};
use crate::property_rules::{
    MAX_MESSAGE_MAX_BYTES, OWNED_PROPERTIES, RECORD_OVERHEAD, is_sensitive_property,
    is_unsafe_property, scrub,
};
use ankusa_message::MessageOptions;
use ankusa_message::template::{AbsentTenant, KeyTemplate, TemplateError};
use ankusa_sink_kit::REDACTED;
use rdkafka::error::KafkaError as RdKafkaError;
use serde::Deserialize;
use serde::de::IgnoredAny;
use std::collections::BTreeMap;
use std::fmt;
use std::num::{NonZeroU64, NonZeroUsize};
use std::time::Duration;

/// Default `max_record_bytes`: 1,000,000 (Kafka's default `max.message.bytes`).
pub const DEFAULT_MAX_RECORD_BYTES: NonZeroUsize = NonZeroUsize::new(1_000_000).unwrap();
/// Default produce timeout: 5 s.
pub const DEFAULT_PRODUCE_TIMEOUT_MS: NonZeroU64 = NonZeroU64::new(5_000).unwrap();
/// The default key template: `{tenant_id}/{source_id}` (`/src` when there is no tenant).
pub const DEFAULT_KEY: &str = "{tenant_id}/{source_id}";
/// Default `client.id`.
pub const DEFAULT_CLIENT_ID: &str = "ankusa-sink-kafka";

/// The longest produce timeout librdkafka takes (`message.timeout.ms` is an `int`).
const MAX_PRODUCE_TIMEOUT_MS: NonZeroU64 = NonZeroU64::new(i32::MAX as u64).unwrap();

/// Record compression (`compression.codec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Compression {
    /// No compression (librdkafka's default).
    #[default]
    None,
    /// gzip.
    Gzip,
    /// Snappy.
    Snappy,
    /// LZ4.
    Lz4,
    /// Zstandard.
    Zstd,
}

impl Compression {
    /// The librdkafka name.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// The operator's keys, exactly as written in a sink file (`type` already removed).
#[derive(Deserialize)]
struct Repr {
    /// `bootstrap_servers` (also accepted as `brokers`, the key the sink registry
    /// documents), `client_id`, `tls`, `sasl`, `properties`, `allow_insecure`.
    #[serde(flatten)]
    conn: KafkaConnection,
    topic: String,
    key: Option<String>,
    max_record_bytes: Option<NonZeroUsize>,
    produce_timeout_ms: Option<NonZeroU64>,
    #[serde(default)]
    compression: Compression,
    /// `format`, `cloudevents_type`, `[signing]`, `inline_max_bytes`.
    #[serde(flatten)]
    message: MessageOptions,
    /// Whatever no option took: refused (`flatten` cannot deny unknown fields itself).
    #[serde(flatten)]
    unknown: BTreeMap<String, IgnoredAny>,
}

/// A valid Kafka sink configuration.
///
/// Build it with [`KafkaConfig::new`] and the `with_*` methods, or deserialize it from the
/// keys of the crate README's options table; either way every value is checked once, here
/// (librdkafka judges the extra properties), and a bad one is refused with a
/// [`ConfigError`] naming the option. `Debug` prints no secret: SASL and TLS passwords, and
/// the value of every extra property whose name looks sensitive, are `REDACTED`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Repr")]
#[non_exhaustive]
pub struct KafkaConfig {
    pub(crate) bootstrap_servers: Vec<String>,
    pub(crate) topic: String,
    pub(crate) key: KeyTemplate,
    pub(crate) max_record_bytes: NonZeroUsize,
    pub(crate) produce_timeout_ms: NonZeroU64,
    pub(crate) compression: Compression,
    pub(crate) client_id: String,
    pub(crate) tls: Option<TlsConfig>,
    pub(crate) sasl: Option<SaslConfig>,
    pub(crate) properties: BTreeMap<String, String>,
    pub(crate) allow_insecure: bool,
    pub(crate) message: MessageOptions,
}

impl TryFrom<Repr> for KafkaConfig {
    type Error = ConfigError;

    fn try_from(r: Repr) -> Result<Self, ConfigError> {
        if let Some(k) = r.unknown.keys().next() {
            return Err(ConfigError::UnknownField(k.clone()));
        }
        let bootstrap_servers = r
            .conn
            .bootstrap_servers
            .ok_or(ConfigError::Missing("bootstrap_servers"))?;
        let config = KafkaConfig {
            bootstrap_servers,
            topic: r.topic,
            key: parse_key(r.key.as_deref().unwrap_or(DEFAULT_KEY))?,
            max_record_bytes: r.max_record_bytes.unwrap_or(DEFAULT_MAX_RECORD_BYTES),
            produce_timeout_ms: r.produce_timeout_ms.unwrap_or(DEFAULT_PRODUCE_TIMEOUT_MS),
            compression: r.compression,
            client_id: r
                .conn
                .client_id
                .unwrap_or_else(|| DEFAULT_CLIENT_ID.to_owned()),
            tls: r.conn.tls,
            sasl: r.conn.sasl,
            properties: r.conn.properties,
            allow_insecure: r.conn.allow_insecure,
            message: r.message,
        };
        config.checked()
    }
}

fn parse_key(template: &str) -> Result<KeyTemplate, ConfigError> {
    Ok(KeyTemplate::parse(template, AbsentTenant::Empty)?)
}

/// Let librdkafka judge every property (names and values) without creating a client, so a
/// refused one is named; its value never reaches the error.
fn check_properties(config: &KafkaConfig) -> Result<(), ConfigError> {
    let secrets = config.secrets();
    match config.client_config().create_native_config() {
        Ok(_) => Ok(()),
        Err(RdKafkaError::ClientConfig(_, why, name, _value)) => Err(ConfigError::Property {
            why: (!is_sensitive_property(&name)).then(|| scrub(&secrets, &why)),
            name,
        }),
        Err(e) => Err(ConfigError::Client(scrub(&secrets, &e.to_string()))),
    }
}

impl fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let props: BTreeMap<&str, &str> = self
            .properties
            .iter()
            .map(|(k, v)| {
                let shown = if is_sensitive_property(k) {
                    REDACTED
                } else {
                    v
                };
                (k.as_str(), shown)
            })
            .collect();
        f.debug_struct("KafkaConfig")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("topic", &self.topic)
            .field("key", &self.key.as_str())
            .field("max_record_bytes", &self.max_record_bytes)
            .field("produce_timeout_ms", &self.produce_timeout_ms)
            .field("compression", &self.compression)
            .field("client_id", &self.client_id)
            .field("tls", &self.tls)
            .field("sasl", &self.sasl)
            .field("properties", &props)
            .field("allow_insecure", &self.allow_insecure)
            .field("message", &self.message)
            .finish()
    }
}

impl KafkaConfig {
    /// Set every message option at once, as the sink file's keys do:
    /// - `format`/`cloudevents_type`: CloudEvents (binary or structured) instead of Message
    ///   v1, the default; CloudEvents travel inline (no claim check).
    /// - `[signing]`: Standard Webhooks signing over the exact Message v1 bytes
    ///   (`webhook-id`, `webhook-timestamp`, `webhook-signature` as record headers); consumers check
    ///   it with `ankusa_message::verify`.
    /// - `inline_max_bytes` (default 64 KiB): bodies over it travel by `ctx.claim`.
    pub fn with_message(mut self, message: MessageOptions) -> Self {
        self.message = message;
        self
    }

    /// The message options.
    pub fn message(&self) -> &MessageOptions {
        &self.message
    }

    /// A configuration for `topic` on `bootstrap_servers` (`"host:port"`, or several joined
    /// with `,`), every other option at its default. Fails as deserializing would.
    pub fn new(
        bootstrap_servers: impl AsRef<str>,
        topic: impl Into<String>,
    ) -> Result<Self, ConfigError> {
        KafkaConfig {
            bootstrap_servers: split_servers(bootstrap_servers.as_ref()),
            topic: topic.into(),
            key: parse_key(DEFAULT_KEY)?,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            produce_timeout_ms: DEFAULT_PRODUCE_TIMEOUT_MS,
            compression: Compression::None,
            client_id: DEFAULT_CLIENT_ID.to_owned(),
            tls: None,
            sasl: None,
            properties: BTreeMap::new(),
            allow_insecure: false,
            message: MessageOptions::new(),
        }
        .checked()
    }

    /// Set the key template (`{tenant_id}` of a hook without a tenant renders `""`; a
    /// template without `{...}` is a static key).
    pub fn with_key(mut self, template: &str) -> Result<Self, ConfigError> {
        self.key = parse_key(template)?;
        Ok(self)
    }
    /// Set the record size limit (value + key), at most 999,934,464.
    pub fn with_max_record_bytes(mut self, max: NonZeroUsize) -> Result<Self, ConfigError> {
        self.max_record_bytes = max;
        self.checked()
    }
    /// Set the produce timeout (rounded down to whole ms, at least 1, at most
    /// 2,147,483,647).
    pub fn with_produce_timeout(mut self, timeout: Duration) -> Self {
        self.produce_timeout_ms = ankusa_sink_kit::timeout_ms(timeout).min(MAX_PRODUCE_TIMEOUT_MS);
        self
    }
    /// Set the compression codec.
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }
    /// Set `client.id` (not empty).
    pub fn with_client_id(mut self, id: impl Into<String>) -> Result<Self, ConfigError> {
        self.client_id = id.into();
        self.checked()
    }
    /// Speak TLS to the brokers.
    pub fn with_tls(mut self, tls: TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }
    /// Authenticate with SASL. Without TLS it is refused unless every broker is on
    /// loopback or [`with_allow_insecure`](Self::with_allow_insecure) came first.
    pub fn with_sasl(mut self, sasl: SaslConfig) -> Result<Self, ConfigError> {
        self.sasl = Some(sasl);
        self.checked()
    }
    /// Add an extra librdkafka property; librdkafka judges its name and value now.
    pub fn with_property(
        mut self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<Self, ConfigError> {
        self.properties.insert(name.into(), value.into());
        self.checked()
    }
    /// Allow SASL without TLS to brokers off loopback (the password, for `plain`, then
    /// travels in the clear). The sink warns when it is built.
    pub fn with_allow_insecure(mut self, allow: bool) -> Result<Self, ConfigError> {
        self.allow_insecure = allow;
        self.checked()
    }

    /// The brokers, `host:port` each.
    pub fn bootstrap_servers(&self) -> &[String] {
        &self.bootstrap_servers
    }
    /// The topic every record goes to.
    pub fn topic(&self) -> &str {
        &self.topic
    }
    /// The record key template.
    pub fn key(&self) -> &KeyTemplate {
        &self.key
    }
    /// The produce timeout.
    pub fn produce_timeout(&self) -> Duration {
        Duration::from_millis(self.produce_timeout_ms.get())
    }

    /// `self`, if every value is valid.
    pub(crate) fn checked(self) -> Result<Self, ConfigError> {
        self.check_values()?;
        check_properties(&self)?;
        Ok(self)
    }

    /// Check every value that can be checked without librdkafka.
    fn check_values(&self) -> Result<(), ConfigError> {
        if self.bootstrap_servers.is_empty() {
            return Err(ConfigError::NoBootstrapServers);
        }
        for (i, s) in self.bootstrap_servers.iter().enumerate() {
            if !is_host_port(s) {
                return Err(ConfigError::BadBootstrapServer(i));
            }
        }
        validate_topic(&self.topic)?;
        if self.produce_timeout_ms > MAX_PRODUCE_TIMEOUT_MS {
            return Err(ConfigError::Value {
                option: "produce_timeout_ms",
                why: "must be at most 2147483647",
            });
        }
        if self.max_record_bytes.get() > MAX_MESSAGE_MAX_BYTES - RECORD_OVERHEAD {
            return Err(ConfigError::Value {
                option: "max_record_bytes",
                why: "must be at most 999934464 (librdkafka's message.max.bytes ceiling)",
            });
        }
        if self.client_id.is_empty() {
            return Err(ConfigError::Value {
                option: "client_id",
                why: "must not be empty",
            });
        }
        if let Some(sasl) = &self.sasl
            && sasl.username.is_empty()
        {
            return Err(ConfigError::Value {
                option: "sasl.username",
                why: "must not be empty",
            });
        }
        for name in self.properties.keys() {
            if OWNED_PROPERTIES.contains(&name.as_str()) {
                return Err(ConfigError::OwnedProperty(name.clone()));
            }
            if is_unsafe_property(name) {
                return Err(ConfigError::UnsafeProperty(name.clone()));
            }
        }
        if self.sasl.is_some()
            && self.tls.is_none()
            && !self.allow_insecure
            && !self.only_loopback_brokers()
        {
            return Err(ConfigError::CleartextCredentials);
        }
        Ok(())
    }

    /// Whether every bootstrap broker is on loopback, where cleartext never leaves the host.
    fn only_loopback_brokers(&self) -> bool {
        self.bootstrap_servers.iter().all(|s| {
            s.rsplit_once(':')
                .is_some_and(|(host, _)| ankusa_sink_kit::is_loopback_host(host))
        })
    }

    /// What in this (valid) configuration weakens security, one sentence each, for the
    /// sink to warn about when it is built. Never a secret.
    pub(crate) fn insecure_settings(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.sasl.is_some() && self.tls.is_none() && !self.only_loopback_brokers() {
            out.push(
                "kafka SASL without TLS (allow_insecure = true): credentials and records \
                 travel in the clear",
            );
        }
        if self.tls.as_ref().is_some_and(|t| !t.verify_hostname) {
            out.push(
                "kafka TLS with verify_hostname = false: any certificate the CA signed is \
                 accepted for every broker",
            );
        }
        out
    }
}

fn is_host_port(s: &str) -> bool {
    let Some((host, port)) = s.rsplit_once(':') else {
        return false;
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b))
        && port.parse::<u16>().is_ok_and(|p| p > 0)
}

/// Check a Kafka topic name: 1 to 249 of `[A-Za-z0-9._-]`, not `.` or `..`.
pub(crate) fn validate_topic(topic: &str) -> Result<(), ConfigError> {
    let ok = (1..=249).contains(&topic.len())
        && topic != "."
        && topic != ".."
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::InvalidTopic(topic.to_owned()))
    }
}

/// Why a configuration was refused. The text names options, never a secret value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A key the sink does not know.
    #[error("unknown field `{0}`")]
    UnknownField(String),
    /// A required key is missing (named as serde names a missing field).
    #[error("missing field `{0}`")]
    Missing(&'static str),
    /// No broker given.
    #[error("bootstrap_servers must name at least one host:port")]
    NoBootstrapServers,
    /// A broker that is not `host:port` (printed by position: it might hold userinfo).
    #[error("bootstrap_servers[{0}] is not host:port")]
    BadBootstrapServer(usize),
    /// Not a legal Kafka topic name.
    #[error("invalid topic {0:?}: 1 to 249 of [A-Za-z0-9._-], not \".\" or \"..\"")]
    InvalidTopic(String),
    /// The key template does not parse.
    #[error("invalid key template: {0}")]
    KeyTemplate(#[from] TemplateError),
    /// An option out of range.
    #[error("{option} {why}")]
    Value {
        /// The option.
        option: &'static str,
        /// What is wrong.
        why: &'static str,
    },
    /// An extra property the sink sets itself.
    #[error(
        "property {0:?} is set by the sink (acks=all, idempotence, partitioner, timeouts, \
         security and compression have their own options)"
    )]
    OwnedProperty(String),
    /// An extra property that would weaken TLS or load native code (its value is never
    /// printed).
    #[error(
        "property {0:?} is refused: TLS verification and trust roots are set only through \
         the tls options, and no plugin, engine or provider library is loaded"
    )]
    UnsafeProperty(String),
    /// SASL without TLS to a broker off loopback, without `allow_insecure = true`.
    #[error(
        "sasl without tls would send credentials in the clear: add tls, or set \
         allow_insecure = true"
    )]
    CleartextCredentials,
    /// librdkafka refused an extra property (its value is never printed).
    #[error("property {name:?} refused by librdkafka{}", .why.as_deref().map(|w| format!(": {w}")).unwrap_or_default())]
    Property {
        /// The property.
        name: String,
        /// librdkafka's complaint, for properties whose value is not sensitive.
        why: Option<String>,
    },
    /// librdkafka refused the configuration (secrets scrubbed from its message).
    #[error("librdkafka refused the configuration: {0}")]
    Client(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> KafkaConfig {
        KafkaConfig::new("h:1", "t").unwrap()
    }

    #[test]
    fn the_default_key_is_tenant_slash_source_and_empty_without_a_tenant() {
        let cfg = KafkaConfig::new("h:1", "t").unwrap();
        assert_eq!(cfg.key().as_str(), DEFAULT_KEY);
        assert_eq!(cfg.key().absent_tenant(), AbsentTenant::Empty);
        let env = ankusa_sink_core::Envelope::builder("h1", "stripe", "{}")
            .build()
            .unwrap();
        assert_eq!(cfg.key().render(&env), "/stripe");
    }

    #[test]
    fn validation_names_the_option() {
        let ok = KafkaConfig::new("127.0.0.1:9092, [::1]:9093", "t.1_x-y").unwrap();
        assert_eq!(ok.bootstrap_servers.len(), 2);
        let base = || KafkaConfig::new("h:1", "t").unwrap();
        let cases = [
            (KafkaConfig::new("", "t"), "at least one"),
            (
                KafkaConfig::new("user:pw@h:9092", "t"),
                "bootstrap_servers[0]",
            ),
            (KafkaConfig::new("h", "t"), "bootstrap_servers[0]"),
            (KafkaConfig::new("h:1", "a/b"), "invalid topic"),
            (KafkaConfig::new("h:1", ".."), "invalid topic"),
            (base().with_key("{x}"), "placeholder"),
            (
                base().with_property("acks", "1"),
                "\"acks\" is set by the sink",
            ),
            (
                base().with_property("enable.idempotence", "false"),
                "set by the sink",
            ),
            (
                base().with_property("sasl.password", "x"),
                "set by the sink",
            ),
            (base().with_client_id(""), "client_id must not be empty"),
            (
                base().with_max_record_bytes(NonZeroUsize::new(999_934_465).unwrap()),
                "max_record_bytes must be at most",
            ),
        ];
        for (cfg, want) in cases {
            let err = cfg.unwrap_err().to_string();
            assert!(err.contains(want), "{err} !~ {want}");
            assert!(!err.contains("pw@"), "{err}");
        }
    }

    #[test]
    fn debug_redacts_every_secret() {
        let cfg = KafkaConfig::new("h:1", "t")
            .unwrap()
            .with_tls(TlsConfig::default().with_key_password("tls-pw-2"))
            .with_sasl(SaslConfig::new(
                SaslMechanism::ScramSha512,
                "svc",
                "sasl-pw-1",
            ))
            .unwrap()
            .with_property("ssl.keystore.password", "ks-4")
            .unwrap()
            .with_property("linger.ms", "7")
            .unwrap();
        let d = format!("{cfg:?}");
        for s in ["sasl-pw-1", "tls-pw-2", "ks-4"] {
            assert!(!d.contains(s), "{s} in {d}");
        }
        assert!(
            d.contains("svc") && d.contains("\"linger.ms\": \"7\""),
            "{d}"
        );
        assert_eq!(cfg.secrets().len(), 3);
        // A property librdkafka does not know is refused, its value never quoted.
        let err = cfg.with_property("ssl_key_x", "k-5").unwrap_err();
        assert!(!format!("{err} {err:?}").contains("k-5"), "{err}");
    }

    #[test]
    fn sasl_without_tls_is_refused_off_loopback_unless_allowed() {
        let sasl = || SaslConfig::new(SaslMechanism::Plain, "u", "planted-pw-9");
        let err = KafkaConfig::new("kafka.example:9092", "t")
            .unwrap()
            .with_sasl(sasl())
            .unwrap_err();
        assert_eq!(err, ConfigError::CleartextCredentials);
        assert!(err.to_string().contains("allow_insecure"), "{err}");
        // One broker off loopback is enough to refuse.
        let err = KafkaConfig::new("127.0.0.1:9092,10.0.0.7:9092", "t")
            .unwrap()
            .with_sasl(sasl());
        assert_eq!(err, Err(ConfigError::CleartextCredentials));
        for loopback in ["127.0.0.1:9092", "localhost:9092", "[::1]:9092,127.0.0.2:1"] {
            let cfg = KafkaConfig::new(loopback, "t")
                .unwrap()
                .with_sasl(sasl())
                .unwrap();
            assert!(cfg.insecure_settings().is_empty(), "{loopback}");
        }
        // TLS or an explicit opt-in: accepted; the opt-in is warned about.
        KafkaConfig::new("kafka.example:9092", "t")
            .unwrap()
            .with_tls(TlsConfig::default())
            .with_sasl(sasl())
            .unwrap();
        let allowed = KafkaConfig::new("kafka.example:9092", "t")
            .unwrap()
            .with_allow_insecure(true)
            .unwrap()
            .with_sasl(sasl())
            .unwrap();
        let warned = allowed.insecure_settings();
        assert_eq!(warned.len(), 1);
        assert!(warned[0].contains("in the clear"), "{warned:?}");
        assert!(!format!("{warned:?}").contains("planted-pw-9"));
        // Taking the opt-in back refuses the configuration again.
        assert_eq!(
            allowed.with_allow_insecure(false),
            Err(ConfigError::CleartextCredentials)
        );
    }

    #[test]
    fn tls_without_hostname_verification_is_warned_about() {
        let cfg = KafkaConfig::new("kafka.example:9093", "t")
            .unwrap()
            .with_tls(TlsConfig::default().with_verify_hostname(false));
        let warned = cfg.insecure_settings();
        assert_eq!(warned.len(), 1);
        assert!(warned[0].contains("verify_hostname"), "{warned:?}");
        let cfg = KafkaConfig::new("kafka.example:9093", "t")
            .unwrap()
            .with_tls(TlsConfig::default());
        assert!(cfg.insecure_settings().is_empty());
    }

    #[test]
    fn the_produce_timeout_is_capped_at_librdkafkas_limit() {
        let cfg = KafkaConfig::new("h:1", "t")
            .unwrap()
            .with_produce_timeout(Duration::from_secs(30 * 24 * 3600));
        assert_eq!(cfg.produce_timeout_ms, MAX_PRODUCE_TIMEOUT_MS);
        let err = serde_json::from_value::<KafkaConfig>(serde_json::json!({
            "bootstrap_servers": "a:1", "topic": "t", "produce_timeout_ms": 2_147_483_648_u64
        }))
        .unwrap_err();
        assert!(err.to_string().contains("produce_timeout_ms"), "{err}");
    }

    #[test]
    fn serde_shape() {
        let cfg: KafkaConfig = serde_json::from_value(serde_json::json!({
            "bootstrap_servers": "a:1,b:2",
            "topic": "hooks",
            "key": "{source_id}",
            "compression": "lz4",
            "sasl": {"mechanism": "scram_sha_256", "username": "u", "password": "p"},
            "tls": {"ca_location": "/ca.pem"},
            "properties": {"linger.ms": "2"}
        }))
        .unwrap();
        assert_eq!(cfg.bootstrap_servers, ["a:1", "b:2"]);
        assert_eq!(cfg.key.as_str(), "{source_id}");
        assert_eq!(cfg.compression, Compression::Lz4);
        assert_eq!(cfg.produce_timeout_ms, DEFAULT_PRODUCE_TIMEOUT_MS);
        assert_eq!(cfg.client_id, DEFAULT_CLIENT_ID);
        assert_eq!(cfg.sasl.as_ref().unwrap().password.expose(), "p");
        assert!(cfg.tls.as_ref().unwrap().verify_hostname);
        assert!(!cfg.allow_insecure);
        let brokers: KafkaConfig = serde_json::from_value(serde_json::json!({
            "brokers": ["a:1"], "topic": "t"
        }))
        .unwrap();
        assert_eq!(
            brokers,
            KafkaConfig::new("a:1", "t").unwrap(),
            "`brokers` is `bootstrap_servers`, defaults as `new`"
        );
        let bad = serde_json::from_value::<KafkaConfig>(serde_json::json!({
            "bootstrap_servers": ["a:1"], "topic": "t", "nope": 1
        }));
        assert!(bad.is_err());
        // Values are checked while deserializing: a bad one never makes a config.
        let bad = serde_json::from_value::<KafkaConfig>(serde_json::json!({
            "bootstrap_servers": ["a:1"], "topic": "t", "properties": {"acks": "0"}
        }))
        .unwrap_err();
        assert!(bad.to_string().contains("set by the sink"), "{bad}");
    }

    #[test]
    fn properties_that_weaken_tls_or_load_code_are_refused_by_name() {
        for name in [
            "enable.ssl.certificate.verification",
            "ssl.ca.pem",
            "ssl.ca.certificate.stores",
            "plugin.library.paths",
            "ssl.engine.location",
            "ssl.providers",
            "ssl_engine_id",
            "ssl.engine.id",
            "SSL.CA.PEM",
            "https.ca.pem",
            "sasl.kerberos.kinit.cmd",
        ] {
            let err = base().with_property(name, "planted-value-77").unwrap_err();
            assert_eq!(err, ConfigError::UnsafeProperty(name.into()), "{name}");
            let text = err.to_string();
            assert!(text.contains(name), "{text}");
            assert!(!text.contains("planted-value-77"), "{text}");
        }
        // Owned ones stay owned (their own message); tuning and client identity pass.
        for name in OWNED_PROPERTIES {
            let err = base().with_property(*name, "x");
            assert!(matches!(err, Err(ConfigError::OwnedProperty(_))), "{name}");
        }
        for (name, value) in [
            ("ssl.crl.location", "x"),
            ("ssl.keystore.location", "x"),
            ("linger.ms", "5"),
        ] {
            base().with_property(name, value).unwrap();
        }
    }

    #[test]
    fn librdkafka_judges_values_and_names_without_quoting_secrets() {
        let err = base().with_property("linger.ms", "soon").unwrap_err();
        assert!(
            matches!(&err, ConfigError::Property { name, why: Some(_) } if name == "linger.ms"),
            "{err:?}"
        );
        let err = base().with_property("no.such.property", "1").unwrap_err();
        assert!(err.to_string().contains("no.such.property"), "{err}");
        let err = base()
            .with_property("sasl.oauthbearer.client.secret.x", "planted-s3")
            .unwrap_err();
        assert!(!format!("{err} {err:?}").contains("planted-s3"), "{err}");
    }
}

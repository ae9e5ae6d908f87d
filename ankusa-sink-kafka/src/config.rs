//! The Kafka sink's configuration: serde shape, builder, validation, and the librdkafka
//! properties it becomes.

use ankusa_sink_core::template::{Placeholder, Template, TemplateFields};
use ankusa_sink_core::{Envelope, REDACTED};
use rdkafka::ClientConfig;
use serde::{Deserialize, Deserializer, Serialize};
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

/// librdkafka properties the sink sets itself; [`KafkaConfig::properties`] refuses them.
pub const OWNED_PROPERTIES: &[&str] = &[
    "bootstrap.servers",
    "metadata.broker.list",
    "client.id",
    "acks",
    "request.required.acks",
    "enable.idempotence",
    "transactional.id",
    "partitioner",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "request.timeout.ms",
    "message.max.bytes",
    "compression.codec",
    "compression.type",
    "allow.auto.create.topics",
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
];

/// librdkafka properties refused because they would weaken TLS or load native code: broker
/// certificate verification and trust roots are set only through [`TlsConfig`], and no
/// plugin, engine or provider library is ever loaded. Compared ignoring case, with `_` read
/// as `.`.
const UNSAFE_PROPERTIES: &[&str] = &[
    "enable.ssl.certificate.verification",
    "ssl.ca.pem",
    "ssl.ca.certificate.stores",
    "ssl.ca.location",
    "ssl.endpoint.identification.algorithm",
    "ssl.engine.location",
    "ssl.engine.id",
    "ssl.providers",
    "plugin.library.paths",
    "https.ca.location",
    "https.ca.pem",
    "sasl.kerberos.kinit.cmd",
];

/// Whether the extra property `name` is refused for weakening TLS or loading native code.
fn is_unsafe_property(name: &str) -> bool {
    let n = name.to_ascii_lowercase().replace('_', ".");
    UNSAFE_PROPERTIES.contains(&n.as_str())
}

/// Whether a property's value must never be printed: its name mentions a password, a
/// secret, a key, a token, a credential or a JAAS/OAUTHBEARER config.
pub fn is_sensitive_property(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "password",
        "secret",
        "key",
        "token",
        "credential",
        "jaas",
        "oauthbearer",
    ]
    .iter()
    .any(|w| n.contains(w))
}

/// A secret string: serialized as itself, never printed by `Debug` or `Display`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret.
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    /// The secret itself, for handing to the client.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// Record compression (`compression.codec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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

/// A SASL mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SaslMechanism {
    /// `PLAIN` (use with TLS).
    Plain,
    /// `SCRAM-SHA-256`.
    #[serde(rename = "scram_sha_256")]
    ScramSha256,
    /// `SCRAM-SHA-512`.
    #[serde(rename = "scram_sha_512")]
    ScramSha512,
}

impl SaslMechanism {
    /// The librdkafka name.
    pub fn as_str(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// SASL credentials. `Debug` never prints the password.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaslConfig {
    /// The mechanism.
    pub mechanism: SaslMechanism,
    /// The user name.
    pub username: String,
    /// The password.
    pub password: Secret,
}

impl SaslConfig {
    /// SASL credentials.
    pub fn new(
        mechanism: SaslMechanism,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        SaslConfig {
            mechanism,
            username: username.into(),
            password: Secret::new(password),
        }
    }
}

/// TLS to the brokers. `Debug` never prints the key password.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// CA bundle file (PEM); the system store when absent.
    #[serde(default)]
    pub ca_location: Option<String>,
    /// Client certificate file (PEM), for mutual TLS.
    #[serde(default)]
    pub certificate_location: Option<String>,
    /// Client private key file (PEM), for mutual TLS.
    #[serde(default)]
    pub key_location: Option<String>,
    /// The private key's password.
    #[serde(default)]
    pub key_password: Option<Secret>,
    /// Check the broker's certificate names its host (default true).
    #[serde(default = "yes")]
    pub verify_hostname: bool,
}

fn yes() -> bool {
    true
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            ca_location: None,
            certificate_location: None,
            key_location: None,
            key_password: None,
            verify_hostname: true,
        }
    }
}

/// The Kafka sink's configuration.
///
/// Build it with [`KafkaConfig::new`] and the `with_*` methods, or deserialize it; either
/// way [`KafkaSink::new`](crate::KafkaSink::new) validates it and refuses bad values with a
/// [`ConfigError`]. `Debug` prints no secret: SASL and TLS passwords, and the value of
/// every extra property whose name looks sensitive ([`is_sensitive_property`]), are
/// `REDACTED`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct KafkaConfig {
    /// `host:port` of one or more brokers (YAML also takes one comma-separated string).
    /// Also accepted as `brokers`, the key the sink registry documents.
    #[serde(deserialize_with = "servers", alias = "brokers")]
    pub bootstrap_servers: Vec<String>,
    /// The topic every record goes to. Never created by the sink.
    pub topic: String,
    /// The record key template; [`DEFAULT_KEY`] when absent. See [`KeyTemplate`].
    #[serde(default)]
    pub key: Option<String>,
    /// The largest body sent inline; larger bodies travel by `ctx.claim`.
    #[serde(default = "default_inline")]
    pub inline_max_bytes: NonZeroUsize,
    /// Value + key over this is refused before producing (permanent).
    #[serde(default = "default_max_record")]
    pub max_record_bytes: NonZeroUsize,
    /// How long a record may take to be acknowledged (`message.timeout.ms`), and the
    /// bound of every broker request.
    #[serde(default = "default_timeout")]
    pub produce_timeout_ms: NonZeroU64,
    /// Record compression.
    #[serde(default)]
    pub compression: Compression,
    /// `client.id`.
    #[serde(default = "default_client_id")]
    pub client_id: String,
    /// TLS, when the brokers speak it.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// SASL credentials, when the brokers want them.
    #[serde(default)]
    pub sasl: Option<SaslConfig>,
    /// Extra librdkafka properties (`linger.ms`, `batch.size`, ...). Names the sink owns
    /// ([`OWNED_PROPERTIES`]) are refused, and so are those that would weaken TLS or load
    /// native code (`enable.ssl.certificate.verification`, `ssl.ca.pem`,
    /// `plugin.library.paths`, ...); librdkafka validates the rest.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// Allow SASL credentials over a connection without TLS to a broker that is not on
    /// loopback (default false: refused). Allowed, the sink warns when it is built.
    #[serde(default)]
    pub allow_insecure: bool,
}

fn default_inline() -> NonZeroUsize {
    ankusa_sink_core::DEFAULT_INLINE_MAX_BYTES
}
fn default_max_record() -> NonZeroUsize {
    DEFAULT_MAX_RECORD_BYTES
}
fn default_timeout() -> NonZeroU64 {
    DEFAULT_PRODUCE_TIMEOUT_MS
}
fn default_client_id() -> String {
    DEFAULT_CLIENT_ID.to_owned()
}

fn servers<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Servers {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Servers::deserialize(d)? {
        Servers::One(s) => split_servers(&s),
        Servers::Many(v) => v,
    })
}

fn split_servers(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
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
            .field("key", &self.key)
            .field("inline_max_bytes", &self.inline_max_bytes)
            .field("max_record_bytes", &self.max_record_bytes)
            .field("produce_timeout_ms", &self.produce_timeout_ms)
            .field("compression", &self.compression)
            .field("client_id", &self.client_id)
            .field("tls", &self.tls)
            .field("sasl", &self.sasl)
            .field("properties", &props)
            .field("allow_insecure", &self.allow_insecure)
            .finish()
    }
}

impl KafkaConfig {
    /// A configuration for `topic` on `bootstrap_servers` (`"host:port"`, or several joined
    /// with `,`), every other option at its default.
    pub fn new(bootstrap_servers: impl AsRef<str>, topic: impl Into<String>) -> Self {
        KafkaConfig {
            bootstrap_servers: split_servers(bootstrap_servers.as_ref()),
            topic: topic.into(),
            key: None,
            inline_max_bytes: default_inline(),
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            produce_timeout_ms: DEFAULT_PRODUCE_TIMEOUT_MS,
            compression: Compression::None,
            client_id: default_client_id(),
            tls: None,
            sasl: None,
            properties: BTreeMap::new(),
            allow_insecure: false,
        }
    }

    /// Set the key template (a string without `{...}` is a static key).
    pub fn with_key(mut self, template: impl Into<String>) -> Self {
        self.key = Some(template.into());
        self
    }
    /// Set the inline threshold.
    pub fn with_inline_max_bytes(mut self, max: NonZeroUsize) -> Self {
        self.inline_max_bytes = max;
        self
    }
    /// Set the record size limit (value + key).
    pub fn with_max_record_bytes(mut self, max: NonZeroUsize) -> Self {
        self.max_record_bytes = max;
        self
    }
    /// Set the produce timeout.
    pub fn with_produce_timeout(mut self, timeout: Duration) -> Self {
        self.produce_timeout_ms = ankusa_sink_core::timeout_ms(timeout);
        self
    }
    /// Set the compression codec.
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }
    /// Set `client.id`.
    pub fn with_client_id(mut self, id: impl Into<String>) -> Self {
        self.client_id = id.into();
        self
    }
    /// Speak TLS to the brokers.
    pub fn with_tls(mut self, tls: TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }
    /// Authenticate with SASL.
    pub fn with_sasl(mut self, sasl: SaslConfig) -> Self {
        self.sasl = Some(sasl);
        self
    }
    /// Add an extra librdkafka property.
    pub fn with_property(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(name.into(), value.into());
        self
    }

    /// Allow SASL without TLS to brokers off loopback (the password, for `plain`, then
    /// travels in the clear). The sink warns when it is built.
    pub fn with_allow_insecure(mut self, allow: bool) -> Self {
        self.allow_insecure = allow;
        self
    }

    /// The produce timeout.
    pub fn produce_timeout(&self) -> Duration {
        Duration::from_millis(self.produce_timeout_ms.get())
    }

    /// Check every value that can be checked without librdkafka.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.bootstrap_servers.is_empty() {
            return Err(ConfigError::NoBootstrapServers);
        }
        for (i, s) in self.bootstrap_servers.iter().enumerate() {
            if !is_host_port(s) {
                return Err(ConfigError::BadBootstrapServer(i));
            }
        }
        validate_topic(&self.topic)?;
        KeyTemplate::parse(self.key.as_deref().unwrap_or(DEFAULT_KEY))?;
        if self.produce_timeout_ms.get() > i32::MAX as u64 {
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
                .is_some_and(|(host, _)| ankusa_sink_core::is_loopback_host(host))
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

    /// The librdkafka configuration of the sink's producer. Call [`validate`](Self::validate)
    /// first.
    pub(crate) fn client_config(&self) -> ClientConfig {
        let timeout = self.produce_timeout_ms.get().to_string();
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.bootstrap_servers.join(","))
            .set("client.id", &self.client_id)
            .set("acks", "all")
            .set("enable.idempotence", "true")
            // The Java client's default partitioner: keyed records land where Java puts them.
            .set("partitioner", "murmur2_random")
            .set("message.timeout.ms", &timeout)
            .set("request.timeout.ms", &timeout)
            .set(
                "message.max.bytes",
                (self.max_record_bytes.get() + RECORD_OVERHEAD)
                    .max(1_000_000)
                    .to_string(),
            )
            .set("compression.codec", self.compression.as_str())
            // Never create the topic: a missing one is the operator's to fix.
            .set("allow.auto.create.topics", "false")
            // Fail records for a missing topic within the produce timeout rather than
            // after librdkafka's 30 s propagation grace (overridable in `properties`).
            .set(
                "topic.metadata.propagation.max.ms",
                (self.produce_timeout_ms.get() / 2).to_string(),
            );
        let protocol = match (&self.tls, &self.sasl) {
            (None, None) => "plaintext",
            (Some(_), None) => "ssl",
            (None, Some(_)) => "sasl_plaintext",
            (Some(_), Some(_)) => "sasl_ssl",
        };
        c.set("security.protocol", protocol);
        if let Some(sasl) = &self.sasl {
            c.set("sasl.mechanism", sasl.mechanism.as_str())
                .set("sasl.username", &sasl.username)
                .set("sasl.password", sasl.password.expose());
        }
        if let Some(tls) = &self.tls {
            for (k, v) in [
                ("ssl.ca.location", &tls.ca_location),
                ("ssl.certificate.location", &tls.certificate_location),
                ("ssl.key.location", &tls.key_location),
            ] {
                if let Some(v) = v {
                    c.set(k, v);
                }
            }
            if let Some(p) = &tls.key_password {
                c.set("ssl.key.password", p.expose());
            }
            c.set(
                "ssl.endpoint.identification.algorithm",
                if tls.verify_hostname { "https" } else { "none" },
            );
        }
        for (k, v) in &self.properties {
            c.set(k, v);
        }
        c
    }

    /// Every secret value this configuration holds, to scrub from librdkafka's messages.
    pub(crate) fn secrets(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        if let Some(s) = &self.sasl {
            out.push(s.password.expose());
        }
        if let Some(p) = self.tls.as_ref().and_then(|t| t.key_password.as_ref()) {
            out.push(p.expose());
        }
        for (k, v) in &self.properties {
            if is_sensitive_property(k) {
                out.push(v);
            }
        }
        out.retain(|s| !s.is_empty());
        out
    }
}

/// Room for headers and record framing on top of `max_record_bytes` in `message.max.bytes`.
const RECORD_OVERHEAD: usize = 65_536;
const MAX_MESSAGE_MAX_BYTES: usize = 1_000_000_000;

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
pub fn validate_topic(topic: &str) -> Result<(), ConfigError> {
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
    KeyTemplate(String),
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
    /// librdkafka refused to create the producer (secrets scrubbed from its message).
    #[error("librdkafka refused the configuration: {0}")]
    Client(String),
}

/// A record key: a template over the envelope, fixed at configuration time.
///
/// `{tenant_id}`, `{source_id}`, `{id}` and `{dedupe_key}` are replaced (an absent tenant
/// or dedupe key by the empty string); `{{` and `}}` are literal braces. A template with no
/// placeholder is a static key. The default is `{tenant_id}/{source_id}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate(Template);

impl KeyTemplate {
    /// Parse a template.
    pub fn parse(template: &str) -> Result<Self, ConfigError> {
        Template::parse(template)
            .map(KeyTemplate)
            .map_err(|e| ConfigError::KeyTemplate(e.to_string()))
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// Whether the key is the same for every hook.
    pub fn is_static(&self) -> bool {
        self.0.is_static()
    }

    /// Whether the key depends only on the tenant and the source.
    pub(crate) fn only_tenant_and_source(&self) -> bool {
        !self.0.uses(Placeholder::Id) && !self.0.uses(Placeholder::DedupeKey)
    }

    /// Whether the template names the tenant.
    pub(crate) fn uses_tenant(&self) -> bool {
        self.0.uses(Placeholder::TenantId)
    }

    /// The key of `env`.
    pub fn render(&self, env: &Envelope) -> String {
        self.0.render(&TemplateFields::of(env), "")
    }

    pub(crate) fn render_with(
        &self,
        tenant: Option<&str>,
        source: &str,
        id: &str,
        dedupe_key: Option<&str>,
    ) -> String {
        let fields = TemplateFields {
            id,
            source_id: source,
            tenant_id: tenant,
            dedupe_key,
        };
        self.0.render(&fields, "")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(tenant: Option<&str>) -> Envelope {
        Envelope::builder("h1", "stripe", "{}")
            .tenant(tenant.map(str::to_owned))
            .dedupe_key("evt_1")
            .build()
            .unwrap()
    }

    #[test]
    fn default_key_is_tenant_slash_source() {
        let k = KeyTemplate::parse(DEFAULT_KEY).unwrap();
        assert_eq!(k.render(&env(Some("acme"))), "acme/stripe");
        assert_eq!(k.render(&env(None)), "/stripe");
        assert!(!k.is_static() && k.only_tenant_and_source());
    }

    #[test]
    fn templates_and_static_keys() {
        let k = KeyTemplate::parse("{{x}}-{id}-{dedupe_key}").unwrap();
        assert_eq!(k.render(&env(None)), "{x}-h1-evt_1");
        assert!(!k.only_tenant_and_source());
        let k = KeyTemplate::parse("fixed").unwrap();
        assert!(k.is_static());
        assert_eq!(k.render(&env(None)), "fixed");
        for bad in ["{nope}", "{tenant_id", "a}b"] {
            let err = KeyTemplate::parse(bad).unwrap_err();
            assert!(matches!(err, ConfigError::KeyTemplate(_)), "{bad}: {err}");
        }
    }

    #[test]
    fn validation_names_the_option() {
        let ok = KafkaConfig::new("127.0.0.1:9092, [::1]:9093", "t.1_x-y");
        assert_eq!(ok.bootstrap_servers.len(), 2);
        ok.validate().unwrap();
        let cases = [
            (KafkaConfig::new("", "t"), "at least one"),
            (
                KafkaConfig::new("user:pw@h:9092", "t"),
                "bootstrap_servers[0]",
            ),
            (KafkaConfig::new("h", "t"), "bootstrap_servers[0]"),
            (KafkaConfig::new("h:1", "a/b"), "invalid topic"),
            (KafkaConfig::new("h:1", ".."), "invalid topic"),
            (KafkaConfig::new("h:1", "t").with_key("{x}"), "placeholder"),
            (
                KafkaConfig::new("h:1", "t").with_property("acks", "1"),
                "\"acks\" is set by the sink",
            ),
            (
                KafkaConfig::new("h:1", "t").with_property("enable.idempotence", "false"),
                "set by the sink",
            ),
            (
                KafkaConfig::new("h:1", "t").with_property("sasl.password", "x"),
                "set by the sink",
            ),
        ];
        for (cfg, want) in cases {
            let err = cfg.validate().unwrap_err().to_string();
            assert!(err.contains(want), "{err} !~ {want}");
            assert!(!err.contains("pw@"), "{err}");
        }
    }

    #[test]
    fn debug_redacts_every_secret() {
        let cfg = KafkaConfig::new("h:1", "t")
            .with_sasl(SaslConfig::new(
                SaslMechanism::ScramSha512,
                "svc",
                "sasl-pw-1",
            ))
            .with_tls(TlsConfig {
                key_password: Some(Secret::new("tls-pw-2")),
                ..TlsConfig::default()
            })
            .with_property("sasl.oauthbearer.client.secret", "oauth-3")
            .with_property("ssl.keystore.password", "ks-4")
            .with_property("ssl_key_x", "k-5")
            .with_property("linger.ms", "7");
        let d = format!("{cfg:?}");
        for s in ["sasl-pw-1", "tls-pw-2", "oauth-3", "ks-4", "k-5"] {
            assert!(!d.contains(s), "{s} in {d}");
        }
        assert!(
            d.contains("svc") && d.contains("\"linger.ms\": \"7\""),
            "{d}"
        );
        assert_eq!(cfg.secrets().len(), 5);
    }

    #[test]
    fn client_config_owns_the_delivery_guarantees() {
        let cfg = KafkaConfig::new("h:1,h:2", "t")
            .with_produce_timeout(Duration::from_millis(1500))
            .with_compression(Compression::Zstd)
            .with_sasl(SaslConfig::new(SaslMechanism::Plain, "u", "p"))
            .with_allow_insecure(true)
            .with_property("linger.ms", "1");
        cfg.validate().unwrap();
        let c = cfg.client_config();
        for (k, v) in [
            ("bootstrap.servers", "h:1,h:2"),
            ("acks", "all"),
            ("enable.idempotence", "true"),
            ("partitioner", "murmur2_random"),
            ("message.timeout.ms", "1500"),
            ("request.timeout.ms", "1500"),
            ("message.max.bytes", "1065536"),
            ("compression.codec", "zstd"),
            ("allow.auto.create.topics", "false"),
            ("topic.metadata.propagation.max.ms", "750"),
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanism", "PLAIN"),
            ("linger.ms", "1"),
        ] {
            assert_eq!(c.get(k), Some(v), "{k}");
        }
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
            let cfg = KafkaConfig::new("h:1", "t").with_property(name, "planted-value-77");
            let err = cfg.validate().unwrap_err();
            assert_eq!(err, ConfigError::UnsafeProperty(name.into()), "{name}");
            let text = err.to_string();
            assert!(text.contains(name), "{text}");
            assert!(!text.contains("planted-value-77"), "{text}");
        }
        // Owned ones stay owned (their own message); tuning and client identity pass.
        for name in ["ssl.ca.location", "ssl.endpoint.identification.algorithm"] {
            let err = KafkaConfig::new("h:1", "t")
                .with_property(name, "x")
                .validate();
            assert!(matches!(err, Err(ConfigError::OwnedProperty(_))), "{name}");
        }
        for name in ["ssl.crl.location", "ssl.keystore.location", "linger.ms"] {
            KafkaConfig::new("h:1", "t")
                .with_property(name, "x")
                .validate()
                .unwrap();
        }
    }

    #[test]
    fn sasl_without_tls_is_refused_off_loopback_unless_allowed() {
        let sasl = || SaslConfig::new(SaslMechanism::Plain, "u", "planted-pw-9");
        let err = KafkaConfig::new("kafka.example:9092", "t")
            .with_sasl(sasl())
            .validate()
            .unwrap_err();
        assert_eq!(err, ConfigError::CleartextCredentials);
        assert!(err.to_string().contains("allow_insecure"), "{err}");
        // One broker off loopback is enough to refuse.
        let err = KafkaConfig::new("127.0.0.1:9092,10.0.0.7:9092", "t")
            .with_sasl(sasl())
            .validate();
        assert_eq!(err, Err(ConfigError::CleartextCredentials));
        for loopback in ["127.0.0.1:9092", "localhost:9092", "[::1]:9092,127.0.0.2:1"] {
            let cfg = KafkaConfig::new(loopback, "t").with_sasl(sasl());
            cfg.validate().unwrap();
            assert!(cfg.insecure_settings().is_empty(), "{loopback}");
        }
        // TLS or an explicit opt-in: accepted; the opt-in is warned about.
        KafkaConfig::new("kafka.example:9092", "t")
            .with_sasl(sasl())
            .with_tls(TlsConfig::default())
            .validate()
            .unwrap();
        let allowed = KafkaConfig::new("kafka.example:9092", "t")
            .with_sasl(sasl())
            .with_allow_insecure(true);
        allowed.validate().unwrap();
        let warned = allowed.insecure_settings();
        assert_eq!(warned.len(), 1);
        assert!(warned[0].contains("in the clear"), "{warned:?}");
        assert!(!format!("{warned:?}").contains("planted-pw-9"));
    }

    #[test]
    fn tls_without_hostname_verification_is_warned_about() {
        let cfg = KafkaConfig::new("kafka.example:9093", "t").with_tls(TlsConfig {
            verify_hostname: false,
            ..TlsConfig::default()
        });
        cfg.validate().unwrap();
        let warned = cfg.insecure_settings();
        assert_eq!(warned.len(), 1);
        assert!(warned[0].contains("verify_hostname"), "{warned:?}");
        let cfg = KafkaConfig::new("kafka.example:9093", "t").with_tls(TlsConfig::default());
        assert!(cfg.insecure_settings().is_empty());
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
        assert_eq!(cfg.produce_timeout_ms, DEFAULT_PRODUCE_TIMEOUT_MS);
        assert!(cfg.tls.as_ref().unwrap().verify_hostname);
        assert!(!cfg.allow_insecure);
        cfg.validate().unwrap();
        let bad = serde_json::from_value::<KafkaConfig>(serde_json::json!({
            "bootstrap_servers": ["a:1"], "topic": "t", "nope": 1
        }));
        assert!(bad.is_err());
    }
}

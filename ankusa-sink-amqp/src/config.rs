//! Sink configuration: a serde form and a builder, both validated at build time.

use ankusa_sink_core::template::{Placeholder, Template, TemplateFields};
use ankusa_sink_core::{DEFAULT_INLINE_MAX_BYTES, Envelope, is_loopback_host};
use lapin::uri::{AMQPScheme, AMQPUri};
use serde::Deserialize;
use std::fmt;
use std::num::NonZeroUsize;
use std::str::FromStr;
use std::time::Duration;

/// Default largest Message v1 sent: 128 MiB, RabbitMQ's default `max_message_size`.
pub const DEFAULT_MAX_MESSAGE_BYTES: NonZeroUsize = NonZeroUsize::new(128 * 1024 * 1024).unwrap();
/// Default publisher-confirm wait per publish: 5 s.
pub const DEFAULT_CONFIRM_TIMEOUT: Duration = Duration::from_secs(5);
/// Default connection (and channel setup) timeout: 5 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default publishes awaiting a confirm at once: 256.
pub const DEFAULT_MAX_INFLIGHT: NonZeroUsize = NonZeroUsize::new(256).unwrap();
/// The default routing key template, `ankusa.{source_id}`.
pub const DEFAULT_ROUTING_KEY_TEMPLATE: &str = "ankusa.{source_id}";
/// AMQP short strings (exchange names, routing keys) hold at most 255 bytes.
pub const MAX_SHORT_STRING: usize = 255;

/// Why a configuration was refused. Never contains the URL or its credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The URL is not an absolute `amqp://` or `amqps://` URL with a host.
    #[error("url: not a valid amqp:// or amqps:// URL with a host ({0})")]
    Url(&'static str),
    /// The exchange name is too long or has control characters.
    #[error("exchange: {0}")]
    Exchange(&'static str),
    /// The exchange type is not one of topic, direct, fanout, headers.
    #[error("exchange_type: {0:?} is not one of topic, direct, fanout, headers")]
    ExchangeType(String),
    /// The default exchange (`""`) cannot be declared.
    #[error("declare_exchange: the default exchange \"\" cannot be declared")]
    DeclareDefaultExchange,
    /// A bad static routing key or template.
    #[error("routing_key: {0}")]
    RoutingKey(String),
    /// Both a static routing key and a template were given.
    #[error("routing_key and routing_key_template are exclusive")]
    RoutingKeyAndTemplate,
    /// A zero where a positive number is required.
    #[error("{0} must be positive")]
    Zero(&'static str),
    /// `amqp://` to a host that is not this machine: the login (user and password; a URL
    /// without them logs in as guest/guest) would cross the network unencrypted.
    #[error(
        "url: amqp:// sends the user name and password unencrypted to a host that is not \
         loopback; use amqps://, or set allow_insecure = true to accept that"
    )]
    Insecure,
}

/// The AMQP exchange type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExchangeType {
    /// Pattern routing on the routing key (the default).
    #[default]
    Topic,
    /// Exact routing-key match.
    Direct,
    /// Every bound queue.
    Fanout,
    /// Routing on message headers.
    Headers,
}

impl ExchangeType {
    /// The AMQP name: `topic`, `direct`, `fanout`, `headers`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ExchangeType::Topic => "topic",
            ExchangeType::Direct => "direct",
            ExchangeType::Fanout => "fanout",
            ExchangeType::Headers => "headers",
        }
    }

    pub(crate) fn kind(self) -> lapin::ExchangeKind {
        match self {
            ExchangeType::Topic => lapin::ExchangeKind::Topic,
            ExchangeType::Direct => lapin::ExchangeKind::Direct,
            ExchangeType::Fanout => lapin::ExchangeKind::Fanout,
            ExchangeType::Headers => lapin::ExchangeKind::Headers,
        }
    }
}

impl FromStr for ExchangeType {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "topic" => Ok(ExchangeType::Topic),
            "direct" => Ok(ExchangeType::Direct),
            "fanout" => Ok(ExchangeType::Fanout),
            "headers" => Ok(ExchangeType::Headers),
            other => Err(ConfigError::ExchangeType(other.to_owned())),
        }
    }
}

/// How the routing key of a hook is chosen.
///
/// A template holds literal text and the placeholders `{id}`, `{source_id}`,
/// `{tenant_id}` (`default` when the hook has no tenant) and `{dedupe_key}`; `{{` and `}}`
/// are literal braces (the grammar of [`ankusa_sink_core::template`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingKey(Template);

/// What `{tenant_id}` renders as for a hook without a tenant.
const NO_TENANT: &str = "default";

impl RoutingKey {
    /// The same key for every hook.
    pub fn fixed(key: impl Into<String>) -> Result<Self, ConfigError> {
        let key = key.into();
        check_short("routing key", &key).map_err(ConfigError::RoutingKey)?;
        Ok(RoutingKey(Template::literal(key)))
    }

    /// A key computed from each hook, e.g. `ankusa.{tenant_id}.{source_id}`.
    pub fn template(template: impl Into<String>) -> Result<Self, ConfigError> {
        let t = Template::parse(&template.into())
            .map_err(|e| ConfigError::RoutingKey(e.to_string()))?;
        check_short("routing key template", &t.literal_text()).map_err(ConfigError::RoutingKey)?;
        Ok(RoutingKey(t))
    }

    /// Whether the key is the same for every hook.
    pub fn is_fixed(&self) -> bool {
        self.0.is_static()
    }

    /// The key or template as configured.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The routing key of `env` (may exceed 255 bytes; the sink refuses such keys).
    pub fn render(&self, env: &Envelope) -> String {
        self.0.render(&TemplateFields::of(env), NO_TENANT)
    }

    /// The first value this template inserts for `env` that holds a topic-routing
    /// character (`.` separates words, `*` and `#` are wildcards), as the placeholder and
    /// the character. The tenant id cannot hold one (core allows `[A-Za-z0-9_-]`), nor can
    /// the absent-tenant value `default`.
    pub(crate) fn unsafe_topic_value(&self, env: &Envelope) -> Option<(&'static str, char)> {
        let t = &self.0;
        [
            (Placeholder::SourceId, "{source_id}", Some(env.source_id())),
            (Placeholder::Id, "{id}", Some(env.id())),
            (Placeholder::DedupeKey, "{dedupe_key}", env.dedupe_key()),
            (Placeholder::TenantId, "{tenant_id}", env.tenant_id()),
        ]
        .into_iter()
        .filter(|(p, _, _)| t.uses(*p))
        .find_map(|(_, name, value)| {
            value?
                .chars()
                .find(|c| matches!(c, '.' | '*' | '#'))
                .map(|c| (name, c))
        })
    }

    /// The key for a source and tenant, or `None` when it depends on the hook (its id or
    /// dedupe key) or on a tenant that is not known (`None`).
    pub(crate) fn render_for(&self, source_id: &str, tenant_id: Option<&str>) -> Option<String> {
        let t = &self.0;
        if t.uses(Placeholder::Id)
            || t.uses(Placeholder::DedupeKey)
            || (t.uses(Placeholder::TenantId) && tenant_id.is_none())
        {
            return None;
        }
        let fields = TemplateFields {
            source_id,
            tenant_id,
            ..TemplateFields::default()
        };
        Some(t.render(&fields, NO_TENANT))
    }
}

impl Default for RoutingKey {
    fn default() -> Self {
        RoutingKey::template(DEFAULT_ROUTING_KEY_TEMPLATE).expect("the default template is valid")
    }
}

fn check_short(what: &str, s: &str) -> Result<(), String> {
    if s.len() > MAX_SHORT_STRING {
        return Err(format!(
            "{what} is {} bytes; AMQP allows at most {MAX_SHORT_STRING}",
            s.len()
        ));
    }
    if s.chars().any(char::is_control) {
        return Err(format!("{what} contains control characters"));
    }
    Ok(())
}

/// A parsed broker URL. Holds the credentials; prints only `scheme://host:port/vhost`.
#[derive(Clone)]
pub(crate) struct BrokerUrl {
    pub(crate) uri: AMQPUri,
    /// `host:port`, for descriptions and error text.
    pub(crate) host_port: String,
    pub(crate) tls: bool,
}

impl BrokerUrl {
    fn parse(raw: &str) -> Result<Self, ConfigError> {
        // Neither parser's error text is kept: amq-protocol's can echo the whole URL.
        let url = url::Url::parse(raw).map_err(|_| ConfigError::Url("unparsable"))?;
        let tls = match url.scheme() {
            "amqp" => false,
            "amqps" => true,
            _ => return Err(ConfigError::Url("scheme must be amqp or amqps")),
        };
        let host = match url.host() {
            Some(url::Host::Domain(d)) if !d.is_empty() => d.to_owned(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            _ => return Err(ConfigError::Url("no host")),
        };
        if url.fragment().is_some() {
            return Err(ConfigError::Url("a fragment is not allowed"));
        }
        let mut uri = AMQPUri::from_str(raw).map_err(|_| ConfigError::Url("invalid AMQP URI"))?;
        // amq-protocol takes only DNS names from the URL and falls back to "localhost" for
        // IP literals; connect to exactly the host written.
        uri.authority.host = host.clone();
        let port = uri.authority.port;
        let host_port = match url.host() {
            Some(url::Host::Ipv6(_)) => format!("[{host}]:{port}"),
            _ => format!("{host}:{port}"),
        };
        debug_assert_eq!(matches!(uri.scheme, AMQPScheme::AMQPS), tls);
        Ok(BrokerUrl {
            uri,
            host_port,
            tls,
        })
    }

    pub(crate) fn scheme(&self) -> &'static str {
        if self.tls { "amqps" } else { "amqp" }
    }

    pub(crate) fn vhost(&self) -> &str {
        &self.uri.vhost
    }

    /// `amqp://host:port/<vhost>`, percent-encoding the vhost; no credentials, no query.
    pub(crate) fn redacted(&self) -> String {
        let mut vhost = String::new();
        for b in self.vhost().bytes() {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                vhost.push(char::from(b));
            } else {
                vhost.push_str(&format!("%{b:02X}"));
            }
        }
        format!("{}://{}/{}", self.scheme(), self.host_port, vhost)
    }
}

impl fmt::Debug for BrokerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// A validated AMQP sink configuration. Build it with [`AmqpConfig::builder`] or deserialize
/// it (see the crate docs for the keys).
///
/// `Debug` prints the URL without credentials.
#[derive(Debug, Clone)]
pub struct AmqpConfig {
    pub(crate) url: BrokerUrl,
    pub(crate) exchange: String,
    pub(crate) exchange_type: ExchangeType,
    pub(crate) declare_exchange: bool,
    pub(crate) routing_key: RoutingKey,
    pub(crate) inline_max_bytes: NonZeroUsize,
    pub(crate) max_message_bytes: NonZeroUsize,
    pub(crate) confirm_timeout: Duration,
    pub(crate) max_inflight: NonZeroUsize,
    pub(crate) connect_timeout: Duration,
    pub(crate) allow_insecure: bool,
}

impl AmqpConfig {
    /// A builder for publishing to `exchange` on the broker at `url`
    /// (`amqp://user:pass@host:port/vhost`; the vhost is percent-encoded, `%2f` is `/`).
    pub fn builder(url: impl Into<String>, exchange: impl Into<String>) -> AmqpConfigBuilder {
        AmqpConfigBuilder {
            url: url.into(),
            exchange: exchange.into(),
            exchange_type: ExchangeType::default(),
            declare_exchange: false,
            routing_key: None,
            routing_key_template: None,
            inline_max_bytes: DEFAULT_INLINE_MAX_BYTES.get(),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES.get(),
            confirm_timeout: DEFAULT_CONFIRM_TIMEOUT,
            max_inflight: DEFAULT_MAX_INFLIGHT.get(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            allow_insecure: false,
        }
    }

    /// The exchange published to.
    pub fn exchange(&self) -> &str {
        &self.exchange
    }
    /// The exchange type.
    pub fn exchange_type(&self) -> ExchangeType {
        self.exchange_type
    }
    /// Whether the sink declares the exchange (durable) rather than checking it passively.
    pub fn declare_exchange(&self) -> bool {
        self.declare_exchange
    }
    /// The routing key rule.
    pub fn routing_key(&self) -> &RoutingKey {
        &self.routing_key
    }
    /// The inline threshold of Message v1.
    pub fn inline_max_bytes(&self) -> NonZeroUsize {
        self.inline_max_bytes
    }
    /// The largest encoded message sent; larger ones fail permanently, unsent.
    pub fn max_message_bytes(&self) -> NonZeroUsize {
        self.max_message_bytes
    }
    /// The publisher-confirm wait per publish.
    pub fn confirm_timeout(&self) -> Duration {
        self.confirm_timeout
    }
    /// Publishes awaiting a confirm at once.
    pub fn max_inflight(&self) -> NonZeroUsize {
        self.max_inflight
    }
    /// The bound on opening the connection and channel.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }
    /// The broker URL without credentials: `amqp://host:port/<vhost>`.
    pub fn redacted_url(&self) -> String {
        self.url.redacted()
    }
    /// Whether `amqp://` to a host that is not loopback was accepted.
    pub fn allow_insecure(&self) -> bool {
        self.allow_insecure
    }
}

/// Builds an [`AmqpConfig`]; [`build`](AmqpConfigBuilder::build) validates every value.
#[derive(Clone)]
pub struct AmqpConfigBuilder {
    url: String,
    exchange: String,
    exchange_type: ExchangeType,
    declare_exchange: bool,
    routing_key: Option<String>,
    routing_key_template: Option<String>,
    inline_max_bytes: usize,
    max_message_bytes: usize,
    confirm_timeout: Duration,
    max_inflight: usize,
    connect_timeout: Duration,
    allow_insecure: bool,
}

impl fmt::Debug for AmqpConfigBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AmqpConfigBuilder")
            .field("url", &ankusa_sink_core::redact_url_keep_path(&self.url))
            .field("exchange", &self.exchange)
            .field("exchange_type", &self.exchange_type)
            .field("declare_exchange", &self.declare_exchange)
            .field("routing_key", &self.routing_key)
            .field("routing_key_template", &self.routing_key_template)
            .field("allow_insecure", &self.allow_insecure)
            .finish_non_exhaustive()
    }
}

impl AmqpConfigBuilder {
    /// The exchange type (default topic); used when declaring and in descriptions.
    pub fn exchange_type(mut self, t: ExchangeType) -> Self {
        self.exchange_type = t;
        self
    }
    /// Declare the exchange (durable) on every channel open instead of the default passive
    /// check that it exists.
    pub fn declare_exchange(mut self, declare: bool) -> Self {
        self.declare_exchange = declare;
        self
    }
    /// The same routing key for every hook.
    pub fn routing_key(mut self, key: impl Into<String>) -> Self {
        self.routing_key = Some(key.into());
        self
    }
    /// A routing key computed per hook (see [`RoutingKey::template`]); the default is
    /// `ankusa.{source_id}`.
    pub fn routing_key_template(mut self, template: impl Into<String>) -> Self {
        self.routing_key_template = Some(template.into());
        self
    }
    /// Bodies larger than this travel by `ctx.claim` (default 64 KiB).
    pub fn inline_max_bytes(mut self, n: usize) -> Self {
        self.inline_max_bytes = n;
        self
    }
    /// Messages larger than this fail permanently and are not sent (default 128 MiB).
    pub fn max_message_bytes(mut self, n: usize) -> Self {
        self.max_message_bytes = n;
        self
    }
    /// How long a publish waits for its confirm (default 5 s).
    pub fn confirm_timeout(mut self, d: Duration) -> Self {
        self.confirm_timeout = d;
        self
    }
    /// Publishes awaiting a confirm at once (default 256).
    pub fn max_inflight(mut self, n: usize) -> Self {
        self.max_inflight = n;
        self
    }
    /// The bound on opening the connection and channel (default 5 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// Accept `amqp://` (no TLS) to a host that is not loopback, sending the login in the
    /// clear (default false: such a URL is a [`ConfigError::Insecure`]). A warning is
    /// logged when the config is built.
    pub fn allow_insecure(mut self, allow: bool) -> Self {
        self.allow_insecure = allow;
        self
    }

    /// Validate and build.
    pub fn build(self) -> Result<AmqpConfig, ConfigError> {
        let url = BrokerUrl::parse(&self.url)?;
        if !url.tls && !is_loopback_host(&url.uri.authority.host) {
            if !self.allow_insecure {
                return Err(ConfigError::Insecure);
            }
            tracing::warn!(
                endpoint = %url.redacted(),
                "amqp sink: allow_insecure: the login (user name and password) goes to the \
                 broker unencrypted (amqp://); use amqps:// to protect it"
            );
        }
        if self.exchange.len() > MAX_SHORT_STRING {
            return Err(ConfigError::Exchange("longer than 255 bytes"));
        }
        if self.exchange.chars().any(char::is_control) {
            return Err(ConfigError::Exchange("contains control characters"));
        }
        if self.declare_exchange && self.exchange.is_empty() {
            return Err(ConfigError::DeclareDefaultExchange);
        }
        let routing_key = match (self.routing_key, self.routing_key_template) {
            (Some(_), Some(_)) => return Err(ConfigError::RoutingKeyAndTemplate),
            (Some(k), None) => RoutingKey::fixed(k)?,
            (None, Some(t)) => RoutingKey::template(t)?,
            (None, None) => RoutingKey::default(),
        };
        let nz = |n: usize, what| NonZeroUsize::new(n).ok_or(ConfigError::Zero(what));
        if self.confirm_timeout.is_zero() {
            return Err(ConfigError::Zero("confirm_timeout"));
        }
        if self.connect_timeout.is_zero() {
            return Err(ConfigError::Zero("connect_timeout"));
        }
        Ok(AmqpConfig {
            url,
            exchange: self.exchange,
            exchange_type: self.exchange_type,
            declare_exchange: self.declare_exchange,
            routing_key,
            inline_max_bytes: nz(self.inline_max_bytes, "inline_max_bytes")?,
            max_message_bytes: nz(self.max_message_bytes, "max_message_bytes")?,
            confirm_timeout: self.confirm_timeout,
            max_inflight: nz(self.max_inflight, "max_inflight")?,
            connect_timeout: self.connect_timeout,
            allow_insecure: self.allow_insecure,
        })
    }
}

/// The serde form of [`AmqpConfig`] (durations in milliseconds). Unknown keys are refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    url: String,
    exchange: String,
    #[serde(default)]
    exchange_type: ExchangeType,
    #[serde(default)]
    declare_exchange: bool,
    #[serde(default)]
    routing_key: Option<String>,
    #[serde(default)]
    routing_key_template: Option<String>,
    #[serde(default)]
    inline_max_bytes: Option<usize>,
    #[serde(default)]
    max_message_bytes: Option<usize>,
    #[serde(default)]
    confirm_timeout_ms: Option<u64>,
    #[serde(default)]
    max_inflight: Option<usize>,
    #[serde(default)]
    connect_timeout_ms: Option<u64>,
    #[serde(default)]
    allow_insecure: bool,
}

impl<'de> Deserialize<'de> for AmqpConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let r = RawConfig::deserialize(d)?;
        let mut b = AmqpConfig::builder(r.url, r.exchange)
            .exchange_type(r.exchange_type)
            .declare_exchange(r.declare_exchange)
            .allow_insecure(r.allow_insecure);
        if let Some(k) = r.routing_key {
            b = b.routing_key(k);
        }
        if let Some(t) = r.routing_key_template {
            b = b.routing_key_template(t);
        }
        if let Some(n) = r.inline_max_bytes {
            b = b.inline_max_bytes(n);
        }
        if let Some(n) = r.max_message_bytes {
            b = b.max_message_bytes(n);
        }
        if let Some(ms) = r.confirm_timeout_ms {
            b = b.confirm_timeout(Duration::from_millis(ms));
        }
        if let Some(n) = r.max_inflight {
            b = b.max_inflight(n);
        }
        if let Some(ms) = r.connect_timeout_ms {
            b = b.connect_timeout(Duration::from_millis(ms));
        }
        b.build().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sink_testkit::support::LogCapture;

    const URL: &str = "amqp://user:s3cr3t@127.0.0.1:5672/%2f";

    #[test]
    fn defaults() {
        let c = AmqpConfig::builder(URL, "ex").build().unwrap();
        assert_eq!(c.exchange_type(), ExchangeType::Topic);
        assert!(!c.declare_exchange());
        assert_eq!(c.routing_key().as_str(), "ankusa.{source_id}");
        assert_eq!(c.inline_max_bytes().get(), 65_536);
        assert_eq!(c.max_message_bytes(), DEFAULT_MAX_MESSAGE_BYTES);
        assert_eq!(c.confirm_timeout(), Duration::from_secs(5));
        assert_eq!(c.max_inflight().get(), 256);
        assert_eq!(c.url.vhost(), "/");
        assert_eq!(c.url.uri.authority.host, "127.0.0.1");
        assert_eq!(c.redacted_url(), "amqp://127.0.0.1:5672/%2F");
    }

    #[test]
    fn url_rules_and_no_secret_in_errors_or_debug() {
        let c = AmqpConfig::builder("amqps://u:s3cr3t@broker.example/prod", "ex")
            .build()
            .unwrap();
        assert_eq!(c.url.host_port, "broker.example:5671");
        assert_eq!(c.url.vhost(), "prod");
        assert!(!format!("{c:?}").contains("s3cr3t"));
        let b = AmqpConfig::builder(URL, "ex");
        assert!(!format!("{b:?}").contains("s3cr3t"));
        for bad in [
            "http://u:s3cr3t@h/",
            "amqp://u:s3cr3t@/x",
            "not a url s3cr3t",
            "amqp://u:s3cr3t@h/v#frag",
        ] {
            let err = AmqpConfig::builder(bad, "ex").build().unwrap_err();
            assert!(!err.to_string().contains("s3cr3t"), "{err}");
            assert!(matches!(err, ConfigError::Url(_)), "{bad}: {err}");
        }
    }

    /// What `f` logs on this thread.
    fn logged(f: impl FnOnce()) -> Vec<String> {
        let logs = LogCapture::new();
        let guard = logs.set_default();
        f();
        drop(guard);
        logs.lines().iter().map(ToString::to_string).collect()
    }

    #[test]
    fn cleartext_login_to_a_remote_host_needs_allow_insecure() {
        for url in [
            "amqp://u:s3cr3t@broker.example/prod",
            "amqp://broker.example",
            "amqp://u:s3cr3t@10.0.0.5:5672/%2f",
        ] {
            let err = AmqpConfig::builder(url, "ex").build().unwrap_err();
            assert_eq!(err, ConfigError::Insecure, "{url}");
            assert!(!err.to_string().contains("s3cr3t"), "{err}");
            assert!(err.to_string().contains("allow_insecure"), "{err}");
            let mut c = None;
            let lines = logged(|| {
                c = Some(
                    AmqpConfig::builder(url, "ex")
                        .allow_insecure(true)
                        .build()
                        .unwrap(),
                );
            });
            assert!(c.unwrap().allow_insecure());
            assert_eq!(lines.len(), 1, "{lines:?}");
            assert!(lines[0].starts_with("WARN "), "{lines:?}");
            assert!(lines[0].contains("unencrypted"), "{lines:?}");
            assert!(!lines[0].contains("s3cr3t"), "{lines:?}");
        }
        // TLS, and loopback (the default guest/guest on 127.0.0.1 keeps working), quietly.
        for url in [
            "amqps://u:s3cr3t@broker.example/prod",
            "amqp://guest:guest@127.0.0.1:5672/%2f",
            "amqp://guest:guest@localhost",
            "amqp://u:p@[::1]:5672/%2f",
        ] {
            let lines = logged(|| {
                AmqpConfig::builder(url, "ex").build().unwrap();
            });
            assert!(lines.is_empty(), "{url}: {lines:?}");
        }
        let c: AmqpConfig = serde_json::from_value(serde_json::json!({
            "url": "amqp://u:p@broker.example", "exchange": "ex", "allow_insecure": true
        }))
        .unwrap();
        assert!(c.allow_insecure());
        let err = serde_json::from_value::<AmqpConfig>(serde_json::json!({
            "url": "amqp://u:s3cr3t@broker.example", "exchange": "ex"
        }))
        .unwrap_err();
        assert!(err.to_string().contains("allow_insecure"), "{err}");
    }

    #[test]
    fn topic_routing_characters_in_inserted_values_are_found() {
        let t = RoutingKey::template("ankusa.{tenant_id}.{source_id}.{dedupe_key}").unwrap();
        let env = |source: &str, dedupe: &str| {
            Envelope::builder("h.1", source, "")
                .tenant_id("acme")
                .dedupe_key(dedupe)
                .build()
                .unwrap()
        };
        assert_eq!(t.unsafe_topic_value(&env("stripe", "evt_1")), None);
        assert_eq!(
            t.unsafe_topic_value(&env("stripe", "evt.1")),
            Some(("{dedupe_key}", '.'))
        );
        assert_eq!(
            t.unsafe_topic_value(&env("stripe", "#")),
            Some(("{dedupe_key}", '#'))
        );
        assert_eq!(
            t.unsafe_topic_value(&env("a*b", "evt_1")),
            Some(("{source_id}", '*'))
        );
        // {id} is not in this template: its '.' does not matter.
        assert_eq!(t.unsafe_topic_value(&env("stripe", "")), None);
        let by_id = RoutingKey::template("x.{id}").unwrap();
        assert_eq!(by_id.unsafe_topic_value(&env("s", "")), Some(("{id}", '.')));
        // Literal dots of the template itself are the operator's and fine.
        assert_eq!(
            RoutingKey::fixed("a.*.#")
                .unwrap()
                .unsafe_topic_value(&env("s.x", "")),
            None
        );
        // No tenant: "default" (reserved by core), unchanged.
        let no_tenant = Envelope::builder("h1", "s", "").build().unwrap();
        let t = RoutingKey::template("x.{tenant_id}").unwrap();
        assert_eq!(t.unsafe_topic_value(&no_tenant), None);
        assert_eq!(t.render(&no_tenant), "x.default");
    }

    #[test]
    fn routing_key_templates() {
        let env = Envelope::builder("h1", "stripe", "")
            .tenant_id("acme")
            .build()
            .unwrap();
        let t = RoutingKey::template("x.{tenant_id}.{source_id}.{id}.{{lit}}").unwrap();
        assert_eq!(t.render(&env), "x.acme.stripe.h1.{lit}");
        assert!(!t.is_fixed());
        assert_eq!(t.render_for("s", Some("t")), None);
        let t = RoutingKey::template("x.{tenant_id}").unwrap();
        assert_eq!(t.render_for("s", None), None);
        assert_eq!(t.render_for("s", Some("t")).as_deref(), Some("x.t"));
        let no_tenant = Envelope::builder("h1", "s", "").build().unwrap();
        assert_eq!(t.render(&no_tenant), "x.default");
        assert!(RoutingKey::template("x.{nope}").is_err());
        assert!(RoutingKey::template("x.{id").is_err());
        assert!(RoutingKey::template("x.}").is_err());
        assert!(RoutingKey::fixed("a".repeat(256)).is_err());
        assert!(RoutingKey::fixed("k").unwrap().is_fixed());
        assert_eq!(RoutingKey::default().render(&env), "ankusa.stripe");
    }

    #[test]
    fn invalid_values_are_errors() {
        let b = || AmqpConfig::builder(URL, "ex");
        assert_eq!(
            b().max_inflight(0).build().unwrap_err(),
            ConfigError::Zero("max_inflight")
        );
        assert_eq!(
            b().inline_max_bytes(0).build().unwrap_err(),
            ConfigError::Zero("inline_max_bytes")
        );
        assert_eq!(
            b().confirm_timeout(Duration::ZERO).build().unwrap_err(),
            ConfigError::Zero("confirm_timeout")
        );
        assert_eq!(
            b().routing_key("a")
                .routing_key_template("b")
                .build()
                .unwrap_err(),
            ConfigError::RoutingKeyAndTemplate
        );
        assert_eq!(
            AmqpConfig::builder(URL, "")
                .declare_exchange(true)
                .build()
                .unwrap_err(),
            ConfigError::DeclareDefaultExchange
        );
        assert!("nope".parse::<ExchangeType>().is_err());
    }

    #[test]
    fn serde_form() {
        let c: AmqpConfig = serde_json::from_value(serde_json::json!({
            "url": URL, "exchange": "ex", "exchange_type": "direct", "declare_exchange": true,
            "routing_key": "k", "inline_max_bytes": 10, "max_message_bytes": 100,
            "confirm_timeout_ms": 250, "max_inflight": 8, "connect_timeout_ms": 300
        }))
        .unwrap();
        assert_eq!(c.exchange_type(), ExchangeType::Direct);
        assert!(c.declare_exchange());
        assert_eq!(c.routing_key().as_str(), "k");
        assert_eq!(c.confirm_timeout(), Duration::from_millis(250));
        assert_eq!(c.connect_timeout(), Duration::from_millis(300));
        let err = serde_json::from_value::<AmqpConfig>(serde_json::json!({
            "url": "amqp://u:s3cr3t@127.0.0.1/", "exchange": "ex", "max_inflight": 0
        }))
        .unwrap_err();
        assert!(err.to_string().contains("max_inflight"), "{err}");
        assert!(!err.to_string().contains("s3cr3t"));
        assert!(
            serde_json::from_value::<AmqpConfig>(serde_json::json!({
                "url": URL, "exchange": "ex", "bogus": 1
            }))
            .is_err()
        );
    }
}

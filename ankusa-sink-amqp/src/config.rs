//! Sink configuration: a private serde representation, validated once by `TryFrom` into an
//! always-valid [`AmqpConfig`], with `with_*` builders that re-check what they change.

use crate::broker_url::BrokerUrl;
use crate::config_error::ConfigError;
use crate::connection::AmqpConnection;
use ankusa_message::MessageOptions;
use ankusa_message::template::{AbsentTenant, KeyTemplate};
use ankusa_sink_kit::timeout_ms;
use serde::Deserialize;
use serde::de::IgnoredAny;
use std::collections::BTreeMap;
use std::num::{NonZeroU64, NonZeroUsize};
use std::str::FromStr;
use std::time::Duration;

/// Default largest Message v1 sent: 128 MiB, RabbitMQ's default `max_message_size`.
pub(crate) const DEFAULT_MAX_MESSAGE_BYTES: NonZeroUsize =
    NonZeroUsize::new(128 * 1024 * 1024).unwrap();
/// Default publisher-confirm wait per publish: 5 s.
const DEFAULT_CONFIRM_TIMEOUT_MS: NonZeroU64 = NonZeroU64::new(5_000).unwrap();
/// Default connection (and channel setup) timeout: 5 s.
const DEFAULT_CONNECT_TIMEOUT_MS: NonZeroU64 = NonZeroU64::new(5_000).unwrap();
/// Default publishes awaiting a confirm at once: 4,096. RabbitMQ confirms persistent
/// messages per disk flush, so the more are outstanding, the more each flush confirms
/// (docs/benchmarks-history.md, "Stop 42": 4,096 as the lapin loop keeps, where 256 reached
/// 0.8 of its rate).
const DEFAULT_MAX_INFLIGHT: NonZeroUsize = NonZeroUsize::new(4096).unwrap();
/// The default routing key template.
const DEFAULT_ROUTING_KEY_TEMPLATE: &str = "ankusa.{source_id}";
/// AMQP short strings (exchange names, routing keys) hold at most 255 bytes.
pub(crate) const MAX_SHORT_STRING: usize = 255;

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

/// The routing key of every hook: `key` as it is (braces are text).
fn fixed_key(key: &str) -> Result<KeyTemplate, ConfigError> {
    check_short("routing key", key).map_err(ConfigError::RoutingKey)?;
    Ok(KeyTemplate::literal(key, AbsentTenant::Default))
}

/// A routing key computed per hook; `{tenant_id}` of a hook without a tenant is `default`.
fn key_template(template: &str) -> Result<KeyTemplate, ConfigError> {
    let t = KeyTemplate::parse(template, AbsentTenant::Default)
        .map_err(|e| ConfigError::RoutingKey(e.to_string()))?;
    check_short("routing key template", &t.literal_text()).map_err(ConfigError::RoutingKey)?;
    Ok(t)
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

/// The operator's keys, exactly as written in a sink file (`type` already removed).
#[derive(Deserialize)]
struct Repr {
    #[serde(flatten)]
    conn: AmqpConnection,
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
    max_message_bytes: Option<usize>,
    #[serde(default)]
    confirm_timeout_ms: Option<u64>,
    #[serde(default)]
    max_inflight: Option<usize>,
    /// `format`, `cloudevents_type`, `[signing]`, `inline_max_bytes`.
    #[serde(flatten)]
    message: MessageOptions,
    /// Whatever no option took: refused (`flatten` cannot deny unknown fields itself).
    #[serde(flatten)]
    unknown: BTreeMap<String, IgnoredAny>,
}

/// A valid AMQP sink configuration: [`AmqpConfig::new`] and the `with_*` builders, or
/// deserialized from the keys in the crate docs. Every value it holds has been checked.
///
/// `Debug` prints the URL without credentials (the password is a core
/// [`Secret`](ankusa_sink_core::Secret)).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Repr")]
#[non_exhaustive]
pub struct AmqpConfig {
    pub(crate) url: BrokerUrl,
    pub(crate) exchange: String,
    pub(crate) exchange_type: ExchangeType,
    pub(crate) declare_exchange: bool,
    pub(crate) routing_key: KeyTemplate,
    pub(crate) max_message_bytes: NonZeroUsize,
    pub(crate) confirm_timeout_ms: NonZeroU64,
    pub(crate) max_inflight: NonZeroUsize,
    pub(crate) connect_timeout_ms: NonZeroU64,
    pub(crate) allow_insecure: bool,
    pub(crate) message: MessageOptions,
}

impl TryFrom<Repr> for AmqpConfig {
    type Error = ConfigError;

    fn try_from(r: Repr) -> Result<Self, ConfigError> {
        if let Some(k) = r.unknown.keys().next() {
            return Err(ConfigError::UnknownField(k.clone()));
        }
        let mut c = AmqpConfig::create(&r.conn.url, &r.exchange, r.conn.allow_insecure)?
            .with_exchange_type(r.exchange_type)
            .with_declare_exchange(r.declare_exchange)?;
        c.routing_key = match (r.routing_key, r.routing_key_template) {
            (Some(_), Some(_)) => return Err(ConfigError::RoutingKeyAndTemplate),
            (Some(k), None) => fixed_key(&k)?,
            (None, Some(t)) => key_template(&t)?,
            (None, None) => c.routing_key,
        };
        let ms = |v: Option<u64>, default, what| match v {
            None => Ok(default),
            Some(ms) => NonZeroU64::new(ms).ok_or(ConfigError::Zero(what)),
        };
        c.confirm_timeout_ms = ms(
            r.confirm_timeout_ms,
            c.confirm_timeout_ms,
            "confirm_timeout",
        )?;
        c.connect_timeout_ms = ms(
            r.conn.connect_timeout_ms,
            c.connect_timeout_ms,
            "connect_timeout",
        )?;
        let nz = |v: Option<usize>, default, what| match v {
            None => Ok(default),
            Some(n) => NonZeroUsize::new(n).ok_or(ConfigError::Zero(what)),
        };
        c.max_message_bytes = nz(
            r.max_message_bytes,
            c.max_message_bytes,
            "max_message_bytes",
        )?;
        c.max_inflight = nz(r.max_inflight, c.max_inflight, "max_inflight")?;
        c.message = r.message;
        Ok(c)
    }
}

/// Why `name` cannot be an AMQP short string (an exchange or queue name): over 255 bytes,
/// or with control characters.
pub(crate) fn short_string(name: &str) -> Result<(), &'static str> {
    if name.len() > MAX_SHORT_STRING {
        return Err("longer than 255 bytes");
    }
    if name.chars().any(char::is_control) {
        return Err("contains control characters");
    }
    Ok(())
}

impl AmqpConfig {
    /// The defaults for publishing to `exchange` on the broker at `url`
    /// (`amqp://user:pass@host:port/vhost`; the vhost is percent-encoded, `%2f` is `/`).
    ///
    /// # Errors
    /// A bad URL; `amqp://` (no TLS) to a host that is not loopback
    /// ([`ConfigError::Insecure`], see [`new_allow_insecure`](Self::new_allow_insecure)); an
    /// exchange name over 255 bytes or with control characters.
    pub fn new(url: &str, exchange: &str) -> Result<Self, ConfigError> {
        Self::create(url, exchange, false)
    }

    /// As [`new`](Self::new), but accepts `amqp://` to a host that is not loopback, sending
    /// the login in the clear (the `allow_insecure` key). A warning is logged when that
    /// happens.
    pub fn new_allow_insecure(url: &str, exchange: &str) -> Result<Self, ConfigError> {
        Self::create(url, exchange, true)
    }

    fn create(url: &str, exchange: &str, allow_insecure: bool) -> Result<Self, ConfigError> {
        let url = BrokerUrl::checked(url, allow_insecure, "amqp sink")?;
        short_string(exchange).map_err(ConfigError::Exchange)?;
        Ok(AmqpConfig {
            url,
            exchange: exchange.to_owned(),
            exchange_type: ExchangeType::default(),
            declare_exchange: false,
            routing_key: key_template(DEFAULT_ROUTING_KEY_TEMPLATE)?,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            confirm_timeout_ms: DEFAULT_CONFIRM_TIMEOUT_MS,
            max_inflight: DEFAULT_MAX_INFLIGHT,
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            allow_insecure,
            message: MessageOptions::new(),
        })
    }

    /// Set every message option at once, as the sink file's keys do:
    /// - `format`/`cloudevents_type`: CloudEvents (binary or structured) instead of Message
    ///   v1, the default; CloudEvents travel inline (no claim check).
    /// - `[signing]`: Standard Webhooks signing over the exact Message v1 bytes
    ///   (`webhook-id`, `webhook-timestamp`, `webhook-signature` as message headers); consumers check
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

    /// Set the exchange type (default topic); used when declaring and in descriptions.
    pub fn with_exchange_type(mut self, exchange_type: ExchangeType) -> Self {
        self.exchange_type = exchange_type;
        self
    }

    /// Declare the exchange (durable) on every channel open instead of the default passive
    /// check that it exists.
    ///
    /// # Errors
    /// [`ConfigError::DeclareDefaultExchange`] for the default exchange `""`.
    pub fn with_declare_exchange(mut self, declare: bool) -> Result<Self, ConfigError> {
        if declare && self.exchange.is_empty() {
            return Err(ConfigError::DeclareDefaultExchange);
        }
        self.declare_exchange = declare;
        Ok(self)
    }

    /// Use the same routing key for every hook, taken as it is (braces are text).
    ///
    /// # Errors
    /// A key over 255 bytes or with control characters.
    pub fn with_routing_key(mut self, key: &str) -> Result<Self, ConfigError> {
        self.routing_key = fixed_key(key)?;
        Ok(self)
    }

    /// Compute the routing key per hook (default `ankusa.{source_id}`): literal text and
    /// the placeholders `{id}`, `{source_id}`, `{tenant_id}` (`default` when the hook has
    /// no tenant) and `{dedupe_key}`; `{{` and `}}` are literal braces.
    ///
    /// # Errors
    /// A template that does not parse, or whose literal text is over 255 bytes or holds
    /// control characters.
    pub fn with_routing_key_template(mut self, template: &str) -> Result<Self, ConfigError> {
        self.routing_key = key_template(template)?;
        Ok(self)
    }

    /// Messages larger than this fail permanently and are not sent (default 128 MiB).
    pub fn with_max_message_bytes(mut self, n: NonZeroUsize) -> Self {
        self.max_message_bytes = n;
        self
    }

    /// How long a publish waits for its confirm (default 5 s; rounded down to whole ms,
    /// at least 1).
    pub fn with_confirm_timeout(mut self, timeout: Duration) -> Self {
        self.confirm_timeout_ms = timeout_ms(timeout);
        self
    }

    /// Publishes awaiting a confirm at once (default 256).
    pub fn with_max_inflight(mut self, n: NonZeroUsize) -> Self {
        self.max_inflight = n;
        self
    }

    /// The bound on opening the connection and channel (default 5 s; rounded down to whole
    /// ms, at least 1).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout_ms = timeout_ms(timeout);
        self
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
    pub fn routing_key(&self) -> &KeyTemplate {
        &self.routing_key
    }
    /// The largest encoded message sent; larger ones fail permanently, unsent.
    pub fn max_message_bytes(&self) -> NonZeroUsize {
        self.max_message_bytes
    }
    /// The publisher-confirm wait per publish.
    pub fn confirm_timeout(&self) -> Duration {
        Duration::from_millis(self.confirm_timeout_ms.get())
    }
    /// Publishes awaiting a confirm at once.
    pub fn max_inflight(&self) -> NonZeroUsize {
        self.max_inflight
    }
    /// The bound on opening the connection and channel.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms.get())
    }
    /// The broker URL without credentials: `amqp://host:port/<vhost>`.
    pub fn redacted_url(&self) -> String {
        self.url.redacted()
    }
    /// Whether `amqp://` to a host that is not loopback is accepted.
    pub fn allow_insecure(&self) -> bool {
        self.allow_insecure
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_message::template::Placeholder;
    use ankusa_sink_core::Envelope;
    use ankusa_sink_testkit::support::LogCapture;

    const URL: &str = "amqp://user:s3cr3t@127.0.0.1:5672/%2f";

    fn config(url: &str) -> Result<AmqpConfig, ConfigError> {
        AmqpConfig::new(url, "ex")
    }

    fn nz(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).unwrap()
    }

    fn from_json(v: serde_json::Value) -> Result<AmqpConfig, serde_json::Error> {
        serde_json::from_value(v)
    }

    #[test]
    fn defaults() {
        let c = config(URL).unwrap();
        assert_eq!(c.exchange_type(), ExchangeType::Topic);
        assert!(!c.declare_exchange());
        assert_eq!(c.routing_key().as_str(), "ankusa.{source_id}");
        assert_eq!(c.routing_key().absent_tenant(), AbsentTenant::Default);
        assert_eq!(c.message().inline_max_bytes().get(), 65_536);
        assert_eq!(c.max_message_bytes(), DEFAULT_MAX_MESSAGE_BYTES);
        assert_eq!(c.confirm_timeout(), Duration::from_secs(5));
        assert_eq!(c.connect_timeout(), Duration::from_secs(5));
        assert_eq!(c.max_inflight().get(), 4096);
        assert_eq!(c.url.vhost(), "/");
        assert_eq!(c.url.host(), "127.0.0.1");
        assert_eq!(c.redacted_url(), "amqp://127.0.0.1:5672/%2F");
        let json = from_json(serde_json::json!({"url": URL, "exchange": "ex"})).unwrap();
        assert_eq!(json, c);
    }

    #[test]
    fn url_rules_and_no_secret_in_errors_or_debug() {
        let c = AmqpConfig::new("amqps://u:s3cr3t@broker.example/prod", "ex").unwrap();
        assert_eq!(c.url.host_port, "broker.example:5671");
        assert_eq!(c.url.vhost(), "prod");
        assert!(!format!("{c:?}").contains("s3cr3t"));
        for bad in [
            "http://u:s3cr3t@h/",
            "amqp://u:s3cr3t@/x",
            "not a url s3cr3t",
            "amqp://u:s3cr3t@h/v#frag",
        ] {
            let err = config(bad).unwrap_err();
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
            let err = config(url).unwrap_err();
            assert_eq!(err, ConfigError::Insecure, "{url}");
            assert!(!err.to_string().contains("s3cr3t"), "{err}");
            assert!(err.to_string().contains("allow_insecure"), "{err}");
            let mut c = None;
            let lines = logged(|| {
                c = Some(AmqpConfig::new_allow_insecure(url, "ex").unwrap());
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
                config(url).unwrap();
            });
            assert!(lines.is_empty(), "{url}: {lines:?}");
        }
        let c = from_json(serde_json::json!({
            "url": "amqp://u:p@broker.example", "exchange": "ex", "allow_insecure": true
        }))
        .unwrap();
        assert!(c.allow_insecure());
        let err = from_json(serde_json::json!({
            "url": "amqp://u:s3cr3t@broker.example", "exchange": "ex"
        }))
        .unwrap_err();
        assert!(err.to_string().contains("allow_insecure"), "{err}");
        assert!(!err.to_string().contains("s3cr3t"), "{err}");
    }

    fn topic(key: &KeyTemplate, env: &Envelope) -> Option<(Placeholder, char)> {
        key.inserted_char(env, |c| matches!(c, '.' | '*' | '#'))
    }

    #[test]
    fn topic_routing_characters_in_inserted_values_are_found() {
        let t = key_template("ankusa.{tenant_id}.{source_id}.{dedupe_key}").unwrap();
        let env = |source: &str, dedupe: &str| {
            Envelope::builder("h.1", source, "")
                .tenant_id("acme")
                .dedupe_key(dedupe)
                .build()
                .unwrap()
        };
        assert_eq!(topic(&t, &env("stripe", "evt_1")), None);
        assert_eq!(
            topic(&t, &env("stripe", "evt.1")),
            Some((Placeholder::DedupeKey, '.'))
        );
        assert_eq!(
            topic(&t, &env("stripe", "#")),
            Some((Placeholder::DedupeKey, '#'))
        );
        assert_eq!(
            topic(&t, &env("a*b", "evt_1")),
            Some((Placeholder::SourceId, '*'))
        );
        // {id} is not in this template: its '.' does not matter.
        assert_eq!(topic(&t, &env("stripe", "")), None);
        let by_id = key_template("x.{id}").unwrap();
        assert_eq!(topic(&by_id, &env("s", "")), Some((Placeholder::Id, '.')));
        // Literal dots of the template itself are the operator's and fine.
        assert_eq!(topic(&fixed_key("a.*.#").unwrap(), &env("s.x", "")), None);
        // No tenant: "default" (reserved by core), unchanged.
        let no_tenant = Envelope::builder("h1", "s", "").build().unwrap();
        let t = key_template("x.{tenant_id}").unwrap();
        assert_eq!(topic(&t, &no_tenant), None);
        assert_eq!(t.render(&no_tenant), "x.default");
    }

    #[test]
    fn routing_key_templates() {
        let env = Envelope::builder("h1", "stripe", "")
            .tenant_id("acme")
            .build()
            .unwrap();
        let t = key_template("x.{tenant_id}.{source_id}.{id}.{{lit}}").unwrap();
        assert_eq!(t.render(&env), "x.acme.stripe.h1.{lit}");
        assert!(!t.is_static());
        assert_eq!(t.render_for("s", Some("t")), None);
        let t = key_template("x.{tenant_id}").unwrap();
        assert_eq!(t.render_for("s", None), None);
        assert_eq!(t.render_for("s", Some("t")).as_deref(), Some("x.t"));
        let no_tenant = Envelope::builder("h1", "s", "").build().unwrap();
        assert_eq!(t.render(&no_tenant), "x.default");
        assert!(key_template("x.{nope}").is_err());
        assert!(key_template("x.{id").is_err());
        assert!(key_template("x.}").is_err());
        assert!(fixed_key(&"a".repeat(256)).is_err());
        assert!(fixed_key("k").unwrap().is_static());
        assert_eq!(fixed_key("a{b}").unwrap().render(&env), "a{b}");
        let c = config(URL).unwrap();
        assert_eq!(c.routing_key().render(&env), "ankusa.stripe");
        let c = c.with_routing_key_template("t.{tenant_id}").unwrap();
        assert_eq!(c.routing_key().render(&env), "t.acme");
        let c = c.with_routing_key("fixed.key").unwrap();
        assert_eq!(c.routing_key().render(&env), "fixed.key");
        assert!(matches!(
            c.with_routing_key_template("x.{nope}"),
            Err(ConfigError::RoutingKey(_))
        ));
    }

    #[test]
    fn invalid_values_are_errors() {
        let zero = |key: &str| {
            let mut v = serde_json::json!({"url": URL, "exchange": "ex"});
            v[key] = 0.into();
            from_json(v).unwrap_err().to_string()
        };
        for (key, name) in [
            ("max_inflight", "max_inflight"),
            ("inline_max_bytes", "inline_max_bytes"),
            ("max_message_bytes", "max_message_bytes"),
            ("confirm_timeout_ms", "confirm_timeout"),
            ("connect_timeout_ms", "connect_timeout"),
        ] {
            assert_eq!(zero(key), ConfigError::Zero(name).to_string(), "{key}");
        }
        let err = from_json(serde_json::json!({
            "url": URL, "exchange": "ex", "routing_key": "a", "routing_key_template": "b"
        }))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            ConfigError::RoutingKeyAndTemplate.to_string()
        );
        assert_eq!(
            AmqpConfig::new(URL, "")
                .unwrap()
                .with_declare_exchange(true)
                .unwrap_err(),
            ConfigError::DeclareDefaultExchange
        );
        assert_eq!(
            AmqpConfig::new(URL, &"x".repeat(256)).unwrap_err(),
            ConfigError::Exchange("longer than 255 bytes")
        );
        assert_eq!(
            AmqpConfig::new(URL, "a\nb").unwrap_err(),
            ConfigError::Exchange("contains control characters")
        );
        // Builders round a zero duration up to 1 ms: always valid.
        let c = config(URL).unwrap().with_confirm_timeout(Duration::ZERO);
        assert_eq!(c.confirm_timeout(), Duration::from_millis(1));
        assert!("nope".parse::<ExchangeType>().is_err());
    }

    #[test]
    fn serde_form_and_builders_agree() {
        let c = from_json(serde_json::json!({
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
        let built = config(URL)
            .unwrap()
            .with_exchange_type(ExchangeType::Direct)
            .with_declare_exchange(true)
            .unwrap()
            .with_routing_key("k")
            .unwrap()
            .with_message(MessageOptions::new().with_inline_max_bytes(nz(10)))
            .with_max_message_bytes(nz(100))
            .with_confirm_timeout(Duration::from_millis(250))
            .with_max_inflight(nz(8))
            .with_connect_timeout(Duration::from_millis(300));
        assert_eq!(built, c);
        let err = from_json(serde_json::json!({
            "url": "amqp://u:s3cr3t@127.0.0.1/", "exchange": "ex", "max_inflight": 0
        }))
        .unwrap_err();
        assert!(err.to_string().contains("max_inflight"), "{err}");
        assert!(!err.to_string().contains("s3cr3t"));
        assert!(
            from_json(serde_json::json!({
                "url": URL, "exchange": "ex", "bogus": 1
            }))
            .is_err()
        );
    }
}

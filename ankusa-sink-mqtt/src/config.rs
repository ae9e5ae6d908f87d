//! The sink file's keys (`Repr`), validated once into an always-valid [`MqttConfig`].

use ankusa_message::MessageOptions;
use ankusa_message::template::{AbsentTenant, KeyTemplate, TemplateError};
use ankusa_sink_core::Secret;
use ankusa_sink_kit::{is_loopback_host, timeout_ms};
use serde::Deserialize;
use serde::de::IgnoredAny;
use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default wait for the PUBACK of each publish: 5 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default wait for a connection (TCP, TLS, `CONNECT`/`CONNACK`): 5 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest topic name MQTT can carry (a two-byte length prefix).
pub const MAX_TOPIC_BYTES: usize = 65_535;

/// The operator's keys, exactly as written in a sink file (`type` already removed).
#[derive(Deserialize)]
struct Repr {
    url: String,
    topic: Option<String>,
    topic_template: Option<String>,
    username: Option<String>,
    password: Option<Secret>,
    client_id: Option<String>,
    qos: Option<u8>,
    retain: Option<bool>,
    durable: Option<bool>,
    no_subscriber: Option<NoSubscriber>,
    tls_ca_file: Option<PathBuf>,
    timeout_ms: Option<NonZeroU64>,
    connect_timeout_ms: Option<NonZeroU64>,
    allow_insecure: Option<bool>,
    topic_values_may_add_levels: Option<bool>,
    /// `format`, `cloudevents_type`, `[signing]`, `inline_max_bytes`.
    #[serde(flatten)]
    message: MessageOptions,
    /// Whatever no option took: refused (`flatten` cannot deny unknown fields itself).
    #[serde(flatten)]
    unknown: BTreeMap<String, IgnoredAny>,
}

/// What a PUBACK with reason "No matching subscribers" (0x10) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum NoSubscriber {
    /// `Class::Config` (the default): nobody subscribes to the topic, the operator's to fix.
    #[default]
    Config,
    /// `Class::Transient`: a subscriber is expected back; the retry policy decides.
    Transient,
    /// `Ok`: the operator publishes whether anyone listens (a retained topic, a bridge
    /// that subscribes later).
    Ok,
}

/// A valid MQTT sink configuration.
///
/// Built from a sink file (`type = "mqtt"`, through serde) or with [`MqttConfig::new`] /
/// [`MqttConfig::with_template`] and the `with_*` builders; both refuse what the sink could
/// never use. `Debug` never prints the password.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Repr")]
#[non_exhaustive]
pub struct MqttConfig {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) tls: bool,
    pub(crate) topic: KeyTemplate,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<Secret>,
    pub(crate) client_id: Option<String>,
    pub(crate) retain: bool,
    pub(crate) durable: bool,
    pub(crate) no_subscriber: NoSubscriber,
    pub(crate) tls_ca_file: Option<PathBuf>,
    pub(crate) timeout_ms: NonZeroU64,
    pub(crate) connect_timeout_ms: NonZeroU64,
    pub(crate) allow_insecure: bool,
    pub(crate) topic_values_may_add_levels: bool,
    pub(crate) message: MessageOptions,
}

impl fmt::Debug for MqttConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MqttConfig")
            .field("url", &self.url())
            .field("topic", &self.topic.as_str())
            .field("username", &self.username)
            .field("password", &self.password)
            .field("client_id", &self.client_id)
            .field("retain", &self.retain)
            .field("durable", &self.durable)
            .field("no_subscriber", &self.no_subscriber)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("timeout_ms", &self.timeout_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("allow_insecure", &self.allow_insecure)
            .field(
                "topic_values_may_add_levels",
                &self.topic_values_may_add_levels,
            )
            .field("message", &self.message)
            .finish()
    }
}

/// Why a configuration was refused: names the option, never a secret value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The URL is not an `mqtt://` or `mqtts://` URL with a host (the URL is not printed).
    #[error("url: {0}")]
    Url(&'static str),
    /// Neither `topic` nor `topic_template`, or both.
    #[error("exactly one of topic and topic_template is required")]
    Topic,
    /// A topic the broker would refuse for a publish.
    #[error("{key}: {reason}")]
    BadTopic {
        /// `topic` or `topic_template`.
        key: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `topic_template` does not parse.
    #[error("topic_template: {0}")]
    Template(#[from] TemplateError),
    /// `username` without `password` or the other way round.
    #[error("username and password go together")]
    UsernamePassword,
    /// A QoS other than 1.
    #[error("qos: only 1 is supported (at least once, acknowledged by a PUBACK)")]
    Qos,
    /// `tls_ca_file` with an `mqtt://` URL.
    #[error("tls_ca_file needs an mqtts:// URL")]
    CaWithoutTls,
    /// An empty `client_id`, or one over 65,535 bytes.
    #[error("client_id must be 1 to 65535 bytes")]
    ClientId,
    /// A key the sink does not know.
    #[error("unknown field `{0}`")]
    UnknownField(String),
    /// `username`/`password` over `mqtt://` to a host that is not loopback: the login would
    /// cross the network unencrypted.
    #[error(
        "username: mqtt:// sends the user name and password unencrypted to a host that is \
         not loopback; use mqtts://, or set allow_insecure = true to accept that"
    )]
    Insecure,
}

impl TryFrom<Repr> for MqttConfig {
    type Error = ConfigError;

    fn try_from(r: Repr) -> Result<Self, ConfigError> {
        if let Some(k) = r.unknown.keys().next() {
            return Err(ConfigError::UnknownField(k.clone()));
        }
        let topic = match (r.topic, r.topic_template) {
            (Some(t), None) => literal_topic(&t)?,
            (None, Some(t)) => template_topic(&t)?,
            _ => return Err(ConfigError::Topic),
        };
        if r.qos.is_some_and(|q| q != 1) {
            return Err(ConfigError::Qos);
        }
        let mut c = MqttConfig::create(&r.url, topic)?;
        c.username = r.username;
        c.password = r.password;
        c.client_id = r.client_id;
        c.retain = r.retain.unwrap_or(false);
        c.durable = r.durable.unwrap_or(false);
        c.no_subscriber = r.no_subscriber.unwrap_or_default();
        c.tls_ca_file = r.tls_ca_file;
        c.timeout_ms = r.timeout_ms.unwrap_or(c.timeout_ms);
        c.connect_timeout_ms = r.connect_timeout_ms.unwrap_or(c.connect_timeout_ms);
        c.allow_insecure = r.allow_insecure.unwrap_or(false);
        c.topic_values_may_add_levels = r.topic_values_may_add_levels.unwrap_or(false);
        c.message = r.message;
        c.validate()?;
        Ok(c)
    }
}

/// `(host, port, tls)` of an `mqtt://` or `mqtts://` URL with a host and nothing else.
fn parse_url(raw: &str) -> Result<(String, u16, bool), ConfigError> {
    let url = url::Url::parse(raw).map_err(|_| ConfigError::Url("not a URL"))?;
    let (tls, default_port) = match url.scheme() {
        "mqtt" => (false, 1883),
        "mqtts" => (true, 8883),
        _ => return Err(ConfigError::Url("the scheme must be mqtt:// or mqtts://")),
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ConfigError::Url(
            "credentials go in the username and password keys, not in the URL",
        ));
    }
    if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
        return Err(ConfigError::Url("no path, query or fragment"));
    }
    let host = match url.host() {
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        Some(host) => host.to_string(),
        None => return Err(ConfigError::Url("no host")),
    };
    if host.is_empty() {
        return Err(ConfigError::Url("no host"));
    }
    Ok((host, url.port().unwrap_or(default_port), tls))
}

fn literal_topic(topic: &str) -> Result<KeyTemplate, ConfigError> {
    if let Some(reason) = topic_problem(topic) {
        return Err(ConfigError::BadTopic {
            key: "topic",
            reason,
        });
    }
    Ok(KeyTemplate::literal(topic, AbsentTenant::Default))
}

fn template_topic(template: &str) -> Result<KeyTemplate, ConfigError> {
    let t = KeyTemplate::parse(template, AbsentTenant::Default)?;
    let bad = |reason| ConfigError::BadTopic {
        key: "topic_template",
        reason,
    };
    if t.literal_text().chars().any(refused_char) {
        return Err(bad("a wildcard (+ or #) or NUL cannot be published to"));
    }
    // A literal `$` start would make every rendered topic one the sink refuses.
    if template.starts_with('$') {
        return Err(bad(DOLLAR));
    }
    if t.is_static()
        && let Some(reason) = topic_problem(&t.literal_text())
    {
        return Err(bad(reason));
    }
    Ok(t)
}

const DOLLAR: &str = "it starts with `$` (the broker's own topics: $SYS, ...)";

/// A character no topic name a client publishes to may hold: the wildcards and NUL.
pub(crate) fn refused_char(c: char) -> bool {
    matches!(c, '+' | '#' | '\0')
}

/// What makes `topic` unusable for a publish, if anything: empty, starting with `$`, a
/// wildcard or NUL, over 65,535 bytes.
pub(crate) fn topic_problem(topic: &str) -> Option<&'static str> {
    if topic.is_empty() {
        return Some("empty");
    }
    // `$SYS/...` and other `$` topics are the broker's own: a hook whose value starts a
    // topic template must not be able to write there.
    if topic.starts_with('$') {
        return Some(DOLLAR);
    }
    if topic.chars().any(refused_char) {
        return Some("a wildcard (+ or #) or NUL cannot be published to");
    }
    if topic.len() > MAX_TOPIC_BYTES {
        return Some("longer than 65535 bytes");
    }
    None
}

impl MqttConfig {
    /// Publish every hook to the fixed `topic` (`+`, `#` and braces are refused or taken
    /// as text: it is not a template) on the broker at `url`, with the defaults.
    ///
    /// # Errors
    /// A URL that is not `mqtt://host[:port]` or `mqtts://host[:port]`; a topic no publish
    /// may use (empty, starting with `$`, a wildcard, NUL, over 65,535 bytes).
    pub fn new(url: &str, topic: &str) -> Result<Self, ConfigError> {
        Self::create(url, literal_topic(topic)?)
    }

    /// Publish every hook to the topic `template` renders (`hooks/{tenant_id}/{source_id}`;
    /// a hook without a tenant renders `default`), with the defaults.
    ///
    /// # Errors
    /// As [`new`](Self::new), and a template that does not parse.
    pub fn with_template(url: &str, template: &str) -> Result<Self, ConfigError> {
        Self::create(url, template_topic(template)?)
    }

    fn create(url: &str, topic: KeyTemplate) -> Result<Self, ConfigError> {
        let (host, port, tls) = parse_url(url)?;
        Ok(MqttConfig {
            host,
            port,
            tls,
            topic,
            username: None,
            password: None,
            client_id: None,
            retain: false,
            durable: false,
            no_subscriber: NoSubscriber::default(),
            tls_ca_file: None,
            timeout_ms: timeout_ms(DEFAULT_TIMEOUT),
            connect_timeout_ms: timeout_ms(DEFAULT_CONNECT_TIMEOUT),
            allow_insecure: false,
            topic_values_may_add_levels: false,
            message: MessageOptions::new(),
        })
    }

    /// `self` if it is valid, else the first refusal: every fallible builder ends here.
    fn checked(self) -> Result<Self, ConfigError> {
        self.validate()?;
        Ok(self)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.username.is_some() != self.password.is_some() {
            return Err(ConfigError::UsernamePassword);
        }
        if self.tls_ca_file.is_some() && !self.tls {
            return Err(ConfigError::CaWithoutTls);
        }
        if self.username.is_some()
            && !self.tls
            && !is_loopback_host(&self.host)
            && !self.allow_insecure
        {
            return Err(ConfigError::Insecure);
        }
        if let Some(id) = &self.client_id
            && (id.is_empty() || id.len() > MAX_TOPIC_BYTES)
        {
            return Err(ConfigError::ClientId);
        }
        Ok(())
    }

    /// Log in with `username` and `password` (MQTT `CONNECT`).
    ///
    /// # Errors
    /// [`ConfigError::Insecure`] over `mqtt://` to a host that is not loopback, unless
    /// [`with_allow_insecure`](Self::with_allow_insecure) said so first.
    pub fn with_credentials(
        mut self,
        username: impl Into<String>,
        password: Secret,
    ) -> Result<Self, ConfigError> {
        self.username = Some(username.into());
        self.password = Some(password);
        self.checked()
    }

    /// Accept sending the login over `mqtt://` to a host that is not loopback (the
    /// `allow_insecure` key; default `false`: such a config is refused).
    ///
    /// # Errors
    /// [`ConfigError::Insecure`] for `false` when the config already holds such a login.
    pub fn with_allow_insecure(mut self, allow: bool) -> Result<Self, ConfigError> {
        self.allow_insecure = allow;
        self.checked()
    }

    /// Let a value the topic template inserts hold `/` and so add topic levels (the
    /// `topic_values_may_add_levels` key; default `false`: such a hook fails permanent,
    /// nothing sent, so a hook's value cannot move it past a subscriber's `+`).
    pub fn with_topic_values_may_add_levels(mut self, allow: bool) -> Self {
        self.topic_values_may_add_levels = allow;
        self
    }

    /// Whether a value the topic template inserts may hold `/`.
    pub fn topic_values_may_add_levels(&self) -> bool {
        self.topic_values_may_add_levels
    }

    /// Whether a cleartext login to a remote host was accepted (`allow_insecure`).
    pub fn allow_insecure(&self) -> bool {
        self.allow_insecure
    }

    /// Connect as `client_id` (default: `ankusa-` and a fresh ULID per sink, so that two
    /// sinks never take over each other's session).
    ///
    /// # Errors
    /// [`ConfigError::ClientId`] for an empty id or one over 65,535 bytes.
    pub fn with_client_id(mut self, client_id: impl Into<String>) -> Result<Self, ConfigError> {
        self.client_id = Some(client_id.into());
        self.checked()
    }

    /// Publish with the retain flag: the broker keeps the last message of each topic for
    /// subscribers that come later.
    pub fn with_retain(mut self, retain: bool) -> Self {
        self.retain = retain;
        self
    }

    /// Declare that the broker persists every message before its PUBACK: then
    /// [`Capabilities::durable`](ankusa_sink_core::Capabilities::durable) is `true`. Mosquitto persists only
    /// periodically (`autosave_interval`): leave it `false` there.
    pub fn with_durable(mut self, durable: bool) -> Self {
        self.durable = durable;
        self
    }

    /// The class of a PUBACK "No matching subscribers" (0x10).
    pub fn with_no_subscriber(mut self, class: NoSubscriber) -> Self {
        self.no_subscriber = class;
        self
    }

    /// Trust the CA certificates of this PEM file instead of the system's roots
    /// (`mqtts://`).
    ///
    /// # Errors
    /// [`ConfigError::CaWithoutTls`] for an `mqtt://` URL.
    pub fn with_tls_ca_file(mut self, path: impl Into<PathBuf>) -> Result<Self, ConfigError> {
        self.tls_ca_file = Some(path.into());
        self.checked()
    }

    /// Set the wait for each PUBACK (rounded down to whole ms, at least 1).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout_ms = timeout_ms(timeout);
        self
    }

    /// Set the wait for a connection (rounded down to whole ms, at least 1).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout_ms = timeout_ms(timeout);
        self
    }

    /// The URL without credentials: `mqtt://host:port` or `mqtts://host:port`.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "mqtts" } else { "mqtt" };
        if self.host.contains(':') {
            format!("{scheme}://[{}]:{}", self.host, self.port)
        } else {
            format!("{scheme}://{}:{}", self.host, self.port)
        }
    }

    /// The topic (or topic template) as written.
    pub fn topic(&self) -> &str {
        self.topic.as_str()
    }

    /// Whether the URL is `mqtts://`.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// Set every message option at once, as the sink file's keys do:
    /// - `format`/`cloudevents_type`: CloudEvents (binary or structured) instead of Message
    ///   v1, the default; CloudEvents travel inline (no claim check).
    /// - `[signing]`: Standard Webhooks signing over the exact body bytes (`webhook-id`,
    ///   `webhook-timestamp`, `webhook-signature` user properties); consumers check it with
    ///   `ankusa_message::verify`.
    /// - `inline_max_bytes` (default 64 KiB): bodies over it travel by `ctx.claim`.
    pub fn with_message(mut self, message: MessageOptions) -> Self {
        self.message = message;
        self
    }

    /// The message options.
    pub fn message(&self) -> &MessageOptions {
        &self.message
    }

    /// The class of a PUBACK "No matching subscribers".
    pub fn no_subscriber(&self) -> NoSubscriber {
        self.no_subscriber
    }

    /// The CA file for `mqtts://`, if any.
    pub fn tls_ca_file(&self) -> Option<&Path> {
        self.tls_ca_file.as_deref()
    }

    /// The wait for each PUBACK.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.get())
    }

    /// The wait for a connection.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: serde_json::Value) -> Result<MqttConfig, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_keys() {
        let c = parse(serde_json::json!({
            "url": "mqtt://127.0.0.1", "topic_template": "hooks/{tenant_id}/{source_id}"
        }))
        .unwrap();
        assert_eq!(c.url(), "mqtt://127.0.0.1:1883");
        assert_eq!(c.timeout(), DEFAULT_TIMEOUT);
        assert_eq!(c.connect_timeout(), DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(
            c.message.inline_max_bytes(),
            ankusa_message::DEFAULT_INLINE_MAX_BYTES
        );
        assert_eq!(c.no_subscriber(), NoSubscriber::Config);
        assert!(!c.retain && !c.durable && !c.is_tls());
        let c = parse(serde_json::json!({
            "url": "mqtts://broker.example:8884", "topic": "hooks", "qos": 1, "retain": true,
            "durable": true, "no_subscriber": "ok", "username": "u", "password": "p",
            "client_id": "ankusa-1", "tls_ca_file": "/ca.pem", "timeout_ms": 100,
            "connect_timeout_ms": 200, "inline_max_bytes": 1000, "format": "cloudevents",
            "cloudevents_type": "t.x"
        }))
        .unwrap();
        assert_eq!(c.url(), "mqtts://broker.example:8884");
        assert!(c.retain && c.durable && c.is_tls());
        assert_eq!(c.no_subscriber(), NoSubscriber::Ok);
        assert_eq!(c.timeout(), Duration::from_millis(100));
        assert_eq!(c.message().cloudevents().unwrap().event_type(), "t.x");
        let c = parse(serde_json::json!({"url": "mqtt://[::1]:1884", "topic": "t"})).unwrap();
        assert_eq!(c.url(), "mqtt://[::1]:1884");
        let c = parse(
            serde_json::json!({"url": "mqtt://h", "topic": "t", "no_subscriber": "transient"}),
        )
        .unwrap();
        assert_eq!(c.no_subscriber(), NoSubscriber::Transient);
    }

    #[test]
    fn a_topic_is_literal_and_a_template_renders() {
        let c = MqttConfig::new("mqtt://h", "a/{b}").unwrap();
        assert!(c.topic.is_static());
        assert_eq!(c.topic.render_for("s", None).as_deref(), Some("a/{b}"));
        let c = MqttConfig::with_template("mqtt://h", "hooks/{tenant_id}/{source_id}").unwrap();
        assert_eq!(
            c.topic.render_for("stripe", None).as_deref(),
            None,
            "the tenant is not known"
        );
        let e = ankusa_sink_core::Envelope::builder("h1", "stripe", "{}")
            .build()
            .unwrap();
        assert_eq!(c.topic.render(&e), "hooks/default/stripe");
    }

    #[test]
    fn refusals_name_the_key_never_the_value() {
        // One key refused over a config that is valid without it; then whole configs.
        let over_base = [
            ("topic_template", serde_json::json!("t"), "exactly one"),
            ("qos", serde_json::json!(0), "qos"),
            ("qos", serde_json::json!(2), "qos"),
            ("username", serde_json::json!("u"), "username"),
            ("password", serde_json::json!("s3cret"), "username"),
            ("tls_ca_file", serde_json::json!("/x"), "tls_ca_file"),
            ("client_id", serde_json::json!(""), "client_id"),
            (
                "no_subscriber",
                serde_json::json!("maybe"),
                "expected one of `config`, `transient`, `ok`",
            ),
            ("bogus", serde_json::json!(1), "bogus"),
        ]
        .map(|(key, value, want)| {
            let mut v = serde_json::json!({"url": "mqtt://h", "topic": "t"});
            v[key] = value;
            (v, want)
        });
        for (v, want) in [
            (serde_json::json!({"url": "http://h", "topic": "t"}), "url"),
            (serde_json::json!({"url": "mqtt://u:s3cret@h", "topic": "t"}), "url"),
            (serde_json::json!({"url": "mqtt://h/path", "topic": "t"}), "url"),
            (serde_json::json!({"url": "mqtt://h"}), "exactly one"),
            (serde_json::json!({"url": "mqtt://h", "topic": ""}), "topic: empty"),
            (serde_json::json!({"url": "mqtt://h", "topic": "a/+/b"}), "wildcard"),
            (serde_json::json!({"url": "mqtt://h", "topic": "a/#"}), "wildcard"),
            (serde_json::json!({"url": "mqtt://h", "topic": "$SYS/x"}), "$"),
            (serde_json::json!({"url": "mqtt://h", "topic_template": "a/+/{id}"}), "topic_template"),
            (serde_json::json!({"url": "mqtt://h", "topic_template": "${source_id}"}), "topic_template"),
            (serde_json::json!({"url": "mqtt://h", "topic_template": "{nope}"}), "topic_template"),
            (serde_json::json!({"url": "mqtt://h", "topic": "t", "format": "cloudevents", "cloudevents_type": "a b"}), "cloudevents_type"),
        ]
        .into_iter()
        .chain(over_base)
        {
            let e = parse(v.clone()).unwrap_err();
            assert!(e.contains(want), "{v}: {e}");
            assert!(!e.contains("s3cret"), "{e}");
        }
    }

    #[test]
    fn a_cleartext_login_to_a_remote_host_needs_allow_insecure() {
        let login = |url: &str, allow: Option<bool>| {
            let mut v = serde_json::json!({
                "url": url, "topic": "t", "username": "u", "password": "s3cret"
            });
            if let Some(a) = allow {
                v["allow_insecure"] = a.into();
            }
            parse(v)
        };
        let e = login("mqtt://broker.example", None).unwrap_err();
        assert!(
            e.starts_with("username:") && e.contains("allow_insecure"),
            "{e}"
        );
        assert!(!e.contains("s3cret"), "{e}");
        assert!(login("mqtt://broker.example", Some(false)).is_err());
        assert!(
            login("mqtt://broker.example", Some(true))
                .unwrap()
                .allow_insecure()
        );
        for url in [
            "mqtts://broker.example",
            "mqtt://127.0.0.1",
            "mqtt://localhost",
            "mqtt://[::1]",
        ] {
            assert!(login(url, None).is_ok(), "{url}");
        }
        // The builder holds the same rule, in either order.
        let remote = MqttConfig::new("mqtt://broker.example", "t").unwrap();
        assert_eq!(
            remote
                .clone()
                .with_credentials("u", Secret::new("p"))
                .unwrap_err(),
            ConfigError::Insecure
        );
        assert!(
            remote
                .with_allow_insecure(true)
                .unwrap()
                .with_credentials("u", Secret::new("p"))
                .unwrap()
                .with_allow_insecure(false)
                .is_err()
        );
    }

    #[test]
    fn builders_recheck() {
        let c = MqttConfig::new("mqtt://127.0.0.1", "t").unwrap();
        assert!(c.clone().with_tls_ca_file("/ca.pem").is_err());
        assert!(c.clone().with_client_id("").is_err());
        assert!(MqttConfig::new("mqtt://h", "#").is_err());
        assert!(MqttConfig::with_template("mqtt://h", "$x/{id}").is_err());
        let tls = MqttConfig::new("mqtts://127.0.0.1", "t").unwrap();
        assert_eq!(tls.url(), "mqtts://127.0.0.1:8883");
        assert!(tls.with_tls_ca_file("/ca.pem").is_ok());
    }

    #[test]
    fn debug_shows_no_secret() {
        let c = MqttConfig::new("mqtt://127.0.0.1:1883", "t")
            .unwrap()
            .with_credentials("user", Secret::new("pa55w0rd-mqtt"))
            .unwrap();
        let d = format!("{c:?}");
        assert!(!d.contains("pa55w0rd-mqtt"), "{d}");
        assert!(d.contains("REDACTED"), "{d}");
    }
}

//! The sink file's keys (`Repr`), validated once into an always-valid [`RedisConfig`].

use ankusa_message::MessageOptions;
use ankusa_message::cloudevents::{CloudEvents, Mode};
use ankusa_message::template::{AbsentTenant, KeyTemplate, TemplateError};
use ankusa_sink_core::Secret;
use ankusa_sink_kit::{is_loopback_host, redact_url, timeout_ms};
use serde::Deserialize;
use serde::de::IgnoredAny;
use std::collections::BTreeMap;
use std::fmt;
use std::num::{NonZeroU64, NonZeroUsize};
use std::path::PathBuf;
use std::time::Duration;

/// Default wait for a connection and for each reply: 5 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Default largest Message v1 sent: 512 MiB, Redis's default `proto-max-bulk-len`.
pub const DEFAULT_MAX_MESSAGE_BYTES: NonZeroUsize = NonZeroUsize::new(512 * 1024 * 1024).unwrap();

/// The operator's keys, exactly as written in a sink file (`type` already removed).
#[derive(Deserialize)]
struct Repr {
    url: String,
    username: Option<String>,
    password: Option<Secret>,
    stream: Option<String>,
    channel: Option<String>,
    maxlen: Option<NonZeroU64>,
    durable: Option<bool>,
    no_subscriber: Option<NoSubscriber>,
    tls_ca_file: Option<PathBuf>,
    timeout_ms: Option<NonZeroU64>,
    max_message_bytes: Option<NonZeroUsize>,
    allow_insecure: Option<bool>,
    /// `format`, `cloudevents_type`, `[signing]`, `inline_max_bytes`.
    #[serde(flatten)]
    message: MessageOptions,
    /// Whatever no option took: refused (`flatten` cannot deny unknown fields itself).
    #[serde(flatten)]
    unknown: BTreeMap<String, IgnoredAny>,
}

/// What a `PUBLISH` that reached no subscriber is: never a success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NoSubscriber {
    /// `Class::Config` (the default): nobody listens on the channel, the operator's to fix.
    #[default]
    Config,
    /// `Class::Transient`: a subscriber is expected back; the retry policy decides.
    Transient,
}

/// Where the hooks go.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Target {
    /// `XADD` to a stream (Redis creates a missing stream).
    Stream {
        /// The stream key (a template).
        key: KeyTemplate,
        /// `MAXLEN ~ N` on every `XADD`, when set.
        maxlen: Option<NonZeroU64>,
        /// The operator says the server persists every write (AOF with
        /// `appendfsync always`): [`Capabilities::durable`](ankusa_sink_core::Capabilities::durable) is `true`.
        durable: bool,
    },
    /// `PUBLISH` to a channel: never durable; zero receivers is a failure.
    Channel {
        /// The channel name (a template).
        channel: KeyTemplate,
        /// The class of a publish that reached nobody.
        no_subscriber: NoSubscriber,
    },
}

impl Target {
    /// The stream key or channel name template.
    pub fn key(&self) -> &KeyTemplate {
        match self {
            Target::Stream { key, .. } => key,
            Target::Channel { channel, .. } => channel,
        }
    }
}

/// A valid Redis sink configuration.
///
/// `Debug` prints the URL without its userinfo and never the password.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Repr")]
#[non_exhaustive]
pub struct RedisConfig {
    pub(crate) url: String,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<Secret>,
    pub(crate) target: Target,
    pub(crate) tls_ca_file: Option<PathBuf>,
    pub(crate) timeout_ms: NonZeroU64,
    pub(crate) max_message_bytes: NonZeroUsize,
    pub(crate) allow_insecure: bool,
    pub(crate) message: MessageOptions,
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact_url(&self.url))
            .field("username", &self.username.as_ref().map(|_| "REDACTED"))
            .field("password", &self.password)
            .field("target", &self.target)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("timeout_ms", &self.timeout_ms)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("allow_insecure", &self.allow_insecure)
            .field("message", &self.message)
            .finish()
    }
}

/// Why a configuration was refused: names the option, never a secret value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A key the sink does not know.
    #[error("unknown field `{0}`")]
    UnknownField(String),
    /// The URL is not a `redis://` or `rediss://` URL with a host (the URL is not printed).
    #[error("url: not a redis:// or rediss:// URL with a host")]
    Url,
    /// Neither or both of `stream` and `channel`.
    #[error("exactly one of stream and channel is required")]
    Target,
    /// A bad stream or channel template.
    #[error("{key}: {source}")]
    Template {
        /// `stream` or `channel`.
        key: &'static str,
        /// Why.
        source: TemplateError,
    },
    /// An option of the other mode (`maxlen` or `durable` with `channel`,
    /// `no_subscriber` with `stream`).
    #[error("{0} applies only to {1} mode")]
    WrongMode(&'static str, &'static str),
    /// `tls_ca_file` with a `redis://` URL.
    #[error("tls_ca_file needs a rediss:// URL")]
    CaWithoutTls,
    /// `username` without `password`.
    #[error("username needs a password")]
    UsernameWithoutPassword,
    /// A password (the `password` key or the URL's userinfo) over `redis://` to a host that
    /// is not loopback: the login would cross the network unencrypted.
    #[error(
        "password: redis:// sends the password unencrypted to a host that is not loopback; \
         use rediss://, or set allow_insecure = true to accept that"
    )]
    Insecure,
}

impl TryFrom<Repr> for RedisConfig {
    type Error = ConfigError;

    fn try_from(r: Repr) -> Result<Self, ConfigError> {
        if let Some(k) = r.unknown.keys().next() {
            return Err(ConfigError::UnknownField(k.clone()));
        }
        let target = match (r.stream, r.channel) {
            (Some(stream), None) => {
                if r.no_subscriber.is_some() {
                    return Err(ConfigError::WrongMode("no_subscriber", "channel"));
                }
                Target::Stream {
                    key: template("stream", &stream)?,
                    maxlen: r.maxlen,
                    durable: r.durable.unwrap_or(false),
                }
            }
            (None, Some(channel)) => {
                if r.maxlen.is_some() {
                    return Err(ConfigError::WrongMode("maxlen", "stream"));
                }
                if r.durable.is_some() {
                    return Err(ConfigError::WrongMode("durable", "stream"));
                }
                Target::Channel {
                    channel: template("channel", &channel)?,
                    no_subscriber: r.no_subscriber.unwrap_or_default(),
                }
            }
            _ => return Err(ConfigError::Target),
        };
        let config = RedisConfig {
            url: r.url,
            username: r.username,
            password: r.password,
            target,
            tls_ca_file: r.tls_ca_file,
            timeout_ms: r.timeout_ms.unwrap_or(timeout_ms(DEFAULT_TIMEOUT)),
            max_message_bytes: r.max_message_bytes.unwrap_or(DEFAULT_MAX_MESSAGE_BYTES),
            allow_insecure: r.allow_insecure.unwrap_or(false),
            message: r.message,
        };
        config.validate()?;
        Ok(config)
    }
}

fn template(key: &'static str, text: &str) -> Result<KeyTemplate, ConfigError> {
    KeyTemplate::parse(text, AbsentTenant::Empty)
        .map_err(|source| ConfigError::Template { key, source })
}

/// Whether `url` is a `redis://` or `rediss://` URL with a host.
fn tls_of(url: &str) -> Result<bool, ConfigError> {
    url_of(url).map(|(tls, _)| tls)
}

/// `url`'s TLS flag and the parsed URL, if it is a `redis://` or `rediss://` URL with a
/// host.
fn url_of(url: &str) -> Result<(bool, url::Url), ConfigError> {
    let parsed = url::Url::parse(url).map_err(|_| ConfigError::Url)?;
    let tls = match parsed.scheme() {
        "redis" => false,
        "rediss" => true,
        _ => return Err(ConfigError::Url),
    };
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(ConfigError::Url);
    }
    Ok((tls, parsed))
}

impl RedisConfig {
    /// `XADD` every hook to `stream` (a template: `hooks.{source_id}`), with the defaults.
    pub fn stream(url: impl Into<String>, stream: &str) -> Result<Self, ConfigError> {
        Self::with_target(
            url.into(),
            Target::Stream {
                key: template("stream", stream)?,
                maxlen: None,
                durable: false,
            },
        )
    }

    /// `PUBLISH` every hook to `channel` (a template), with the defaults.
    pub fn channel(url: impl Into<String>, channel: &str) -> Result<Self, ConfigError> {
        Self::with_target(
            url.into(),
            Target::Channel {
                channel: template("channel", channel)?,
                no_subscriber: NoSubscriber::default(),
            },
        )
    }

    fn with_target(url: String, target: Target) -> Result<Self, ConfigError> {
        let config = RedisConfig {
            url,
            username: None,
            password: None,
            target,
            tls_ca_file: None,
            timeout_ms: timeout_ms(DEFAULT_TIMEOUT),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            allow_insecure: false,
            message: MessageOptions::new(),
        };
        config.validate()?;
        Ok(config)
    }

    /// `self` if it is valid, else the first refusal: every fallible builder ends here.
    fn checked(self) -> Result<Self, ConfigError> {
        self.validate()?;
        Ok(self)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let (tls, url) = url_of(&self.url)?;
        let login =
            self.password.is_some() || !url.username().is_empty() || url.password().is_some();
        let remote = !url.host_str().is_some_and(is_loopback_host);
        if login && !tls && remote && !self.allow_insecure {
            return Err(ConfigError::Insecure);
        }
        if self.tls_ca_file.is_some() && !tls {
            return Err(ConfigError::CaWithoutTls);
        }
        if self.username.is_some() && self.password.is_none() {
            return Err(ConfigError::UsernameWithoutPassword);
        }
        // A channel message is the bare body: nowhere to put the signature.
        if self.message.signing().is_some() && matches!(self.target, Target::Channel { .. }) {
            return Err(ConfigError::WrongMode("signing", "stream"));
        }
        // Binary mode puts the event's attributes beside the data: a channel has no beside.
        if self.message.cloudevents().map(CloudEvents::mode) == Some(Mode::Binary)
            && matches!(self.target, Target::Channel { .. })
        {
            return Err(ConfigError::WrongMode("format = \"cloudevents\"", "stream"));
        }
        Ok(())
    }

    /// Set every message option at once, as the sink file's keys do:
    /// - `format`/`cloudevents_type`: CloudEvents instead of Message v1. In binary mode
    ///   (stream mode only) the data is the `message` field and every attribute a
    ///   `ce-<name>` field beside it; in structured mode the JSON event is the `message`
    ///   field, or the channel message.
    /// - `[signing]` (stream mode only): Standard Webhooks signing over the exact Message v1
    ///   bytes (`webhook-id`, `webhook-timestamp`, `webhook-signature` fields beside
    ///   `message`); consumers check it with `ankusa_message::verify`.
    /// - `inline_max_bytes` (default 64 KiB): bodies over it travel by `ctx.claim`.
    ///
    /// # Errors
    /// [`ConfigError::WrongMode`] for signing or binary-mode CloudEvents on a channel: a
    /// `PUBLISH` carries the body alone.
    pub fn with_message(mut self, message: MessageOptions) -> Result<Self, ConfigError> {
        self.message = message;
        self.checked()
    }

    /// The message options.
    pub fn message(&self) -> &MessageOptions {
        &self.message
    }

    /// Log in as ACL `username` with `password` (over any userinfo in the URL).
    ///
    /// # Errors
    /// [`ConfigError::Insecure`] over `redis://` to a host that is not loopback, unless
    /// [`with_allow_insecure`](Self::with_allow_insecure) said so first.
    pub fn with_user(
        mut self,
        username: impl Into<String>,
        password: Secret,
    ) -> Result<Self, ConfigError> {
        self.username = Some(username.into());
        self.password = Some(password);
        self.checked()
    }

    /// Log in as the `default` user with `password` (`AUTH password`).
    ///
    /// # Errors
    /// As [`with_user`](Self::with_user).
    pub fn with_password(mut self, password: Secret) -> Result<Self, ConfigError> {
        self.username = None;
        self.password = Some(password);
        self.checked()
    }

    /// Accept sending a password over `redis://` to a host that is not loopback (the
    /// `allow_insecure` key; default `false`: such a config is refused).
    ///
    /// # Errors
    /// [`ConfigError::Insecure`] for `false` when the config already holds such a login.
    pub fn with_allow_insecure(mut self, allow: bool) -> Result<Self, ConfigError> {
        self.allow_insecure = allow;
        self.checked()
    }

    /// Whether a cleartext login to a remote host was accepted (`allow_insecure`).
    pub fn allow_insecure(&self) -> bool {
        self.allow_insecure
    }

    /// `MAXLEN ~ maxlen` on every `XADD` (stream mode only).
    pub fn with_maxlen(mut self, maxlen: NonZeroU64) -> Result<Self, ConfigError> {
        match &mut self.target {
            Target::Stream { maxlen: m, .. } => *m = Some(maxlen),
            Target::Channel { .. } => return Err(ConfigError::WrongMode("maxlen", "stream")),
        }
        Ok(self)
    }

    /// Declare that the server persists every write (stream mode only; see
    /// [`Target::Stream`]).
    pub fn with_durable(mut self, durable: bool) -> Result<Self, ConfigError> {
        match &mut self.target {
            Target::Stream { durable: d, .. } => *d = durable,
            Target::Channel { .. } => return Err(ConfigError::WrongMode("durable", "stream")),
        }
        Ok(self)
    }

    /// The class of a `PUBLISH` that reached nobody (channel mode only).
    pub fn with_no_subscriber(mut self, class: NoSubscriber) -> Result<Self, ConfigError> {
        match &mut self.target {
            Target::Channel { no_subscriber, .. } => *no_subscriber = class,
            Target::Stream { .. } => {
                return Err(ConfigError::WrongMode("no_subscriber", "channel"));
            }
        }
        Ok(self)
    }

    /// Trust the CA certificates of this PEM file instead of the system's roots (`rediss://`).
    pub fn with_tls_ca_file(mut self, path: impl Into<PathBuf>) -> Result<Self, ConfigError> {
        self.tls_ca_file = Some(path.into());
        self.checked()
    }

    /// Set the connection and reply timeout (rounded down to whole ms, at least 1).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout_ms = timeout_ms(timeout);
        self
    }

    /// Set the largest Message v1 sent (set it to the server's `proto-max-bulk-len`);
    /// a larger one is refused, permanent, before anything is sent.
    pub fn with_max_message_bytes(mut self, max: NonZeroUsize) -> Self {
        self.max_message_bytes = max;
        self
    }

    /// Where the hooks go.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The connection and reply timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.get())
    }

    /// Whether the URL is `rediss://`.
    pub fn is_tls(&self) -> bool {
        tls_of(&self.url).unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_message::signing::Signer;

    fn parse(toml_like: serde_json::Value) -> Result<RedisConfig, String> {
        serde_json::from_value(toml_like).map_err(|e| e.to_string())
    }

    #[test]
    fn stream_defaults_and_options() {
        let c = parse(serde_json::json!({
            "url": "redis://127.0.0.1:6379", "stream": "hooks.{source_id}", "maxlen": 1000
        }))
        .unwrap();
        assert_eq!(c.timeout(), DEFAULT_TIMEOUT);
        assert_eq!(
            c.message.inline_max_bytes(),
            ankusa_message::DEFAULT_INLINE_MAX_BYTES
        );
        match c.target() {
            Target::Stream {
                key,
                maxlen,
                durable,
            } => {
                assert_eq!(key.as_str(), "hooks.{source_id}");
                assert_eq!(maxlen.map(NonZeroU64::get), Some(1000));
                assert!(!durable);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn signing_takes_a_stream_and_refuses_a_channel() {
        let secrets = serde_json::json!({"secrets": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]});
        let c = parse(serde_json::json!({
            "url": "redis://127.0.0.1:6379", "stream": "hooks", "signing": secrets
        }))
        .unwrap();
        assert_eq!(c.message().signing().map(Signer::len), Some(1));
        assert!(
            !format!("{c:?}").contains("MfKQ9r8"),
            "the secret is not printed"
        );
        let e = parse(serde_json::json!({
            "url": "redis://127.0.0.1:6379", "channel": "hooks", "signing": secrets
        }))
        .unwrap_err();
        assert!(e.contains("signing applies only to stream mode"), "{e}");
        let signer = c.message().signing().unwrap().clone();
        let channel = RedisConfig::channel("redis://127.0.0.1:6379", "c").unwrap();
        assert!(
            channel
                .with_message(MessageOptions::new().with_signing(signer))
                .is_err()
        );
    }

    #[test]
    fn cloudevents_keys_and_binary_mode_needs_a_stream() {
        let c = parse(serde_json::json!({
            "url": "redis://127.0.0.1:6379", "stream": "hooks",
            "format": "cloudevents", "cloudevents_type": "t.x"
        }))
        .unwrap();
        let ce = c.message().cloudevents().unwrap();
        assert_eq!((ce.mode(), ce.event_type()), (Mode::Binary, "t.x"));
        let c = parse(serde_json::json!({
            "url": "redis://127.0.0.1:6379", "channel": "hooks",
            "format": "cloudevents-structured"
        }))
        .unwrap();
        assert_eq!(c.message().cloudevents().unwrap().mode(), Mode::Structured);
        let e = parse(serde_json::json!({
            "url": "redis://127.0.0.1:6379", "channel": "hooks", "format": "cloudevents"
        }))
        .unwrap_err();
        assert!(
            e.contains("format = \"cloudevents\" applies only to stream mode"),
            "{e}"
        );
        let e = parse(serde_json::json!({
            "url": "redis://127.0.0.1:6379", "stream": "hooks",
            "format": "cloudevents", "cloudevents_type": "a b"
        }))
        .unwrap_err();
        assert!(e.contains("cloudevents_type"), "{e}");
        let binary = CloudEvents::new(Mode::Binary, "t").unwrap();
        let channel = RedisConfig::channel("redis://127.0.0.1:6379", "c").unwrap();
        let binary = MessageOptions::new().with_cloudevents(Some(binary));
        assert!(channel.with_message(binary).is_err());
    }

    #[test]
    fn channel_defaults_to_config_on_no_subscriber() {
        let c = parse(serde_json::json!({"url": "rediss://h", "channel": "c"})).unwrap();
        assert!(c.is_tls());
        assert!(matches!(
            c.target(),
            Target::Channel {
                no_subscriber: NoSubscriber::Config,
                ..
            }
        ));
        let c = parse(
            serde_json::json!({"url": "redis://h", "channel": "c", "no_subscriber": "transient"}),
        )
        .unwrap();
        assert!(matches!(
            c.target(),
            Target::Channel {
                no_subscriber: NoSubscriber::Transient,
                ..
            }
        ));
    }

    #[test]
    fn refusals_name_the_key_never_the_value() {
        // One key refused over a config that is valid without it; then whole configs.
        let over_base = [
            ("channel", serde_json::json!("c"), "exactly one"),
            (
                "no_subscriber",
                serde_json::json!("config"),
                "no_subscriber",
            ),
            ("tls_ca_file", serde_json::json!("/x"), "tls_ca_file"),
            ("username", serde_json::json!("u"), "username"),
            ("maxlen", serde_json::json!(0), ""),
            ("bogus", serde_json::json!(1), "bogus"),
        ]
        .map(|(key, value, want)| {
            let mut v = serde_json::json!({"url": "redis://h", "stream": "s"});
            v[key] = value;
            (v, want)
        });
        for (v, want) in [
            (
                serde_json::json!({"url": "http://u:s3cret@h", "stream": "s"}),
                "url",
            ),
            (
                serde_json::json!({"url": "redis://u:s3cret@", "stream": "s"}),
                "url",
            ),
            (serde_json::json!({"url": "redis://h"}), "exactly one"),
            (
                serde_json::json!({"url": "redis://h", "channel": "c", "durable": true}),
                "durable",
            ),
            (
                serde_json::json!({"url": "redis://h", "channel": "c", "maxlen": 5}),
                "maxlen",
            ),
            (
                serde_json::json!({"url": "redis://h", "stream": "{nope}"}),
                "stream",
            ),
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
    fn builders_recheck_the_mode() {
        let s = RedisConfig::stream("redis://127.0.0.1", "s").unwrap();
        assert!(
            s.clone()
                .with_no_subscriber(NoSubscriber::Transient)
                .is_err()
        );
        assert!(s.clone().with_tls_ca_file("/ca.pem").is_err());
        let s = s.with_maxlen(NonZeroU64::new(10).unwrap()).unwrap();
        assert!(s.with_durable(true).is_ok());
        let c = RedisConfig::channel("redis://127.0.0.1", "c").unwrap();
        assert!(c.clone().with_maxlen(NonZeroU64::MIN).is_err());
        assert!(c.clone().with_durable(true).is_err());
        assert!(RedisConfig::stream("amqp://h", "s").is_err());
    }

    #[test]
    fn a_cleartext_login_to_a_remote_host_needs_allow_insecure() {
        for (v, ok) in [
            (
                serde_json::json!({"url": "redis://:s3cret@redis.example", "stream": "s"}),
                false,
            ),
            (
                serde_json::json!({"url": "redis://u:s3cret@redis.example", "stream": "s"}),
                false,
            ),
            (
                serde_json::json!({"url": "redis://redis.example", "stream": "s", "password": "s3cret"}),
                false,
            ),
            (
                serde_json::json!({"url": "redis://redis.example", "stream": "s", "password": "s3cret", "allow_insecure": true}),
                true,
            ),
            (
                serde_json::json!({"url": "rediss://u:s3cret@redis.example", "stream": "s"}),
                true,
            ),
            (
                serde_json::json!({"url": "redis://u:s3cret@127.0.0.1", "stream": "s"}),
                true,
            ),
            (
                serde_json::json!({"url": "redis://redis.example", "stream": "s"}),
                true,
            ),
        ] {
            match (parse(v.clone()), ok) {
                (Ok(_), true) => {}
                (Err(e), false) => {
                    assert!(
                        e.starts_with("password:") && e.contains("allow_insecure"),
                        "{e}"
                    );
                    assert!(!e.contains("s3cret"), "{e}");
                }
                (r, _) => panic!("{v}: {r:?}"),
            }
        }
        let remote = RedisConfig::stream("redis://redis.example", "s").unwrap();
        assert_eq!(
            remote.clone().with_password(Secret::new("p")).unwrap_err(),
            ConfigError::Insecure
        );
        let c = remote
            .with_allow_insecure(true)
            .unwrap()
            .with_user("u", Secret::new("p"))
            .unwrap();
        assert!(c.allow_insecure());
        assert_eq!(
            c.with_allow_insecure(false).unwrap_err(),
            ConfigError::Insecure
        );
    }

    #[test]
    fn debug_shows_no_secret() {
        let c = RedisConfig::stream("redis://admin:pa55w0rd@127.0.0.1:6379/0", "s")
            .unwrap()
            .with_user("acl-user-name", Secret::new("other-s3cret"))
            .unwrap();
        let d = format!("{c:?}");
        for secret in ["pa55w0rd", "admin", "acl-user-name", "other-s3cret"] {
            assert!(!d.contains(secret), "{d}");
        }
    }

    #[test]
    fn message_options_with_binary_cloudevents_need_a_stream() {
        let binary = MessageOptions::new()
            .with_format(ankusa_message::cloudevents::Format::CloudEvents, None)
            .unwrap();
        let stream = RedisConfig::stream("redis://127.0.0.1:6379", "s").unwrap();
        assert!(stream.with_message(binary.clone()).is_ok());
        let channel = RedisConfig::channel("redis://127.0.0.1:6379", "c").unwrap();
        assert!(matches!(
            channel.with_message(binary),
            Err(ConfigError::WrongMode(_, "stream"))
        ));
    }
}

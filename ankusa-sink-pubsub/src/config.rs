//! The Pub/Sub sink's configuration: serde shape, builder methods, validation, and the
//! ordering key template.

use ankusa_sink_core::Envelope;
use ankusa_sink_core::template::{Template, TemplateFields};
use serde::{Deserialize, Serialize};
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::time::Duration;

/// Google's Pub/Sub endpoint, used when no endpoint is configured.
pub const GOOGLE_ENDPOINT: &str = "https://pubsub.googleapis.com";
/// Default and largest `max_message_bytes`: Pub/Sub's 10 MB message limit.
pub const DEFAULT_MAX_MESSAGE_BYTES: NonZeroUsize = NonZeroUsize::new(10_000_000).unwrap();
/// Default `timeout_ms`: 10 s for one publish (until the server's message id) or one check.
pub const DEFAULT_TIMEOUT_MS: NonZeroU64 = NonZeroU64::new(10_000).unwrap();
/// Default batch size in messages (the client's own default).
pub const DEFAULT_BATCH_MAX_MESSAGES: NonZeroU32 = NonZeroU32::new(100).unwrap();
/// Default batch size in bytes (the client's own default, 1 MB).
pub const DEFAULT_BATCH_MAX_BYTES: NonZeroU32 = NonZeroU32::new(1_000_000).unwrap();
/// Default batch delay: 10 ms (the client's own default).
pub const DEFAULT_BATCH_DELAY_MS: u64 = 10;
/// The environment variable the emulator's tooling sets (`host:port`).
pub const EMULATOR_HOST_ENV: &str = "PUBSUB_EMULATOR_HOST";

/// The most messages one Pub/Sub publish request may carry.
const MAX_BATCH_MESSAGES: u32 = 1_000;
/// The most bytes one Pub/Sub publish request may carry.
const MAX_BATCH_BYTES: u32 = 10_000_000;

/// How the sink authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Auth {
    /// Google's Application Default Credentials (`GOOGLE_APPLICATION_CREDENTIALS`, the
    /// gcloud user credentials, or the metadata server). The default for `https://`.
    ApplicationDefault,
    /// No credentials: for the emulator. The default for `http://` endpoints.
    Anonymous,
}

/// Batching through the client's publisher, for deliveries whose `ctx.batch` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchOptions {
    /// Send a batch when it holds this many messages (1 to 1000).
    #[serde(default = "default_batch_messages")]
    pub max_messages: NonZeroU32,
    /// Send a batch when it holds this many bytes (at most 10,000,000).
    #[serde(default = "default_batch_bytes")]
    pub max_bytes: NonZeroU32,
    /// Send a batch at the latest this long after its first message.
    #[serde(default = "default_batch_delay")]
    pub delay_ms: u64,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            max_messages: DEFAULT_BATCH_MAX_MESSAGES,
            max_bytes: DEFAULT_BATCH_MAX_BYTES,
            delay_ms: DEFAULT_BATCH_DELAY_MS,
        }
    }
}

impl BatchOptions {
    /// The batch delay.
    pub fn delay(&self) -> Duration {
        Duration::from_millis(self.delay_ms)
    }
}

fn default_batch_messages() -> NonZeroU32 {
    DEFAULT_BATCH_MAX_MESSAGES
}
fn default_batch_bytes() -> NonZeroU32 {
    DEFAULT_BATCH_MAX_BYTES
}
fn default_batch_delay() -> u64 {
    DEFAULT_BATCH_DELAY_MS
}

/// The Pub/Sub sink's configuration.
///
/// Build it with [`PubSubConfig::new`] and the `with_*` methods, or deserialize it; either
/// way [`PubSubSink::new`](crate::PubSubSink::new) validates it and refuses bad values with
/// a [`ConfigError`]. It holds no secret: credentials come from Application Default
/// Credentials, never from this struct.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PubSubConfig {
    /// The Google Cloud project id.
    pub project: String,
    /// The short topic id (not `projects/..`). Never created by the sink.
    pub topic: String,
    /// `http(s)://host[:port]`; [`GOOGLE_ENDPOINT`] when absent. An `http://` endpoint is
    /// an emulator (anonymous credentials unless `auth` says otherwise).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// How to authenticate; inferred from the endpoint's scheme when absent.
    #[serde(default)]
    pub auth: Option<Auth>,
    /// The ordering key template (see [`OrderingKey`]); none by default. An empty result
    /// sends no key.
    #[serde(default)]
    pub ordering_key: Option<String>,
    /// The largest body sent inline; larger bodies travel by `ctx.claim`.
    #[serde(default = "default_inline")]
    pub inline_max_bytes: NonZeroUsize,
    /// data + attribute names and values + ordering key over this is refused before
    /// publishing (permanent). At most 10,000,000.
    #[serde(default = "default_max_message")]
    pub max_message_bytes: NonZeroUsize,
    /// How long one publish may take until the server's message id, and the bound of
    /// `check()`.
    #[serde(default = "default_timeout")]
    pub timeout_ms: NonZeroU64,
    /// Batching for deliveries whose `ctx.batch` is set.
    #[serde(default)]
    pub batch: BatchOptions,
    /// Accept `auth = application_default` with an `http://` endpoint that is not
    /// loopback, sending bearer tokens unencrypted (default false: refused with
    /// [`ConfigError::Insecure`]). Anonymous credentials (the emulator) send no token and
    /// need no such consent.
    #[serde(default)]
    pub allow_insecure: bool,
}

fn default_inline() -> NonZeroUsize {
    ankusa_sink_core::DEFAULT_INLINE_MAX_BYTES
}
fn default_max_message() -> NonZeroUsize {
    DEFAULT_MAX_MESSAGE_BYTES
}
fn default_timeout() -> NonZeroU64 {
    DEFAULT_TIMEOUT_MS
}

impl PubSubConfig {
    /// A configuration for `projects/<project>/topics/<topic>` on Google's endpoint with
    /// Application Default Credentials, every other option at its default.
    pub fn new(project: impl Into<String>, topic: impl Into<String>) -> Self {
        PubSubConfig {
            project: project.into(),
            topic: topic.into(),
            endpoint: None,
            auth: None,
            ordering_key: None,
            inline_max_bytes: default_inline(),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            batch: BatchOptions::default(),
            allow_insecure: false,
        }
    }

    /// Use this endpoint (`http://127.0.0.1:8085` for the emulator).
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// Use the emulator named by `PUBSUB_EMULATOR_HOST` (`host:port`) when it is set:
    /// `http://<host:port>` with anonymous credentials. Unset or empty changes nothing.
    pub fn with_emulator_from_env(self) -> Self {
        match std::env::var(EMULATOR_HOST_ENV) {
            Ok(host) if !host.trim().is_empty() => self
                .with_endpoint(format!("http://{}", host.trim()))
                .with_auth(Auth::Anonymous),
            _ => self,
        }
    }

    /// Set how to authenticate.
    pub fn with_auth(mut self, auth: Auth) -> Self {
        self.auth = Some(auth);
        self
    }

    /// Set the ordering key template (a string without `{...}` is a static key).
    pub fn with_ordering_key(mut self, template: impl Into<String>) -> Self {
        self.ordering_key = Some(template.into());
        self
    }

    /// Set the inline threshold.
    pub fn with_inline_max_bytes(mut self, max: NonZeroUsize) -> Self {
        self.inline_max_bytes = max;
        self
    }

    /// Set the message size limit (data + attributes + ordering key).
    pub fn with_max_message_bytes(mut self, max: NonZeroUsize) -> Self {
        self.max_message_bytes = max;
        self
    }

    /// Set the publish and check timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout_ms = ankusa_sink_core::timeout_ms(timeout);
        self
    }

    /// Accept Application Default Credentials over a cleartext `http://` endpoint that is
    /// not loopback (see [`PubSubConfig::allow_insecure`]).
    pub fn with_allow_insecure(mut self, allow: bool) -> Self {
        self.allow_insecure = allow;
        self
    }

    /// Whether bearer tokens would cross the network unencrypted: Application Default
    /// Credentials with an `http://` endpoint whose host is not loopback.
    pub fn sends_tokens_in_clear(&self) -> bool {
        self.auth() == Auth::ApplicationDefault
            && url::Url::parse(self.endpoint()).is_ok_and(|u| {
                u.scheme() == "http"
                    && !u.host_str().is_some_and(ankusa_sink_core::is_loopback_host)
            })
    }

    /// Set the batching options.
    pub fn with_batch(mut self, batch: BatchOptions) -> Self {
        self.batch = batch;
        self
    }

    /// The publish and check timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.get())
    }

    /// The endpoint in use: the configured one without a trailing `/`, or Google's.
    pub fn endpoint(&self) -> &str {
        self.endpoint
            .as_deref()
            .map(|e| e.trim_end_matches('/'))
            .unwrap_or(GOOGLE_ENDPOINT)
    }

    /// The authentication in use: the configured one, else anonymous for `http://`
    /// endpoints (an emulator) and Application Default Credentials otherwise.
    pub fn auth(&self) -> Auth {
        self.auth.unwrap_or_else(|| {
            if self.endpoint().starts_with("http://") {
                Auth::Anonymous
            } else {
                Auth::ApplicationDefault
            }
        })
    }

    /// The topic's resource name, `projects/<project>/topics/<topic>`.
    pub fn topic_name(&self) -> String {
        format!("projects/{}/topics/{}", self.project, self.topic)
    }

    /// Check every value that can be checked without the server.
    ///
    /// Project and topic must be non-empty, without `/`, whitespace or control
    /// characters; the finer naming rules (length, leading letter, the `goog` prefix) are
    /// the server's, which answers `INVALID_ARGUMENT` (permanent).
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_segment("project", &self.project)?;
        validate_segment("topic", &self.topic)?;
        self.validate_endpoint()?;
        if self.sends_tokens_in_clear() && !self.allow_insecure {
            return Err(ConfigError::Insecure);
        }
        if let Some(t) = &self.ordering_key {
            OrderingKey::parse(t)?;
        }
        if self.max_message_bytes > DEFAULT_MAX_MESSAGE_BYTES {
            return Err(ConfigError::Value {
                option: "max_message_bytes",
                why: "must be at most 10000000 (Pub/Sub's message limit)",
            });
        }
        if self.timeout_ms.get() > 3_600_000 {
            return Err(ConfigError::Value {
                option: "timeout_ms",
                why: "must be at most 3600000 (one hour)",
            });
        }
        if self.batch.max_messages.get() > MAX_BATCH_MESSAGES {
            return Err(ConfigError::Value {
                option: "batch.max_messages",
                why: "must be at most 1000 (Pub/Sub's request limit)",
            });
        }
        if self.batch.max_bytes.get() > MAX_BATCH_BYTES {
            return Err(ConfigError::Value {
                option: "batch.max_bytes",
                why: "must be at most 10000000 (Pub/Sub's request limit)",
            });
        }
        if self.batch.delay_ms > 60_000 {
            return Err(ConfigError::Value {
                option: "batch.delay_ms",
                why: "must be at most 60000",
            });
        }
        if self.batch.delay_ms >= self.timeout_ms.get() {
            return Err(ConfigError::Value {
                option: "batch.delay_ms",
                why: "must be less than timeout_ms (a batched delivery would always time out)",
            });
        }
        Ok(())
    }

    fn validate_endpoint(&self) -> Result<(), ConfigError> {
        let Some(raw) = &self.endpoint else {
            return Ok(());
        };
        // Never echo the endpoint: a mistyped one might carry a secret.
        let url = url::Url::parse(raw).map_err(|_| ConfigError::Endpoint("is not a URL"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ConfigError::Endpoint("must be http:// or https://"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(ConfigError::Endpoint("has no host"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(ConfigError::Endpoint(
                "must not carry userinfo (credentials come from auth)",
            ));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(ConfigError::Endpoint("must not have a query or fragment"));
        }
        if !matches!(url.path(), "" | "/") {
            return Err(ConfigError::Endpoint("must not have a path"));
        }
        Ok(())
    }
}

fn validate_segment(option: &'static str, value: &str) -> Result<(), ConfigError> {
    if value.is_empty() {
        return Err(ConfigError::Value {
            option,
            why: "must not be empty",
        });
    }
    if value
        .chars()
        .any(|c| c == '/' || c.is_whitespace() || c.is_control())
    {
        return Err(ConfigError::Value {
            option,
            why: "must not contain '/', whitespace or control characters (give the short id)",
        });
    }
    if value.len() > 255 {
        return Err(ConfigError::Value {
            option,
            why: "must be at most 255 bytes",
        });
    }
    Ok(())
}

/// Why a configuration was refused. The text names options, never a secret value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// An option out of range or malformed.
    #[error("{option} {why}")]
    Value {
        /// The option.
        option: &'static str,
        /// What is wrong.
        why: &'static str,
    },
    /// The endpoint is unusable (it is never printed).
    #[error("endpoint {0}")]
    Endpoint(&'static str),
    /// The ordering key template does not parse.
    #[error("invalid ordering_key template: {0}")]
    OrderingKey(String),
    /// `auth = application_default` with an `http://` endpoint that is not loopback:
    /// bearer tokens would cross the network unencrypted.
    #[error(
        "endpoint is http:// on a host that is not loopback and auth is application_default: \
         bearer tokens would be sent unencrypted; use https://, auth = anonymous (an \
         emulator), or set allow_insecure = true to accept that"
    )]
    Insecure,
    /// The client could not be built (for example, no Application Default Credentials).
    #[error("the Pub/Sub client could not be built: {0}")]
    Client(String),
}

/// An ordering key: a template over the envelope, fixed at configuration time.
///
/// `{tenant_id}`, `{source_id}`, `{id}` and `{dedupe_key}` are replaced (an absent tenant
/// or dedupe key by the empty string); `{{` and `}}` are literal braces. A template with no
/// placeholder is a static key. A key that renders empty is not sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderingKey(Template);

impl OrderingKey {
    /// Parse a template.
    pub fn parse(template: &str) -> Result<Self, ConfigError> {
        Template::parse(template)
            .map(OrderingKey)
            .map_err(|e| ConfigError::OrderingKey(e.to_string()))
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// Whether the key is the same for every hook.
    pub fn is_static(&self) -> bool {
        self.0.is_static()
    }

    /// The key for `env` (possibly empty: then no key is sent).
    pub fn render(&self, env: &Envelope) -> String {
        self.0.render(&TemplateFields::of(env), "")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> PubSubConfig {
        PubSubConfig::new("proj", "hooks")
    }

    #[test]
    fn defaults() {
        let c = valid();
        c.validate().unwrap();
        assert_eq!(c.endpoint(), GOOGLE_ENDPOINT);
        assert_eq!(c.auth(), Auth::ApplicationDefault);
        assert_eq!(c.topic_name(), "projects/proj/topics/hooks");
        assert_eq!(c.inline_max_bytes.get(), 65_536);
        assert_eq!(c.max_message_bytes.get(), 10_000_000);
        assert_eq!(c.timeout(), Duration::from_secs(10));
        assert!(c.ordering_key.is_none());
        let e = c.with_endpoint("http://127.0.0.1:8085/");
        assert_eq!(e.endpoint(), "http://127.0.0.1:8085");
        assert_eq!(e.auth(), Auth::Anonymous);
        assert_eq!(
            e.with_auth(Auth::ApplicationDefault).auth(),
            Auth::ApplicationDefault
        );
    }

    #[test]
    fn serde_shape_with_defaults() {
        let c: PubSubConfig = serde_json::from_value(serde_json::json!({
            "project": "p", "topic": "t", "endpoint": "http://127.0.0.1:8085",
            "ordering_key": "{tenant_id}", "batch": {"max_messages": 10}
        }))
        .unwrap();
        assert_eq!(c.batch.max_messages.get(), 10);
        assert_eq!(c.batch.max_bytes, DEFAULT_BATCH_MAX_BYTES);
        assert_eq!(c.ordering_key.as_deref(), Some("{tenant_id}"));
        assert!(
            serde_json::from_value::<PubSubConfig>(
                serde_json::json!({"project": "p", "topic": "t", "nope": 1})
            )
            .is_err()
        );
        assert!(
            serde_json::from_value::<PubSubConfig>(
                serde_json::json!({"project": "p", "topic": "t", "inline_max_bytes": 0})
            )
            .is_err()
        );
    }

    #[test]
    fn bad_values_are_refused_with_the_option_named() {
        let cases: Vec<(PubSubConfig, &str)> = vec![
            (PubSubConfig::new("", "t"), "project"),
            (PubSubConfig::new("p", ""), "topic"),
            (PubSubConfig::new("p", "projects/p/topics/t"), "topic"),
            (PubSubConfig::new("p x", "t"), "project"),
            (valid().with_endpoint("ftp://h"), "endpoint"),
            (valid().with_endpoint("nonsense"), "endpoint"),
            (valid().with_endpoint("https://h/v1"), "endpoint"),
            (valid().with_ordering_key("{nope}"), "ordering_key"),
            (valid().with_ordering_key("{tenant_id"), "ordering_key"),
            (
                valid().with_max_message_bytes(NonZeroUsize::new(10_000_001).unwrap()),
                "max_message_bytes",
            ),
            (
                valid().with_batch(BatchOptions {
                    max_messages: NonZeroU32::new(1001).unwrap(),
                    ..BatchOptions::default()
                }),
                "batch.max_messages",
            ),
            (
                valid().with_batch(BatchOptions {
                    max_bytes: NonZeroU32::new(10_000_001).unwrap(),
                    ..BatchOptions::default()
                }),
                "batch.max_bytes",
            ),
            (
                valid().with_timeout(Duration::from_secs(7200)),
                "timeout_ms",
            ),
            (
                valid()
                    .with_timeout(Duration::from_millis(50))
                    .with_batch(BatchOptions {
                        delay_ms: 50,
                        ..BatchOptions::default()
                    }),
                "batch.delay_ms",
            ),
        ];
        for (c, option) in cases {
            let e = c.validate().unwrap_err();
            assert!(e.to_string().contains(option), "{option}: {e}");
        }
    }

    #[test]
    fn endpoint_userinfo_is_refused_and_never_echoed() {
        let e = valid()
            .with_endpoint("https://user:s3cr3t@pubsub.example")
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("userinfo"), "{e}");
        assert!(!e.to_string().contains("s3cr3t"));
        let e = valid()
            .with_endpoint("https://h.example/?token=s3cr3t")
            .validate()
            .unwrap_err();
        assert!(!e.to_string().contains("s3cr3t"));
    }

    #[test]
    fn application_default_over_cleartext_needs_allow_insecure() {
        let remote = || valid().with_endpoint("http://pubsub.internal.example:8085");
        let adc = remote().with_auth(Auth::ApplicationDefault);
        assert!(adc.sends_tokens_in_clear());
        let e = adc.validate().unwrap_err();
        assert_eq!(e, ConfigError::Insecure);
        assert!(e.to_string().contains("allow_insecure"), "{e}");
        adc.clone().with_allow_insecure(true).validate().unwrap();
        // No token to leak: anonymous (the default for http://, and the emulator's).
        remote().validate().unwrap();
        assert!(!remote().sends_tokens_in_clear());
        // TLS, and loopback (an emulator or a local proxy on this machine).
        valid().validate().unwrap();
        for local in [
            "http://127.0.0.1:8085",
            "http://localhost:8085",
            "http://[::1]:8085",
        ] {
            let c = valid()
                .with_endpoint(local)
                .with_auth(Auth::ApplicationDefault);
            assert!(!c.sends_tokens_in_clear(), "{local}");
            c.validate().unwrap();
        }
        let c: PubSubConfig = serde_json::from_value(serde_json::json!({
            "project": "p", "topic": "t", "endpoint": "http://10.0.0.7:8085",
            "auth": "application_default", "allow_insecure": true
        }))
        .unwrap();
        assert!(c.allow_insecure);
        c.validate().unwrap();
        assert!(!valid().allow_insecure);
    }

    #[test]
    fn ordering_key_templates() {
        let env = Envelope::builder("h1", "src", "")
            .tenant_id("acme")
            .build()
            .unwrap();
        let k = OrderingKey::parse("{tenant_id}/{source_id}:{{x}}").unwrap();
        assert!(!k.is_static());
        assert_eq!(k.render(&env), "acme/src:{x}");
        let s = OrderingKey::parse("fixed").unwrap();
        assert!(s.is_static());
        assert_eq!(s.render(&env), "fixed");
        let d = OrderingKey::parse("{dedupe_key}").unwrap();
        assert_eq!(d.render(&env), "");
        assert_eq!(OrderingKey::parse("{id}").unwrap().render(&env), "h1");
        assert!(OrderingKey::parse("a}b").is_err());
    }
}

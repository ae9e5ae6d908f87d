//! The Pub/Sub sink's configuration: the operator's keys ([`Repr`]), validated once into an
//! always-valid [`PubSubConfig`] with `with_*` builders that re-check what they change.

use ankusa_message::MessageOptions;
use ankusa_message::template::{AbsentTenant, KeyTemplate, TemplateError};
use ankusa_sink_kit::{DEFAULT_SUBSCRIBER_CHECK_INTERVAL, subscriber_check_interval};
use serde::Deserialize;
use serde::de::IgnoredAny;
use std::collections::BTreeMap;
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::time::Duration;

/// Google's Pub/Sub endpoint, used when no endpoint is configured.
const GOOGLE_ENDPOINT: &str = "https://pubsub.googleapis.com";
/// Default and largest `max_message_bytes`: Pub/Sub's 10 MB message limit.
pub(crate) const DEFAULT_MAX_MESSAGE_BYTES: NonZeroUsize = NonZeroUsize::new(10_000_000).unwrap();
/// Default `timeout_ms`: 10 s for one publish (until the server's message id) or one check.
const DEFAULT_TIMEOUT_MS: NonZeroU64 = NonZeroU64::new(10_000).unwrap();
/// The largest `timeout_ms`: one hour.
const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// Default batch size in messages (the client's own default).
const DEFAULT_BATCH_MAX_MESSAGES: NonZeroU32 = NonZeroU32::new(100).unwrap();
/// Default batch size in bytes (the client's own default, 1 MB).
const DEFAULT_BATCH_MAX_BYTES: NonZeroU32 = NonZeroU32::new(1_000_000).unwrap();
/// Default batch linger: 10 ms (the client's own default delay threshold).
const DEFAULT_BATCH_LINGER_MS: u64 = 10;
/// The most messages one Pub/Sub publish request may carry.
const MAX_BATCH_MESSAGES: u32 = 1_000;
/// The most bytes one Pub/Sub publish request may carry.
const MAX_BATCH_BYTES: u32 = 10_000_000;
/// The longest batch linger: one minute.
const MAX_BATCH_LINGER_MS: u64 = 60_000;
/// A `subscriber_check_interval_s` outside core's range.
const INTERVAL_RANGE: ConfigError = ConfigError::Value {
    option: "subscriber_check_interval_s",
    why: "must be 1 to 3600 seconds",
};
/// Default `subscriber_check_interval_s`.
const DEFAULT_SUBSCRIBER_CHECK_S: NonZeroU64 =
    NonZeroU64::new(DEFAULT_SUBSCRIBER_CHECK_INTERVAL.as_secs()).unwrap();
/// The environment variable the emulator's tooling sets (`host:port`).
const EMULATOR_HOST_ENV: &str = "PUBSUB_EMULATOR_HOST";

/// How the sink authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Auth {
    /// Google's Application Default Credentials (`GOOGLE_APPLICATION_CREDENTIALS`, the
    /// gcloud user credentials, or the metadata server). The default for `https://`.
    ApplicationDefault,
    /// No credentials: for the emulator. The default for `http://` endpoints.
    Anonymous,
}

/// The operator's `batch` keys, exactly as written in a sink file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchRepr {
    max_messages: Option<NonZeroU32>,
    max_bytes: Option<NonZeroU32>,
    /// `delay_ms` is the old name, still accepted.
    #[serde(alias = "delay_ms")]
    linger_ms: Option<u64>,
}

/// Batching through the client's publisher, for deliveries whose `ctx.batch` is set: a
/// batch is sent when it holds `max_messages` messages or `max_bytes` bytes, or `linger_ms`
/// after its first message. Always within Pub/Sub's request limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "BatchRepr")]
#[non_exhaustive]
pub struct PubSubBatch {
    pub(crate) max_messages: NonZeroU32,
    pub(crate) max_bytes: NonZeroU32,
    pub(crate) linger_ms: u64,
}

impl Default for PubSubBatch {
    fn default() -> Self {
        PubSubBatch {
            max_messages: DEFAULT_BATCH_MAX_MESSAGES,
            max_bytes: DEFAULT_BATCH_MAX_BYTES,
            linger_ms: DEFAULT_BATCH_LINGER_MS,
        }
    }
}

impl TryFrom<BatchRepr> for PubSubBatch {
    type Error = ConfigError;

    fn try_from(r: BatchRepr) -> Result<Self, ConfigError> {
        let batch = PubSubBatch {
            max_messages: r.max_messages.unwrap_or(DEFAULT_BATCH_MAX_MESSAGES),
            max_bytes: r.max_bytes.unwrap_or(DEFAULT_BATCH_MAX_BYTES),
            linger_ms: r.linger_ms.unwrap_or(DEFAULT_BATCH_LINGER_MS),
        };
        batch.checked()
    }
}

impl PubSubBatch {
    /// Send a batch when it holds this many messages (1 to 1000).
    pub fn with_max_messages(mut self, max: NonZeroU32) -> Result<Self, ConfigError> {
        self.max_messages = max;
        self.checked()
    }

    /// Send a batch when it holds this many bytes (at most 10,000,000).
    pub fn with_max_bytes(mut self, max: NonZeroU32) -> Result<Self, ConfigError> {
        self.max_bytes = max;
        self.checked()
    }

    /// Send a batch at the latest this long after its first message (whole ms, at most
    /// 60 s; a [`PubSubConfig`] also needs it below its timeout).
    pub fn with_linger(mut self, linger: Duration) -> Result<Self, ConfigError> {
        self.linger_ms = u64::try_from(linger.as_millis()).unwrap_or(u64::MAX);
        self.checked()
    }

    /// The batch size in messages.
    pub fn max_messages(&self) -> NonZeroU32 {
        self.max_messages
    }

    /// The batch size in bytes.
    pub fn max_bytes(&self) -> NonZeroU32 {
        self.max_bytes
    }

    /// How long a batch waits for more messages after its first.
    pub fn linger(&self) -> Duration {
        Duration::from_millis(self.linger_ms)
    }

    fn checked(self) -> Result<Self, ConfigError> {
        if self.max_messages.get() > MAX_BATCH_MESSAGES {
            return Err(ConfigError::Value {
                option: "batch.max_messages",
                why: "must be at most 1000 (Pub/Sub's request limit)",
            });
        }
        if self.max_bytes.get() > MAX_BATCH_BYTES {
            return Err(ConfigError::Value {
                option: "batch.max_bytes",
                why: "must be at most 10000000 (Pub/Sub's request limit)",
            });
        }
        if self.linger_ms > MAX_BATCH_LINGER_MS {
            return Err(ConfigError::Value {
                option: "batch.linger_ms",
                why: "must be at most 60000",
            });
        }
        Ok(self)
    }
}

/// The operator's keys, exactly as written in a sink file (`type` already removed).
#[derive(Deserialize)]
struct Repr {
    project: String,
    topic: String,
    endpoint: Option<String>,
    auth: Option<Auth>,
    ordering_key: Option<String>,
    max_message_bytes: Option<NonZeroUsize>,
    timeout_ms: Option<NonZeroU64>,
    batch: Option<PubSubBatch>,
    #[serde(default)]
    allow_insecure: bool,
    #[serde(default)]
    require_subscriber: bool,
    subscriber_check_interval_s: Option<NonZeroU64>,
    /// `format`, `cloudevents_type`, `[signing]`, `inline_max_bytes`.
    #[serde(flatten)]
    message: MessageOptions,
    /// Whatever no option took: refused (`flatten` cannot deny unknown fields itself).
    #[serde(flatten)]
    unknown: BTreeMap<String, IgnoredAny>,
}

/// A valid Pub/Sub sink configuration.
///
/// Parsed from a sink file (the keys of the crate README), or built with
/// [`PubSubConfig::new`] and the `with_*` methods, each of which refuses a bad value with a
/// [`ConfigError`] naming the option. It holds no secret: credentials come from Application
/// Default Credentials, never from this struct.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Repr")]
#[non_exhaustive]
pub struct PubSubConfig {
    pub(crate) project: String,
    pub(crate) topic: String,
    pub(crate) endpoint: Option<String>,
    pub(crate) auth: Option<Auth>,
    pub(crate) ordering_key: Option<KeyTemplate>,
    pub(crate) max_message_bytes: NonZeroUsize,
    pub(crate) timeout_ms: NonZeroU64,
    pub(crate) batch: PubSubBatch,
    pub(crate) allow_insecure: bool,
    pub(crate) require_subscriber: bool,
    pub(crate) subscriber_check_interval_s: NonZeroU64,
    pub(crate) message: MessageOptions,
}

impl TryFrom<Repr> for PubSubConfig {
    type Error = ConfigError;

    fn try_from(r: Repr) -> Result<Self, ConfigError> {
        if let Some(k) = r.unknown.keys().next() {
            return Err(ConfigError::UnknownField(k.clone()));
        }
        PubSubConfig {
            project: r.project,
            topic: r.topic,
            endpoint: r.endpoint,
            auth: r.auth,
            ordering_key: r.ordering_key.as_deref().map(parse_key).transpose()?,
            max_message_bytes: r.max_message_bytes.unwrap_or(DEFAULT_MAX_MESSAGE_BYTES),
            timeout_ms: r.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS),
            batch: r.batch.unwrap_or_default(),
            allow_insecure: r.allow_insecure,
            require_subscriber: r.require_subscriber,
            subscriber_check_interval_s: r
                .subscriber_check_interval_s
                .unwrap_or(DEFAULT_SUBSCRIBER_CHECK_S),
            message: r.message,
        }
        .checked()
    }
}

/// An ordering key template: `{tenant_id}` renders `""` without a tenant.
fn parse_key(template: &str) -> Result<KeyTemplate, ConfigError> {
    KeyTemplate::parse(template, AbsentTenant::Empty).map_err(ConfigError::OrderingKey)
}

impl PubSubConfig {
    /// `projects/<project>/topics/<topic>` on Google's endpoint with Application Default
    /// Credentials, every other option at its default.
    ///
    /// Project and topic must be non-empty, at most 255 bytes, without `/`, whitespace or
    /// control characters; the finer naming rules (length, leading letter, the `goog`
    /// prefix) are the server's, which answers `INVALID_ARGUMENT` (permanent).
    pub fn new(project: impl Into<String>, topic: impl Into<String>) -> Result<Self, ConfigError> {
        PubSubConfig {
            project: project.into(),
            topic: topic.into(),
            endpoint: None,
            auth: None,
            ordering_key: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            batch: PubSubBatch::default(),
            allow_insecure: false,
            require_subscriber: false,
            subscriber_check_interval_s: DEFAULT_SUBSCRIBER_CHECK_S,
            message: MessageOptions::new(),
        }
        .checked()
    }

    /// Use this endpoint (`http://127.0.0.1:8085` for the emulator): `http(s)://host[:port]`,
    /// no userinfo, query or path.
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Result<Self, ConfigError> {
        self.endpoint = Some(endpoint.into());
        self.checked()
    }

    /// Use the emulator named by `PUBSUB_EMULATOR_HOST` (`host:port`) when it is set:
    /// `http://<host:port>` with anonymous credentials. Unset or empty changes nothing.
    pub fn with_emulator_from_env(self) -> Result<Self, ConfigError> {
        match std::env::var(EMULATOR_HOST_ENV) {
            Ok(host) if !host.trim().is_empty() => self
                .with_auth(Auth::Anonymous)?
                .with_endpoint(format!("http://{}", host.trim())),
            _ => Ok(self),
        }
    }

    /// Set how to authenticate.
    pub fn with_auth(mut self, auth: Auth) -> Result<Self, ConfigError> {
        self.auth = Some(auth);
        self.checked()
    }

    /// Set the ordering key template: `{tenant_id}` (`""` without a tenant), `{source_id}`,
    /// `{id}`, `{dedupe_key}`, `{{`/`}}` for braces; without a placeholder it is a static
    /// key. A key that renders empty is not sent.
    pub fn with_ordering_key(mut self, template: &str) -> Result<Self, ConfigError> {
        self.ordering_key = Some(parse_key(template)?);
        Ok(self)
    }

    /// Set the message size limit (data + attributes + ordering key), at most 10,000,000.
    pub fn with_max_message_bytes(mut self, max: NonZeroUsize) -> Result<Self, ConfigError> {
        self.max_message_bytes = max;
        self.checked()
    }

    /// Set the publish and check timeout (whole ms, at least 1, at most one hour, above the
    /// batch linger).
    pub fn with_timeout(mut self, timeout: Duration) -> Result<Self, ConfigError> {
        self.timeout_ms = ankusa_sink_kit::timeout_ms(timeout);
        self.checked()
    }

    /// Accept Application Default Credentials over a cleartext `http://` endpoint that is
    /// not loopback, sending bearer tokens unencrypted (default false: refused with
    /// [`ConfigError::Insecure`]). Anonymous credentials (the emulator) send no token and
    /// need no such consent.
    pub fn with_allow_insecure(mut self, allow: bool) -> Result<Self, ConfigError> {
        self.allow_insecure = allow;
        self.checked()
    }

    /// Set the batching options (their linger must stay below the timeout).
    pub fn with_batch(mut self, batch: PubSubBatch) -> Result<Self, ConfigError> {
        self.batch = batch;
        self.checked()
    }

    /// Fail deliveries as [`Class::Config`](ankusa_sink_core::Class::Config) while the topic
    /// has no subscription (Pub/Sub accepts and drops what is published to such a topic).
    /// The sink lists the topic's subscriptions at most once per
    /// [`subscriber_check_interval`](Self::with_subscriber_check_interval): one
    /// `topics.subscriptions.list` admin call per interval per sink. Default false.
    pub fn with_require_subscriber(mut self, require: bool) -> Self {
        self.require_subscriber = require;
        self
    }

    /// How long the answer of a subscription listing is kept (whole seconds, 1 to 3600,
    /// default 60): a subscription created or deleted is seen within this time.
    pub fn with_subscriber_check_interval(
        mut self,
        interval: Duration,
    ) -> Result<Self, ConfigError> {
        let whole = subscriber_check_interval(interval).ok_or(INTERVAL_RANGE)?;
        self.subscriber_check_interval_s = NonZeroU64::new(whole.as_secs()).expect("at least 1 s");
        self.checked()
    }

    /// Set every message option at once, as the sink file's keys do:
    /// - `format`/`cloudevents_type`: CloudEvents (binary or structured) instead of Message
    ///   v1, the default; CloudEvents travel inline (no claim check).
    /// - `[signing]`: Standard Webhooks signing over the exact Message v1 bytes
    ///   (`webhook-id`, `webhook-timestamp`, `webhook-signature` as attributes); consumers check
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

    /// Whether deliveries require a subscription on the topic.
    pub fn require_subscriber(&self) -> bool {
        self.require_subscriber
    }

    /// How long the answer of a subscription listing is kept.
    pub fn subscriber_check_interval(&self) -> Duration {
        Duration::from_secs(self.subscriber_check_interval_s.get())
    }

    /// The project id.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The short topic id.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The ordering key template, if any.
    pub fn ordering_key(&self) -> Option<&KeyTemplate> {
        self.ordering_key.as_ref()
    }

    /// The message size limit (data + attributes + ordering key).
    pub fn max_message_bytes(&self) -> NonZeroUsize {
        self.max_message_bytes
    }

    /// The batching options.
    pub fn batch(&self) -> &PubSubBatch {
        &self.batch
    }

    /// Whether [`with_allow_insecure`](Self::with_allow_insecure) accepted tokens in clear.
    pub fn allow_insecure(&self) -> bool {
        self.allow_insecure
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

    /// Whether bearer tokens would cross the network unencrypted: Application Default
    /// Credentials with an `http://` endpoint whose host is not loopback.
    pub fn sends_tokens_in_clear(&self) -> bool {
        self.auth() == Auth::ApplicationDefault
            && url::Url::parse(self.endpoint()).is_ok_and(|u| {
                u.scheme() == "http" && !u.host_str().is_some_and(ankusa_sink_kit::is_loopback_host)
            })
    }

    /// `self` if every value holds, else the first refusal (the ordering key and the
    /// batch's own ranges were checked when they were parsed).
    fn checked(self) -> Result<Self, ConfigError> {
        validate_segment("project", &self.project)?;
        validate_segment("topic", &self.topic)?;
        if let Some(raw) = &self.endpoint {
            validate_endpoint(raw)?;
        }
        if self.sends_tokens_in_clear() && !self.allow_insecure {
            return Err(ConfigError::Insecure);
        }
        if self.max_message_bytes > DEFAULT_MAX_MESSAGE_BYTES {
            return Err(ConfigError::Value {
                option: "max_message_bytes",
                why: "must be at most 10000000 (Pub/Sub's message limit)",
            });
        }
        if self.timeout_ms.get() > MAX_TIMEOUT_MS {
            return Err(ConfigError::Value {
                option: "timeout_ms",
                why: "must be at most 3600000 (one hour)",
            });
        }
        if subscriber_check_interval(self.subscriber_check_interval()).is_none() {
            return Err(INTERVAL_RANGE);
        }
        if self.batch.linger_ms >= self.timeout_ms.get() {
            return Err(ConfigError::Value {
                option: "batch.linger_ms",
                why: "must be less than timeout_ms (a batched delivery would always time out)",
            });
        }
        Ok(self)
    }
}

/// Never echoes the endpoint: a mistyped one might carry a secret.
fn validate_endpoint(raw: &str) -> Result<(), ConfigError> {
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
    /// A key the sink does not know.
    #[error("unknown field `{0}`")]
    UnknownField(String),
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
    OrderingKey(TemplateError),
    /// `auth = application_default` with an `http://` endpoint that is not loopback:
    /// bearer tokens would cross the network unencrypted.
    #[error(
        "endpoint is http:// on a host that is not loopback and auth is application_default: \
         bearer tokens would be sent unencrypted; use https://, auth = anonymous (an \
         emulator), or set allow_insecure = true to accept that"
    )]
    Insecure,
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sink_core::Envelope;

    fn valid() -> PubSubConfig {
        PubSubConfig::new("proj", "hooks").unwrap()
    }

    fn parse(v: serde_json::Value) -> Result<PubSubConfig, serde_json::Error> {
        serde_json::from_value(v)
    }

    #[test]
    fn defaults() {
        let c = valid();
        assert_eq!(c.endpoint(), GOOGLE_ENDPOINT);
        assert_eq!(c.auth(), Auth::ApplicationDefault);
        assert_eq!(c.topic_name(), "projects/proj/topics/hooks");
        assert_eq!(c.message().inline_max_bytes().get(), 65_536);
        assert_eq!(c.max_message_bytes.get(), 10_000_000);
        assert_eq!(c.timeout(), Duration::from_secs(10));
        assert_eq!(c.batch, PubSubBatch::default());
        assert_eq!(c.batch.linger(), Duration::from_millis(10));
        assert!(c.ordering_key.is_none());
        let e = c.with_endpoint("http://127.0.0.1:8085/").unwrap();
        assert_eq!(e.endpoint(), "http://127.0.0.1:8085");
        assert_eq!(e.auth(), Auth::Anonymous);
        assert_eq!(
            e.with_auth(Auth::ApplicationDefault).unwrap().auth(),
            Auth::ApplicationDefault
        );
    }

    #[test]
    fn serde_shape_with_defaults() {
        let c = parse(serde_json::json!({
            "project": "p", "topic": "t", "endpoint": "http://127.0.0.1:8085",
            "ordering_key": "{tenant_id}", "batch": {"max_messages": 10}
        }))
        .unwrap();
        assert_eq!(c.batch.max_messages.get(), 10);
        assert_eq!(c.batch.max_bytes, DEFAULT_BATCH_MAX_BYTES);
        assert_eq!(c.batch.linger_ms, DEFAULT_BATCH_LINGER_MS);
        assert_eq!(
            c.ordering_key.as_ref().map(KeyTemplate::as_str),
            Some("{tenant_id}")
        );
        assert_eq!(
            c.ordering_key.as_ref().map(KeyTemplate::absent_tenant),
            Some(AbsentTenant::Empty)
        );
        assert!(parse(serde_json::json!({"project": "p", "topic": "t", "nope": 1})).is_err());
        assert!(
            parse(serde_json::json!({"project": "p", "topic": "t", "batch": {"nope": 1}})).is_err()
        );
        assert!(
            parse(serde_json::json!({"project": "p", "topic": "t", "inline_max_bytes": 0}))
                .is_err()
        );
    }

    #[test]
    fn require_subscriber_and_its_interval() {
        let c = valid();
        assert!(!c.require_subscriber());
        assert_eq!(c.subscriber_check_interval(), Duration::from_secs(60));
        let c = parse(serde_json::json!({
            "project": "p", "topic": "t", "require_subscriber": true,
            "subscriber_check_interval_s": 5
        }))
        .unwrap();
        assert!(c.require_subscriber());
        assert_eq!(c.subscriber_check_interval(), Duration::from_secs(5));
        for bad in [0, 3_601] {
            let e = parse(serde_json::json!({
                "project": "p", "topic": "t", "subscriber_check_interval_s": bad
            }))
            .unwrap_err();
            assert!(
                bad == 0 || e.to_string().contains("subscriber_check_interval_s"),
                "{e}"
            );
        }
        let e = valid()
            .with_subscriber_check_interval(Duration::from_millis(500))
            .unwrap_err();
        assert!(e.to_string().contains("subscriber_check_interval_s"), "{e}");
        assert!(
            valid()
                .with_subscriber_check_interval(Duration::from_secs(3_600))
                .is_ok()
        );
    }

    #[test]
    fn batch_linger_ms_and_its_old_name_delay_ms() {
        let c = parse(serde_json::json!({
            "project": "p", "topic": "t", "batch": {"linger_ms": 25}
        }))
        .unwrap();
        assert_eq!(c.batch.linger(), Duration::from_millis(25));
        let old = parse(serde_json::json!({
            "project": "p", "topic": "t", "batch": {"delay_ms": 25}
        }))
        .unwrap();
        assert_eq!(old, c);
        let e = parse(serde_json::json!({
            "project": "p", "topic": "t", "timeout_ms": 50, "batch": {"delay_ms": 50}
        }))
        .unwrap_err();
        assert!(e.to_string().contains("batch.linger_ms"), "{e}");
    }

    #[test]
    fn bad_values_are_refused_with_the_option_named() {
        let n32 = |n| NonZeroU32::new(n).unwrap();
        let cases: Vec<(Result<PubSubConfig, ConfigError>, &str)> = vec![
            (PubSubConfig::new("", "t"), "project"),
            (PubSubConfig::new("p", ""), "topic"),
            (PubSubConfig::new("p", "projects/p/topics/t"), "topic"),
            (PubSubConfig::new("p x", "t"), "project"),
            (PubSubConfig::new("p", "t".repeat(256)), "topic"),
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
                PubSubBatch::default()
                    .with_max_messages(n32(1001))
                    .and_then(|b| valid().with_batch(b)),
                "batch.max_messages",
            ),
            (
                PubSubBatch::default()
                    .with_max_bytes(n32(10_000_001))
                    .and_then(|b| valid().with_batch(b)),
                "batch.max_bytes",
            ),
            (
                PubSubBatch::default()
                    .with_linger(Duration::from_millis(60_001))
                    .and_then(|b| valid().with_batch(b)),
                "batch.linger_ms",
            ),
            (
                valid().with_timeout(Duration::from_secs(7200)),
                "timeout_ms",
            ),
            (
                valid()
                    .with_timeout(Duration::from_millis(50))
                    .and_then(|c| {
                        c.with_batch(PubSubBatch::default().with_linger(Duration::from_millis(50))?)
                    }),
                "batch.linger_ms",
            ),
            (
                valid().with_timeout(Duration::from_millis(10)),
                "batch.linger_ms",
            ),
        ];
        for (c, option) in cases {
            let e = c.unwrap_err();
            assert!(e.to_string().contains(option), "{option}: {e}");
        }
        // The same refusals from a sink file.
        let e = parse(serde_json::json!({"project": "p", "topic": "a/b"})).unwrap_err();
        assert!(e.to_string().contains("topic"), "{e}");
        let e = parse(serde_json::json!({
            "project": "p", "topic": "t", "batch": {"max_messages": 1001}
        }))
        .unwrap_err();
        assert!(e.to_string().contains("batch.max_messages"), "{e}");
    }

    #[test]
    fn endpoint_userinfo_is_refused_and_never_echoed() {
        let e = valid()
            .with_endpoint("https://user:s3cr3t@pubsub.example")
            .unwrap_err();
        assert!(e.to_string().contains("userinfo"), "{e}");
        assert!(!e.to_string().contains("s3cr3t"));
        let e = valid()
            .with_endpoint("https://h.example/?token=s3cr3t")
            .unwrap_err();
        assert!(!e.to_string().contains("s3cr3t"));
    }

    #[test]
    fn application_default_over_cleartext_needs_allow_insecure() {
        let remote = || valid().with_endpoint("http://pubsub.internal.example:8085");
        let e = remote()
            .unwrap()
            .with_auth(Auth::ApplicationDefault)
            .unwrap_err();
        assert_eq!(e, ConfigError::Insecure);
        assert!(e.to_string().contains("allow_insecure"), "{e}");
        let adc = valid()
            .with_allow_insecure(true)
            .and_then(|c| c.with_endpoint("http://pubsub.internal.example:8085"))
            .and_then(|c| c.with_auth(Auth::ApplicationDefault))
            .unwrap();
        assert!(adc.sends_tokens_in_clear());
        assert_eq!(adc.with_allow_insecure(false), Err(ConfigError::Insecure));
        // No token to leak: anonymous (the default for http://, and the emulator's).
        assert!(!remote().unwrap().sends_tokens_in_clear());
        // TLS, and loopback (an emulator or a local proxy on this machine).
        for local in [
            "http://127.0.0.1:8085",
            "http://localhost:8085",
            "http://[::1]:8085",
        ] {
            let c = valid()
                .with_endpoint(local)
                .and_then(|c| c.with_auth(Auth::ApplicationDefault))
                .unwrap();
            assert!(!c.sends_tokens_in_clear(), "{local}");
        }
        let c = parse(serde_json::json!({
            "project": "p", "topic": "t", "endpoint": "http://10.0.0.7:8085",
            "auth": "application_default", "allow_insecure": true
        }))
        .unwrap();
        assert!(c.allow_insecure());
        let e = parse(serde_json::json!({
            "project": "p", "topic": "t", "endpoint": "http://10.0.0.7:8085",
            "auth": "application_default"
        }))
        .unwrap_err();
        assert!(e.to_string().contains("allow_insecure"), "{e}");
        assert!(!valid().allow_insecure());
    }

    #[test]
    fn ordering_key_templates() {
        let env = Envelope::builder("h1", "src", "")
            .tenant_id("acme")
            .build()
            .unwrap();
        let tenantless = Envelope::builder("h2", "src", "").build().unwrap();
        let key = |t: &str| valid().with_ordering_key(t).unwrap().ordering_key.unwrap();
        let k = key("{tenant_id}/{source_id}:{{x}}");
        assert_eq!(k.render(&env), "acme/src:{x}");
        assert_eq!(k.render(&tenantless), "/src:{x}");
        assert_eq!(key("fixed").render(&env), "fixed");
        assert_eq!(key("{dedupe_key}").render(&env), "");
        assert_eq!(key("{id}").render(&env), "h1");
        assert!(valid().with_ordering_key("a}b").is_err());
    }
}

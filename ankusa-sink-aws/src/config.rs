//! Options of the SQS, SNS, Kinesis and EventBridge sinks. Invalid values are a
//! [`ConfigError`] when the config is built or deserialized, never at the first delivery.
//!
//! [`AwsOptions`] (with [`StaticCredentials`] and [`AwsBatch`]) are what the services
//! share; [`SqsConfig`] and [`SnsConfig`] (`destination.rs`), [`KinesisConfig`] and
//! [`EventBridgeConfig`] (`streams.rs`) are the always-valid configs built from a
//! destination and those options; `sdk.rs` turns one into the SDK's config.

mod destination;
mod resolved;
mod sdk;
mod streams;

pub use destination::{SnsConfig, SqsConfig};
#[cfg(feature = "kinesis")]
pub(crate) use streams::KINESIS_MAX_PARTITION_KEY_CHARS;
pub use streams::{EventBridgeConfig, KinesisConfig};

use ankusa_message::MessageOptions;
use ankusa_sink_core::Secret;
use serde::Deserialize;
use std::num::{NonZeroU64, NonZeroUsize};
use std::time::Duration;

/// SQS: the largest message, body plus attributes (1 MiB).
pub const SQS_MAX_MESSAGE_BYTES: usize = 1_048_576;
/// SQS: the largest `SendMessageBatch` request, all bodies plus attributes (1 MiB).
pub const SQS_MAX_BATCH_BYTES: usize = 1_048_576;
/// SNS: the default largest message and `PublishBatch` request (256 KiB). A topic whose
/// `MaximumMessageSize` is raised (up to 1 MiB) takes more: set
/// [`AwsOptions::with_max_message_bytes`].
pub const SNS_MAX_MESSAGE_BYTES: usize = 262_144;
/// The most any AWS message may be (1 MiB).
pub const AWS_MAX_MESSAGE_BYTES: usize = 1_048_576;
/// Kinesis: the largest record, data plus partition key (1 MiB).
pub const KINESIS_MAX_RECORD_BYTES: usize = 1_048_576;
/// Kinesis: the largest `PutRecords` request, all data plus partition keys (5 MiB).
pub const KINESIS_MAX_BATCH_BYTES: usize = 5 * 1_048_576;
/// Kinesis: the most records in one `PutRecords` request.
pub const KINESIS_MAX_BATCH_RECORDS: usize = 500;
/// EventBridge: the largest `PutEvents` entry, and request (256 KiB), counted as AWS
/// counts it (`Detail`, `Source`, `DetailType`).
pub const EVENTBRIDGE_MAX_ENTRY_BYTES: usize = 262_144;

/// An invalid option. Names the option, never a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A required value is empty.
    #[error("{0} must not be empty")]
    Empty(&'static str),
    /// A URL option is not an absolute http(s) URL without userinfo, query or fragment.
    #[error("{field} is not a usable URL ({why}): {url}")]
    Url {
        /// The option.
        field: &'static str,
        /// What is wrong.
        why: &'static str,
        /// The URL, redacted.
        url: String,
    },
    /// The topic ARN is not `arn:<partition>:sns:<region>:<account>:<name>`.
    #[error("topic_arn is not an SNS topic ARN: {0}")]
    TopicArn(String),
    /// A value is over its limit.
    #[error("{field} is {value}, over the limit of {max}")]
    TooLarge {
        /// The option.
        field: &'static str,
        /// Its value.
        value: usize,
        /// The limit.
        max: usize,
    },
    /// The inline threshold would make messages larger than the message limit.
    #[error(
        "inline_max_bytes {inline} encodes to about {encoded} bytes, over max_message_bytes \
         {max}: lower inline_max_bytes (the claim check carries larger bodies)"
    )]
    InlineOverLimit {
        /// `inline_max_bytes`.
        inline: usize,
        /// Its base64 size plus the message's fields.
        encoded: usize,
        /// `max_message_bytes`.
        max: usize,
    },
    /// A value outside its range.
    #[error("{field} must be {range}")]
    Range {
        /// The option.
        field: &'static str,
        /// The allowed range, in words.
        range: &'static str,
    },
    /// An option this sink does not have (a typo?).
    #[error("unknown option `{0}`")]
    UnknownOption(String),
    /// An `http://` endpoint or queue URL on a host that is not loopback: every request
    /// would carry the access key id and any session token unencrypted.
    #[error(
        "{0}: http:// sends the credentials' key id and session token unencrypted to a host \
         that is not loopback; use https://, or set allow_insecure = true to accept that"
    )]
    Insecure(&'static str),
    /// No region in the options, the queue URL or ARN, or the environment.
    #[error("no AWS region: set `region` (or AWS_REGION)")]
    NoRegion,
    /// A value the service would refuse.
    #[error("{field} is invalid: {why}")]
    Invalid {
        /// The option.
        field: &'static str,
        /// What is wrong, in words.
        why: &'static str,
    },
    /// A shared option this sink cannot honour (refused, never ignored).
    #[error("`{option}` is not supported by the {sink} sink: {why}")]
    Unsupported {
        /// The option.
        option: &'static str,
        /// The sink type (`kinesis`, `eventbridge`).
        sink: &'static str,
        /// Why it cannot be honoured.
        why: &'static str,
    },
    /// `partition_key_template` does not parse.
    #[error("partition_key_template: {0}")]
    PartitionKeyTemplate(ankusa_message::template::TemplateError),
}

/// Static credentials. Every part is a [`Secret`]: `Debug` shows none of them.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct StaticCredentials {
    pub(crate) access_key_id: Secret,
    pub(crate) secret_access_key: Secret,
    #[serde(default)]
    pub(crate) session_token: Option<Secret>,
}

impl StaticCredentials {
    /// Long-term credentials (checked when a config is built: neither may be empty).
    pub fn new(access_key_id: impl Into<Secret>, secret_access_key: impl Into<Secret>) -> Self {
        StaticCredentials {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token: None,
        }
    }
    /// Add a session token (temporary credentials).
    pub fn with_session_token(mut self, token: impl Into<Secret>) -> Self {
        self.session_token = Some(token.into());
        self
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.access_key_id.expose().is_empty() {
            return Err(ConfigError::Empty("credentials.access_key_id"));
        }
        if self.secret_access_key.expose().is_empty() {
            return Err(ConfigError::Empty("credentials.secret_access_key"));
        }
        Ok(())
    }
}

/// Batching limits of the AWS sinks (used when [`AwsOptions::with_batching`] is on and a
/// delivery's `ctx.batch` is set): the `batch` table of a sink file. Entries per request
/// (10) and bytes per request (the service's) are fixed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct AwsBatch {
    /// `linger_ms`: the longest a message waits for companions. Default 10.
    pub(crate) linger_ms: u64,
    /// Messages waiting in the batcher, all tenants. Default 10,000.
    pub(crate) max_queued: NonZeroUsize,
    /// Messages of one tenant waiting in the batcher. Default 2,500.
    pub(crate) max_queued_per_tenant: NonZeroUsize,
    /// The most batch requests in flight at once (requests, not messages). Default 16.
    /// The batcher starts with one and grows toward it while requests answer within a
    /// quarter of `timeout_ms`; a slower or throttled answer cuts it by a quarter.
    pub(crate) max_requests: NonZeroUsize,
}

impl Default for AwsBatch {
    fn default() -> Self {
        AwsBatch {
            linger_ms: 10,
            max_queued: NonZeroUsize::new(10_000).expect("non-zero"),
            max_queued_per_tenant: NonZeroUsize::new(2_500).expect("non-zero"),
            max_requests: NonZeroUsize::new(16).expect("non-zero"),
        }
    }
}

impl AwsBatch {
    /// The longest a message waits for companions (`linger_ms`).
    pub fn linger(&self) -> Duration {
        Duration::from_millis(self.linger_ms)
    }
    /// Set the linger (whole ms).
    pub fn with_linger(mut self, linger: Duration) -> Self {
        self.linger_ms = u64::try_from(linger.as_millis()).unwrap_or(u64::MAX);
        self
    }
    /// Set the queue cap (`max_queued`).
    pub fn with_max_queued(mut self, n: NonZeroUsize) -> Self {
        self.max_queued = n;
        self
    }
    /// Set one tenant's share of the queue (`max_queued_per_tenant`).
    pub fn with_max_queued_per_tenant(mut self, n: NonZeroUsize) -> Self {
        self.max_queued_per_tenant = n;
        self
    }
    /// Set the requests in flight (`max_requests`).
    pub fn with_max_requests(mut self, n: NonZeroUsize) -> Self {
        self.max_requests = n;
        self
    }
}

/// What SQS and SNS sinks share; checked when an [`SqsConfig`] or [`SnsConfig`] is built.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct AwsOptions {
    /// The region. Default: from the queue URL or topic ARN, else the standard chain
    /// (`AWS_REGION`, profile).
    pub(crate) region: Option<String>,
    /// Endpoint override (an emulator, a VPC endpoint). SQS default: the queue URL's
    /// origin when it is not an `amazonaws.com` host, else the SDK's endpoint.
    pub(crate) endpoint: Option<String>,
    /// Static credentials. Default: the standard chain (environment, profile, web
    /// identity, ECS, IMDS).
    pub(crate) credentials: Option<StaticCredentials>,
    /// Message group id. Default on FIFO destinations: `<tenant>/<source>` (`/<source>`
    /// with no tenant); none on standard ones.
    pub(crate) message_group_id: Option<String>,
    /// The largest message, body plus attributes, checked before sending. Default: the
    /// service's limit (SQS 1 MiB, SNS 256 KiB).
    pub(crate) max_message_bytes: Option<NonZeroUsize>,
    /// Connect timeout, and the bound on one call. Default 5,000 ms.
    pub(crate) timeout_ms: NonZeroU64,
    /// Whether the sink batches deliveries whose `ctx.batch` is set. Default true.
    pub(crate) batching: bool,
    /// Batching limits.
    pub(crate) batch: AwsBatch,
    /// Accept an `http://` endpoint (or SQS queue URL) on a host that is not loopback.
    /// Default false: refused, since every request carries the access key id and any
    /// session token in the clear.
    pub(crate) allow_insecure: bool,
    /// `format` and `cloudevents_type` (SQS and SNS only: Kinesis and EventBridge refuse
    /// them), `[signing]` and `inline_max_bytes` (bodies up to it travel inline, larger
    /// ones by claim; default 64 KiB). A sink file's keys are read by each sink's own
    /// config, flattened beside these options.
    #[serde(skip)]
    pub(crate) message: MessageOptions,
}

impl Default for AwsOptions {
    fn default() -> Self {
        AwsOptions {
            region: None,
            endpoint: None,
            credentials: None,
            message_group_id: None,
            max_message_bytes: None,
            timeout_ms: NonZeroU64::new(5_000).expect("non-zero"),
            batching: true,
            batch: AwsBatch::default(),
            allow_insecure: false,
            message: MessageOptions::new(),
        }
    }
}

impl AwsOptions {
    /// Where the credentials come from, as [`Capabilities::with_auth`] names it.
    ///
    /// [`Capabilities::with_auth`]: ankusa_sink_core::Capabilities::with_auth
    pub(crate) fn credential_source(&self) -> &'static str {
        if self.credentials.is_some() {
            "static_credentials"
        } else {
            "default_credential_chain"
        }
    }

    /// A batching sink's limits: `max_messages` and `max_bytes` per request, these options'
    /// linger.
    pub(crate) fn batch_limits(
        &self,
        max_messages: usize,
        max_bytes: usize,
    ) -> ankusa_sink_core::BatchLimits {
        ankusa_sink_core::BatchLimits {
            max_messages: max_messages as u64,
            max_bytes: max_bytes as u64,
            linger_ms: u64::try_from(self.batch().linger().as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// Set the region.
    pub fn with_region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }
    /// Accept an `http://` endpoint or queue URL on a host that is not loopback (the
    /// `allow_insecure` key; default `false`: such a config is refused when built).
    pub fn with_allow_insecure(mut self, allow: bool) -> Self {
        self.allow_insecure = allow;
        self
    }
    /// Whether an `http://` endpoint on a host that is not loopback is accepted.
    pub fn allow_insecure(&self) -> bool {
        self.allow_insecure
    }
    /// Set the endpoint override.
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }
    /// Use static credentials.
    pub fn with_credentials(mut self, credentials: StaticCredentials) -> Self {
        self.credentials = Some(credentials);
        self
    }
    /// Set a fixed message group id.
    pub fn with_message_group_id(mut self, group: impl Into<String>) -> Self {
        self.message_group_id = Some(group.into());
        self
    }
    /// Set the message size limit.
    pub fn with_max_message_bytes(mut self, n: NonZeroUsize) -> Self {
        self.max_message_bytes = Some(n);
        self
    }
    /// Set the timeout (rounded down to whole ms, at least 1 ms).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout_ms = ankusa_sink_kit::timeout_ms(timeout);
        self
    }
    /// Turn batching on or off.
    pub fn with_batching(mut self, on: bool) -> Self {
        self.batching = on;
        self
    }
    /// Set the batching limits.
    pub fn with_batch(mut self, batch: AwsBatch) -> Self {
        self.batch = batch;
        self
    }
    /// Set every message option at once, as the sink file's keys do:
    /// - `format`/`cloudevents_type`: CloudEvents (binary or structured) instead of Message
    ///   v1, the default. SQS and SNS only: Kinesis and EventBridge refuse it when built.
    /// - `[signing]`: Standard Webhooks signing over the exact Message v1 body
    ///   (`webhook-id`, `webhook-timestamp`, `webhook-signature` message attributes);
    ///   consumers check it with `ankusa_message::verify`. SQS and SNS only, as `format`.
    /// - `inline_max_bytes` (default 64 KiB): bodies over it travel by `ctx.claim`.
    pub fn with_message(mut self, message: MessageOptions) -> Self {
        self.message = message;
        self
    }
    /// The message options.
    pub fn message(&self) -> &MessageOptions {
        &self.message
    }
    /// The timeout as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.get())
    }
    /// Whether batching is on.
    pub fn batching(&self) -> bool {
        self.batching
    }
    /// The batching limits.
    pub fn batch(&self) -> &AwsBatch {
        &self.batch
    }

    /// Check the shared options against the service's message limit; answers the
    /// resolved `max_message_bytes`.
    fn validate(&self, service_max: usize) -> Result<usize, ConfigError> {
        if let Some(r) = &self.region
            && r.trim().is_empty()
        {
            return Err(ConfigError::Empty("region"));
        }
        if let Some(e) = &self.endpoint {
            let url = destination::check_url("endpoint", e)?;
            destination::check_cleartext("endpoint", &url, self.allow_insecure)?;
        }
        if let Some(c) = &self.credentials {
            c.validate()?;
        }
        if let Some(g) = &self.message_group_id {
            if g.is_empty() {
                return Err(ConfigError::Empty("message_group_id"));
            }
            if g.len() > 128 {
                return Err(ConfigError::TooLarge {
                    field: "message_group_id",
                    value: g.len(),
                    max: 128,
                });
            }
        }
        let max = self
            .max_message_bytes
            .map_or(service_max, NonZeroUsize::get);
        if max > AWS_MAX_MESSAGE_BYTES {
            return Err(ConfigError::TooLarge {
                field: "max_message_bytes",
                value: max,
                max: AWS_MAX_MESSAGE_BYTES,
            });
        }
        let inline = self.message.inline_max_bytes().get();
        // base64 grows by 4/3; the other fields and attributes fit in 4 KiB unless the
        // forwarded headers are large (those are checked per message).
        let encoded = inline.div_ceil(3) * 4 + 4096;
        if encoded > max {
            return Err(ConfigError::InlineOverLimit {
                inline,
                encoded,
                max,
            });
        }
        Ok(max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_message::cloudevents::{self, CloudEvents, Mode};

    fn opts() -> AwsOptions {
        AwsOptions::default().with_region("us-east-1")
    }

    #[test]
    fn shared_options_are_checked_against_the_service_limit() {
        let err = opts()
            .with_message(
                MessageOptions::new().with_inline_max_bytes(NonZeroUsize::new(1_000_000).unwrap()),
            )
            .validate(SQS_MAX_MESSAGE_BYTES)
            .unwrap_err();
        assert!(matches!(err, ConfigError::InlineOverLimit { .. }), "{err}");
        let err = opts()
            .with_max_message_bytes(NonZeroUsize::new(2 << 20).unwrap())
            .validate(SQS_MAX_MESSAGE_BYTES)
            .unwrap_err();
        assert!(err.to_string().contains("max_message_bytes"), "{err}");
        let err = opts()
            .with_message_group_id("")
            .validate(SQS_MAX_MESSAGE_BYTES)
            .unwrap_err();
        assert_eq!(err, ConfigError::Empty("message_group_id"));
        let err = opts()
            .with_credentials(StaticCredentials::new("AKIA", ""))
            .validate(SQS_MAX_MESSAGE_BYTES)
            .unwrap_err();
        assert_eq!(err, ConfigError::Empty("credentials.secret_access_key"));
        assert_eq!(
            opts().validate(SNS_MAX_MESSAGE_BYTES),
            Ok(SNS_MAX_MESSAGE_BYTES)
        );
    }

    #[test]
    fn cloudevents_keys_are_checked_when_the_config_is_built() {
        let sqs = |keys: serde_json::Value| {
            let mut v = serde_json::json!({
                "queue_url": "http://127.0.0.1:4566/000000000000/q", "region": "us-east-1"
            });
            v.as_object_mut()
                .unwrap()
                .extend(keys.as_object().unwrap().clone());
            serde_json::from_value::<SqsConfig>(v).map_err(|e| e.to_string())
        };
        let c = sqs(serde_json::json!({
            "format": "cloudevents-structured", "cloudevents_type": "t.x"
        }))
        .unwrap();
        let ce = c.options().message().cloudevents().unwrap();
        assert_eq!((ce.mode(), ce.event_type()), (Mode::Structured, "t.x"));
        let c = sqs(serde_json::json!({"format": "cloudevents"})).unwrap();
        assert_eq!(
            c.options().message().cloudevents().unwrap().event_type(),
            cloudevents::DEFAULT_TYPE
        );
        assert_eq!(
            sqs(serde_json::json!({}))
                .unwrap()
                .options()
                .message()
                .cloudevents(),
            None
        );
        let e = sqs(serde_json::json!({"format": "cloudevents", "cloudevents_type": "a b"}))
            .unwrap_err();
        assert!(e.contains("cloudevents_type"), "{e}");
        assert!(sqs(serde_json::json!({"format": "cloudevent"})).is_err());
        // The setter writes the same options back.
        let binary = CloudEvents::new(Mode::Binary, "t").unwrap();
        let o = opts().with_message(MessageOptions::new().with_cloudevents(Some(binary.clone())));
        assert_eq!(o.message().cloudevents(), Some(&binary));
        let m = o.message().clone().with_cloudevents(None);
        assert_eq!(o.with_message(m).message().cloudevents(), None);
    }

    #[test]
    fn an_http_endpoint_on_a_remote_host_needs_allow_insecure() {
        let remote = |extra: serde_json::Value| {
            let mut v = serde_json::json!({"endpoint": "http://aws-proxy.example:4566"});
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let o: AwsOptions = serde_json::from_value(v).unwrap();
            SnsConfig::new("arn:aws:sns:us-east-1:123456789012:t", o)
        };
        assert_eq!(
            remote(serde_json::json!({})).unwrap_err(),
            ConfigError::Insecure("endpoint")
        );
        assert!(remote(serde_json::json!({"allow_insecure": true})).is_ok());
        // A remote http:// queue URL is the SQS endpoint: the same rule.
        let queue = "http://sqs-proxy.example:9324/000000000000/q";
        assert_eq!(
            SqsConfig::new(queue, AwsOptions::default()).unwrap_err(),
            ConfigError::Insecure("queue_url")
        );
        assert!(SqsConfig::new(queue, AwsOptions::default().with_allow_insecure(true)).is_ok());
        let e = SqsConfig::new(queue, AwsOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("queue_url:") && e.contains("allow_insecure"),
            "{e}"
        );
        // https, loopback and AWS's own hosts pass without it.
        for ok in [
            "https://sqs-proxy.example/000000000000/q",
            "http://127.0.0.1:4566/000000000000/q",
            "http://localhost:4566/000000000000/q",
            "https://sqs.us-east-1.amazonaws.com/000000000000/q",
        ] {
            assert!(SqsConfig::new(ok, AwsOptions::default()).is_ok(), "{ok}");
        }
        for ty in ["kinesis", "eventbridge"] {
            let o = AwsOptions::default().with_endpoint("http://10.0.0.7:4566");
            let e = match ty {
                "kinesis" => KinesisConfig::new("s", o.clone()).map(drop),
                _ => EventBridgeConfig::new("src", o.clone()).map(drop),
            };
            assert_eq!(e.unwrap_err(), ConfigError::Insecure("endpoint"), "{ty}");
        }
    }

    #[test]
    fn credentials_are_secrets_and_batch_keys_keep_their_names() {
        let o: AwsOptions = serde_json::from_value(serde_json::json!({
            "timeout_ms": 250,
            "batch": {"linger_ms": 5, "max_requests": 2},
            "credentials": {"access_key_id": "AKIAX", "secret_access_key": "s3cr3t-value",
                            "session_token": "t0ken"}
        }))
        .unwrap();
        assert_eq!(o.timeout(), Duration::from_millis(250));
        assert_eq!(o.batch().linger(), Duration::from_millis(5));
        assert_eq!(o.batch().max_requests.get(), 2);
        let dbg = format!("{o:?}");
        for secret in ["s3cr3t-value", "AKIAX", "t0ken"] {
            assert!(!dbg.contains(secret), "{dbg}");
        }
        let c = o.credentials.unwrap();
        assert_eq!(c.secret_access_key.expose(), "s3cr3t-value");
        assert!(
            serde_json::from_value::<AwsBatch>(serde_json::json!({"delay_ms": 5})).is_err(),
            "unknown batch keys are refused"
        );
    }
}

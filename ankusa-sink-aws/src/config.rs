//! Options of the SQS and SNS sinks. Invalid values are a [`ConfigError`] when the config is
//! built or deserialized, never at the first delivery.

use ankusa_sink_core::{DEFAULT_INLINE_MAX_BYTES, REDACTED, redact_url, redact_url_keep_path};
use serde::Deserialize;
use serde::de::IgnoredAny;
use std::collections::BTreeMap;
use std::fmt;
use std::num::{NonZeroU64, NonZeroUsize};
use std::time::Duration;

/// SQS: the largest message, body plus attributes (1 MiB).
pub const SQS_MAX_MESSAGE_BYTES: usize = 1_048_576;
/// SQS: the largest `SendMessageBatch` request, all bodies plus attributes (1 MiB).
pub const SQS_MAX_BATCH_BYTES: usize = 1_048_576;
/// SNS: the default largest message and `PublishBatch` request (256 KiB). A topic whose
/// `MaximumMessageSize` is raised (up to 1 MiB) takes more: set
/// [`AwsOptions::max_message_bytes`].
pub const SNS_MAX_MESSAGE_BYTES: usize = 262_144;
/// The most any AWS message may be (1 MiB).
pub const AWS_MAX_MESSAGE_BYTES: usize = 1_048_576;

/// An invalid option.
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
    /// An option this sink does not have (a typo?).
    #[error("unknown option `{0}`")]
    UnknownOption(String),
    /// No region in the options, the queue URL or ARN, or the environment.
    #[error("no AWS region: set `region` (or AWS_REGION)")]
    NoRegion,
}

/// Static credentials. `Debug` shows none of them.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StaticCredentials {
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// The session token of temporary credentials.
    #[serde(default)]
    pub session_token: Option<String>,
}

impl StaticCredentials {
    /// Long-term credentials.
    pub fn new(access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        StaticCredentials {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token: None,
        }
    }
    /// Add a session token (temporary credentials).
    pub fn with_session_token(mut self, token: impl Into<String>) -> Self {
        self.session_token = Some(token.into());
        self
    }
}

impl fmt::Debug for StaticCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaticCredentials")
            .field("access_key_id", &REDACTED)
            .field("secret_access_key", &REDACTED)
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| REDACTED),
            )
            .finish()
    }
}

/// Batching limits (used when [`AwsOptions::batching`] is on and a delivery's `ctx.batch`
/// is set). Entries per request (10) and bytes per request (the service's) are fixed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct BatchOptions {
    /// The longest a message waits for companions, ms. Default 10.
    pub linger_ms: u64,
    /// Messages waiting in the batcher, all tenants. Default 10,000.
    pub max_queued: NonZeroUsize,
    /// Messages of one tenant waiting in the batcher. Default 2,500.
    pub max_queued_per_tenant: NonZeroUsize,
    /// Batch requests in flight at once (requests, not messages). Default 16.
    pub max_requests: NonZeroUsize,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            linger_ms: 10,
            max_queued: NonZeroUsize::new(10_000).expect("non-zero"),
            max_queued_per_tenant: NonZeroUsize::new(2_500).expect("non-zero"),
            max_requests: NonZeroUsize::new(16).expect("non-zero"),
        }
    }
}

impl BatchOptions {
    /// [`linger_ms`](Self::linger_ms) as a duration.
    pub fn linger(&self) -> Duration {
        Duration::from_millis(self.linger_ms)
    }
    /// Set the linger.
    pub fn with_linger(mut self, linger: Duration) -> Self {
        self.linger_ms = u64::try_from(linger.as_millis()).unwrap_or(u64::MAX);
        self
    }
    /// Set the queue cap.
    pub fn with_max_queued(mut self, n: NonZeroUsize) -> Self {
        self.max_queued = n;
        self
    }
    /// Set one tenant's share of the queue.
    pub fn with_max_queued_per_tenant(mut self, n: NonZeroUsize) -> Self {
        self.max_queued_per_tenant = n;
        self
    }
    /// Set the requests in flight.
    pub fn with_max_requests(mut self, n: NonZeroUsize) -> Self {
        self.max_requests = n;
        self
    }
}

/// What SQS and SNS sinks share.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct AwsOptions {
    /// The region. Default: from the queue URL or topic ARN, else the standard chain
    /// (`AWS_REGION`, profile).
    pub region: Option<String>,
    /// Endpoint override (an emulator, a VPC endpoint). SQS default: the queue URL's
    /// origin when it is not an `amazonaws.com` host, else the SDK's endpoint.
    pub endpoint: Option<String>,
    /// Static credentials. Default: the standard chain (environment, profile, web
    /// identity, ECS, IMDS).
    pub credentials: Option<StaticCredentials>,
    /// Message group id. Default on FIFO destinations: `<tenant>/<source>` (`/<source>`
    /// with no tenant); none on standard ones.
    pub message_group_id: Option<String>,
    /// Bodies up to this size travel inline; larger ones by claim. Default 64 KiB.
    pub inline_max_bytes: NonZeroUsize,
    /// The largest message, body plus attributes, checked before sending. Default: the
    /// service's limit (SQS 1 MiB, SNS 256 KiB).
    pub max_message_bytes: Option<NonZeroUsize>,
    /// Connect timeout, and the bound on one call. Default 5,000 ms.
    pub timeout_ms: NonZeroU64,
    /// Whether the sink batches deliveries whose `ctx.batch` is set. Default true.
    pub batching: bool,
    /// Batching limits.
    pub batch: BatchOptions,
}

impl Default for AwsOptions {
    fn default() -> Self {
        AwsOptions {
            region: None,
            endpoint: None,
            credentials: None,
            message_group_id: None,
            inline_max_bytes: DEFAULT_INLINE_MAX_BYTES,
            max_message_bytes: None,
            timeout_ms: NonZeroU64::new(5_000).expect("non-zero"),
            batching: true,
            batch: BatchOptions::default(),
        }
    }
}

impl AwsOptions {
    /// Set the region.
    pub fn with_region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
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
    /// Set the inline threshold.
    pub fn with_inline_max_bytes(mut self, n: NonZeroUsize) -> Self {
        self.inline_max_bytes = n;
        self
    }
    /// Set the message size limit.
    pub fn with_max_message_bytes(mut self, n: NonZeroUsize) -> Self {
        self.max_message_bytes = Some(n);
        self
    }
    /// Set the timeout (rounded down to ms, at least 1 ms).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout_ms = ankusa_sink_core::timeout_ms(timeout);
        self
    }
    /// Turn batching on or off.
    pub fn with_batching(mut self, on: bool) -> Self {
        self.batching = on;
        self
    }
    /// Set the batching limits.
    pub fn with_batch(mut self, batch: BatchOptions) -> Self {
        self.batch = batch;
        self
    }
    /// The timeout as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.get())
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
            check_url("endpoint", e)?;
        }
        if let Some(c) = &self.credentials {
            if c.access_key_id.is_empty() {
                return Err(ConfigError::Empty("credentials.access_key_id"));
            }
            if c.secret_access_key.is_empty() {
                return Err(ConfigError::Empty("credentials.secret_access_key"));
            }
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
        let inline = self.inline_max_bytes.get();
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

fn refuse_unknown(unknown: &BTreeMap<String, IgnoredAny>) -> Result<(), ConfigError> {
    match unknown.keys().next() {
        Some(k) => Err(ConfigError::UnknownOption(k.clone())),
        None => Ok(()),
    }
}

/// An absolute http(s) URL with a host and no userinfo, query or fragment.
fn check_url(field: &'static str, raw: &str) -> Result<url::Url, ConfigError> {
    // A queue URL's path (account id, queue name) is no secret and names the queue; an
    // endpoint's path has no use on AWS, so it is hidden like any other URL's.
    let shown = if field == "queue_url" {
        redact_url_keep_path(raw)
    } else {
        redact_url(raw)
    };
    let bad = |why| ConfigError::Url {
        field,
        why,
        url: shown.clone(),
    };
    if raw.is_empty() {
        return Err(ConfigError::Empty(field));
    }
    let url = url::Url::parse(raw).map_err(|_| bad("not an absolute URL"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("scheme is not http or https"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("userinfo is not allowed: use credentials"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("query and fragment are not allowed"));
    }
    Ok(url)
}

fn is_aws_host(host: &str) -> bool {
    host.ends_with(".amazonaws.com") || host.ends_with(".amazonaws.com.cn")
}

fn origin(url: &url::Url) -> String {
    let mut o = format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default());
    if let Some(p) = url.port() {
        o.push_str(&format!(":{p}"));
    }
    o
}

/// The SQS sink's options.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SqsRepr")]
pub struct SqsConfig {
    queue_url: String,
    queue_name: String,
    fifo: bool,
    endpoint: Option<String>,
    region: Option<String>,
    max_message_bytes: usize,
    options: AwsOptions,
}

#[derive(Deserialize)]
struct SqsRepr {
    queue_url: String,
    #[serde(flatten)]
    options: AwsOptions,
    /// Whatever no option took: refused (`flatten` cannot deny unknown fields itself).
    #[serde(flatten)]
    unknown: BTreeMap<String, IgnoredAny>,
}

impl TryFrom<SqsRepr> for SqsConfig {
    type Error = ConfigError;
    fn try_from(r: SqsRepr) -> Result<Self, ConfigError> {
        refuse_unknown(&r.unknown)?;
        SqsConfig::new(r.queue_url, r.options)
    }
}

impl SqsConfig {
    /// Options for the queue at `queue_url` (a URL ending in `.fifo` is a FIFO queue).
    pub fn new(queue_url: impl Into<String>, options: AwsOptions) -> Result<Self, ConfigError> {
        let queue_url = queue_url.into();
        let url = check_url("queue_url", &queue_url)?;
        let queue_name = url
            .path_segments()
            .and_then(|mut s| s.rfind(|s| !s.is_empty()))
            .ok_or_else(|| ConfigError::Url {
                field: "queue_url",
                why: "no queue name in the path",
                url: redact_url_keep_path(&queue_url),
            })?
            .to_owned();
        let max_message_bytes = options.validate(SQS_MAX_MESSAGE_BYTES)?;
        let host = url.host_str().unwrap_or_default();
        let endpoint = match &options.endpoint {
            Some(e) => Some(e.trim_end_matches('/').to_owned()),
            None if !is_aws_host(host) => Some(origin(&url)),
            None => None,
        };
        // sqs.<region>.amazonaws.com or <region>.queue.amazonaws.com
        let region = options.region.clone().or_else(|| {
            let labels: Vec<&str> = host.split('.').collect();
            match labels.as_slice() {
                ["sqs", region, "amazonaws", ..] => Some((*region).to_owned()),
                [region, "queue", "amazonaws", ..] => Some((*region).to_owned()),
                _ => None,
            }
        });
        Ok(SqsConfig {
            fifo: queue_name.ends_with(".fifo"),
            queue_url,
            queue_name,
            endpoint,
            region,
            max_message_bytes,
            options,
        })
    }

    /// The queue URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }
    /// The queue name (the URL's last path segment).
    pub fn queue_name(&self) -> &str {
        &self.queue_name
    }
    /// Whether the queue is FIFO.
    pub fn fifo(&self) -> bool {
        self.fifo
    }
    /// The endpoint the client uses, when not the SDK's own.
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }
    /// The resolved message size limit.
    pub fn max_message_bytes(&self) -> usize {
        self.max_message_bytes
    }
    /// The shared options.
    pub fn options(&self) -> &AwsOptions {
        &self.options
    }

    /// The SDK configuration this sink's client uses: region, endpoint, credentials,
    /// timeouts, and no SDK retries (dispatch retries, by class). Build your own client
    /// from it (e.g. to add interceptors) and pass it to `SqsSink::from_client`.
    pub async fn sdk_config(&self) -> Result<aws_config::SdkConfig, ConfigError> {
        load_sdk_config(
            &self.options,
            self.region.as_deref(),
            self.endpoint.as_deref(),
        )
        .await
    }
}

/// The SNS sink's options.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SnsRepr")]
pub struct SnsConfig {
    topic_arn: String,
    topic_name: String,
    region: String,
    fifo: bool,
    max_message_bytes: usize,
    options: AwsOptions,
}

#[derive(Deserialize)]
struct SnsRepr {
    topic_arn: String,
    #[serde(flatten)]
    options: AwsOptions,
    /// Whatever no option took: refused (`flatten` cannot deny unknown fields itself).
    #[serde(flatten)]
    unknown: BTreeMap<String, IgnoredAny>,
}

impl TryFrom<SnsRepr> for SnsConfig {
    type Error = ConfigError;
    fn try_from(r: SnsRepr) -> Result<Self, ConfigError> {
        refuse_unknown(&r.unknown)?;
        SnsConfig::new(r.topic_arn, r.options)
    }
}

impl SnsConfig {
    /// Options for the topic `topic_arn` (a name ending in `.fifo` is a FIFO topic).
    pub fn new(topic_arn: impl Into<String>, options: AwsOptions) -> Result<Self, ConfigError> {
        let topic_arn = topic_arn.into();
        if topic_arn.is_empty() {
            return Err(ConfigError::Empty("topic_arn"));
        }
        let parts: Vec<&str> = topic_arn.split(':').collect();
        let (region, topic_name) = match parts.as_slice() {
            ["arn", partition, "sns", region, account, name]
                if !partition.is_empty()
                    && !region.is_empty()
                    && !account.is_empty()
                    && !name.is_empty() =>
            {
                ((*region).to_owned(), (*name).to_owned())
            }
            _ => return Err(ConfigError::TopicArn(topic_arn)),
        };
        let max_message_bytes = options.validate(SNS_MAX_MESSAGE_BYTES)?;
        Ok(SnsConfig {
            fifo: topic_name.ends_with(".fifo"),
            region: options.region.clone().unwrap_or(region),
            topic_arn,
            topic_name,
            max_message_bytes,
            options,
        })
    }

    /// The topic ARN.
    pub fn topic_arn(&self) -> &str {
        &self.topic_arn
    }
    /// The topic name (the ARN's last part).
    pub fn topic_name(&self) -> &str {
        &self.topic_name
    }
    /// Whether the topic is FIFO.
    pub fn fifo(&self) -> bool {
        self.fifo
    }
    /// The resolved region.
    pub fn region(&self) -> &str {
        &self.region
    }
    /// The resolved message size limit (also the batch request's limit).
    pub fn max_message_bytes(&self) -> usize {
        self.max_message_bytes
    }
    /// The shared options.
    pub fn options(&self) -> &AwsOptions {
        &self.options
    }

    /// The SDK configuration this sink's client uses (see [`SqsConfig::sdk_config`]).
    pub async fn sdk_config(&self) -> Result<aws_config::SdkConfig, ConfigError> {
        let endpoint = self
            .options
            .endpoint
            .as_deref()
            .map(|e| e.trim_end_matches('/'));
        load_sdk_config(&self.options, Some(&self.region), endpoint).await
    }
}

async fn load_sdk_config(
    options: &AwsOptions,
    region: Option<&str>,
    endpoint: Option<&str>,
) -> Result<aws_config::SdkConfig, ConfigError> {
    use aws_config::stalled_stream_protection::StalledStreamProtectionConfig;
    use aws_config::{BehaviorVersion, Region, retry::RetryConfig, timeout::TimeoutConfig};
    let timeout = options.timeout();
    // One attempt per delivery (dispatch retries by class), bounded by `timeout_ms` alone:
    // messages are small, so stalled-stream detection would only add a second, shorter
    // clock that fires while a busy server is still reading.
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .retry_config(RetryConfig::disabled())
        .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(timeout)
                .operation_timeout(timeout)
                .build(),
        );
    if let Some(r) = region {
        loader = loader.region(Region::new(r.to_owned()));
    }
    if let Some(e) = endpoint {
        loader = loader.endpoint_url(e);
    }
    if let Some(c) = &options.credentials {
        loader = loader.credentials_provider(aws_credential_types::Credentials::new(
            c.access_key_id.clone(),
            c.secret_access_key.clone(),
            c.session_token.clone(),
            None,
            "ankusa-static",
        ));
    }
    let sdk = loader.load().await;
    if sdk.region().is_none() {
        return Err(ConfigError::NoRegion);
    }
    Ok(sdk)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> AwsOptions {
        AwsOptions::default().with_region("us-east-1")
    }

    #[test]
    fn url_errors_keep_a_queue_path_but_hide_an_endpoint_path() {
        let e = check_url("endpoint", "ftp://proxy.example/t0ken-in-path").unwrap_err();
        assert!(!e.to_string().contains("t0ken"), "{e}");
        let e = check_url("queue_url", "ftp://sqs.example/123456789012/hooks").unwrap_err();
        assert!(e.to_string().contains("/123456789012/hooks"), "{e}");
    }

    #[test]
    fn queue_url_gives_name_fifo_endpoint_and_region() {
        let c = SqsConfig::new("http://127.0.0.1:4566/123456789012/jobs.fifo/", opts()).unwrap();
        assert_eq!(c.queue_name(), "jobs.fifo");
        assert!(c.fifo());
        assert_eq!(c.endpoint(), Some("http://127.0.0.1:4566"));
        assert_eq!(c.max_message_bytes(), SQS_MAX_MESSAGE_BYTES);

        let aws = SqsConfig::new(
            "https://sqs.eu-west-1.amazonaws.com/1/q",
            AwsOptions::default(),
        )
        .unwrap();
        assert_eq!(aws.endpoint(), None, "the SDK resolves AWS endpoints");
        assert_eq!(aws.region.as_deref(), Some("eu-west-1"));
        assert!(!aws.fifo());
    }

    #[test]
    fn bad_urls_and_values_are_clear_errors() {
        for (url, why) in [
            ("", "empty"),
            ("not a url", "not an absolute URL"),
            ("ftp://h/1/q", "scheme"),
            ("http://user:pw@h/1/q", "userinfo"),
            ("http://h/1/q?x=1", "query"),
            ("http://h/", "no queue name"),
        ] {
            let err = SqsConfig::new(url, opts()).unwrap_err().to_string();
            assert!(err.contains(why), "{url}: {err}");
            assert!(!err.contains("pw"), "{err}");
        }
        let err = SqsConfig::new(
            "http://h/1/q",
            opts().with_inline_max_bytes(NonZeroUsize::new(1_000_000).unwrap()),
        )
        .unwrap_err();
        assert!(matches!(err, ConfigError::InlineOverLimit { .. }), "{err}");
        let err = SqsConfig::new(
            "http://h/1/q",
            opts().with_max_message_bytes(NonZeroUsize::new(2 << 20).unwrap()),
        )
        .unwrap_err();
        assert!(err.to_string().contains("max_message_bytes"), "{err}");
        let err = SqsConfig::new("http://h/1/q", opts().with_message_group_id("")).unwrap_err();
        assert_eq!(err, ConfigError::Empty("message_group_id"));
        let err = SqsConfig::new(
            "http://h/1/q",
            opts().with_credentials(StaticCredentials::new("AKIA", "")),
        )
        .unwrap_err();
        assert_eq!(err, ConfigError::Empty("credentials.secret_access_key"));
    }

    #[test]
    fn topic_arn_gives_name_region_and_fifo() {
        let c = SnsConfig::new(
            "arn:aws:sns:us-west-2:123456789012:events.fifo",
            AwsOptions::default(),
        )
        .unwrap();
        assert_eq!(c.topic_name(), "events.fifo");
        assert_eq!(c.region(), "us-west-2");
        assert!(c.fifo());
        assert_eq!(c.max_message_bytes(), SNS_MAX_MESSAGE_BYTES);
        for bad in [
            "",
            "arn:aws:sqs:r:1:n",
            "arn:aws:sns:r:1",
            "arn:aws:sns::1:n",
        ] {
            assert!(SnsConfig::new(bad, opts()).is_err(), "{bad}");
        }
    }

    #[test]
    fn deserializes_flat_and_refuses_unknown_or_invalid_keys() {
        let c: SqsConfig = serde_json::from_value(serde_json::json!({
            "queue_url": "http://127.0.0.1:4566/1/q",
            "region": "us-east-1",
            "timeout_ms": 250,
            "batch": {"linger_ms": 5},
            "credentials": {"access_key_id": "AKIAX", "secret_access_key": "s3cr3t-value"}
        }))
        .unwrap();
        assert_eq!(c.options().timeout(), Duration::from_millis(250));
        assert_eq!(c.options().batch.linger_ms, 5);
        let dbg = format!("{c:?}");
        assert!(
            !dbg.contains("s3cr3t-value") && !dbg.contains("AKIAX"),
            "{dbg}"
        );

        let typo = serde_json::from_value::<SqsConfig>(serde_json::json!({
            "queue_url": "http://127.0.0.1:4566/1/q", "regoin": "x"
        }));
        assert!(typo.is_err());
        let invalid = serde_json::from_value::<SnsConfig>(serde_json::json!({
            "topic_arn": "nope"
        }))
        .unwrap_err();
        assert!(invalid.to_string().contains("ARN"), "{invalid}");
    }
}

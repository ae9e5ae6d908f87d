//! The always-valid configs of the two services: a queue URL or topic ARN, checked and
//! taken apart once, plus the shared [`AwsOptions`].

use super::resolved::{Resolved, resolved_accessors};
use super::{AwsOptions, ConfigError, SNS_MAX_MESSAGE_BYTES, SQS_MAX_MESSAGE_BYTES};
use ankusa_message::MessageOptions;
use ankusa_sink_kit::{DEFAULT_SUBSCRIBER_CHECK_INTERVAL, subscriber_check_interval};
use ankusa_sink_kit::{is_loopback_host, redact_url, redact_url_keep_path};
use serde::Deserialize;
use serde::de::IgnoredAny;
use std::collections::BTreeMap;
use std::num::NonZeroU64;
use std::time::Duration;

/// The keys of a sink file of any of the four services: the service's own (`T`), the
/// shared [`AwsOptions`] and the message options.
#[derive(Deserialize)]
pub(super) struct SinkFile<T> {
    #[serde(flatten)]
    own: T,
    #[serde(flatten)]
    options: AwsOptions,
    /// `[signing]`, `inline_max_bytes` (beside `options`: a flattened struct inside a
    /// flattened struct would leave its keys to `unknown` as well).
    #[serde(flatten)]
    message: MessageOptions,
    /// Whatever no option took: refused (`flatten` cannot deny unknown fields itself).
    #[serde(flatten)]
    unknown: BTreeMap<String, IgnoredAny>,
}

impl<T> SinkFile<T> {
    /// The service's own keys and the options, the message options among them.
    ///
    /// # Errors
    /// [`ConfigError::UnknownOption`] for the first key no option took.
    pub(super) fn split(self) -> Result<(T, AwsOptions), ConfigError> {
        match self.unknown.into_keys().next() {
            Some(k) => Err(ConfigError::UnknownOption(k)),
            None => Ok((self.own, self.options.with_message(self.message))),
        }
    }
}

/// An absolute http(s) URL with a host and no userinfo, query or fragment.
pub(super) fn check_url(field: &'static str, raw: &str) -> Result<url::Url, ConfigError> {
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

/// Refuses `url` when it is `http://` on a host that is not loopback, unless the operator
/// said `allow_insecure`: SigV4 keeps the secret key off the wire, but the access key id and
/// a session token travel as headers, and a session token is enough to act as the role.
pub(super) fn check_cleartext(
    field: &'static str,
    url: &url::Url,
    allow_insecure: bool,
) -> Result<(), ConfigError> {
    let remote = !url.host_str().is_some_and(is_loopback_host);
    if url.scheme() == "http" && remote && !allow_insecure {
        return Err(ConfigError::Insecure(field));
    }
    Ok(())
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

/// The region in an AWS queue host: `sqs.<region>.amazonaws.com` or
/// `<region>.queue.amazonaws.com`.
fn queue_host_region(host: &str) -> Option<String> {
    let labels: Vec<&str> = host.split('.').collect();
    match labels.as_slice() {
        ["sqs", region, "amazonaws", ..] | [region, "queue", "amazonaws", ..] => {
            Some((*region).to_owned())
        }
        _ => None,
    }
}

/// The SQS sink's options: a valid queue URL and valid [`AwsOptions`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SinkFile<SqsKeys>")]
#[non_exhaustive]
pub struct SqsConfig {
    queue_url: String,
    queue_name: String,
    fifo: bool,
    resolved: Resolved,
}

/// The SQS keys of a sink file.
#[derive(Deserialize)]
struct SqsKeys {
    queue_url: String,
}

impl TryFrom<SinkFile<SqsKeys>> for SqsConfig {
    type Error = ConfigError;
    fn try_from(file: SinkFile<SqsKeys>) -> Result<Self, ConfigError> {
        let (own, options) = file.split()?;
        SqsConfig::new(own.queue_url, options)
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
            None if !is_aws_host(host) => {
                check_cleartext("queue_url", &url, options.allow_insecure)?;
                Some(origin(&url))
            }
            None => None,
        };
        let region = options.region.clone().or_else(|| queue_host_region(host));
        Ok(SqsConfig {
            fifo: queue_name.ends_with(".fifo"),
            queue_url,
            queue_name,
            resolved: Resolved {
                region,
                endpoint,
                max_message_bytes,
                options,
            },
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
}

resolved_accessors!(SqsConfig, "The resolved message size limit.");

/// The SNS sink's options: a valid topic ARN and valid [`AwsOptions`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SinkFile<SnsKeys>")]
#[non_exhaustive]
pub struct SnsConfig {
    topic_arn: String,
    topic_name: String,
    fifo: bool,
    resolved: Resolved,
    require_subscriber: bool,
    subscriber_check_interval: Duration,
}

/// The SNS keys of a sink file.
#[derive(Deserialize)]
struct SnsKeys {
    topic_arn: String,
    #[serde(default)]
    require_subscriber: bool,
    subscriber_check_interval_s: Option<NonZeroU64>,
}

impl TryFrom<SinkFile<SnsKeys>> for SnsConfig {
    type Error = ConfigError;
    fn try_from(file: SinkFile<SnsKeys>) -> Result<Self, ConfigError> {
        let (own, options) = file.split()?;
        let config =
            SnsConfig::new(own.topic_arn, options)?.with_require_subscriber(own.require_subscriber);
        match own.subscriber_check_interval_s {
            Some(s) => config.with_subscriber_check_interval(Duration::from_secs(s.get())),
            None => Ok(config),
        }
    }
}

resolved_accessors!(
    SnsConfig,
    "The resolved message size limit (also the batch request's limit)."
);

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
        let mut resolved = Resolved::new(options, max_message_bytes);
        // The `region` option, else the ARN's: an SNS config always has one.
        resolved.region = Some(resolved.region.unwrap_or(region));
        Ok(SnsConfig {
            fifo: topic_name.ends_with(".fifo"),
            topic_arn,
            topic_name,
            resolved,
            require_subscriber: false,
            subscriber_check_interval: DEFAULT_SUBSCRIBER_CHECK_INTERVAL,
        })
    }

    /// Fail deliveries as [`Class::Config`](ankusa_sink_core::Class::Config) while the topic
    /// has no confirmed subscription (SNS accepts and drops what is published to such a
    /// topic). The sink lists the topic's subscriptions at most once per
    /// [`subscriber_check_interval`](Self::with_subscriber_check_interval): one
    /// `ListSubscriptionsByTopic` call (one per 100 subscriptions) per interval per sink,
    /// which needs `sns:ListSubscriptionsByTopic`. Default false.
    pub fn with_require_subscriber(mut self, require: bool) -> Self {
        self.require_subscriber = require;
        self
    }

    /// How long the answer of a subscription listing is kept (whole seconds, 1 to 3600,
    /// default 60): a subscription confirmed or deleted is seen within this time.
    pub fn with_subscriber_check_interval(
        mut self,
        interval: Duration,
    ) -> Result<Self, ConfigError> {
        self.subscriber_check_interval =
            subscriber_check_interval(interval).ok_or(ConfigError::Range {
                field: "subscriber_check_interval_s",
                range: "1 to 3600 seconds",
            })?;
        Ok(self)
    }

    /// Whether deliveries require a confirmed subscription on the topic.
    pub fn require_subscriber(&self) -> bool {
        self.require_subscriber
    }

    /// How long the answer of a subscription listing is kept.
    pub fn subscriber_check_interval(&self) -> Duration {
        self.subscriber_check_interval
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
        // Always `Some`: `new` resolves it.
        self.resolved.region.as_deref().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroUsize;
    use std::time::Duration;

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
        assert_eq!(aws.resolved.region.as_deref(), Some("eu-west-1"));
        assert!(!aws.fifo());
        assert_eq!(
            queue_host_region("eu-north-1.queue.amazonaws.com").as_deref(),
            Some("eu-north-1")
        );
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
            opts().with_message(
                MessageOptions::new().with_inline_max_bytes(NonZeroUsize::new(1_000_000).unwrap()),
            ),
        )
        .unwrap_err();
        assert!(matches!(err, ConfigError::InlineOverLimit { .. }), "{err}");
        let err = SqsConfig::new("http://h/1/q", opts().with_endpoint("http://u:p@e/"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("userinfo") && !err.contains("u:p"), "{err}");
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
    fn sns_require_subscriber_and_its_interval() {
        let arn = "arn:aws:sns:us-east-1:123456789012:events";
        let c = SnsConfig::new(arn, opts()).unwrap();
        assert!(!c.require_subscriber());
        assert_eq!(c.subscriber_check_interval(), Duration::from_secs(60));
        let c: SnsConfig = serde_json::from_value(serde_json::json!({
            "topic_arn": arn, "region": "us-east-1",
            "require_subscriber": true, "subscriber_check_interval_s": 5
        }))
        .unwrap();
        assert!(c.require_subscriber());
        assert_eq!(c.subscriber_check_interval(), Duration::from_secs(5));
        for bad in [0, 3_601] {
            let r = serde_json::from_value::<SnsConfig>(serde_json::json!({
                "topic_arn": arn, "subscriber_check_interval_s": bad
            }));
            assert!(r.is_err(), "{bad}");
        }
        let e = c
            .with_subscriber_check_interval(Duration::from_millis(999))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "subscriber_check_interval_s must be 1 to 3600 seconds"
        );
        // SQS has no such option.
        let sqs = serde_json::from_value::<SqsConfig>(serde_json::json!({
            "queue_url": "http://127.0.0.1:4566/1/q", "require_subscriber": true
        }));
        assert!(sqs.unwrap_err().to_string().contains("require_subscriber"));
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
        assert_eq!(c.options().batch().linger_ms, 5);
        let dbg = format!("{c:?}");
        assert!(
            !dbg.contains("s3cr3t-value") && !dbg.contains("AKIAX"),
            "{dbg}"
        );

        let typo = serde_json::from_value::<SqsConfig>(serde_json::json!({
            "queue_url": "http://127.0.0.1:4566/1/q", "regoin": "x"
        }));
        assert!(typo.unwrap_err().to_string().contains("regoin"));
        let invalid = serde_json::from_value::<SnsConfig>(serde_json::json!({
            "topic_arn": "nope"
        }))
        .unwrap_err();
        assert!(invalid.to_string().contains("ARN"), "{invalid}");
        let empty_secret = serde_json::from_value::<SnsConfig>(serde_json::json!({
            "topic_arn": "arn:aws:sns:us-east-1:1:t",
            "credentials": {"access_key_id": "", "secret_access_key": "x"}
        }))
        .unwrap_err();
        assert!(
            empty_secret
                .to_string()
                .contains("credentials.access_key_id"),
            "{empty_secret}"
        );
    }

    #[test]
    fn message_keys_sit_beside_the_shared_options() {
        let c: SqsConfig = serde_json::from_value(serde_json::json!({
            "queue_url": "http://127.0.0.1:4566/000000000000/q", "region": "us-east-1",
            "inline_max_bytes": 1000,
            "signing": {"secrets": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]}
        }))
        .unwrap();
        assert_eq!(c.options().message().inline_max_bytes().get(), 1000);
        assert!(c.options().message().signing().is_some());
        let ce: SnsConfig = serde_json::from_value(serde_json::json!({
            "topic_arn": "arn:aws:sns:us-east-1:000000000000:t",
            "format": "cloudevents", "cloudevents_type": "com.example.t"
        }))
        .unwrap();
        assert_eq!(
            ce.options().message().cloudevents().map(|e| e.event_type()),
            Some("com.example.t")
        );
        let e = serde_json::from_value::<SnsConfig>(serde_json::json!({
            "topic_arn": "arn:aws:sns:us-east-1:000000000000:t", "bogus": 1
        }))
        .unwrap_err();
        assert!(e.to_string().contains("unknown option `bogus`"), "{e}");
    }
}

//! The `type = "sqs"` source config: the keys of a `--from` file and their checks.

use crate::config::{AwsOptions, ConfigError, SqsConfig, StaticCredentials};
use serde::Deserialize;
use std::num::NonZeroU64;
use std::time::Duration;

/// Default long poll of one `ReceiveMessage`: 5 s.
const DEFAULT_WAIT_SECONDS: u8 = 5;
/// The longest long poll SQS takes: 20 s.
const MAX_WAIT_SECONDS: u32 = 20;
/// Default visibility timeout of a received message: 300 s.
const DEFAULT_VISIBILITY_TIMEOUT_SECONDS: u32 = 300;
/// The longest visibility timeout SQS takes: 12 hours.
const MAX_VISIBILITY_TIMEOUT_SECONDS: u32 = 43_200;
/// The most messages one `ReceiveMessage` returns.
const MAX_MESSAGES: u32 = 10;

/// The operator's keys, exactly as written in a `--from` file (`type` already removed).
/// The connection keys are the SQS sink's (`queue_url`, `region`, `endpoint`,
/// `credentials`, `timeout_ms`, `allow_insecure`); the sink's delivery keys (batching, message format) mean
/// nothing to a reader and are refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceRepr {
    queue_url: String,
    #[serde(default)]
    region: Option<String>,
    #[serde(default)]
    endpoint: Option<String>,
    #[serde(default)]
    credentials: Option<StaticCredentials>,
    #[serde(default)]
    timeout_ms: Option<NonZeroU64>,
    #[serde(default)]
    allow_insecure: bool,
    #[serde(default)]
    wait_seconds: Option<u32>,
    #[serde(default)]
    visibility_timeout_seconds: Option<u32>,
    #[serde(default)]
    max_messages: Option<u32>,
}

impl TryFrom<SourceRepr> for SqsSourceConfig {
    type Error = ConfigError;

    fn try_from(r: SourceRepr) -> Result<Self, ConfigError> {
        let defaults = AwsOptions::default();
        let options = AwsOptions {
            region: r.region,
            endpoint: r.endpoint,
            credentials: r.credentials,
            timeout_ms: r.timeout_ms.unwrap_or(defaults.timeout_ms),
            allow_insecure: r.allow_insecure,
            ..defaults
        };
        let mut c = SqsSourceConfig::new(r.queue_url, options)?;
        if let Some(s) = r.wait_seconds {
            c = c.with_wait_seconds(s)?;
        }
        if let Some(s) = r.visibility_timeout_seconds {
            c = c.with_visibility_timeout_seconds(s)?;
        }
        if let Some(n) = r.max_messages {
            c = c.with_max_messages(n)?;
        }
        Ok(c)
    }
}

/// A valid SQS source configuration (`type = "sqs"` in a `--from` file).
///
/// `queue_url` is required; `region`, `endpoint`, `credentials` and `timeout_ms` mean what
/// they mean for the SQS sink (the region and endpoint are taken from the queue URL when
/// not set). `wait_seconds` (0 to 20, default 5) is the long poll of each
/// `ReceiveMessage`; `visibility_timeout_seconds` (1 to 43200, default 300) how long a
/// received message stays hidden from other readers before SQS gives it out again if it
/// was not deleted; `max_messages` (1 to 10, default 10) the most messages one
/// `ReceiveMessage` asks for. `Debug` shows no credential.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SourceRepr")]
#[non_exhaustive]
pub struct SqsSourceConfig {
    pub(super) queue: SqsConfig,
    pub(super) wait_seconds: u8,
    pub(super) visibility_timeout_seconds: u32,
    pub(super) max_messages: u8,
}

impl SqsSourceConfig {
    /// A source reading the queue at `queue_url` with the connection options of `options`
    /// (region, endpoint, credentials, timeout, allow_insecure; its sink-only options are not kept), a
    /// long poll of 5 s, a visibility timeout of 300 s and up to 10 messages per receive.
    ///
    /// # Errors
    /// A bad queue URL or endpoint, an empty region, empty credentials (as for
    /// [`SqsConfig::new`]).
    pub fn new(queue_url: impl Into<String>, options: AwsOptions) -> Result<Self, ConfigError> {
        let conn = AwsOptions {
            region: options.region,
            endpoint: options.endpoint,
            credentials: options.credentials,
            timeout_ms: options.timeout_ms,
            allow_insecure: options.allow_insecure,
            ..AwsOptions::default()
        };
        Ok(SqsSourceConfig {
            queue: SqsConfig::new(queue_url, conn)?,
            wait_seconds: DEFAULT_WAIT_SECONDS,
            visibility_timeout_seconds: DEFAULT_VISIBILITY_TIMEOUT_SECONDS,
            max_messages: MAX_MESSAGES as u8,
        })
    }

    /// The long poll of each `ReceiveMessage`, in whole seconds (`wait_seconds`).
    ///
    /// # Errors
    /// Over 20.
    pub fn with_wait_seconds(mut self, seconds: u32) -> Result<Self, ConfigError> {
        self.wait_seconds = u8::try_from(seconds)
            .ok()
            .filter(|s| u32::from(*s) <= MAX_WAIT_SECONDS)
            .ok_or(ConfigError::Range {
                field: "wait_seconds",
                range: "0 to 20 seconds",
            })?;
        Ok(self)
    }

    /// How long a received message stays hidden before SQS gives it out again, unless it
    /// was deleted (`visibility_timeout_seconds`): longer than a record takes to finish,
    /// or it is read again (here or by another forwarder) while still being delivered.
    ///
    /// # Errors
    /// Zero, or over 43200 (12 hours).
    pub fn with_visibility_timeout_seconds(mut self, seconds: u32) -> Result<Self, ConfigError> {
        if !(1..=MAX_VISIBILITY_TIMEOUT_SECONDS).contains(&seconds) {
            return Err(ConfigError::Range {
                field: "visibility_timeout_seconds",
                range: "1 to 43200 seconds",
            });
        }
        self.visibility_timeout_seconds = seconds;
        Ok(self)
    }

    /// The most messages one `ReceiveMessage` asks for (`max_messages`).
    ///
    /// # Errors
    /// Zero, or over 10.
    pub fn with_max_messages(mut self, n: u32) -> Result<Self, ConfigError> {
        if !(1..=MAX_MESSAGES).contains(&n) {
            return Err(ConfigError::Range {
                field: "max_messages",
                range: "1 to 10",
            });
        }
        self.max_messages = u8::try_from(n).expect("at most 10");
        Ok(self)
    }

    /// The queue URL.
    pub fn queue_url(&self) -> &str {
        self.queue.queue_url()
    }
    /// The queue name (the URL's last path segment).
    pub fn queue_name(&self) -> &str {
        self.queue.queue_name()
    }
    /// Whether the queue is FIFO (its name ends in `.fifo`).
    pub fn fifo(&self) -> bool {
        self.queue.fifo()
    }
    /// The endpoint the client uses, when not the SDK's own.
    pub fn endpoint(&self) -> Option<&str> {
        self.queue.endpoint()
    }
    /// The bound on one call (`timeout_ms`); a `ReceiveMessage` may take `wait_seconds`
    /// more.
    pub fn timeout(&self) -> Duration {
        self.queue.options().timeout()
    }
    /// The long poll of each `ReceiveMessage`.
    pub fn wait(&self) -> Duration {
        Duration::from_secs(u64::from(self.wait_seconds))
    }
    /// The visibility timeout of a received message.
    pub fn visibility_timeout(&self) -> Duration {
        Duration::from_secs(u64::from(self.visibility_timeout_seconds))
    }
    /// The most messages one `ReceiveMessage` asks for.
    pub fn max_messages(&self) -> u8 {
        self.max_messages
    }

    /// The SDK configuration the source's client is built from (region, endpoint,
    /// credentials, `timeout_ms`, no SDK retries: the source retries by itself).
    ///
    /// # Errors
    /// No region anywhere ([`ConfigError::NoRegion`]).
    pub async fn sdk_config(&self) -> Result<aws_config::SdkConfig, ConfigError> {
        self.queue.sdk_config().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://127.0.0.1:4566/123456789012/hooks";

    fn from_json(v: serde_json::Value) -> Result<SqsSourceConfig, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_builders_agree_with_the_keys() {
        let c = from_json(serde_json::json!({"queue_url": URL, "region": "us-east-1"})).unwrap();
        assert_eq!(c.queue_name(), "hooks");
        assert!(!c.fifo());
        assert_eq!(c.endpoint(), Some("http://127.0.0.1:4566"));
        assert_eq!(c.wait(), Duration::from_secs(5));
        assert_eq!(c.visibility_timeout(), Duration::from_secs(300));
        assert_eq!(c.max_messages(), 10);
        assert_eq!(c.timeout(), Duration::from_secs(5));
        let c = from_json(serde_json::json!({
            "queue_url": "https://sqs.eu-west-1.amazonaws.com/1/jobs.fifo",
            "endpoint": "http://127.0.0.1:9324", "timeout_ms": 250,
            "wait_seconds": 0, "visibility_timeout_seconds": 43200, "max_messages": 1
        }))
        .unwrap();
        let built = SqsSourceConfig::new(
            "https://sqs.eu-west-1.amazonaws.com/1/jobs.fifo",
            AwsOptions::default()
                .with_endpoint("http://127.0.0.1:9324")
                .with_timeout(Duration::from_millis(250))
                // Sink-only options are not kept.
                .with_batching(false),
        )
        .unwrap()
        .with_wait_seconds(0)
        .unwrap()
        .with_visibility_timeout_seconds(43_200)
        .unwrap()
        .with_max_messages(1)
        .unwrap();
        assert_eq!(c, built);
        assert!(c.fifo());
        assert_eq!(c.endpoint(), Some("http://127.0.0.1:9324"));
    }

    #[test]
    fn debug_and_errors_show_no_credential() {
        let c = from_json(serde_json::json!({
            "queue_url": URL, "region": "us-east-1",
            "credentials": {"access_key_id": "AKIAX-ID-VALUE", "secret_access_key": "s3cr3t-value",
                            "session_token": "t0ken-value"}
        }))
        .unwrap();
        let dbg = format!("{c:?}");
        for secret in ["AKIAX-ID-VALUE", "s3cr3t-value", "t0ken-value"] {
            assert!(!dbg.contains(secret), "{dbg}");
        }
        let e = from_json(serde_json::json!({
            "queue_url": URL, "max_messages": 0,
            "credentials": {"access_key_id": "AKIAX-ID-VALUE", "secret_access_key": "s3cr3t-value"}
        }))
        .unwrap_err();
        assert!(e.contains("max_messages"), "{e}");
        assert!(
            !e.contains("s3cr3t-value") && !e.contains("AKIAX-ID-VALUE"),
            "{e}"
        );
        let e = from_json(serde_json::json!({
            "queue_url": URL,
            "credentials": {"access_key_id": "", "secret_access_key": "s3cr3t-value"}
        }))
        .unwrap_err();
        assert!(e.contains("credentials.access_key_id"), "{e}");
        assert!(!e.contains("s3cr3t-value"), "{e}");
    }

    #[test]
    fn bad_values_and_unknown_keys_are_refused_naming_the_key() {
        for (key, bad, what) in [
            ("wait_seconds", 21, "wait_seconds must be 0 to 20 seconds"),
            ("wait_seconds", 300, "wait_seconds"),
            (
                "visibility_timeout_seconds",
                0,
                "visibility_timeout_seconds must be 1 to 43200",
            ),
            (
                "visibility_timeout_seconds",
                43_201,
                "visibility_timeout_seconds",
            ),
            ("max_messages", 0, "max_messages must be 1 to 10"),
            ("max_messages", 11, "max_messages must be 1 to 10"),
        ] {
            let e = from_json(serde_json::json!({"queue_url": URL, key: bad})).unwrap_err();
            assert!(e.contains(what), "{key} = {bad}: {e}");
        }
        for (v, what) in [
            (
                serde_json::json!({"queue_url": URL, "qeueu_url": 1}),
                "qeueu_url",
            ),
            // The sink's delivery keys mean nothing to a reader.
            (
                serde_json::json!({"queue_url": URL, "batching": false}),
                "batching",
            ),
            (serde_json::json!({"region": "us-east-1"}), "queue_url"),
            (serde_json::json!({"queue_url": "ftp://h/1/q"}), "queue_url"),
        ] {
            let e = from_json(v.clone()).unwrap_err();
            assert!(e.contains(what), "{v}: {e}");
        }
        // Wrong types: refused (the key path is added by whoever reads the file).
        for v in [
            serde_json::json!({"queue_url": URL, "timeout_ms": 0}),
            serde_json::json!({"queue_url": URL, "wait_seconds": -1}),
            serde_json::json!({"queue_url": URL, "max_messages": "ten"}),
        ] {
            assert!(from_json(v.clone()).is_err(), "{v}");
        }
    }
}

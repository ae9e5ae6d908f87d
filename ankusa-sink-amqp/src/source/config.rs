//! The `type = "amqp"` source config: the keys of a `--from` file and their checks.

use crate::broker_url::BrokerUrl;
use crate::config::short_string;
use crate::config_error::ConfigError;
use crate::connection::AmqpConnection;
use ankusa_sink_kit::timeout_ms;
use serde::Deserialize;
use std::num::{NonZeroU16, NonZeroU64};
use std::time::Duration;

/// Default bound on opening the connection, channel and consumer: 5 s.
const DEFAULT_CONNECT_TIMEOUT_MS: NonZeroU64 = NonZeroU64::new(5_000).unwrap();

/// The operator's keys, exactly as written in a `--from` file (`type` already removed).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceRepr {
    #[serde(flatten)]
    conn: AmqpConnection,
    queue: String,
    #[serde(default)]
    declare: bool,
    #[serde(default)]
    prefetch: Option<u16>,
    #[serde(default)]
    exchange: Option<String>,
    #[serde(default)]
    binding_key: Option<String>,
}

/// A valid AMQP source configuration (`type = "amqp"` in a `--from` file).
///
/// `url` and `queue` are required. `declare` (default false: the queue must exist and is
/// checked passively) declares the queue durable instead; `prefetch` (default: the
/// dispatcher's concurrency) is the consumer's `basic.qos`; `connect_timeout_ms` and
/// `allow_insecure` mean what they mean for the sink. `Debug` prints the URL without
/// credentials.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SourceRepr")]
#[non_exhaustive]
pub struct AmqpSourceConfig {
    pub(super) url: BrokerUrl,
    pub(super) queue: String,
    pub(super) declare: bool,
    pub(super) prefetch: Option<NonZeroU16>,
    pub(super) connect_timeout_ms: NonZeroU64,
    pub(super) allow_insecure: bool,
    /// The exchange the queue is bound to (declared and bound by the source), if any.
    pub(super) exchange: Option<String>,
    pub(super) binding_key: String,
}

impl TryFrom<SourceRepr> for AmqpSourceConfig {
    type Error = ConfigError;

    fn try_from(r: SourceRepr) -> Result<Self, ConfigError> {
        let mut c = AmqpSourceConfig::create(&r.conn.url, &r.queue, r.conn.allow_insecure)?
            .with_declare(r.declare);
        if let Some(p) = r.prefetch {
            c.prefetch = Some(NonZeroU16::new(p).ok_or(ConfigError::Zero("prefetch"))?);
        }
        if let Some(ms) = r.conn.connect_timeout_ms {
            c.connect_timeout_ms =
                NonZeroU64::new(ms).ok_or(ConfigError::Zero("connect_timeout"))?;
        }
        match (r.exchange, r.binding_key) {
            (Some(x), key) => c = c.with_exchange(x, key.as_deref().unwrap_or("#"))?,
            (None, Some(_)) => return Err(ConfigError::BindingKeyWithoutExchange),
            (None, None) => {}
        }
        Ok(c)
    }
}

fn validate_queue(queue: &str) -> Result<(), ConfigError> {
    if queue.is_empty() {
        return Err(ConfigError::Queue("must not be empty"));
    }
    short_string(queue).map_err(ConfigError::Queue)
}

impl AmqpSourceConfig {
    /// A source consuming `queue` (which must exist) on the broker at `url`
    /// (`amqp://user:pass@host:port/vhost`), with a prefetch of the dispatcher's
    /// concurrency.
    ///
    /// # Errors
    /// A bad URL; `amqp://` (no TLS) to a host that is not loopback
    /// ([`ConfigError::Insecure`]); an empty queue name, one over 255 bytes or with control
    /// characters.
    pub fn new(url: &str, queue: &str) -> Result<Self, ConfigError> {
        Self::create(url, queue, false)
    }

    /// As [`new`](Self::new), but accepts `amqp://` to a host that is not loopback, sending
    /// the login in the clear (the `allow_insecure` key). A warning is logged.
    pub fn new_allow_insecure(url: &str, queue: &str) -> Result<Self, ConfigError> {
        Self::create(url, queue, true)
    }

    fn create(url: &str, queue: &str, allow_insecure: bool) -> Result<Self, ConfigError> {
        let url = BrokerUrl::checked(url, allow_insecure, "amqp source")?;
        validate_queue(queue)?;
        Ok(AmqpSourceConfig {
            url,
            queue: queue.to_owned(),
            declare: false,
            prefetch: None,
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            allow_insecure,
            exchange: None,
            binding_key: "#".to_owned(),
        })
    }

    /// Bind the queue to `exchange` (which must exist) with `binding_key` (`#`: every
    /// message of a topic exchange; a fanout exchange ignores it), declaring the queue
    /// durable. A source bound to an exchange can be read once per sink: each sink gets a
    /// queue of its own ([`for_sink`](Self::for_sink)), so one failing sink never holds
    /// back another.
    ///
    /// # Errors
    /// An empty exchange name (the default exchange cannot be bound to), one over 255
    /// bytes or with control characters; a binding key over 255 bytes.
    pub fn with_exchange(
        mut self,
        exchange: impl Into<String>,
        binding_key: &str,
    ) -> Result<Self, ConfigError> {
        let exchange = exchange.into();
        if exchange.is_empty() {
            return Err(ConfigError::Exchange(
                "must not be empty (the default exchange cannot be bound to)",
            ));
        }
        short_string(&exchange).map_err(ConfigError::Exchange)?;
        short_string(binding_key).map_err(ConfigError::BindingKey)?;
        self.exchange = Some(exchange);
        self.binding_key = binding_key.to_owned();
        self.declare = true;
        Ok(self)
    }

    /// The source that reads for the sink `sink` alone, when this one can be split: bound
    /// to an exchange, it reads its own durable queue `<queue>-<sink>` bound the same way,
    /// so that each sink's backlog waits in the broker and a failing sink holds back no
    /// other. `None` for a source that names only a queue: every sink must share it.
    /// `sink` is made a queue name: characters other than ASCII letters, digits, `_`, `-`
    /// and `.` become `_`.
    ///
    /// # Errors
    /// The queue name it makes is over 255 bytes.
    pub fn for_sink(&self, sink: &str) -> Result<Option<Self>, ConfigError> {
        if self.exchange.is_none() {
            return Ok(None);
        }
        let queue = format!("{}-{}", self.queue, ankusa_source::lane_name(sink, &['.']));
        validate_queue(&queue)?;
        Ok(Some(AmqpSourceConfig {
            queue,
            ..self.clone()
        }))
    }

    /// The exchange the queue is bound to, and the binding key, if the source binds it.
    pub fn exchange(&self) -> Option<(&str, &str)> {
        self.exchange
            .as_deref()
            .map(|x| (x, self.binding_key.as_str()))
    }

    /// Declare the queue durable (creating it if needed) instead of checking passively
    /// that it exists.
    pub fn with_declare(mut self, declare: bool) -> Self {
        self.declare = declare;
        self
    }

    /// Unacknowledged messages the broker sends this consumer at once (`basic.qos`);
    /// default: the dispatcher's concurrency.
    pub fn with_prefetch(mut self, prefetch: NonZeroU16) -> Self {
        self.prefetch = Some(prefetch);
        self
    }

    /// The bound on opening the connection, channel and consumer (default 5 s; rounded
    /// down to whole ms, at least 1).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout_ms = timeout_ms(timeout);
        self
    }

    /// The queue consumed.
    pub fn queue(&self) -> &str {
        &self.queue
    }
    /// Whether the queue is declared (durable) rather than checked passively.
    pub fn declare(&self) -> bool {
        self.declare
    }
    /// The configured prefetch; `None`: the dispatcher's concurrency.
    pub fn prefetch(&self) -> Option<NonZeroU16> {
        self.prefetch
    }
    /// The bound on opening the connection, channel and consumer.
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

    const URL: &str = "amqp://user:s3cr3t@127.0.0.1:5672/%2f";

    fn from_json(v: serde_json::Value) -> Result<AmqpSourceConfig, serde_json::Error> {
        serde_json::from_value(v)
    }

    #[test]
    fn defaults_and_builders_agree_with_the_keys() {
        let c = from_json(serde_json::json!({"url": URL, "queue": "hooks"})).unwrap();
        assert_eq!(c, AmqpSourceConfig::new(URL, "hooks").unwrap());
        assert!(!c.declare());
        assert_eq!(c.prefetch(), None);
        assert_eq!(c.connect_timeout(), Duration::from_secs(5));
        assert_eq!(c.redacted_url(), "amqp://127.0.0.1:5672/%2F");
        let c = from_json(serde_json::json!({
            "url": URL, "queue": "hooks", "declare": true, "prefetch": 7,
            "connect_timeout_ms": 300
        }))
        .unwrap();
        let built = AmqpSourceConfig::new(URL, "hooks")
            .unwrap()
            .with_declare(true)
            .with_prefetch(NonZeroU16::new(7).unwrap())
            .with_connect_timeout(Duration::from_millis(300));
        assert_eq!(c, built);
        assert!(!format!("{c:?}").contains("s3cr3t"), "{c:?}");
    }

    #[test]
    fn bad_values_are_refused_without_secrets() {
        let err = |v: serde_json::Value| from_json(v).unwrap_err().to_string();
        let e = err(serde_json::json!({"url": URL, "queue": "q", "prefetch": 0}));
        assert!(e.contains("prefetch must be positive"), "{e}");
        let e = err(serde_json::json!({"url": URL, "queue": "q", "prefetch": 70000}));
        assert!(e.contains("u16") || e.contains("70000"), "{e}");
        let e = err(serde_json::json!({"url": URL, "queue": ""}));
        assert!(e.contains("queue: must not be empty"), "{e}");
        let e = err(serde_json::json!({"url": URL, "queue": "a\nb"}));
        assert!(e.contains("control"), "{e}");
        assert!(
            AmqpSourceConfig::new(URL, &"q".repeat(256))
                .unwrap_err()
                .to_string()
                .contains("255")
        );
        let e = err(serde_json::json!({"url": URL}));
        assert!(e.contains("queue"), "{e}");
        let e = err(serde_json::json!({"url": URL, "queue": "q", "bogus": 1}));
        assert!(e.contains("bogus"), "{e}");
        let e = err(serde_json::json!({"url": "amqp://u:s3cr3t@broker.example/v", "queue": "q"}));
        assert!(e.contains("allow_insecure") && !e.contains("s3cr3t"), "{e}");
        let e = err(serde_json::json!({"url": "http://u:s3cr3t@h/", "queue": "q"}));
        assert!(!e.contains("s3cr3t"), "{e}");
        let ok = from_json(serde_json::json!({
            "url": "amqp://u:s3cr3t@broker.example/v", "queue": "q", "allow_insecure": true
        }))
        .unwrap();
        assert!(ok.allow_insecure());
        assert!(AmqpSourceConfig::new("amqps://u:s3cr3t@broker.example/v", "q").is_ok());
    }
}

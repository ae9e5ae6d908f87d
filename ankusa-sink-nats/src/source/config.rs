//! The `type = "nats"` source config: the keys of a `--from` file and their checks.

use crate::config::{Auth, ConfigError, NatsConfig};
use crate::connection::NatsConnection;
use ankusa_sink_core::Secret;
use serde::Deserialize;
use std::fmt;
use std::num::NonZeroU64;
use std::path::PathBuf;
use std::time::Duration;

/// The shortest `ack_wait` a consumer the source creates gets: it is
/// `max(2 x attempt timeout, 30 s)` unless `ack_wait_ms` says otherwise.
pub const MIN_CREATED_ACK_WAIT: Duration = Duration::from_secs(30);

/// The operator's keys, exactly as written in a `--from` file (`type` already removed).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceRepr {
    #[serde(flatten)]
    conn: NatsConnection,
    stream: String,
    consumer: String,
    ack_wait_ms: Option<NonZeroU64>,
}

/// A valid NATS JetStream source configuration (`type = "nats"` in a `--from` file).
///
/// `url`, `stream` and `consumer` (a durable pull consumer, created when it does not
/// exist) are required; `user` + `password`, `token`, `nkey_seed`, `credentials_file`,
/// `tls_ca_file`, `client_name`, `timeout_ms` (the wait for a JetStream API answer) and
/// `connect_timeout_ms` mean what they mean for the sink. `ack_wait_ms` is the `ack_wait`
/// of a consumer the source creates. `Debug` prints no secret.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SourceRepr")]
#[non_exhaustive]
pub struct NatsSourceConfig {
    pub(super) conn: NatsConfig,
    pub(super) stream: String,
    pub(super) consumer: String,
    pub(super) ack_wait_ms: Option<NonZeroU64>,
}

impl TryFrom<SourceRepr> for NatsSourceConfig {
    type Error = ConfigError;

    fn try_from(r: SourceRepr) -> Result<Self, ConfigError> {
        let conn = NatsConfig::from_connection(r.conn)?;
        check_name("stream", &r.stream)?;
        check_name("consumer", &r.consumer)?;
        Ok(NatsSourceConfig {
            conn,
            stream: r.stream,
            consumer: r.consumer,
            ack_wait_ms: r.ack_wait_ms,
        })
    }
}

/// A stream or consumer name JetStream accepts (and that fits in an API subject).
fn check_name(key: &'static str, name: &str) -> Result<(), ConfigError> {
    let reason = if name.is_empty() {
        "must not be empty"
    } else if name
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '.' | '*' | '>' | '/' | '\\'))
    {
        "no whitespace, control characters, '.', '*', '>', '/' or '\\'"
    } else if name.len() > 255 {
        "at most 255 bytes"
    } else {
        return Ok(());
    };
    Err(ConfigError::Value { key, reason })
}

impl fmt::Debug for NatsSourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let auth = match &self.conn.auth {
            Auth::None => "none",
            Auth::UserPassword(..) => "user_password",
            Auth::Token(_) => "token",
            Auth::NkeySeed(_) => "nkey_seed",
            Auth::CredentialsFile(_) => "credentials_file",
        };
        f.debug_struct("NatsSourceConfig")
            .field("url", &self.conn.url)
            .field("stream", &self.stream)
            .field("consumer", &self.consumer)
            .field("auth", &auth)
            .field("tls_ca_file", &self.conn.tls_ca_file)
            .field("client_name", &self.conn.client_name)
            .field("timeout_ms", &self.conn.timeout_ms)
            .field("connect_timeout_ms", &self.conn.connect_timeout_ms)
            .field("ack_wait_ms", &self.ack_wait_ms)
            .finish_non_exhaustive()
    }
}

impl NatsSourceConfig {
    /// A source reading `stream` on `url` through the durable pull consumer `consumer`
    /// (userinfo in the URL is taken as for the sink). Fails as `TryFrom` would.
    pub fn new(
        url: impl AsRef<str>,
        stream: impl Into<String>,
        consumer: impl Into<String>,
    ) -> Result<Self, ConfigError> {
        let (stream, consumer) = (stream.into(), consumer.into());
        check_name("stream", &stream)?;
        check_name("consumer", &consumer)?;
        Ok(NatsSourceConfig {
            conn: NatsConfig::parse_url(url.as_ref(), false)?.cleartext_checked()?,
            stream,
            consumer,
            ack_wait_ms: None,
        })
    }

    /// Accept a password or token over `nats://` to a host that is not loopback, as for
    /// the sink ([`NatsConfig::with_allow_insecure`]).
    ///
    /// # Errors
    /// [`ConfigError::Insecure`] for `false` when the config already holds such a login.
    pub fn with_allow_insecure(mut self, allow: bool) -> Result<Self, ConfigError> {
        self.conn = self.conn.with_allow_insecure(allow)?;
        Ok(self)
    }

    /// Log in with `user` and `password`.
    pub fn with_user_password(
        mut self,
        user: impl Into<String>,
        password: Secret,
    ) -> Result<Self, ConfigError> {
        self.conn = self.conn.with_user_password(user, password)?;
        Ok(self)
    }

    /// Log in with a token.
    pub fn with_token(mut self, token: Secret) -> Result<Self, ConfigError> {
        self.conn = self.conn.with_token(token)?;
        Ok(self)
    }

    /// Log in with an NKey user seed (`SU...`).
    pub fn with_nkey_seed(mut self, seed: Secret) -> Result<Self, ConfigError> {
        self.conn = self.conn.with_nkey_seed(seed)?;
        Ok(self)
    }

    /// Log in with a `.creds` file, read at each connection.
    pub fn with_credentials_file(mut self, path: impl Into<PathBuf>) -> Result<Self, ConfigError> {
        self.conn = self.conn.with_credentials_file(path)?;
        Ok(self)
    }

    /// Trust the PEM certificates in `path` (besides the system's) for `tls://`.
    pub fn with_tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.conn = self.conn.with_tls_ca_file(path);
        self
    }

    /// The client name the server shows for this connection.
    pub fn with_client_name(mut self, name: impl Into<String>) -> Result<Self, ConfigError> {
        self.conn = self.conn.with_client_name(name)?;
        Ok(self)
    }

    /// The wait for a JetStream API answer (rounded down to whole ms, at least 1).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.conn = self.conn.with_timeout(timeout);
        self
    }

    /// The connection timeout (rounded down to whole ms, at least 1).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.conn = self.conn.with_connect_timeout(timeout);
        self
    }

    /// The `ack_wait` of a consumer the source creates (rounded down to whole ms, at
    /// least 1); it must be longer than the attempt timeout, checked when the source opens.
    pub fn with_ack_wait(mut self, ack_wait: Duration) -> Self {
        self.ack_wait_ms = Some(ankusa_sink_kit::timeout_ms(ack_wait));
        self
    }

    /// The server URL, without userinfo.
    pub fn url(&self) -> &str {
        &self.conn.url
    }

    /// The stream read.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The durable pull consumer read through.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// The source that reads for the sink `sink` alone: the same stream through the
    /// durable consumer `<consumer>-<sink>` (created if missing, reading the stream from
    /// its start), so that each sink acknowledges on its own, its backlog waits in the
    /// stream, and a failing sink holds back no other. `sink` is made a consumer name:
    /// characters other than ASCII letters, digits, `_` and `-` become `_`.
    ///
    /// # Errors
    /// The consumer name it makes is over 255 bytes.
    pub fn for_sink(&self, sink: &str) -> Result<Self, ConfigError> {
        let consumer = format!("{}-{}", self.consumer, ankusa_source::lane_name(sink, &[]));
        check_name("consumer", &consumer)?;
        Ok(NatsSourceConfig {
            consumer,
            ..self.clone()
        })
    }

    /// The configured `ack_wait` for a consumer the source creates, if any.
    pub fn ack_wait(&self) -> Option<Duration> {
        self.ack_wait_ms.map(|ms| Duration::from_millis(ms.get()))
    }

    /// The `ack_wait` a consumer created for `attempt_timeout` gets.
    pub(super) fn created_ack_wait(&self, attempt_timeout: Duration) -> Duration {
        self.ack_wait()
            .unwrap_or_else(|| (attempt_timeout * 2).max(MIN_CREATED_ACK_WAIT))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: serde_json::Value) -> Result<NatsSourceConfig, String> {
        serde_json::from_value::<NatsSourceConfig>(json).map_err(|e| e.to_string())
    }

    #[test]
    fn keys_defaults_and_secrets() {
        let c = parse(serde_json::json!({
            "url": "nats://alice:hunter2@127.0.0.1:4222", "stream": "HOOKS", "consumer": "fwd",
            "ack_wait_ms": 90000, "timeout_ms": 1500, "client_name": "fwd-1"
        }))
        .unwrap();
        assert_eq!(c.url(), "nats://127.0.0.1:4222");
        assert_eq!(c.stream(), "HOOKS");
        assert_eq!(c.consumer(), "fwd");
        assert_eq!(c.ack_wait(), Some(Duration::from_secs(90)));
        let debug = format!("{c:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("user_password"), "{debug}");
        let c = NatsSourceConfig::new("nats://h", "S", "C").unwrap();
        assert_eq!(c.ack_wait(), None);
        assert_eq!(
            c.created_ack_wait(Duration::from_secs(5)),
            MIN_CREATED_ACK_WAIT
        );
        assert_eq!(
            c.created_ack_wait(Duration::from_secs(40)),
            Duration::from_secs(80)
        );
        let c = c.with_ack_wait(Duration::from_millis(1500));
        assert_eq!(
            c.created_ack_wait(Duration::from_secs(1)),
            Duration::from_millis(1500)
        );
    }

    #[test]
    fn refusals_name_the_key_not_the_value() {
        for (json, want) in [
            (
                serde_json::json!({"url": "nats://h", "stream": "S"}),
                "consumer",
            ),
            (
                serde_json::json!({"url": "nats://h", "consumer": "C"}),
                "stream",
            ),
            (
                serde_json::json!({"url": "nats://h", "stream": "a.b", "consumer": "C"}),
                "stream",
            ),
            (
                serde_json::json!({"url": "nats://h", "stream": "S", "consumer": "c d"}),
                "consumer",
            ),
            (
                serde_json::json!({"url": "nats://h", "stream": "", "consumer": "C"}),
                "stream: must not be empty",
            ),
            (
                serde_json::json!({"url": "http://h", "stream": "S", "consumer": "C"}),
                "url",
            ),
            (
                serde_json::json!({"url": "nats://h", "stream": "S", "consumer": "C", "subject": "a"}),
                "subject",
            ),
            (
                serde_json::json!({"url": "nats://h", "stream": "S", "consumer": "C", "ack_wait_ms": 0}),
                "nonzero",
            ),
            (
                serde_json::json!({"url": "nats://h", "stream": "S", "consumer": "C",
                    "token": "hunter2", "user": "u", "password": "hunter2"}),
                "one of",
            ),
        ] {
            let err = parse(json.clone()).unwrap_err();
            assert!(err.contains(want), "{json}: {err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }
}

//! An example third-party Ankusa sink: every hook becomes one Message v1 entry (field
//! `message`) appended with `XADD` to a Redis stream that must already exist.
//!
//! It lives outside the `ankusa-sinks` workspace on purpose: it is what an outside author
//! writes, depending on `ankusa-sink-core` only, and certified by `ankusa-sink-testkit`'s
//! conformance suite in `tests/it/conformance.rs`. See the testkit README, "Write and
//! certify your own sink".
//!
//! # Behaviour
//! - `Ok` only after Redis answered the `XADD` with the new entry's id (`NOMKSTREAM`: a
//!   missing stream is an error, never created by the sink). Redis answers once the entry
//!   is in the stream; for it to also be on disk, run Redis with `appendonly yes` and
//!   `appendfsync always`. The sink trusts that configuration: [`durable`](Sink::durable)
//!   is `true`.
//! - Bodies over `inline_max_bytes` (64 KiB by default) travel as `ctx.claim`; an encoded
//!   message over `max_message_bytes` (1 MiB by default) is refused before sending.
//! - Each request waits at most `timeout` (5 s by default) for Redis's answer; the
//!   connection is re-established by itself after an outage.
//! - The password in the URL never appears in `Debug`, `describe` or an error.

use ankusa_sink_core::message::{DEFAULT_INLINE_MAX_BYTES, encode};
use ankusa_sink_core::{
    Check, Class, Ctx, Description, Envelope, Failure, Payload, Sink, Subject, async_trait,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError};
use std::fmt;
use std::num::NonZeroUsize;
use std::time::Duration;

/// The stream entry field that carries the Message v1 JSON.
pub const FIELD: &str = "message";

/// Where and how a [`RedisStreamSink`] publishes.
#[derive(Clone)]
pub struct RedisStreamConfig {
    url: String,
    stream: String,
    inline_max_bytes: Option<NonZeroUsize>,
    max_message_bytes: NonZeroUsize,
    timeout: Duration,
}

impl fmt::Debug for RedisStreamConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStreamConfig")
            .field("url", &redact(&self.url))
            .field("stream", &self.stream)
            .field("inline_max_bytes", &self.inline_max_bytes)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl RedisStreamConfig {
    /// `url` is `redis://[user:password@]host:port[/db]`; `stream` the stream key.
    pub fn new(url: impl Into<String>, stream: impl Into<String>) -> Self {
        RedisStreamConfig {
            url: url.into(),
            stream: stream.into(),
            inline_max_bytes: Some(DEFAULT_INLINE_MAX_BYTES),
            max_message_bytes: NonZeroUsize::new(1 << 20).expect("non-zero"),
            timeout: Duration::from_secs(5),
        }
    }
    /// The largest body sent inline (`None`: always inline).
    pub fn with_inline_max_bytes(mut self, max: Option<NonZeroUsize>) -> Self {
        self.inline_max_bytes = max;
        self
    }
    /// The largest encoded message sent; larger ones are refused (permanent).
    pub fn with_max_message_bytes(mut self, max: NonZeroUsize) -> Self {
        self.max_message_bytes = max;
        self
    }
    /// How long a connection attempt or a request may take.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// `redis://user:password@host/` without the password (and with no user name either,
/// which may be a secret of its own).
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}{}", &url[..scheme + 3], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

/// Why a delivery failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum RedisStreamError {
    /// The stream does not exist (`XADD ... NOMKSTREAM` answered nil).
    NoStream(String),
    /// The encoded message is over `max_message_bytes`; nothing was sent.
    TooLarge {
        /// Encoded bytes.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The URL could not be used (the URL itself is never printed).
    BadUrl(ErrorKind),
    /// Redis or the connection failed.
    Redis(RedisError),
}

impl fmt::Display for RedisStreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedisStreamError::NoStream(s) => write!(f, "redis stream {s:?} does not exist"),
            RedisStreamError::TooLarge { size, max } => {
                write!(
                    f,
                    "message of {size} bytes exceeds max_message_bytes {max}; not sent"
                )
            }
            RedisStreamError::BadUrl(kind) => write!(f, "unusable redis URL ({kind:?})"),
            RedisStreamError::Redis(e) => write!(f, "redis: {e}"),
        }
    }
}

impl std::error::Error for RedisStreamError {}

/// The classification table.
///
/// | Error | Class |
/// | --- | --- |
/// | `NoStream`, `BadUrl`, authentication failed, `NOPERM`, `WRONGPASS`, `NOAUTH` | config |
/// | `TooLarge` | permanent |
/// | `OOM` (Redis over `maxmemory` refuses writes) | throttled (dispatch draws the pause) |
/// | anything else (I/O, timeout, `LOADING`, `READONLY`, ...) | transient |
pub fn classify(err: &RedisStreamError) -> Class {
    match err {
        RedisStreamError::NoStream(_) | RedisStreamError::BadUrl(_) => Class::Config,
        RedisStreamError::TooLarge { .. } => Class::Permanent,
        RedisStreamError::Redis(e) => {
            if e.kind() == ErrorKind::AuthenticationFailed
                || matches!(e.code(), Some("NOPERM" | "WRONGPASS" | "NOAUTH"))
            {
                Class::Config
            } else if e.code() == Some("OOM") {
                Class::Throttled
            } else {
                Class::Transient
            }
        }
    }
}

impl From<RedisStreamError> for Failure {
    fn from(e: RedisStreamError) -> Self {
        Failure::new(classify(&e), e)
    }
}

/// Appends Message v1 entries to a Redis stream.
pub struct RedisStreamSink {
    cfg: RedisStreamConfig,
    conn: Result<ConnectionManager, ErrorKind>,
}

impl fmt::Debug for RedisStreamSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStreamSink")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl RedisStreamSink {
    /// A sink for `cfg`. Connects lazily (on the first delivery); must be called inside a
    /// Tokio runtime. A URL that cannot be parsed makes every delivery a config failure.
    pub fn new(cfg: RedisStreamConfig) -> Self {
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(cfg.timeout))
            .set_response_timeout(Some(cfg.timeout))
            // Fail fast while the server is away; the next delivery reconnects.
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        let conn = redis::Client::open(cfg.url.as_str())
            .and_then(|client| ConnectionManager::new_lazy_with_config(client, manager))
            .map_err(|e| e.kind());
        RedisStreamSink { cfg, conn }
    }

    fn conn(&self) -> Result<ConnectionManager, RedisStreamError> {
        self.conn.clone().map_err(RedisStreamError::BadUrl)
    }

    async fn xadd(&self, message: Vec<u8>) -> Result<(), RedisStreamError> {
        let max = self.cfg.max_message_bytes.get();
        if message.len() > max {
            return Err(RedisStreamError::TooLarge {
                size: message.len(),
                max,
            });
        }
        let mut conn = self.conn()?;
        let id: Option<String> = redis::cmd("XADD")
            .arg(&self.cfg.stream)
            .arg("NOMKSTREAM")
            .arg("*")
            .arg(FIELD)
            .arg(message)
            .query_async(&mut conn)
            .await
            .map_err(RedisStreamError::Redis)?;
        match id {
            Some(_) => Ok(()),
            None => Err(RedisStreamError::NoStream(self.cfg.stream.clone())),
        }
    }
}

#[async_trait]
impl Sink for RedisStreamSink {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let message = encode(env, ctx, self.cfg.inline_max_bytes)?;
        Ok(self.xadd(message).await?)
    }

    fn inline_max_bytes(&self) -> Option<NonZeroUsize> {
        self.cfg.inline_max_bytes
    }

    fn describe(&self, _subject: &Subject) -> Option<Description> {
        let mut d = Description::new("redis-stream", Payload::Message);
        d.host = Some(redact(&self.cfg.url));
        d.address = Some(self.cfg.stream.clone());
        Some(d)
    }

    /// `EXISTS` on the stream, which also proves the credentials.
    async fn check(&self) -> Result<Check, Failure> {
        let mut conn = self.conn()?;
        let exists: bool = redis::cmd("EXISTS")
            .arg(&self.cfg.stream)
            .query_async(&mut conn)
            .await
            .map_err(RedisStreamError::Redis)?;
        if exists {
            Ok(Check::Passed)
        } else {
            Err(RedisStreamError::NoStream(self.cfg.stream.clone()).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_is_printed_without_credentials() {
        assert_eq!(
            redact("redis://u:p4ss@127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        let cfg = RedisStreamConfig::new("redis://u:p4ss@h:1", "s");
        assert!(!format!("{cfg:?}").contains("p4ss"));
    }

    #[test]
    fn the_table() {
        let c = |e| classify(&e);
        assert_eq!(c(RedisStreamError::NoStream("s".into())), Class::Config);
        assert_eq!(
            c(RedisStreamError::TooLarge { size: 2, max: 1 }),
            Class::Permanent
        );
        let auth = RedisError::from((ErrorKind::AuthenticationFailed, "auth"));
        assert_eq!(c(RedisStreamError::Redis(auth)), Class::Config);
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(c(RedisStreamError::Redis(io)), Class::Transient);
    }
}

//! An example third-party Ankusa sink: every hook becomes one Message v1 entry (field
//! `message`) appended with `XADD` to a Redis stream that must already exist.
//!
//! It lives outside the `ankusa-sinks` workspace on purpose: it is what an outside author
//! writes, depending on `ankusa-sink-core` for the sink and `ankusa-message` for what it
//! sends, on `ankusa-sinks` and `ankusa-sink-cli` for its `type = "example"` in sink files
//! and the command (`src/main.rs`, the `ankusa-sink-with-example` binary), and certified by
//! `ankusa-sink-testkit`'s conformance suite in `tests/it/conformance.rs`. See the testkit
//! README, "Write and certify your own sink".
//!
//! # Behaviour
//! - `Ok` only after Redis answered the `XADD` with the new entry's id (`NOMKSTREAM`: a
//!   missing stream is an error, never created by the sink).
//! - Redis answers once the entry is in memory; only with `appendonly yes` and
//!   `appendfsync always` is it on disk by then. [`Capabilities::durable`] is the
//!   config's `durable`: the operator's word for how the server is run (`true` from
//!   [`RedisStreamConfig::new`], stated in every sink file). `Ok` means stored either
//!   way ([`OkMeans::Stored`]): the entry is in the stream.
//! - The message is built once per delivery with core's [`Layout`] and [`Outgoing`], as
//!   every sink of this project builds it: Message v1, inline up to `inline_max_bytes`
//!   (64 KiB by default), as `ctx.claim` above it. A message over `max_message_bytes`
//!   (1 MiB by default) is refused before sending.
//! - Each request waits at most `timeout` (5 s by default) for Redis's answer; the
//!   connection is re-established by itself after an outage.
//! - A failure says whether the entry may be in the stream anyway
//!   ([`Failure::may_have_landed`], [`landed`]).
//! - The password in the URL never appears in `Debug`, `describe` or an error.
//!
//! # Sink file
//! `type = "example"` (see `example.toml`; [`register`] adds it to a registry):
//!
//! | Key | Type | Default | Meaning |
//! | --- | --- | --- | --- |
//! | `url` | string | required | `redis://[user:password@]host:port[/db]` (write the password as `${VAR}`) |
//! | `stream` | string | required | the stream key; it must exist |
//! | `durable` | bool | required | `true` only when the server persists before answering (`appendfsync always`) |
//! | `inline_max_bytes` | integer > 0 | 65,536 | the largest body sent inline |
//! | `max_message_bytes` | integer > 0 | 1,048,576 | the largest Message v1 sent |
//! | `timeout_ms` | integer > 0 | 5,000 | connecting and each request |

use ankusa_message::{DEFAULT_INLINE_MAX_BYTES, EmptyValues, Layout, Outgoing};
use ankusa_sink_core::{
    Capabilities, Check, Class, Ctx, Description, Envelope, Failure, OkMeans, Payload, Sink,
    Subject, async_trait,
};
use ankusa_sinks::{RegisterError, Registry};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError};
use serde::Deserialize;
use std::convert::Infallible;
use std::fmt;
use std::num::{NonZeroU64, NonZeroUsize};
use std::time::Duration;

/// The stream entry field that carries the Message v1 JSON.
pub const FIELD: &str = "message";

/// The sink file `type` of this sink.
pub const TYPE: &str = "example";

/// `registry` with this sink as `type = "example"`: its table is a [`RedisStreamConfig`],
/// built into a [`RedisStreamSink`].
///
/// # Errors
/// [`RegisterError::Duplicate`] when `registry` already has an `example` type.
pub fn register(registry: Registry) -> Result<Registry, RegisterError> {
    registry.register(TYPE, |config: RedisStreamConfig| {
        Ok::<_, Infallible>(RedisStreamSink::new(config))
    })
}

/// Where and how a [`RedisStreamSink`] publishes; in a sink file, the keys of the table in
/// the crate docs (unknown keys refused, the URL checked when the file is read).
#[derive(Clone, Deserialize)]
#[serde(try_from = "Repr")]
pub struct RedisStreamConfig {
    url: String,
    stream: String,
    durable: bool,
    inline_max_bytes: Option<NonZeroUsize>,
    max_message_bytes: NonZeroUsize,
    timeout: Duration,
}

/// The keys of a sink file, as written (`type` already removed by the registry).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Repr {
    url: String,
    stream: String,
    durable: bool,
    inline_max_bytes: Option<NonZeroUsize>,
    max_message_bytes: Option<NonZeroUsize>,
    timeout_ms: Option<NonZeroU64>,
}

impl TryFrom<Repr> for RedisStreamConfig {
    type Error = String;

    /// Checks the URL once, here, so a bad one is refused when the file is read; the
    /// reason names its kind, never the URL (it holds the password).
    fn try_from(r: Repr) -> Result<Self, String> {
        if let Err(e) = redis::Client::open(r.url.as_str()) {
            return Err(format!("url is not a usable redis URL ({:?})", e.kind()));
        }
        if r.stream.is_empty() {
            return Err("stream must not be empty".to_owned());
        }
        let mut config = RedisStreamConfig::new(r.url, r.stream).with_durable(r.durable);
        if let Some(max) = r.inline_max_bytes {
            config = config.with_inline_max_bytes(Some(max));
        }
        if let Some(max) = r.max_message_bytes {
            config = config.with_max_message_bytes(max);
        }
        if let Some(ms) = r.timeout_ms {
            config = config.with_timeout(Duration::from_millis(ms.get()));
        }
        Ok(config)
    }
}

impl fmt::Debug for RedisStreamConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStreamConfig")
            .field("url", &redact(&self.url))
            .field("stream", &self.stream)
            .field("durable", &self.durable)
            .field("inline_max_bytes", &self.inline_max_bytes)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl RedisStreamConfig {
    /// `url` is `redis://[user:password@]host:port[/db]`; `stream` the stream key. Durable:
    /// say `with_durable(false)` for a server that does not persist before answering.
    pub fn new(url: impl Into<String>, stream: impl Into<String>) -> Self {
        RedisStreamConfig {
            url: url.into(),
            stream: stream.into(),
            durable: true,
            inline_max_bytes: Some(DEFAULT_INLINE_MAX_BYTES),
            max_message_bytes: NonZeroUsize::new(1 << 20).expect("non-zero"),
            timeout: Duration::from_secs(5),
        }
    }
    /// Whether the server persists an entry before answering `XADD` (`appendonly yes`,
    /// `appendfsync always`): what [`Capabilities::durable`] says.
    pub fn with_durable(mut self, durable: bool) -> Self {
        self.durable = durable;
        self
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

/// Whether the entry may be in the stream although the delivery failed
/// ([`Failure::may_have_landed`]): what the client knows, a pure function like
/// [`classify`].
///
/// | Error | May have landed |
/// | --- | --- |
/// | `NoStream` (Redis answered nil), `TooLarge`, `BadUrl` (nothing sent), any error reply of the server (a refused command is not executed), a refused connection | `Some(false)` |
/// | no answer in time, the connection dropped (the `XADD` may have been written) | `Some(true)` |
/// | another client error | `None` |
pub fn landed(err: &RedisStreamError) -> Option<bool> {
    match err {
        RedisStreamError::NoStream(_)
        | RedisStreamError::TooLarge { .. }
        | RedisStreamError::BadUrl(_) => Some(false),
        RedisStreamError::Redis(e) => {
            if e.is_connection_refusal()
                || matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
            {
                Some(false)
            } else if e.is_timeout() || e.is_connection_dropped() {
                Some(true)
            } else {
                None
            }
        }
    }
}

impl From<RedisStreamError> for Failure {
    fn from(e: RedisStreamError) -> Self {
        let landed = landed(&e);
        Failure::new(classify(&e), e).with_may_have_landed(landed)
    }
}

/// Appends Message v1 entries to a Redis stream.
pub struct RedisStreamSink {
    cfg: RedisStreamConfig,
    layout: Layout,
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
        // Built once: every delivery's message comes from it. `Keep`: a tenantless hook's
        // `tenant_id` is `""` in the message, as Message v1 writes it.
        let layout = Layout::message(cfg.inline_max_bytes, EmptyValues::Keep);
        RedisStreamSink { cfg, layout, conn }
    }

    fn conn(&self) -> Result<ConnectionManager, RedisStreamError> {
        self.conn.clone().map_err(RedisStreamError::BadUrl)
    }

    async fn xadd(&self, message: &[u8]) -> Result<(), RedisStreamError> {
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
        // The body is the whole Message v1: its attributes (id, tenant, idempotency key,
        // ...) are inside it, so a stream entry needs no fields beside it. A transport with
        // headers would map `out.attributes()` to them here, in one function.
        let out = Outgoing::new(env, ctx, &self.layout)?;
        Ok(self.xadd(out.body()).await?)
    }

    /// Durable as configured; bodies over `inline_max_bytes` by claim. Stored whether or
    /// not durable: an answered `XADD` is an entry in the stream (in memory unless the
    /// server persists first, which is what `durable` says). `password` when the URL
    /// carries credentials.
    fn capabilities(&self) -> Capabilities {
        let auth = if redact(&self.cfg.url) == self.cfg.url {
            "none"
        } else {
            "password"
        };
        Capabilities::new(self.cfg.durable, self.cfg.inline_max_bytes)
            .with_ok_means(OkMeans::Stored)
            .with_auth([auth])
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

    /// Every row of `landed`'s table; the conformance suite provokes the refused
    /// connection, the oversized message and the unanswered `XADD` for real
    /// (`reports_landing` in `tests/it/conformance.rs`).
    #[test]
    fn the_landing_table() {
        let io = |kind| RedisStreamError::Redis(RedisError::from(std::io::Error::from(kind)));
        for (e, want) in [
            (RedisStreamError::NoStream("s".into()), Some(false)),
            (RedisStreamError::TooLarge { size: 2, max: 1 }, Some(false)),
            (
                RedisStreamError::BadUrl(ErrorKind::InvalidClientConfig),
                Some(false),
            ),
            (io(std::io::ErrorKind::ConnectionRefused), Some(false)),
            (io(std::io::ErrorKind::TimedOut), Some(true)),
            (io(std::io::ErrorKind::ConnectionReset), Some(true)),
            (
                RedisStreamError::Redis(RedisError::from((ErrorKind::InvalidClientConfig, "x"))),
                None,
            ),
        ] {
            let shown = format!("{e:?}");
            assert_eq!(landed(&e), want, "{shown}");
            assert_eq!(Failure::from(e).may_have_landed(), want, "{shown}");
        }
    }
}

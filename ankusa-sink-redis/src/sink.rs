//! [`RedisSink`]: one shared, self-reconnecting multiplexed connection; `XADD` or
//! `PUBLISH` per delivery.

use crate::config::DEFAULT_MAX_MESSAGE_BYTES;
use crate::config::{RedisConfig, Target};
use crate::error::{Op, RedisError};
use crate::outgoing;
use ankusa_message::{EmptyValues, Layout, Outgoing};
use ankusa_sink_core::{Capabilities, OkMeans, Ordering, Payload};
use ankusa_sink_core::{
    Check, Ctx, Description, Envelope, Failure, InFlight, Sink, Subject, async_trait,
};
use ankusa_sink_kit::{host_port, printable};
use redis::IntoConnectionInfo;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

/// Delivers Message v1 to Redis: `XADD` to a stream or `PUBLISH` to a channel.
///
/// # Behavior
/// - One multiplexed connection ([`ConnectionManager`]) is shared by every delivery and
///   re-established by itself after an outage; each request waits at most the configured
///   timeout for its reply.
/// - `Ok` only after Redis answered: the entry's id for `XADD`; for `PUBLISH`, a count of
///   receivers above zero (zero is a failure of the `no_subscriber` class).
/// - [`Capabilities::durable`](ankusa_sink_core::Capabilities::durable) is the config's `durable` in stream mode, `false` for a
///   channel.
/// - `Debug`, [`describe`](Sink::describe) and failures never show the URL's userinfo or
///   the password.
pub struct RedisSink {
    conn: ConnectionManager,
    layout: Layout,
    config: RedisConfig,
    /// The server's `proto-max-bulk-len` once asked (`None`: the server did not say).
    server_max_bulk: OnceLock<Option<usize>>,
}

/// The smallest `proto-max-bulk-len` Redis accepts (1 MiB): a message no larger fits every
/// server, so only a larger one makes the sink ask the server for its limit.
const SERVER_BULK_FLOOR: usize = 1 << 20;

impl fmt::Debug for RedisSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The connection's own Debug may show its connection info: left out.
        f.debug_struct("RedisSink")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RedisSink {
    /// Builds the client from a valid config; connects lazily, on the first delivery or
    /// [`check`](Sink::check). Call it inside a Tokio runtime.
    ///
    /// # Errors
    /// A URL the client cannot use, or an unreadable `tls_ca_file` ([`RedisError::Build`]).
    pub fn new(config: RedisConfig) -> Result<Self, RedisError> {
        let client = client(&config)?;
        let timeout = Some(config.timeout());
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(timeout)
            .set_response_timeout(timeout)
            // Fail fast while the server is away: the delivery fails transient and dispatch
            // retries; the next request reconnects.
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        let conn = ConnectionManager::new_lazy_with_config(client, manager)
            .map_err(|e| RedisError::Build(format!("{:?}", e.kind())))?;
        let layout = config
            .message
            .layout(Payload::Message, EmptyValues::Keep)
            .with_key(config.target.key().clone());
        Ok(RedisSink {
            conn,
            layout,
            config,
            server_max_bulk: OnceLock::new(),
        })
    }

    /// The largest message this sink may send for a message of `size` bytes:
    /// `max_message_bytes`, lowered to the server's `proto-max-bulk-len` when the message
    /// is over the 1 MiB every server takes. A value over the server's limit is refused
    /// there with the connection closed, which this client mostly sees as a reset (a
    /// transient failure every retry repeats): asking first makes it the permanent
    /// `TooLarge` it is, with nothing sent.
    async fn limit_for(&self, size: usize) -> Result<usize, RedisError> {
        let configured = self.config.max_message_bytes.get();
        if size <= SERVER_BULK_FLOOR || size > configured {
            return Ok(configured);
        }
        let server = match self.server_max_bulk.get() {
            Some(known) => *known,
            None => {
                let known = self.ask_max_bulk().await?;
                // Two first large deliveries may both ask: either answer is the server's.
                let _ = self.server_max_bulk.set(known);
                known
            }
        };
        Ok(server.map_or(configured, |s| s.min(configured)))
    }

    /// `CONFIG GET proto-max-bulk-len`: `None` when the server does not say; an error only
    /// when the connection failed (the delivery fails as it would have).
    async fn ask_max_bulk(&self) -> Result<Option<usize>, RedisError> {
        let value = self.config_get("proto-max-bulk-len", Op::ConfigGet).await?;
        Ok(value.and_then(|v| v.parse().ok()))
    }

    /// `CONFIG GET <parameter>`: `None` when the server does not say (CONFIG refused to an
    /// ACL user, renamed or disabled on a managed service, an unknown parameter, or an
    /// unexpected answer); an error only when the connection failed.
    async fn config_get(&self, parameter: &str, op: Op) -> Result<Option<String>, RedisError> {
        let reply: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(parameter)
            .query_async(&mut self.conn.clone())
            .await;
        match reply {
            Ok(pair) => Ok(pair.into_iter().nth(1)),
            Err(source)
                if source.is_io_error()
                    || source.is_timeout()
                    || source.is_connection_dropped()
                    || source.is_connection_refusal() =>
            {
                Err(RedisError::Client { op, source })
            }
            Err(_) => Ok(None),
        }
    }

    /// For a sink configured `durable`: ask the server whether it keeps what it answers.
    /// `appendonly no` fails as [`RedisError::NotPersistent`] (config); `appendfsync` other
    /// than `always` is reported (a WARN: a Redis restart keeps the entries, an OS crash
    /// may lose the last second of them); a server that does not answer `CONFIG GET`
    /// (refused to an ACL user, renamed, a managed service) is reported as not asked and
    /// passes: the operator's word stands.
    async fn require_persistence(&self) -> Result<(), RedisError> {
        let host = host_port(&self.config.url).unwrap_or_default();
        let Some(appendonly) = self.config_get("appendonly", Op::Check).await? else {
            tracing::warn!(
                %host,
                "redis sink: check could not ask whether the server persists (CONFIG GET \
                 appendonly refused or renamed); durable is the config's word alone"
            );
            return Ok(());
        };
        if appendonly != "yes" {
            let save = self.config_get("save", Op::Check).await?;
            return Err(RedisError::NotPersistent {
                snapshots: save.is_some_and(|s| !s.trim().is_empty()),
            });
        }
        match self.config_get("appendfsync", Op::Check).await? {
            Some(fsync) if fsync == "always" => {}
            fsync => tracing::warn!(
                %host,
                appendfsync = %fsync.as_deref().map_or_else(|| "not asked".to_owned(), printable),
                "redis sink: the server keeps an append-only file but does not fsync each \
                 write (appendfsync always): an OS crash may lose the last second of \
                 acknowledged entries"
            ),
        }
        Ok(())
    }
}

/// The client for `config`: the URL's address and database, the configured login over
/// the URL's, TLS roots (`tls_ca_file`, else the system's).
fn client(config: &RedisConfig) -> Result<redis::Client, RedisError> {
    // Never print the client's error text here: it may quote the URL.
    let bad = |e: redis::RedisError| RedisError::Build(format!("unusable url ({:?})", e.kind()));
    let info = config.url.as_str().into_connection_info().map_err(bad)?;
    let mut settings = info.redis_settings().clone();
    if let Some(password) = &config.password {
        settings = settings.set_password(password.expose());
        if let Some(user) = &config.username {
            settings = settings.set_username(user);
        }
    }
    let info = info.set_redis_settings(settings);
    if config.is_tls() {
        install_crypto_provider();
    }
    match &config.tls_ca_file {
        None => redis::Client::open(info).map_err(bad),
        Some(path) => {
            let pem = std::fs::read(path)
                .map_err(|e| RedisError::Build(format!("tls_ca_file {}: {e}", path.display())))?;
            let certs = redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem),
            };
            redis::Client::build_with_tls(info, certs).map_err(bad)
        }
    }
}

/// rustls needs a process-wide crypto provider when more than one is compiled in: install
/// aws-lc-rs unless one is installed already.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: one provider is installed.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
}

#[async_trait]
impl Sink for RedisSink {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let out = Outgoing::new(env, ctx, &self.layout)?;
        let size = out.body().len();
        let max = self.limit_for(size).await?;
        if size > max {
            return Err(RedisError::TooLarge { size, max }.into());
        }
        let cmd = outgoing::to_cmd(out, &self.config.target);
        let mut conn = self.conn.clone();
        match &self.config.target {
            Target::Stream { .. } => {
                let _id: redis::Value =
                    cmd.query_async(&mut conn)
                        .await
                        .map_err(|source| RedisError::Client {
                            op: Op::Xadd,
                            source,
                        })?;
            }
            Target::Channel {
                channel,
                no_subscriber,
            } => {
                let receivers: u64 =
                    cmd.query_async(&mut conn)
                        .await
                        .map_err(|source| RedisError::Client {
                            op: Op::Publish,
                            source,
                        })?;
                if receivers == 0 {
                    return Err(RedisError::NoSubscriber {
                        channel: channel.render(env),
                        class: *no_subscriber,
                    }
                    .into());
                }
            }
        }
        Ok(())
    }

    /// A stream entry is stored (`XADD` answered; durable only as configured), in order
    /// per stream key; a channel message is only sent. `max_message_bytes` of the Message
    /// v1 (bodies over `inline_max_bytes` by claim); the password (with an ACL user), and
    /// TLS for `rediss://`. The pipeline window is [`InFlight::PIPELINE`]: commands are
    /// pipelined on one multiplexed connection, so many outstanding deliveries keep it busy.
    fn capabilities(&self) -> Capabilities {
        let c = &self.config;
        let max = c.max_message_bytes.get();
        let durable = matches!(c.target, Target::Stream { durable: true, .. });
        let mut caps = Capabilities::new(durable, self.layout.inline_max_bytes())
            .with_in_flight(InFlight::PIPELINE)
            .with_max_message(
                max,
                "Message v1",
                Capabilities::limit_source(max, DEFAULT_MAX_MESSAGE_BYTES.get()),
            );
        caps = match &c.target {
            Target::Stream { key, .. } => {
                caps.with_ok_means(OkMeans::Stored)
                    .with_ordering(Ordering::PerKey {
                        key: key.as_str().to_owned(),
                    })
            }
            Target::Channel { .. } => caps.with_ok_means(OkMeans::Sent),
        };
        let url_password = url::Url::parse(&c.url).is_ok_and(|u| u.password().is_some());
        let mut auth = Vec::new();
        if c.username.is_some() {
            auth.push("acl_user");
        } else if c.password.is_some() || url_password {
            auth.push("password");
        }
        if c.is_tls() {
            auth.push("tls");
        }
        caps.with_auth(auth)
    }

    fn describe(&self, subject: &Subject) -> Option<Description> {
        let key = self.config.target.key();
        let mut d = Description::new("redis", self.layout.payload());
        d.host = host_port(&self.config.url);
        d.address = key.render_for(&subject.source_id, subject.tenant_id.as_deref());
        if !key.is_static() {
            d.computed.push(
                match self.config.target {
                    Target::Stream { .. } => "stream",
                    Target::Channel { .. } => "channel",
                }
                .to_owned(),
            );
        }
        Some(d)
    }

    /// `PING` (connects and logs in); for a stream configured `durable`, `CONFIG GET
    /// appendonly` (`no` fails config; see `require_persistence`); then, for a fixed key,
    /// `TYPE` (stream mode: the key is absent or a stream) or `PUBSUB NUMSUB` (channel mode:
    /// someone listens). Nothing is written.
    async fn check(&self) -> Result<Check, Failure> {
        let failed = |source| RedisError::Client {
            op: Op::Check,
            source,
        };
        let mut conn = self.conn.clone();
        let _: redis::Value = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(failed)?;
        if matches!(self.config.target, Target::Stream { durable: true, .. }) {
            self.require_persistence().await?;
        }
        let key = self.config.target.key();
        let Some(name) = key.is_static().then(|| key.render_for("", None)).flatten() else {
            return Ok(Check::Passed);
        };
        match &self.config.target {
            Target::Stream { .. } => {
                let found: String = redis::cmd("TYPE")
                    .arg(&name)
                    .query_async(&mut conn)
                    .await
                    .map_err(failed)?;
                if found != "none" && found != "stream" {
                    return Err(RedisError::WrongType { key: name, found }.into());
                }
            }
            Target::Channel { no_subscriber, .. } => {
                let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(&name)
                    .query_async(&mut conn)
                    .await
                    .map_err(failed)?;
                if counts.iter().all(|(_, n)| *n == 0) {
                    return Err(RedisError::NoSubscriber {
                        channel: name,
                        class: *no_subscriber,
                    }
                    .into());
                }
            }
        }
        Ok(Check::Passed)
    }
}

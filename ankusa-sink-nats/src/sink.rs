//! [`NatsSink`]: one shared connection, one request per delivery, the ack awaited.

use crate::config::{Auth, NatsConfig, subject_problem};
use crate::error::NatsError;
use crate::outgoing::{self, Publish};
use ankusa_message::{EmptyValues, Layout, Outgoing};
use ankusa_sink_core::{Capabilities, Payload};
use ankusa_sink_core::{Check, Ctx, Description, Envelope, Failure, InFlight, Sink, Subject};
use ankusa_sink_kit::{host_port, printable};
use async_nats::client::Request;
use async_nats::connection::State;
use async_nats::{Client, ConnectErrorKind, ConnectOptions, RequestErrorKind};
use serde::Deserialize;
use std::fmt;
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, OnceCell};

/// How long a finding of [`NatsSink::why_not_connected`] stands: an outage costs one
/// connection attempt per interval, not one per delivery.
const DIAGNOSIS_FOR: Duration = Duration::from_secs(1);

/// A NATS JetStream sink.
///
/// Publishes each hook as Message v1 with `Nats-Msg-Id` and the `ankusa_*` headers, as a
/// request whose reply is the JetStream publish ack: `Ok` only once a stream stored the
/// message (or had it already: a `duplicate` ack). One connection, made on the first
/// delivery (or [`check`](Sink::check)) and shared by every delivery; async-nats
/// reconnects it, and while it is down deliveries fail transient at once, unless the
/// server now refuses the credentials (config).
pub struct NatsSink {
    config: NatsConfig,
    layout: Layout,
    client: OnceCell<Client>,
    /// When the shared client was last found down, and the refusal a connection of the
    /// sink's own met then (`None`: none).
    diagnosis: Mutex<Option<(Instant, Option<ConnectErrorKind>)>>,
}

impl fmt::Debug for NatsSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsSink")
            .field("config", &self.config)
            .field("connected", &self.client.initialized())
            .finish()
    }
}

/// A JetStream publish ack: `{"stream": .., "seq": n, "duplicate": bool}` or
/// `{"error": {"code": .., "err_code": .., "description": ..}}`.
#[derive(Deserialize)]
struct Ack {
    stream: Option<String>,
    seq: Option<u64>,
    error: Option<ApiError>,
}

#[derive(Deserialize)]
struct ApiError {
    code: u16,
    #[serde(default)]
    err_code: u16,
    #[serde(default)]
    description: String,
}

/// Any JetStream API answer, for its error alone (`$JS.API.INFO`).
#[derive(Deserialize)]
struct ApiReply {
    error: Option<ApiError>,
}

/// The answer to `$JS.API.STREAM.NAMES` with a subject filter.
#[derive(Deserialize)]
struct StreamNames {
    streams: Option<Vec<String>>,
    error: Option<ApiError>,
}

/// The part of `$JS.API.STREAM.INFO.<stream>`'s answer `check()` reads: the storage type.
#[derive(Deserialize)]
struct StreamInfo {
    config: Option<StreamConfig>,
    error: Option<ApiError>,
}

#[derive(Deserialize)]
struct StreamConfig {
    /// `"file"` or `"memory"`.
    storage: Storage,
}

/// A stream's storage type as JetStream names it; a type this sink does not know yet is
/// `Other` and is not called memory.
#[derive(Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Storage {
    File,
    Memory,
    #[serde(other)]
    Other,
}

impl NatsSink {
    /// Builds the sink from a valid config; connects on first use, validates nothing.
    pub fn new(config: NatsConfig) -> Self {
        let layout = config
            .message
            .layout(Payload::Message, EmptyValues::Keep)
            .with_key(config.subject.clone());
        NatsSink {
            config,
            layout,
            client: OnceCell::new(),
            diagnosis: Mutex::new(None),
        }
    }

    /// The configuration this sink was built from.
    pub fn config(&self) -> &NatsConfig {
        &self.config
    }

    /// The shared connection: made once, then async-nats keeps it (reconnecting).
    async fn client(&self) -> Result<&Client, NatsError> {
        let client = self.client.get_or_try_init(|| self.connect()).await?;
        if client.connection_state() != State::Connected {
            return Err(self.why_not_connected().await);
        }
        Ok(client)
    }

    /// Why the shared client is down. async-nats reconnects in the background and says
    /// why it cannot only in an event's text; a connection of the sink's own gets the
    /// typed answer. A server that now refuses the credentials (rotated, revoked) is the
    /// `Connect` error that says so (config), not a reconnect to wait for; anything else
    /// is [`NatsError::NotConnected`]. One attempt per [`DIAGNOSIS_FOR`], shared by the
    /// deliveries waiting meanwhile.
    async fn why_not_connected(&self) -> NatsError {
        let mut last = self.diagnosis.lock().await;
        let refused = match *last {
            Some((at, refused)) if at.elapsed() < DIAGNOSIS_FOR => refused,
            _ => {
                let refused = match connect(&self.config, ConnectOptions::new()).await {
                    Err(NatsError::Connect { kind, .. }) if refuses_credentials(kind) => Some(kind),
                    // Connected (the shared client is about to be too), or down for
                    // another reason: the probe connection closes when dropped.
                    _ => None,
                };
                *last = Some((Instant::now(), refused));
                refused
            }
        };
        match refused {
            Some(kind) => NatsError::Connect {
                host: host_port(&self.config.url).unwrap_or_default(),
                kind,
                source: async_nats::ConnectError::new(kind),
            },
            None => NatsError::NotConnected,
        }
    }

    async fn connect(&self) -> Result<Client, NatsError> {
        connect(&self.config, ConnectOptions::new()).await
    }

    /// Send `p` and wait for JetStream's answer.
    async fn publish(&self, p: Publish) -> Result<(), NatsError> {
        let client = self.client().await?;
        let subject = async_nats::Subject::from(p.subject);
        let request = Request::new()
            .headers(p.headers)
            .payload(p.payload)
            .timeout(Some(self.config.timeout()));
        let reply = client
            .send_request(subject.clone(), request)
            .await
            .map_err(|e| self.request_error(client, e, subject.as_str()))?;
        if let Some(status) = reply.status {
            let status = status.as_u16();
            if status != 200 {
                return Err(NatsError::Status { status });
            }
        }
        let ack: Ack = serde_json::from_slice(&reply.payload)
            .map_err(|e| NatsError::BadAck(printable(&e.to_string())))?;
        match ack {
            Ack { error: Some(e), .. } => Err(api_error(e)),
            Ack {
                stream: Some(_),
                seq: Some(seq),
                ..
            } if seq > 0 => Ok(()),
            _ => Err(NatsError::BadAck("no stream and sequence".into())),
        }
    }

    fn request_error(
        &self,
        client: &Client,
        e: async_nats::RequestError,
        subject: &str,
    ) -> NatsError {
        match e.kind() {
            RequestErrorKind::MaxPayloadExceeded => NatsError::TooLarge {
                max: client.max_payload(),
            },
            RequestErrorKind::InvalidSubject => NatsError::Subject("refused by the client"),
            RequestErrorKind::NoResponders => NatsError::NoStream {
                subject: printable(subject),
            },
            RequestErrorKind::TimedOut => NatsError::AckTimeout {
                ms: self.config.timeout_ms.get(),
            },
            kind => NatsError::Request { kind, source: e },
        }
    }

    /// Connect, then ask JetStream which streams take the subject, publishing nothing.
    async fn preflight(&self) -> Result<Check, NatsError> {
        let client = self.client().await?;
        let (api, body) = if self.config.subject.is_static() {
            let subject = self.config.subject.literal_text();
            (
                "$JS.API.STREAM.NAMES",
                serde_json::json!({ "subject": subject }).to_string(),
            )
        } else {
            ("$JS.API.INFO", String::new())
        };
        let request = Request::new()
            .payload(body.into())
            .timeout(Some(self.config.timeout()));
        let reply = client
            .send_request(api.to_owned(), request)
            .await
            .map_err(|e| self.request_error(client, e, self.config.subject.as_str()))?;
        if !self.config.subject.is_static() {
            // JetStream answered for this account with these credentials; the subject
            // depends on each hook.
            let info: ApiReply = serde_json::from_slice(&reply.payload)
                .map_err(|e| NatsError::BadAck(printable(&e.to_string())))?;
            return match info.error {
                Some(e) => Err(api_error(e)),
                None => Ok(Check::Reachable),
            };
        }
        let names: StreamNames = serde_json::from_slice(&reply.payload)
            .map_err(|e| NatsError::BadAck(printable(&e.to_string())))?;
        if let Some(e) = names.error {
            return Err(api_error(e));
        }
        let streams = names.streams.unwrap_or_default();
        if streams.is_empty() {
            return Err(NatsError::NoStream {
                subject: printable(self.config.subject.as_str()),
            });
        }
        for stream in &streams {
            self.require_file_storage(client, stream).await?;
        }
        Ok(Check::Passed)
    }

    /// The sink declares itself durable: a stream on memory storage acks what it will lose
    /// when the server restarts, so it fails as [`NatsError::MemoryStorage`] (config).
    /// Asked with `$JS.API.STREAM.INFO.<stream>`, read-only.
    async fn require_file_storage(&self, client: &Client, stream: &str) -> Result<(), NatsError> {
        let request = Request::new()
            .payload(bytes::Bytes::new())
            .timeout(Some(self.config.timeout()));
        let reply = client
            .send_request(format!("$JS.API.STREAM.INFO.{stream}"), request)
            .await
            .map_err(|e| self.request_error(client, e, self.config.subject.as_str()))?;
        let info: StreamInfo = serde_json::from_slice(&reply.payload)
            .map_err(|e| NatsError::BadAck(printable(&e.to_string())))?;
        if let Some(e) = info.error {
            return Err(api_error(e));
        }
        match info.config {
            Some(StreamConfig {
                storage: Storage::Memory,
            }) => Err(NatsError::MemoryStorage {
                stream: printable(stream),
            }),
            _ => Ok(()),
        }
    }
}

/// Connect to `c.url` with `c`'s credentials, TLS and timeouts, on top of `base` (a
/// source adds its event callback there). Shared by the sink and the source.
pub(crate) async fn connect(c: &NatsConfig, base: ConnectOptions) -> Result<Client, NatsError> {
    install_crypto_provider();
    let mut opts = match &c.auth {
        Auth::None => base,
        Auth::UserPassword(u, p) => base.user_and_password(u.clone(), p.expose().to_owned()),
        Auth::Token(t) => base.token(t.expose().to_owned()),
        Auth::NkeySeed(s) => base.nkey(s.expose().to_owned()),
        Auth::CredentialsFile(path) => base
            .credentials_file(path)
            .await
            .map_err(NatsError::CredentialsFile)?,
    };
    opts = opts
        .connection_timeout(c.connect_timeout())
        .request_timeout(Some(c.timeout()))
        .require_tls(c.tls)
        .ignore_discovered_servers();
    if let Some(name) = &c.client_name {
        opts = opts.name(name);
    }
    if let Some(ca) = &c.tls_ca_file {
        opts = opts.add_root_certificates(ca.clone());
    }
    let host = host_port(&c.url).unwrap_or_default();
    // `connect` tries the server once within `connection_timeout`; the outer bound also
    // covers the TLS handshake and the server's INFO/CONNECT exchange.
    match tokio::time::timeout(c.connect_timeout(), opts.connect(c.url.as_str())).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(source)) => Err(NatsError::Connect {
            host,
            kind: source.kind(),
            source,
        }),
        Err(_) => Err(NatsError::ConnectTimeout {
            host,
            ms: c.connect_timeout_ms.get(),
        }),
    }
}

/// Whether a connect error is the server refusing the credentials.
fn refuses_credentials(kind: ConnectErrorKind) -> bool {
    matches!(
        kind,
        ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication
    )
}

fn api_error(e: ApiError) -> NatsError {
    NatsError::JetStream {
        code: e.code,
        err_code: e.err_code,
        description: printable(&e.description),
    }
}

/// rustls needs a process-wide crypto provider when more than one is compiled in (another
/// crate of the program may enable aws-lc-rs beside async-nats's ring): install ring unless
/// one is installed already.
fn install_crypto_provider() {
    use async_nats::rustls::crypto::{CryptoProvider, ring};
    if CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: one provider is installed.
        let _ = ring::default_provider().install_default();
    }
}

#[ankusa_sink_core::async_trait]
impl Sink for NatsSink {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        // A hook's `.` would add a token the operator's template does not describe.
        if !self.config.subject_values_may_add_tokens
            && let Some((placeholder, _)) = self.config.subject.inserted_char(env, |c| c == '.')
        {
            return Err(NatsError::SubjectValue(placeholder.as_str()).into());
        }
        let out = Outgoing::new(env, ctx, &self.layout)?;
        let publish = outgoing::to_publish(out)?;
        if !self.config.subject.is_static()
            && let Some(reason) = subject_problem(&publish.subject)
        {
            return Err(NatsError::Subject(reason).into());
        }
        self.publish(publish).await?;
        Ok(())
    }

    /// Stored (a JetStream ack); bodies over `inline_max_bytes` by claim (`None` with
    /// CloudEvents: they travel inline). The size limit is the server's `max_payload` (and the
    /// stream's `max_msg_size`), known only once connected, and JetStream's duplicate
    /// window for `Nats-Msg-Id` is the stream's own: neither is claimed here. The
    /// configured authentication, and TLS for `tls://`. The pipeline window is
    /// [`InFlight::PIPELINE`]: JetStream publishes are pipelined on one connection and
    /// acked in order, so many outstanding publishes keep the connection busy.
    fn capabilities(&self) -> Capabilities {
        let mut auth = vec![match self.config.auth {
            Auth::None => "none",
            Auth::UserPassword(..) => "user_password",
            Auth::Token(_) => "token",
            Auth::NkeySeed(_) => "nkey",
            Auth::CredentialsFile(_) => "credentials_file",
        }];
        if self.config.tls {
            auth.push("tls");
        }
        Capabilities::new(true, self.layout.inline_max_bytes())
            .with_in_flight(InFlight::PIPELINE)
            .with_auth(auth)
    }

    fn describe(&self, subject: &Subject) -> Option<Description> {
        let mut d = Description::new("nats", self.layout.payload());
        d.host = host_port(&self.config.url);
        let address = self
            .config
            .subject
            .render_for(&subject.source_id, subject.tenant_id.as_deref());
        if address.is_none() {
            d.computed.push("subject".into());
        }
        d.address = Some(address.unwrap_or_else(|| self.config.subject.as_str().to_owned()));
        Some(d)
    }

    /// Connect with the credentials, then look up the streams bound to the subject
    /// (`$JS.API.STREAM.NAMES`) and their storage (`$JS.API.STREAM.INFO`): `Passed` when one
    /// is bound and none keeps its messages in memory (the sink declares itself durable; a
    /// memory stream fails `config`); for a subject template, `Reachable` once JetStream
    /// answered (`$JS.API.INFO`): the stream, and so its storage, is known per hook.
    /// Publishes nothing.
    async fn check(&self) -> Result<Check, Failure> {
        Ok(self.preflight().await?)
    }
}

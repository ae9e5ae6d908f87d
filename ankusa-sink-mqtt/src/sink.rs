//! [`MqttSink`]: one MQTT 5 connection shared by every delivery, each QoS 1 PUBLISH
//! matched to its own PUBACK by packet id.
//!
//! rumqttc's client only enqueues a publish; its event loop assigns the packet id and says
//! so with `Outgoing::Publish(pkid)`, in the order the requests were enqueued, then reports
//! each PUBACK with its reason code. So each delivery enqueues its publish and a waiter
//! under one lock (the same order), the task driving the event loop moves the oldest
//! waiter under its packet id when the loop says it went out, and resolves it with that
//! packet id's PUBACK. When the connection ends, every waiter fails (transient; landed if
//! it went out) and the event loop is dropped rather than left to reconnect and resend:
//! the next delivery connects afresh, so the waiters never fall out of step with packets.

use crate::config::{MqttConfig, NoSubscriber, topic_problem};
use crate::error::MqttError;
use crate::outgoing::{self, Publish};
use ankusa_message::{EmptyValues, Layout, Outgoing};
use ankusa_sink_core::{
    Capabilities, Check, Ctx, Description, Envelope, Failure, InFlight, OkMeans, Ordering, Payload,
    Sink, Subject, async_trait,
};
use ankusa_sink_kit::{host_port, printable};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{ConnAck, ConnectReturnCode, Packet, PubAckReason};
use rumqttc::v5::{AsyncClient, ConnectionError, Event, EventLoop, MqttOptions, StateError};
use rumqttc::{NetworkOptions, Outgoing as Sent, TlsConfiguration, Transport};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, Semaphore, oneshot};

/// Publishes the client may hold before its event loop takes them: the pipeline window.
const QUEUED: usize = 1024;
/// At most this many publishes unacknowledged on the connection (and the broker's Receive
/// Maximum, when lower): rumqttc sizes its table of packet ids by it.
const MAX_INFLIGHT: u16 = 1024;
/// Keep alive: the broker drops a silent client after 1.5 times it; the client pings.
const KEEP_ALIVE: Duration = Duration::from_secs(30);

/// Publishes every hook to an MQTT 5 broker at QoS 1.
///
/// # Behavior
/// - One connection, made on the first delivery (or [`check`](Sink::check)), shared by
///   every delivery; publishes are pipelined on it. When it ends (the broker closed it, a
///   PUBACK did not come in time) every publish waiting on it fails transient, and the
///   next delivery connects again.
/// - `Ok` only on a PUBACK with reason Success for that publish (or "No matching
///   subscribers" with `no_subscriber = "ok"`).
/// - A PUBLISH over the Maximum Packet Size of the broker's CONNACK is refused before it is
///   sent (permanent).
/// - [`Capabilities::durable`](ankusa_sink_core::Capabilities::durable) is the config's `durable` (default `false`: a PUBACK means
///   the broker holds the message in memory).
/// - `Debug`, [`describe`](Sink::describe) and failures never show the password.
pub struct MqttSink {
    config: MqttConfig,
    layout: Layout,
    client_id: String,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// The live connection, if any.
    current: RwLock<Option<Arc<Link>>>,
    /// Held while connecting: one attempt at a time.
    connecting: tokio::sync::Mutex<()>,
    /// The last failed attempt and when it ended: deliveries that waited behind it share
    /// it instead of each trying again.
    last_failure: Mutex<Option<(Instant, MqttError)>>,
}

impl fmt::Debug for MqttSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MqttSink")
            .field("config", &self.config)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// How a waiting publish ends.
#[derive(Debug)]
enum Outcome {
    /// The PUBACK's reason code and reason string.
    Acked(u8, Option<String>),
    /// The connection ended first.
    Ended(Ended),
}

/// Why a connection ended: the DISCONNECT reason code when the broker sent one.
#[derive(Debug, Clone)]
struct Ended {
    code: Option<u8>,
    detail: String,
}

impl Ended {
    fn error(&self, sent: bool) -> MqttError {
        MqttError::Disconnected {
            code: self.code,
            sent,
            detail: self.detail.clone(),
        }
    }
}

/// A publish waiting for its PUBACK.
struct Waiter {
    tx: oneshot::Sender<Outcome>,
    sent: Arc<AtomicBool>,
}

/// What a delivery and the event loop's driver share.
struct Queue {
    /// Enqueued in the client, not yet given a packet id, oldest first.
    unsent: VecDeque<Waiter>,
    /// Set once the connection ended: nothing more is enqueued.
    closed: Option<Ended>,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Room in the client's request queue: a permit per publish it may still take.
    room: Semaphore,
    /// Tells the driver to drop the connection.
    abandon: Notify,
}

impl Shared {
    fn is_closed(&self) -> bool {
        self.queue.lock().expect("not poisoned").closed.is_some()
    }

    /// Close the connection for `why` (a PUBACK that did not come): nothing more is
    /// enqueued, and the driver drops it.
    fn abandon(&self, why: &str) {
        let mut q = self.queue.lock().expect("not poisoned");
        if q.closed.is_none() {
            q.closed = Some(Ended {
                code: None,
                detail: why.to_owned(),
            });
        }
        drop(q);
        self.abandon.notify_one();
    }
}

/// One connection: the client that enqueues, what it shares with its driver, and the
/// broker's limits from the CONNACK.
struct Link {
    client: AsyncClient,
    shared: Arc<Shared>,
    max_packet: Option<u32>,
}

impl MqttSink {
    /// Builds the sink from a valid config: reads the TLS roots (`tls_ca_file`, else the
    /// system's) for `mqtts://`; connects on the first delivery or check. Call it inside a
    /// Tokio runtime.
    ///
    /// # Errors
    /// [`MqttError::Tls`] for an unreadable `tls_ca_file`, one without a certificate, or no
    /// usable system roots.
    pub fn new(config: MqttConfig) -> Result<Self, MqttError> {
        let tls = config.tls.then(|| tls_config(&config)).transpose()?;
        let layout = config
            .message
            .layout(Payload::Message, EmptyValues::Keep)
            .with_key(config.topic.clone());
        let client_id = config
            .client_id
            .clone()
            .unwrap_or_else(|| format!("ankusa-{}", ulid::Ulid::new()));
        Ok(MqttSink {
            config,
            layout,
            client_id,
            tls,
            current: RwLock::new(None),
            connecting: tokio::sync::Mutex::new(()),
            last_failure: Mutex::new(None),
        })
    }

    /// The configuration this sink was built from.
    pub fn config(&self) -> &MqttConfig {
        &self.config
    }

    /// `host:port`, for errors and descriptions.
    fn host(&self) -> String {
        host_port(&self.config.url()).unwrap_or_default()
    }

    fn live(&self) -> Option<Arc<Link>> {
        self.current
            .read()
            .expect("not poisoned")
            .as_ref()
            .filter(|l| !l.shared.is_closed())
            .cloned()
    }

    /// The live connection, or a new one. Deliveries that waited while an attempt failed
    /// get its failure: an outage costs one attempt per wave of deliveries, not one each.
    async fn link(&self) -> Result<Arc<Link>, MqttError> {
        if let Some(link) = self.live() {
            return Ok(link);
        }
        let asked = Instant::now();
        let _one = self.connecting.lock().await;
        if let Some(link) = self.live() {
            return Ok(link);
        }
        if let Some((at, e)) = &*self.last_failure.lock().expect("not poisoned")
            && *at >= asked
        {
            return Err(e.clone());
        }
        match self.connect().await {
            Ok(link) => {
                *self.current.write().expect("not poisoned") = Some(Arc::clone(&link));
                Ok(link)
            }
            Err(e) => {
                *self.last_failure.lock().expect("not poisoned") =
                    Some((Instant::now(), e.clone()));
                Err(e)
            }
        }
    }

    /// Connect, wait for the CONNACK, then hand the event loop to its driver task.
    async fn connect(&self) -> Result<Arc<Link>, MqttError> {
        let c = &self.config;
        let mut opts = MqttOptions::new(self.client_id.clone(), c.host.clone(), c.port);
        let mut net = NetworkOptions::new();
        // Publishes are pipelined: Nagle would hold each small one for the previous ACK.
        net.set_tcp_nodelay(true);
        net.set_connection_timeout(c.connect_timeout().as_secs().max(1));
        opts.set_network_options(net)
            .set_keep_alive(KEEP_ALIVE)
            .set_clean_start(true)
            // Its own bound is whole seconds; ours, below, is the configured one.
            .set_connection_timeout(c.connect_timeout().as_secs().max(1) + 1)
            .set_outgoing_inflight_upper_limit(MAX_INFLIGHT);
        if let (Some(user), Some(password)) = (&c.username, &c.password) {
            opts.set_credentials(user.clone(), password.expose().to_owned());
        }
        if let Some(tls) = &self.tls {
            opts.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(
                Arc::clone(tls),
            )));
        }
        let (client, mut eventloop) = AsyncClient::new(opts, QUEUED);
        let host = self.host();
        let connack = tokio::time::timeout(c.connect_timeout(), async {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::ConnAck(ack))) => return Ok(ack),
                    Ok(_) => {}
                    Err(e) => return Err(connect_error(&host, c.connect_timeout_ms.get(), e)),
                }
            }
        })
        .await
        .map_err(|_| MqttError::ConnectTimeout {
            host: host.clone(),
            ms: c.connect_timeout_ms.get(),
        })??;
        let max_packet = self.usable(&host, &connack)?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                unsent: VecDeque::new(),
                closed: None,
            }),
            room: Semaphore::new(QUEUED),
            abandon: Notify::new(),
        });
        tokio::spawn(drive(eventloop, Arc::clone(&shared)));
        Ok(Arc::new(Link {
            client,
            shared,
            max_packet,
        }))
    }

    /// The broker's Maximum Packet Size, once its CONNACK allows what this sink does.
    fn usable(&self, host: &str, ack: &ConnAck) -> Result<Option<u32>, MqttError> {
        let Some(p) = &ack.properties else {
            return Ok(None);
        };
        let unsupported = |what| MqttError::Unsupported {
            host: host.to_owned(),
            what,
        };
        if p.max_qos == Some(0) {
            return Err(unsupported("QoS 1 (its CONNACK says Maximum QoS 0)"));
        }
        if self.config.retain && p.retain_available == Some(0) {
            return Err(unsupported("retained messages (Retain Available 0)"));
        }
        Ok(p.max_packet_size)
    }

    /// Enqueue `p` and wait for its PUBACK.
    async fn publish(&self, p: Publish) -> Result<(), MqttError> {
        let link = self.link().await?;
        if let Some(max) = link.max_packet
            && p.packet_size > max as usize
        {
            return Err(MqttError::TooLarge {
                size: p.packet_size,
                max,
            });
        }
        let shared = &link.shared;
        let closed = |sent| {
            let q = shared.queue.lock().expect("not poisoned");
            q.closed.as_ref().map_or_else(
                || MqttError::Disconnected {
                    code: None,
                    sent,
                    detail: "the client stopped".into(),
                },
                |e| e.error(sent),
            )
        };
        // Cancellation-safe: a delivery dropped here has enqueued nothing.
        let permit = shared.room.acquire().await.map_err(|_| closed(false))?;
        let (tx, rx) = oneshot::channel();
        let sent = Arc::new(AtomicBool::new(false));
        {
            let mut q = shared.queue.lock().expect("not poisoned");
            if let Some(e) = &q.closed {
                return Err(e.error(false));
            }
            // Under the queue's lock: the driver takes waiters in the order the event loop
            // takes publishes.
            link.client
                .try_publish_with_properties(
                    p.topic,
                    QoS::AtLeastOnce,
                    self.config.retain,
                    p.payload,
                    p.properties,
                )
                .map_err(|_| MqttError::Disconnected {
                    code: None,
                    sent: false,
                    detail: "the client stopped".into(),
                })?;
            q.unsent.push_back(Waiter {
                tx,
                sent: Arc::clone(&sent),
            });
            permit.forget();
        }
        let outcome = match tokio::time::timeout(self.config.timeout(), rx).await {
            Ok(Ok(outcome)) => outcome,
            // The driver ended without answering (a runtime shutting down).
            Ok(Err(_)) => return Err(closed(sent.load(AtomicOrdering::SeqCst))),
            Err(_) => {
                shared.abandon("no PUBACK in time");
                return Err(MqttError::AckTimeout {
                    ms: self.config.timeout_ms.get(),
                    sent: sent.load(AtomicOrdering::SeqCst),
                });
            }
        };
        match outcome {
            Outcome::Acked(0, _) => Ok(()),
            Outcome::Acked(0x10, _) if self.config.no_subscriber == NoSubscriber::Ok => Ok(()),
            Outcome::Acked(code, reason) => Err(MqttError::PubAck {
                code,
                reason,
                no_subscriber: self.config.no_subscriber,
                retain: self.config.retain,
            }),
            Outcome::Ended(e) => Err(e.error(sent.load(AtomicOrdering::SeqCst))),
        }
    }
}

/// Polls `eventloop` until the connection ends or is abandoned, matching packet ids to
/// waiters; then fails every waiter left and drops the event loop (no reconnection, no
/// resend: the sink connects afresh).
async fn drive(mut eventloop: EventLoop, shared: Arc<Shared>) {
    let mut inflight: HashMap<u16, Waiter> = HashMap::new();
    let end = loop {
        let event = tokio::select! {
            biased;
            () = shared.abandon.notified() => break Ended {
                code: None,
                detail: "abandoned: no PUBACK in time".into(),
            },
            event = eventloop.poll() => event,
        };
        match event {
            Ok(Event::Outgoing(Sent::Publish(pkid))) => {
                let waiter = shared
                    .queue
                    .lock()
                    .expect("not poisoned")
                    .unsent
                    .pop_front();
                if let Some(w) = waiter {
                    w.sent.store(true, AtomicOrdering::SeqCst);
                    inflight.insert(pkid, w);
                }
                shared.room.add_permits(1);
            }
            Ok(Event::Incoming(Packet::PubAck(ack))) => {
                if let Some(w) = inflight.remove(&ack.pkid) {
                    let reason = ack
                        .properties
                        .and_then(|p| p.reason_string)
                        .map(|r| printable(&r));
                    // A delivery that gave up waiting dropped its receiver: nothing to do.
                    let _ = w.tx.send(Outcome::Acked(puback_code(ack.reason), reason));
                }
            }
            Ok(_) => {}
            Err(e) => break ended(e),
        }
    };
    // A delivery that abandoned the connection already said why: its reason stands.
    let (unsent, end) = {
        let mut q = shared.queue.lock().expect("not poisoned");
        let end = q.closed.get_or_insert(end).clone();
        (std::mem::take(&mut q.unsent), end)
    };
    shared.room.close();
    for w in unsent.into_iter().chain(inflight.into_values()) {
        let _ = w.tx.send(Outcome::Ended(end.clone()));
    }
    drop(eventloop);
}

/// Why the event loop stopped.
fn ended(e: ConnectionError) -> Ended {
    match e {
        ConnectionError::MqttState(StateError::ServerDisconnect {
            reason_code,
            reason_string,
        }) => Ended {
            code: Some(reason_code as u8),
            detail: reason_string
                .map_or_else(|| "the broker disconnected".to_owned(), |r| printable(&r)),
        },
        other => Ended {
            code: None,
            detail: printable(&other.to_string()),
        },
    }
}

/// What failed while connecting.
fn connect_error(host: &str, ms: u64, e: ConnectionError) -> MqttError {
    let host = host.to_owned();
    match e {
        ConnectionError::ConnectionRefused(code)
        | ConnectionError::MqttState(StateError::ConnFail { reason: code }) => MqttError::Refused {
            host,
            code: connack_code(code),
        },
        ConnectionError::Io(io) => MqttError::Connect {
            host,
            kind: Some(io.kind()),
            detail: printable(&io.to_string()),
        },
        ConnectionError::Timeout(_) => MqttError::ConnectTimeout { host, ms },
        other => MqttError::Connect {
            host,
            kind: None,
            detail: printable(&other.to_string()),
        },
    }
}

/// The MQTT 5 reason code of a CONNACK (rumqttc folds MQTT 3.1.1's return codes in: they
/// are mapped to their MQTT 5 equivalents).
fn connack_code(c: ConnectReturnCode) -> u8 {
    use ConnectReturnCode as C;
    match c {
        C::Success => 0x00,
        C::UnspecifiedError => 0x80,
        C::MalformedPacket => 0x81,
        C::ProtocolError => 0x82,
        C::ImplementationSpecificError => 0x83,
        C::RefusedProtocolVersion | C::UnsupportedProtocolVersion => 0x84,
        C::BadClientId | C::ClientIdentifierNotValid => 0x85,
        C::BadUserNamePassword => 0x86,
        C::NotAuthorized => 0x87,
        C::ServiceUnavailable | C::ServerUnavailable => 0x88,
        C::ServerBusy => 0x89,
        C::Banned => 0x8A,
        C::BadAuthenticationMethod => 0x8C,
        C::TopicNameInvalid => 0x90,
        C::PacketTooLarge => 0x95,
        C::QuotaExceeded => 0x97,
        C::PayloadFormatInvalid => 0x99,
        C::RetainNotSupported => 0x9A,
        C::QoSNotSupported => 0x9B,
        C::UseAnotherServer => 0x9C,
        C::ServerMoved => 0x9D,
        C::ConnectionRateExceeded => 0x9F,
    }
}

/// The reason code of a PUBACK.
fn puback_code(r: PubAckReason) -> u8 {
    use PubAckReason as R;
    match r {
        R::Success => 0x00,
        R::NoMatchingSubscribers => 0x10,
        R::UnspecifiedError => 0x80,
        R::ImplementationSpecificError => 0x83,
        R::NotAuthorized => 0x87,
        R::TopicNameInvalid => 0x90,
        R::PacketIdentifierInUse => 0x91,
        R::QuotaExceeded => 0x97,
        R::PayloadFormatInvalid => 0x99,
    }
}

/// The rustls client config for `mqtts://`: the roots of `tls_ca_file`, else the system's.
fn tls_config(c: &MqttConfig) -> Result<Arc<rustls::ClientConfig>, MqttError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    match &c.tls_ca_file {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| MqttError::Tls(format!("tls_ca_file {}: {e}", path.display())))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(MqttError::Tls(format!(
                    "tls_ca_file {}: no usable certificate",
                    path.display()
                )));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(MqttError::Tls(
                    "no system root certificates: set tls_ca_file".into(),
                ));
            }
        }
    }
    Ok(Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    ))
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
impl Sink for MqttSink {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let out = Outgoing::new(env, ctx, &self.layout)?;
        if !self.config.topic.is_static() {
            // A hook's `/` would add a level the operator's template does not describe.
            if !self.config.topic_values_may_add_levels
                && let Some((placeholder, _)) = self.config.topic.inserted_char(env, |c| c == '/')
            {
                return Err(MqttError::TopicValue {
                    placeholder: placeholder.as_str(),
                }
                .into());
            }
            let rendered = out.key().unwrap_or_default();
            if let Some(reason) = topic_problem(rendered) {
                return Err(MqttError::Topic { reason }.into());
            }
        }
        let publish = outgoing::to_publish(out);
        // Before the shared connection sees it: Mosquitto drops the connection (and every
        // publish in flight on it) for one string it refuses.
        outgoing::check(&publish).map_err(MqttError::from)?;
        self.publish(publish).await?;
        Ok(())
    }

    /// Stored when the config says the broker persists first (`durable`), else sent (a
    /// PUBACK from memory); in publish order per topic. The size limit is the Maximum
    /// Packet Size of the broker's CONNACK, known only once connected: not claimed here.
    /// A username and password when configured, and TLS for `mqtts://`. The layout's inline
    /// threshold (`None` for CloudEvents: they travel inline). The pipeline window is
    /// [`InFlight::PIPELINE`]: QoS 1 publishes are pipelined on one connection (up to the
    /// broker's Receive Maximum unacknowledged, the rest queued in the client), so many
    /// outstanding deliveries keep it busy.
    fn capabilities(&self) -> Capabilities {
        let c = &self.config;
        let mut auth = Vec::new();
        if c.username.is_some() {
            auth.push("password");
        }
        if c.tls {
            auth.push("tls");
        }
        Capabilities::new(c.durable, self.layout.inline_max_bytes())
            .with_in_flight(InFlight::PIPELINE)
            .with_ok_means(if c.durable {
                OkMeans::Stored
            } else {
                OkMeans::Sent
            })
            .with_ordering(Ordering::PerKey {
                key: c.topic.as_str().to_owned(),
            })
            .with_auth(auth)
    }

    fn describe(&self, subject: &Subject) -> Option<Description> {
        let c = &self.config;
        let payload = self.layout.payload();
        let mut d = Description::new(if c.tls { "secure-mqtt" } else { "mqtt" }, payload);
        d.host = Some(self.host());
        let address = c
            .topic
            .render_for(&subject.source_id, subject.tenant_id.as_deref());
        if address.is_none() {
            d.computed.push("topic".into());
        }
        d.address = Some(address.unwrap_or_else(|| c.topic.as_str().to_owned()));
        d.operation_bindings.insert(
            "mqtt".into(),
            serde_json::json!({"qos": 1, "retain": c.retain, "bindingVersion": "0.2.0"}),
        );
        Some(d)
    }

    /// Connect and log in (the CONNACK): `Reachable`, since whether anyone subscribes to
    /// the topic cannot be known without publishing. Publishes nothing.
    async fn check(&self) -> Result<Check, Failure> {
        self.link().await?;
        Ok(Check::Reachable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_names_the_topic_and_never_the_password() {
        let c = MqttConfig::with_template(
            "mqtts://broker.example:8883",
            "hooks/{tenant_id}/{source_id}",
        )
        .unwrap()
        .with_credentials("u", ankusa_sink_core::Secret::new("describe-pa55"))
        .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _in = rt.enter();
        let sink = MqttSink::new(c.with_tls_ca_file("/nonexistent").unwrap());
        assert!(matches!(sink, Err(MqttError::Tls(_))));
        let c = MqttConfig::with_template("mqtt://127.0.0.1:1883", "hooks/{tenant_id}/{source_id}")
            .unwrap()
            .with_credentials("u", ankusa_sink_core::Secret::new("describe-pa55"))
            .unwrap();
        let sink = MqttSink::new(c).unwrap();
        let d = sink
            .describe(&Subject::new("stripe", Some("acme".into())))
            .unwrap();
        assert_eq!(d.protocol, "mqtt");
        assert_eq!(d.host.as_deref(), Some("127.0.0.1:1883"));
        assert_eq!(d.address.as_deref(), Some("hooks/acme/stripe"));
        assert!(d.computed.is_empty());
        let d = sink.describe(&Subject::new("stripe", None)).unwrap();
        assert_eq!(d.computed, vec!["topic".to_owned()]);
        assert_eq!(d.address.as_deref(), Some("hooks/{tenant_id}/{source_id}"));
        let dump = format!("{d:?} {sink:?}");
        assert!(!dump.contains("describe-pa55"), "{dump}");
        assert!(!sink.capabilities().durable);
    }

    #[test]
    fn every_connack_and_puback_code_maps_to_its_mqtt5_number() {
        assert_eq!(connack_code(ConnectReturnCode::BadUserNamePassword), 0x86);
        assert_eq!(connack_code(ConnectReturnCode::NotAuthorized), 0x87);
        assert_eq!(connack_code(ConnectReturnCode::ServerBusy), 0x89);
        assert_eq!(puback_code(PubAckReason::NoMatchingSubscribers), 0x10);
        assert_eq!(puback_code(PubAckReason::QuotaExceeded), 0x97);
    }
}

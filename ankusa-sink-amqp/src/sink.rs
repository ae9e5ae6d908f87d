//! The AMQP sink: one connection and one confirm-mode channel per sink, shared by every
//! concurrent delivery, reopened on demand.

use crate::config::DEFAULT_MAX_MESSAGE_BYTES;
use crate::config::{AmqpConfig, ExchangeType};
use crate::driver::Driver;
use crate::error::{AmqpError, Stage, printable, reply_code};
use crate::outgoing::{self, Publish};
use ankusa_message::{EmptyValues, Layout, Outgoing};
use ankusa_sink_core::Capabilities;
use ankusa_sink_core::{
    Check, Ctx, Description, Envelope, Failure, InFlight, Payload, Sink, Subject, async_trait,
};
use futures_util::StreamExt as _;
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Confirmation, Connection, ErrorKind, Event};
use std::fmt;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::{Instant, timeout, timeout_at};

/// After a failed connection attempt, deliveries fail at once (with that attempt's error)
/// for this long instead of each dialling the broker again.
pub(crate) const RECONNECT_PAUSE: Duration = Duration::from_millis(250);

/// At most this many bytes of encoded messages wait to be written to the socket; past it a
/// delivery waits before it encodes. lapin copies a body into its frames and keeps the
/// sink's copy borrowed until they are written, so while the broker reads slower than
/// deliveries come (RabbitMQ persisting 64 KiB bodies), every waiting message was held
/// twice: 256 in flight at 88 KB held 45 MB. Under this bound both copies stay under
/// 4 MiB, and the kernel's socket buffer still holds more than the broker reads between
/// two wake-ups (docs/benchmarks-history.md, "Stop 34": peak memory equal to the raw
/// client's, throughput unchanged).
pub(crate) const MAX_UNWRITTEN_BYTES: usize = 2 * 1024 * 1024;
/// What a Message v1 holds besides its body's base64: its members and the forwarded
/// headers, about a kilobyte for a typical hook.
const MESSAGE_OVERHEAD_BYTES: usize = 1024;

/// Publishes Message v1 to a RabbitMQ exchange with publisher confirms and `mandatory`.
///
/// Connects lazily on the first delivery (or [`check`](Sink::check)) and reconnects by
/// itself after the broker restarts or the connection or channel is closed. See the crate
/// docs for the options and the classification table.
pub struct AmqpSink {
    cfg: Arc<AmqpConfig>,
    /// Message v1 with the routing key, built once.
    layout: Layout,
    endpoint: String,
    state: Mutex<State>,
    inflight: Arc<Semaphore>,
    /// Bytes of encoded messages not yet written to the socket (`MAX_UNWRITTEN_BYTES`).
    unwritten: Arc<Semaphore>,
    /// Awaits every publish and its confirm in one task (see `driver`).
    driver: Driver,
}

#[derive(Default)]
struct State {
    conn: Option<Arc<Conn>>,
    link: Option<Arc<Link>>,
    failed: Option<(Instant, Arc<AmqpError>)>,
}

impl State {
    /// The shared channel, when it is open and its connection alive.
    fn usable_link(&self) -> Option<Arc<Link>> {
        self.link.as_ref().filter(|l| l.usable()).map(Arc::clone)
    }
}

/// A connection and the watch of its connection.blocked state.
struct Conn {
    conn: Connection,
    blocked: watch::Receiver<bool>,
}

impl Conn {
    /// Open, on a runtime that still runs. lapin's socket and this connection's event task
    /// live on the runtime the connection was opened on; when that runtime shuts down the
    /// task ends (dropping the watch's sender) and the socket is never served again, though
    /// lapin still calls it connected. A sink that outlives its runtime connects again on
    /// the current one.
    fn alive(&self) -> bool {
        self.conn.status().connected() && self.blocked.has_changed().is_ok()
    }

    fn is_blocked(&self) -> bool {
        *self.blocked.borrow() || self.conn.status().blocked()
    }

    /// Resolves once the broker blocks the connection (at once if it is blocked now);
    /// never when the connection ends first (the publish itself reports that).
    fn became_blocked(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut blocked = self.blocked.clone();
        async move {
            if blocked.wait_for(|b| *b).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// The shared publishing channel, in confirm mode, on `conn`.
struct Link {
    conn: Arc<Conn>,
    channel: Channel,
}

impl Link {
    fn usable(&self) -> bool {
        self.conn.alive() && self.channel.status().connected()
    }
}

impl AmqpSink {
    /// A sink for `cfg`. Nothing is dialled until the first delivery or check.
    pub fn new(cfg: AmqpConfig) -> Self {
        let endpoint = cfg.redacted_url();
        let inflight = Arc::new(Semaphore::new(cfg.max_inflight().get()));
        let layout = cfg
            .message
            .layout(Payload::Message, EmptyValues::Drop)
            .with_key(cfg.routing_key().clone());
        AmqpSink {
            cfg: Arc::new(cfg),
            layout,
            endpoint,
            state: Mutex::new(State::default()),
            inflight,
            unwritten: Arc::new(Semaphore::new(MAX_UNWRITTEN_BYTES)),
            driver: Driver::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &AmqpConfig {
        &self.cfg
    }

    /// Publishes currently awaiting a confirm.
    pub fn in_flight(&self) -> usize {
        self.cfg.max_inflight().get() - self.inflight.available_permits()
    }

    /// Whether the sink holds an open connection and channel right now.
    pub async fn is_connected(&self) -> bool {
        let st = self.state.lock().await;
        st.usable_link().is_some()
    }

    fn lapin_err(&self, stage: Stage, e: lapin::Error) -> AmqpError {
        AmqpError::lapin(stage, &self.endpoint, e)
    }

    fn connect_timeout_err(&self) -> AmqpError {
        AmqpError::ConnectTimeout {
            endpoint: self.endpoint.clone(),
            ms: self.cfg.connect_timeout().as_millis(),
        }
    }

    /// The shared channel, opening the connection and/or channel when needed, within
    /// `connect_timeout`.
    ///
    /// Every delivery awaits this, and a future is as large as the largest future it
    /// awaits: the open path (lapin's connect and declare, kilobytes) is boxed, so the
    /// delivery's own future, held for the whole confirm round trip, stays small.
    async fn link(&self) -> Result<Arc<Link>, AmqpError> {
        if let Some(link) = self.state.try_lock().ok().and_then(|st| st.usable_link()) {
            return Ok(link);
        }
        Box::pin(self.open_link()).await
    }

    /// [`link`](Self::link)'s slow path: wait for the state, then reuse, refuse (within
    /// `RECONNECT_PAUSE` of a failure) or open.
    async fn open_link(&self) -> Result<Arc<Link>, AmqpError> {
        let deadline = Instant::now() + self.cfg.connect_timeout();
        let mut st = timeout_at(deadline, self.state.lock())
            .await
            .map_err(|_| self.connect_timeout_err())?;
        if let Some(link) = st.usable_link() {
            return Ok(link);
        }
        if let Some((at, err)) = &st.failed
            && at.elapsed() < RECONNECT_PAUSE
        {
            return Err(AmqpError::NotConnected {
                ago_ms: at.elapsed().as_millis(),
                source: Arc::clone(err),
            });
        }
        st.link = None;
        let res = match timeout_at(deadline, self.open(&mut st)).await {
            Ok(res) => res,
            Err(_) => Err(self.connect_timeout_err()),
        };
        match res {
            Ok(link) => {
                st.failed = None;
                st.link = Some(Arc::clone(&link));
                Ok(link)
            }
            Err(e) => {
                let error = Failure::from(e.clone()).reason_chain();
                tracing::warn!(endpoint = %self.endpoint, %error, "amqp sink: cannot open channel");
                st.failed = Some((Instant::now(), Arc::new(e.clone())));
                // This delivery made the attempt: its own error, not "not connected".
                Err(e)
            }
        }
    }

    async fn open(&self, st: &mut State) -> Result<Arc<Link>, AmqpError> {
        let conn = match &st.conn {
            Some(c) if c.alive() => Arc::clone(c),
            _ => {
                st.conn = None;
                let c = Arc::new(self.connect().await?);
                st.conn = Some(Arc::clone(&c));
                c
            }
        };
        let channel = conn
            .conn
            .create_channel()
            .await
            .map_err(|e| self.lapin_err(Stage::Channel, e))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| self.lapin_err(Stage::Channel, e))?;
        self.declare(&channel, !self.cfg.declare_exchange()).await?;
        Ok(Arc::new(Link { conn, channel }))
    }

    async fn connect(&self) -> Result<Conn, AmqpError> {
        tracing::debug!(endpoint = %self.endpoint, "amqp sink: connecting");
        let conn = self
            .cfg
            .url
            .connect(format!("ankusa-sink-amqp exchange={}", self.cfg.exchange()))
            .await
            .map_err(|e| self.lapin_err(Stage::Connect, e))?;
        let (tx, rx) = watch::channel(conn.status().blocked());
        let mut events = Box::pin(conn.events_listener());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tx.closed() => break,
                    ev = events.next() => match ev {
                        Some(Event::ConnectionBlocked(reason)) => {
                            let reason = printable(reason.as_str());
                            tracing::warn!(%reason, "amqp sink: broker blocked the connection");
                            tx.send_replace(true);
                        }
                        Some(Event::ConnectionUnblocked) => {
                            tracing::info!("amqp sink: broker unblocked the connection");
                            tx.send_replace(false);
                        }
                        Some(_) => {}
                        None => break,
                    },
                }
            }
        });
        Ok(Conn { conn, blocked: rx })
    }

    /// Declare the exchange durable, or (passive) check that it exists. The default
    /// exchange `""` always exists and cannot be declared.
    async fn declare(&self, channel: &Channel, passive: bool) -> Result<(), AmqpError> {
        if self.cfg.exchange().is_empty() {
            return Ok(());
        }
        let options = ExchangeDeclareOptions {
            passive,
            durable: true,
            ..ExchangeDeclareOptions::default()
        };
        channel
            .exchange_declare(
                self.cfg.exchange().into(),
                self.cfg.exchange_type().kind(),
                options,
                FieldTable::default(),
            )
            .await
            .map_err(|e| self.lapin_err(Stage::Declare, e))
    }

    /// What the broker must not see: a message over `max_message_bytes`, a key whose
    /// inserted values would reshape topic routing (a short string over 255 bytes never
    /// became a message: `outgoing::to_publish` refused it).
    fn refuse(&self, env: &Envelope, msg: &Publish) -> Result<(), AmqpError> {
        let max = self.cfg.max_message_bytes().get();
        let size = msg.body.as_bytes().len();
        if size > max {
            return Err(AmqpError::TooLarge { size, max });
        }
        // On a topic exchange '.' splits words and '*' '#' are wildcards: a hook's own
        // values must not reshape the key the operator's template describes.
        if self.cfg.exchange_type() == ExchangeType::Topic
            && !self.cfg.exchange().is_empty()
            && let Some((placeholder, character)) = self
                .cfg
                .routing_key()
                .inserted_char(env, |c| matches!(c, '.' | '*' | '#'))
        {
            return Err(AmqpError::RoutingValue {
                placeholder: placeholder.as_str(),
                character,
            });
        }
        Ok(())
    }

    /// Encode `env` and publish it (unless [`refuse`](Self::refuse)d), then await its
    /// confirm. The encode waits for room under `MAX_UNWRITTEN_BYTES`; a message the sink
    /// refuses fails as such even when that wait ran out.
    async fn publish(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let confirm_timeout = self.cfg.confirm_timeout();
        let deadline = Instant::now() + confirm_timeout;
        let need = unwritten_estimate(env.body().len(), self.layout.inline_max_bytes());
        let written = match Arc::clone(&self.unwritten).try_acquire_many_owned(need) {
            Ok(permit) => Ok(permit),
            // Rare (the bound is full): boxed, so its state does not size every delivery.
            Err(_) => Box::pin(self.wait_unwritten(need, deadline)).await,
        };
        // Boxed, and built in a block of its own: a local's storage lasts to the end of its
        // scope, moved out or not, so an unboxed message (hundreds of bytes of properties)
        // would size this future, and `send`'s argument would size `send`'s, for the whole
        // confirm round trip. Likewise `written?` is bound first: a temporary of the
        // statement that awaits would be held across the await.
        let msg = {
            let out = Outgoing::new(env, ctx, &self.layout)?;
            let msg = outgoing::to_publish(out, env.received_at())?;
            self.refuse(env, &msg)?;
            Box::new(msg)
        };
        let written = written?;
        let sent = self.send(msg, written, deadline).await;
        Ok(sent?)
    }

    /// Room for `need` bytes under `MAX_UNWRITTEN_BYTES`, by `deadline`. Nothing is written
    /// while the broker blocks the connection, so a blocked connection ends the wait as
    /// [`AmqpError::Blocked`] (throttled), as a publish on it does.
    async fn wait_unwritten(
        &self,
        need: u32,
        deadline: Instant,
    ) -> Result<OwnedSemaphorePermit, AmqpError> {
        let link = self.link().await?;
        let became_blocked = link.conn.became_blocked();
        let acquire = timeout_at(
            deadline,
            Arc::clone(&self.unwritten).acquire_many_owned(need),
        );
        tokio::select! {
            res = acquire => match res {
                Ok(permit) => Ok(permit.expect("the unwritten-bytes semaphore is never closed")),
                Err(_) if link.conn.is_blocked() => Err(AmqpError::Blocked),
                Err(_) => Err(AmqpError::Unwritten {
                    bytes: MAX_UNWRITTEN_BYTES,
                    ms: self.cfg.confirm_timeout().as_millis(),
                }),
            },
            () = became_blocked => Err(AmqpError::Blocked),
        }
    }

    /// Publish `msg` on the driver, holding `written` until its frames are written, and
    /// await its confirm.
    async fn send(
        &self,
        msg: Box<Publish>,
        written: OwnedSemaphorePermit,
        deadline: Instant,
    ) -> Result<(), AmqpError> {
        let confirm_timeout = self.cfg.confirm_timeout();
        let permit = timeout_at(deadline, Arc::clone(&self.inflight).acquire_owned())
            .await
            .map_err(|_| AmqpError::Busy {
                max: self.cfg.max_inflight().get(),
                ms: confirm_timeout.as_millis(),
            })?
            .expect("the in-flight semaphore is never closed");
        let link = self.link().await?;
        if link.conn.is_blocked() {
            return Err(AmqpError::Blocked);
        }
        // For the error of a returned or nacked message, on the driver.
        let (cfg, routing_key) = (Arc::clone(&self.cfg), msg.routing_key.clone());
        // The publish: the message, its properties and lapin's publish future (kilobytes)
        // live in this box alone, freed once the frames are written; the job that waits
        // for the confirm holds only the box, the permit and then the confirm.
        let publish: Pin<Box<dyn Future<Output = _> + Send>> = {
            let link = Arc::clone(&link);
            let exchange = self.cfg.exchange().into();
            Box::pin(async move {
                let Publish {
                    routing_key,
                    properties,
                    body,
                } = *msg;
                let confirm = link
                    .channel
                    .basic_publish(
                        exchange,
                        routing_key.into(),
                        BasicPublishOptions {
                            mandatory: true,
                            immediate: false,
                        },
                        body.as_bytes(),
                        properties,
                    )
                    .await;
                // lapin has copied the body into its frames and written them: free ours
                // now rather than holding it for the whole confirm round trip (peak memory
                // at high concurrency), and let the next message encode.
                drop(body);
                drop(written);
                confirm
            })
        };
        // The publish and its confirm, on the driver; the permit is held until both are
        // done, even when this delivery stops waiting first (a timeout, a blocked
        // connection), so at most `max_inflight` confirms are ever outstanding. The
        // confirm's meaning is decided there too: lapin's `Confirmation` is 472 bytes, the
        // outcome a quarter of that, and the result waits in a channel per delivery.
        let job = async move {
            let _permit = permit;
            let confirm = publish.await.map_err(|e| (Stage::Publish, e))?;
            let confirmation = confirm.await.map_err(|e| (Stage::Confirm, e))?;
            Ok(outcome(confirmation, cfg.exchange(), &routing_key))
        };
        // Boxed now, not when `publish` is first polled: the job's state then lives in the
        // box alone, not also inside this delivery's future.
        let run = self.driver.run(job);
        let publish = async {
            match run.await {
                Some(Ok(outcome)) => outcome,
                Some(Err((stage, e))) => Err(self.lapin_err(stage, e)),
                None => Err(AmqpError::Abandoned),
            }
        };
        let became_blocked = link.conn.became_blocked();
        tokio::select! {
            res = timeout(confirm_timeout, publish) => match res {
                Ok(res) => res,
                Err(_) if link.conn.is_blocked() => Err(AmqpError::Blocked),
                Err(_) => Err(AmqpError::ConfirmTimeout {
                    ms: confirm_timeout.as_millis(),
                }),
            },
            () = became_blocked => Err(AmqpError::Blocked),
        }
    }
}

/// Bytes a hook's message is counted for under `MAX_UNWRITTEN_BYTES`: the body's base64
/// and the members (a claim instead of a body over `inline_max`), at most the whole bound
/// so that any message can go alone.
fn unwritten_estimate(body: usize, inline_max: Option<NonZeroUsize>) -> u32 {
    let inline = inline_max.is_none_or(|m| body <= m.get());
    let base64 = if inline { body.div_ceil(3) * 4 } else { 0 };
    let bytes = (base64 + MESSAGE_OVERHEAD_BYTES).min(MAX_UNWRITTEN_BYTES);
    u32::try_from(bytes).expect("MAX_UNWRITTEN_BYTES fits in u32")
}

/// What a publisher confirm means for the delivery: Ok only for an ack of a message that
/// was not returned.
pub(crate) fn outcome(
    confirmation: Confirmation,
    exchange: &str,
    routing_key: &str,
) -> Result<(), AmqpError> {
    match confirmation {
        Confirmation::Ack(None) => Ok(()),
        Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned)) => {
            Err(AmqpError::Returned {
                code: returned.reply_code,
                text: returned.reply_text.to_string(),
                exchange: exchange.to_owned(),
                routing_key: routing_key.to_owned(),
            })
        }
        Confirmation::Nack(None) => Err(AmqpError::Nacked {
            exchange: exchange.to_owned(),
            routing_key: routing_key.to_owned(),
        }),
        Confirmation::NotRequested => Err(AmqpError::NotConfirmed),
    }
}

#[async_trait]
impl Sink for AmqpSink {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        self.publish(env, ctx).await
    }

    /// Stored (a publisher confirm of a persistent message); the layout's inline threshold
    /// (`None` for CloudEvents: they travel inline); `max_message_bytes` of the body; no
    /// order (confirms are pipelined and retries overtake); the PLAIN login, over TLS for
    /// `amqps://`.
    ///
    /// The pipeline window: publishes on the confirm-mode channel are pipelined, and
    /// RabbitMQ confirms them in batches, so many outstanding publishes keep the channel
    /// busy; but never more than `max_inflight`: past it a delivery only waits inside the
    /// sink for a confirm slot (holding its encoded message and a timer), where the
    /// dispatcher would hold it for nothing. The window is `max_inflight` deliveries (more
    /// than the 1,024 of [`InFlight::PIPELINE`]: the broker confirms per disk flush, and a
    /// larger window makes larger flushes) and its 16 MiB of bodies.
    fn capabilities(&self) -> Capabilities {
        let max = self.cfg.max_message_bytes().get();
        let mut auth = vec!["plain"];
        if self.cfg.url.scheme() == "amqps" {
            auth.push("tls");
        }
        Capabilities::new(true, self.layout.inline_max_bytes())
            .with_in_flight(InFlight::new(
                self.cfg.max_inflight(),
                InFlight::PIPELINE.bytes,
            ))
            .with_max_message(
                max,
                "body",
                Capabilities::limit_source(max, DEFAULT_MAX_MESSAGE_BYTES.get()),
            )
            .with_auth(auth)
    }

    fn describe(&self, subject: &Subject) -> Option<Description> {
        let url = &self.cfg.url;
        let payload = self.layout.payload();
        let mut d = Description::new(url.scheme(), payload);
        d.host = Some(url.host_port.clone());
        d.pathname = match url.vhost() {
            "/" => None,
            vhost => Some(format!("/{vhost}")),
        };
        d.address = self
            .cfg
            .routing_key()
            .render_for(&subject.source_id, subject.tenant_id.as_deref());
        if d.address.is_none() {
            d.computed.push("routing_key".to_owned());
        }
        d.bindings.insert(
            "amqp".to_owned(),
            serde_json::json!({
                "is": "routingKey",
                "exchange": {
                    "name": self.cfg.exchange(),
                    "type": self.cfg.exchange_type().as_str(),
                    "durable": true,
                    "vhost": url.vhost(),
                },
                "bindingVersion": "0.3.0",
            }),
        );
        Some(d)
    }

    /// Opens the connection and channel (login, vhost) and passively declares the
    /// exchange on a throwaway channel. With the default exchange and a fixed routing key
    /// it also asks whether the queue the key names is durable (the sink is: a transient
    /// queue fails config; see `queue_durability`). Publishes nothing.
    async fn check(&self) -> Result<Check, Failure> {
        let fail = Failure::from;
        let link = self.link().await.map_err(fail)?;
        let probe = async {
            let channel = link
                .conn
                .conn
                .create_channel()
                .await
                .map_err(|e| self.lapin_err(Stage::Channel, e))?;
            let res = self.declare(&channel, true).await;
            if channel.status().connected() {
                let _ = channel.close(200, "OK".into()).await;
            }
            res?;
            let key = self.cfg.routing_key();
            let queue = key.is_static().then(|| key.render_for("", None)).flatten();
            match queue.filter(|_| self.cfg.exchange().is_empty()) {
                Some(queue) => match self.queue_durability(&link.conn.conn, &queue).await? {
                    QueueDurability::Durable => Ok(()),
                    QueueDurability::Transient => Err(AmqpError::QueueNotDurable { queue }),
                    QueueDurability::Unknown(code) => {
                        tracing::warn!(
                            endpoint = %self.endpoint,
                            queue = %printable(&queue),
                            reply_code = code,
                            "amqp sink: check could not ask whether the queue is durable \
                             (missing, exclusive, no configure permission, or declared with \
                             arguments or flags the probe does not repeat)"
                        );
                        Ok(())
                    }
                },
                None => Ok(()),
            }
        };
        match timeout(self.cfg.connect_timeout(), probe).await {
            Ok(res) => res.map_err(fail)?,
            Err(_) => return Err(fail(self.connect_timeout_err())),
        }
        Ok(Check::Passed)
    }
}

/// What `check()` learned of the queue the default exchange routes a fixed key to.
enum QueueDurability {
    /// It survives a broker restart (a durable classic, quorum or stream queue).
    Durable,
    /// It is lost, with its messages, when the broker restarts.
    Transient,
    /// The broker would not say: the reply code of the refusal.
    Unknown(u16),
}

impl AmqpSink {
    /// Whether `queue` is durable. AMQP 0-9-1 has no query for a queue's flags and a
    /// passive declare does not report them; a declare of an existing queue must repeat
    /// its flags or the broker refuses it with 406 PRECONDITION_FAILED (a typed reply
    /// code). So: a passive declare (it exists; nothing is created), then declares that
    /// match only a durable queue (classic, quorum, stream), then one that matches only a
    /// transient queue. Each runs on a throwaway channel, since a refusal closes it. A
    /// queue deleted between the passive declare and the next would be created durable:
    /// the one write this probe can make, and only in that race.
    async fn queue_durability(
        &self,
        conn: &Connection,
        queue: &str,
    ) -> Result<QueueDurability, AmqpError> {
        if let Err(code) = self.declare_queue(conn, queue, true, false, None).await? {
            return Ok(QueueDurability::Unknown(code));
        }
        for kind in [None, Some("quorum"), Some("stream")] {
            match self.declare_queue(conn, queue, false, true, kind).await? {
                Ok(()) => return Ok(QueueDurability::Durable),
                Err(reply_code::PRECONDITION_FAILED) => {}
                Err(code) => return Ok(QueueDurability::Unknown(code)),
            }
        }
        Ok(
            match self.declare_queue(conn, queue, false, false, None).await? {
                Ok(()) => QueueDurability::Transient,
                Err(code) => QueueDurability::Unknown(code),
            },
        )
    }

    /// One `queue.declare` of `queue` on a channel of its own: passive, or with `durable`
    /// and the `x-queue-type` `kind`. `Err(code)`: the broker refused it with that reply
    /// code; an error only when the connection failed.
    async fn declare_queue(
        &self,
        conn: &Connection,
        queue: &str,
        passive: bool,
        durable: bool,
        kind: Option<&str>,
    ) -> Result<Result<(), u16>, AmqpError> {
        let channel = conn
            .create_channel()
            .await
            .map_err(|e| self.lapin_err(Stage::Channel, e))?;
        let mut args = FieldTable::default();
        if let Some(kind) = kind {
            args.insert("x-queue-type".into(), AMQPValue::LongString(kind.into()));
        }
        let options = QueueDeclareOptions {
            passive,
            durable,
            ..QueueDeclareOptions::default()
        };
        let res = channel.queue_declare(queue.into(), options, args).await;
        if channel.status().connected() {
            let _ = channel.close(200, "OK".into()).await;
        }
        match res {
            Ok(_) => Ok(Ok(())),
            Err(e) => match e.kind() {
                ErrorKind::ProtocolError(p) => Ok(Err(p.get_id())),
                _ => Err(self.lapin_err(Stage::Channel, e)),
            },
        }
    }
}

impl fmt::Debug for AmqpSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AmqpSink")
            .field("endpoint", &self.endpoint)
            .field("exchange", &self.cfg.exchange())
            .field("routing_key", &self.cfg.routing_key().as_str())
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AmqpConfig;

    #[test]
    fn a_message_is_counted_for_its_base64_and_members_at_most_the_whole_bound() {
        let inline = NonZeroUsize::new(65_536);
        let est = |body| unwritten_estimate(body, inline) as usize;
        assert_eq!(est(0), MESSAGE_OVERHEAD_BYTES);
        assert_eq!(est(3_000), 4_000 + MESSAGE_OVERHEAD_BYTES);
        assert_eq!(est(65_536), 87_384 + MESSAGE_OVERHEAD_BYTES);
        // Over the inline threshold the body travels as a claim.
        assert_eq!(est(65_537), MESSAGE_OVERHEAD_BYTES);
        // No threshold (CloudEvents): always inline, and a huge body can still go alone.
        assert_eq!(
            unwritten_estimate(100 << 20, None) as usize,
            MAX_UNWRITTEN_BYTES
        );
    }

    fn sink(url: &str, rk: Option<&str>) -> AmqpSink {
        let mut c = AmqpConfig::new(url, "hooks").unwrap();
        if let Some(t) = rk {
            c = c.with_routing_key_template(t).unwrap();
        }
        AmqpSink::new(c)
    }

    /// Every outstanding delivery holds its `deliver` future for the whole confirm round
    /// trip, so its size is part of the sink's memory per message in flight. It once held
    /// the open path and the unboxed message (2,128 bytes).
    #[test]
    fn an_outstanding_delivery_holds_small_futures() {
        let sink = sink("amqp://127.0.0.1:1/%2f", None);
        let env = Envelope::builder("h1", "s", "{}").build().unwrap();
        let ctx = Ctx::for_envelope(&env);
        let deliver = Sink::deliver(&sink, &env, &ctx);
        let size = std::mem::size_of_val(&*deliver);
        assert!(size <= 768, "the deliver future is {size} bytes");
    }

    #[test]
    fn the_window_is_the_confirm_limit() {
        let window = |max: Option<usize>| {
            let mut c = AmqpConfig::new("amqp://127.0.0.1:5672/%2f", "hooks").unwrap();
            if let Some(m) = max {
                c = c.with_max_inflight(NonZeroUsize::new(m).unwrap());
            }
            let w = AmqpSink::new(c).capabilities().in_flight.unwrap();
            assert_eq!(w.bytes.get(), 16 << 20);
            w.deliveries.get()
        };
        assert_eq!(window(None), 4096, "the default max_inflight");
        assert_eq!(window(Some(8)), 8);
        assert_eq!(window(Some(5_000)), 5_000);
    }

    #[test]
    fn describe_has_no_credentials() {
        let s = sink("amqps://user:s3cr3t@broker.example:5671/prod", None);
        let d = s.describe(&Subject::new("stripe", None)).unwrap();
        assert_eq!(d.protocol, "amqps");
        assert_eq!(d.host.as_deref(), Some("broker.example:5671"));
        assert_eq!(d.pathname.as_deref(), Some("/prod"));
        assert_eq!(d.address.as_deref(), Some("ankusa.stripe"));
        assert!(d.computed.is_empty());
        let json = serde_json::to_string(&d).unwrap();
        assert!(!json.contains("s3cr3t") && !json.contains("user"), "{json}");
        assert!(json.contains("\"is\":\"routingKey\""), "{json}");
        assert!(!format!("{s:?}").contains("s3cr3t"));

        let s = sink(
            "amqp://u:s3cr3t@127.0.0.1",
            Some("t.{tenant_id}.{source_id}"),
        );
        let d = s.describe(&Subject::new("stripe", None)).unwrap();
        assert_eq!(d.pathname, None);
        assert_eq!(d.host.as_deref(), Some("127.0.0.1:5672"));
        assert_eq!(d.address, None);
        assert_eq!(d.computed, vec!["routing_key".to_owned()]);
        let d = s
            .describe(&Subject::new("stripe", Some("acme".into())))
            .unwrap();
        assert_eq!(d.address.as_deref(), Some("t.acme.stripe"));
    }
}

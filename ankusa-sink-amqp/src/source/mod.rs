//! `forward --from` a RabbitMQ queue: competing consumers share the queue; each record is
//! acknowledged (`basic.ack`) after its final outcome, or given back (`basic.nack` with
//! requeue) when it was not finished.

use crate::error::{AmqpError, Stage, classify, lapin_text, printable, reply_code};
use ankusa_sink_core::Class;
use ankusa_source::{Ack, Lag, Record, Source, SourceError, SourceOptions, Window};
use futures_util::{FutureExt as _, StreamExt as _};
use lapin::message::Delivery;
use lapin::options::{
    BasicCancelOptions, BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, Consumer};
use std::collections::VecDeque;
use std::fmt;
use std::num::NonZeroU16;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::{Instant, timeout};

mod ack;
mod config;

use ack::AmqpAck;
pub use config::AmqpSourceConfig;

/// The first pause before reconnecting after a lost connection or channel.
const BACKOFF_START: Duration = Duration::from_millis(100);
/// The longest pause between reconnection attempts.
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How long closing the consumer, channel and connection may take, each.
const CLOSE_STEP: Duration = Duration::from_secs(2);
/// How long one lag question (a channel, a passive declare, its close) may take.
const LAG_TIMEOUT: Duration = Duration::from_secs(2);

/// One open channel: its connection, and the consumer reading the queue on it.
struct Link {
    /// Shared (weakly) with the source's [`AmqpLag`], which opens channels of its own on it.
    conn: Arc<Connection>,
    channel: Channel,
    /// `None` while the byte window has no room for even one more record of the largest
    /// size seen: the broker sends nothing until records settle.
    consumer: Option<Consumer>,
    /// The prefetch the consumer was opened with: the deliveries the broker may have
    /// outstanding to it at once.
    credit: u16,
    /// Deliveries the consumer has handed out whose ack or nack is not written yet: with
    /// `credit`, how many more the broker may send.
    out: Arc<AtomicUsize>,
}

impl Link {
    fn usable(&self) -> bool {
        self.conn.status().connected() && self.channel.status().connected()
    }

    /// Close the channel and connection, bounded: what was not acknowledged goes back to
    /// the queue.
    async fn close(self) {
        if self.channel.status().connected() {
            let _ = timeout(CLOSE_STEP, self.channel.close(200, "OK".into())).await;
        }
        if self.conn.status().connected() {
            let _ = timeout(CLOSE_STEP, self.conn.close(200, "OK".into())).await;
        }
    }
}

/// Why opening the consumer failed.
enum OpenError {
    /// The configuration cannot work (login refused, queue missing, no permission).
    Config(String),
    /// Worth another try later (the broker is down or restarting).
    Transient(String),
}

/// A RabbitMQ queue read by one consumer with manual acknowledgements.
///
/// # What it holds in bytes
///
/// The [`Window`] bounds the records handed out; the broker, though, pushes deliveries to
/// the consumer ahead of `next`, up to its prefetch, and lapin buffers them whole. RabbitMQ
/// has no byte prefetch (`basic.qos` `prefetch_size` is refused as not implemented), its
/// per-consumer prefetch is fixed when the consumer starts (`global` qos, the one that can
/// change, is refused by quorum queues and deprecated), and a delivery's size is known only
/// once it arrived. So the consumer's prefetch is its byte credit: it is opened with as
/// many deliveries as the free bytes hold at the largest record seen so far (one while no
/// size is known; the configured prefetch at most). When a larger record shows that the
/// credit was too generous, the consumer is cancelled at once (what it had buffered is
/// handed out first) and reopened with the credit that fits; when records settle and the
/// credit could double, it is reopened larger. What the source holds is then the byte
/// budget, plus what one burst of records larger than any before brings before the first
/// of them is seen (at most the prefetch of them): records of one size never exceed the
/// budget, and a record larger than the budget is taken alone.
pub struct AmqpSource {
    cfg: AmqpSourceConfig,
    /// The largest prefetch: the configured one, or the dispatcher's concurrency.
    prefetch: u16,
    window: Window,
    link: Option<Link>,
    /// Deliveries a cancelled consumer had buffered, on the live channel: handed out
    /// before the next consumer's.
    pending: VecDeque<Delivery>,
    pending_bytes: usize,
    /// The largest record seen so far (0: none yet), the size each unit of credit reserves.
    largest: usize,
    /// Acks handed to the broker and not yet written.
    settling: Arc<AtomicUsize>,
    /// True once the source closes: releases go out without their delay.
    closing: watch::Sender<bool>,
    runtime: tokio::runtime::Handle,
    /// The pause before the next attempt to open the consumer, doubling to
    /// [`BACKOFF_MAX`] while attempts fail.
    backoff: Duration,
    /// When the next attempt may be made, after a failed one.
    retry_at: Option<Instant>,
    endpoint: String,
    /// The connection of the current link, for [`AmqpLag`]; dead while there is none.
    lag_conn: Arc<Mutex<Weak<Connection>>>,
    describe: String,
    stopped: bool,
}

impl fmt::Debug for AmqpSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AmqpSource")
            .field("describe", &self.describe)
            .field("prefetch", &self.prefetch)
            .field("unsettled", &self.window.unsettled())
            .finish_non_exhaustive()
    }
}

impl AmqpSource {
    /// Connect, check (or declare) the queue and start consuming. Must run inside a tokio
    /// runtime.
    ///
    /// # Errors
    /// [`SourceError::Config`] when the broker refuses the login, the vhost or a permission,
    /// or the queue does not exist (and `declare` is off). A broker that cannot be reached
    /// now is not an error: the source keeps trying (logged at warn) while `next` waits.
    pub async fn new(
        config: &AmqpSourceConfig,
        options: &SourceOptions,
    ) -> Result<Self, SourceError> {
        let prefetch = config.prefetch.map_or_else(
            || u16::try_from(options.concurrency.get()).unwrap_or(u16::MAX),
            NonZeroU16::get,
        );
        let endpoint = config.url.redacted();
        let mut source = AmqpSource {
            describe: format!("amqp queue {:?} on {endpoint}", config.queue),
            cfg: config.clone(),
            prefetch,
            // The broker never has more than `prefetch` out: a larger window could never
            // fill, and would never say that reading waits.
            window: Window::with_bytes(
                options.max_unacked.get().min(usize::from(prefetch.max(1))),
                options.max_unacked_bytes.get(),
            )
            .expect("both are non-zero"),
            link: None,
            pending: VecDeque::new(),
            pending_bytes: 0,
            largest: 0,
            settling: Arc::new(AtomicUsize::new(0)),
            closing: watch::Sender::new(false),
            runtime: tokio::runtime::Handle::current(),
            backoff: BACKOFF_START,
            retry_at: None,
            endpoint,
            lag_conn: Arc::new(Mutex::new(Weak::new())),
            stopped: false,
        };
        match source.open().await {
            Ok(link) => source.link = Some(link),
            Err(OpenError::Config(why)) => return Err(SourceError::Config(why)),
            Err(OpenError::Transient(why)) => source.failed(&why),
        }
        Ok(source)
    }

    /// A transient failure to open the consumer: logged, the next attempt backed off.
    fn failed(&mut self, why: &str) {
        tracing::warn!(
            target: "ankusa_source",
            endpoint = %self.endpoint,
            queue = %self.cfg.queue,
            retry_in_ms = u64::try_from(self.backoff.as_millis()).unwrap_or(u64::MAX),
            "amqp source: cannot open the consumer, will retry: {why}"
        );
        self.retry_at = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
    }

    /// The largest prefetch (`basic.qos`) a consumer is opened with; the byte window may
    /// open it with less (see [`AmqpSource`]).
    pub fn prefetch(&self) -> u16 {
        self.prefetch
    }

    /// The credit a consumer opened now gets: as many deliveries as the free bytes hold
    /// at the largest record seen (one while no size is known, or when nothing holds
    /// bytes, so a record larger than the whole budget goes alone), and no more than the
    /// prefetch less the deliveries the broker still counts against this forwarder
    /// (records handed out, buffered ones). Zero when even one would not fit.
    fn credit(&self) -> u16 {
        let used = self.used_bytes();
        let free = self.window.max_bytes().saturating_sub(used);
        let by_bytes = match free.checked_div(self.largest) {
            None => 1,
            Some(n) if used == 0 => n.max(1),
            Some(n) => n,
        };
        let by_count = usize::from(self.prefetch).saturating_sub(self.held());
        u16::try_from(by_bytes.min(by_count)).unwrap_or(u16::MAX)
    }

    /// Records handed out and not settled, and deliveries buffered here. Called from
    /// `next`, which holds one place of the window for the record it is getting (not a
    /// record yet), or from `new`, before any place is taken.
    fn held(&self) -> usize {
        let records = self.window.unsettled().saturating_sub(1);
        records.saturating_add(self.pending.len())
    }

    /// Bytes held by records handed out and by deliveries buffered here.
    fn used_bytes(&self) -> usize {
        self.window
            .unsettled_bytes()
            .saturating_add(self.pending_bytes)
    }

    /// Whether a consumer is open right now.
    pub fn is_connected(&self) -> bool {
        self.link.as_ref().is_some_and(Link::usable)
    }

    /// Open connection, channel, qos, queue check and consumer, within `connect_timeout`.
    async fn open(&self) -> Result<Link, OpenError> {
        let bound = self.cfg.connect_timeout();
        let ms = bound.as_millis();
        let conn = match timeout(bound, self.cfg.url.connect(self.connection_name())).await {
            Err(_) => {
                return Err(OpenError::Transient(format!(
                    "connecting to {} did not finish within {ms} ms",
                    self.endpoint
                )));
            }
            Ok(Err(e)) => return Err(self.error(Stage::Connect, "connect", &e)),
            Ok(Ok(conn)) => Arc::new(conn),
        };
        match timeout(bound, self.consume(&conn)).await {
            Ok(Ok((channel, consumer, credit))) => {
                *self.lag_conn.lock().unwrap_or_else(PoisonError::into_inner) =
                    Arc::downgrade(&conn);
                Ok(Link {
                    conn,
                    channel,
                    consumer,
                    credit,
                    out: Arc::new(AtomicUsize::new(0)),
                })
            }
            Ok(Err(e)) => {
                let _ = timeout(CLOSE_STEP, conn.close(200, "OK".into())).await;
                Err(e)
            }
            Err(_) => {
                let _ = timeout(CLOSE_STEP, conn.close(200, "OK".into())).await;
                Err(OpenError::Transient(format!(
                    "opening the consumer on {} did not finish within {ms} ms",
                    self.endpoint
                )))
            }
        }
    }

    /// A channel on `conn`, the queue checked (or declared), and a consumer with the credit
    /// the byte window allows now (none when it allows none).
    async fn consume(
        &self,
        conn: &Connection,
    ) -> Result<(Channel, Option<Consumer>, u16), OpenError> {
        let queue = self.cfg.queue.as_str();
        let channel = conn
            .create_channel()
            .await
            .map_err(|e| self.error(Stage::Channel, "channel open", &e))?;
        let declare = QueueDeclareOptions {
            passive: !self.cfg.declare,
            durable: true,
            ..QueueDeclareOptions::default()
        };
        channel
            .queue_declare(queue.into(), declare, FieldTable::default())
            .await
            .map_err(|e| {
                if !self.cfg.declare && reply(&e) == Some(reply_code::NOT_FOUND) {
                    self.missing_queue()
                } else {
                    self.error(Stage::Declare, "queue declare", &e)
                }
            })?;
        if let Some((exchange, key)) = self.cfg.exchange() {
            // The queue gets every message the exchange routes with the key from now on;
            // a missing exchange is a config error (404), as a missing queue is.
            channel
                .queue_bind(
                    queue.into(),
                    exchange.into(),
                    key.into(),
                    lapin::options::QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(|e| self.error(Stage::Declare, "queue bind", &e))?;
        }
        let credit = self.credit();
        let consumer = self.start(&channel, credit).await?;
        Ok((channel, consumer, credit))
    }

    /// A consumer of the queue on `channel` with prefetch `credit`; `None` for zero.
    async fn start(&self, channel: &Channel, credit: u16) -> Result<Option<Consumer>, OpenError> {
        if credit == 0 {
            return Ok(None);
        }
        // Per consumer (`global: false`): set before `basic.consume`, it is this consumer's.
        channel
            .basic_qos(credit, BasicQosOptions { global: false })
            .await
            .map_err(|e| self.error(Stage::Channel, "basic.qos", &e))?;
        let consumer = channel
            .basic_consume(
                self.cfg.queue.as_str().into(),
                "".into(),
                BasicConsumeOptions {
                    no_ack: false,
                    ..BasicConsumeOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| match reply(&e) {
                // The queue was deleted since it was checked (a consumer reopened for the
                // byte window): as at the start, unless the source declares it, which the
                // reconnection does.
                Some(reply_code::NOT_FOUND) if !self.cfg.declare => self.missing_queue(),
                Some(reply_code::NOT_FOUND) => OpenError::Transient(format!(
                    "queue {:?} is gone from {}; declaring it again",
                    self.cfg.queue, self.endpoint
                )),
                _ => self.error(Stage::Declare, "basic.consume", &e),
            })?;
        Ok(Some(consumer))
    }

    /// The queue does not exist and the source does not declare it.
    fn missing_queue(&self) -> OpenError {
        OpenError::Config(format!(
            "amqp source: queue {:?} does not exist on {} (create it, or set declare = true \
             to declare it durable)",
            self.cfg.queue, self.endpoint
        ))
    }

    /// Cancel the consumer: once the broker confirms, every delivery it sent the consumer
    /// is buffered, and they wait here to be handed out; the broker sends no more.
    async fn cancel(&mut self) -> Result<(), OpenError> {
        let Some(link) = self.link.as_mut() else {
            return Ok(());
        };
        let Some(mut consumer) = link.consumer.take() else {
            return Ok(());
        };
        let tag = consumer.tag();
        let cancelled = timeout(
            CLOSE_STEP,
            link.channel
                .basic_cancel(tag.as_str().into(), BasicCancelOptions::default()),
        )
        .await;
        match cancelled {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(self.error(Stage::Channel, "basic.cancel", &e)),
            Err(_) => {
                return Err(OpenError::Transient(format!(
                    "basic.cancel did not finish on {} within {} ms",
                    self.endpoint,
                    CLOSE_STEP.as_millis()
                )));
            }
        }
        // `cancel-ok` follows every delivery to the consumer on the channel: lapin has them
        // all, then the end of the stream.
        while let Some(Some(Ok(d))) = consumer.next().now_or_never() {
            self.largest = self.largest.max(d.data.len());
            self.pending_bytes += d.data.len();
            self.pending.push_back(d);
        }
        Ok(())
    }

    /// Cancel the consumer and open one with the credit the window allows now.
    async fn restart(&mut self) -> Result<(), OpenError> {
        self.cancel().await?;
        let credit = self.credit();
        let Some(link) = self.link.as_ref() else {
            return Ok(());
        };
        let channel = link.channel.clone();
        let consumer = timeout(self.cfg.connect_timeout(), self.start(&channel, credit))
            .await
            .map_err(|_| {
                OpenError::Transient(format!(
                    "reopening the consumer on {} did not finish in time",
                    self.endpoint
                ))
            })??;
        if let Some(link) = self.link.as_mut() {
            link.consumer = consumer;
            link.credit = credit;
            link.out = Arc::new(AtomicUsize::new(0));
        }
        Ok(())
    }

    /// Whether reopening the consumer now would at least double its credit.
    fn should_grow(&self) -> bool {
        let Some(link) = self.link.as_ref() else {
            return false;
        };
        link.consumer.is_some()
            && link.credit < self.prefetch
            && self.credit() >= link.credit.saturating_mul(2)
    }

    /// After a delivery of `len` bytes larger than any before: whether the consumer's
    /// remaining credit, at that size, could bring more than the budget holds.
    fn over_reserved(&self, len: usize) -> bool {
        let Some(link) = self.link.as_ref() else {
            return false;
        };
        let out = link.out.load(Ordering::SeqCst);
        let remaining = usize::from(link.credit).saturating_sub(out);
        let used = self.used_bytes().saturating_add(len);
        remaining > 0
            && used.saturating_add(remaining.saturating_mul(self.largest)) > self.window.max_bytes()
    }

    /// A failure reopening the consumer: a configuration error ends the source; anything
    /// else drops the link, and the next call reconnects.
    fn reopen_failed(&mut self, e: OpenError) -> Option<SourceError> {
        match e {
            OpenError::Config(why) => Some(SourceError::Config(why)),
            OpenError::Transient(why) => {
                tracing::warn!(
                    target: "ankusa_source",
                    endpoint = %self.endpoint,
                    queue = %self.cfg.queue,
                    "amqp source: {why}; reconnecting (its unacknowledged records go back to \
                     the queue)"
                );
                self.drop_link();
                None
            }
        }
    }

    fn connection_name(&self) -> String {
        format!("ankusa-source-amqp queue={}", self.cfg.queue)
    }

    /// A lapin error at `step`, classified as the sink classifies it; never a secret.
    fn error(&self, stage: Stage, step: &str, e: &lapin::Error) -> OpenError {
        let text = lapin_text(e);
        let class = classify(&AmqpError::lapin(stage, &self.endpoint, e.clone()));
        if class != Class::Config {
            return OpenError::Transient(format!("{step} failed on {}: {text}", self.endpoint));
        }
        if let (Stage::Connect, lapin::ErrorKind::ProtocolError(p)) = (stage, e.kind())
            && p.get_id() == reply_code::ACCESS_REFUSED
        {
            OpenError::Config(format!(
                "amqp source: {} refused the login (check the user name and password of \
                 url): {} {}",
                self.endpoint,
                p.get_id(),
                printable(p.get_message().as_str())
            ))
        } else {
            OpenError::Config(format!(
                "amqp source: {step} of queue {:?} failed on {}: {text}",
                self.cfg.queue, self.endpoint
            ))
        }
    }

    /// Forget the consumer (its unacknowledged messages go back to the queue when its
    /// channel closes; their handles can no longer settle) and close it in the background.
    fn drop_link(&mut self) {
        // Buffered deliveries of a closed channel can no longer be acknowledged: the broker
        // has them back.
        self.pending.clear();
        self.pending_bytes = 0;
        if let Some(link) = self.link.take() {
            self.runtime.spawn(link.close());
        }
    }

    /// Charge the delivery's bytes to the window (waiting while they do not fit), then
    /// hand it out; `out` counts it for its consumer until its ack or nack is written.
    async fn admit(
        &self,
        delivery: Delivery,
        out: Option<Arc<AtomicUsize>>,
        permit: ankusa_source::Permit,
    ) -> Record {
        let permit = self.window.charge(permit, delivery.data.len()).await;
        self.record(delivery, out, permit)
    }

    fn record(
        &self,
        delivery: Delivery,
        out: Option<Arc<AtomicUsize>>,
        permit: ankusa_source::Permit,
    ) -> Record {
        let position = format!("{}#{}", self.cfg.queue, delivery.delivery_tag);
        let settle = AmqpAck {
            acker: delivery.acker,
            out,
            settling: self.settling.clone(),
            closing: self.closing.subscribe(),
            runtime: self.runtime.clone(),
            position: position.clone(),
        };
        Record::new(delivery.data, position, Ack::new(settle, permit))
    }
}

/// The broker's reply code in a lapin error, if it sent one.
fn reply(e: &lapin::Error) -> Option<u16> {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(p) => Some(p.get_id()),
        _ => None,
    }
}

#[async_trait::async_trait]
impl Source for AmqpSource {
    async fn next(&mut self) -> Option<Result<Record, SourceError>> {
        if self.stopped {
            return None;
        }
        let permit = self.window.acquire().await;
        loop {
            // What a cancelled consumer had buffered first: the broker sent it already.
            if let Some(d) = self.pending.pop_front() {
                self.pending_bytes -= d.data.len();
                return Some(Ok(self.admit(d, None, permit).await));
            }
            let Some(link) = self.link.as_mut() else {
                if let Some(at) = self.retry_at {
                    tokio::time::sleep_until(at).await;
                }
                match self.open().await {
                    Ok(link) => {
                        tracing::info!(
                            target: "ankusa_source",
                            endpoint = %self.endpoint,
                            queue = %self.cfg.queue,
                            "amqp source: consuming again"
                        );
                        self.backoff = BACKOFF_START;
                        self.retry_at = None;
                        self.link = Some(link);
                    }
                    Err(OpenError::Config(why)) => return Some(Err(SourceError::Config(why))),
                    Err(OpenError::Transient(why)) => self.failed(&why),
                }
                continue;
            };
            if link.consumer.is_none() {
                // No room for another record of the largest size seen (a record larger
                // than the budget: until nothing holds bytes), or the prefetch is taken:
                // wait for records to settle. Only `next` takes bytes and places, so once
                // one wait is over it stays over during the other.
                self.window.until_free(self.largest).await;
                self.window
                    .until_unsettled_at_most(usize::from(self.prefetch))
                    .await;
                if self.credit() == 0 {
                    // Past the window's own bounds (a window of over 4e9 records): poll.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                if let Err(e) = self.restart().await
                    && let Some(err) = self.reopen_failed(e)
                {
                    return Some(Err(err));
                }
                continue;
            }
            if self.should_grow() {
                if let Err(e) = self.restart().await
                    && let Some(err) = self.reopen_failed(e)
                {
                    return Some(Err(err));
                }
                continue;
            }
            let link = self.link.as_mut().expect("checked above");
            let consumer = link.consumer.as_mut().expect("checked above");
            match consumer.next().await {
                Some(Ok(delivery)) if delivery.acker.usable() && link.usable() => {
                    let out = link.out.clone();
                    out.fetch_add(1, Ordering::SeqCst);
                    let len = delivery.data.len();
                    if len > self.largest {
                        self.largest = len;
                        // The credit was sized for smaller records: stop the broker now,
                        // before it sends more of these.
                        if self.over_reserved(len)
                            && let Err(e) = self.cancel().await
                            && let Some(err) = self.reopen_failed(e)
                        {
                            return Some(Err(err));
                        }
                    }
                    return Some(Ok(self.admit(delivery, Some(out), permit).await));
                }
                // A message buffered before its channel or connection closed: it can no
                // longer be acknowledged, and the broker has taken it back already.
                Some(Ok(_)) => {
                    tracing::warn!(
                        target: "ankusa_source",
                        endpoint = %self.endpoint,
                        queue = %self.cfg.queue,
                        "amqp source: the consumer's channel closed; reconnecting (its \
                         unacknowledged records go back to the queue)"
                    );
                    self.drop_link();
                }
                Some(Err(e)) => {
                    tracing::warn!(
                        target: "ankusa_source",
                        endpoint = %self.endpoint,
                        queue = %self.cfg.queue,
                        error = %lapin_text(&e),
                        "amqp source: lost the consumer; reconnecting (its unacknowledged \
                         records go back to the queue)"
                    );
                    self.drop_link();
                }
                None => {
                    tracing::warn!(
                        target: "ankusa_source",
                        endpoint = %self.endpoint,
                        queue = %self.cfg.queue,
                        "amqp source: the broker cancelled the consumer; reconnecting"
                    );
                    self.drop_link();
                }
            }
        }
    }

    fn stop(&mut self) {
        self.stopped = true;
    }

    async fn close(mut self: Box<Self>, grace: Duration) {
        self.stopped = true;
        self.closing.send_replace(true);
        let Some(link) = self.link.take() else {
            return;
        };
        // No more deliveries: messages prefetched and not handed out are released when the
        // channel closes.
        if link.channel.status().connected()
            && let Some(consumer) = &link.consumer
        {
            let tag = consumer.tag();
            let _ = timeout(
                CLOSE_STEP,
                link.channel
                    .basic_cancel(tag, BasicCancelOptions::default()),
            )
            .await;
        }
        // Let the acks under way reach the broker.
        let deadline = Instant::now() + grace;
        while (self.window.unsettled() > 0 || self.settling.load(Ordering::SeqCst) > 0)
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        link.close().await;
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn window(&self) -> Option<Window> {
        Some(self.window.clone())
    }

    /// The queue's ready messages: see `AmqpLag`.
    fn lag(&self) -> Option<Arc<dyn Lag>> {
        Some(Arc::new(AmqpLag {
            conn: self.lag_conn.clone(),
            queue: self.cfg.queue.clone(),
        }))
    }
}

/// The queue's ready messages (`message_count` of a passive `queue.declare`): those not
/// delivered to any consumer. Messages delivered and not acknowledged (at most the
/// prefetch of each consumer) are not counted.
///
/// Each question opens a channel of its own on the source's current connection and closes
/// it: an error there (the queue deleted: 404) closes that channel only, never the
/// consuming one. `None` while the source has no connection (it is reconnecting, or
/// closed: the handle holds the connection weakly, so it never keeps one open), when the
/// queue is gone, or when the broker does not answer within [`LAG_TIMEOUT`].
struct AmqpLag {
    conn: Arc<Mutex<Weak<Connection>>>,
    queue: String,
}

#[async_trait::async_trait]
impl Lag for AmqpLag {
    async fn lag(&self) -> Option<u64> {
        let conn = self
            .conn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .upgrade()?;
        if !conn.status().connected() {
            return None;
        }
        let ask = async {
            let channel = conn.create_channel().await.ok()?;
            let passive = QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            };
            let queue = channel
                .queue_declare(self.queue.as_str().into(), passive, FieldTable::default())
                .await;
            // After a 404 the broker closed the channel already.
            if channel.status().connected() {
                let _ = channel.close(200, "OK".into()).await;
            }
            Some(u64::from(queue.ok()?.message_count()))
        };
        // Cut off, the channel is closed when its last handle drops.
        timeout(LAG_TIMEOUT, ask).await.ok()?
    }
}

//! `forward --from` a NATS JetStream stream: a durable pull consumer shares the stream's
//! messages among forwarders; each message is acknowledged (`+ACK`) after its final
//! outcome, given back (`-NAK`) when released, and kept alive (`+WPI`) while it waits.

use crate::error::{NatsError, classify};
use crate::sink::connect;
use ankusa_sink_core::Class;
use ankusa_source::{Ack, Lag, Record, Source, SourceError, SourceOptions, Window};
use async_nats::jetstream;
use async_nats::jetstream::consumer::{PullConsumer, pull};
use async_nats::jetstream::context::ConsumerInfoErrorKind;
use async_nats::{Client, ConnectOptions, Event};
use bytes::Bytes;
use futures_util::{FutureExt as _, StreamExt as _};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

mod ack;
mod binding;
mod config;

use ack::{Cmd, NatsAck, settle_loop};
use binding::bind;
pub use config::{MIN_CREATED_ACK_WAIT, NatsSourceConfig};

/// How long one pull request waits at the server for messages before it is renewed.
const PULL_EXPIRES: Duration = Duration::from_secs(2);

/// How long past [`PULL_EXPIRES`] a pull may end and still count as answered: the server
/// answers an expired pull (408), and a pull nobody answered asks whether the consumer is
/// gone.
const UNANSWERED_AFTER: Duration = Duration::from_secs(1);

/// The longest pause between two failed pulls.
const MAX_PULL_BACKOFF: Duration = Duration::from_secs(5);

/// The shortest interval between two rounds of in-progress acks.
const MIN_PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// How long the server may take to answer a lag question (consumer info).
const LAG_TIMEOUT: Duration = Duration::from_secs(2);

/// A NATS JetStream stream read through a durable pull consumer.
///
/// A pulling task takes a place in the [`Window`] for each message before it pulls it (a
/// pull asks for at most as many messages as there are free places, and at most as many
/// bytes as are free: its `max_bytes`; a message larger than the whole byte budget is
/// pulled alone once nothing else holds bytes), hands the message to
/// the settling task, which sends `+WPI` for every unsettled message every `ack_wait / 3`
/// from the moment it arrives, and queues it for [`next`](Source::next). Settled records
/// are acknowledged by the settling task (`+ACK`, `-NAK`): a hook waiting for a retry is
/// not redelivered elsewhere while this forwarder lives.
pub struct NatsSource {
    client: Client,
    window: Window,
    records: mpsc::Receiver<Result<Record, SourceError>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    puller: tokio::task::JoinHandle<()>,
    tx: Option<mpsc::UnboundedSender<Cmd>>,
    settler: tokio::task::JoinHandle<()>,
    lag: Arc<NatsLag>,
    describe: String,
    stopped: bool,
}

impl fmt::Debug for NatsSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsSource")
            .field("describe", &self.describe)
            .field("unsettled", &self.window.unsettled())
            .finish_non_exhaustive()
    }
}

/// Logs what happens to the connection: a lost connection is not an error (async-nats
/// reconnects), but the operator hears of it.
fn with_events(describe: String) -> ConnectOptions {
    ConnectOptions::new().event_callback(move |event| {
        let d = describe.clone();
        async move {
            match event {
                Event::Disconnected => tracing::warn!(
                    target: "ankusa_source", source = %d,
                    "NATS connection lost; reconnecting (unsettled records are kept)"
                ),
                Event::Connected => {
                    tracing::info!(target: "ankusa_source", source = %d, "NATS connected")
                }
                Event::Closed => tracing::debug!(target: "ankusa_source", source = %d, "closed"),
                other => tracing::warn!(target: "ankusa_source", source = %d, "NATS: {other}"),
            }
        }
    })
}

impl NatsSource {
    /// Connect, find the stream, bind the durable pull consumer (creating it if it does not
    /// exist), and start pulling and settling. Must run inside a tokio runtime.
    ///
    /// `Config` errors: refused credentials or TLS, a missing stream, JetStream off, an
    /// existing consumer that is a push consumer, does not ack explicitly, or whose
    /// `ack_wait` is not longer than the attempt timeout, an `ack_wait_ms` that is not
    /// either. `Fatal`: the server cannot be reached, JetStream does not answer in time.
    pub async fn open(
        config: &NatsSourceConfig,
        options: &SourceOptions,
    ) -> Result<Self, SourceError> {
        let describe = format!(
            "nats stream {} consumer {} on {}",
            config.stream, config.consumer, config.conn.url
        );
        let attempt = options.attempt_timeout;
        if let Some(w) = config.ack_wait()
            && w <= attempt
        {
            return Err(SourceError::Config(format!(
                "{describe}: ack_wait_ms ({} ms) must be longer than the attempt timeout \
                 ({} ms), or a hook still being attempted is redelivered elsewhere",
                w.as_millis(),
                attempt.as_millis()
            )));
        }
        let client = connect(&config.conn, with_events(describe.clone()))
            .await
            .map_err(|e| connect_error(&describe, &e))?;
        let mut js = jetstream::new(client.clone());
        js.set_timeout(config.conn.timeout());
        let stream = js
            .get_stream_no_info(&config.stream)
            .await
            .map_err(|e| SourceError::Config(format!("{describe}: {e}")))?;
        let consumer = bind(&stream, config, options, &describe).await?;
        let ack_wait = consumer.cached_info().config.ack_wait;
        let progress_every = (ack_wait / 3).max(MIN_PROGRESS_EVERY);
        let (tx, rx) = mpsc::unbounded_channel();
        let settler = tokio::spawn(settle_loop(client.clone(), rx, progress_every));
        let window = Window::for_options(options);
        // Every queued record holds a place: the queue never fills before the window.
        let (out, records) = mpsc::channel(window.size());
        let (stop, stopped) = tokio::sync::oneshot::channel();
        // A consumer may cap what one pull asks for (`max_bytes`): a pull over it is refused.
        let request_max_bytes = usize::try_from(consumer.cached_info().config.max_bytes)
            .ok()
            .filter(|&b| b > 0)
            .unwrap_or(usize::MAX);
        let puller = Puller {
            client: client.clone(),
            request_max_bytes,
            consumer,
            window: window.clone(),
            settler: tx.clone(),
            out,
            stream: config.stream.clone(),
            consumer_name: config.consumer.clone(),
            describe: describe.clone(),
            next_id: 0,
        };
        let puller = tokio::spawn(puller.run(stopped));
        let mut lag_js = jetstream::new(client.clone());
        lag_js.set_timeout(LAG_TIMEOUT);
        let lag = Arc::new(NatsLag {
            js: lag_js,
            stream: config.stream.clone(),
            consumer: config.consumer.clone(),
        });
        Ok(NatsSource {
            client,
            window,
            records,
            stop: Some(stop),
            puller,
            tx: Some(tx),
            settler,
            lag,
            describe,
            stopped: false,
        })
    }
}

/// The pulling task's state.
struct Puller {
    client: Client,
    /// The consumer's cap on a pull's `max_bytes` (`usize::MAX`: none).
    request_max_bytes: usize,
    consumer: PullConsumer,
    window: Window,
    settler: mpsc::UnboundedSender<Cmd>,
    out: mpsc::Sender<Result<Record, SourceError>>,
    stream: String,
    consumer_name: String,
    describe: String,
    next_id: u64,
}

impl Puller {
    /// Pull until `stop` fires, the source is dropped, or the consumer is gone; then give
    /// back at once what the last pull brought and nobody took.
    async fn run(mut self, mut stop: tokio::sync::oneshot::Receiver<()>) {
        let mut batch: Option<pull::Batch> = None;
        let mut pulled_at = tokio::time::Instant::now();
        let mut backoff = Duration::from_millis(100);
        // The byte cap of the pull under way (`None`: uncapped, one message alone), and of
        // the last capped pull that failed: its next message may be larger than the cap.
        let mut cap: Option<usize> = None;
        let mut failed_cap: Option<usize> = None;
        'places: loop {
            let permit = tokio::select! {
                biased;
                _ = &mut stop => break,
                p = self.window.acquire() => p,
            };
            loop {
                if batch.is_none() {
                    // Every message of this pull finds a place and its bytes: the place held
                    // and those free now, the bytes free now (only this task takes either).
                    // When a pull capped at the whole budget failed, the next message may be
                    // larger than the budget: with nothing held it comes alone, uncapped.
                    let free = self.window.free_bytes();
                    if free == 0 {
                        // A pull's `max_bytes` of 0 means no cap: wait for bytes instead.
                        tokio::select! {
                            biased;
                            _ = &mut stop => break 'places,
                            () = self.window.until_free(1) => continue,
                        }
                    }
                    let alone = free >= self.window.max_bytes()
                        && failed_cap.is_some_and(|c| c >= self.window.max_bytes());
                    let (want, bytes) = if alone {
                        (1, None)
                    } else {
                        let want = self.window.size() - self.window.unsettled() + 1;
                        (want, Some(free.min(self.request_max_bytes)))
                    };
                    let mut request = self
                        .consumer
                        .batch()
                        .max_messages(want)
                        .expires(PULL_EXPIRES);
                    if let Some(b) = bytes {
                        request = request.max_bytes(b);
                    }
                    match request.messages().await {
                        Ok(b) => {
                            batch = Some(b);
                            cap = bytes;
                            pulled_at = tokio::time::Instant::now();
                        }
                        Err(e) => {
                            tracing::warn!(
                                target: "ankusa_source", source = %self.describe, error = %e,
                                "pull request failed; retrying"
                            );
                            if pause(&mut stop, &mut backoff).await {
                                break 'places;
                            }
                            continue;
                        }
                    }
                }
                let next = tokio::select! {
                    biased;
                    _ = &mut stop => break 'places,
                    m = batch.as_mut().expect("set above").next() => m,
                };
                match next {
                    Some(Ok(m)) => {
                        backoff = Duration::from_millis(100);
                        failed_cap = None;
                        // Never waits: the pull asked for no more bytes than were free.
                        let len = m.message.payload.len();
                        let permit = self.window.charge(permit, len).await;
                        let record = self.record(m, permit);
                        // Never waits: every queued record holds one of the window's places.
                        if self.out.send(Ok(record)).await.is_err() {
                            break 'places;
                        }
                        continue 'places;
                    }
                    Some(Err(e)) => {
                        batch = None;
                        if let Some(err) = self.gone().await {
                            let _ = self.out.send(Err(err)).await;
                            break 'places;
                        }
                        // A capped pull ends with an error (409) when its next message is
                        // larger than the cap: expected while records hold the bytes, so
                        // not worth a warning; the next pull waits for bytes to free up.
                        if let Some(c) = cap {
                            tracing::debug!(
                                target: "ankusa_source", source = %self.describe, error = %e,
                                cap_bytes = c,
                                "capped pull ended early; retrying once more bytes are free"
                            );
                            failed_cap = Some(c);
                            let more = self.window.until_free(c.saturating_add(1));
                            if pause_or(&mut stop, &mut backoff, more).await {
                                break 'places;
                            }
                            continue;
                        }
                        tracing::warn!(
                            target: "ankusa_source", source = %self.describe, error = %e,
                            "pull failed; retrying"
                        );
                        if pause(&mut stop, &mut backoff).await {
                            break 'places;
                        }
                    }
                    // The pull expired or was filled: ask again.
                    None => {
                        batch = None;
                        // A pull that reaches a deleted consumer is never answered (no
                        // 409, no 408: the API still listens on its subject), and the client
                        // gives up 5 s past the expiry: so one that ended late asks.
                        if pulled_at.elapsed() > PULL_EXPIRES + UNANSWERED_AFTER
                            && let Some(err) = self.gone().await
                        {
                            let _ = self.out.send(Err(err)).await;
                            break 'places;
                        }
                    }
                }
            }
        }
        if let Some(mut batch) = batch {
            while let Some(Some(Ok(m))) = batch.next().now_or_never() {
                if let Some(reply) = m.message.reply.clone() {
                    let _ = self
                        .client
                        .publish(reply, Bytes::from_static(b"-NAK"))
                        .await;
                }
            }
        }
    }

    /// The record of a pulled message, tracked by the settling task from now on.
    fn record(&mut self, m: jetstream::Message, permit: ankusa_source::Permit) -> Record {
        let seq = m.info().map(|i| i.stream_sequence).unwrap_or_default();
        let position = format!("{}/{}@{seq}", self.stream, self.consumer_name);
        self.next_id += 1;
        let id = self.next_id;
        match m.message.reply.clone() {
            Some(reply) => {
                let _ = self.settler.send(Cmd::Track(id, reply));
            }
            // Every message a pull consumer delivers has its ack subject.
            None => tracing::warn!(
                target: "ankusa_source", %position, "a message without an ack subject"
            ),
        }
        let payload = m.message.payload.to_vec();
        let ack = NatsAck {
            id,
            tx: self.settler.clone(),
        };
        Record::new(payload, position, Ack::new(ack, permit))
    }

    /// After a failed pull: the error to stop with, when the consumer or its stream is
    /// gone; `None` when the trouble is transient.
    async fn gone(&self) -> Option<SourceError> {
        let mut js = jetstream::new(self.client.clone());
        js.set_timeout(Duration::from_secs(2));
        let stream = js.get_stream_no_info(&self.stream).await.ok()?;
        match stream.consumer_info(&self.consumer_name).await {
            Err(e) if e.kind() == ConsumerInfoErrorKind::NotFound => Some(SourceError::Config(
                format!("{}: the consumer was deleted", self.describe),
            )),
            Err(e) if e.kind() == ConsumerInfoErrorKind::StreamNotFound => Some(
                SourceError::Config(format!("{}: the stream was deleted", self.describe)),
            ),
            _ => None,
        }
    }
}

/// Wait `backoff` (doubled for next time, up to [`MAX_PULL_BACKOFF`]); `true` when `stop`
/// fired meanwhile.
async fn pause(stop: &mut tokio::sync::oneshot::Receiver<()>, backoff: &mut Duration) -> bool {
    let wait = *backoff;
    *backoff = (*backoff * 2).min(MAX_PULL_BACKOFF);
    tokio::select! {
        biased;
        _ = stop => true,
        _ = tokio::time::sleep(wait) => false,
    }
}

/// As [`pause`], but ends early once `sooner` does.
async fn pause_or(
    stop: &mut tokio::sync::oneshot::Receiver<()>,
    backoff: &mut Duration,
    sooner: impl std::future::Future<Output = ()>,
) -> bool {
    let wait = *backoff;
    *backoff = (*backoff * 2).min(MAX_PULL_BACKOFF);
    tokio::select! {
        biased;
        _ = stop => true,
        () = sooner => false,
        _ = tokio::time::sleep(wait) => false,
    }
}

/// The error of a failed connection: `Config` for what retrying cannot fix.
fn connect_error(describe: &str, e: &NatsError) -> SourceError {
    match classify(e) {
        Class::Config => SourceError::Config(format!("{describe}: {e}")),
        _ => SourceError::Fatal(format!("{describe}: {e}")),
    }
}

#[async_trait::async_trait]
impl Source for NatsSource {
    async fn next(&mut self) -> Option<Result<Record, SourceError>> {
        if self.stopped {
            return None;
        }
        // Cancel-safe: a record stays queued until it is received.
        self.records.recv().await
    }

    fn stop(&mut self) {
        self.stopped = true;
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    async fn close(mut self: Box<Self>, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace.max(Duration::from_secs(1));
        self.stop();
        // The puller gives back what its last pull brought and nobody took.
        if tokio::time::timeout_at(deadline, &mut self.puller)
            .await
            .is_err()
        {
            self.puller.abort();
        }
        // Records queued and not handed out: dropped, they are released (-NAK).
        self.records.close();
        while self.records.try_recv().is_ok() {}
        // The settling task ends once every record's handle is settled and gone.
        drop(self.tx.take());
        if tokio::time::timeout_at(deadline, &mut self.settler)
            .await
            .is_err()
        {
            tracing::warn!(
                target: "ankusa_source", source = %self.describe,
                unsettled = self.window.unsettled(),
                "records still unsettled at the end of the grace: the broker redelivers them \
                 after ack_wait"
            );
            self.settler.abort();
        }
        // The acks are written to the connection; make sure the server has them.
        if !matches!(
            tokio::time::timeout_at(deadline, self.client.flush()).await,
            Ok(Ok(()))
        ) {
            tracing::warn!(
                target: "ankusa_source", source = %self.describe,
                "the last acknowledgements could not be flushed: the broker may redeliver them"
            );
        }
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn window(&self) -> Option<Window> {
        Some(self.window.clone())
    }

    /// The durable consumer's `num_pending`: see `NatsLag`.
    fn lag(&self) -> Option<Arc<dyn Lag>> {
        Some(self.lag.clone())
    }
}

/// The durable consumer's `num_pending`, from its info: messages of the stream (those its
/// filter selects) not yet delivered to the consumer, by this forwarder or any other
/// sharing it. Messages delivered and not acknowledged (`num_ack_pending`: at most the
/// windows of the forwarders) are not counted. `None` when the server does not answer
/// within [`LAG_TIMEOUT`], or the stream or consumer is gone. The handle asks on the
/// source's connection, apart from its pulls.
#[derive(Debug)]
struct NatsLag {
    js: jetstream::Context,
    stream: String,
    consumer: String,
}

#[async_trait::async_trait]
impl Lag for NatsLag {
    async fn lag(&self) -> Option<u64> {
        let stream = self.js.get_stream_no_info(&self.stream).await.ok()?;
        let info = stream.consumer_info(&self.consumer).await.ok()?;
        Some(info.num_pending)
    }
}

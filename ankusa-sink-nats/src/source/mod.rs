//! `forward --from` a NATS JetStream stream: a durable pull consumer shares the stream's
//! messages among forwarders; each message is acknowledged (`+ACK`) after its final
//! outcome, given back (`-NAK`) when released, and kept alive (`+WPI`) while it waits.

use crate::config::{Auth, ConfigError, NatsConfig, conn_keys};
use crate::error::{NatsError, classify};
use crate::sink::connect;
use ankusa_sink_core::{Class, Secret};
use ankusa_source::{Ack, Record, Settle, Settlement, Source, SourceError, SourceOptions, Window};
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::jetstream::context::ConsumerInfoErrorKind;
use async_nats::jetstream::{self, consumer};
use async_nats::{Client, ConnectOptions, Event, Subject};
use bytes::Bytes;
use futures_util::{FutureExt as _, StreamExt as _};
use serde::Deserialize;
use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU64;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::mpsc;

/// The shortest `ack_wait` a consumer the source creates gets: it is
/// `max(2 x attempt timeout, 30 s)` unless `ack_wait_ms` says otherwise.
pub const MIN_CREATED_ACK_WAIT: Duration = Duration::from_secs(30);

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

/// The operator's keys, exactly as written in a `--from` file (`type` already removed).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceRepr {
    url: String,
    stream: String,
    consumer: String,
    user: Option<String>,
    password: Option<Secret>,
    token: Option<Secret>,
    nkey_seed: Option<Secret>,
    credentials_file: Option<PathBuf>,
    tls_ca_file: Option<PathBuf>,
    client_name: Option<String>,
    timeout_ms: Option<NonZeroU64>,
    connect_timeout_ms: Option<NonZeroU64>,
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
    conn: NatsConfig,
    stream: String,
    consumer: String,
    ack_wait_ms: Option<NonZeroU64>,
}

impl TryFrom<SourceRepr> for NatsSourceConfig {
    type Error = ConfigError;

    fn try_from(r: SourceRepr) -> Result<Self, ConfigError> {
        let conn = NatsConfig::from_conn_keys(conn_keys!(r))?;
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
            conn: NatsConfig::parse_url(url.as_ref())?,
            stream,
            consumer,
            ack_wait_ms: None,
        })
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
        self.ack_wait_ms = Some(ankusa_sink_core::timeout_ms(ack_wait));
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

    /// The configured `ack_wait` for a consumer the source creates, if any.
    pub fn ack_wait(&self) -> Option<Duration> {
        self.ack_wait_ms.map(|ms| Duration::from_millis(ms.get()))
    }

    /// The `ack_wait` a consumer created for `attempt_timeout` gets.
    fn created_ack_wait(&self, attempt_timeout: Duration) -> Duration {
        self.ack_wait()
            .unwrap_or_else(|| (attempt_timeout * 2).max(MIN_CREATED_ACK_WAIT))
    }
}

/// What the settling task is told, in order: a record handed out, then its settlement.
enum Cmd {
    Track(u64, Subject),
    Settle(u64, Settlement),
}

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
        Ok(NatsSource {
            client,
            window,
            records,
            stop: Some(stop),
            puller,
            tx: Some(tx),
            settler,
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

/// Bind the durable pull consumer, or create it.
async fn bind<I>(
    stream: &jetstream::stream::Stream<I>,
    config: &NatsSourceConfig,
    options: &SourceOptions,
    describe: &str,
) -> Result<PullConsumer, SourceError> {
    let name = &config.consumer;
    match stream.consumer_info(name).await {
        Ok(info) => return existing(stream, info, config, options, describe).await,
        Err(e) if e.kind() == ConsumerInfoErrorKind::NotFound => {}
        Err(e) => return Err(lookup_error(describe, &e)),
    }
    let ack_wait = config.created_ack_wait(options.attempt_timeout);
    let max_unacked = i64::try_from(options.max_unacked.get()).unwrap_or(i64::MAX);
    let created = pull::Config {
        durable_name: Some(name.clone()),
        description: Some("ankusa-sink forward --from".into()),
        deliver_policy: DeliverPolicy::All,
        ack_policy: AckPolicy::Explicit,
        ack_wait,
        max_ack_pending: max_unacked.saturating_mul(10).max(1000),
        ..Default::default()
    };
    match stream.create_consumer(created).await {
        Ok(c) => {
            tracing::info!(
                target: "ankusa_source",
                source = %describe,
                ack_wait_ms = ack_wait.as_millis() as u64,
                "created the durable pull consumer"
            );
            Ok(c)
        }
        // Another forwarder may have created it in between, with other settings: look
        // again before giving up.
        Err(create) => match stream.consumer_info(name).await {
            Ok(info) => existing(stream, info, config, options, describe).await,
            Err(_) => Err(SourceError::Config(format!(
                "{describe}: cannot create the consumer: {create}"
            ))),
        },
    }
}

/// Check an existing consumer and bind it.
async fn existing<I>(
    stream: &jetstream::stream::Stream<I>,
    info: consumer::Info,
    config: &NatsSourceConfig,
    options: &SourceOptions,
    describe: &str,
) -> Result<PullConsumer, SourceError> {
    let c = &info.config;
    if c.deliver_subject.is_some() {
        return Err(SourceError::Config(format!(
            "{describe}: the consumer is a push consumer; the source needs a pull consumer"
        )));
    }
    if c.ack_policy != AckPolicy::Explicit {
        return Err(SourceError::Config(format!(
            "{describe}: the consumer acknowledges with policy {:?}; the source needs explicit \
             acks",
            c.ack_policy
        )));
    }
    let attempt = options.attempt_timeout;
    if c.ack_wait <= attempt {
        return Err(SourceError::Config(format!(
            "{describe}: the consumer's ack_wait ({} ms) is not longer than the attempt timeout \
             ({} ms): a hook still being attempted would be redelivered to another forwarder; \
             raise the consumer's ack_wait or lower --attempt-timeout",
            c.ack_wait.as_millis(),
            attempt.as_millis()
        )));
    }
    if let Some(w) = config.ack_wait()
        && w != c.ack_wait
    {
        tracing::warn!(
            target: "ankusa_source",
            source = %describe,
            configured_ms = w.as_millis() as u64,
            consumer_ms = c.ack_wait.as_millis() as u64,
            "ack_wait_ms applies to a consumer the source creates; the existing consumer's \
             ack_wait is used"
        );
    }
    let max_unacked = i64::try_from(options.max_unacked.get()).unwrap_or(i64::MAX);
    if c.max_ack_pending > 0 && c.max_ack_pending < max_unacked {
        tracing::warn!(
            target: "ankusa_source",
            source = %describe,
            max_ack_pending = c.max_ack_pending,
            max_unacked,
            "the consumer's max_ack_pending is below --max-unacked: it bounds this forwarder"
        );
    }
    stream
        .get_consumer::<pull::Config>(&config.consumer)
        .await
        .map_err(|e| SourceError::Fatal(format!("{describe}: binding the consumer: {e}")))
}

/// The error of a failed consumer lookup.
fn lookup_error(
    describe: &str,
    e: &async_nats::jetstream::context::ConsumerInfoError,
) -> SourceError {
    match e.kind() {
        ConsumerInfoErrorKind::StreamNotFound => SourceError::Config(format!(
            "{describe}: the stream does not exist (the source creates no stream)"
        )),
        ConsumerInfoErrorKind::NoResponders => SourceError::Config(format!(
            "{describe}: JetStream does not answer (no responders): is JetStream enabled for \
             this account?"
        )),
        ConsumerInfoErrorKind::InvalidName => {
            SourceError::Config(format!("{describe}: invalid consumer name"))
        }
        ConsumerInfoErrorKind::JetStream(err) if matches!(err.code(), 401 | 403) => {
            SourceError::Config(format!("{describe}: {err}"))
        }
        _ => SourceError::Fatal(format!("{describe}: looking up the consumer: {e}")),
    }
}

/// The settle handle of one record.
struct NatsAck {
    id: u64,
    tx: mpsc::UnboundedSender<Cmd>,
}

impl Settle for NatsAck {
    fn settle(self: Box<Self>, how: Settlement) {
        // After `close`, the settling task is gone: the broker redelivers after ack_wait.
        let _ = self.tx.send(Cmd::Settle(self.id, how));
    }
}

/// Acknowledge settled records and keep unsettled ones alive, until every sender (the
/// source and every record's handle) is gone.
async fn settle_loop(client: Client, mut rx: mpsc::UnboundedReceiver<Cmd>, every: Duration) {
    let mut inflight: HashMap<u64, Subject> = HashMap::new();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            cmd = rx.recv() => match cmd {
                Some(Cmd::Track(id, reply)) => {
                    inflight.insert(id, reply);
                }
                Some(Cmd::Settle(id, how)) => {
                    if let Some(reply) = inflight.remove(&id) {
                        let body = match how {
                            Settlement::Ack => Bytes::from_static(b"+ACK"),
                            Settlement::Release => Bytes::from_static(b"-NAK"),
                        };
                        if let Err(e) = client.publish(reply, body).await {
                            tracing::warn!(
                                target: "ankusa_source", error = %e, ?how,
                                "settling a record failed: the broker redelivers it after ack_wait"
                            );
                        }
                    }
                }
                None => return,
            },
            _ = tick.tick() => {
                for reply in inflight.values() {
                    if let Err(e) = client.publish(reply.clone(), Bytes::from_static(b"+WPI")).await {
                        tracing::debug!(target: "ankusa_source", error = %e, "in-progress ack failed");
                    }
                }
            }
        }
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

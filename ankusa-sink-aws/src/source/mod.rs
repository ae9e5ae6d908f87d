//! `forward --from` an SQS queue: forwarders are competing readers of the queue
//! (`ReceiveMessage` with a long poll); each record is deleted (`DeleteMessage`) after its
//! final outcome, or made visible again at once (`ChangeMessageVisibility` to 0) when it was
//! not finished.

use crate::error::{self, AwsError, classify};
use ankusa_sink_core::{Class, async_trait};
use ankusa_source::{Ack, Lag, Permit, Record, Source, SourceError, SourceOptions, Window};
use aws_sdk_sqs::types::{Message, QueueAttributeName};
use aws_smithy_types::timeout::TimeoutConfig;
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout_at};

mod ack;
mod config;

use ack::{Op, Pending, Settler, SqsAck};
pub use config::SqsSourceConfig;

/// The first pause before receiving again after a failed `ReceiveMessage`.
const BACKOFF_START: Duration = Duration::from_millis(100);
/// The longest pause between failed `ReceiveMessage` calls.
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// The least time `close` gives the settling task to flush, whatever the grace.
const FLUSH_MIN: Duration = Duration::from_secs(2);

/// One `ReceiveMessage` under way, on a task of its own (so that a `next` cancelled while
/// it waits loses nothing), with the window places its messages will take.
struct Receiving {
    permits: Vec<Permit>,
    task: JoinHandle<Result<Vec<Message>, AwsError>>,
}

/// An SQS queue (standard or FIFO) read with long polls.
///
/// Each `ReceiveMessage` asks for as many messages as the [`Window`] has places free
/// (at most `max_messages`, and no more than the free bytes hold at the largest body seen),
/// and those places are taken before it is sent: what the source holds, handed out or
/// received and not yet handed out, never exceeds the window's records. A body's bytes are
/// charged when it is handed out; up to `max_messages - 1` received bodies (1 MiB each at
/// most) may wait for them.
///
/// An ack deletes the message; a release makes it visible again at once. Both are sent by
/// a task of the source, several at once as one batch call; `settle` never waits. A record
/// not settled within `visibility_timeout_seconds` is given out again by SQS (here or to
/// another forwarder). Transient trouble (throttling, the network, a 5xx) is retried with
/// backoff and logged at warn; `next` ends with [`SourceError::Config`] only for what
/// retrying cannot fix: the queue does not exist, access is denied, the credentials are
/// refused.
pub struct SqsSource {
    /// Deletes, visibility changes, the lag's `GetQueueAttributes`: bounded by `timeout_ms`.
    client: aws_sdk_sqs::Client,
    /// `ReceiveMessage`: bounded by `timeout_ms` plus the long poll.
    receiver: aws_sdk_sqs::Client,
    queue_url: String,
    queue_name: String,
    wait_seconds: i32,
    visibility_timeout_seconds: i32,
    max_messages: usize,
    window: Window,
    /// The largest body received so far (0: none yet).
    largest: usize,
    receiving: Option<Receiving>,
    /// Received, not yet handed out, each with its place in the window.
    buffered: VecDeque<(Message, Permit)>,
    settle: mpsc::UnboundedSender<Pending>,
    /// The settling task's deadline, set by `close`.
    closing: watch::Sender<Option<Instant>>,
    settler: JoinHandle<()>,
    backoff: Duration,
    retry_at: Option<Instant>,
    /// A receive failed since the last one that worked (said again at info when one works).
    failing: bool,
    describe: String,
    stopped: bool,
}

impl fmt::Debug for SqsSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqsSource")
            .field("describe", &self.describe)
            .field("max_messages", &self.max_messages)
            .field("unsettled", &self.window.unsettled())
            .field("buffered", &self.buffered.len())
            .finish_non_exhaustive()
    }
}

impl SqsSource {
    /// A source reading `config`'s queue into the window `options` ask for. Must run inside
    /// a tokio runtime. Nothing is asked of SQS yet: the first `next` receives.
    ///
    /// # Errors
    /// [`SourceError::Config`] when no region can be found. A queue that does not exist, or
    /// credentials SQS refuses, end the first `next` with [`SourceError::Config`].
    pub async fn open(
        config: &SqsSourceConfig,
        options: &SourceOptions,
    ) -> Result<Self, SourceError> {
        let sdk = config
            .sdk_config()
            .await
            .map_err(|e| SourceError::Config(format!("sqs source: {e}")))?;
        let client = aws_sdk_sqs::Client::new(&sdk);
        let t = config.timeout();
        let receiver = aws_sdk_sqs::Client::from_conf(
            aws_sdk_sqs::config::Builder::from(&sdk)
                .timeout_config(
                    TimeoutConfig::builder()
                        .connect_timeout(t)
                        .operation_timeout(t + config.wait())
                        .build(),
                )
                .build(),
        );
        if options.attempt_timeout > config.visibility_timeout() {
            tracing::warn!(
                target: "ankusa_source",
                queue = %config.queue_name(),
                "sqs source: visibility_timeout_seconds ({} s) is shorter than one attempt may \
                 take ({} ms): a record still being delivered may be read again",
                config.visibility_timeout().as_secs(),
                options.attempt_timeout.as_millis()
            );
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let closing = watch::Sender::new(None);
        let settler = Settler::new(
            client.clone(),
            config.queue_url().to_owned(),
            config.queue_name().to_owned(),
            rx,
            closing.subscribe(),
        );
        let host = ankusa_sink_kit::host_port(config.endpoint().unwrap_or(config.queue_url()))
            .unwrap_or_else(|| "the SDK's endpoint".to_owned());
        Ok(SqsSource {
            describe: format!("sqs queue {} on {host}", config.queue_name()),
            client,
            receiver,
            queue_url: config.queue_url().to_owned(),
            queue_name: config.queue_name().to_owned(),
            wait_seconds: i32::from(config.wait_seconds),
            visibility_timeout_seconds: i32::try_from(config.visibility_timeout_seconds)
                .expect("at most 43200"),
            max_messages: usize::from(config.max_messages),
            window: Window::for_options(options),
            largest: 0,
            receiving: None,
            buffered: VecDeque::new(),
            settle: tx,
            closing,
            settler: tokio::spawn(settler.run()),
            backoff: BACKOFF_START,
            retry_at: None,
            failing: false,
            stopped: false,
        })
    }

    /// How many messages the next receive asks for: `max_messages`, no more than the free
    /// bytes hold at the largest body seen (at least one).
    fn batch_size(&self) -> usize {
        match self.window.free_bytes().checked_div(self.largest) {
            Some(n) => self.max_messages.min(n.max(1)),
            None => self.max_messages,
        }
    }

    /// Start a receive of as many messages as places could be taken (the first waited for).
    async fn start_receive(&mut self) {
        let mut permits = vec![self.window.acquire().await];
        let want = self.batch_size();
        while permits.len() < want {
            match ready_now(self.window.acquire()) {
                Some(p) => permits.push(p),
                None => break,
            }
        }
        let request = self
            .receiver
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(i32::try_from(permits.len()).expect("at most 10"))
            .wait_time_seconds(self.wait_seconds)
            .visibility_timeout(self.visibility_timeout_seconds);
        let task = tokio::spawn(async move {
            request
                .send()
                .await
                .map(|out| out.messages.unwrap_or_default())
                .map_err(|e| error::sqs("ReceiveMessage", e))
        });
        self.receiving = Some(Receiving { permits, task });
    }

    /// A transient failure to receive: logged, the next attempt backed off.
    fn failed(&mut self, why: &dyn fmt::Display) {
        tracing::warn!(
            target: "ankusa_source",
            queue = %self.queue_name,
            retry_in_ms = u64::try_from(self.backoff.as_millis()).unwrap_or(u64::MAX),
            "sqs source: cannot receive, will retry: {why}"
        );
        self.failing = true;
        self.retry_at = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
    }

    /// The receive's error as a config error naming the queue: the operation, the AWS code
    /// and the HTTP status (never the server's message, nor anything of the credentials).
    fn config_error(&self, e: &AwsError) -> SourceError {
        let what = match e {
            AwsError::Refused {
                operation,
                modeled,
                code,
                status,
                ..
            } => {
                let code = modeled
                    .map(str::to_owned)
                    .or_else(|| code.as_deref().map(ankusa_sink_kit::printable));
                let hint = match code.as_deref() {
                    Some("QueueDoesNotExist" | "AWS.SimpleQueueService.NonExistentQueue") => {
                        ": the queue does not exist"
                    }
                    _ if classify(e) == Class::Config => {
                        ": access denied or credentials refused (check the credentials, region \
                         and the queue's policy)"
                    }
                    _ => "",
                };
                match (code, status) {
                    (Some(c), Some(s)) => format!("{operation} refused: {c} (HTTP {s}){hint}"),
                    (Some(c), None) => format!("{operation} refused: {c}{hint}"),
                    (None, Some(s)) => format!("{operation} refused: HTTP {s}{hint}"),
                    (None, None) => format!("{operation} refused{hint}"),
                }
            }
            other => other.to_string(),
        };
        SourceError::Config(format!(
            "sqs source: cannot read queue {} ({}): {what}",
            self.queue_name,
            ankusa_sink_kit::redact_url_keep_path(&self.queue_url)
        ))
    }

    /// The record of a message, holding its place; `None` (logged) for a message without
    /// a receipt handle, which cannot be settled.
    fn record(&self, m: Message, permit: Permit) -> Option<Record> {
        let id = m.message_id.unwrap_or_default();
        let position = format!("{}#{id}", self.queue_name);
        let Some(receipt) = m.receipt_handle else {
            tracing::warn!(
                target: "ankusa_source",
                %position,
                "sqs source: a message came without a receipt handle; skipped (SQS gives it \
                 out again once its visibility timeout ends)"
            );
            return None;
        };
        let settle = SqsAck {
            tx: self.settle.clone(),
            receipt,
            position: position.clone(),
        };
        let payload = m.body.unwrap_or_default().into_bytes();
        Some(Record::new(payload, position, Ack::new(settle, permit)))
    }

    /// Give `m` back to the queue at once (not handed out).
    fn give_back(&self, m: Message) {
        if let Some(receipt) = m.receipt_handle {
            let _ = self.settle.send(Pending {
                op: Op::Release,
                receipt,
                position: format!("{}#{}", self.queue_name, m.message_id.unwrap_or_default()),
            });
        }
    }
}

fn body_len(m: &Message) -> usize {
    m.body.as_ref().map_or(0, String::len)
}

/// Polls `f` once: its output if it is ready now.
fn ready_now<F: Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

#[async_trait]
impl Source for SqsSource {
    async fn next(&mut self) -> Option<Result<Record, SourceError>> {
        loop {
            if self.stopped {
                return None;
            }
            if let Some(len) = self.buffered.front().map(|(m, _)| body_len(m)) {
                // Wait for the bytes without taking them (a cancelled wait loses nothing);
                // only `next` charges bytes, so the charge then goes through at once.
                self.window.until_free(len).await;
                let (m, permit) = self.buffered.pop_front().expect("looked at above");
                let permit = self.window.charge(permit, len).await;
                match self.record(m, permit) {
                    Some(r) => return Some(Ok(r)),
                    None => continue,
                }
            }
            if let Some(r) = self.receiving.as_mut() {
                let res = (&mut r.task).await;
                let Receiving { permits, .. } = self.receiving.take().expect("under way");
                match res {
                    Ok(Ok(messages)) => {
                        if self.failing {
                            tracing::info!(
                                target: "ankusa_source",
                                queue = %self.queue_name,
                                "sqs source: receiving again"
                            );
                            self.failing = false;
                        }
                        self.backoff = BACKOFF_START;
                        let mut permits = permits.into_iter();
                        for m in messages {
                            self.largest = self.largest.max(body_len(&m));
                            match permits.next() {
                                Some(p) => self.buffered.push_back((m, p)),
                                // More than asked for: never, but not kept without a place.
                                None => self.give_back(m),
                            }
                        }
                    }
                    Ok(Err(e)) => match classify(&e) {
                        Class::Config | Class::Permanent => {
                            return Some(Err(self.config_error(&e)));
                        }
                        _ => self.failed(&e),
                    },
                    Err(e) => self.failed(&format_args!("the receive task ended: {e}")),
                }
                continue;
            }
            if let Some(at) = self.retry_at {
                tokio::time::sleep_until(at).await;
                self.retry_at = None;
            }
            self.start_receive().await;
        }
    }

    fn stop(&mut self) {
        self.stopped = true;
    }

    async fn close(mut self: Box<Self>, grace: Duration) {
        self.stopped = true;
        let deadline = Instant::now() + grace;
        // A receive under way: what it brings is given back at once.
        if let Some(r) = self.receiving.take() {
            let abort = r.task.abort_handle();
            match timeout_at(deadline, r.task).await {
                Ok(Ok(Ok(messages))) => {
                    for m in messages {
                        self.give_back(m);
                    }
                }
                Ok(_) => {}
                // Cut off: what it was receiving comes back after its visibility timeout.
                Err(_) => abort.abort(),
            }
        }
        // Received and never handed out: given back.
        while let Some((m, permit)) = self.buffered.pop_front() {
            self.give_back(m);
            drop(permit);
        }
        // Let the records handed out settle.
        while self.window.unsettled() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Then the settling task flushes what is pending and ends.
        let flush_by = deadline.max(Instant::now() + FLUSH_MIN);
        self.closing.send_replace(Some(flush_by));
        let SqsSource {
            settle, settler, ..
        } = *self;
        drop(settle);
        let abort = settler.abort_handle();
        if timeout_at(flush_by + Duration::from_millis(500), settler)
            .await
            .is_err()
        {
            abort.abort();
        }
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn window(&self) -> Option<Window> {
        Some(self.window.clone())
    }

    /// The queue's `ApproximateNumberOfMessages`: see `SqsLag`.
    fn lag(&self) -> Option<Arc<dyn Lag>> {
        Some(Arc::new(SqsLag {
            client: self.client.clone(),
            queue_url: self.queue_url.clone(),
        }))
    }
}

/// The queue's `ApproximateNumberOfMessages` (`GetQueueAttributes`): messages available
/// for retrieval, not counting those received and not yet deleted (in flight) or delayed.
/// `None` when SQS does not answer (within `timeout_ms`) or refuses.
struct SqsLag {
    client: aws_sdk_sqs::Client,
    queue_url: String,
}

#[async_trait]
impl Lag for SqsLag {
    async fn lag(&self) -> Option<u64> {
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(&self.queue_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .send()
            .await
            .ok()?;
        out.attributes()?
            .get(&QueueAttributeName::ApproximateNumberOfMessages)?
            .parse()
            .ok()
    }
}

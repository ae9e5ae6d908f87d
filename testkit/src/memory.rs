//! An in-memory reference destination and sink, with a probe and a full harness.
//!
//! [`MemoryBroker`] behaves like a small broker: named queues (optionally deduplicating by
//! a message's dedupe id, like a FIFO queue), an optional access token, a message-size
//! limit, and switches for an outage, a throttle and a stall (writes taken, never
//! acknowledged). It counts requests, so a batch is visible as one request.
//! [`MemorySink`] publishes Message v1 to it, waits for the broker's ack with a timeout,
//! really batches through core's [`Batcher`] when it says it does, and classifies every
//! refusal the way a real adapter must. The testkit's own tests run the whole suite
//! against it, and against deliberately broken variants.

use crate::Case;
use crate::harness::{Expect, Fault, Harness, MixedBatch, Probe, Received, Setup, WarmFault};
use ankusa_message::{DEFAULT_INLINE_MAX_BYTES, encode};
use ankusa_sink_core::{
    BoxError, Capabilities, Check, Class, Ctx, Description, Envelope, Failure, Payload, Sink,
    Subject, async_trait,
};
use ankusa_sink_kit::{BatchConfig, BatchSend, Batcher};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// Why the memory broker refused a publish.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// The queue does not exist.
    #[error("queue {0:?} does not exist")]
    NoQueue(String),
    /// The token was refused (the token itself is never printed).
    #[error("access refused: bad token")]
    AccessRefused,
    /// The broker is down.
    #[error("broker unavailable")]
    Unavailable,
    /// The broker is throttling.
    #[error("broker throttling publishes")]
    Throttled,
    /// The message is larger than the broker takes.
    #[error("message of {size} bytes exceeds the broker's limit of {max}")]
    TooLarge {
        /// Message bytes.
        size: usize,
        /// Limit.
        max: usize,
    },
    /// The broker did not acknowledge the publish in time (the sink's ack timeout).
    #[error("no acknowledgement from the broker within {ms} ms")]
    AckTimeout {
        /// The ack timeout.
        ms: u128,
    },
}

/// One message to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    /// The message bytes (Message v1 for [`MemorySink`]).
    pub bytes: Vec<u8>,
    /// The broker's dedupe id: a deduplicating queue acks and drops a message whose id it
    /// has already stored.
    pub dedupe_id: Option<String>,
}

struct Stored {
    request: u64,
    bytes: Vec<u8>,
    /// Stored while the broker was volatile: lost at the next restart.
    volatile: bool,
}

#[derive(Default)]
struct Queue {
    messages: Vec<Stored>,
    dedupe: bool,
    seen: HashSet<String>,
}

#[derive(Default)]
struct BrokerState {
    queues: HashMap<String, Queue>,
    token: Option<String>,
    down: bool,
    throttled: bool,
    stalled: bool,
    max_message_bytes: Option<usize>,
    requests: u64,
    volatile: bool,
}

/// A shared in-memory broker. Clones share state.
#[derive(Clone, Default)]
pub struct MemoryBroker {
    state: Arc<Mutex<BrokerState>>,
}

impl fmt::Debug for MemoryBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.lock();
        f.debug_struct("MemoryBroker")
            .field("queues", &s.queues.len())
            .field("down", &s.down)
            .field("throttled", &s.throttled)
            .field("stalled", &s.stalled)
            .finish_non_exhaustive()
    }
}

impl MemoryBroker {
    /// An empty broker with no token, no limit, up and not throttling.
    pub fn new() -> Self {
        Self::default()
    }
    fn lock(&self) -> MutexGuard<'_, BrokerState> {
        // A panic while holding the lock cannot leave the maps inconsistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Create a queue (idempotent).
    pub fn create_queue(&self, name: &str) {
        self.lock().queues.entry(name.to_owned()).or_default();
    }
    /// Create a queue that acks and drops a message whose dedupe id it already stored
    /// (idempotent).
    pub fn create_dedupe_queue(&self, name: &str) {
        self.lock()
            .queues
            .entry(name.to_owned())
            .or_default()
            .dedupe = true;
    }
    /// Delete a queue and what it holds; `false` if there was none.
    pub fn delete_queue(&self, name: &str) -> bool {
        self.lock().queues.remove(name).is_some()
    }
    /// The queues that exist.
    pub fn queue_names(&self) -> Vec<String> {
        self.lock().queues.keys().cloned().collect()
    }
    /// Require this token on every publish.
    pub fn require_token(&self, token: impl Into<String>) {
        self.lock().token = Some(token.into());
    }
    /// Take the broker down or bring it up.
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }
    /// Whether the broker is down.
    pub fn is_down(&self) -> bool {
        self.lock().down
    }
    /// Throttle publishes or stop throttling.
    pub fn set_throttled(&self, throttled: bool) {
        self.lock().throttled = throttled;
    }
    /// Take publishes and never store or acknowledge them (or behave again).
    pub fn set_stalled(&self, stalled: bool) {
        self.lock().stalled = stalled;
    }
    /// Acknowledge publishes from memory and write them out later (a database with
    /// synchronous commit off, a broker without fsync): what is stored while volatile is
    /// read back as usual, and lost at the next [`restart`](Self::restart).
    pub fn set_volatile(&self, volatile: bool) {
        self.lock().volatile = volatile;
    }
    /// Restart the broker, as a crash and a start would: every queue keeps what it
    /// stored, except what was stored while [volatile](Self::set_volatile).
    pub fn restart(&self) {
        let mut s = self.lock();
        for q in s.queues.values_mut() {
            q.messages.retain(|m| !m.volatile);
        }
    }
    /// Refuse messages larger than this.
    pub fn set_max_message_bytes(&self, max: usize) {
        self.lock().max_message_bytes = Some(max);
    }
    /// Every message stored in `queue`, in order.
    pub fn messages(&self, queue: &str) -> Vec<Vec<u8>> {
        self.stored(queue).into_iter().map(|(_, m)| m).collect()
    }
    /// Every message stored in `queue`, in order, with the number of the request that
    /// carried it.
    pub fn stored(&self, queue: &str) -> Vec<(u64, Vec<u8>)> {
        self.lock()
            .queues
            .get(queue)
            .map(|q| {
                q.messages
                    .iter()
                    .map(|m| (m.request, m.bytes.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }
    /// Requests taken so far (a batch is one request).
    pub fn requests(&self) -> u64 {
        self.lock().requests
    }
    fn admit(s: &BrokerState, queue: &str, token: Option<&str>) -> Result<(), MemoryError> {
        if s.down {
            return Err(MemoryError::Unavailable);
        }
        if s.token.is_some() && s.token.as_deref() != token {
            return Err(MemoryError::AccessRefused);
        }
        if !s.queues.contains_key(queue) {
            return Err(MemoryError::NoQueue(queue.to_owned()));
        }
        Ok(())
    }
    /// Publish one message; see [`publish_batch`](Self::publish_batch).
    pub async fn publish(
        &self,
        queue: &str,
        token: Option<&str>,
        msg: Publish,
    ) -> Result<(), MemoryError> {
        let mut results = self.publish_batch(queue, token, vec![msg]).await?;
        results.pop().expect("one result per message")
    }
    /// Publish several messages in one request.
    ///
    /// # Behavior
    /// - `Err` refuses the whole request (down, token, no queue, throttled); otherwise one
    ///   result per message, in order (a message over the size limit is refused alone).
    /// - A stalled broker never answers: the future stays pending and nothing is stored.
    pub async fn publish_batch(
        &self,
        queue: &str,
        token: Option<&str>,
        msgs: Vec<Publish>,
    ) -> Result<Vec<Result<(), MemoryError>>, MemoryError> {
        {
            let mut s = self.lock();
            if !s.stalled {
                return Self::store(&mut s, queue, token, msgs);
            }
        }
        std::future::pending().await
    }
    fn store(
        s: &mut BrokerState,
        queue: &str,
        token: Option<&str>,
        msgs: Vec<Publish>,
    ) -> Result<Vec<Result<(), MemoryError>>, MemoryError> {
        Self::admit(s, queue, token)?;
        if s.throttled {
            return Err(MemoryError::Throttled);
        }
        s.requests += 1;
        let request = s.requests;
        let max = s.max_message_bytes;
        let volatile = s.volatile;
        let q = s.queues.get_mut(queue).expect("admitted");
        let results = msgs
            .into_iter()
            .map(|m| {
                if let Some(max) = max.filter(|max| m.bytes.len() > *max) {
                    return Err(MemoryError::TooLarge {
                        size: m.bytes.len(),
                        max,
                    });
                }
                let duplicate = q.dedupe
                    && m.dedupe_id
                        .as_ref()
                        .is_some_and(|id| !q.seen.insert(id.clone()));
                if !duplicate {
                    q.messages.push(Stored {
                        request,
                        bytes: m.bytes,
                        volatile,
                    });
                }
                Ok(())
            })
            .collect();
        Ok(results)
    }
    /// Check the queue and token without publishing.
    pub fn check(&self, queue: &str, token: Option<&str>) -> Result<(), MemoryError> {
        let s = self.lock();
        Self::admit(&s, queue, token)
    }
}

/// The memory adapter's classification table.
///
/// | Error | Class |
/// | --- | --- |
/// | `NoQueue`, `AccessRefused` | config |
/// | `TooLarge` | permanent |
/// | `Throttled` | throttled (dispatch draws the pause) |
/// | `Unavailable`, `AckTimeout` | transient |
///
/// A pure function of the error, as every adapter's classifier (CONTRIBUTING.md).
pub fn classify(err: &MemoryError) -> Class {
    match err {
        MemoryError::NoQueue(_) | MemoryError::AccessRefused => Class::Config,
        MemoryError::TooLarge { .. } => Class::Permanent,
        MemoryError::Throttled => Class::Throttled,
        MemoryError::Unavailable | MemoryError::AckTimeout { .. } => Class::Transient,
    }
}

/// Whether the message may have reached the broker: only an ack timeout leaves it open
/// (the broker took the publish); every other refusal came before storing.
pub fn landed(err: &MemoryError) -> Option<bool> {
    Some(matches!(err, MemoryError::AckTimeout { .. }))
}

impl From<MemoryError> for Failure {
    fn from(e: MemoryError) -> Self {
        let landed = landed(&e);
        Failure::new(classify(&e), e).with_may_have_landed(landed)
    }
}

/// The broker's dedupe id for a delivery: the hook id, and for a replay the hook id with
/// the replay id, so a replay of a stored hook is a new message while a retry of the same
/// delivery is deduplicated.
pub fn dedupe_id(env: &Envelope, ctx: &Ctx) -> String {
    match &ctx.replay_id {
        Some(replay) => format!("{}:replay:{replay}", env.id()),
        None => env.id().to_owned(),
    }
}

/// Where a [`MemorySink`] publishes: what both its direct and its batched path need.
#[derive(Clone)]
struct Target {
    broker: MemoryBroker,
    queue: String,
    token: Option<String>,
    ack_timeout: Duration,
}

impl Target {
    async fn publish_batch(&self, msgs: Vec<Publish>) -> Vec<Result<(), MemoryError>> {
        let n = msgs.len();
        let sent = self
            .broker
            .publish_batch(&self.queue, self.token.as_deref(), msgs);
        let err = match tokio::time::timeout(self.ack_timeout, sent).await {
            Ok(Ok(results)) => return results,
            Ok(Err(e)) => e,
            Err(_) => MemoryError::AckTimeout {
                ms: self.ack_timeout.as_millis(),
            },
        };
        vec![Err(err); n]
    }
}

/// One batch of a [`MemorySink`]: one broker request.
struct BatchTarget(Target);

#[async_trait]
impl BatchSend for BatchTarget {
    type Entry = Publish;

    async fn send_batch(&self, entries: Vec<Publish>) -> Vec<Result<(), Failure>> {
        self.0
            .publish_batch(entries)
            .await
            .into_iter()
            .map(|r| r.map_err(Failure::from))
            .collect()
    }
}

/// Publishes Message v1 to a [`MemoryBroker`] queue.
#[derive(Clone)]
pub struct MemorySink {
    target: Target,
    inline_max_bytes: Option<NonZeroUsize>,
    durable: bool,
    batched: bool,
    dedupe_forever: bool,
    /// Built on the first batched delivery from the final configuration.
    batcher: Arc<OnceLock<Batcher<BatchTarget>>>,
}

impl fmt::Debug for MemorySink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemorySink")
            .field("queue", &self.target.queue)
            .field("token", &self.target.token.as_ref().map(|_| "REDACTED"))
            .field("inline_max_bytes", &self.inline_max_bytes)
            .field("durable", &self.durable)
            .field("batched", &self.batched)
            .finish_non_exhaustive()
    }
}

impl MemorySink {
    /// A sink for `queue` on `broker`: inline threshold 64 KiB, ack timeout 5 s, not
    /// durable (memory dies with the process), not batched.
    pub fn new(broker: MemoryBroker, queue: impl Into<String>) -> Self {
        MemorySink {
            target: Target {
                broker,
                queue: queue.into(),
                token: None,
                ack_timeout: Duration::from_secs(5),
            },
            inline_max_bytes: Some(DEFAULT_INLINE_MAX_BYTES),
            durable: false,
            batched: false,
            dedupe_forever: false,
            batcher: Arc::default(),
        }
    }
    /// A builder step: the batcher is made again from the new configuration.
    fn changed(mut self) -> Self {
        self.batcher = Arc::default();
        self
    }
    /// Publish with this token.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.target.token = Some(token.into());
        self.changed()
    }
    /// Wait this long for the broker's acknowledgement (default 5 s); then the delivery is
    /// a transient [`MemoryError::AckTimeout`].
    pub fn with_ack_timeout(mut self, timeout: Duration) -> Self {
        self.target.ack_timeout = timeout;
        self.changed()
    }
    /// Set the inline threshold (`None`: always inline).
    pub fn with_inline_max_bytes(mut self, max: Option<NonZeroUsize>) -> Self {
        self.inline_max_bytes = max;
        self
    }
    /// Declare `Ok` durable. A test double's claim: the broker stands in for a durable one.
    pub fn with_durable(mut self, durable: bool) -> Self {
        self.durable = durable;
        self
    }
    /// Declare that the queue keeps one copy per [`dedupe_id`] forever
    /// ([`Capabilities::dedupe_forever`](ankusa_sink_core::Capabilities::dedupe_forever)):
    /// true of a queue made with [`MemoryBroker::create_dedupe_queue`].
    pub fn with_dedupe_forever(mut self, dedupe: bool) -> Self {
        self.dedupe_forever = dedupe;
        self
    }
    /// Batch deliveries whose `ctx.batch` is set: up to 10 per broker request, each
    /// waiting at most 10 ms for companions ([`Batcher`]), each answered with its own
    /// result.
    pub fn with_batched(mut self, batched: bool) -> Self {
        self.batched = batched;
        self.changed()
    }
    /// The broker.
    pub fn broker(&self) -> &MemoryBroker {
        &self.target.broker
    }
    /// The queue.
    pub fn queue(&self) -> &str {
        &self.target.queue
    }
    /// The token this sink publishes with (for tests that publish on its behalf).
    pub fn token(&self) -> Option<&str> {
        self.target.token.as_deref()
    }
    /// A probe reading this sink's queue.
    pub fn probe(&self) -> MemoryProbe {
        MemoryProbe {
            broker: self.target.broker.clone(),
            queue: self.target.queue.clone(),
        }
    }
    fn batcher(&self) -> &Batcher<BatchTarget> {
        self.batcher.get_or_init(|| {
            let limits = BatchConfig::new(
                NonZeroUsize::new(10).expect("non-zero"),
                NonZeroUsize::new(1 << 20).expect("non-zero"),
            );
            Batcher::new(BatchTarget(self.target.clone()), limits)
        })
    }
}

#[async_trait]
impl Sink for MemorySink {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let bytes = encode(env, ctx, self.inline_max_bytes)?;
        let msg = Publish {
            dedupe_id: Some(dedupe_id(env, ctx)),
            bytes,
        };
        if self.batched && ctx.batch {
            let size = msg.bytes.len();
            return self.batcher().submit(env.tenant_id(), size, msg).await;
        }
        let mut results = self.target.publish_batch(vec![msg]).await;
        results
            .pop()
            .expect("one result per message")
            .map_err(Failure::from)
    }
    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new(self.durable, self.inline_max_bytes);
        if self.dedupe_forever {
            caps = caps.with_dedupe_forever();
        }
        if self.batched {
            caps.with_batch(None)
        } else {
            caps
        }
    }
    fn describe(&self, _subject: &Subject) -> Option<Description> {
        let mut d = Description::new("memory", Payload::Message);
        d.address = Some(self.target.queue.clone());
        Some(d)
    }
    async fn check(&self) -> Result<Check, Failure> {
        self.target
            .broker
            .check(&self.target.queue, self.target.token.as_deref())
            .map(|()| Check::Passed)
            .map_err(Failure::from)
    }
}

/// Reads a [`MemoryBroker`] queue back, decoding Message v1, with each message's request
/// number as [`Received::request_id`].
#[derive(Debug, Clone)]
pub struct MemoryProbe {
    broker: MemoryBroker,
    queue: String,
}

#[async_trait]
impl Probe for MemoryProbe {
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        self.broker
            .stored(&self.queue)
            .iter()
            .map(|(request, m)| {
                let mut r = Received::from_message_bytes(m)?;
                r.request_id = Some(request.to_string());
                Ok(r)
            })
            .collect()
    }
}

/// The harness for [`MemorySink`]: every fault provokable on a cold and on a warm sink,
/// stoppable (`recovery`) and restartable keeping its data (`durability`); every queue it
/// makes is deleted by its setup's teardown.
#[derive(Debug, Clone)]
pub struct MemoryHarness {
    broker: MemoryBroker,
    token: String,
    /// The planted wrong token of the refused-credential fault.
    wrong_token: String,
    batched: bool,
}

impl Default for MemoryHarness {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryHarness {
    /// A broker requiring a random token; a fresh deduplicating queue per destination.
    pub fn new() -> Self {
        let broker = MemoryBroker::new();
        let token = format!("planted-token-{}", ulid::Ulid::new());
        broker.require_token(token.clone());
        MemoryHarness {
            broker,
            token,
            wrong_token: format!("planted-wrong-token-{}", ulid::Ulid::new()),
            batched: false,
        }
    }
    /// Build batching sinks (and offer a mixed batch).
    pub fn batched(mut self) -> Self {
        self.batched = true;
        self
    }
    /// The shared broker.
    pub fn broker(&self) -> &MemoryBroker {
        &self.broker
    }
    fn queue_name() -> String {
        static N: AtomicU64 = AtomicU64::new(0);
        format!(
            "q-{}-{}",
            ulid::Ulid::new(),
            N.fetch_add(1, Ordering::Relaxed)
        )
    }
    /// A durable sink on a fresh deduplicating queue of `broker` with the right token,
    /// declaring the queue's dedupe (forever).
    pub fn sink_on(&self, broker: &MemoryBroker) -> MemorySink {
        let q = Self::queue_name();
        broker.create_dedupe_queue(&q);
        MemorySink::new(broker.clone(), q)
            .with_token(self.token.clone())
            .with_durable(true)
            .with_dedupe_forever(true)
            .with_batched(self.batched)
    }
    /// [`sink_on`](Self::sink_on) with its probe, and a teardown deleting the queue.
    pub fn setup_on(&self, broker: &MemoryBroker) -> Setup<MemorySink> {
        Self::setup_of(self.sink_on(broker))
    }
    fn setup_of(sink: MemorySink) -> Setup<MemorySink> {
        let probe = sink.probe();
        let broker = sink.broker().clone();
        let queue = sink.queue().to_owned();
        Setup::new(sink)
            .with_probe(probe)
            .with_teardown(move || async move {
                broker.delete_queue(&queue);
                Ok(())
            })
    }
    /// A broker of its own with the harness's token.
    fn broker_with_token(&self) -> MemoryBroker {
        let b = MemoryBroker::new();
        b.require_token(self.token.clone());
        b
    }
}

#[async_trait]
impl Harness for MemoryHarness {
    type Sink = MemorySink;

    fn reports_landing(&self) -> bool {
        true
    }

    async fn destination(&self, _case: Case) -> Result<Setup<MemorySink>, BoxError> {
        Ok(self.setup_on(&self.broker))
    }

    async fn fault(&self, fault: Fault) -> Result<Option<Setup<MemorySink>>, BoxError> {
        let setup = match fault {
            Fault::MissingDestination => {
                let sink = MemorySink::new(self.broker.clone(), Self::queue_name())
                    .with_token(self.token.clone());
                Setup::new(sink)
            }
            Fault::RefusedCredential => Self::setup_of(
                self.sink_on(&self.broker)
                    .with_token(self.wrong_token.clone()),
            ),
            Fault::Unreachable => {
                let down = self.broker_with_token();
                down.set_down(true);
                Setup::new(self.sink_on(&down))
            }
            Fault::Throttled => {
                let b = self.broker_with_token();
                b.set_throttled(true);
                Setup::new(self.sink_on(&b))
            }
            Fault::Oversized => {
                let b = self.broker_with_token();
                b.set_max_message_bytes(1024);
                // Inline (under 64 KiB), yet its Message v1 is over 1024 bytes.
                self.setup_on(&b).with_body_size(900)
            }
            Fault::Unacknowledged => {
                let b = self.broker_with_token();
                b.set_stalled(true);
                let sink = self
                    .sink_on(&b)
                    .with_ack_timeout(Duration::from_millis(300));
                Self::setup_of(sink)
            }
        };
        Ok(Some(setup))
    }

    /// Entries over the broker's 1024-byte limit are refused one by one inside requests
    /// that carry accepted ones.
    async fn mixed_batch(&self) -> Result<Option<MixedBatch<MemorySink>>, BoxError> {
        if !self.batched {
            return Ok(None);
        }
        let b = self.broker_with_token();
        b.set_max_message_bytes(1024);
        let envelopes = (0..24)
            .map(|i| {
                let big = i % 4 == 3;
                let body = if big {
                    vec![b'x'; 900]
                } else {
                    format!("{{\"i\":{i}}}").into_bytes()
                };
                let env = Envelope::builder(format!("mixed-{}-{i}", ulid::Ulid::new()), "tk", body)
                    .tenant_id("tk_tenant")
                    .build()
                    .expect("a valid envelope");
                (env, if big { Expect::Permanent } else { Expect::Ok })
            })
            .collect();
        Ok(Some(MixedBatch {
            setup: self.setup_on(&b),
            envelopes,
        }))
    }

    /// Each on a broker of its own, after the warm-up: the queue deleted, the token
    /// rotated, the broker down, throttling, or stalled; the oversized one refuses 900-byte
    /// bodies (over 1024 bytes as Message v1) from the start and takes the small ones.
    async fn warm_fault(&self, fault: Fault) -> Result<Option<WarmFault<MemorySink>>, BoxError> {
        let b = self.broker_with_token();
        if fault == Fault::Oversized {
            b.set_max_message_bytes(1024);
            return Ok(Some(WarmFault::standing(
                self.setup_on(&b).with_body_size(900),
            )));
        }
        let sink = self.sink_on(&b);
        let sink = if fault == Fault::Unacknowledged {
            sink.with_ack_timeout(Duration::from_millis(300))
        } else {
            sink
        };
        let queue = sink.queue().to_owned();
        let setup = Self::setup_of(sink);
        Ok(Some(WarmFault::new(setup, move || async move {
            match fault {
                Fault::MissingDestination => {
                    b.delete_queue(&queue);
                }
                Fault::RefusedCredential => {
                    b.require_token(format!("rotated-{}", ulid::Ulid::new()))
                }
                Fault::Unreachable => b.set_down(true),
                Fault::Throttled => b.set_throttled(true),
                Fault::Unacknowledged => b.set_stalled(true),
                Fault::Oversized => unreachable!("a standing fault"),
            }
            Ok(())
        })))
    }

    /// `check()` asks the broker for the queue with the sink's token.
    fn check_detects(&self, fault: Fault) -> bool {
        matches!(fault, Fault::MissingDestination | Fault::RefusedCredential)
    }

    fn secrets(&self) -> Vec<String> {
        vec![self.token.clone(), self.wrong_token.clone()]
    }

    fn can_restart(&self) -> bool {
        true
    }

    async fn stop(&self) -> Result<(), BoxError> {
        self.broker.set_down(true);
        Ok(())
    }

    async fn start(&self) -> Result<(), BoxError> {
        self.broker.set_down(false);
        Ok(())
    }

    fn can_restart_destination(&self) -> bool {
        true
    }

    /// [`MemoryBroker::restart`]: every queue keeps what it stored.
    async fn restart_destination(&self) -> Result<(), BoxError> {
        self.broker.restart();
        Ok(())
    }
}

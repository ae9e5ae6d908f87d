//! An in-memory reference destination and sink, with a probe and a full harness.
//!
//! [`MemoryBroker`] behaves like a small broker: named queues, an optional access token, a
//! message-size limit, and switches for an outage and a throttle. [`MemorySink`] publishes
//! Message v1 to it and classifies every refusal the way a real adapter must. The testkit's
//! own tests run the whole suite against it, and against deliberately broken variants.

use crate::harness::{Fault, Harness, Probe, Received, Setup};
use ankusa_sink_core::message::encode;
use ankusa_sink_core::{
    BoxError, Check, Ctx, DEFAULT_INLINE_MAX_BYTES, Description, Envelope, Failure, Payload, Sink,
    Subject, async_trait,
};
use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

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
}

#[derive(Default)]
struct BrokerState {
    queues: HashMap<String, Vec<Vec<u8>>>,
    token: Option<String>,
    down: bool,
    throttled: bool,
    max_message_bytes: Option<usize>,
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
    /// Require this token on every publish.
    pub fn require_token(&self, token: impl Into<String>) {
        self.lock().token = Some(token.into());
    }
    /// Take the broker down or bring it up.
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }
    /// Throttle publishes or stop throttling.
    pub fn set_throttled(&self, throttled: bool) {
        self.lock().throttled = throttled;
    }
    /// Refuse messages larger than this.
    pub fn set_max_message_bytes(&self, max: usize) {
        self.lock().max_message_bytes = Some(max);
    }
    /// Every message published to `queue`, in order.
    pub fn messages(&self, queue: &str) -> Vec<Vec<u8>> {
        self.lock().queues.get(queue).cloned().unwrap_or_default()
    }
    fn admit(&self, s: &BrokerState, queue: &str, token: Option<&str>) -> Result<(), MemoryError> {
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
    /// Publish one message.
    pub fn publish(
        &self,
        queue: &str,
        token: Option<&str>,
        msg: Vec<u8>,
    ) -> Result<(), MemoryError> {
        let mut s = self.lock();
        self.admit(&s, queue, token)?;
        if s.throttled {
            return Err(MemoryError::Throttled);
        }
        if let Some(max) = s.max_message_bytes
            && msg.len() > max
        {
            return Err(MemoryError::TooLarge {
                size: msg.len(),
                max,
            });
        }
        s.queues.get_mut(queue).expect("admitted").push(msg);
        Ok(())
    }
    /// Check the queue and token without publishing.
    pub fn check(&self, queue: &str, token: Option<&str>) -> Result<(), MemoryError> {
        let s = self.lock();
        self.admit(&s, queue, token)
    }
}

/// The memory adapter's classification table.
///
/// | Error | Class |
/// | --- | --- |
/// | `NoQueue`, `AccessRefused` | config |
/// | `TooLarge` | permanent |
/// | `Throttled` | retry-after `throttle_after_ms(attempt)` |
/// | `Unavailable` | transient |
pub fn classify(err: MemoryError, attempt: u32) -> Failure {
    match err {
        MemoryError::NoQueue(_) | MemoryError::AccessRefused => Failure::config(err),
        MemoryError::TooLarge { .. } => Failure::permanent(err),
        MemoryError::Throttled => Failure::throttled(attempt, err),
        MemoryError::Unavailable => Failure::transient(err),
    }
}

/// Publishes Message v1 to a [`MemoryBroker`] queue.
#[derive(Clone)]
pub struct MemorySink {
    broker: MemoryBroker,
    queue: String,
    token: Option<String>,
    inline_max_bytes: Option<NonZeroUsize>,
    durable: bool,
    batched: bool,
}

impl fmt::Debug for MemorySink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemorySink")
            .field("queue", &self.queue)
            .field("token", &self.token.as_ref().map(|_| "REDACTED"))
            .field("inline_max_bytes", &self.inline_max_bytes)
            .field("durable", &self.durable)
            .finish_non_exhaustive()
    }
}

impl MemorySink {
    /// A sink for `queue` on `broker`: inline threshold 64 KiB, not durable (memory dies
    /// with the process), not batched.
    pub fn new(broker: MemoryBroker, queue: impl Into<String>) -> Self {
        MemorySink {
            broker,
            queue: queue.into(),
            token: None,
            inline_max_bytes: Some(DEFAULT_INLINE_MAX_BYTES),
            durable: false,
            batched: false,
        }
    }
    /// Publish with this token.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
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
    /// Declare batching. The memory broker takes each entry of a batch on its own, so a
    /// batched delivery is published as one entry and answered with its own result.
    pub fn with_batched(mut self, batched: bool) -> Self {
        self.batched = batched;
        self
    }
    /// The broker.
    pub fn broker(&self) -> &MemoryBroker {
        &self.broker
    }
    /// The queue.
    pub fn queue(&self) -> &str {
        &self.queue
    }
    /// A probe reading this sink's queue.
    pub fn probe(&self) -> MemoryProbe {
        MemoryProbe {
            broker: self.broker.clone(),
            queue: self.queue.clone(),
        }
    }
}

#[async_trait]
impl Sink for MemorySink {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let msg = encode(env, ctx, self.inline_max_bytes)?;
        self.broker
            .publish(&self.queue, self.token.as_deref(), msg)
            .map_err(|e| classify(e, ctx.attempt()))
    }
    fn durable(&self) -> bool {
        self.durable
    }
    fn inline_max_bytes(&self) -> Option<NonZeroUsize> {
        self.inline_max_bytes
    }
    fn batched(&self) -> bool {
        self.batched
    }
    fn describe(&self, _subject: &Subject) -> Option<Description> {
        let mut d = Description::new("memory", Payload::Message);
        d.address = Some(self.queue.clone());
        Some(d)
    }
    async fn check(&self) -> Result<Check, Failure> {
        self.broker
            .check(&self.queue, self.token.as_deref())
            .map(|()| Check::Passed)
            .map_err(|e| classify(e, 1))
    }
}

/// Reads a [`MemoryBroker`] queue back, decoding Message v1.
#[derive(Debug, Clone)]
pub struct MemoryProbe {
    broker: MemoryBroker,
    queue: String,
}

#[async_trait]
impl Probe for MemoryProbe {
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        self.broker
            .messages(&self.queue)
            .iter()
            .map(|m| Received::from_message_bytes(m))
            .collect()
    }
}

/// The harness for [`MemorySink`]: every fault provokable, restartable.
#[derive(Debug, Clone)]
pub struct MemoryHarness {
    broker: MemoryBroker,
    token: String,
    batched: bool,
}

impl Default for MemoryHarness {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryHarness {
    /// A broker requiring a random token, unique queues per destination.
    pub fn new() -> Self {
        let broker = MemoryBroker::new();
        let token = format!("planted-token-{}", ulid::Ulid::new());
        broker.require_token(token.clone());
        MemoryHarness {
            broker,
            token,
            batched: false,
        }
    }
    /// Build batching sinks.
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
    /// A durable sink on a fresh queue of `broker` with the right token.
    pub fn sink_on(&self, broker: &MemoryBroker) -> MemorySink {
        let q = Self::queue_name();
        broker.create_queue(&q);
        MemorySink::new(broker.clone(), q)
            .with_token(self.token.clone())
            .with_durable(true)
            .with_batched(self.batched)
    }
}

#[async_trait]
impl Harness for MemoryHarness {
    type Sink = MemorySink;

    async fn destination(&self) -> Result<Setup<MemorySink>, BoxError> {
        let sink = self.sink_on(&self.broker);
        let probe = sink.probe();
        Ok(Setup::new(sink).with_probe(probe))
    }

    async fn fault(&self, fault: Fault) -> Result<Option<Setup<MemorySink>>, BoxError> {
        let setup = match fault {
            Fault::MissingDestination => {
                let sink = MemorySink::new(self.broker.clone(), Self::queue_name())
                    .with_token(self.token.clone());
                Setup::new(sink)
            }
            Fault::RefusedCredential => {
                let sink = self.sink_on(&self.broker).with_token("planted-wrong-token");
                Setup::new(sink)
            }
            Fault::Unreachable => {
                let down = MemoryBroker::new();
                down.require_token(self.token.clone());
                down.set_down(true);
                Setup::new(self.sink_on(&down))
            }
            Fault::Throttled => {
                let b = MemoryBroker::new();
                b.require_token(self.token.clone());
                b.set_throttled(true);
                Setup::new(self.sink_on(&b))
            }
            Fault::Oversized => {
                let b = MemoryBroker::new();
                b.require_token(self.token.clone());
                b.set_max_message_bytes(1024);
                let sink = self.sink_on(&b);
                let probe = sink.probe();
                Setup::new(sink).with_probe(probe).with_body_size(900)
            }
        };
        Ok(Some(setup))
    }

    fn secrets(&self) -> Vec<String> {
        vec![self.token.clone(), "planted-wrong-token".into()]
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
}

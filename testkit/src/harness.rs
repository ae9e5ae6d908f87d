//! What a sink author writes: a [`Harness`] that builds sinks for fresh destinations.

use ankusa_sink_core::{BoxError, Bytes, Envelope, Sink, async_trait};
use std::fmt;
use std::time::Duration;

/// One hook as read back from the destination by a [`Probe`].
///
/// Fill what the transport carries; leave the rest `None` (the suite compares only what is
/// present, but `id` must always be there).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Received {
    /// The hook id.
    pub id: String,
    /// The source id.
    pub source_id: Option<String>,
    /// The tenant, `Some(None)` when the destination says "no tenant".
    pub tenant_id: Option<Option<String>>,
    /// The idempotency key.
    pub idempotency_key: Option<String>,
    /// Unix ms receive time.
    pub received_at: Option<i64>,
    /// The replay id, `Some(None)` when the destination says "not a replay".
    pub replay_id: Option<Option<String>>,
    /// The inline body.
    pub body: Option<Bytes>,
    /// The claim URN, when the body travelled by reference.
    pub claim: Option<String>,
}

impl Received {
    /// Everything a Message v1 carries.
    pub fn from_message(m: ankusa_sink_core::message::Message) -> Self {
        use ankusa_sink_core::message::MessageBody;
        let (body, claim) = match m.body {
            MessageBody::Inline(b) => (Some(b), None),
            MessageBody::Claim(r) => (None, Some(r.to_string())),
        };
        Received {
            id: m.id,
            source_id: Some(m.source_id),
            tenant_id: Some(m.tenant_id),
            idempotency_key: Some(m.idempotency_key),
            received_at: Some(m.received_at),
            replay_id: Some(m.replay_id),
            body,
            claim,
        }
    }

    /// Decode Message v1 bytes (verifying size and digest) into what they carry.
    pub fn from_message_bytes(bytes: &[u8]) -> Result<Self, BoxError> {
        Ok(Self::from_message(ankusa_sink_core::message::decode(
            bytes,
        )?))
    }
}

/// Reads back what reached a destination.
#[async_trait]
pub trait Probe: Send + Sync {
    /// Everything that reached this destination since it was created, in any order,
    /// duplicates included. Called repeatedly while the suite waits; it should return what
    /// has arrived so far without blocking for long (a second or two at most).
    async fn received(&self) -> Result<Vec<Received>, BoxError>;
}

/// A sink for one destination, plus what the suite needs to judge it.
pub struct Setup<S> {
    /// The sink under test.
    pub sink: S,
    /// Reads back the destination; `None` if the harness cannot.
    pub probe: Option<Box<dyn Probe>>,
    /// For [`Fault::Oversized`]: the body size the destination refuses.
    pub body_size: Option<usize>,
}

impl<S> Setup<S> {
    /// A sink without a probe.
    pub fn new(sink: S) -> Self {
        Setup {
            sink,
            probe: None,
            body_size: None,
        }
    }
    /// Add a probe.
    pub fn with_probe(mut self, probe: impl Probe + 'static) -> Self {
        self.probe = Some(Box::new(probe));
        self
    }
    /// Set the refused body size (oversized fault).
    pub fn with_body_size(mut self, size: usize) -> Self {
        self.body_size = Some(size);
        self
    }
}

impl<S: fmt::Debug> fmt::Debug for Setup<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Setup")
            .field("sink", &self.sink)
            .field("probe", &self.probe.is_some())
            .field("body_size", &self.body_size)
            .finish()
    }
}

/// A fault the suite asks the harness to provoke, and the class the sink must answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The queue, topic, exchange or endpoint does not exist: config.
    MissingDestination,
    /// The destination refuses the credential: config.
    RefusedCredential,
    /// Nothing listens at the address: transient, within a bounded time.
    Unreachable,
    /// The destination throttles: retry-after with `0 < ms <= 1 h`.
    Throttled,
    /// A body the destination will never take ([`Setup::body_size`] bytes): permanent, and
    /// nothing is delivered.
    Oversized,
}

/// Expected outcome of one entry in a [`MixedBatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Accepted.
    Ok,
    /// Refused, with a permanent (or config) class.
    Permanent,
}

/// Envelopes for one batch with mixed per-entry outcomes.
#[derive(Debug)]
pub struct MixedBatch<S> {
    /// The batching sink and its probe.
    pub setup: Setup<S>,
    /// Each envelope and what the destination will answer for it.
    pub envelopes: Vec<(Envelope, Expect)>,
}

/// How to build the sink under test. Implement it in your crate's tests.
///
/// Only [`destination`](Harness::destination) is required. Every other method has a
/// default that makes the matching case a printed skip.
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    /// The sink type.
    type Sink: Sink + 'static;

    /// A sink for a fresh destination unique to this call (a new queue, topic or endpoint),
    /// and a probe reading it back when you can.
    async fn destination(&self) -> Result<Setup<Self::Sink>, BoxError>;

    /// A sink configured so that the destination produces `fault`, or `None` if this
    /// harness cannot provoke it.
    async fn fault(&self, fault: Fault) -> Result<Option<Setup<Self::Sink>>, BoxError> {
        let _ = fault;
        Ok(None)
    }

    /// For batching sinks: one batch whose entries the destination answers differently.
    async fn mixed_batch(&self) -> Result<Option<MixedBatch<Self::Sink>>, BoxError> {
        Ok(None)
    }

    /// Secrets planted in the sink's configuration that must never appear in `describe`,
    /// `Debug`, or any failure.
    fn secrets(&self) -> Vec<String> {
        Vec::new()
    }

    /// Whether [`stop`](Harness::stop) and [`start`](Harness::start) work.
    fn can_restart(&self) -> bool {
        false
    }

    /// Stop the destination (broker, server). Must leave it stoppable and startable again.
    async fn stop(&self) -> Result<(), BoxError> {
        Err("this harness cannot stop its destination".into())
    }

    /// Start the destination again after [`stop`](Harness::stop).
    async fn start(&self) -> Result<(), BoxError> {
        Err("this harness cannot start its destination".into())
    }

    /// How long one delivery may take before the suite calls it hung. Default 30 s.
    fn deadline(&self) -> Duration {
        Duration::from_secs(30)
    }

    /// How long the probe may take to show a delivered hook. Default 15 s.
    fn read_timeout(&self) -> Duration {
        Duration::from_secs(15)
    }
}

//! The one generic sink of the services whose messages carry no attributes (Kinesis,
//! EventBridge), over the private [`RecordPublisher`] trait: each delivery is one Message v1
//! body, sized as the service counts it, sent alone or in a batch whose results come back
//! by position.

use crate::config::AwsOptions;
use crate::error::AwsError;
use ankusa_message::{Layout, Outgoing};
use ankusa_sink_core::{
    Capabilities, Check, Ctx, Description, Envelope, Failure, InFlight, Ordering, Subject,
    async_trait,
};
use ankusa_sink_kit::{BatchConfig, BatchSend, Batcher};
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;

/// A service's size and batch limits, as the sink enforces them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The largest entry (the resolved `max_message_bytes`).
    pub(crate) max_entry_bytes: usize,
    /// The service's own limit (what `max_message_bytes` defaults to).
    pub(crate) default_max_entry_bytes: usize,
    /// What counts toward an entry's size.
    pub(crate) counts: &'static str,
    /// Entries per batch request.
    pub(crate) max_entries: usize,
    /// Bytes per batch request (the same count, summed).
    pub(crate) max_batch_bytes: usize,
}

/// What differs between Kinesis and EventBridge: the entry, how one and a batch are sent,
/// the preflight, the order and the description. Everything else lives in [`RecordSink`].
#[async_trait]
pub(crate) trait RecordPublisher: Send + Sync + fmt::Debug + 'static {
    /// One prepared entry.
    type Entry: Send + 'static;
    /// `kinesis` or `eventbridge`.
    const SERVICE: &'static str;
    /// The entry for `out` (the one mapping, in `outgoing.rs`) and its size as the service
    /// counts it; a value of the hook the service refuses fails here, before any batch.
    fn entry(&self, out: Outgoing<'_>) -> Result<(Self::Entry, usize), AwsError>;
    /// Send one entry; `Ok` only when the service confirmed it.
    async fn publish(&self, entry: Self::Entry) -> Result<(), AwsError>;
    /// Send a batch in one request; one result per entry, in order.
    async fn publish_batch(&self, entries: Vec<Self::Entry>) -> Vec<Result<(), AwsError>>;
    /// Read the destination's description, sending nothing.
    async fn check(&self) -> Result<(), AwsError>;
    /// The order consumers see, with or without batching.
    fn ordering(&self, batched: bool) -> Ordering;
    /// Where this publisher sends.
    fn describe(&self, subject: &Subject) -> Description;
}

/// Adapts a record publisher to the core batcher.
#[derive(Debug)]
pub(crate) struct Requests<P>(Arc<P>);

#[async_trait]
impl<P: RecordPublisher> BatchSend for Requests<P> {
    type Entry = P::Entry;
    async fn send_batch(&self, entries: Vec<P::Entry>) -> Vec<Result<(), Failure>> {
        let results = self.0.publish_batch(entries).await;
        results
            .into_iter()
            .map(|r| r.map_err(Failure::from))
            .collect()
    }
}

/// The shared sink: maps, pre-checks the size, batches when asked.
pub(crate) struct RecordSink<P: RecordPublisher> {
    publisher: Arc<P>,
    options: AwsOptions,
    layout: Layout,
    limits: Limits,
    batcher: Option<Batcher<Requests<P>>>,
}

impl<P: RecordPublisher> fmt::Debug for RecordSink<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordSink")
            .field("publisher", &self.publisher)
            .field("options", &self.options)
            .field("limits", &self.limits)
            .field("batched", &self.batcher.is_some())
            .finish()
    }
}

impl<P: RecordPublisher> RecordSink<P> {
    /// `layout` is the service's Message v1 layout (Kinesis adds its key template).
    pub(crate) fn new(publisher: P, options: AwsOptions, layout: Layout, limits: Limits) -> Self {
        let publisher = Arc::new(publisher);
        let batcher = options.batching().then(|| {
            let b = options.batch();
            let cfg = BatchConfig::new(
                NonZeroUsize::new(limits.max_entries).unwrap_or(NonZeroUsize::MIN),
                NonZeroUsize::new(limits.max_batch_bytes).unwrap_or(NonZeroUsize::MIN),
            )
            .with_linger(b.linger())
            .with_max_queued(b.max_queued)
            .with_max_queued_per_tenant(b.max_queued_per_tenant)
            .with_max_requests(b.max_requests)
            // As SQS and SNS: a destination that queues requests (moto) gets as many as it
            // answers within a quarter of the call timeout.
            .with_latency_target(options.timeout() / 4);
            Batcher::new(Requests(Arc::clone(&publisher)), cfg)
        });
        RecordSink {
            publisher,
            options,
            layout,
            limits,
            batcher,
        }
    }

    pub(crate) fn publisher(&self) -> &P {
        &self.publisher
    }

    /// The entry for `env`; one over the size limit is refused before anything is sent.
    fn prepare(&self, env: &Envelope, ctx: &Ctx) -> Result<(P::Entry, usize), Failure> {
        let out = Outgoing::new(env, ctx, &self.layout)?;
        let (entry, size) = self.publisher.entry(out)?;
        if size > self.limits.max_entry_bytes {
            return Err(AwsError::EntryTooLarge {
                service: P::SERVICE,
                counts: self.limits.counts,
                size,
                max: self.limits.max_entry_bytes,
            }
            .into());
        }
        Ok((entry, size))
    }

    pub(crate) async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let (entry, size) = self.prepare(env, ctx)?;
        match &self.batcher {
            Some(b) if ctx.batch => b.submit(env.tenant_id(), size, entry).await,
            _ => Ok(self.publisher.publish(entry).await?),
        }
    }

    /// With batching on, two full requests per request permit, at most `max_queued` and
    /// core's pipeline window (1,024 deliveries, 16 MiB): EventBridge 320 at the defaults,
    /// Kinesis (500 records a request) 1,024. Without it, the dispatcher's shared limit.
    fn window(&self) -> Option<InFlight> {
        self.batcher.as_ref()?;
        let b = self.options.batch();
        let deliveries = b
            .max_requests
            .get()
            .saturating_mul(2 * self.limits.max_entries)
            .min(b.max_queued.get())
            .min(InFlight::PIPELINE.deliveries.get());
        Some(InFlight::new(
            NonZeroUsize::new(deliveries).unwrap_or(NonZeroUsize::MIN),
            InFlight::PIPELINE.bytes,
        ))
    }

    /// Stored (a sequence number, an event id); bodies over `inline_max_bytes` by claim;
    /// the entry limit as the service counts it; the service's order; the batch limits and
    /// the batcher's pipeline window; the credentials' source.
    pub(crate) fn capabilities(&self) -> Capabilities {
        let l = &self.limits;
        let mut c = Capabilities::new(true, Some(self.options.message().inline_max_bytes()))
            .with_max_message(
                l.max_entry_bytes,
                l.counts,
                Capabilities::limit_source(l.max_entry_bytes, l.default_max_entry_bytes),
            )
            .with_ordering(self.publisher.ordering(self.batcher.is_some()));
        if self.batcher.is_some() {
            c = c.with_batch(Some(
                self.options.batch_limits(l.max_entries, l.max_batch_bytes),
            ));
        }
        if let Some(window) = self.window() {
            c = c.with_in_flight(window);
        }
        c.with_auth([self.options.credential_source()])
    }

    pub(crate) async fn check(&self) -> Result<Check, Failure> {
        self.publisher.check().await?;
        Ok(Check::Passed)
    }

    pub(crate) fn describe(&self, subject: &Subject) -> Description {
        self.publisher.describe(subject)
    }
}

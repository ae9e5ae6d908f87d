//! The one generic sink SQS and SNS share, over the private [`Publisher`] trait, and the
//! helpers every service uses (confirmation, batch results by entry).

use crate::config::AwsOptions;
use crate::error::AwsError;
use crate::outgoing::{self, AttributeValue, Entry, Ids};
use ankusa_message::{EmptyValues, Layout, Outgoing};
use ankusa_sink_core::{Capabilities, Ordering, Payload};
use ankusa_sink_core::{
    Check, Ctx, Description, Envelope, Failure, InFlight, Subject, async_trait,
};
use ankusa_sink_kit::{BatchConfig, BatchSend, Batcher};
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;

/// SQS and SNS FIFO: a deduplication id seen within 5 minutes is dropped.
const FIFO_DEDUPE_WINDOW_S: u64 = 300;

/// What differs between SQS and SNS: how one message and one batch are sent, the
/// preflight, and the description. Everything else lives in [`AwsSink`].
#[async_trait]
pub(crate) trait Publisher: Send + Sync + fmt::Debug + 'static {
    /// The SDK's `MessageAttributeValue`.
    type Attribute: AttributeValue;
    /// Whether the destination is FIFO (group and dedup ids are required).
    fn fifo(&self) -> bool;
    /// Send one message; `Ok` only on a message id the service confirmed.
    async fn publish(&self, entry: Entry<Self::Attribute>) -> Result<(), AwsError>;
    /// Send up to 10 messages in one request; one result per entry, in order.
    async fn publish_batch(
        &self,
        entries: Vec<Entry<Self::Attribute>>,
    ) -> Vec<Result<(), AwsError>>;
    /// Read the destination's attributes, sending nothing.
    async fn check(&self) -> Result<(), AwsError>;
    /// The service's own message size limit (what `max_message_bytes` defaults to).
    fn default_max_message_bytes(&self) -> usize;
    /// Refuse a delivery the destination would accept and drop (an SNS topic without a
    /// subscription, with `require_subscriber`). Default: nothing to refuse.
    async fn require_subscriber(&self) -> Result<(), Failure> {
        Ok(())
    }
    /// Where this publisher sends.
    fn describe(&self, subject: &Subject) -> Description;
}

/// Adapts a publisher to the core batcher.
#[derive(Debug)]
pub(crate) struct Requests<P>(pub(crate) Arc<P>);

#[async_trait]
impl<P: Publisher> BatchSend for Requests<P> {
    type Entry = Entry<P::Attribute>;
    async fn send_batch(&self, entries: Vec<Self::Entry>) -> Vec<Result<(), Failure>> {
        let results = self.0.publish_batch(entries).await;
        results
            .into_iter()
            .map(|r| r.map_err(Failure::from))
            .collect()
    }
}

/// The shared sink: prepares entries, pre-checks size, batches when asked.
pub(crate) struct AwsSink<P: Publisher> {
    publisher: Arc<P>,
    options: AwsOptions,
    layout: Layout,
    max_message_bytes: usize,
    max_batch_bytes: usize,
    batcher: Option<Batcher<Requests<P>>>,
}

impl<P: Publisher> fmt::Debug for AwsSink<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsSink")
            .field("publisher", &self.publisher)
            .field("options", &self.options)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("batched", &self.batcher.is_some())
            .finish()
    }
}

impl<P: Publisher> AwsSink<P> {
    /// `max_message_bytes` is the resolved per-message limit; batches are bounded by
    /// `max_batch_bytes` in total.
    pub(crate) fn new(
        publisher: P,
        options: AwsOptions,
        max_message_bytes: usize,
        max_batch_bytes: usize,
    ) -> Self {
        let publisher = Arc::new(publisher);
        let batcher = options.batching().then(|| {
            let b = options.batch();
            let cfg = BatchConfig::new(
                NonZeroUsize::new(10).expect("non-zero"),
                NonZeroUsize::new(max_batch_bytes.max(1)).expect("non-zero"),
            )
            .with_linger(b.linger())
            .with_max_queued(b.max_queued)
            .with_max_queued_per_tenant(b.max_queued_per_tenant)
            .with_max_requests(b.max_requests)
            // A destination that queues requests (moto, an overloaded endpoint) gets as many
            // as it answers within a quarter of the call timeout, not enough to time out.
            .with_latency_target(options.timeout() / 4);
            Batcher::new(Requests(Arc::clone(&publisher)), cfg)
        });
        // SQS refuses empty attribute values: a hook without a tenant has no tenant
        // attribute (SNS follows SQS, its subscribers are often queues).
        let layout = options
            .message()
            .layout(Payload::Message, EmptyValues::Drop);
        AwsSink {
            publisher,
            options,
            layout,
            max_message_bytes,
            max_batch_bytes,
            batcher,
        }
    }

    pub(crate) fn publisher(&self) -> &P {
        &self.publisher
    }

    /// The FIFO ids of `env`: the configured group (else `<tenant>/<source>` on FIFO) and
    /// the hook id, or `<id>:replay:<replay_id>` for a replay (FIFO only).
    fn ids(&self, env: &Envelope, ctx: &Ctx) -> Ids {
        let fifo = self.publisher.fifo();
        let group = match &self.options.message_group_id {
            Some(g) => Some(g.clone()),
            None if fifo => Some(format!(
                "{}/{}",
                env.tenant_id().unwrap_or(""),
                env.source_id()
            )),
            None => None,
        };
        let dedup = fifo.then(|| match &ctx.replay_id {
            Some(r) => format!("{}:replay:{}", env.id(), r),
            None => env.id().to_owned(),
        });
        Ids { group, dedup }
    }

    /// The entry for `env`; a message over the size limit is refused before anything is
    /// sent.
    fn prepare(&self, env: &Envelope, ctx: &Ctx) -> Result<Entry<P::Attribute>, Failure> {
        let out = Outgoing::new(env, ctx, &self.layout)?;
        let entry = outgoing::to_entry(out, self.ids(env, ctx))?;
        if entry.size > self.max_message_bytes {
            return Err(AwsError::MessageTooLarge {
                size: entry.size,
                max: self.max_message_bytes,
            }
            .into());
        }
        Ok(entry)
    }

    pub(crate) async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let entry = self.prepare(env, ctx)?;
        self.publisher.require_subscriber().await?;
        match &self.batcher {
            // The batcher's only entry point takes the attempt: it pauses a delivery it
            // cannot queue.
            Some(b) if ctx.batch => {
                let size = entry.size;
                b.submit(env.tenant_id(), size, entry).await
            }
            _ => Ok(self.publisher.publish(entry).await?),
        }
    }

    /// With batching on, the batcher's pipeline: a full batch of 10 in each request in
    /// flight and as many filling behind them (at most `max_queued`), the pipeline's bytes.
    /// Without it, one request per delivery: the dispatcher's shared limit.
    fn window(&self) -> Option<InFlight> {
        self.batcher.as_ref()?;
        let b = self.options.batch();
        let deliveries = b
            .max_requests
            .get()
            .saturating_mul(20)
            .min(b.max_queued.get());
        Some(InFlight::new(
            NonZeroUsize::new(deliveries).unwrap_or(NonZeroUsize::MIN),
            InFlight::PIPELINE.bytes,
        ))
    }

    /// What travels: Message v1, or a CloudEvent.
    pub(crate) fn payload(&self) -> Payload {
        self.layout.payload()
    }

    /// Stored (a message id); bodies over `inline_max_bytes` by claim (`None` with
    /// CloudEvents, which travel inline); `max_message_bytes` of body plus attributes; FIFO:
    /// in order per message group, deduplicated for 5 minutes; the batch limits and the
    /// batcher's pipeline window; the credentials' source.
    pub(crate) fn capabilities(&self) -> Capabilities {
        let default = self.publisher.default_max_message_bytes();
        let mut c = Capabilities::new(true, self.layout.inline_max_bytes()).with_max_message(
            self.max_message_bytes,
            "body + attribute names, types and values",
            Capabilities::limit_source(self.max_message_bytes, default),
        );
        if self.publisher.fifo() {
            let key = match &self.options.message_group_id {
                Some(g) => g.replace('{', "{{").replace('}', "}}"),
                None => "{tenant_id}/{source_id}".to_owned(),
            };
            c = c
                .with_ordering(Ordering::PerKey { key })
                .with_dedupe_window_s(FIFO_DEDUPE_WINDOW_S);
        }
        if self.batcher.is_some() {
            c = c.with_batch(Some(self.options.batch_limits(10, self.max_batch_bytes)));
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
        let mut d = self.publisher.describe(subject);
        d.payload = self.payload();
        d
    }
}

/// Implements `Sink` for a public sink type wrapping `AwsSink<P>` in field `inner`.
macro_rules! forward_sink {
    ($ty:ty) => {
        #[ankusa_sink_core::async_trait]
        impl ankusa_sink_core::Sink for $ty {
            async fn deliver(
                &self,
                env: &ankusa_sink_core::Envelope,
                ctx: &ankusa_sink_core::Ctx,
            ) -> Result<(), ankusa_sink_core::Failure> {
                self.inner.deliver(env, ctx).await
            }
            fn capabilities(&self) -> ankusa_sink_core::Capabilities {
                self.inner.capabilities()
            }
            fn describe(
                &self,
                subject: &ankusa_sink_core::Subject,
            ) -> Option<ankusa_sink_core::Description> {
                Some(self.inner.describe(subject))
            }
            async fn check(&self) -> Result<ankusa_sink_core::Check, ankusa_sink_core::Failure> {
                self.inner.check().await
            }
        }
    };
}
pub(crate) use forward_sink;

/// Lowercase hex MD5 of a body, as SQS reports it.
#[cfg(feature = "sqs")]
pub(crate) fn body_md5(body: &str) -> String {
    hex::encode(<md5::Md5 as md5::Digest>::digest(body.as_bytes()))
}

/// `Ok` only for a message id, and, when the service reports one (`md5` is `Some`), a body
/// MD5 equal to `expected()` (the body's, computed while the request was in flight).
pub(crate) fn confirm(
    service: &'static str,
    operation: &'static str,
    expected: impl FnOnce() -> String,
    message_id: Option<&str>,
    md5: Option<Option<&str>>,
) -> Result<(), AwsError> {
    let unconfirmed = || AwsError::Unconfirmed { service, operation };
    if message_id.is_none_or(str::is_empty) {
        return Err(unconfirmed());
    }
    if let Some(got) = md5 {
        let got = got.filter(|g| !g.is_empty()).ok_or_else(unconfirmed)?;
        let expected = expected();
        if !got.eq_ignore_ascii_case(&expected) {
            return Err(AwsError::Md5Mismatch {
                service,
                expected,
                got: got.to_owned(),
            });
        }
    }
    Ok(())
}

/// One slot per batch entry, filled from the answer's successes and failures by entry id
/// (the entry's index).
pub(crate) struct BatchResults {
    service: &'static str,
    operation: &'static str,
    slots: Vec<Option<Result<(), AwsError>>>,
}

impl BatchResults {
    pub(crate) fn new(service: &'static str, operation: &'static str, n: usize) -> Self {
        BatchResults {
            service,
            operation,
            slots: (0..n).map(|_| None).collect(),
        }
    }

    /// Record the result of entry `id`; an unknown or repeated id is ignored.
    pub(crate) fn set(&mut self, id: &str, result: impl FnOnce(usize) -> Result<(), AwsError>) {
        if let Ok(i) = id.parse::<usize>()
            && let Some(slot @ None) = self.slots.get_mut(i)
        {
            *slot = Some(result(i));
        }
    }

    /// Record the result of the entry at position `i` (Kinesis and EventBridge answer by
    /// position); a position out of range or repeated is ignored.
    #[cfg(any(feature = "kinesis", feature = "eventbridge"))]
    pub(crate) fn set_at(&mut self, i: usize, result: Result<(), AwsError>) {
        if let Some(slot @ None) = self.slots.get_mut(i) {
            *slot = Some(result);
        }
    }

    /// Record the entry at position `i` as failed with the code the service reported.
    #[cfg(any(feature = "kinesis", feature = "eventbridge"))]
    pub(crate) fn failed_at(&mut self, i: usize, code: &str, message: Option<&str>) {
        let err = AwsError::entry(self.service, self.operation, code, message);
        self.set_at(i, Err(err));
    }

    /// Record a failed entry as the service reported it.
    pub(crate) fn failed(&mut self, id: &str, code: &str, message: Option<&str>) {
        let (service, operation) = (self.service, self.operation);
        self.set(id, |_| {
            Err(AwsError::entry(service, operation, code, message))
        });
    }

    /// Every entry's result; an entry the answer did not mention is transient.
    pub(crate) fn finish(self) -> Vec<Result<(), AwsError>> {
        let (service, operation) = (self.service, self.operation);
        self.slots
            .into_iter()
            .map(|s| s.unwrap_or(Err(AwsError::NoEntryResult { service, operation })))
            .collect()
    }
}

/// The same failure for each of `n` entries (a failed batch request).
pub(crate) fn fail_all(err: AwsError, n: usize) -> Vec<Result<(), AwsError>> {
    vec![Err(err); n]
}

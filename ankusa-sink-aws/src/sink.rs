//! The one generic sink every service shares, [`AwsSink`], over the private [`Publisher`]
//! trait, and the helpers every service uses (confirmation, batch results by entry).

use crate::config::AwsOptions;
use crate::error::AwsError;
use crate::outgoing::Ids;
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

/// What SQS and SNS count toward a message's limit.
pub(crate) const MESSAGE_COUNTS: &str = "body + attribute names, types and values";
/// Entries in one `SendMessageBatch`, `PublishBatch` or `PutEvents` request.
pub(crate) const MAX_MESSAGE_ENTRIES: usize = 10;

/// The layout every service starts from: Message v1 (or a CloudEvent, SQS and SNS only).
/// SQS refuses empty attribute values: a hook without a tenant has no tenant attribute
/// (SNS follows SQS, its subscribers are often queues; the others carry no attributes).
pub(crate) fn layout(options: &AwsOptions) -> Layout {
    options
        .message()
        .layout(Payload::Message, EmptyValues::Drop)
}

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
    /// The most deliveries the batching window declares (`usize::MAX`: the batcher's queue
    /// alone bounds it).
    pub(crate) max_window: usize,
}

/// What differs between the services: the entry a record carries (how it is built from
/// [`Outgoing`] and its size), how one and a batch are sent and their results mapped back,
/// the preflight, the order and the description. Everything else lives in [`AwsSink`].
#[async_trait]
pub(crate) trait Publisher: Send + Sync + fmt::Debug + 'static {
    /// One prepared entry.
    type Entry: Send + 'static;
    /// `sqs`, `sns`, `kinesis` or `eventbridge`.
    const SERVICE: &'static str;
    /// Whether the destination is FIFO (group and dedup ids are required; in order per
    /// group, deduplicated). Default: not.
    fn fifo(&self) -> bool {
        false
    }
    /// The entry for `out` (the one mapping, in `outgoing`) and its size as the service
    /// counts it; a value of the hook the service refuses fails here, before any batch.
    /// `ids` are the FIFO ids (empty where the service has none).
    fn entry(&self, out: Outgoing<'_>, ids: Ids) -> Result<(Self::Entry, usize), AwsError>;
    /// Whether an entry over the limit is reported as a message (SQS, SNS:
    /// [`AwsError::MessageTooLarge`]) rather than as the service's entry
    /// ([`AwsError::EntryTooLarge`]).
    const TOO_LARGE_AS_MESSAGE: bool = false;
    /// Send one entry; `Ok` only when the service confirmed it.
    async fn publish(&self, entry: Self::Entry) -> Result<(), AwsError>;
    /// Send a batch in one request; one result per entry, in order.
    async fn publish_batch(&self, entries: Vec<Self::Entry>) -> Vec<Result<(), AwsError>>;
    /// Read the destination's description or attributes, sending nothing.
    async fn check(&self) -> Result<(), AwsError>;
    /// Refuse a delivery the destination would accept and drop (an SNS topic without a
    /// subscription, with `require_subscriber`). Default: nothing to refuse.
    async fn require_subscriber(&self) -> Result<(), Failure> {
        Ok(())
    }
    /// The order consumers see of a destination that is not FIFO, with or without
    /// batching. Default: none.
    fn ordering(&self, _batched: bool) -> Ordering {
        Ordering::None
    }
    /// Where this publisher sends.
    fn describe(&self, subject: &Subject) -> Description;
}

/// Adapts a publisher to the core batcher.
#[derive(Debug)]
pub(crate) struct Requests<P>(Arc<P>);

#[async_trait]
impl<P: Publisher> BatchSend for Requests<P> {
    type Entry = P::Entry;
    async fn send_batch(&self, entries: Vec<P::Entry>) -> Vec<Result<(), Failure>> {
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
    limits: Limits,
    batcher: Option<Batcher<Requests<P>>>,
}

impl<P: Publisher> fmt::Debug for AwsSink<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsSink")
            .field("publisher", &self.publisher)
            .field("options", &self.options)
            .field("limits", &self.limits)
            .field("batched", &self.batcher.is_some())
            .finish()
    }
}

impl<P: Publisher> AwsSink<P> {
    /// `layout` is the service's layout (Kinesis adds its key template).
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
            // A destination that queues requests (moto, an overloaded endpoint) gets as many
            // as it answers within a quarter of the call timeout, not enough to time out.
            .with_latency_target(options.timeout() / 4);
            Batcher::new(Requests(Arc::clone(&publisher)), cfg)
        });
        AwsSink {
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

    /// The FIFO ids of `env`: the configured group (else `<tenant>/<source>` on FIFO) and
    /// the hook id, or `<id>:replay:<replay_id>` for a replay (FIFO only). Kinesis and
    /// EventBridge refuse `message_group_id` and are not FIFO: none.
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

    /// The entry for `env`; one over the size limit is refused before anything is sent.
    fn prepare(&self, env: &Envelope, ctx: &Ctx) -> Result<(P::Entry, usize), Failure> {
        let out = Outgoing::new(env, ctx, &self.layout)?;
        let (entry, size) = self.publisher.entry(out, self.ids(env, ctx))?;
        let max = self.limits.max_entry_bytes;
        if size > max {
            return Err(if P::TOO_LARGE_AS_MESSAGE {
                AwsError::MessageTooLarge { size, max }
            } else {
                AwsError::EntryTooLarge {
                    service: P::SERVICE,
                    counts: self.limits.counts,
                    size,
                    max,
                }
            }
            .into());
        }
        Ok((entry, size))
    }

    pub(crate) async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let (entry, size) = self.prepare(env, ctx)?;
        self.publisher.require_subscriber().await?;
        match &self.batcher {
            // The batcher's only entry point takes the attempt: it pauses a delivery it
            // cannot queue.
            Some(b) if ctx.batch => b.submit(env.tenant_id(), size, entry).await,
            _ => Ok(self.publisher.publish(entry).await?),
        }
    }

    /// With batching on, two full requests per request permit, at most `max_queued` and
    /// the service's window cap: SQS and SNS 20 deliveries a request permit; EventBridge
    /// 320 at the defaults, Kinesis (500 records a request) core's pipeline window (1,024
    /// deliveries); the pipeline's bytes. Without it, the dispatcher's shared limit.
    fn window(&self) -> Option<InFlight> {
        self.batcher.as_ref()?;
        let b = self.options.batch();
        let deliveries = b
            .max_requests
            .get()
            .saturating_mul(2 * self.limits.max_entries)
            .min(b.max_queued.get())
            .min(self.limits.max_window);
        Some(InFlight::new(
            NonZeroUsize::new(deliveries).unwrap_or(NonZeroUsize::MIN),
            InFlight::PIPELINE.bytes,
        ))
    }

    /// What travels: Message v1, or a CloudEvent (SQS and SNS).
    pub(crate) fn payload(&self) -> Payload {
        self.layout.payload()
    }

    /// Stored (a message id, a sequence number, an event id); bodies over
    /// `inline_max_bytes` by claim (`None` with CloudEvents, which travel inline); the
    /// entry limit as the service counts it; FIFO: in order per message group,
    /// deduplicated for 5 minutes, else the service's order; the batch limits and the
    /// batcher's pipeline window; the credentials' source.
    pub(crate) fn capabilities(&self) -> Capabilities {
        let l = &self.limits;
        let mut c = Capabilities::new(true, self.layout.inline_max_bytes()).with_max_message(
            l.max_entry_bytes,
            l.counts,
            Capabilities::limit_source(l.max_entry_bytes, l.default_max_entry_bytes),
        );
        c = if self.publisher.fifo() {
            let key = match &self.options.message_group_id {
                Some(g) => g.replace('{', "{{").replace('}', "}}"),
                None => "{tenant_id}/{source_id}".to_owned(),
            };
            c.with_ordering(Ordering::PerKey { key })
                .with_dedupe_window_s(FIFO_DEDUPE_WINDOW_S)
        } else {
            c.with_ordering(self.publisher.ordering(self.batcher.is_some()))
        };
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
        let mut d = self.publisher.describe(subject);
        d.payload = self.payload();
        d
    }
}

/// For a public sink type `$ty` wrapping `AwsSink` in field `inner` (its publisher's
/// SDK client in field `client`): `Debug`, `new` from `$config`, `client`, and `Sink`.
macro_rules! forward_sink {
    ($ty:ident, $config:ident, $client:ty) => {
        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("inner", &self.inner)
                    .finish()
            }
        }

        impl $ty {
            #[doc = concat!("A sink with a client built from [`", stringify!($config), "::sdk_config`].")]
            pub async fn new(config: $config) -> Result<Self, $crate::ConfigError> {
                let sdk = config.sdk_config().await?;
                Ok(Self::from_client(config, <$client>::new(&sdk)))
            }

            /// The SDK client.
            pub fn client(&self) -> &$client {
                &self.inner.publisher().client
            }
        }

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

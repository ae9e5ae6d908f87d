//! The one generic sink both services share, over the private [`Publisher`] trait.

use crate::config::AwsOptions;
use crate::error::SinkError;
use ankusa_sink_core::{
    BatchConfig, BatchSend, Batcher, Check, Ctx, Description, Envelope, Failure, Subject,
    async_trait, message,
};
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;

/// One prepared message: what SQS `SendMessage` / SNS `Publish` (or a batch entry) carries.
///
/// `Debug` shows its shape only (sizes, attribute names, which ids are set): the body and
/// the attribute values carry the hook.
#[derive(Clone)]
pub(crate) struct Entry {
    /// The Message v1 JSON.
    pub(crate) body: String,
    /// String attributes, from [`ankusa_sink_core::attributes`].
    pub(crate) attributes: Vec<(&'static str, String)>,
    /// FIFO message group (or a configured group on a standard queue).
    pub(crate) group_id: Option<String>,
    /// FIFO deduplication id.
    pub(crate) dedup_id: Option<String>,
    /// `ctx.attempt`, for throttle pauses.
    pub(crate) attempt: u32,
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.attributes.iter().map(|(k, _)| *k).collect();
        f.debug_struct("Entry")
            .field("body_bytes", &self.body.len())
            .field("attributes", &names)
            .field("group_id", &self.group_id.is_some())
            .field("dedup_id", &self.dedup_id.is_some())
            .field("attempt", &self.attempt)
            .field("size", &self.size())
            .finish()
    }
}

impl Entry {
    /// The size AWS counts toward its limits: the body plus, for every attribute, its name,
    /// its data type (`String`) and its value.
    pub(crate) fn size(&self) -> usize {
        self.body.len()
            + self
                .attributes
                .iter()
                .map(|(k, v)| k.len() + "String".len() + v.len())
                .sum::<usize>()
    }
}

/// What differs between SQS and SNS: how one message and one batch are sent, the
/// preflight, and the description. Everything else lives in [`AwsSink`].
#[async_trait]
pub(crate) trait Publisher: Send + Sync + fmt::Debug + 'static {
    /// Whether the destination is FIFO (group and dedup ids are required).
    fn fifo(&self) -> bool;
    /// Send one message; `Ok` only on a message id the service confirmed.
    async fn publish(&self, entry: &Entry) -> Result<(), Failure>;
    /// Send up to 10 messages in one request; one result per entry, in order.
    async fn publish_batch(&self, entries: &[Entry]) -> Vec<Result<(), Failure>>;
    /// Read the destination's attributes, sending nothing.
    async fn check(&self) -> Result<(), Failure>;
    /// Where this publisher sends.
    fn describe(&self, subject: &Subject) -> Description;
}

/// Adapts a publisher to the core batcher.
#[derive(Debug)]
pub(crate) struct Requests<P>(pub(crate) Arc<P>);

#[async_trait]
impl<P: Publisher> BatchSend for Requests<P> {
    type Entry = Entry;
    async fn send_batch(&self, entries: Vec<Entry>) -> Vec<Result<(), Failure>> {
        self.0.publish_batch(&entries).await
    }
}

/// The shared sink: prepares entries, pre-checks size, batches when asked.
pub(crate) struct AwsSink<P: Publisher> {
    publisher: Arc<P>,
    options: AwsOptions,
    max_message_bytes: usize,
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
        let batcher = options.batching.then(|| {
            let b = &options.batch;
            let cfg = BatchConfig::new(
                NonZeroUsize::new(10).expect("non-zero"),
                NonZeroUsize::new(max_batch_bytes.max(1)).expect("non-zero"),
            )
            .with_linger(b.linger())
            .with_max_queued(b.max_queued)
            .with_max_queued_per_tenant(b.max_queued_per_tenant)
            .with_max_requests(b.max_requests);
            Batcher::new(Requests(Arc::clone(&publisher)), cfg)
        });
        AwsSink {
            publisher,
            options,
            max_message_bytes,
            batcher,
        }
    }

    pub(crate) fn publisher(&self) -> &P {
        &self.publisher
    }

    /// Encode `env` and compute its attributes, group and dedup ids; refuse a message
    /// over the size limit before anything is sent.
    fn prepare(&self, env: &Envelope, ctx: &Ctx) -> Result<Entry, Failure> {
        let body = message::encode(env, ctx, Some(self.options.inline_max_bytes))?;
        let body = String::from_utf8(body).expect("Message v1 is JSON, hence UTF-8");
        let attributes = ankusa_sink_core::attributes(env, ctx);
        let fifo = self.publisher.fifo();
        let group_id = match &self.options.message_group_id {
            Some(g) => Some(g.clone()),
            None if fifo => Some(format!(
                "{}/{}",
                env.tenant_id().unwrap_or(""),
                env.source_id()
            )),
            None => None,
        };
        let dedup_id = fifo.then(|| match &ctx.replay_id {
            Some(r) => format!("{}:replay:{}", env.id(), r),
            None => env.id().to_owned(),
        });
        let entry = Entry {
            body,
            attributes,
            group_id,
            dedup_id,
            attempt: ctx.attempt(),
        };
        let size = entry.size();
        if size > self.max_message_bytes {
            return Err(Failure::permanent(SinkError::MessageTooLarge {
                size,
                max: self.max_message_bytes,
            }));
        }
        Ok(entry)
    }

    pub(crate) async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let entry = self.prepare(env, ctx)?;
        match &self.batcher {
            Some(b) if ctx.batch => {
                let size = entry.size();
                b.submit(env.tenant_id(), size, ctx.attempt(), entry).await
            }
            _ => self.publisher.publish(&entry).await,
        }
    }

    pub(crate) fn batched(&self) -> bool {
        self.batcher.is_some()
    }

    pub(crate) fn inline_max_bytes(&self) -> NonZeroUsize {
        self.options.inline_max_bytes
    }

    pub(crate) async fn check(&self) -> Result<Check, Failure> {
        self.publisher.check().await.map(|()| Check::Passed)
    }

    pub(crate) fn describe(&self, subject: &Subject) -> Description {
        self.publisher.describe(subject)
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
            fn inline_max_bytes(&self) -> Option<std::num::NonZeroUsize> {
                Some(self.inner.inline_max_bytes())
            }
            fn batched(&self) -> bool {
                self.inner.batched()
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
pub(crate) fn body_md5(body: &str) -> String {
    hex::encode(<md5::Md5 as md5::Digest>::digest(body.as_bytes()))
}

/// `Ok` only for a message id, and (SQS) a body MD5 equal to the body's.
pub(crate) fn confirm(
    service: &'static str,
    operation: &'static str,
    body: &str,
    message_id: Option<&str>,
    md5: Option<Option<&str>>,
) -> Result<(), Failure> {
    confirm_with(service, operation, || body_md5(body), message_id, md5)
}

/// [`confirm`] with the body's MD5 from `expected` (computed while the request was in
/// flight).
pub(crate) fn confirm_with(
    service: &'static str,
    operation: &'static str,
    expected: impl FnOnce() -> String,
    message_id: Option<&str>,
    md5: Option<Option<&str>>,
) -> Result<(), Failure> {
    let unconfirmed = || Failure::transient(SinkError::Unconfirmed { service, operation });
    if message_id.is_none_or(str::is_empty) {
        return Err(unconfirmed());
    }
    if let Some(got) = md5 {
        let got = got.filter(|g| !g.is_empty()).ok_or_else(unconfirmed)?;
        let expected = expected();
        if !got.eq_ignore_ascii_case(&expected) {
            return Err(Failure::transient(SinkError::Md5Mismatch {
                service,
                expected,
                got: got.to_owned(),
            }));
        }
    }
    Ok(())
}

/// One slot per batch entry, filled from the answer's successes and failures by entry id
/// (the entry's index).
pub(crate) struct BatchResults {
    service: &'static str,
    operation: &'static str,
    slots: Vec<Option<Result<(), Failure>>>,
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
    pub(crate) fn set(&mut self, id: &str, result: impl FnOnce(usize) -> Result<(), Failure>) {
        if let Ok(i) = id.parse::<usize>()
            && let Some(slot @ None) = self.slots.get_mut(i)
        {
            *slot = Some(result(i));
        }
    }

    /// Every entry's result; an entry the answer did not mention is transient.
    pub(crate) fn finish(self) -> Vec<Result<(), Failure>> {
        let (service, operation) = (self.service, self.operation);
        self.slots
            .into_iter()
            .map(|s| {
                s.unwrap_or_else(|| {
                    Err(Failure::transient(SinkError::NoEntryResult {
                        service,
                        operation,
                    }))
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_debug_shows_shape_not_content() {
        let e = Entry {
            body: r#"{"body":"card 4242-secret"}"#.to_owned(),
            attributes: vec![("ankusa_dedupe_key", "evt_private".to_owned())],
            group_id: Some("acme/stripe".to_owned()),
            dedup_id: Some("hook-1".to_owned()),
            attempt: 2,
        };
        let text = format!("{e:?}");
        for secret in ["4242-secret", "evt_private", "acme/stripe", "hook-1"] {
            assert!(!text.contains(secret), "{text}");
        }
        assert!(text.contains("body_bytes: 27"), "{text}");
        assert!(text.contains("\"ankusa_dedupe_key\""), "{text}");
        assert!(text.contains("group_id: true"), "{text}");
    }
}

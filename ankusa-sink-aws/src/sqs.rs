//! The SQS sink: `SendMessage`, `SendMessageBatch`, `GetQueueAttributes`.

use crate::config::{SQS_MAX_BATCH_BYTES, SQS_MAX_MESSAGE_BYTES, SqsConfig};
use crate::error::{self, AwsError};
use crate::outgoing::{self, Entry, Ids};
use crate::sink::{
    self, AwsSink, BatchResults, Limits, Publisher, body_md5, confirm, fail_all, forward_sink,
};
use ankusa_message::Outgoing;
use ankusa_sink_core::{Description, Payload, Subject, async_trait};
use ankusa_sink_kit::host_port;
use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName, SendMessageBatchRequestEntry};
use std::fmt;
use std::future::Future;
use std::task::Poll;

/// Delivers each hook as one SQS message: the Message v1 JSON body with String attributes.
///
/// # Behavior
/// - `Ok` only when SQS returned a message id and the MD5 of the body it stored equals the
///   MD5 of the body sent.
/// - FIFO queues (URL ending in `.fifo`) get a message group id (`message_group_id`, else
///   `<tenant>/<source>`) and a deduplication id (the hook id, or `<id>:replay:<replay_id>`
///   for a replay). A standard queue gets a group id only when one is configured.
/// - A message whose body plus attributes exceed `max_message_bytes` is permanent and not
///   sent.
/// - With batching on and `ctx.batch` set, deliveries share `SendMessageBatch` requests (10
///   entries, 1 MiB); each gets its own entry's result.
/// - `check()` reads the queue's ARN (`GetQueueAttributes`); nothing is sent.
pub struct SqsSink {
    inner: AwsSink<SqsPublisher>,
}

forward_sink!(SqsSink, SqsConfig, aws_sdk_sqs::Client);

impl SqsSink {
    /// A sink using `client` (its region, endpoint, credentials and interceptors); the
    /// config's connection options are not used.
    pub fn from_client(config: SqsConfig, client: aws_sdk_sqs::Client) -> Self {
        let host = host_port(config.endpoint().unwrap_or(config.queue_url()));
        let publisher = SqsPublisher {
            client,
            queue_url: config.queue_url().to_owned(),
            queue_name: config.queue_name().to_owned(),
            fifo: config.fifo(),
            host,
        };
        let limits = Limits {
            max_entry_bytes: config.max_message_bytes(),
            default_max_entry_bytes: SQS_MAX_MESSAGE_BYTES,
            counts: sink::MESSAGE_COUNTS,
            max_entries: sink::MAX_MESSAGE_ENTRIES,
            max_batch_bytes: SQS_MAX_BATCH_BYTES,
            max_window: usize::MAX,
        };
        SqsSink {
            inner: AwsSink::new(
                publisher,
                config.options().clone(),
                sink::layout(config.options()),
                limits,
            ),
        }
    }
}

pub(crate) struct SqsPublisher {
    client: aws_sdk_sqs::Client,
    queue_url: String,
    queue_name: String,
    fifo: bool,
    host: Option<String>,
}

impl fmt::Debug for SqsPublisher {
    // The client's config holds the credentials provider: never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqsPublisher")
            .field("queue_url", &self.queue_url)
            .field("fifo", &self.fifo)
            .finish_non_exhaustive()
    }
}

/// Start `send` (serialize, sign, hand the request to the connection), run `work` while
/// the request is in flight, then finish `send`: the body MD5s cost no latency.
async fn while_in_flight<F: Future, T>(send: F, work: impl FnOnce() -> T) -> (F::Output, T) {
    let mut send = std::pin::pin!(send);
    let first = std::future::poll_fn(|cx| Poll::Ready(send.as_mut().poll(cx))).await;
    let done = work();
    let out = match first {
        Poll::Ready(out) => out,
        Poll::Pending => send.await,
    };
    (out, done)
}

#[async_trait]
impl Publisher for SqsPublisher {
    type Entry = Entry<MessageAttributeValue>;
    const TOO_LARGE_AS_MESSAGE: bool = true;
    const SERVICE: &'static str = "sqs";

    fn fifo(&self) -> bool {
        self.fifo
    }

    fn entry(&self, out: Outgoing<'_>, ids: Ids) -> Result<(Self::Entry, usize), AwsError> {
        outgoing::to_entry(out, ids).map(Entry::sized)
    }

    async fn publish(&self, e: Entry<MessageAttributeValue>) -> Result<(), AwsError> {
        const OP: &str = "SendMessage";
        let send = self
            .client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(&e.body)
            .set_message_attributes(Some(e.attributes))
            .set_message_group_id(e.ids.group)
            .set_message_deduplication_id(e.ids.dedup)
            .send();
        let (out, expected) = while_in_flight(send, || body_md5(&e.body)).await;
        let out = out.map_err(|err| error::sqs(OP, err))?;
        confirm(
            "sqs",
            OP,
            || expected,
            out.message_id(),
            Some(out.md5_of_message_body()),
        )
    }

    async fn publish_batch(
        &self,
        mut entries: Vec<Entry<MessageAttributeValue>>,
    ) -> Vec<Result<(), AwsError>> {
        const OP: &str = "SendMessageBatch";
        let request: Vec<_> = entries
            .iter_mut()
            .enumerate()
            .map(|(i, e)| {
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(&e.body)
                    .set_message_attributes(Some(std::mem::take(&mut e.attributes)))
                    .set_message_group_id(e.ids.group.take())
                    .set_message_deduplication_id(e.ids.dedup.take())
                    .build()
                    .expect("id and body are set")
            })
            .collect();
        let send = self
            .client
            .send_message_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(request))
            .send();
        let (out, mut expected) = while_in_flight(send, || {
            entries
                .iter()
                .map(|e| body_md5(&e.body))
                .collect::<Vec<_>>()
        })
        .await;
        let out = match out {
            Ok(out) => out,
            Err(err) => return fail_all(error::sqs(OP, err), entries.len()),
        };
        let mut results = BatchResults::new("sqs", OP, entries.len());
        for ok in out.successful() {
            results.set(ok.id(), |i| {
                let md5 = Some(ok.md5_of_message_body()).filter(|m| !m.is_empty());
                confirm(
                    "sqs",
                    OP,
                    || std::mem::take(&mut expected[i]),
                    Some(ok.message_id()),
                    Some(md5),
                )
            });
        }
        for failed in out.failed() {
            results.failed(failed.id(), failed.code(), failed.message());
        }
        results.finish()
    }

    async fn check(&self) -> Result<(), AwsError> {
        self.client
            .get_queue_attributes()
            .queue_url(&self.queue_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .map(|_| ())
            .map_err(|err| error::sqs("GetQueueAttributes", err))
    }

    fn describe(&self, _subject: &Subject) -> Description {
        let mut d = Description::new("sqs", Payload::Message);
        d.host = self.host.clone();
        d.address = Some(self.queue_name.clone());
        d.bindings.insert(
            "sqs".into(),
            serde_json::json!({
                "queue": {"name": self.queue_name, "fifoQueue": self.fifo},
                "bindingVersion": "0.2.0",
            }),
        );
        d
    }
}

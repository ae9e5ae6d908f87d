//! The SNS sink: `Publish`, `PublishBatch`, `GetTopicAttributes`.

use crate::config::{SNS_MAX_MESSAGE_BYTES, SnsConfig};
use crate::error::{self, AwsError};
use crate::outgoing::{self, Entry, Ids};
use crate::sink::{
    self, AwsSink, BatchResults, Limits, Publisher, confirm, fail_all, forward_sink,
};
use ankusa_message::Outgoing;
use ankusa_sink_core::{Description, Failure, Payload, Subject, async_trait};
use ankusa_sink_kit::SubscriberCache;
use ankusa_sink_kit::host_port;
use aws_sdk_sns::types::{MessageAttributeValue, PublishBatchRequestEntry};
use std::fmt;

/// Publishes each hook as one SNS message: the Message v1 JSON with String message
/// attributes.
///
/// # Behavior
/// - `Ok` only when SNS returned a message id.
/// - FIFO topics (name ending in `.fifo`) get a message group id (`message_group_id`, else
///   `<tenant>/<source>`) and a deduplication id (the hook id, or `<id>:replay:<replay_id>`).
/// - A message over `max_message_bytes` (default 256 KiB) is permanent and not sent.
/// - With batching on and `ctx.batch` set, deliveries share `PublishBatch` requests (10
///   entries, `max_message_bytes` in total); each gets its own entry's result.
/// - `check()` reads the topic's attributes (`GetTopicAttributes`) and lists its
///   subscriptions (`ListSubscriptionsByTopic`); nothing is published. A topic without a
///   confirmed subscription fails as config: SNS accepts and drops what is published to it.
/// - With `require_subscriber`, so does every delivery (nothing is published); the
///   subscriptions are listed at most once per `subscriber_check_interval_s`
///   ([`SubscriberCache`]).
pub struct SnsSink {
    inner: AwsSink<SnsPublisher>,
}

forward_sink!(SnsSink, SnsConfig, aws_sdk_sns::Client);

impl SnsSink {
    /// A sink using `client` (its region, endpoint, credentials and interceptors); the
    /// config's connection options are not used.
    pub fn from_client(config: SnsConfig, client: aws_sdk_sns::Client) -> Self {
        let host = match config.endpoint() {
            Some(e) => host_port(e),
            None => Some(format!("sns.{}.amazonaws.com", config.region())),
        };
        let publisher = SnsPublisher {
            client,
            topic_arn: config.topic_arn().to_owned(),
            topic_name: config.topic_name().to_owned(),
            fifo: config.fifo(),
            host,
            subscribers: config
                .require_subscriber()
                .then(|| SubscriberCache::new(config.subscriber_check_interval())),
        };
        let max = config.max_message_bytes();
        // PublishBatch's limit is the message's: 256 KiB for the whole request.
        let limits = Limits {
            max_entry_bytes: max,
            default_max_entry_bytes: SNS_MAX_MESSAGE_BYTES,
            counts: sink::MESSAGE_COUNTS,
            max_entries: sink::MAX_MESSAGE_ENTRIES,
            max_batch_bytes: max,
            max_window: usize::MAX,
        };
        SnsSink {
            inner: AwsSink::new(
                publisher,
                config.options().clone(),
                sink::layout(config.options()),
                limits,
            ),
        }
    }
}

pub(crate) struct SnsPublisher {
    client: aws_sdk_sns::Client,
    topic_arn: String,
    topic_name: String,
    fifo: bool,
    host: Option<String>,
    subscribers: Option<SubscriberCache>,
}

impl SnsPublisher {
    /// Whether the topic has a confirmed subscription (one whose ARN is not
    /// `PendingConfirmation`), page by page until one is found.
    async fn any_subscription(&self) -> Result<bool, AwsError> {
        const OP: &str = "ListSubscriptionsByTopic";
        let mut next = None;
        loop {
            let page = self
                .client
                .list_subscriptions_by_topic()
                .topic_arn(&self.topic_arn)
                .set_next_token(next)
                .send()
                .await
                .map_err(|err| error::sns(OP, err))?;
            let confirmed = page.subscriptions().iter().any(|s| {
                s.subscription_arn()
                    .is_some_and(|arn| arn.starts_with("arn:"))
            });
            if confirmed {
                return Ok(true);
            }
            match page.next_token() {
                Some(token) if !token.is_empty() => next = Some(token.to_owned()),
                _ => return Ok(false),
            }
        }
    }

    fn no_subscriber(&self) -> AwsError {
        AwsError::NoSubscriber {
            topic: self.topic_name.clone(),
        }
    }
}

impl fmt::Debug for SnsPublisher {
    // The client's config holds the credentials provider: never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnsPublisher")
            .field("topic_arn", &self.topic_arn)
            .field("fifo", &self.fifo)
            .field("require_subscriber", &self.subscribers.is_some())
            .finish_non_exhaustive()
    }
}

/// SNS reports no body MD5: a message id confirms.
fn confirm_id(operation: &'static str, message_id: Option<&str>) -> Result<(), AwsError> {
    confirm("sns", operation, String::new, message_id, None)
}

#[async_trait]
impl Publisher for SnsPublisher {
    type Entry = Entry<MessageAttributeValue>;
    const TOO_LARGE_AS_MESSAGE: bool = true;
    const SERVICE: &'static str = "sns";

    fn fifo(&self) -> bool {
        self.fifo
    }

    fn entry(&self, out: Outgoing<'_>, ids: Ids) -> Result<(Self::Entry, usize), AwsError> {
        outgoing::to_entry(out, ids).map(Entry::sized)
    }

    async fn publish(&self, e: Entry<MessageAttributeValue>) -> Result<(), AwsError> {
        const OP: &str = "Publish";
        let out = self
            .client
            .publish()
            .topic_arn(&self.topic_arn)
            .message(e.body)
            .set_message_attributes(Some(e.attributes))
            .set_message_group_id(e.ids.group)
            .set_message_deduplication_id(e.ids.dedup)
            .send()
            .await
            .map_err(|err| error::sns(OP, err))?;
        confirm_id(OP, out.message_id())
    }

    async fn publish_batch(
        &self,
        entries: Vec<Entry<MessageAttributeValue>>,
    ) -> Vec<Result<(), AwsError>> {
        const OP: &str = "PublishBatch";
        let n = entries.len();
        let request: Vec<_> = entries
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                PublishBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message(e.body)
                    .set_message_attributes(Some(e.attributes))
                    .set_message_group_id(e.ids.group)
                    .set_message_deduplication_id(e.ids.dedup)
                    .build()
                    .expect("id and message are set")
            })
            .collect();
        let out = match self
            .client
            .publish_batch()
            .topic_arn(&self.topic_arn)
            .set_publish_batch_request_entries(Some(request))
            .send()
            .await
        {
            Ok(out) => out,
            Err(err) => return fail_all(error::sns(OP, err), n),
        };
        let mut results = BatchResults::new("sns", OP, n);
        for ok in out.successful() {
            results.set(ok.id().unwrap_or_default(), |_| {
                confirm_id(OP, ok.message_id())
            });
        }
        for failed in out.failed() {
            results.failed(failed.id(), failed.code(), failed.message());
        }
        results.finish()
    }

    async fn check(&self) -> Result<(), AwsError> {
        self.client
            .get_topic_attributes()
            .topic_arn(&self.topic_arn)
            .send()
            .await
            .map_err(|err| error::sns("GetTopicAttributes", err))?;
        match self.any_subscription().await? {
            true => Ok(()),
            false => Err(self.no_subscriber()),
        }
    }

    async fn require_subscriber(&self) -> Result<(), Failure> {
        let Some(cache) = &self.subscribers else {
            return Ok(());
        };
        let lookup = || async { self.any_subscription().await.map_err(Failure::from) };
        cache.require(lookup, || self.no_subscriber().into()).await
    }

    fn describe(&self, _subject: &Subject) -> Description {
        let mut d = Description::new("sns", Payload::Message);
        d.host = self.host.clone();
        d.address = Some(self.topic_name.clone());
        let ordering = if self.fifo { "FIFO" } else { "standard" };
        d.bindings.insert(
            "sns".into(),
            serde_json::json!({
                "name": self.topic_name,
                "ordering": {"type": ordering},
                "bindingVersion": "0.1.0",
            }),
        );
        d
    }
}

//! The Pub/Sub sink: Message v1 as `data`, the core attributes, an optional ordering key,
//! published through Google's official client.

use crate::config::DEFAULT_MAX_MESSAGE_BYTES;
use crate::config::{Auth, PubSubConfig};
use crate::error::PubSubError;
use crate::outgoing;
use ankusa_message::template::KeyTemplate;
use ankusa_message::{EmptyValues, Layout, Outgoing};
use ankusa_sink_core::{BatchLimits, Capabilities, Ordering};
use ankusa_sink_core::{
    Check, Ctx, Description, Envelope, Failure, InFlight, Payload, Sink, Subject, async_trait,
};
use ankusa_sink_kit::SubscriberCache;
use ankusa_sink_kit::host_port;
use google_cloud_gax::options::RequestOptionsBuilder as _;
use google_cloud_gax::retry_policy::NeverRetry;
use google_cloud_pubsub::client::{BasePublisher, Publisher, TopicAdmin};
use google_cloud_pubsub::error::PublishError;
use google_cloud_pubsub::model::Message;
use serde_json::json;
use std::fmt;
use std::time::Duration;

/// How many times one delivery re-publishes after finding its ordering key paused by an
/// earlier failure (each time after resuming the key). A paused message was never sent.
const PAUSED_RETRIES: usize = 3;

/// Publishes each hook as one Pub/Sub message on `projects/<project>/topics/<topic>`.
///
/// # Behavior
/// - `data` is the Message v1 JSON; `attributes` are core's
///   ([`Outgoing::attributes`], by [`Attr::as_attr`](ankusa_message::Attr::as_attr),
///   an empty tenant left out); the ordering key is the configured template's rendering
///   (`{tenant_id}` is `""` without a tenant), none when it is absent or renders empty.
/// - `Ok` only once the server answered with this message's id.
/// - data + attribute names and values + ordering key over `max_message_bytes` is refused
///   (permanent) before anything is sent.
/// - With `ctx.batch`, the message goes through a batching publisher (the client's count,
///   byte and delay thresholds); each delivery still gets its own result.
/// - After a failure on an ordering key the key is resumed, so the next delivery on that
///   key is published rather than refused as paused.
/// - The client makes one attempt per delivery (no client-side retries): dispatch owns
///   retries. Every publish and check is bounded by `timeout_ms`.
/// - Pub/Sub accepts and drops a message on a topic without a subscription: `check()` fails
///   such a topic as config, and with `require_subscriber` so does every delivery (nothing
///   is published). The subscriptions are listed at most once per
///   `subscriber_check_interval_s` ([`SubscriberCache`]).
pub struct PubSubSink {
    config: PubSubConfig,
    topic_name: String,
    layout: Layout,
    immediate: Publisher,
    batched: Publisher,
    admin: TopicAdmin,
    subscribers: Option<SubscriberCache>,
}

impl fmt::Debug for PubSubSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PubSubSink")
            .field("topic", &self.topic_name)
            .field(
                "endpoint",
                &ankusa_sink_kit::redact_url_keep_path(self.config.endpoint()),
            )
            .field("auth", &self.config.auth())
            .field(
                "ordering_key",
                &self.config.ordering_key.as_ref().map(KeyTemplate::as_str),
            )
            .field(
                "inline_max_bytes",
                &self.config.message().inline_max_bytes(),
            )
            .field("max_message_bytes", &self.config.max_message_bytes)
            .field("timeout_ms", &self.config.timeout_ms)
            .field("batch", &self.config.batch)
            .field("require_subscriber", &self.config.require_subscriber)
            .finish()
    }
}

impl PubSubSink {
    /// Build the clients from a valid config (no network traffic: connections open on
    /// first use). Must run inside a Tokio runtime: the client's publishers are background
    /// tasks.
    ///
    /// # Errors
    /// [`PubSubError::Client`] when the client cannot be built (for example, no Application
    /// Default Credentials are available).
    pub async fn new(config: PubSubConfig) -> Result<Self, PubSubError> {
        if config.sends_tokens_in_clear() {
            tracing::warn!(
                endpoint = %ankusa_sink_kit::redact_url_keep_path(config.endpoint()),
                "pubsub sink: allow_insecure: Application Default Credentials' bearer tokens \
                 go to the endpoint unencrypted (http://); use https:// to protect them"
            );
        }
        let mut layout = config.message.layout(Payload::Message, EmptyValues::Drop);
        if let Some(key) = &config.ordering_key {
            layout = layout.with_key(key.clone());
        }
        let topic_name = config.topic_name();
        let endpoint = config.endpoint().to_owned();
        let anonymous = config.auth() == Auth::Anonymous;

        let mut base = BasePublisher::builder()
            .with_endpoint(endpoint.clone())
            .with_retry_policy(NeverRetry);
        let mut admin = TopicAdmin::builder()
            .with_endpoint(endpoint)
            .with_retry_policy(NeverRetry);
        if anonymous {
            base = base.with_credentials(anonymous_credentials());
            admin = admin.with_credentials(anonymous_credentials());
        }
        let base = base.build().await.map_err(PubSubError::Client)?;
        let admin = admin.build().await.map_err(PubSubError::Client)?;

        let immediate = base
            .publisher(topic_name.clone())
            .set_message_count_threshold(1)
            .set_delay_threshold(Duration::ZERO)
            .build();
        let batch = &config.batch;
        let batched = base
            .publisher(topic_name.clone())
            .set_message_count_threshold(batch.max_messages.get())
            .set_byte_threshold(batch.max_bytes.get())
            .set_delay_threshold(batch.linger())
            .build();
        let subscribers = config
            .require_subscriber
            .then(|| SubscriberCache::new(config.subscriber_check_interval()));
        Ok(PubSubSink {
            config,
            topic_name,
            layout,
            immediate,
            batched,
            admin,
            subscribers,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &PubSubConfig {
        &self.config
    }

    /// The topic's resource name, `projects/<project>/topics/<topic>`.
    pub fn topic_name(&self) -> &str {
        &self.topic_name
    }

    /// Whether the topic has at least one subscription (one page of one name is enough).
    async fn any_subscription(&self) -> Result<bool, PubSubError> {
        let timeout = self.config.timeout();
        let list = self
            .admin
            .list_topic_subscriptions()
            .set_topic(self.topic_name.clone())
            .set_page_size(1)
            .with_attempt_timeout(timeout)
            .send();
        match tokio::time::timeout(timeout, list).await {
            Ok(Ok(page)) => Ok(!page.subscriptions.is_empty()),
            Ok(Err(e)) if !e.is_timeout() => Err(PubSubError::ListSubscriptions(e)),
            Ok(Err(_)) | Err(_) => Err(PubSubError::SubscribersTimeout(timeout.as_millis())),
        }
    }

    /// With `require_subscriber`, refuse (config) while the topic has no subscription.
    async fn require_subscriber(&self) -> Result<(), Failure> {
        let Some(cache) = &self.subscribers else {
            return Ok(());
        };
        let lookup = || async { self.any_subscription().await.map_err(Failure::from) };
        let nobody = || PubSubError::NoSubscriber(self.topic_name.clone()).into();
        cache.require(lookup, nobody).await
    }

    /// Publish `msg`, resuming its ordering key after any failure so the key never stays
    /// paused; a publish refused because the key was paused by an earlier failure is
    /// resumed and sent again (it never left the client).
    async fn publish(&self, publisher: &Publisher, msg: Message) -> Result<String, PublishError> {
        if msg.ordering_key.is_empty() {
            // Without a key nothing pauses: one publish, no copy kept for a re-send.
            return publisher.publish(msg).await;
        }
        let key = msg.ordering_key.clone();
        let mut paused = 0;
        loop {
            match publisher.publish(msg.clone()).await {
                Ok(id) => return Ok(id),
                Err(PublishError::OrderingKeyPaused)
                    if !key.is_empty() && paused < PAUSED_RETRIES =>
                {
                    paused += 1;
                    publisher.resume_publish(key.clone());
                }
                Err(e) => {
                    if !key.is_empty() {
                        publisher.resume_publish(key);
                    }
                    return Err(e);
                }
            }
        }
    }
}

fn anonymous_credentials() -> google_cloud_auth::credentials::Credentials {
    google_cloud_auth::credentials::anonymous::Builder::new().build()
}

#[async_trait]
impl Sink for PubSubSink {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let out = Outgoing::new(env, ctx, &self.layout)?;
        // A value Pub/Sub refuses fails this hook alone, before it can join a batch.
        outgoing::check(&out).map_err(|u| Failure::from(u).with_may_have_landed(Some(false)))?;
        // What Pub/Sub counts against its limit: data + attribute names and values + key.
        let size = out.body().len() + out.attribute_bytes() + out.key().map_or(0, str::len);
        let max = self.config.max_message_bytes.get();
        if size > max {
            return Err(PubSubError::TooLarge { size, max }.into());
        }
        self.require_subscriber().await?;
        let msg = outgoing::to_message(out);
        let publisher = if ctx.batch {
            &self.batched
        } else {
            &self.immediate
        };
        let timeout = self.config.timeout();
        let err = match tokio::time::timeout(timeout, self.publish(publisher, msg)).await {
            Ok(Ok(id)) if !id.is_empty() => return Ok(()),
            Ok(Ok(_)) => PubSubError::NoMessageId,
            Ok(Err(e)) => PubSubError::Publish(e),
            Err(_) => PubSubError::Timeout(timeout.as_millis()),
        };
        Err(err.into())
    }

    /// Stored (a message id); the layout's inline threshold (`None` for CloudEvents: they
    /// travel inline); `max_message_bytes` of data, attributes and ordering key; in order
    /// per ordering key when one is configured; batched, within the batch thresholds;
    /// Application Default Credentials or anonymous (the emulator).
    ///
    /// The pipeline window is [`InFlight::PIPELINE`]: the client batches what is
    /// outstanding (up to `batch.max_messages` per request, several requests at once), so
    /// the sink is fast only when many deliveries are in flight: against the emulator
    /// 1,024 outstanding ran 8x the old 32 shared slots, and 4,096 no faster.
    fn capabilities(&self) -> Capabilities {
        let c = &self.config;
        let max = c.max_message_bytes.get();
        let mut caps = Capabilities::new(true, self.layout.inline_max_bytes())
            .with_in_flight(InFlight::PIPELINE)
            .with_max_message(
                max,
                "data + attribute names and values + ordering key",
                Capabilities::limit_source(max, DEFAULT_MAX_MESSAGE_BYTES.get()),
            )
            .with_batch(Some(BatchLimits {
                max_messages: u64::from(c.batch.max_messages.get()),
                max_bytes: u64::from(c.batch.max_bytes.get()),
                linger_ms: c.batch.linger_ms,
            }));
        if let Some(key) = &c.ordering_key {
            caps = caps.with_ordering(Ordering::PerKey {
                key: key.as_str().to_owned(),
            });
        }
        let mut auth = vec![match c.auth() {
            Auth::ApplicationDefault => "application_default",
            _ => "anonymous",
        }];
        if c.endpoint().starts_with("https://") {
            auth.push("tls");
        }
        caps.with_auth(auth)
    }

    fn describe(&self, _subject: &Subject) -> Option<Description> {
        let payload = self.layout.payload();
        let mut d = Description::new("googlepubsub", payload);
        d.host = host_port(self.config.endpoint());
        d.address = Some(self.topic_name.clone());
        // No channel binding: its `schemaSettings` is required and a topic of Message v1
        // has no Pub/Sub schema to name. The ordering key is the message's.
        match &self.config.ordering_key {
            Some(k) if k.is_static() => {
                d.message_bindings.insert(
                    "googlepubsub".into(),
                    json!({"orderingKey": k.as_str(), "bindingVersion": "0.2.0"}),
                );
            }
            Some(_) => d.computed.push("ordering_key".into()),
            None => {}
        }
        Some(d)
    }

    /// Get the topic, then list its subscriptions, through the admin API; publishes
    /// nothing, creates nothing. A topic without a subscription fails as config: what is
    /// published to it is dropped.
    async fn check(&self) -> Result<Check, Failure> {
        let timeout = self.config.timeout();
        let get = self
            .admin
            .get_topic()
            .set_topic(self.topic_name.clone())
            .with_attempt_timeout(timeout)
            .send();
        // The client's attempt timeout and this bound are the same: whichever fires, the
        // reason says the check's get-topic timed out (not a publish: none was made).
        let err = match tokio::time::timeout(timeout, get).await {
            Ok(Ok(_)) => {
                return match self.any_subscription().await? {
                    true => Ok(Check::Passed),
                    false => Err(PubSubError::NoSubscriber(self.topic_name.clone()).into()),
                };
            }
            Ok(Err(e)) if !e.is_timeout() => PubSubError::Admin(e),
            Ok(Err(_)) | Err(_) => PubSubError::CheckTimeout(timeout.as_millis()),
        };
        Err(err.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigError;
    use ankusa_sink_testkit::support::LogCapture;

    fn emulator_config() -> PubSubConfig {
        PubSubConfig::new("proj", "hooks")
            .and_then(|c| c.with_endpoint("http://127.0.0.1:8085"))
            .unwrap()
    }

    #[tokio::test]
    async fn describe_names_the_topic_and_a_static_key() {
        let sink = PubSubSink::new(emulator_config().with_ordering_key("fixed").unwrap())
            .await
            .unwrap();
        let d = sink.describe(&Subject::new("s", None)).unwrap();
        assert_eq!(d.protocol, "googlepubsub");
        assert_eq!(d.host.as_deref(), Some("127.0.0.1:8085"));
        assert_eq!(d.address.as_deref(), Some("projects/proj/topics/hooks"));
        assert_eq!(d.message_bindings["googlepubsub"]["orderingKey"], "fixed");
        assert!(
            d.bindings.is_empty(),
            "no channel binding: its schemaSettings is required"
        );
        assert!(d.computed.is_empty());
        assert!(sink.capabilities().batched);
        assert!(sink.capabilities().durable);
        assert_eq!(sink.capabilities().inline_max_bytes.unwrap().get(), 65_536);

        let computed = PubSubSink::new(emulator_config().with_ordering_key("{tenant_id}").unwrap())
            .await
            .unwrap();
        let d = computed.describe(&Subject::new("s", None)).unwrap();
        assert_eq!(d.computed, vec!["ordering_key".to_owned()]);
        assert!(d.message_bindings.is_empty());
    }

    #[tokio::test]
    async fn application_default_over_cleartext_is_refused_or_warned() {
        let remote = |allow| {
            PubSubConfig::new("proj", "hooks")
                .and_then(|c| c.with_allow_insecure(allow))
                .and_then(|c| c.with_endpoint("http://pubsub.internal.example:8085"))
                .and_then(|c| c.with_auth(Auth::ApplicationDefault))
        };
        assert_eq!(remote(false).unwrap_err(), ConfigError::Insecure);

        let logs = LogCapture::for_targets(&["ankusa_sink_pubsub"]);
        let guard = logs.set_default();
        // Building may fail where no Application Default Credentials exist; the warning
        // comes first either way.
        let _ = tokio::time::timeout(
            Duration::from_secs(10),
            PubSubSink::new(remote(true).unwrap()),
        )
        .await;
        let _ = PubSubSink::new(emulator_config()).await.unwrap();
        drop(guard);
        let lines: Vec<String> = logs.lines().iter().map(ToString::to_string).collect();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].starts_with("WARN "), "{lines:?}");
        assert!(lines[0].contains("unencrypted"), "{lines:?}");
    }
}

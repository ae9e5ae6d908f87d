//! The Kafka sink: one idempotent, `acks=all` producer shared by every delivery.

use crate::client::{Monitor, Shared, create_producer};
use crate::config::DEFAULT_MAX_RECORD_BYTES;
use crate::config::KafkaConfig;
use crate::error::{
    KafkaError, Renewal, TopicState, asks_for_the_topic, may_be_explained, renewal,
};
use crate::outgoing::{check, to_record};
use crate::property_rules::RECORD_OVERHEAD;
use crate::replication::{self, Replication};
use ankusa_message::template::{KeyTemplate, Placeholder, TemplateFields};
use ankusa_message::{EmptyValues, Layout, Outgoing};
use ankusa_sink_core::{Capabilities, Ordering};
use ankusa_sink_core::{
    Check, Ctx, Description, Envelope, Failure, InFlight, Payload, Sink, Subject, async_trait,
};
use rdkafka::error::{KafkaError as RdKafkaError, RDKafkaErrorCode};
use rdkafka::metadata::Metadata;
use rdkafka::producer::{Producer, PurgeConfig};
use serde_json::json;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long past the produce timeout the sink still waits for librdkafka's delivery
/// report before giving up on it (librdkafka reports a timed-out record on its own
/// schedule, normally well within this).
const REPORT_GRACE: Duration = Duration::from_secs(5);

/// How long one answer about the topic (present, missing, unknown) is reused, so a burst of
/// failing deliveries asks the cluster once.
const TOPIC_ANSWER_TTL: Duration = Duration::from_secs(1);

/// The producer in use, with a generation so that only one delivery replaces it.
struct Current {
    generation: u64,
    producer: Arc<Shared>,
}

/// Delivers hooks to one Kafka topic.
///
/// # Behavior
/// - One librdkafka producer per sink, shared by every delivery: `acks=all`,
///   `enable.idempotence=true`, the Java client's `murmur2_random` partitioner, no topic
///   auto-creation. `Ok` only after the delivery report says every in-sync replica has the
///   record.
/// - The record: value = Message v1 (`ankusa_message::Outgoing`), key from the key template
///   (default `<tenant>/<source>`, `/<source>` without a tenant), timestamp =
///   `received_at`, headers `ankusa_id`, `ankusa_source_id`, `ankusa_tenant_id` (`""`
///   without a tenant), `ankusa_message_version` `1`, `ankusa_idempotency_key`,
///   `content_type` `application/json`, then `ankusa_dedupe_key` and `ankusa_replay_id` when
///   set.
/// - Value + key over `max_record_bytes` is permanent and nothing is produced.
/// - Errors are [`KafkaError`]s, classified by the table in the crate README. A record that
///   times out while librdkafka reports a config-class client error (a refused SASL login)
///   is config.
///   `UnknownTopicOrPartition` is config only when a metadata refresh confirms the topic is
///   missing, transient otherwise (a restarting broker says it of topics it has not loaded).
/// - After a fatal error, a fenced producer id or epoch, lost sequence state, or a
///   timed-out record, the producer is replaced (once per failing producer): records
///   queued on the old one fail transient, later deliveries use the new one, with a fresh
///   producer id.
/// - When librdkafka reports every broker down and a metadata probe gets no answer,
///   deliveries fail at once (transient, "no broker reachable") instead of each waiting the
///   produce timeout; the probe keeps asking in the background and deliveries resume at
///   its first answer.
pub struct KafkaSink {
    config: KafkaConfig,
    layout: Layout,
    monitor: Arc<Monitor>,
    current: Mutex<Current>,
    /// The last answer about the topic, and when it came.
    topic_answer: Mutex<Option<(Instant, TopicState)>>,
}

impl fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSink")
            .field("bootstrap_servers", &self.config.bootstrap_servers)
            .field("topic", &self.config.topic)
            .field("key", &self.config.key.as_str())
            .finish_non_exhaustive()
    }
}

impl KafkaSink {
    /// Create the sink's producer from a valid `config`. Connects lazily: an unreachable
    /// cluster is a delivery failure, not an error here.
    ///
    /// # Errors
    /// librdkafka refused to create the producer (a TLS file it cannot read, say):
    /// [`KafkaError::Create`], its message scrubbed of every secret.
    pub fn new(config: KafkaConfig) -> Result<Self, KafkaError> {
        for warning in config.insecure_settings() {
            tracing::warn!(topic = %config.topic, client = %config.client_id, "{warning}");
        }
        let monitor = Arc::new(Monitor::new(&config));
        let producer = create_producer(&config, &monitor)?;
        monitor.set_current(&producer);
        let layout = config
            .message
            .layout(Payload::Message, EmptyValues::Keep)
            .with_key(config.key.clone());
        Ok(KafkaSink {
            config,
            layout,
            monitor,
            current: Mutex::new(Current {
                generation: 0,
                producer,
            }),
            topic_answer: Mutex::new(None),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &KafkaConfig {
        &self.config
    }

    fn producer(&self) -> (u64, Arc<Shared>) {
        let c = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        (c.generation, Arc::clone(&c.producer))
    }

    /// Replace the producer of `generation`, unless a delivery already did. After a fatal
    /// or fenced producer, the records still queued on the old one are purged (they fail
    /// transient at once rather than being refused one by one).
    fn renew(&self, generation: u64, why: Renewal) {
        let old = {
            let mut c = self.current.lock().unwrap_or_else(PoisonError::into_inner);
            if c.generation != generation {
                return;
            }
            match create_producer(&self.config, &self.monitor) {
                Ok(p) => {
                    self.monitor.set_current(&p);
                    c.generation += 1;
                    std::mem::replace(&mut c.producer, p)
                }
                Err(e) => {
                    tracing::error!(error = %e, "kafka producer could not be replaced");
                    return;
                }
            }
        };
        tracing::warn!(
            topic = %self.config.topic,
            client = %self.config.client_id,
            reason = why.as_str(),
            "replaced the kafka producer"
        );
        if why != Renewal::TimedOut {
            old.get()
                .purge(PurgeConfig::default().queue().non_blocking());
        }
    }

    /// `check()`'s question about `acks=all`: see [`replication::judge`].
    async fn check_replication(&self, brokers: usize, timeout: Duration) -> Result<(), KafkaError> {
        let min = replication::min_insync_replicas(&self.config, &self.monitor, timeout).await;
        let topic = &self.config.topic;
        match replication::judge(brokers, min) {
            Replication::Replicated => Ok(()),
            Replication::OneBroker {
                min_insync_replicas,
            } => {
                tracing::warn!(
                    %topic,
                    min_insync_replicas = min_insync_replicas.map_or(-1, i64::from),
                    "kafka sink: a one-broker cluster: an acks=all write rests on that broker \
                     alone (durable only as far as its disk is)"
                );
                Ok(())
            }
            Replication::NotAsked => {
                tracing::warn!(
                    %topic,
                    brokers,
                    "kafka sink: check could not ask the topic's min.insync.replicas \
                     (describe configs refused or unanswered): acks=all may rest on one replica"
                );
                Ok(())
            }
            Replication::Weak {
                min_insync_replicas,
            } => Err(KafkaError::WeakReplication {
                topic: topic.clone(),
                min_insync_replicas,
                brokers,
            }),
        }
    }

    /// Renew the producer if it is fatal (the error callback said so) before using it.
    fn usable_producer(&self) -> (u64, Arc<Shared>) {
        let (generation, shared) = self.producer();
        if !shared.flags().fatal() {
            return (generation, shared);
        }
        self.renew(generation, Renewal::Fatal);
        self.producer()
    }

    /// What a metadata refresh says about the topic, reusing an answer under a second old.
    async fn topic_state(&self, shared: &Arc<Shared>) -> TopicState {
        let cached = *self
            .topic_answer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((at, state)) = cached
            && at.elapsed() < TOPIC_ANSWER_TTL
        {
            return state;
        }
        let held = Arc::clone(shared);
        let topic = self.config.topic.clone();
        let timeout = self.monitor.probe_timeout();
        let state = tokio::task::spawn_blocking(move || {
            held.get()
                .client()
                .fetch_metadata(Some(&topic), timeout)
                .map(|md| topic_state_of(&md, &topic))
        })
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or(TopicState::Unknown);
        *self
            .topic_answer
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), state));
        state
    }

    /// The error of a failed produce (or metadata) call, after acting on it: the producer
    /// replaced when it is fatal or fenced; for an unknown-topic code, what a metadata
    /// refresh says about the topic; for a timed-out record, the config-class client error
    /// seen since `since`.
    async fn error(
        &self,
        err: &RdKafkaError,
        during: &'static str,
        since: Instant,
        generation: u64,
        shared: &Arc<Shared>,
    ) -> KafkaError {
        let code = err.rdkafka_error_code();
        let fatal = shared.flags().fatal() || shared.get().client().fatal_error().is_some();
        if let Some(why) = renewal(code, fatal) {
            self.renew(generation, why);
        }
        let Some(code) = code else {
            return KafkaError::from_client(err, during);
        };
        let topic = if asks_for_the_topic(code) {
            let (_, current) = self.producer();
            Some((self.config.topic.as_str(), self.topic_state(&current).await))
        } else {
            None
        };
        let cause = if may_be_explained(code) {
            self.monitor.last_error.config_cause_since(since)
        } else {
            None
        };
        KafkaError::of_code(during, code, topic, cause)
    }

    /// When a client-level error counts for a request that started at `started`: the
    /// connection may have been refused just before it, during librdkafka's reconnect
    /// back-off.
    fn window_start(&self, started: Instant) -> Instant {
        started
            .checked_sub(self.config.produce_timeout())
            .unwrap_or(started)
    }
}

/// What a metadata answer says about `topic`: missing when a broker answered without it or
/// with an unknown-topic error, present with partitions, unknown otherwise.
fn topic_state_of(md: &Metadata, topic: &str) -> TopicState {
    if md.brokers().is_empty() {
        return TopicState::Unknown;
    }
    match md.topics().iter().find(|t| t.name() == topic) {
        None => TopicState::Missing,
        Some(t) => match t.error().map(RDKafkaErrorCode::from) {
            Some(code) if asks_for_the_topic(code) => TopicState::Missing,
            Some(_) => TopicState::Unknown,
            None if t.partitions().is_empty() => TopicState::Missing,
            None => TopicState::Present,
        },
    }
}

#[async_trait]
impl Sink for KafkaSink {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let out = Outgoing::new(env, ctx, &self.layout)?;
        let size = out.body().len() + out.key().map_or(0, str::len);
        let max = self.config.max_record_bytes.get();
        if size > max {
            return Err(KafkaError::RecordTooLarge { size, max }.into());
        }
        // The headers too, as librdkafka counts them against `message.max.bytes` (set so in
        // properties.rs): this hook fails alone, named.
        check(&out, (max + RECORD_OVERHEAD).max(1_000_000))
            .map_err(|u| Failure::from(u).with_may_have_landed(Some(false)))?;
        if let Some(down) = self.monitor.reach.down_for(Instant::now()) {
            return Err(KafkaError::BrokersDown {
                for_ms: down.as_millis(),
            }
            .into());
        }
        let (generation, shared) = self.usable_producer();
        shared.router().start_here();
        let started = Instant::now();
        let since = self.window_start(started);
        let (tx, report) = tokio::sync::oneshot::channel();
        let record = to_record(&out, &self.config.topic, env.received_at(), Box::new(tx));
        if let Err((e, _record)) = shared.get().send(record) {
            return Err(self
                .error(&e, "enqueue", since, generation, &shared)
                .await
                .into());
        }
        // librdkafka copied key and value (RD_KAFKA_MSG_F_COPY): free ours before waiting
        // for the report rather than holding them for the whole round trip.
        drop(out);
        let wait = self.config.produce_timeout() + REPORT_GRACE;
        let err = match tokio::time::timeout(wait, report).await {
            Ok(Ok(Ok(()))) => {
                self.monitor.reach.reachable();
                return Ok(());
            }
            Ok(Ok(Err((e, landed)))) => {
                let err = self.error(&e, "produce", since, generation, &shared).await;
                return Err(Failure::from(err).with_may_have_landed(landed));
            }
            Ok(Err(_canceled)) => KafkaError::ReportDropped,
            Err(_elapsed) => KafkaError::NoDeliveryReport {
                waited_ms: wait.as_millis(),
            },
        };
        Err(err.into())
    }

    /// Stored (`acks=all`); the layout's inline threshold (`None` for CloudEvents: they
    /// travel inline); `max_record_bytes` of value + key; in order per key (the Java
    /// partitioner sends a key to one partition, the idempotent producer keeps its order);
    /// the SASL mechanism and TLS configured. Its pipeline window is
    /// [`InFlight::PIPELINE`]: librdkafka batches what is queued (linger, then one produce
    /// request per batch), so the sink is fast only when many records are outstanding.
    fn capabilities(&self) -> Capabilities {
        let c = &self.config;
        let max = c.max_record_bytes.get();
        let mut auth = Vec::new();
        if let Some(sasl) = &c.sasl {
            auth.push(format!(
                "sasl_{}",
                sasl.mechanism.as_str().to_ascii_lowercase()
            ));
        }
        if let Some(tls) = &c.tls {
            auth.push(if tls.certificate_location.is_some() {
                "mutual_tls".to_owned()
            } else {
                "tls".to_owned()
            });
        }
        Capabilities::new(true, self.layout.inline_max_bytes())
            .with_in_flight(InFlight::PIPELINE)
            .with_max_message(
                max,
                "value + key",
                Capabilities::limit_source(max, DEFAULT_MAX_RECORD_BYTES.get()),
            )
            .with_ordering(Ordering::PerKey {
                key: c.key.as_str().to_owned(),
            })
            .with_auth(auth)
    }

    fn describe(&self, subject: &Subject) -> Option<Description> {
        let payload = self.layout.payload();
        let mut d = Description::new("kafka", payload);
        d.host = Some(self.config.bootstrap_servers.join(","));
        d.address = Some(self.config.topic.clone());
        d.bindings.insert(
            "kafka".into(),
            json!({
                "topic": self.config.topic,
                "bindingVersion": "0.5.0",
            }),
        );
        d.message_bindings.insert(
            "kafka".into(),
            json!({
                "key": key_schema(&self.config.key, subject),
                "bindingVersion": "0.5.0",
            }),
        );
        if !self.config.key.is_static() {
            d.computed.push("key".into());
        }
        Some(d)
    }

    /// Fetch the topic's metadata, then ask its `min.insync.replicas` (describe configs):
    /// the sink writes `acks=all` and declares itself durable, which means little when the
    /// leader alone may acknowledge. Under 2 on a cluster of several brokers fails config
    /// ([`KafkaError::WeakReplication`]); on a one-broker cluster, or when the cluster
    /// will not say, it is reported (a WARN) and passes. Produces nothing, creates nothing.
    async fn check(&self) -> Result<Check, Failure> {
        let (generation, shared) = self.usable_producer();
        let topic = self.config.topic.clone();
        let timeout = self.config.produce_timeout();
        let started = Instant::now();
        let since = self.window_start(started);
        let held = Arc::clone(&shared);
        let fetched = tokio::task::spawn_blocking(move || {
            held.get().client().fetch_metadata(Some(&topic), timeout)
        })
        .await
        .map_err(|_| KafkaError::Client("metadata: task failed".into()))?;
        let metadata = match fetched {
            Ok(md) => md,
            Err(e) => {
                return Err(self
                    .error(&e, "metadata", since, generation, &shared)
                    .await
                    .into());
            }
        };
        self.monitor.reach.reachable();
        let found = metadata
            .topics()
            .iter()
            .find(|t| t.name() == self.config.topic);
        let code = found.and_then(|t| t.error()).map(RDKafkaErrorCode::from);
        let err = match (topic_state_of(&metadata, &self.config.topic), code) {
            (TopicState::Present, _) => {
                let brokers = metadata.brokers().len();
                drop(metadata);
                self.check_replication(brokers, timeout).await?;
                return Ok(Check::Passed);
            }
            (TopicState::Missing, _) => KafkaError::TopicMissing {
                topic: self.config.topic.clone(),
            },
            (TopicState::Unknown, code) => KafkaError::Code {
                during: "metadata",
                code: code.unwrap_or(RDKafkaErrorCode::BrokerNotAvailable),
            },
        };
        Err(err.into())
    }
}

/// The AsyncAPI schema of the record key for hooks of `subject`.
fn key_schema(key: &KeyTemplate, subject: &Subject) -> serde_json::Value {
    if let Some(k) = key.render_for(&subject.source_id, subject.tenant_id.as_deref()) {
        return json!({"type": "string", "const": k});
    }
    if key.uses(Placeholder::Id) || key.uses(Placeholder::DedupeKey) {
        return json!({
            "type": "string",
            "description": format!("Computed per hook from the template {:?}.", key.as_str()),
        });
    }
    // The tenant varies per hook: a pattern with the tenant's grammar (empty for a hook
    // without a tenant).
    let marker = "\u{0}";
    let sample = key.render_fields(&TemplateFields {
        source_id: &subject.source_id,
        tenant_id: Some(marker),
        ..TemplateFields::default()
    });
    let pattern = sample
        .split(marker)
        .map(regex_escape)
        .collect::<Vec<_>>()
        .join("[A-Za-z0-9_-]{0,64}");
    json!({"type": "string", "pattern": format!("^{pattern}$")})
}

fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.^$|?*+()[]{}/".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_KEY;
    use ankusa_message::template::AbsentTenant;

    fn key(template: &str) -> KeyTemplate {
        KeyTemplate::parse(template, AbsentTenant::Empty).unwrap()
    }

    #[test]
    fn key_schemas() {
        let default = key(DEFAULT_KEY);
        assert_eq!(
            key_schema(&default, &Subject::new("src.a", Some("t1".into()))),
            json!({"type":"string","const":"t1/src.a"})
        );
        assert_eq!(
            key_schema(&default, &Subject::new("src.a", None)),
            json!({"type":"string","pattern":"^[A-Za-z0-9_-]{0,64}\\/src\\.a$"})
        );
        let fixed = key("k");
        assert_eq!(
            key_schema(&fixed, &Subject::new("s", None)),
            json!({"type":"string","const":"k"})
        );
        let per_hook = key("{id}");
        let s = key_schema(&per_hook, &Subject::new("s", None));
        assert!(s["description"].as_str().unwrap().contains("{id}"), "{s}");
        let by_source = key("{source_id}:x");
        assert_eq!(
            key_schema(&by_source, &Subject::new("s", None)),
            json!({"type":"string","const":"s:x"})
        );
    }
}

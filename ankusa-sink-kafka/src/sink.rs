//! The Kafka sink: one idempotent, `acks=all` producer shared by every delivery.

use crate::config::{ConfigError, DEFAULT_KEY, KafkaConfig, KeyTemplate};
use crate::error::{KafkaFailure, Verdict, client_failure, verdict};
use ankusa_sink_core::{
    Check, Ctx, Description, Envelope, Failure, Payload, Sink, Subject, async_trait, attributes,
    message,
};
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use serde_json::json;
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long past the produce timeout the sink still waits for librdkafka's delivery
/// report before giving up on it (librdkafka reports a timed-out record on its own
/// schedule, normally well within this).
const REPORT_GRACE: Duration = Duration::from_secs(5);

/// The last config-class client error librdkafka reported (a refused login, an unsupported
/// mechanism), so a record that could only time out can say why. librdkafka follows such an
/// error with transport ones (`AllBrokersDown`), so it is kept apart from them.
#[derive(Debug, Default)]
struct LastError(Mutex<Option<(RDKafkaErrorCode, Instant)>>);

impl LastError {
    fn record(&self, code: RDKafkaErrorCode) {
        if verdict(code) == Verdict::Config {
            *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some((code, Instant::now()));
        }
    }

    /// The config-class client error seen at or after `since`.
    fn config_cause_since(&self, since: Instant) -> Option<RDKafkaErrorCode> {
        let last = *self.0.lock().unwrap_or_else(PoisonError::into_inner);
        last.filter(|(_, at)| *at >= since).map(|(code, _)| code)
    }
}

/// Routes librdkafka's logs and client errors to `tracing`, and remembers the last error.
#[derive(Clone)]
struct SinkContext {
    last_error: Arc<LastError>,
}

impl ClientContext for SinkContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => tracing::error!(target: "librdkafka", fac, "{log_message}"),
            RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", fac, "{log_message}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", fac, "{log_message}")
            }
            RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", fac, "{log_message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if let Some(code) = error.rdkafka_error_code() {
            self.last_error.record(code);
        }
        tracing::warn!(target: "librdkafka", error = %error, "{reason}");
    }
}

type Producer_ = FutureProducer<SinkContext>;

/// The one librdkafka producer of a generation, shared by its deliveries. Dropping a
/// producer purges its queue, waits up to 500 ms for the purge reports and joins its
/// threads, so the last holder hands that to a thread of its own instead of stalling an
/// async worker.
struct Shared(Option<Producer_>);

impl Shared {
    fn get(&self) -> &Producer_ {
        self.0.as_ref().expect("present until dropped")
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            // If no thread can be had, drop it here.
            let _ = std::thread::Builder::new()
                .name("ankusa-kafka-drop".into())
                .spawn(move || drop(p));
        }
    }
}

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
/// - The record: value = Message v1 ([`message::encode`]), key from the key template
///   (default `<tenant>/<source>`, `/<source>` without a tenant), timestamp =
///   `received_at`, headers `ankusa_id`, `ankusa_source_id`, `ankusa_tenant_id` (`""`
///   without a tenant), `ankusa_message_version` `1`, `ankusa_idempotency_key`,
///   `content_type` `application/json`, then `ankusa_dedupe_key` and `ankusa_replay_id` when
///   set.
/// - Value + key over `max_record_bytes` is permanent and nothing is produced.
/// - Errors follow [`verdict`](crate::verdict). A record that times out while librdkafka
///   reports a config-class client error (a refused SASL login) is config. After a fatal
///   idempotence error or a timed-out record the producer is replaced (once per failing
///   producer), so the retry starts with a fresh producer id.
pub struct KafkaSink {
    config: KafkaConfig,
    key: KeyTemplate,
    last_error: Arc<LastError>,
    current: Mutex<Current>,
}

impl fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSink")
            .field("bootstrap_servers", &self.config.bootstrap_servers)
            .field("topic", &self.config.topic)
            .field("key", &self.key.as_str())
            .finish_non_exhaustive()
    }
}

impl KafkaSink {
    /// Validate `config` and create the sink's producer. Connects lazily: an unreachable
    /// cluster is a delivery failure, not an error here.
    pub fn new(config: KafkaConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let key = KeyTemplate::parse(config.key.as_deref().unwrap_or(DEFAULT_KEY))?;
        check_properties(&config)?;
        let last_error = Arc::new(LastError::default());
        let producer = create_producer(&config, &last_error)?;
        Ok(KafkaSink {
            config,
            key,
            last_error,
            current: Mutex::new(Current {
                generation: 0,
                producer: Arc::new(Shared(Some(producer))),
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &KafkaConfig {
        &self.config
    }

    /// The key template in use.
    pub fn key(&self) -> &KeyTemplate {
        &self.key
    }

    fn producer(&self) -> (u64, Arc<Shared>) {
        let c = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        (c.generation, Arc::clone(&c.producer))
    }

    /// Replace the producer of `generation` (a fatal error, a timed-out record), unless a
    /// delivery already did.
    fn renew(&self, generation: u64) {
        let mut c = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if c.generation != generation {
            return;
        }
        match create_producer(&self.config, &self.last_error) {
            Ok(p) => {
                tracing::warn!(topic = %self.config.topic, "replaced the kafka producer after a fatal error or a timed-out record");
                c.producer = Arc::new(Shared(Some(p)));
                c.generation += 1;
            }
            Err(e) => tracing::error!(error = %e, "kafka producer could not be replaced"),
        }
    }

    /// The failure of a produce error code, explained by a config-class client error when
    /// the record could only time out.
    fn failure(
        &self,
        err: &KafkaError,
        during: &'static str,
        attempt: u32,
        since: Instant,
        generation: u64,
        producer: &Producer_,
    ) -> Failure {
        let code = err.rdkafka_error_code();
        // A fatal idempotence error leaves the producer unusable. A record that timed out
        // may be stuck behind producer state the broker lost (a restarted in-memory broker,
        // an expired producer id), which librdkafka's local epoch bump cannot repair. Both
        // times a fresh producer (a new producer id) lets the retry start clean.
        if producer.client().fatal_error().is_some()
            || code == Some(RDKafkaErrorCode::MessageTimedOut)
        {
            self.renew(generation);
        }
        let Some(code) = code else {
            return client_failure(err, during, attempt);
        };
        if matches!(
            code,
            RDKafkaErrorCode::MessageTimedOut
                | RDKafkaErrorCode::OperationTimedOut
                | RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::BrokerTransportFailure
        ) && let Some(cause) = self.last_error.config_cause_since(since)
        {
            return Verdict::Config.failure(
                attempt,
                KafkaFailure::Explained {
                    during,
                    code,
                    cause,
                },
            );
        }
        verdict(code).failure(attempt, KafkaFailure::Code { during, code })
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

/// Let librdkafka judge every property (names and values) without creating a client, so a
/// refused one is named; its value never reaches the error.
fn check_properties(config: &KafkaConfig) -> Result<(), ConfigError> {
    match config.client_config().create_native_config() {
        Ok(_) => Ok(()),
        Err(KafkaError::ClientConfig(_, why, name, _value)) => Err(ConfigError::Property {
            why: (!crate::config::is_sensitive_property(&name)).then(|| scrub(config, &why)),
            name,
        }),
        Err(e) => Err(ConfigError::Client(scrub(config, &e.to_string()))),
    }
}

fn create_producer(
    config: &KafkaConfig,
    last_error: &Arc<LastError>,
) -> Result<Producer_, ConfigError> {
    config
        .client_config()
        .create_with_context(SinkContext {
            last_error: Arc::clone(last_error),
        })
        .map_err(|e| ConfigError::Client(scrub(config, &e.to_string())))
}

/// `text` with every secret of `config` replaced.
fn scrub(config: &KafkaConfig, text: &str) -> String {
    config.secrets().into_iter().fold(text.to_owned(), |t, s| {
        t.replace(s, ankusa_sink_core::REDACTED)
    })
}

/// The record headers: [`attributes`] in their order, with `ankusa_tenant_id` present
/// (`""`) even without a tenant.
fn headers(env: &Envelope, ctx: &Ctx) -> OwnedHeaders {
    let attrs = attributes(env, ctx);
    let mut h = OwnedHeaders::new_with_capacity(attrs.len() + 1);
    for (name, value) in &attrs {
        if *name == "ankusa_message_version" && env.tenant_id().is_none_or(str::is_empty) {
            h = h.insert(Header {
                key: "ankusa_tenant_id",
                value: Some(""),
            });
        }
        h = h.insert(Header {
            key: name,
            value: Some(value.as_str()),
        });
    }
    h
}

#[async_trait]
impl Sink for KafkaSink {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let value = message::encode(env, ctx, self.inline_max_bytes())?;
        let key = self.key.render(env);
        let size = value.len() + key.len();
        let max = self.config.max_record_bytes.get();
        if size > max {
            return Err(Failure::permanent(KafkaFailure::RecordTooLarge {
                size,
                max,
            }));
        }
        let record = FutureRecord::to(&self.config.topic)
            .payload(&value)
            .key(&key)
            .timestamp(env.received_at())
            .headers(headers(env, ctx));
        let (generation, shared) = self.producer();
        let producer = shared.get();
        let started = Instant::now();
        let since = self.window_start(started);
        let report = match producer.send_result(record) {
            Ok(report) => report,
            Err((e, _)) => {
                return Err(self.failure(
                    &e,
                    "enqueue",
                    ctx.attempt(),
                    since,
                    generation,
                    producer,
                ));
            }
        };
        // librdkafka copied key and value (RD_KAFKA_MSG_F_COPY): free ours before waiting
        // for the report rather than holding them for the whole round trip.
        drop((value, key));
        let wait = self.config.produce_timeout() + REPORT_GRACE;
        match tokio::time::timeout(wait, report).await {
            Ok(Ok(Ok(_delivery))) => Ok(()),
            Ok(Ok(Err((e, _message)))) => {
                Err(self.failure(&e, "produce", ctx.attempt(), since, generation, producer))
            }
            Ok(Err(_canceled)) => Err(Failure::transient(KafkaFailure::Client(
                "the producer dropped the delivery report".into(),
            ))),
            Err(_elapsed) => Err(Failure::transient(KafkaFailure::NoDeliveryReport {
                waited_ms: wait.as_millis(),
            })),
        }
    }

    fn inline_max_bytes(&self) -> Option<NonZeroUsize> {
        Some(self.config.inline_max_bytes)
    }

    fn describe(&self, subject: &Subject) -> Option<Description> {
        let mut d = Description::new("kafka", Payload::Message);
        d.host = Some(self.config.bootstrap_servers.join(","));
        d.address = Some(self.config.topic.clone());
        d.bindings.insert(
            "kafka".into(),
            json!({
                "topic": self.config.topic,
                "key": key_schema(&self.key, subject),
                "bindingVersion": "0.5.0",
            }),
        );
        if !self.key.is_static() {
            d.computed.push("key".into());
        }
        Some(d)
    }

    /// Fetch the topic's metadata, producing nothing and creating nothing.
    async fn check(&self) -> Result<Check, Failure> {
        let (generation, shared) = self.producer();
        let topic = self.config.topic.clone();
        let timeout = self.config.produce_timeout();
        let started = Instant::now();
        let since = self.window_start(started);
        let held = Arc::clone(&shared);
        let fetched = tokio::task::spawn_blocking(move || {
            held.get().client().fetch_metadata(Some(&topic), timeout)
        })
        .await
        .map_err(|e| Failure::transient(KafkaFailure::Client(format!("metadata: {e}"))))?;
        let metadata = fetched
            .map_err(|e| self.failure(&e, "metadata", 1, since, generation, shared.get()))?;
        let found = metadata
            .topics()
            .iter()
            .find(|t| t.name() == self.config.topic);
        let missing = || {
            Failure::config(KafkaFailure::TopicMissing {
                topic: self.config.topic.clone(),
            })
        };
        match found {
            None => Err(missing()),
            Some(t) => match t.error().map(RDKafkaErrorCode::from) {
                Some(
                    RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic,
                ) => Err(missing()),
                Some(code) => Err(verdict(code).failure(
                    1,
                    KafkaFailure::Code {
                        during: "metadata",
                        code,
                    },
                )),
                None if t.partitions().is_empty() => Err(missing()),
                None => Ok(Check::Passed),
            },
        }
    }
}

/// The AsyncAPI schema of the record key for hooks of `subject`.
fn key_schema(key: &KeyTemplate, subject: &Subject) -> serde_json::Value {
    if !key.only_tenant_and_source() {
        return json!({
            "type": "string",
            "description": format!("Computed per hook from the template {:?}.", key.as_str()),
        });
    }
    match (&subject.tenant_id, key.uses_tenant()) {
        (None, true) => {
            // The tenant varies per hook: a pattern with the tenant's grammar (empty for a
            // hook without a tenant).
            let marker = "\u{0}";
            let sample = key.render_with(Some(marker), &subject.source_id, "", None);
            let pattern = sample
                .split(marker)
                .map(regex_escape)
                .collect::<Vec<_>>()
                .join("[A-Za-z0-9_-]{0,64}");
            json!({"type": "string", "pattern": format!("^{pattern}$")})
        }
        (tenant, _) => json!({
            "type": "string",
            "const": key.render_with(tenant.as_deref(), &subject.source_id, "", None),
        }),
    }
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
    use rdkafka::message::Headers;

    fn headers_of(env: &Envelope, ctx: &Ctx) -> Vec<(String, String)> {
        headers(env, ctx)
            .iter()
            .map(|h| {
                (
                    h.key.to_owned(),
                    String::from_utf8(h.value.unwrap().to_vec()).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn header_set_and_order() {
        let env = Envelope::builder("h1", "stripe", "{}")
            .dedupe_key("evt_1")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env).with_replay_id("r1");
        let h = headers_of(&env, &ctx);
        let names: Vec<&str> = h.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "ankusa_id",
                "ankusa_source_id",
                "ankusa_tenant_id",
                "ankusa_message_version",
                "ankusa_idempotency_key",
                "content_type",
                "ankusa_dedupe_key",
                "ankusa_replay_id"
            ]
        );
        assert_eq!(h[2].1, "");
        assert_eq!(h[4].1, "default:stripe:evt_1");
        let env = Envelope::builder("h1", "stripe", "{}")
            .tenant_id("acme")
            .build()
            .unwrap();
        let h = headers_of(&env, &Ctx::for_envelope(&env));
        assert_eq!(h.len(), 6);
        assert_eq!(h[2], ("ankusa_tenant_id".into(), "acme".into()));
    }

    #[test]
    fn key_schemas() {
        let default = KeyTemplate::parse(DEFAULT_KEY).unwrap();
        assert_eq!(
            key_schema(&default, &Subject::new("src.a", Some("t1".into()))),
            json!({"type":"string","const":"t1/src.a"})
        );
        assert_eq!(
            key_schema(&default, &Subject::new("src.a", None)),
            json!({"type":"string","pattern":"^[A-Za-z0-9_-]{0,64}\\/src\\.a$"})
        );
        let fixed = KeyTemplate::parse("k").unwrap();
        assert_eq!(
            key_schema(&fixed, &Subject::new("s", None)),
            json!({"type":"string","const":"k"})
        );
        let per_hook = KeyTemplate::parse("{id}").unwrap();
        let s = key_schema(&per_hook, &Subject::new("s", None));
        assert!(s["description"].as_str().unwrap().contains("{id}"), "{s}");
    }
}

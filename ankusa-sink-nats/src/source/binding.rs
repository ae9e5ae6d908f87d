//! Binding the durable pull consumer: an existing one is checked against what the source
//! needs, a missing one is created.

use super::NatsSourceConfig;
use ankusa_source::{SourceError, SourceOptions};
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::jetstream::context::ConsumerInfoErrorKind;
use async_nats::jetstream::{self, consumer};

/// Bind the durable pull consumer, or create it.
pub(super) async fn bind<I>(
    stream: &jetstream::stream::Stream<I>,
    config: &NatsSourceConfig,
    options: &SourceOptions,
    describe: &str,
) -> Result<PullConsumer, SourceError> {
    let name = &config.consumer;
    match stream.consumer_info(name).await {
        Ok(info) => return existing(stream, info, config, options, describe).await,
        Err(e) if e.kind() == ConsumerInfoErrorKind::NotFound => {}
        Err(e) => return Err(lookup_error(describe, &e)),
    }
    let ack_wait = config.created_ack_wait(options.attempt_timeout);
    let max_unacked = i64::try_from(options.max_unacked.get()).unwrap_or(i64::MAX);
    let created = pull::Config {
        durable_name: Some(name.clone()),
        description: Some("ankusa-sink forward --from".into()),
        deliver_policy: DeliverPolicy::All,
        ack_policy: AckPolicy::Explicit,
        ack_wait,
        max_ack_pending: max_unacked.saturating_mul(10).max(1000),
        ..Default::default()
    };
    match stream.create_consumer(created).await {
        Ok(c) => {
            tracing::info!(
                target: "ankusa_source",
                source = %describe,
                ack_wait_ms = ack_wait.as_millis() as u64,
                "created the durable pull consumer"
            );
            Ok(c)
        }
        // Another forwarder may have created it in between, with other settings: look
        // again before giving up.
        Err(create) => match stream.consumer_info(name).await {
            Ok(info) => existing(stream, info, config, options, describe).await,
            Err(_) => Err(SourceError::Config(format!(
                "{describe}: cannot create the consumer: {create}"
            ))),
        },
    }
}

/// Check an existing consumer and bind it.
async fn existing<I>(
    stream: &jetstream::stream::Stream<I>,
    info: consumer::Info,
    config: &NatsSourceConfig,
    options: &SourceOptions,
    describe: &str,
) -> Result<PullConsumer, SourceError> {
    let c = &info.config;
    if c.deliver_subject.is_some() {
        return Err(SourceError::Config(format!(
            "{describe}: the consumer is a push consumer; the source needs a pull consumer"
        )));
    }
    if c.ack_policy != AckPolicy::Explicit {
        return Err(SourceError::Config(format!(
            "{describe}: the consumer acknowledges with policy {:?}; the source needs explicit \
             acks",
            c.ack_policy
        )));
    }
    let attempt = options.attempt_timeout;
    if c.ack_wait <= attempt {
        return Err(SourceError::Config(format!(
            "{describe}: the consumer's ack_wait ({} ms) is not longer than the attempt timeout \
             ({} ms): a hook still being attempted would be redelivered to another forwarder; \
             raise the consumer's ack_wait or lower --attempt-timeout",
            c.ack_wait.as_millis(),
            attempt.as_millis()
        )));
    }
    if let Some(w) = config.ack_wait()
        && w != c.ack_wait
    {
        tracing::warn!(
            target: "ankusa_source",
            source = %describe,
            configured_ms = w.as_millis() as u64,
            consumer_ms = c.ack_wait.as_millis() as u64,
            "ack_wait_ms applies to a consumer the source creates; the existing consumer's \
             ack_wait is used"
        );
    }
    let max_unacked = i64::try_from(options.max_unacked.get()).unwrap_or(i64::MAX);
    if c.max_ack_pending > 0 && c.max_ack_pending < max_unacked {
        tracing::warn!(
            target: "ankusa_source",
            source = %describe,
            max_ack_pending = c.max_ack_pending,
            max_unacked,
            "the consumer's max_ack_pending is below --max-unacked: it bounds this forwarder"
        );
    }
    stream
        .get_consumer::<pull::Config>(&config.consumer)
        .await
        .map_err(|e| SourceError::Fatal(format!("{describe}: binding the consumer: {e}")))
}

/// The error of a failed consumer lookup.
fn lookup_error(
    describe: &str,
    e: &async_nats::jetstream::context::ConsumerInfoError,
) -> SourceError {
    match e.kind() {
        ConsumerInfoErrorKind::StreamNotFound => SourceError::Config(format!(
            "{describe}: the stream does not exist (the source creates no stream)"
        )),
        ConsumerInfoErrorKind::NoResponders => SourceError::Config(format!(
            "{describe}: JetStream does not answer (no responders): is JetStream enabled for \
             this account?"
        )),
        ConsumerInfoErrorKind::InvalidName => {
            SourceError::Config(format!("{describe}: invalid consumer name"))
        }
        ConsumerInfoErrorKind::JetStream(err) if matches!(err.code(), 401 | 403) => {
            SourceError::Config(format!("{describe}: {err}"))
        }
        _ => SourceError::Fatal(format!("{describe}: looking up the consumer: {e}")),
    }
}

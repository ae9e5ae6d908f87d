//! What the two benches that read from Kafka both do to it: make a topic of `PARTITIONS`
//! partitions, fill it round robin with acks=all and idempotence, delete it, and the 1 KiB
//! hooks they fill it with.

use futures_util::StreamExt as _;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::time::Duration;

/// The partitions of every topic a bench reads.
pub(crate) const PARTITIONS: i32 = 3;

/// `ANKUSA_KAFKA_BROKERS`, default `127.0.0.1:9092`.
pub(crate) fn brokers() -> String {
    std::env::var("ANKUSA_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned())
}

pub(crate) fn admin() -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .unwrap()
}

/// Creates `topic` with `PARTITIONS` partitions; panics on any failure.
pub(crate) async fn create(admin: &AdminClient<DefaultClientContext>, topic: &str) {
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    for r in admin
        .create_topics(
            &[NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(1))],
            &opts,
        )
        .await
        .unwrap()
    {
        r.unwrap();
    }
}

/// Delete `topic`, best effort (a leftover topic costs the in-memory broker only memory).
/// No consumer may still be fetching it: tansu answers a fetch for a deleted topic with a
/// zero topic id and leader tags, and librdkafka 2.12.1 then crashes (SIGSEGV).
pub(crate) async fn delete(admin: &AdminClient<DefaultClientContext>, topic: &str) {
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let _ = admin.delete_topics(&[topic], &opts).await;
}

/// A producer with acks=all and idempotence.
pub(crate) fn producer() -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .create()
        .unwrap()
}

/// `hooks` into `topic`, round robin over its partitions (at most 10,000 in flight).
pub(crate) async fn fill(topic: &str, hooks: &[Vec<u8>]) {
    let p = producer();
    let mut pending = futures_util::stream::FuturesUnordered::new();
    for (i, h) in hooks.iter().enumerate() {
        let p = p.clone();
        pending.push(async move {
            p.send(
                FutureRecord::<(), _>::to(topic)
                    .payload(h)
                    .partition(i32::try_from(i).unwrap() % PARTITIONS),
                Duration::from_secs(60),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
        });
        if pending.len() >= 10_000 {
            pending.next().await;
        }
    }
    while pending.next().await.is_some() {}
}

/// `n` envelopes of 1 KiB as the `gen` format's JSON, ids `{prefix}-{i}`.
pub(crate) fn hooks(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    let body = "x".repeat(1024);
    (0..n)
        .map(|i| {
            let env =
                ankusa_sink_core::Envelope::builder(format!("{prefix}-{i}"), "bench", body.clone())
                    .tenant_id("acme")
                    .build()
                    .unwrap();
            serde_json::to_vec(&env).unwrap()
        })
        .collect()
}

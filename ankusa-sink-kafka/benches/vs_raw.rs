//! KafkaSink vs a raw rdkafka FutureProducer (acks=all, idempotence, the sink's producer
//! settings; the same key, Message v1 value and headers) on tansu at 127.0.0.1:9092.
//! `cargo bench -p ankusa-sink-kafka --bench vs_raw`; JSON goes to `$BENCH_OUT_DIR/kafka.json`.
#![allow(missing_docs)]

use ankusa_sink_core::{Ctx, Envelope, Sink, attributes, message};
use ankusa_sink_kafka::rdkafka::ClientConfig;
use ankusa_sink_kafka::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use ankusa_sink_kafka::rdkafka::client::DefaultClientContext;
use ankusa_sink_kafka::rdkafka::message::{Header, OwnedHeaders};
use ankusa_sink_kafka::rdkafka::producer::{FutureProducer, FutureRecord};
use ankusa_sink_kafka::{
    DEFAULT_MAX_RECORD_BYTES, DEFAULT_PRODUCE_TIMEOUT_MS, KafkaConfig, KafkaSink,
};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const ADAPTER: &str = "kafka";
const MIN_N: usize = 200;
/// Bytes of bodies per timed run, at most (tansu keeps records in memory).
const MAX_BYTES: usize = 32 << 20;
/// Deliveries (1 KiB, 64 KiB) of the `--only` memory run, at concurrency 256.
const ONLY_N: (usize, usize) = (5_000, 500);
const BROKERS: &str = "127.0.0.1:9092";

// ---- harness ----
include!("../../benches-common/vs_raw_harness.rs");

// ---- the Kafka specifics ----

/// The sink's producer settings (see `KafkaConfig::client_config`), for the raw producer.
fn raw_producer() -> FutureProducer {
    let timeout = DEFAULT_PRODUCE_TIMEOUT_MS.get().to_string();
    ClientConfig::new()
        .set("bootstrap.servers", BROKERS)
        .set("client.id", "bench-raw")
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("partitioner", "murmur2_random")
        .set("message.timeout.ms", &timeout)
        .set("request.timeout.ms", &timeout)
        .set(
            "message.max.bytes",
            (DEFAULT_MAX_RECORD_BYTES.get() + 65_536).to_string(),
        )
        .set("compression.codec", "none")
        .set("allow.auto.create.topics", "false")
        .set(
            "topic.metadata.propagation.max.ms",
            (DEFAULT_PRODUCE_TIMEOUT_MS.get() / 2).to_string(),
        )
        .create()
        .expect("raw producer")
}

/// The record headers the sink sends for `env` (the `ankusa_*` attributes).
fn raw_headers(env: &Envelope, ctx: &Ctx) -> OwnedHeaders {
    let mut h = OwnedHeaders::new();
    for (name, value) in &attributes(env, ctx) {
        h = h.insert(Header {
            key: name,
            value: Some(value.as_str()),
        });
    }
    h
}

struct Prepared {
    body: usize,
    env: Arc<Envelope>,
    key: String,
    value: Vec<u8>,
    headers: OwnedHeaders,
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let topic = format!("ankusa-bench-{}", std::process::id());
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", BROKERS)
            .create()
            .unwrap();
        let created = admin
            .create_topics(
                &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            )
            .await
            .expect("tansu on 127.0.0.1:9092 (run scripts/services/kafka.sh)");
        for r in created {
            r.expect("create the bench topic");
        }

        let sink = Arc::new(KafkaSink::new(KafkaConfig::new(BROKERS, &topic)).unwrap());
        let raw = Arc::new(raw_producer());
        let inline = sink.inline_max_bytes();
        let prepared: Vec<Arc<Prepared>> = [1024, 65_536]
            .into_iter()
            .map(|s| {
                let env = envelope(s);
                let ctx = Ctx::for_envelope(&env);
                Arc::new(Prepared {
                    body: s,
                    key: sink.key().render(&env),
                    value: message::encode(&env, &ctx, inline).unwrap(),
                    headers: raw_headers(&env, &ctx),
                    env: Arc::new(env),
                })
            })
            .collect();
        let ops = |mode: &str, body: usize| -> Op {
            let p = Arc::clone(prepared.iter().find(|p| p.body == body).unwrap());
            if mode == "sink" {
                sink_op(&sink, &p.env)
            } else {
                let (raw, topic) = (Arc::clone(&raw), topic.clone());
                Arc::new(move || {
                    let (raw, topic, p) = (Arc::clone(&raw), topic.clone(), Arc::clone(&p));
                    Box::pin(async move {
                        let record = FutureRecord::to(&topic)
                            .payload(&p.value)
                            .key(&p.key)
                            .timestamp(p.env.received_at())
                            .headers(p.headers.clone());
                        match raw.send_result(record) {
                            Ok(report) => matches!(report.await, Ok(Ok(_))),
                            Err(_) => false,
                        }
                    })
                })
            }
        };
        let after = || -> Pin<Box<dyn Future<Output = ()> + Send>> { Box::pin(async {}) };
        if let Some(mode) = only_mode() {
            only(ops, &after, &mode).await;
            let _ = admin.delete_topics(&[&topic], &AdminOptions::new()).await;
            return;
        }
        let runs = compare(&ops, &after).await;
        let _ = admin.delete_topics(&[&topic], &AdminOptions::new()).await;
        let rss = (peak_rss("sink"), peak_rss("raw"));
        write_json(runs, rss);
    });
}

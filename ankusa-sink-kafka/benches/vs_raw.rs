//! KafkaSink vs a raw rdkafka FutureProducer (acks=all, idempotence, the sink's producer
//! settings; the same key, Message v1 value and headers) on tansu at 127.0.0.1:9092.
//! `cargo bench -p ankusa-sink-kafka --bench vs_raw`; JSON goes to `$BENCH_OUT_DIR/kafka.json`.
#![allow(missing_docs)]

use ankusa_bench_support::vs_raw::{self, Op, VsRawBench};
use ankusa_message::{EmptyValues, Layout, Outgoing};
use ankusa_sink_core::{Envelope, Sink};
use ankusa_sink_kafka::{
    DEFAULT_MAX_RECORD_BYTES, DEFAULT_PRODUCE_TIMEOUT_MS, KafkaConfig, KafkaSink,
};
use ankusa_sink_testkit::support::unique_name;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::sync::Arc;
use std::time::Duration;

const BROKERS: &str = "127.0.0.1:9092";

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

/// The record headers the sink sends for `out` (the `ankusa_*` attributes).
fn raw_headers(out: &Outgoing<'_>) -> OwnedHeaders {
    let mut h = OwnedHeaders::new();
    for (attr, value) in out.attributes() {
        h = h.insert(Header {
            key: attr.as_attr(),
            value: Some(value.as_ref()),
        });
    }
    h
}

/// What the raw producer sends for one envelope, prepared once.
struct Prepared {
    env: Arc<Envelope>,
    key: String,
    value: Vec<u8>,
    headers: OwnedHeaders,
}

/// The sink and a raw producer with its settings, on one fresh single-partition topic.
struct Kafka {
    admin: AdminClient<DefaultClientContext>,
    topic: String,
    sink: Arc<KafkaSink>,
    raw: Arc<FutureProducer>,
}

impl Kafka {
    async fn setup() -> Kafka {
        let topic = unique_name("ankusa-bench");
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
        let sink = Arc::new(KafkaSink::new(KafkaConfig::new(BROKERS, &topic).unwrap()).unwrap());
        let raw = Arc::new(raw_producer());
        Kafka {
            admin,
            topic,
            sink,
            raw,
        }
    }

    /// The sink's layout: its inline threshold and record key.
    fn layout(&self) -> Layout {
        Layout::message(self.sink.capabilities().inline_max_bytes, EmptyValues::Keep)
            .with_key(self.sink.config().key().clone())
    }
}

impl VsRawBench for Kafka {
    const ADAPTER: &'static str = "kafka";
    const MIN_N: usize = 200;
    /// tansu keeps records in memory.
    const MAX_BYTES: usize = 32 << 20;
    const ONLY_N: (usize, usize) = (5_000, 500);
    type Sink = KafkaSink;

    fn sink(&self) -> &Arc<KafkaSink> {
        &self.sink
    }

    fn raw_op(&self, env: &Arc<Envelope>) -> Op {
        let ctx = ankusa_bench_support::vs_raw::raw_ctx(env);
        let out = Outgoing::new(env, &ctx, &self.layout()).unwrap();
        let p = Arc::new(Prepared {
            key: out.key().unwrap_or_default().to_owned(),
            value: out.body().to_vec(),
            headers: raw_headers(&out),
            env: Arc::clone(env),
        });
        let (raw, topic) = (Arc::clone(&self.raw), self.topic.clone());
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

    /// The same record, its Message v1 and headers encoded per delivery.
    fn raw_encode_op(&self, env: &Arc<Envelope>) -> Option<Op> {
        let (env, ctx) = (
            Arc::clone(env),
            Arc::new(ankusa_bench_support::vs_raw::raw_ctx(env)),
        );
        let layout = Arc::new(self.layout());
        let (raw, topic) = (Arc::clone(&self.raw), self.topic.clone());
        Some(Arc::new(move || {
            let (env, ctx, layout) = (Arc::clone(&env), Arc::clone(&ctx), Arc::clone(&layout));
            let (raw, topic) = (Arc::clone(&raw), topic.clone());
            Box::pin(async move {
                let Ok(out) = Outgoing::new(&env, &ctx, &layout) else {
                    return false;
                };
                let record = FutureRecord::to(&topic)
                    .payload(out.body())
                    .key(out.key().unwrap_or_default())
                    .timestamp(env.received_at())
                    .headers(raw_headers(&out));
                match raw.send_result(record) {
                    Ok(report) => matches!(report.await, Ok(Ok(_))),
                    Err(_) => false,
                }
            })
        }))
    }

    async fn teardown(&self) {
        let _ = self
            .admin
            .delete_topics(&[&self.topic], &AdminOptions::new())
            .await;
    }
}

fn main() {
    vs_raw::run(Kafka::setup());
}

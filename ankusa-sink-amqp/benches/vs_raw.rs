//! AmqpSink vs raw lapin (one confirm-mode channel, pipelined publishes, mandatory,
//! persistent, the same Message v1 bytes and properties) on RabbitMQ at 127.0.0.1:5672.
//! `cargo bench -p ankusa-sink-amqp --bench vs_raw`; JSON goes to `$BENCH_OUT_DIR/amqp.json`.
#![allow(missing_docs)]

use ankusa_bench_support::vs_raw::{self, Op, VsRawBench};
use ankusa_sink_amqp::{AmqpConfig, AmqpSink};
use ankusa_sink_core::Envelope;
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
};
use std::sync::Arc;

const URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const EXCHANGE: &str = "ankusa.bench";
const QUEUE: &str = "ankusa.bench.vs_raw";
const KEY: &str = "bench";

/// A durable direct exchange and a durable queue bound with `KEY` (so mandatory publishes
/// route), declared on `ch`.
async fn declare(ch: &Channel) {
    ch.exchange_declare(
        EXCHANGE.into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_declare(
        QUEUE.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_bind(
        QUEUE.into(),
        EXCHANGE.into(),
        KEY.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
}

struct Raw {
    channel: Channel,
}

impl Raw {
    async fn publish(&self, body: &[u8], props: BasicProperties) -> bool {
        let confirm = self
            .channel
            .basic_publish(
                EXCHANGE.into(),
                KEY.into(),
                BasicPublishOptions {
                    mandatory: true,
                    immediate: false,
                },
                body,
                props,
            )
            .await;
        match confirm {
            Ok(c) => matches!(c.await, Ok(Confirmation::Ack(None))),
            Err(_) => false,
        }
    }
}

/// The sink and a raw confirm-mode channel on one durable queue, purged after every run.
struct Amqp {
    admin: Channel,
    sink: Arc<AmqpSink>,
    raw: Arc<Raw>,
    /// Kept open for `admin` and `raw`.
    _connections: [Connection; 2],
}

impl Amqp {
    async fn setup() -> Amqp {
        let admin_conn = Connection::connect(URL, ConnectionProperties::default())
            .await
            .expect("RabbitMQ on 127.0.0.1:5672 (run scripts/services/rabbitmq.sh)");
        let admin = admin_conn.create_channel().await.unwrap();
        declare(&admin).await;

        let cfg = AmqpConfig::new(URL, EXCHANGE)
            .unwrap()
            .with_routing_key(KEY)
            .unwrap();
        let sink = Arc::new(AmqpSink::new(cfg));
        let raw_conn = Connection::connect(URL, ConnectionProperties::default())
            .await
            .unwrap();
        let channel = raw_conn.create_channel().await.unwrap();
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        Amqp {
            admin,
            sink,
            raw: Arc::new(Raw { channel }),
            _connections: [admin_conn, raw_conn],
        }
    }
}

impl VsRawBench for Amqp {
    const ADAPTER: &'static str = "amqp";
    const MIN_N: usize = 300;
    /// The queue is purged after every run.
    const MAX_BYTES: usize = 128 << 20;
    const ONLY_N: (usize, usize) = (5_000, 1_000);
    type Sink = AmqpSink;

    fn sink(&self) -> &Arc<AmqpSink> {
        &self.sink
    }

    /// The sink's exact bytes and properties, encoded once.
    fn raw_op(&self, env: &Arc<Envelope>) -> Op {
        let ctx = ankusa_bench_support::vs_raw::raw_ctx(env);
        let bytes = Arc::new(ankusa_message::encode(env, &ctx, sink_inline()).unwrap());
        let props = raw_properties(env);
        let raw = Arc::clone(&self.raw);
        Arc::new(move || {
            let (raw, bytes, props) = (Arc::clone(&raw), Arc::clone(&bytes), props.clone());
            Box::pin(async move { raw.publish(&bytes, props).await })
        })
    }

    /// The same publish, its Message v1 and properties made per delivery.
    fn raw_encode_op(&self, env: &Arc<Envelope>) -> Option<Op> {
        let (env, ctx) = (
            Arc::clone(env),
            Arc::new(ankusa_bench_support::vs_raw::raw_ctx(env)),
        );
        let raw = Arc::clone(&self.raw);
        Some(Arc::new(move || {
            let (env, ctx, raw) = (Arc::clone(&env), Arc::clone(&ctx), Arc::clone(&raw));
            Box::pin(async move {
                let Ok(bytes) = ankusa_message::encode(&env, &ctx, sink_inline()) else {
                    return false;
                };
                raw.publish(&bytes, raw_properties(&env)).await
            })
        }))
    }

    async fn after_run(&self) {
        let _ = self
            .admin
            .queue_purge(QUEUE.into(), QueuePurgeOptions::default())
            .await;
    }

    async fn teardown(&self) {
        let _ = self
            .admin
            .queue_delete(QUEUE.into(), QueueDeleteOptions::default())
            .await;
    }
}

fn main() {
    vs_raw::run(Amqp::setup());
}

/// The sink's default inline threshold (what `AmqpSink`'s capabilities state).
fn sink_inline() -> Option<std::num::NonZeroUsize> {
    Some(ankusa_message::DEFAULT_INLINE_MAX_BYTES)
}

/// The properties the sink sends, written by hand as a raw lapin user would: persistent,
/// JSON, the hook id and receive time, the idempotency and dedupe key headers (the bench
/// replays nothing).
fn raw_properties(env: &Envelope) -> BasicProperties {
    let mut headers = FieldTable::default();
    headers.insert(
        "ankusa_idempotency_key".into(),
        AMQPValue::LongString(env.idempotency_key().into_owned().into()),
    );
    if let Some(key) = env.dedupe_key() {
        headers.insert(
            "ankusa_dedupe_key".into(),
            AMQPValue::LongString(key.into()),
        );
    }
    BasicProperties::default()
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_message_id(env.id().into())
        .with_timestamp(u64::try_from(env.received_at() / 1000).unwrap_or(0))
        .with_headers(headers)
}

//! AmqpSink vs raw lapin (one confirm-mode channel, pipelined publishes, mandatory,
//! persistent, the same Message v1 bytes and properties) on RabbitMQ at 127.0.0.1:5672.
//! `cargo bench -p ankusa-sink-amqp --bench vs_raw`; JSON goes to `$BENCH_OUT_DIR/amqp.json`.
#![allow(missing_docs)]

use ankusa_sink_amqp::lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions, QueuePurgeOptions,
};
use ankusa_sink_amqp::lapin::types::FieldTable;
use ankusa_sink_amqp::lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
};
use ankusa_sink_amqp::{AmqpConfig, AmqpSink, properties};
use ankusa_sink_core::{Ctx, Envelope, message};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const ADAPTER: &str = "amqp";
const MIN_N: usize = 300;
/// Bytes of bodies per timed run, at most (the queue is purged after every run).
const MAX_BYTES: usize = 128 << 20;
/// Deliveries (1 KiB, 64 KiB) of the `--only` memory run, at concurrency 256.
const ONLY_N: (usize, usize) = (5_000, 1_000);
const URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const EXCHANGE: &str = "ankusa.bench";
const QUEUE: &str = "ankusa.bench.vs_raw";
const KEY: &str = "bench";

// ---- harness ----
include!("../../benches-common/vs_raw_harness.rs");

// ---- the AMQP specifics ----

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

/// Body size, envelope, its Message v1 bytes and AMQP properties.
type Prepared = (usize, Arc<Envelope>, Arc<Vec<u8>>, BasicProperties);

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

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let admin_conn = Connection::connect(URL, ConnectionProperties::default())
            .await
            .expect("RabbitMQ on 127.0.0.1:5672 (run scripts/services/rabbitmq.sh)");
        let admin = Arc::new(admin_conn.create_channel().await.unwrap());
        declare(&admin).await;

        let cfg = AmqpConfig::builder(URL, EXCHANGE)
            .routing_key(KEY)
            .build()
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
        let raw = Arc::new(Raw { channel });
        // Per body size: the envelope, and for the raw client the sink's exact bytes and
        // properties, encoded once.
        let envs: Vec<Prepared> = [1024, 65_536]
            .into_iter()
            .map(|s| {
                let env = envelope(s);
                let ctx = Ctx::for_envelope(&env);
                let bytes = message::encode(&env, &ctx, sink_inline()).unwrap();
                let props = properties(&env, &ctx);
                (s, Arc::new(env), Arc::new(bytes), props)
            })
            .collect();
        let ops = |mode: &str, body: usize| -> Op {
            let (_, env, bytes, props) = envs.iter().find(|e| e.0 == body).unwrap().clone();
            if mode == "sink" {
                sink_op(&sink, &env)
            } else {
                let raw = Arc::clone(&raw);
                Arc::new(move || {
                    let (raw, bytes, props) = (Arc::clone(&raw), Arc::clone(&bytes), props.clone());
                    Box::pin(async move { raw.publish(&bytes, props).await })
                })
            }
        };
        let purge = {
            let admin = Arc::clone(&admin);
            move || -> Pin<Box<dyn Future<Output = ()> + Send>> {
                let admin = Arc::clone(&admin);
                Box::pin(async move {
                    let _ = admin
                        .queue_purge(QUEUE.into(), QueuePurgeOptions::default())
                        .await;
                })
            }
        };
        if let Some(mode) = only_mode() {
            only(ops, &purge, &mode).await;
            return;
        }
        let runs = compare(&ops, &purge).await;
        let _ = admin
            .queue_delete(QUEUE.into(), QueueDeleteOptions::default())
            .await;
        let rss = (peak_rss("sink"), peak_rss("raw"));
        write_json(runs, rss);
    });
}

/// The sink's default inline threshold (what `AmqpSink::inline_max_bytes` returns).
fn sink_inline() -> Option<std::num::NonZeroUsize> {
    Some(ankusa_sink_core::DEFAULT_INLINE_MAX_BYTES)
}

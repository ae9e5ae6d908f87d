//! MqttSink vs the raw `rumqttc` client (one connection, the same QoS 1 PUBLISH with the
//! same Message v1 bytes, Content Type and user properties, each awaited until its own
//! PUBACK) on the Mosquitto at 127.0.0.1:1883. Nobody subscribes: both sides take PUBACK
//! "No matching subscribers" as done (the sink with `no_subscriber = "ok"`), so the broker
//! does the same work for both.
//! `cargo bench -p ankusa-sink-mqtt --bench vs_raw`; JSON goes to `$BENCH_OUT_DIR/mqtt.json`.
#![allow(missing_docs)]

use ankusa_bench_support::vs_raw::{self, Op, VsRawBench};
use ankusa_message::template::{AbsentTenant, KeyTemplate};
use ankusa_message::{Attr, DEFAULT_INLINE_MAX_BYTES, EmptyValues, Layout, Outgoing};
use ankusa_sink_core::Envelope;
use ankusa_sink_mqtt::{MqttConfig, MqttSink, NoSubscriber};
use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PubAckReason, PublishProperties};
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

const URL: &str = "mqtt://127.0.0.1:1883";
const SINK_TOPIC: &str = "ankusa-bench/vs-raw/sink";
const RAW_TOPIC: &str = "ankusa-bench/vs-raw/raw";

/// The raw client: publishes enqueued under one lock with their waiters, a task that
/// matches `Outgoing::Publish(pkid)` to the oldest waiter and each PUBACK to its pkid.
struct Raw {
    client: AsyncClient,
    waiters: Arc<Mutex<VecDeque<oneshot::Sender<PubAckReason>>>>,
    order: tokio::sync::Mutex<()>,
}

impl Raw {
    async fn connect() -> Raw {
        let mut opts = MqttOptions::new("ankusa-bench-raw", "127.0.0.1", 1883);
        let mut net = rumqttc::NetworkOptions::new();
        net.set_tcp_nodelay(true);
        opts.set_network_options(net)
            .set_outgoing_inflight_upper_limit(1024);
        let (client, mut eventloop) = AsyncClient::new(opts, 1024);
        loop {
            match eventloop
                .poll()
                .await
                .expect("Mosquitto on 127.0.0.1:1883 (scripts/services/mosquitto.sh)")
            {
                Event::Incoming(Packet::ConnAck(_)) => break,
                _ => continue,
            }
        }
        let waiters: Arc<Mutex<VecDeque<oneshot::Sender<PubAckReason>>>> = Arc::default();
        let queue = Arc::clone(&waiters);
        tokio::spawn(async move {
            let mut inflight = HashMap::new();
            while let Ok(event) = eventloop.poll().await {
                match event {
                    Event::Outgoing(rumqttc::Outgoing::Publish(pkid)) => {
                        if let Some(w) = queue.lock().unwrap().pop_front() {
                            inflight.insert(pkid, w);
                        }
                    }
                    Event::Incoming(Packet::PubAck(ack)) => {
                        if let Some(w) = inflight.remove(&ack.pkid) {
                            let _ = w.send(ack.reason);
                        }
                    }
                    _ => {}
                }
            }
        });
        Raw {
            client,
            waiters,
            order: tokio::sync::Mutex::new(()),
        }
    }

    async fn publish(&self, payload: Bytes, props: PublishProperties) -> bool {
        let (tx, rx) = oneshot::channel();
        {
            let _order = self.order.lock().await;
            self.waiters.lock().unwrap().push_back(tx);
            if self
                .client
                .publish_with_properties(RAW_TOPIC, QoS::AtLeastOnce, false, payload, props)
                .await
                .is_err()
            {
                return false;
            }
        }
        matches!(
            rx.await,
            Ok(PubAckReason::Success | PubAckReason::NoMatchingSubscribers)
        )
    }
}

struct Mqtt {
    sink: Arc<MqttSink>,
    raw: Arc<Raw>,
}

/// The sink's layout at its defaults.
fn layout() -> Layout {
    Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), EmptyValues::Keep)
        .with_key(KeyTemplate::literal(SINK_TOPIC, AbsentTenant::Default))
}

/// The sink's PUBLISH of `out`: the body, Content Type and the other attributes as user
/// properties.
fn publish_of(out: Outgoing<'_>) -> (Bytes, PublishProperties) {
    let mut props = PublishProperties::default();
    for (attr, value) in out.attributes() {
        if *attr == Attr::ContentType {
            props.content_type = Some(value.to_string());
        } else {
            props
                .user_properties
                .push((attr.as_attr().to_owned(), value.to_string()));
        }
    }
    (out.into_body().into_bytes(), props)
}

impl VsRawBench for Mqtt {
    const ADAPTER: &'static str = "mqtt";
    const MIN_N: usize = 300;
    /// Nobody subscribes: the broker keeps nothing.
    const MAX_BYTES: usize = 256 << 20;
    const ONLY_N: (usize, usize) = (5_000, 1_000);
    type Sink = MqttSink;

    fn sink(&self) -> &Arc<MqttSink> {
        &self.sink
    }

    /// The sink's exact PUBLISH (payload, Content Type, user properties), built once.
    fn raw_op(&self, env: &Arc<Envelope>) -> Op {
        let ctx = ankusa_bench_support::vs_raw::raw_ctx(env);
        let (payload, props) = publish_of(Outgoing::new(env, &ctx, &layout()).unwrap());
        let raw = Arc::clone(&self.raw);
        Arc::new(move || {
            let (raw, payload, props) = (Arc::clone(&raw), payload.clone(), props.clone());
            Box::pin(async move { raw.publish(payload, props).await })
        })
    }

    /// The same PUBLISH, its Message v1 encoded per delivery.
    fn raw_encode_op(&self, env: &Arc<Envelope>) -> Option<Op> {
        let (env, ctx) = (
            Arc::clone(env),
            Arc::new(ankusa_bench_support::vs_raw::raw_ctx(env)),
        );
        let layout = Arc::new(layout());
        let raw = Arc::clone(&self.raw);
        Some(Arc::new(move || {
            let (env, ctx, layout, raw) = (
                Arc::clone(&env),
                Arc::clone(&ctx),
                Arc::clone(&layout),
                Arc::clone(&raw),
            );
            Box::pin(async move {
                let Ok(out) = Outgoing::new(&env, &ctx, &layout) else {
                    return false;
                };
                let (payload, props) = publish_of(out);
                raw.publish(payload, props).await
            })
        }))
    }
}

fn main() {
    vs_raw::run(async {
        let config = MqttConfig::new(URL, SINK_TOPIC)
            .unwrap()
            .with_no_subscriber(NoSubscriber::Ok);
        Mqtt {
            sink: Arc::new(MqttSink::new(config).unwrap()),
            raw: Arc::new(Raw::connect().await),
        }
    });
}

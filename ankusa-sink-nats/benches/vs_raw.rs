//! NatsSink vs a raw async-nats JetStream publish (the same subject, Message v1 payload,
//! `Nats-Msg-Id` and `ankusa_*` headers, the ack awaited) on the server at 127.0.0.1:4222.
//! `cargo bench -p ankusa-sink-nats --bench vs_raw`; JSON goes to `$BENCH_OUT_DIR/nats.json`.
#![allow(missing_docs)]

use ankusa_bench_support::vs_raw::{self, Op, VsRawBench};
use ankusa_message::{Attr, EmptyValues, Layout, Outgoing};
use ankusa_sink_core::{Envelope, Sink};
use ankusa_sink_nats::{NatsConfig, NatsSink};
use ankusa_sink_testkit::support::unique_name;
use async_nats::jetstream::{self, stream};
use async_nats::{HeaderMap, HeaderName};
use bytes::Bytes;
use std::sync::Arc;

const URL: &str = "nats://127.0.0.1:4222";

/// The sink and a raw JetStream context on one fresh stream.
struct Nats {
    js: jetstream::Context,
    stream: String,
    subject: String,
    sink: Arc<NatsSink>,
}

impl Nats {
    async fn setup() -> Nats {
        let name = unique_name("ankusa-bench").replace(['-', '.'], "_");
        let subject = format!("ankusa.bench.{name}");
        let client = async_nats::connect(URL)
            .await
            .expect("NATS on 127.0.0.1:4222 (run scripts/services/nats.sh)");
        let js = jetstream::new(client);
        js.create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![subject.clone()],
            ..Default::default()
        })
        .await
        .expect("create the bench stream");
        let sink = Arc::new(NatsSink::new(NatsConfig::new(URL, &subject).unwrap()));
        Nats {
            js,
            stream: name,
            subject,
            sink,
        }
    }

    /// The sink's layout.
    fn layout(&self) -> Layout {
        Layout::message(self.sink.capabilities().inline_max_bytes, EmptyValues::Keep)
    }
}

/// The sink's headers and payload for `out`: `Nats-Msg-Id`, then the `ankusa_*` attributes
/// under static names (as the sink names them), and the Message v1 bytes.
fn publish(out: Outgoing<'_>) -> (HeaderMap, Bytes) {
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", out.get(Attr::Id).unwrap());
    for (attr, value) in out.attributes() {
        headers.insert(HeaderName::from_static(attr.as_attr()), value.as_ref());
    }
    (headers, out.into_body().into_bytes())
}

impl VsRawBench for Nats {
    const ADAPTER: &'static str = "nats";
    const MIN_N: usize = 200;
    /// The stream is purged after every run.
    const MAX_BYTES: usize = 256 << 20;
    const ONLY_N: (usize, usize) = (5_000, 500);
    type Sink = NatsSink;

    fn sink(&self) -> &Arc<NatsSink> {
        &self.sink
    }

    fn raw_op(&self, env: &Arc<Envelope>) -> Op {
        let ctx = ankusa_bench_support::vs_raw::raw_ctx(env);
        let (headers, payload) = publish(Outgoing::new(env, &ctx, &self.layout()).unwrap());
        let (js, subject) = (self.js.clone(), self.subject.clone());
        Arc::new(move || {
            let (js, subject) = (js.clone(), subject.clone());
            let (headers, payload) = (headers.clone(), payload.clone());
            Box::pin(async move {
                match js.publish_with_headers(subject, headers, payload).await {
                    Ok(ack) => ack.await.is_ok(),
                    Err(_) => false,
                }
            })
        })
    }

    /// The same publish, its Message v1 encoded per delivery.
    fn raw_encode_op(&self, env: &Arc<Envelope>) -> Option<Op> {
        let (env, ctx) = (
            Arc::clone(env),
            Arc::new(ankusa_bench_support::vs_raw::raw_ctx(env)),
        );
        let layout = Arc::new(self.layout());
        let (js, subject) = (self.js.clone(), self.subject.clone());
        Some(Arc::new(move || {
            let (env, ctx, layout) = (Arc::clone(&env), Arc::clone(&ctx), Arc::clone(&layout));
            let (js, subject) = (js.clone(), subject.clone());
            Box::pin(async move {
                let Ok(out) = Outgoing::new(&env, &ctx, &layout) else {
                    return false;
                };
                let (headers, payload) = publish(out);
                match js.publish_with_headers(subject, headers, payload).await {
                    Ok(ack) => ack.await.is_ok(),
                    Err(_) => false,
                }
            })
        }))
    }

    async fn after_run(&self) {
        if let Ok(s) = self.js.get_stream(&self.stream).await {
            let _ = s.purge().await;
        }
    }

    async fn teardown(&self) {
        let _ = self.js.delete_stream(&self.stream).await;
    }
}

fn main() {
    vs_raw::run(Nats::setup());
}

//! PubSubSink vs the raw google-cloud-pubsub `Publisher` (same endpoint, anonymous
//! credentials, `NeverRetry`, same batching thresholds) against the emulator on
//! 127.0.0.1:8085.
//!
//! `cargo bench -p ankusa-sink-pubsub --bench vs_raw`; JSON to `$BENCH_OUT_DIR/pubsub.json`
//! (default `target/bench-results/`). Every run publishes to a fresh topic (created and
//! deleted through the emulator's REST API). The raw side sends the same data (a Message v1
//! body encoded once) and attributes; the sink encodes and sizes per delivery.
//! Knobs: `BENCH_SCALE`; `--only sink|raw|raw_encode [--batched | --profile <conc> <n>
//! <body>]` (`raw_encode`: the raw publisher building each delivery's own Message v1).
#![allow(missing_docs)]

use ankusa_bench_support::indexed::{
    self, DEADLINE, IndexedBench, Op, REPS, Run, Spec, child_rss, cpu_us, drive, envelope, runtime,
    sink_op, specs,
};
use ankusa_bench_support::{Mode, only_child_arg, print_vm_hwm, write_results};
use ankusa_message::{DEFAULT_INLINE_MAX_BYTES, EmptyValues, Layout, Outgoing};
use ankusa_sink_core::{Ctx, Envelope};
use ankusa_sink_pubsub::{Auth, PubSubConfig, PubSubSink};
use ankusa_sink_testkit::support::unique_name;
use google_cloud_gax::retry_policy::NeverRetry;
use google_cloud_pubsub::client::{BasePublisher, Publisher};
use google_cloud_pubsub::model::Message;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const PROJECT: &str = "ankusa-bench";

fn host() -> String {
    std::env::var("ANKUSA_PUBSUB_EMULATOR_HOST").unwrap_or_else(|_| "127.0.0.1:8085".into())
}

fn endpoint() -> String {
    format!("http://{}", host())
}

async fn create_topic(http: &reqwest::Client, topic: &str) {
    let url = format!("{}/v1/projects/{PROJECT}/topics/{topic}", endpoint());
    let resp = http.put(url).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200, "create topic {topic}");
}

async fn delete_topic(http: &reqwest::Client, topic: &str) {
    let url = format!("{}/v1/projects/{PROJECT}/topics/{topic}", endpoint());
    let _ = http.delete(url).send().await;
}

struct Workload {
    env: Arc<Envelope>,
    /// The Message v1 data and attributes the sink would send (raw sends them as is).
    msg: Message,
}

fn workload(body_bytes: usize) -> Workload {
    let env = envelope(body_bytes);
    let ctx = ankusa_bench_support::vs_raw::raw_ctx(&env);
    let msg = to_message(&env, &ctx);
    Workload {
        env: Arc::new(env),
        msg,
    }
}

/// The message the sink makes for `env`: `ankusa-message`'s `Outgoing` (Message v1 body, attributes by
/// their attribute names), mapped as the sink maps it.
fn to_message(env: &Envelope, ctx: &Ctx) -> Message {
    to_message_with(env, ctx, &layout())
}

/// The sink's layout with its defaults.
fn layout() -> Layout {
    Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), EmptyValues::Drop)
}

fn to_message_with(env: &Envelope, ctx: &Ctx, layout: &Layout) -> Message {
    let out = Outgoing::new(env, ctx, layout).unwrap();
    let msg = Message::new().set_attributes(
        out.attributes()
            .iter()
            .map(|(a, v)| (a.as_attr(), v.as_ref())),
    );
    msg.set_data(out.into_body().into_bytes())
}

fn config(topic: &str) -> PubSubConfig {
    PubSubConfig::new(PROJECT, topic)
        .and_then(|c| c.with_endpoint(endpoint()))
        .and_then(|c| c.with_auth(Auth::Anonymous))
        .and_then(|c| c.with_timeout(DEADLINE))
        .unwrap()
}

/// One sink on `topic`, taking every delivery.
async fn pubsub_sink_op(topic: &str, w: &Workload, batched: bool) -> Op {
    let sink = Arc::new(PubSubSink::new(config(topic)).await.unwrap());
    sink_op(vec![sink], usize::MAX, &w.env, batched)
}

/// The client configured as the sink configures its own: immediate (1 message, no delay)
/// or batched (the config's count, bytes and delay). With `encode` it builds each
/// delivery's own Message v1 and attributes, as a publisher of distinct hooks must;
/// without, it sends one message built once.
async fn raw_op(topic: &str, w: &Workload, batched: bool, encode: bool) -> Op {
    let cfg = config(topic);
    let base = BasePublisher::builder()
        .with_endpoint(endpoint())
        .with_retry_policy(NeverRetry)
        .with_credentials(google_cloud_auth::credentials::anonymous::Builder::new().build())
        .build()
        .await
        .unwrap();
    let name = format!("projects/{PROJECT}/topics/{topic}");
    let publisher: Publisher = if batched {
        base.publisher(name)
            .set_message_count_threshold(cfg.batch().max_messages().get())
            .set_byte_threshold(cfg.batch().max_bytes().get())
            .set_delay_threshold(cfg.batch().linger())
            .build()
    } else {
        base.publisher(name)
            .set_message_count_threshold(1)
            .set_delay_threshold(Duration::ZERO)
            .build()
    };
    let publisher = Arc::new(publisher);
    let msg = w.msg.clone();
    let encode = encode.then(|| {
        (
            Arc::clone(&w.env),
            ankusa_bench_support::vs_raw::raw_ctx(&w.env),
            layout(),
        )
    });
    Arc::new(move |_| {
        let msg = match &encode {
            Some((env, ctx, layout)) => to_message_with(env, ctx, layout),
            None => msg.clone(),
        };
        let fut = publisher.publish(msg);
        Box::pin(async move {
            match tokio::time::timeout(DEADLINE, fut).await {
                Ok(Ok(id)) if !id.is_empty() => Ok(()),
                Ok(Ok(_)) => Err("no message id".into()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("timeout".into()),
            }
        })
    })
}

/// The bench: one REST client for the emulator's topics.
struct PubSub {
    http: reqwest::Client,
    /// The raw side builds a message per delivery (`--only raw_encode`).
    raw_encodes: bool,
}

impl IndexedBench for PubSub {
    /// The immediate publisher.
    const UNBATCHED: &'static str = "default";
    const VARIANT_WIDTH: usize = 9;
    /// No request counter here: no requests-per-delivery columns.
    const COUNTS_REQUESTS: bool = false;
    const UNIT: &'static str = "delivery";

    /// One run of `s` on a fresh topic, deleted afterwards.
    async fn run_once(&self, mode: Mode, s: Spec) -> Run {
        let w = workload(s.body_bytes);
        let topic = unique_name("bench");
        create_topic(&self.http, &topic).await;
        let op = match mode {
            Mode::Sink => pubsub_sink_op(&topic, &w, s.batched).await,
            Mode::Raw => raw_op(&topic, &w, s.batched, self.raw_encodes).await,
        };
        let (seconds, lat) = drive::<Self>(op, s.deliveries, s.concurrency).await;
        delete_topic(&self.http, &topic).await;
        Run::new::<Self>(mode, s, seconds, lat, None)
    }
}

/// The workloads; at least 10 deliveries each.
fn pubsub_specs() -> Vec<Spec> {
    specs(
        [
            (1024, [(1, 2000), (16, 12_000), (256, 20_000)]),
            (65_536, [(1, 1000), (16, 4000), (256, 6000)]),
        ],
        [(16, 2000), (256, 40_000)],
        |x| x.max(10),
    )
}

/// The sink's own CPU work per delivery, µs, measured in-process: Message v1 encoding
/// (sha256 of the body, base64, JSON) plus the attributes and the `Message`.
fn sink_cpu_us(body_bytes: usize) -> Value {
    let w = workload(body_bytes);
    let ctx = ankusa_bench_support::vs_raw::raw_ctx(&w.env);
    let us = cpu_us(body_bytes, || {
        std::hint::black_box(to_message(&w.env, &ctx));
    });
    json!({"body_bytes": body_bytes, "message_bytes": w.msg.data.len(),
           "encode_us": (us * 10.0).round() / 10.0})
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn bench() {
    let bench = PubSub {
        http: http(),
        raw_encodes: false,
    };
    println!(
        "\npubsub vs raw ({}; median of {REPS}, interleaved)",
        endpoint()
    );
    // Warm the emulator's JVM and both paths first (not recorded, prints nothing).
    for mode in [Mode::Sink, Mode::Raw] {
        let warm = Spec {
            batched: false,
            concurrency: 16,
            body_bytes: 1024,
            deliveries: 5000,
        };
        bench.run_once(mode, warm).await;
    }
    let all = indexed::compare(&bench, pubsub_specs(), |_| REPS).await;
    let rss_sink = child_rss(Mode::Sink, &[]);
    let rss_raw = child_rss(Mode::Raw, &[]);
    println!("peak RSS (VmHWM, c=16 1 KiB only): sink {rss_sink} kB, raw {rss_raw} kB");
    let cpu = vec![sink_cpu_us(1024), sink_cpu_us(65_536)];
    println!("sink CPU per delivery (in-process): {cpu:?}");
    let doc = json!({
        "adapter": "pubsub",
        "server": format!("Google Cloud Pub/Sub emulator (Java) on {}", host()),
        "notes": "The emulator, not the client, bounds the absolute figures; compare sink and \
                  raw side by side. One fresh topic per run, after a discarded warm-up of both paths. Raw publishes the same Message v1 \
                  data and attributes, encoded once. default = immediate publisher (1 message, \
                  no delay); batched = ctx.batch through the batching publisher (100 messages, \
                  1 MB, 10 ms), raw with the same thresholds.",
        "runs": all.iter().map(Run::json).collect::<Vec<_>>(),
        "peak_rss_kb": {"sink": rss_sink, "raw": rss_raw},
        "sink_cpu_per_delivery": cpu,
    });
    let path = write_results("pubsub", &doc);
    println!("wrote {}", path.display());
}

/// `mode` is `None` for `raw_encode`.
async fn only(mode: Option<Mode>, batched: bool) {
    // `--batched`: a longer batched run, for profiling.
    let mut s = Spec {
        batched,
        concurrency: if batched { 256 } else { 16 },
        body_bytes: 1024,
        deliveries: if batched { 100_000 } else { 3000 },
    };
    // `--profile <concurrency> <deliveries> <body_bytes>`: a longer run of the default variant.
    if let Some(i) = std::env::args().position(|a| a == "--profile") {
        let arg = |k: usize| std::env::args().nth(i + k).and_then(|v| v.parse().ok());
        s.concurrency = arg(1).unwrap_or(256);
        s.deliveries = arg(2).unwrap_or(50_000);
        s.body_bytes = arg(3).unwrap_or(1024);
    }
    let bench = PubSub {
        http: http(),
        raw_encodes: mode.is_none(),
    };
    let run = bench.run_once(mode.unwrap_or(Mode::Raw), s).await;
    println!("{}", run.json());
    print_vm_hwm();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let only_mode = only_child_arg(&args);
    runtime().block_on(async {
        match only_mode {
            Some(m) => only(m, args.iter().any(|a| a == "--batched")).await,
            None => bench().await,
        }
    });
}

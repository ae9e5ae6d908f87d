//! SqsSink / SnsSink / KinesisSink / EventBridgeSink vs raw aws-sdk-sqs / aws-sdk-sns /
//! aws-sdk-kinesis / aws-sdk-eventbridge (same SDK config: region, endpoint, credentials,
//! retries off, timeouts) against moto on 127.0.0.1:4566.
//!
//! `cargo bench -p ankusa-sink-aws --bench vs_raw [-- sqs|sns|kinesis|eventbridge]`; JSON
//! to `$BENCH_OUT_DIR/{sqs,sns,kinesis,eventbridge}.json` (default `target/bench-results/`).
//! Kinesis and EventBridge run smaller workloads (`stream_specs`): the raw side sends the
//! same Message v1 as the record's data (keyed by the idempotency key) or the event's
//! `Detail`, its batches are 10 records or entries (`PutRecords`, `PutEvents`), and the
//! event buses have no rule (moto routes an event to a target in about 0.1 s). moto slows down as one
//! queue fills, so every run creates fresh queues/topics of at most 50 messages and deletes
//! them afterwards. The raw side sends the same wire bytes (a Message v1 body encoded once,
//! the same attributes); the sink encodes, sizes and (SQS) MD5-checks per delivery.
//! Knobs: `BENCH_SCALE` (count factor), `BENCH_ONLY=batched`, `BENCH_SQS_PER_DEST_BATCHED`,
//! `BENCH_RAW_MD5=1` (the raw SQS side checks every answer's MD5 as the sink does).
//!
//! `-- fast` runs the same comparison against a fast in-process SQS/SNS instead of moto
//! (`fast_aws/server.rs`: the real wire protocols and MD5s, one server thread), where the
//! client, not the server, bounds throughput: one destination per run, larger counts, every
//! message counted at the server, and a batched row at equal in-flight counts (c=160: the
//! raw side's 16 requests of 10). JSON to `{sqs,sns}-fast.json`.
#![allow(missing_docs)]

use ankusa_bench_support::indexed::{
    self, IndexedBench, Op, REPS, Run, Spec, child_rss, cpu_us, drive, envelope, runtime, sink_op,
    specs,
};
use ankusa_bench_support::{Mode, only_mode_arg, print_vm_hwm, write_results};
use ankusa_message::{DEFAULT_INLINE_MAX_BYTES, EmptyValues, Layout, Outgoing};
use ankusa_sink_aws::{
    AwsOptions, EventBridgeConfig, EventBridgeSink, KinesisConfig, KinesisSink, SnsConfig, SnsSink,
    SqsConfig, SqsSink, StaticCredentials,
};
use ankusa_sink_core::{Envelope, Sink};
use ankusa_sink_testkit::support::unique_name;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

#[path = "fast_aws/server.rs"]
mod fast_aws;
use fast_aws::FastAws;

// The integration tests' request counter, so both count requests the same way.
#[path = "../tests/it/request_counter.rs"]
mod request_counter;
use request_counter::RequestCounter;

const ACCOUNT: &str = "123456789012";
const REGION: &str = "us-east-1";
/// Messages per queue/topic (moto's per-message cost grows with the queue's depth).
const PER_DEST: usize = 50;
/// Batched runs: larger blocks, so one sink (one batcher) gets each run of deliveries
/// instead of the in-flight window straddling several (depth stays small next to a request).
const PER_DEST_BATCHED: usize = 500;
/// SQS batched: moto's SQS cost per message grows steeply with the queue's depth (it scans
/// the queue on every send), so batched SQS runs keep 50-message queues; the 256 in flight
/// then straddle ~6 sinks, each flushing a partial batch after linger (see `one_queue`).
const PER_DEST_BATCHED_SQS: usize = 50;

/// The events' `Source` (the buses have no rule: nothing matches it).
const BENCH_SOURCE: &str = "com.example.bench";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Service {
    Sqs,
    Sns,
    Kinesis,
    EventBridge,
}

impl Service {
    fn name(self) -> &'static str {
        match self {
            Service::Sqs => "sqs",
            Service::Sns => "sns",
            Service::Kinesis => "kinesis",
            Service::EventBridge => "eventbridge",
        }
    }
}

/// The fast server's endpoint, once `-- fast` started it.
static FAST_ENDPOINT: OnceLock<String> = OnceLock::new();

fn endpoint() -> String {
    if let Some(ep) = FAST_ENDPOINT.get() {
        return ep.clone();
    }
    std::env::var("ANKUSA_MOTO_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4566".into())
}

fn options() -> AwsOptions {
    AwsOptions::default()
        .with_region(REGION)
        .with_endpoint(endpoint())
        .with_credentials(StaticCredentials::new(
            "AKIAIOSFODNN7EXAMPLE",
            "moto-secret-not-checked",
        ))
        .with_timeout(Duration::from_secs(30))
}

/// One client per service with the sink's SDK config, all counting into one counter.
#[derive(Clone)]
struct Clients {
    sqs: aws_sdk_sqs::Client,
    sns: aws_sdk_sns::Client,
    kinesis: aws_sdk_kinesis::Client,
    eventbridge: aws_sdk_eventbridge::Client,
    counter: RequestCounter,
}

async fn clients(counter: Option<RequestCounter>) -> Clients {
    let ep = endpoint();
    let sqs_cfg = SqsConfig::new(format!("{ep}/{ACCOUNT}/x"), options()).unwrap();
    let sdk = sqs_cfg.sdk_config().await.unwrap();
    let counter = counter.unwrap_or_default();
    let sqs = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::config::Builder::from(&sdk)
            .interceptor(counter.clone())
            .build(),
    );
    let sns_cfg = SnsConfig::new(format!("arn:aws:sns:{REGION}:{ACCOUNT}:x"), options()).unwrap();
    let sdk = sns_cfg.sdk_config().await.unwrap();
    let sns = aws_sdk_sns::Client::from_conf(
        aws_sdk_sns::config::Builder::from(&sdk)
            .interceptor(counter.clone())
            .build(),
    );
    let sdk = KinesisConfig::new("x", options())
        .unwrap()
        .sdk_config()
        .await
        .unwrap();
    let kinesis = aws_sdk_kinesis::Client::from_conf(
        aws_sdk_kinesis::config::Builder::from(&sdk)
            .interceptor(counter.clone())
            .build(),
    );
    let sdk = EventBridgeConfig::new(BENCH_SOURCE, options())
        .unwrap()
        .sdk_config()
        .await
        .unwrap();
    let eventbridge = aws_sdk_eventbridge::Client::from_conf(
        aws_sdk_eventbridge::config::Builder::from(&sdk)
            .interceptor(counter.clone())
            .build(),
    );
    Clients {
        sqs,
        sns,
        kinesis,
        eventbridge,
        counter,
    }
}

/// Create `k` queues (URLs) or topics (ARNs).
async fn create(admin: &Clients, svc: Service, k: usize) -> Vec<String> {
    let mut set = tokio::task::JoinSet::new();
    for i in 0..k {
        let a = admin.clone();
        set.spawn(async move {
            let name = unique_name(&format!("ankusa-bench-{}", svc.name()));
            let d = match svc {
                Service::Sqs => a
                    .sqs
                    .create_queue()
                    .queue_name(name)
                    .send()
                    .await
                    .unwrap()
                    .queue_url()
                    .unwrap()
                    .to_owned(),
                Service::Sns => a
                    .sns
                    .create_topic()
                    .name(name)
                    .send()
                    .await
                    .unwrap()
                    .topic_arn()
                    .unwrap()
                    .to_owned(),
                Service::Kinesis => {
                    a.kinesis
                        .create_stream()
                        .stream_name(&name)
                        .shard_count(1)
                        .send()
                        .await
                        .unwrap();
                    name
                }
                Service::EventBridge => {
                    a.eventbridge
                        .create_event_bus()
                        .name(&name)
                        .send()
                        .await
                        .unwrap();
                    name
                }
            };
            (i, d)
        });
    }
    let mut out = vec![String::new(); k];
    while let Some(r) = set.join_next().await {
        let (i, d) = r.unwrap();
        out[i] = d;
    }
    out
}

async fn delete(admin: &Clients, svc: Service, dests: Vec<String>) {
    let mut set = tokio::task::JoinSet::new();
    for d in dests {
        let a = admin.clone();
        set.spawn(async move {
            match svc {
                Service::Sqs => {
                    let _ = a.sqs.delete_queue().queue_url(d).send().await;
                }
                Service::Sns => {
                    let _ = a.sns.delete_topic().topic_arn(d).send().await;
                }
                Service::Kinesis => {
                    let _ = a.kinesis.delete_stream().stream_name(d).send().await;
                }
                Service::EventBridge => {
                    let _ = a.eventbridge.delete_event_bus().name(d).send().await;
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
}

struct Workload {
    env: Arc<Envelope>,
    /// The Message v1 body the sink would send (raw sends it as is).
    body: Arc<String>,
    attrs: Vec<(&'static str, String)>,
}

/// What the sinks build per delivery: the Message v1 body and the attributes, once.
fn layout() -> Layout {
    Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), EmptyValues::Drop)
}

fn workload(body_bytes: usize) -> Workload {
    let env = envelope(body_bytes);
    let ctx = ankusa_bench_support::vs_raw::raw_ctx(&env);
    let out = Outgoing::new(&env, &ctx, &layout()).unwrap();
    let attrs = out
        .attributes()
        .iter()
        .map(|(a, v)| (a.as_attr(), v.to_string()))
        .collect();
    let body = out.into_body().as_bytes().to_vec();
    Workload {
        env: Arc::new(env),
        body: Arc::new(String::from_utf8(body).unwrap()),
        attrs,
    }
}

/// One sink per destination, over the bench's clients.
fn sinks(c: &Clients, svc: Service, dests: &[String]) -> Vec<Arc<dyn Sink>> {
    dests
        .iter()
        .map(|d| -> Arc<dyn Sink> {
            match svc {
                Service::Sqs => Arc::new(SqsSink::from_client(
                    SqsConfig::new(d, options()).unwrap(),
                    c.sqs.clone(),
                )),
                Service::Sns => Arc::new(SnsSink::from_client(
                    SnsConfig::new(d, options()).unwrap(),
                    c.sns.clone(),
                )),
                Service::Kinesis => Arc::new(KinesisSink::from_client(
                    KinesisConfig::new(d, options()).unwrap(),
                    c.kinesis.clone(),
                )),
                Service::EventBridge => Arc::new(EventBridgeSink::from_client(
                    EventBridgeConfig::new(BENCH_SOURCE, options())
                        .unwrap()
                        .with_event_bus_name(d)
                        .unwrap(),
                    c.eventbridge.clone(),
                )),
            }
        })
        .collect()
}

/// One raw client (as the src `Publisher` does for the sinks): one message, or a batch of
/// ten, of the same body and attributes to one destination.
trait Raw: Clone + Send + Sync + 'static {
    /// The SDK's attribute map, built once per run.
    type Attributes: Send + Sync + 'static;
    fn attributes(w: &Workload) -> Self::Attributes;
    /// `SendMessage` / `Publish`.
    fn send(
        &self,
        dest: &str,
        body: &str,
        attrs: &Self::Attributes,
    ) -> impl Future<Output = Result<(), String>> + Send;
    /// A 10-entry `SendMessageBatch` / `PublishBatch`, all accepted.
    fn send_ten(
        &self,
        dest: &str,
        body: &str,
        attrs: &Self::Attributes,
    ) -> impl Future<Output = Result<(), String>> + Send;
}

/// [`Raw`] for one SDK's client: the SQS and SNS calls differ only in their names.
macro_rules! raw_client {
    ($sdk:ident: $send:ident($dest:ident, $body:ident),
        $batch:ident($set_entries:ident, $entry:ident($entry_body:ident)),
        check($check_one:path, $check_batch:path)) => {
        impl Raw for $sdk::Client {
            type Attributes = HashMap<String, $sdk::types::MessageAttributeValue>;

            fn attributes(w: &Workload) -> Self::Attributes {
                w.attrs
                    .iter()
                    .map(|(k, v)| {
                        let a = $sdk::types::MessageAttributeValue::builder()
                            .data_type("String")
                            .string_value(v)
                            .build()
                            .unwrap();
                        ((*k).to_owned(), a)
                    })
                    .collect()
            }

            async fn send(
                &self,
                dest: &str,
                body: &str,
                attrs: &Self::Attributes,
            ) -> Result<(), String> {
                let out = self
                    .$send()
                    .$dest(dest)
                    .$body(body)
                    .set_message_attributes(Some(attrs.clone()))
                    .send()
                    .await
                    .map_err(|e| format!("{e:?}"))?;
                out.message_id().ok_or("no message id")?;
                $check_one(&out, body)
            }

            async fn send_ten(
                &self,
                dest: &str,
                body: &str,
                attrs: &Self::Attributes,
            ) -> Result<(), String> {
                let entries = (0..10)
                    .map(|j| {
                        $sdk::types::$entry::builder()
                            .id(j.to_string())
                            .$entry_body(body)
                            .set_message_attributes(Some(attrs.clone()))
                            .build()
                            .unwrap()
                    })
                    .collect();
                let out = self
                    .$batch()
                    .$dest(dest)
                    .$set_entries(Some(entries))
                    .send()
                    .await
                    .map_err(|e| format!("{e:?}"))?;
                match out.successful().len() {
                    10 => $check_batch(&out, body),
                    n => Err(format!("{n} of 10 accepted")),
                }
            }
        }
    };
}

raw_client!(aws_sdk_sqs: send_message(queue_url, message_body),
    send_message_batch(set_entries, SendMessageBatchRequestEntry(message_body)),
    check(sqs_md5_one, sqs_md5_batch));
raw_client!(aws_sdk_sns: publish(topic_arn, message),
    publish_batch(set_publish_batch_request_entries, PublishBatchRequestEntry(message)),
    check(no_check, no_check));

/// `BENCH_RAW_MD5=1`: the raw SQS side checks `MD5OfMessageBody` like the sink (an MD5 of
/// the body computed per message, as a sender of distinct messages must), so a run splits
/// the sink's gap into that check and the rest. Off by default: `raw` is the bare SDK,
/// which checks nothing.
fn raw_md5() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("BENCH_RAW_MD5").is_ok_and(|v| v == "1"))
}

/// With `BENCH_RAW_MD5=1`, `got` must be the MD5 of `body`; otherwise nothing is checked.
fn check_md5(body: &str, got: Option<&str>) -> Result<(), String> {
    if !raw_md5() {
        return Ok(());
    }
    let want = fast_aws::md5_hex(body.as_bytes());
    match got {
        Some(g) if g.eq_ignore_ascii_case(&want) => Ok(()),
        _ => Err(format!("MD5OfMessageBody {got:?}, sent {want}")),
    }
}

fn sqs_md5_one(
    out: &aws_sdk_sqs::operation::send_message::SendMessageOutput,
    body: &str,
) -> Result<(), String> {
    check_md5(body, out.md5_of_message_body())
}

fn sqs_md5_batch(
    out: &aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput,
    body: &str,
) -> Result<(), String> {
    out.successful()
        .iter()
        .try_for_each(|e| check_md5(body, Some(e.md5_of_message_body())))
}

fn no_check<T>(_: &T, _: &str) -> Result<(), String> {
    Ok(())
}

/// Kinesis as the sink writes it: the Message v1 as the data, keyed by the idempotency key.
impl Raw for aws_sdk_kinesis::Client {
    /// The partition key.
    type Attributes = String;

    fn attributes(w: &Workload) -> String {
        w.env.idempotency_key().into_owned()
    }

    async fn send(&self, dest: &str, body: &str, key: &String) -> Result<(), String> {
        let out = self
            .put_record()
            .stream_name(dest)
            .data(aws_sdk_kinesis::primitives::Blob::new(body.as_bytes()))
            .partition_key(key)
            .send()
            .await
            .map_err(|e| format!("{e:?}"))?;
        match out.sequence_number().is_empty() {
            false => Ok(()),
            true => Err("no sequence number".into()),
        }
    }

    async fn send_ten(&self, dest: &str, body: &str, key: &String) -> Result<(), String> {
        let records = (0..10)
            .map(|_| {
                aws_sdk_kinesis::types::PutRecordsRequestEntry::builder()
                    .data(aws_sdk_kinesis::primitives::Blob::new(body.as_bytes()))
                    .partition_key(key)
                    .build()
                    .unwrap()
            })
            .collect();
        let out = self
            .put_records()
            .stream_name(dest)
            .set_records(Some(records))
            .send()
            .await
            .map_err(|e| format!("{e:?}"))?;
        match out.failed_record_count() {
            Some(0) | None => Ok(()),
            Some(n) => Err(format!("{n} of 10 failed")),
        }
    }
}

/// EventBridge as the sink puts it: the Message v1 as `Detail`.
impl Raw for aws_sdk_eventbridge::Client {
    type Attributes = ();

    fn attributes(_: &Workload) {}

    async fn send(&self, dest: &str, body: &str, _: &()) -> Result<(), String> {
        put_events(self, dest, body, 1).await
    }

    async fn send_ten(&self, dest: &str, body: &str, _: &()) -> Result<(), String> {
        put_events(self, dest, body, 10).await
    }
}

/// `n` events of `body` on bus `dest`, each answered with an event id.
async fn put_events(
    c: &aws_sdk_eventbridge::Client,
    dest: &str,
    body: &str,
    n: usize,
) -> Result<(), String> {
    let entries = (0..n)
        .map(|_| {
            aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
                .event_bus_name(dest)
                .source(BENCH_SOURCE)
                .detail_type("ankusa.message.v1")
                .detail(body)
                .build()
        })
        .collect();
    let out = c
        .put_events()
        .set_entries(Some(entries))
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    let ok = out
        .entries()
        .iter()
        .filter(|e| e.event_id().is_some())
        .count();
    match ok == n {
        true => Ok(()),
        false => Err(format!("{ok} of {n} put")),
    }
}

/// The raw op: one message per unit, or (batched) a batch of ten per unit.
fn raw_op<R: Raw>(
    client: &R,
    dests: &[String],
    w: &Workload,
    batched: bool,
    per_dest: usize,
) -> Op {
    let dests = Arc::new(dests.to_vec());
    let (client, body, attrs) = (
        client.clone(),
        Arc::clone(&w.body),
        Arc::new(R::attributes(w)),
    );
    Arc::new(move |i| {
        let (client, attrs, body, dests) = (
            client.clone(),
            Arc::clone(&attrs),
            Arc::clone(&body),
            Arc::clone(&dests),
        );
        Box::pin(async move {
            if batched {
                client
                    .send_ten(&dests[i * 10 / per_dest], &body, &attrs)
                    .await
            } else {
                client.send(&dests[i / per_dest], &body, &attrs).await
            }
        })
    })
}

/// One service's bench: sink and raw on their own clients, destinations made by `admin`.
struct Aws {
    svc: Service,
    admin: Clients,
    sink: Clients,
    raw: Clients,
    /// The fast server, when the bench runs against it instead of moto.
    fast: Option<Arc<FastAws>>,
}

impl Aws {
    /// Each side on clients of its own, destinations made by a third.
    async fn new(svc: Service, fast: Option<Arc<FastAws>>) -> Aws {
        Aws {
            svc,
            admin: clients(None).await,
            sink: clients(None).await,
            raw: clients(None).await,
            fast,
        }
    }

    /// One run of `s` on fresh destinations of `per_dest` messages (`None`: the default for
    /// the variant), deleted afterwards.
    async fn run_at(&self, mode: Mode, s: Spec, per_dest: Option<usize>) -> Run {
        let (c, svc) = (
            if mode == Mode::Sink {
                &self.sink
            } else {
                &self.raw
            },
            self.svc,
        );
        let w = workload(s.body_bytes);
        let per_dest = per_dest.unwrap_or(match (s.batched, svc) {
            // The fast server does not slow down as a destination fills: one per run.
            _ if self.fast.is_some() => s.deliveries,
            // A bus without rules keeps nothing: one per run.
            (_, Service::EventBridge) => s.deliveries,
            // Kinesis too: moto lists a shard's records on every put, so small streams.
            (false, _) => PER_DEST,
            (true, Service::Sqs) => std::env::var("BENCH_SQS_PER_DEST_BATCHED")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(PER_DEST_BATCHED_SQS),
            (true, Service::Sns) => PER_DEST_BATCHED,
            (true, Service::Kinesis) => PER_DEST_BATCHED,
        });
        let dests = create(&self.admin, svc, s.deliveries.div_ceil(per_dest)).await;
        let raw_batched = mode == Mode::Raw && s.batched;
        let op = match (mode, svc) {
            (Mode::Sink, _) => sink_op(sinks(c, svc, &dests), per_dest, &w.env, s.batched),
            (Mode::Raw, Service::Sqs) => raw_op(&c.sqs, &dests, &w, s.batched, per_dest),
            (Mode::Raw, Service::Sns) => raw_op(&c.sns, &dests, &w, s.batched, per_dest),
            (Mode::Raw, Service::Kinesis) => raw_op(&c.kinesis, &dests, &w, s.batched, per_dest),
            (Mode::Raw, Service::EventBridge) => {
                raw_op(&c.eventbridge, &dests, &w, s.batched, per_dest)
            }
        };
        // A raw batch carries 10 deliveries; as many messages in flight as the sink may have,
        // at most the sink's 16 batch requests.
        let (units, workers) = if raw_batched {
            (s.deliveries / 10, s.concurrency.div_ceil(10).min(16))
        } else {
            (s.deliveries, s.concurrency)
        };
        let before = c.counter.count();
        let (seconds, lat) = drive::<Self>(op, units, workers).await;
        let requests = c.counter.count() - before;
        if let Some(server) = &self.fast {
            let got: usize = dests.iter().map(|d| server.received(d)).sum();
            assert_eq!(got, s.deliveries, "messages the fast server received");
        }
        delete(&self.admin, svc, dests).await;
        Run::new::<Self>(mode, s, seconds, lat, Some(requests))
    }
}

impl IndexedBench for Aws {
    const UNBATCHED: &'static str = "unbatched";
    const VARIANT_WIDTH: usize = 10;
    /// Requests are counted (SDK interceptor): the table shows requests per delivery.
    const COUNTS_REQUESTS: bool = true;
    /// A delivery, or a raw batch of 10.
    const UNIT: &'static str = "unit";

    fn run_once(&self, mode: Mode, spec: Spec) -> impl Future<Output = Run> {
        self.run_at(mode, spec, None)
    }
}

/// The workloads; counts are multiples of 50 (whole queues).
fn aws_specs() -> Vec<Spec> {
    specs(
        [
            (1024, [(1, 150), (16, 1000), (256, 800)]),
            (65_536, [(1, 100), (16, 300), (256, 500)]),
        ],
        [(16, 1000), (256, 2000)],
        |x| (x / 50).max(1) * 50,
    )
}

/// Kinesis and EventBridge: the same shapes, smaller (counts are multiples of 50).
fn stream_specs() -> Vec<Spec> {
    specs(
        [
            (1024, [(1, 100), (16, 500), (256, 500)]),
            (65_536, [(1, 50), (16, 100), (256, 200)]),
        ],
        [(16, 500), (256, 1000)],
        |x| (x / 50).max(1) * 50,
    )
}

/// The workloads against the fast server (counts are multiples of 10: whole raw batches),
/// plus batched at c=160, where both sides have 160 messages in flight (the raw side's 16
/// requests of 10; at c=256 the sink holds 256 deliveries, the raw side still 160).
fn fast_specs() -> Vec<Spec> {
    let mut v = specs(
        [
            (1024, [(1, 2000), (16, 10_000), (256, 10_000)]),
            (65_536, [(1, 500), (16, 2000), (256, 2000)]),
        ],
        [(16, 20_000), (256, 20_000)],
        |x| (x / 10).max(1) * 10,
    );
    let n = v.last().expect("batched specs").deliveries;
    v.push(Spec {
        batched: true,
        concurrency: 160,
        body_bytes: 1024,
        deliveries: n,
    });
    v
}

/// Batched over unbatched throughput at each concurrency both were run at (1 KiB), for
/// the sink and for raw, from the runs' JSON.
fn batching_gain(runs: &[Value]) -> Value {
    let find = |mode: &str, variant: &str, conc: u64| {
        runs.iter().find(|r| {
            r["mode"] == mode
                && r["variant"] == variant
                && r["concurrency"] == conc
                && r["body_bytes"] == 1024
        })
    };
    let mut out = Vec::new();
    for conc in [16u64, 256] {
        for mode in ["sink", "raw"] {
            if let (Some(b), Some(u)) = (find(mode, "batched", conc), find(mode, "unbatched", conc))
            {
                let gain = b["per_sec"].as_f64().unwrap() / u["per_sec"].as_f64().unwrap();
                println!("batched / unbatched, c={conc}, 1 KiB, {mode}: {gain:.2}x");
                out.push(json!({"mode": mode, "concurrency": conc,
                                "gain": (gain * 100.0).round() / 100.0}));
            }
        }
    }
    Value::Array(out)
}

/// The sink's own CPU work per delivery, µs, measured in-process: Message v1 encoding
/// (sha256 of the body, base64, JSON), the attributes, and the MD5 the SQS sink checks.
fn sink_cpu_us(body_bytes: usize) -> Value {
    let w = workload(body_bytes);
    let ctx = ankusa_bench_support::vs_raw::raw_ctx(&w.env);
    let layout = layout();
    let encode = cpu_us(body_bytes, || {
        std::hint::black_box(Outgoing::new(&w.env, &ctx, &layout).unwrap());
    });
    let md5 = cpu_us(body_bytes, || {
        std::hint::black_box(fast_aws::md5_hex(w.body.as_bytes()));
    });
    json!({"body_bytes": body_bytes, "message_bytes": w.body.len(),
           "encode_us": (encode * 10.0).round() / 10.0, "md5_us": (md5 * 10.0).round() / 10.0})
}

/// What the JSON says about how `svc` was measured.
fn notes(svc: Service) -> &'static str {
    match svc {
        Service::Sqs | Service::Sns => {
            "moto, not the client, bounds the absolute figures (a few hundred to a few \
             thousand requests/s on this 2-core machine); compare sink and raw side by \
             side. Fresh queues/topics of at most 50 messages per run (moto slows as one \
             queue fills). Raw sends the same Message v1 body and attributes, encoded \
             once; raw batched = 10-entry batch requests, ceil(concurrency/10) (max 16) \
             in flight. Batched runs: SNS topics of 500 messages (one sink's batcher sees the \
             window); SQS queues of 50 (moto rescans a queue on every send), so the 256 \
             in flight straddle ~6 sinks and each flushes a partial batch after linger: \
             one_destination_batched shows the batcher alone (500 to one queue/topic). \
             Requests counted with an SDK interceptor."
        }
        Service::Kinesis | Service::EventBridge => {
            "moto, not the client, bounds the absolute figures; compare sink and raw side by \
             side. Kinesis: fresh one-shard streams of 50 records unbatched, 500 batched \
             (moto lists a shard's records on every put); the sink's PutRecords carry up to \
             500 records, raw batched = 10-record PutRecords, ceil(concurrency/10) (max 16) in \
             flight. EventBridge: one fresh bus per run, without rules (moto spends ~0.1 s \
             routing an event to a target); both sides send PutEvents of up to 10. Raw sends \
             the same Message v1 (data keyed by the idempotency key; Detail), encoded once. \
             Requests counted with an SDK interceptor."
        }
    }
}

async fn bench(svc: Service) {
    let bench = Aws::new(svc, None).await;
    println!(
        "\n{} vs raw ({}; median of {REPS} (c=1: 5), interleaved)",
        svc.name(),
        endpoint()
    );
    let only_batched = std::env::var("BENCH_ONLY").is_ok_and(|v| v == "batched");
    let all_specs = match svc {
        Service::Sqs | Service::Sns => aws_specs(),
        Service::Kinesis | Service::EventBridge => stream_specs(),
    };
    let specs = all_specs
        .into_iter()
        .filter(|s| s.batched || !only_batched)
        .collect();
    let all = indexed::compare(
        &bench,
        specs,
        // c=1 runs are short and noisy: more repetitions.
        |s| if s.concurrency == 1 { 5 } else { REPS },
    )
    .await;
    // Requests per delivery with the whole in-flight window on one sink: one queue of 500
    // (slow on moto: the queue's depth, not the batcher, sets its throughput).
    let one = Spec {
        batched: true,
        concurrency: 256,
        body_bytes: 1024,
        deliveries: 500,
    };
    let one_sink = bench.run_at(Mode::Sink, one, Some(500)).await;
    let one_raw = bench.run_at(Mode::Raw, one, Some(500)).await;
    println!(
        "batched, one destination, c=256, 500 deliveries: requests/delivery sink {:.3}, raw {:.3}",
        one_sink.rpd().unwrap(),
        one_raw.rpd().unwrap()
    );
    let rss_sink = child_rss(Mode::Sink, &[svc.name()]);
    let rss_raw = child_rss(Mode::Raw, &[svc.name()]);
    println!("peak RSS (VmHWM, c=16 1 KiB unbatched only): sink {rss_sink} kB, raw {rss_raw} kB");
    let cpu = vec![sink_cpu_us(1024), sink_cpu_us(65_536)];
    println!("sink CPU per delivery (in-process): {cpu:?}");
    let doc = json!({
        "adapter": svc.name(),
        "server": format!("moto on {} (single Python process)", endpoint()),
        "notes": notes(svc),
        "runs": all.iter().map(Run::json).collect::<Vec<_>>(),
        "peak_rss_kb": {"sink": rss_sink, "raw": rss_raw},
        "sink_cpu_per_delivery": cpu,
        "one_destination_batched": [one_sink.json(), one_raw.json()],
    });
    let path = write_results(svc.name(), &doc);
    println!("wrote {}", path.display());
}

/// The comparison against the fast server.
async fn bench_fast(svc: Service, fast: Arc<FastAws>) {
    let bench = Aws::new(svc, Some(fast)).await;
    println!(
        "\n{} vs raw (fast in-process server on {}; median of {REPS}, interleaved)",
        svc.name(),
        endpoint()
    );
    let runs: Vec<Value> = indexed::compare(&bench, fast_specs(), |_| REPS)
        .await
        .iter()
        .map(Run::json)
        .collect();
    let gain = batching_gain(&runs);
    let rss_sink = child_rss(Mode::Sink, &[svc.name(), "fast"]);
    let rss_raw = child_rss(Mode::Raw, &[svc.name(), "fast"]);
    println!("peak RSS (VmHWM, c=16 1 KiB unbatched only): sink {rss_sink} kB, raw {rss_raw} kB");
    let name = format!("{}-fast", svc.name());
    let doc = json!({
        "adapter": name,
        "server": format!("fast in-process {} on {} (one thread; real wire protocol and MD5s)",
                          svc.name(), endpoint()),
        "notes": "The client bounds throughput here, not the server. One destination per run; \
                  every message counted at the server. Raw sends the same Message v1 body and \
                  attributes, encoded once; raw batched = 10-entry batch requests, \
                  ceil(concurrency/10) (max 16) in flight, so batched c=160 is the row at \
                  equal in-flight counts. Requests counted with an SDK interceptor.",
        "runs": runs,
        "batched_over_unbatched": gain,
        "peak_rss_kb": {"sink": rss_sink, "raw": rss_raw},
    });
    let path = write_results(&name, &doc);
    println!("wrote {}", path.display());
}

async fn only(svc: Service, mode: Mode, fast: Option<Arc<FastAws>>) {
    let admin = clients(None).await;
    // One client pair for the one mode that runs.
    let c = clients(None).await;
    let bench = Aws {
        svc,
        admin,
        sink: c.clone(),
        raw: c,
        fast,
    };
    // `BENCH_PROFILE=batched|unbatched,<concurrency>,<body bytes>,<deliveries>`: one long
    // run of one workload to profile one side alone (with `--only`).
    let s = match std::env::var("BENCH_PROFILE") {
        Ok(p) => {
            let f: Vec<&str> = p.split(',').collect();
            let n = |i: usize| f[i].parse().expect("BENCH_PROFILE=variant,conc,body,n");
            Spec {
                batched: f[0] == "batched",
                concurrency: n(1),
                body_bytes: n(2),
                deliveries: n(3),
            }
        }
        Err(_) => Spec {
            batched: false,
            concurrency: 16,
            body_bytes: 1024,
            deliveries: 1000,
        },
    };
    let t = std::time::Instant::now();
    bench.run_at(mode, s, None).await;
    println!(
        "{} per second",
        (s.deliveries as f64 / t.elapsed().as_secs_f64()).round()
    );
    print_vm_hwm();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let only_mode = only_mode_arg(&args);
    // Other arguments: `--bench` and filters cargo passes.
    let mut services: Vec<Service> = args
        .iter()
        .filter_map(|a| match a.as_str() {
            "sqs" => Some(Service::Sqs),
            "sns" => Some(Service::Sns),
            "kinesis" => Some(Service::Kinesis),
            "eventbridge" => Some(Service::EventBridge),
            _ => None,
        })
        .collect();
    let fast_mode = args.iter().any(|a| a == "fast");
    if services.is_empty() {
        services = if fast_mode {
            vec![Service::Sqs, Service::Sns]
        } else {
            vec![
                Service::Sqs,
                Service::Sns,
                Service::Kinesis,
                Service::EventBridge,
            ]
        };
    }
    // The fast server speaks SQS and SNS only.
    assert!(
        !fast_mode
            || services
                .iter()
                .all(|s| matches!(s, Service::Sqs | Service::Sns)),
        "-- fast runs sqs and sns only"
    );
    let fast = args.iter().any(|a| a == "fast").then(|| {
        let server = FastAws::start();
        FAST_ENDPOINT
            .set(server.endpoint().to_owned())
            .expect("one fast server");
        Arc::new(server)
    });
    runtime().block_on(async {
        match only_mode {
            Some(m) => only(services[0], m, fast).await,
            None => {
                for svc in services {
                    match &fast {
                        Some(server) => bench_fast(svc, Arc::clone(server)).await,
                        None => bench(svc).await,
                    }
                }
            }
        }
    });
}

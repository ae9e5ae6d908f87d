//! Shared helpers: moto addresses, unique names, envelopes, readback, request counting.

use ankusa_message::{EmptyValues, Layout, Outgoing};
use ankusa_sink_aws::{AwsOptions, SnsConfig, SqsConfig, StaticCredentials};
use ankusa_sink_core::{Class, Ctx, Description, Envelope, Failure, Sink};
use ankusa_sink_testkit::support::unique_name;
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use ankusa_sink_testkit::support::free_port;

pub(crate) use crate::request_counter::RequestCounter;
pub(crate) use crate::serial::kinesis_moto;

/// moto's endpoint: `ANKUSA_MOTO_ENDPOINT`, default `http://127.0.0.1:4566`
/// (`scripts/services/moto.sh` starts it).
pub(crate) fn moto() -> String {
    std::env::var("ANKUSA_MOTO_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4566".into())
}

/// moto's `host:port` (of [`moto`]), for `require_broker!`.
pub(crate) fn moto_addr() -> String {
    let m = moto();
    let rest = m.split_once("://").map_or(m.as_str(), |(_, r)| r);
    rest.trim_end_matches('/').to_owned()
}

pub(crate) const ACCOUNT: &str = "123456789012";
pub(crate) const REGION: &str = "us-east-1";

/// A name no other test or run uses.
pub(crate) fn unique(prefix: &str) -> String {
    unique_name(&format!("ankusa-{prefix}"))
}

pub(crate) fn creds() -> StaticCredentials {
    StaticCredentials::new("AKIAIOSFODNN7EXAMPLE", "moto-secret-not-checked")
}

pub(crate) fn options(endpoint: &str) -> AwsOptions {
    AwsOptions::default()
        .with_region(REGION)
        .with_endpoint(endpoint)
        .with_credentials(creds())
        // moto answers in milliseconds when idle but can take seconds while the suite
        // loads it (200 concurrent publishes, O(n) receives): no false timeouts.
        .with_timeout(Duration::from_secs(15))
}

pub(crate) async fn sqs_admin(endpoint: &str) -> aws_sdk_sqs::Client {
    let cfg = SqsConfig::new(format!("{endpoint}/{ACCOUNT}/admin"), options(endpoint)).unwrap();
    aws_sdk_sqs::Client::new(&cfg.sdk_config().await.unwrap())
}

pub(crate) async fn sns_admin(endpoint: &str) -> aws_sdk_sns::Client {
    let cfg = SnsConfig::new(
        format!("arn:aws:sns:{REGION}:{ACCOUNT}:admin"),
        options(endpoint),
    )
    .unwrap();
    aws_sdk_sns::Client::new(&cfg.sdk_config().await.unwrap())
}

/// Create a queue and answer its URL.
pub(crate) async fn create_queue(
    admin: &aws_sdk_sqs::Client,
    name: &str,
    attrs: &[(QueueAttributeName, &str)],
) -> String {
    let mut req = admin.create_queue().queue_name(name);
    for (k, v) in attrs {
        req = req.attributes(k.clone(), *v);
    }
    req.send().await.unwrap().queue_url().unwrap().to_owned()
}

/// Create a topic and answer its ARN.
pub(crate) async fn create_topic(
    admin: &aws_sdk_sns::Client,
    name: &str,
    attrs: &[(&str, &str)],
) -> String {
    let mut req = admin.create_topic().name(name);
    for (k, v) in attrs {
        req = req.attributes(*k, *v);
    }
    req.send().await.unwrap().topic_arn().unwrap().to_owned()
}

/// Subscribe queue `queue` (a name) to topic `arn` with raw delivery; the subscription's
/// ARN.
pub(crate) async fn subscribe_raw(admin: &aws_sdk_sns::Client, arn: &str, queue: &str) -> String {
    admin
        .subscribe()
        .topic_arn(arn)
        .protocol("sqs")
        .endpoint(format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{queue}"))
        .attributes("RawMessageDelivery", "true")
        .send()
        .await
        .unwrap()
        .subscription_arn()
        .unwrap()
        .to_owned()
}

/// Topic `name` on the shared moto with a raw-delivery queue of the same name subscribed
/// (both FIFO when `fifo`; `name` then ends in `.fifo`): (topic ARN, queue URL).
pub(crate) async fn subscribed_topic(name: &str, fifo: bool) -> (String, String) {
    let sns = sns_admin(&moto()).await;
    let fifo_topic: &[_] = if fifo { &[("FifoTopic", "true")] } else { &[] };
    let fifo_queue: &[_] = if fifo {
        &[(QueueAttributeName::FifoQueue, "true")]
    } else {
        &[]
    };
    let arn = create_topic(&sns, name, fifo_topic).await;
    let url = create_queue(&sqs_admin(&moto()).await, name, fifo_queue).await;
    subscribe_raw(&sns, &arn, name).await;
    (arn, url)
}

pub(crate) fn env(id: &str, body: &[u8]) -> Envelope {
    Envelope::builder(id, "stripe", body.to_vec())
        .tenant_id("acme")
        .received_at(1_700_000_000_000)
        .content_type("application/json")
        .header("Stripe-Signature", "t=1,v1=abc")
        .dedupe_key(format!("evt_{id}"))
        .build()
        .unwrap()
}

pub(crate) fn ctx(env: &Envelope) -> Ctx {
    Ctx::for_envelope(env)
}

/// The message attributes [`env`]`(id, ..)` arrives with, plus `extra`: written out, as
/// the wire contract states them.
pub(crate) fn env_attributes(id: &str, extra: &[(&str, &str)]) -> HashMap<String, String> {
    let mut want: HashMap<String, String> = [
        ("ankusa_id", id.to_owned()),
        ("ankusa_source_id", "stripe".into()),
        ("ankusa_tenant_id", "acme".into()),
        ("ankusa_message_version", "1".into()),
        ("ankusa_idempotency_key", format!("acme:stripe:evt_{id}")),
        ("content_type", "application/json".into()),
        ("ankusa_dedupe_key", format!("evt_{id}")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    want.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    want
}

/// Delivers every envelope at once, each on a task of its own with `ctx.batch` set (so
/// the sink may gather them into batches); the results in `envs`' order.
pub(crate) async fn deliver_batched<S: Sink + 'static>(
    sink: &Arc<S>,
    envs: impl IntoIterator<Item = Envelope>,
) -> Vec<Result<(), Failure>> {
    let tasks: Vec<_> = envs
        .into_iter()
        .map(|e| {
            let s = Arc::clone(sink);
            tokio::spawn(async move { s.deliver(&e, &ctx(&e).with_batch(true)).await })
        })
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    results
}

/// The message attributes the sinks send for `env` in `ctx`: core's list with empty values
/// dropped (SQS refuses them), every value a `String`.
pub(crate) fn wire_attributes(env: &Envelope, ctx: &Ctx) -> HashMap<String, String> {
    let layout = Layout::message(
        Some(ankusa_message::DEFAULT_INLINE_MAX_BYTES),
        EmptyValues::Drop,
    );
    let out = Outgoing::new(env, ctx, &layout).unwrap();
    out.attributes()
        .iter()
        .map(|(a, v)| (a.as_attr().to_owned(), v.to_string()))
        .collect()
}

/// One received message: body, message attributes, system attributes.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    pub(crate) body: String,
    pub(crate) attributes: HashMap<String, String>,
    pub(crate) system: HashMap<String, String>,
}

/// Receive until `want` messages arrived or 30 s passed.
pub(crate) async fn receive(
    admin: &aws_sdk_sqs::Client,
    queue_url: &str,
    want: usize,
) -> Vec<Received> {
    // moto scans the whole queue on every receive (about 0.4 s per call at 500 messages
    // here), so reading 500 back takes ~20 s on a quiet machine: a generous window, left as
    // soon as `want` messages are in.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut out = Vec::new();
    while out.len() < want && Instant::now() < deadline {
        let got = admin
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .visibility_timeout(600)
            .send()
            .await
            .unwrap();
        let msgs = got.messages();
        if msgs.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for m in msgs {
            out.push(Received {
                body: m.body().unwrap_or_default().to_owned(),
                attributes: m
                    .message_attributes()
                    .map(|a| {
                        a.iter()
                            .map(|(k, v)| {
                                (k.clone(), v.string_value().unwrap_or_default().to_owned())
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                system: m
                    .attributes()
                    .map(|a| {
                        a.iter()
                            .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                            .collect()
                    })
                    .unwrap_or_default(),
            });
        }
    }
    out
}

/// The hook ids of `got`'s Message v1 bodies, sorted.
pub(crate) fn hook_ids(got: &[Received]) -> Vec<String> {
    let mut ids: Vec<String> = got
        .iter()
        .map(|m| ankusa_message::decode(m.body.as_bytes()).unwrap().id)
        .collect();
    ids.sort();
    ids
}

/// `prefix0` to `prefix<n-1>`, sorted: the ids of `n` numbered hooks.
pub(crate) fn numbered_ids(prefix: &str, n: usize) -> Vec<String> {
    let mut ids: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    ids.sort();
    ids
}

/// `s`, whose destination does not exist: a delivery fails as config naming `code`, and
/// so does `check()`, whose failure is returned.
pub(crate) async fn assert_missing_is_config<S: Sink>(s: &S, code: &str) -> Failure {
    let e = env("h-missing", b"{}");
    let res = s.deliver(&e, &ctx(&e)).await;
    assert_class(&res, Class::Config);
    assert!(res.unwrap_err().to_string().contains(code));
    let f = s.check().await.unwrap_err();
    assert_eq!(f.class(), Class::Config, "{f}");
    f
}

/// A key id, a secret and a session token, planted to be searched for in what a sink prints.
pub(crate) const PLANTED: [&str; 3] = [
    "AKIAPLANTEDKEYID0000",
    "planted-secret-value",
    "planted-session-token",
];

/// The [`PLANTED`] credentials.
pub(crate) fn planted_credentials() -> StaticCredentials {
    StaticCredentials::new(PLANTED[0], PLANTED[1]).with_session_token(PLANTED[2])
}

/// Neither the description `d` nor the sink `s` prints any of `secrets` (`Debug`, and the
/// description's JSON).
pub(crate) fn assert_printed_without(d: &Description, s: &impl std::fmt::Debug, secrets: &[&str]) {
    let printed = format!("{d:?} {} {s:?}", serde_json::to_string(d).unwrap());
    for secret in secrets {
        assert!(!printed.contains(secret), "{printed}");
    }
}

/// Hook `h-scripted` delivered by `s` (on `server`, answering from a script): the result,
/// once `server` took exactly one request (no SDK retries), of `operation` where the
/// protocol names one (`X-Amz-Target`).
pub(crate) async fn delivered_once(
    server: &crate::scripted::Scripted,
    s: &impl Sink,
    operation: Option<&str>,
) -> Result<(), Failure> {
    let e = env("h-scripted", b"{}");
    let res = s.deliver(&e, &ctx(&e)).await;
    assert_eq!(server.count(), 1, "one attempt, no SDK retries");
    if let Some(operation) = operation {
        assert_eq!(server.requests.lock().unwrap()[0].operation(), operation);
    }
    res
}

/// Three hooks, `q0` to `q2`, delivered in one batch by `s` (on `server`): each fails as
/// `class`, and `server` took one request, nothing re-sent.
pub(crate) async fn assert_batch_fails_as<S: Sink + 'static>(
    server: &crate::scripted::Scripted,
    s: &Arc<S>,
    class: Class,
) {
    for res in deliver_batched(s, (0..3).map(|i| env(&format!("q{i}"), b"{}"))).await {
        assert_class(&res, class);
    }
    assert_eq!(server.count(), 1);
}

/// System attribute `name` of every message of `got`, in order.
pub(crate) fn system_values<'a>(got: &'a [Received], name: &str) -> Vec<&'a str> {
    got.iter().map(|m| m.system[name].as_str()).collect()
}

/// How many messages the queue holds (visible or not).
pub(crate) async fn queue_depth(admin: &aws_sdk_sqs::Client, queue_url: &str) -> usize {
    let out = admin
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap();
    out.attributes()
        .map(|a| a.values().map(|v| v.parse::<usize>().unwrap_or(0)).sum())
        .unwrap_or(0)
}

pub(crate) fn assert_class(res: &Result<(), Failure>, want: Class) {
    match res {
        Err(f) => assert_eq!(f.class(), want, "{f}"),
        Ok(()) => panic!("expected {want}, got Ok"),
    }
}

pub(crate) fn assert_retry_after(res: &Result<(), Failure>) -> u64 {
    match res {
        Err(f) => f
            .class()
            .retry_after_ms()
            .unwrap_or_else(|| panic!("expected retry_after, got {f}")),
        Ok(()) => panic!("expected retry_after, got Ok"),
    }
}

/// A moto of our own; killed when dropped, even when the test panics.
pub(crate) struct Moto {
    child: Child,
    pub(crate) endpoint: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start a moto of our own on a free loopback port, checking IAM after
/// `no_auth_actions` actions (`ANKUSA_MOTO_SERVER` or `moto_server` on PATH).
pub(crate) fn start_moto(no_auth_actions: u32) -> Moto {
    let port = free_port();
    let server = std::env::var("ANKUSA_MOTO_SERVER").unwrap_or_else(|_| "moto_server".into());
    let child = Command::new(server)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .env("INITIAL_NO_AUTH_ACTION_COUNT", no_auth_actions.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("moto_server on PATH (scripts/services/moto.sh installs it)");
    let moto = Moto {
        child,
        endpoint: format!("http://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.write_all(b"GET /moto-api/ HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
            let mut buf = [0u8; 12];
            if s.read_exact(&mut buf).is_ok() && buf.starts_with(b"HTTP/1.") {
                return moto;
            }
        }
        assert!(Instant::now() < deadline, "dedicated moto did not start");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Delete a queue (best effort: the test's result is already decided).
pub(crate) async fn delete_queue(admin: &aws_sdk_sqs::Client, queue_url: &str) {
    let _ = admin.delete_queue().queue_url(queue_url).send().await;
}

/// Delete a topic (best effort).
pub(crate) async fn delete_topic(admin: &aws_sdk_sns::Client, arn: &str) {
    let _ = admin.delete_topic().topic_arn(arn).send().await;
}

/// A Kinesis client for moto at `endpoint`.
pub(crate) async fn kinesis_admin(endpoint: &str) -> aws_sdk_kinesis::Client {
    let cfg = ankusa_sink_aws::KinesisConfig::new("admin", options(endpoint)).unwrap();
    aws_sdk_kinesis::Client::new(&cfg.sdk_config().await.unwrap())
}

/// An EventBridge client for moto at `endpoint`.
pub(crate) async fn events_admin(endpoint: &str) -> aws_sdk_eventbridge::Client {
    let cfg = ankusa_sink_aws::EventBridgeConfig::new("admin", options(endpoint)).unwrap();
    aws_sdk_eventbridge::Client::new(&cfg.sdk_config().await.unwrap())
}

/// Create a one-shard stream on the moto at `endpoint` (moto makes it active at once).
pub(crate) async fn create_stream(endpoint: &str, name: &str) {
    kinesis_admin(endpoint)
        .await
        .create_stream()
        .stream_name(name)
        .shard_count(1)
        .send()
        .await
        .unwrap();
}

/// Delete a stream (best effort).
pub(crate) async fn delete_stream(endpoint: &str, name: &str) {
    let _ = kinesis_admin(endpoint)
        .await
        .delete_stream()
        .stream_name(name)
        .enforce_consumer_deletion(true)
        .send()
        .await;
}

/// One record read back: partition key and data.
#[derive(Debug, Clone)]
pub(crate) struct StreamRecord {
    pub(crate) partition_key: String,
    pub(crate) data: Vec<u8>,
}

/// Every record of every shard of `stream`, from the start, in sequence order per shard.
pub(crate) async fn read_stream(
    admin: &aws_sdk_kinesis::Client,
    stream: &str,
) -> Vec<StreamRecord> {
    use aws_sdk_kinesis::types::ShardIteratorType;
    let shards = admin
        .list_shards()
        .stream_name(stream)
        .send()
        .await
        .unwrap();
    let mut out = Vec::new();
    for shard in shards.shards() {
        let mut iterator = admin
            .get_shard_iterator()
            .stream_name(stream)
            .shard_id(shard.shard_id())
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .unwrap()
            .shard_iterator()
            .map(str::to_owned);
        while let Some(it) = iterator {
            let page = admin.get_records().shard_iterator(it).send().await.unwrap();
            if page.records().is_empty() {
                break;
            }
            out.extend(page.records().iter().map(|r| StreamRecord {
                partition_key: r.partition_key().unwrap_or_default().to_owned(),
                data: r.data().as_ref().to_vec(),
            }));
            iterator = page.next_shard_iterator().map(str::to_owned);
        }
    }
    out
}

/// An event bus named `name` on the shared moto with a rule sending every event of
/// `source` to a new queue of the same name: the queue's URL.
pub(crate) async fn bus_to_queue(name: &str, source: &str) -> String {
    let events = events_admin(&moto()).await;
    events.create_event_bus().name(name).send().await.unwrap();
    let url = create_queue(&sqs_admin(&moto()).await, name, &[]).await;
    events
        .put_rule()
        .name(name)
        .event_bus_name(name)
        .event_pattern(serde_json::json!({"source": [source]}).to_string())
        .send()
        .await
        .unwrap();
    events
        .put_targets()
        .rule(name)
        .event_bus_name(name)
        .targets(
            aws_sdk_eventbridge::types::Target::builder()
                .id("queue")
                .arn(format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"))
                .input_transformer(whole_event())
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    url
}

/// The whole event, as a target without a transformer receives it. moto transforms every
/// event, with eight JSONPath expressions by default, and compiles the JSONPath grammar for
/// each: about 0.7 s an event; one path (unused) makes it about 0.1 s, and 200 concurrent
/// puts then finish within a call timeout.
pub(crate) fn whole_event() -> aws_sdk_eventbridge::types::InputTransformer {
    aws_sdk_eventbridge::types::InputTransformer::builder()
        .input_paths_map("id", "$.id")
        .input_template("<aws.events.event.json>")
        .build()
        .unwrap()
}

/// Delete the bus `name`, its rule and targets (best effort); the queue stays.
pub(crate) async fn delete_bus(name: &str) {
    let events = events_admin(&moto()).await;
    let _ = events
        .remove_targets()
        .rule(name)
        .event_bus_name(name)
        .ids("queue")
        .send()
        .await;
    let _ = events
        .delete_rule()
        .name(name)
        .event_bus_name(name)
        .send()
        .await;
    let _ = events.delete_event_bus().name(name).send().await;
}

/// The Message v1 (as JSON bytes) in the `detail` of an EventBridge event a rule's SQS
/// target received.
pub(crate) fn event_detail(sqs_body: &str) -> Vec<u8> {
    let event: serde_json::Value = serde_json::from_str(sqs_body).unwrap();
    serde_json::to_vec(&event["detail"]).unwrap()
}

/// `opts` with `max_message_bytes` 8192 and hooks inline up to 100 bytes, for the tests of a
/// message over the limit.
pub(crate) fn capped_at_8192(opts: AwsOptions) -> AwsOptions {
    opts.with_max_message_bytes(std::num::NonZeroUsize::new(8192).unwrap())
        .with_message(
            ankusa_message::MessageOptions::new()
                .with_inline_max_bytes(std::num::NonZeroUsize::new(100).unwrap()),
        )
}

/// Hook `id` from `stripe`, a 100-byte body and a 9000-byte `x-big` header: over a
/// [`capped_at_8192`] sink's limit, whatever the body.
pub(crate) fn header_heavy(id: &str) -> Envelope {
    Envelope::builder(id, "stripe", vec![b'y'; 100])
        .header("x-big", "z".repeat(9000))
        .build()
        .unwrap()
}

/// `s` (a [`capped_at_8192`] sink) sends a 100-byte hook `h-small`, then refuses
/// [`header_heavy`] `h-big` as permanent, never sent, with `limit` in the failure.
pub(crate) async fn small_sent_big_refused(s: &impl Sink, limit: &str) {
    let small = env("h-small", &[b'y'; 100]);
    s.deliver(&small, &ctx(&small)).await.unwrap();
    let big = header_heavy("h-big");
    let f = s.deliver(&big, &ctx(&big)).await.unwrap_err();
    assert_eq!(f.class(), Class::Permanent, "{f}");
    assert_eq!(f.may_have_landed(), Some(false));
    assert!(f.to_string().contains(limit), "{f}");
}

/// `$sink::from_client` for the config `$cfg`, with a client of `$sdk` (an `aws_sdk_*`
/// crate) that counts its HTTP requests into the [`RequestCounter`](crate::request_counter::RequestCounter)
/// `$counter`. Used in an async fn (it awaits the config's SDK config).
macro_rules! sink_counted_by {
    ($sink:ident, $sdk:ident, $cfg:expr, $counter:expr) => {{
        let cfg = $cfg;
        let sdk = cfg.sdk_config().await.unwrap();
        let conf = $sdk::config::Builder::from(&sdk)
            .interceptor($counter.clone())
            .build();
        $sink::from_client(cfg, $sdk::Client::from_conf(conf))
    }};
}
pub(crate) use sink_counted_by;

/// [`sink_counted_by!`] with a fresh counter: the sink and its counter.
macro_rules! sink_counted {
    ($sink:ident, $sdk:ident, $cfg:expr) => {{
        let counter = $crate::request_counter::RequestCounter::default();
        let s = $crate::common::sink_counted_by!($sink, $sdk, $cfg, counter);
        (s, counter)
    }};
}
pub(crate) use sink_counted;

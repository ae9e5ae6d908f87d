//! The testkit's conformance suite against SQS, SNS, Kinesis and EventBridge on moto;
//! throttling from the scripted server, refused credentials from a dedicated moto that
//! checks IAM. Kinesis is read back from its shard, EventBridge through a rule whose target
//! is an SQS queue.

use crate::common::*;
use crate::scripted::{Resp, Scripted};
use ankusa_sink_aws::{
    AwsOptions, EventBridgeConfig, EventBridgeSink, KinesisConfig, KinesisSink, SnsConfig, SnsSink,
    SqsConfig, SqsSink, StaticCredentials,
};
use ankusa_sink_core::{BoxError, Sink, async_trait};
use ankusa_sink_testkit::support::TcpProxy;
use ankusa_sink_testkit::{
    Case, Expect, Fault, Harness, MixedBatch, Probe, Received, Setup, WarmFault,
};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, QueueAttributeName};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SECRET: &str = "planted-secret-access-key-8c1f";
const TOKEN: &str = "planted-session-token-77ad";

fn planted() -> AwsOptions {
    options(&moto()).with_credentials(
        StaticCredentials::new("AKIAIOSFODNN7EXAMPLE", SECRET).with_session_token(TOKEN),
    )
}

/// Reads a queue back; SQS receives are destructive, so everything seen is kept, and
/// deleted from the queue once kept: moto scans every message left in a queue on each
/// receive, and the `volume` case leaves 5,000. `events`: each message is an EventBridge
/// event (a rule's target), whose `detail` is the Message v1.
struct QueueProbe {
    admin: aws_sdk_sqs::Client,
    url: String,
    events: bool,
    seen: Mutex<Vec<Received>>,
}

#[async_trait]
impl Probe for QueueProbe {
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        // What has arrived so far, in bounded time: the rest is read by the next call.
        let until = std::time::Instant::now() + Duration::from_secs(2);
        while std::time::Instant::now() < until {
            let out = self
                .admin
                .receive_message()
                .queue_url(&self.url)
                .max_number_of_messages(10)
                .visibility_timeout(3600)
                .send()
                .await?;
            if out.messages().is_empty() {
                break;
            }
            let mut done = Vec::new();
            {
                let mut seen = self.seen.lock().unwrap();
                for m in out.messages() {
                    let body = m.body().unwrap_or_default();
                    seen.push(if self.events {
                        Received::from_message_bytes(&event_detail(body))?
                    } else {
                        Received::from_message_bytes(body.as_bytes())?
                    });
                    if let Some(handle) = m.receipt_handle() {
                        done.push(
                            DeleteMessageBatchRequestEntry::builder()
                                .id(done.len().to_string())
                                .receipt_handle(handle)
                                .build()?,
                        );
                    }
                }
            }
            // Kept: a failed delete only leaves it invisible for an hour.
            let _ = self
                .admin
                .delete_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(done))
                .send()
                .await;
        }
        Ok(self.seen.lock().unwrap().clone())
    }
}

/// How long a read-back of moto may take (see `Harness::probe_timeout`).
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

async fn probe(url: &str) -> QueueProbe {
    QueueProbe {
        admin: sqs_admin(&moto()).await,
        url: url.to_owned(),
        events: false,
        seen: Mutex::new(Vec::new()),
    }
}

/// Reads a stream's one shard from its start; each call goes on from where the last
/// stopped (Kinesis reads do not consume).
struct StreamProbe {
    admin: aws_sdk_kinesis::Client,
    stream: String,
    /// Where the next read starts; `None` before the first.
    next: tokio::sync::Mutex<Option<String>>,
    seen: Mutex<Vec<Received>>,
}

#[async_trait]
impl Probe for StreamProbe {
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        let mut next = self.next.lock().await;
        if next.is_none() {
            let shards = self
                .admin
                .list_shards()
                .stream_name(&self.stream)
                .send()
                .await?;
            let shard = shards.shards().first().ok_or("the stream has no shard")?;
            let it = self
                .admin
                .get_shard_iterator()
                .stream_name(&self.stream)
                .shard_id(shard.shard_id())
                .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
                .send()
                .await?;
            *next = it.shard_iterator().map(str::to_owned);
        }
        let until = std::time::Instant::now() + Duration::from_secs(2);
        while let Some(it) = next.clone()
            && std::time::Instant::now() < until
        {
            let page = self.admin.get_records().shard_iterator(it).send().await?;
            *next = page.next_shard_iterator().map(str::to_owned);
            if page.records().is_empty() {
                break;
            }
            let mut seen = self.seen.lock().unwrap();
            for r in page.records() {
                seen.push(Received::from_message_bytes(r.data().as_ref())?);
            }
        }
        Ok(self.seen.lock().unwrap().clone())
    }
}

/// Any probe, as `Setup::with_probe` takes one.
struct Boxed(Box<dyn Probe>);

#[async_trait]
impl Probe for Boxed {
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        self.0.received().await
    }
}

/// What both harnesses share: a stoppable proxy in front of moto (recovery), the dedicated
/// moto (refused credentials) and the scripted servers (throttling, never answering), kept
/// alive until the harness is dropped.
#[derive(Default)]
struct Keep {
    proxy: tokio::sync::OnceCell<TcpProxy>,
    moto: Mutex<Option<Moto>>,
    servers: Mutex<Vec<Scripted>>,
    /// The proxies of warm faults, kept open (a blackholed one silent) to the end.
    proxies: Mutex<Vec<Arc<TcpProxy>>>,
}

/// `setup`, with a teardown deleting the queue at `url` on the shared moto.
fn dropping_queue<S>(setup: Setup<S>, url: String) -> Setup<S> {
    setup.with_teardown(move || async move {
        delete_queue(&sqs_admin(&moto()).await, &url).await;
        Ok(())
    })
}

/// `setup`, with a teardown deleting the topic and its subscribed queue on the shared moto.
fn dropping_topic<S>(setup: Setup<S>, arn: String, url: String) -> Setup<S> {
    setup.with_teardown(move || async move {
        delete_topic(&sns_admin(&moto()).await, &arn).await;
        delete_queue(&sqs_admin(&moto()).await, &url).await;
        Ok(())
    })
}

impl Keep {
    /// `upstream` (a moto), through the proxy.
    async fn endpoint(&self, upstream: &str) -> String {
        let proxy = self
            .proxy
            .get_or_init(|| async {
                let upstream = upstream.trim_start_matches("http://");
                TcpProxy::start(upstream).await.expect("a loopback proxy")
            })
            .await;
        format!("http://{}", proxy.addr())
    }

    async fn stop(&self) -> Result<(), BoxError> {
        self.proxy.get().ok_or("no destination yet")?.stop().await;
        Ok(())
    }

    async fn start(&self) -> Result<(), BoxError> {
        Ok(self
            .proxy
            .get()
            .ok_or("no destination yet")?
            .restart()
            .await?)
    }

    /// A proxy of its own in front of `upstream` (a moto), kept to the end.
    async fn own_proxy(&self, upstream: &str) -> Result<Arc<TcpProxy>, BoxError> {
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let proxy = Arc::new(TcpProxy::start(upstream).await?);
        self.proxies.lock().unwrap().push(Arc::clone(&proxy));
        Ok(proxy)
    }

    /// A dedicated moto that already checks IAM; `setup` may make one unauthenticated
    /// call (creating the destination) first.
    async fn iam_moto(&self) -> String {
        self.iam_moto_after(1).await
    }

    /// A dedicated moto that checks IAM after `free` unauthenticated calls.
    async fn iam_moto_after(&self, free: u32) -> String {
        let moto = tokio::task::spawn_blocking(move || start_moto(free))
            .await
            .unwrap();
        let ep = moto.endpoint.clone();
        *self.moto.lock().unwrap() = Some(moto);
        ep
    }

    /// A scripted server answering every request with `resp`.
    async fn scripted(&self, resp: Resp) -> String {
        let server = Scripted::start(move |_| resp.clone()).await;
        let ep = server.endpoint();
        self.servers.lock().unwrap().push(server);
        ep
    }
}

fn closed_port() -> String {
    format!("http://127.0.0.1:{}", free_port())
}

/// What the SQS and the SNS harness differ in; [`AwsHarness`] does the rest the same way
/// for both.
#[async_trait]
trait Service: Default + Send + Sync + 'static {
    type Sink: Sink + 'static;

    /// A sink for `address` (a queue URL or a topic ARN).
    async fn sink(&self, address: &str, opts: AwsOptions) -> Result<Self::Sink, BoxError>;

    /// The address of destination `name` reached through `endpoint`.
    fn address(&self, endpoint: &str, name: &str) -> String;

    /// Create destination `name` on the moto at `endpoint`; its address.
    async fn create(&self, endpoint: &str, name: &str) -> String;

    /// A fresh destination named after `prefix` on the shared moto, read back through a
    /// queue: (its name, the queue's URL).
    async fn read_back(&self, prefix: &str) -> (String, String);

    /// `setup` with a teardown deleting what [`read_back`](Service::read_back) made.
    fn dropping(&self, setup: Setup<Self::Sink>, name: String, url: String) -> Setup<Self::Sink>;

    /// What reads back destination `name` made by [`read_back`](Service::read_back), with
    /// its queue at `url`. Default: the queue.
    async fn probe(&self, name: &str, url: &str) -> Boxed {
        let _ = name;
        Boxed(Box::new(probe(url).await))
    }

    /// Why the `volume` case is not run (see [`Harness::not_provided`]). Default: moto's
    /// queues are too slow for it.
    fn volume_skip(&self) -> Option<String> {
        Some(
            "moto takes about 95 ms per 10-message batch here (1,000 hooks: 9.5 s to send, \
             49 s to read back): 5,000 would take minutes; run it against real SQS/SNS"
                .to_owned(),
        )
    }

    /// The service's answer to a throttled request.
    fn throttled(&self) -> Resp;

    /// The sinks' `timeout_ms` on moto (see `common::options`). Default 15 s.
    fn call_timeout(&self) -> Duration {
        Duration::from_secs(15)
    }

    /// See [`Harness::deadline`]. Default 30 s (the suite's).
    fn deadline(&self) -> Duration {
        Duration::from_secs(30)
    }

    /// The moto the sinks under test write to. Default: the shared one.
    fn upstream(&self) -> String {
        moto()
    }

    /// Delete destination `name` on the shared moto (a warm missing destination).
    async fn delete(&self, name: &str, url: &str);

    /// A destination that refuses the setup's body size (a scripted one is kept in `keep`).
    async fn oversized(&self, keep: &Keep) -> Result<Setup<Self::Sink>, BoxError>;

    /// See [`Harness::mixed_batch`].
    async fn mixed_batch(&self) -> Result<Option<MixedBatch<Self::Sink>>, BoxError> {
        Ok(None)
    }
}

/// The conformance harness of one service on the shared moto.
#[derive(Default)]
struct AwsHarness<S> {
    keep: Keep,
    service: S,
}

/// A warm fault's sink on a fresh destination of the shared moto, reached through a
/// proxy of its own; the destination's name.
struct Warm<S: Service> {
    setup: Setup<S::Sink>,
    proxy: Arc<TcpProxy>,
    name: String,
    url: String,
}

impl<S: Service> AwsHarness<S> {
    /// A fresh destination behind a proxy of its own, the sink timing out after `timeout`.
    async fn warm(&self, prefix: &str, timeout: Duration) -> Result<Warm<S>, BoxError> {
        let (name, url) = self.service.read_back(prefix).await;
        let proxy = self.keep.own_proxy(&self.service.upstream()).await?;
        let via = format!("http://{}", proxy.addr());
        let opts = planted().with_endpoint(&via).with_timeout(timeout);
        let sink = self
            .service
            .sink(&self.service.address(&via, &name), opts)
            .await?;
        let setup = Setup::new(sink).with_probe(self.service.probe(&name, &url).await);
        let setup = self.service.dropping(setup, name.clone(), url.clone());
        Ok(Warm {
            setup,
            proxy,
            name,
            url,
        })
    }

    /// A sink (2 s timeout) whose requests go to `endpoint`, where nothing answers.
    async fn unanswered(&self, endpoint: &str) -> Result<Setup<S::Sink>, BoxError> {
        let opts = planted()
            .with_endpoint(endpoint)
            .with_timeout(Duration::from_secs(2));
        let address = self.service.address(endpoint, "q");
        Ok(Setup::new(self.service.sink(&address, opts).await?))
    }
}

#[async_trait]
impl<S: Service> Harness for AwsHarness<S> {
    fn reports_landing(&self) -> bool {
        true
    }

    type Sink = S::Sink;

    /// Why `durability` does not restart the destination.
    fn restart_destination_skip_reason(&self) -> Option<String> {
        Some(
            "moto keeps everything in memory: a restart loses every queue, topic and stream by design"
                .into(),
        )
    }

    /// moto scans the whole queue on every receive: reading back the 200 hooks of
    /// `concurrency` takes 20 receives of up to 0.5 s each, over the default 10 s.
    fn probe_timeout(&self) -> Duration {
        PROBE_TIMEOUT
    }

    async fn destination(&self, case: Case) -> Result<Setup<S::Sink>, BoxError> {
        let prefix = format!("kit-{}", case.name().replace('_', "-"));
        let (name, url) = self.service.read_back(&prefix).await;
        let via = self.keep.endpoint(&self.service.upstream()).await;
        let opts = planted()
            .with_endpoint(&via)
            // See common::options: moto under load.
            .with_timeout(self.service.call_timeout());

        let sink = self
            .service
            .sink(&self.service.address(&via, &name), opts)
            .await?;
        let setup = Setup::new(sink).with_probe(self.service.probe(&name, &url).await);
        Ok(self.service.dropping(setup, name, url))
    }

    async fn fault(&self, fault: Fault) -> Result<Option<Setup<S::Sink>>, BoxError> {
        let svc = &self.service;
        let setup = match fault {
            Fault::MissingDestination => {
                let address = svc.address(&moto(), &unique("absent"));
                Setup::new(svc.sink(&address, planted()).await?)
            }
            Fault::RefusedCredential => {
                let ep = self.keep.iam_moto().await;
                let address = svc.create(&ep, "refused").await;
                let opts = options(&ep)
                    .with_credentials(StaticCredentials::new("AKIAUNKNOWNKEY000000", SECRET));
                Setup::new(svc.sink(&address, opts).await?)
            }
            Fault::Unreachable => self.unanswered(&closed_port()).await?,
            Fault::Throttled => {
                let ep = self.keep.scripted(svc.throttled()).await;
                let address = svc.address(&ep, "q");
                Setup::new(svc.sink(&address, planted().with_endpoint(&ep)).await?)
            }
            // Reads the SendMessage or Publish request and never answers it.
            Fault::Unacknowledged => {
                self.unanswered(&self.keep.scripted(Resp::hang()).await)
                    .await?
            }
            Fault::Oversized => svc.oversized(&self.keep).await?,
        };
        Ok(Some(setup))
    }

    async fn warm_fault(&self, fault: Fault) -> Result<Option<WarmFault<S::Sink>>, BoxError> {
        let tag = format!("kit-warm-{}", format!("{fault:?}").to_lowercase());
        let timeout = Duration::from_secs(if fault == Fault::Unacknowledged {
            2
        } else {
            15
        });
        if fault == Fault::Oversized {
            // The destination's own limit, as cold: the warm-up's small hooks pass.
            return Ok(Some(WarmFault::standing(
                self.service.oversized(&self.keep).await?,
            )));
        }
        let w = self.warm(&tag, timeout).await?;
        let Warm {
            setup,
            proxy,
            name,
            url,
        } = w;
        Ok(Some(match fault {
            Fault::MissingDestination => {
                let svc = S::default();
                WarmFault::new(setup, move || async move {
                    svc.delete(&name, &url).await;
                    Ok(())
                })
            }
            // The proxy comes back as a moto that checks IAM from its first call, where
            // the planted access key does not exist.
            Fault::RefusedCredential => {
                let iam = self.keep.iam_moto_after(0).await;
                WarmFault::new(setup, move || async move {
                    proxy.redirect(iam.trim_start_matches("http://")).await;
                    Ok(())
                })
            }
            Fault::Unreachable => WarmFault::new(setup, move || async move {
                proxy.stop().await;
                Ok(())
            }),
            // The proxy comes back as the scripted server answering every request with the
            // service's throttle.
            Fault::Throttled => {
                let scripted = self.keep.scripted(self.service.throttled()).await;
                WarmFault::new(setup, move || async move {
                    proxy.redirect(scripted.trim_start_matches("http://")).await;
                    Ok(())
                })
            }
            // Silent on the connections the sink holds (2 s timeout).
            Fault::Unacknowledged => {
                ankusa_sink_testkit::support::silent_after_warm_up(setup, proxy)
            }
            Fault::Oversized => unreachable!("returned above"),
        }))
    }

    fn deadline(&self) -> Duration {
        self.service.deadline()
    }

    /// `check()` asks the service for the queue's attributes or the topic's (signed).
    fn check_detects(&self, fault: Fault) -> bool {
        matches!(fault, Fault::MissingDestination | Fault::RefusedCredential)
    }

    async fn mixed_batch(&self) -> Result<Option<MixedBatch<S::Sink>>, BoxError> {
        self.service.mixed_batch().await
    }

    /// The `volume` case where the service's read-back on moto is too slow for it
    /// ([`Service::volume_skip`]).
    fn not_provided(&self, case: Case) -> Option<String> {
        if case == Case::Volume {
            return self.service.volume_skip();
        }
        None
    }

    fn secrets(&self) -> Vec<String> {
        vec![SECRET.into(), TOKEN.into()]
    }

    fn can_restart(&self) -> bool {
        true
    }

    async fn stop(&self) -> Result<(), BoxError> {
        self.keep.stop().await
    }

    async fn start(&self) -> Result<(), BoxError> {
        self.keep.start().await
    }
}

// ---------------------------------------------------------------- SQS

#[derive(Default)]
struct Sqs;

#[async_trait]
impl Service for Sqs {
    type Sink = SqsSink;

    async fn sink(&self, url: &str, opts: AwsOptions) -> Result<SqsSink, BoxError> {
        Ok(SqsSink::new(SqsConfig::new(url, opts)?).await?)
    }

    fn address(&self, endpoint: &str, name: &str) -> String {
        format!("{endpoint}/{ACCOUNT}/{name}")
    }

    async fn create(&self, endpoint: &str, name: &str) -> String {
        create_queue(&sqs_admin(endpoint).await, name, &[]).await
    }

    async fn read_back(&self, prefix: &str) -> (String, String) {
        let name = unique(prefix);
        let url = self.create(&moto(), &name).await;
        (name, url)
    }

    fn dropping(&self, setup: Setup<SqsSink>, _: String, url: String) -> Setup<SqsSink> {
        dropping_queue(setup, url)
    }

    fn throttled(&self) -> Resp {
        Resp::sqs_error(400, "RequestThrottled", "RequestThrottled")
    }

    async fn delete(&self, _: &str, url: &str) {
        delete_queue(&sqs_admin(&moto()).await, url).await;
    }

    async fn oversized(&self, _: &Keep) -> Result<Setup<SqsSink>, BoxError> {
        let url = create_queue(
            &sqs_admin(&moto()).await,
            &unique("small"),
            &[(QueueAttributeName::MaximumMessageSize, "1024")],
        )
        .await;
        let setup = Setup::new(self.sink(&url, planted()).await?)
            .with_probe(probe(&url).await)
            .with_body_size(4096);
        Ok(dropping_queue(setup, url))
    }
}

// ---------------------------------------------------------------- SNS

#[derive(Default)]
struct Sns;

impl Sns {
    /// A sink for `arn` that lets SNS (moto: 256 KiB) judge sizes up to 1 MiB itself.
    async fn lenient(&self, arn: &str, opts: AwsOptions) -> Result<SnsSink, BoxError> {
        let message = opts
            .message()
            .clone()
            .with_inline_max_bytes(NonZeroUsize::new(400_000).unwrap());
        let opts = opts
            .with_max_message_bytes(NonZeroUsize::new(1 << 20).unwrap())
            .with_message(message);
        self.sink(arn, opts).await
    }
}

#[async_trait]
impl Service for Sns {
    type Sink = SnsSink;

    async fn sink(&self, arn: &str, opts: AwsOptions) -> Result<SnsSink, BoxError> {
        Ok(SnsSink::new(SnsConfig::new(arn, opts)?).await?)
    }

    /// An ARN names no endpoint.
    fn address(&self, _: &str, name: &str) -> String {
        format!("arn:aws:sns:{REGION}:{ACCOUNT}:{name}")
    }

    async fn create(&self, endpoint: &str, name: &str) -> String {
        create_topic(&sns_admin(endpoint).await, name, &[]).await
    }

    async fn read_back(&self, prefix: &str) -> (String, String) {
        let name = unique(prefix);
        let (_, url) = subscribed_topic(&name, false).await;
        (name, url)
    }

    fn dropping(&self, setup: Setup<SnsSink>, name: String, url: String) -> Setup<SnsSink> {
        dropping_topic(setup, self.address(&moto(), &name), url)
    }

    fn throttled(&self) -> Resp {
        Resp::sns_error(400, "Throttled")
    }

    /// The topic only: its subscribed queue stays for the teardown.
    async fn delete(&self, name: &str, _: &str) {
        delete_topic(&sns_admin(&moto()).await, &self.address(&moto(), name)).await;
    }

    async fn oversized(&self, _: &Keep) -> Result<Setup<SnsSink>, BoxError> {
        // SNS (moto) refuses more than 256 KiB; the pre-check is raised so SNS says so.
        let (name, url) = self.read_back("big").await;
        let sink = self
            .lenient(&self.address(&moto(), &name), planted())
            .await?;
        let setup = Setup::new(sink)
            .with_probe(probe(&url).await)
            .with_body_size(300_000);
        Ok(self.dropping(setup, name, url))
    }

    async fn mixed_batch(&self) -> Result<Option<MixedBatch<SnsSink>>, BoxError> {
        // moto refuses entries over 256 KiB one by one inside a PublishBatch.
        let (name, url) = self.read_back("mixed").await;
        let batch = ankusa_sink_aws::AwsBatch::default().with_linger(Duration::from_millis(200));
        let sink = self
            .lenient(&self.address(&moto(), &name), planted().with_batch(batch))
            .await?;
        let setup = Setup::new(sink).with_probe(probe(&url).await);
        let setup = self.dropping(setup, name, url);
        let envelopes = (0..6)
            .map(|i| {
                let big = i % 3 == 1;
                let body = if big {
                    vec![b'x'; 300_000]
                } else {
                    vec![b'y'; 10]
                };
                let e = ankusa_sink_core::Envelope::builder(unique("mix"), "kit", body)
                    .build()
                    .unwrap();
                (e, if big { Expect::Permanent } else { Expect::Ok })
            })
            .collect();
        Ok(Some(MixedBatch { setup, envelopes }))
    }
}

// ---------------------------------------------------------------- Kinesis

/// The limit of the scripted stream and bus that stand in for a destination refusing a
/// body's size: moto has none below the sinks' own, and a sink's validated
/// `inline_max_bytes` keeps every inline Message v1 under it.
const SCRIPTED_LIMIT: usize = 4096;

/// Kinesis's answer to a record over its limit.
fn too_large() -> Resp {
    Resp::json11_error(400, "ValidationException")
}

#[derive(Default)]
struct Kinesis;

#[async_trait]
impl Service for Kinesis {
    type Sink = KinesisSink;

    async fn sink(&self, stream: &str, opts: AwsOptions) -> Result<KinesisSink, BoxError> {
        Ok(KinesisSink::new(KinesisConfig::new(stream, opts)?).await?)
    }

    /// A stream name names no endpoint.
    fn address(&self, _: &str, name: &str) -> String {
        name.to_owned()
    }

    async fn create(&self, endpoint: &str, name: &str) -> String {
        create_stream(endpoint, name).await;
        name.to_owned()
    }

    /// The stream itself is read back: no queue.
    async fn read_back(&self, prefix: &str) -> (String, String) {
        let name = unique(prefix);
        create_stream(&kinesis_moto(), &name).await;
        (name, String::new())
    }

    fn dropping(&self, setup: Setup<KinesisSink>, name: String, _: String) -> Setup<KinesisSink> {
        setup.with_teardown(move || async move {
            delete_stream(&kinesis_moto(), &name).await;
            Ok(())
        })
    }

    async fn probe(&self, name: &str, _: &str) -> Boxed {
        Boxed(Box::new(StreamProbe {
            admin: kinesis_admin(&kinesis_moto()).await,
            stream: name.to_owned(),
            next: tokio::sync::Mutex::new(None),
            seen: Mutex::new(Vec::new()),
        }))
    }

    /// A stream's 5,000 records are one `GetRecords` to read back on moto.
    fn volume_skip(&self) -> Option<String> {
        None
    }

    fn throttled(&self) -> Resp {
        Resp::json11_error(400, "ProvisionedThroughputExceededException")
    }

    /// moto one request at a time (`serial.rs`: moto's Kinesis loses records written to one
    /// shard concurrently).
    fn upstream(&self) -> String {
        kinesis_moto()
    }

    async fn delete(&self, name: &str, _: &str) {
        delete_stream(&kinesis_moto(), name).await;
    }

    /// A scripted stream that refuses, as Kinesis refuses a record over its limit, any
    /// record over [`SCRIPTED_LIMIT`] bytes and takes the others.
    async fn oversized(&self, keep: &Keep) -> Result<Setup<KinesisSink>, BoxError> {
        let server = Scripted::start(|req| {
            let json = req.json();
            let data = |r: &serde_json::Value| {
                aws_smithy_types::base64::decode(r["Data"].as_str().unwrap_or_default())
                    .map_or(0, |d| d.len())
            };
            let ok = serde_json::json!({"SequenceNumber": "1", "ShardId": "shardId-000000000000"});
            match req.operation() {
                "PutRecord" if data(&json) > SCRIPTED_LIMIT => too_large(),
                "PutRecord" => Resp::json11_ok(ok),
                _ => {
                    let records = json["Records"].as_array().cloned().unwrap_or_default();
                    if records.iter().any(|r| data(r) > SCRIPTED_LIMIT) {
                        return too_large();
                    }
                    let answers: Vec<_> = records.iter().map(|_| ok.clone()).collect();
                    Resp::json11_ok(serde_json::json!({"FailedRecordCount": 0, "Records": answers}))
                }
            }
        })
        .await;
        let endpoint = server.endpoint();
        keep.servers.lock().unwrap().push(server);
        let sink = self
            .sink("scripted", planted().with_endpoint(&endpoint))
            .await?;
        Ok(Setup::new(sink).with_body_size(SCRIPTED_LIMIT))
    }
}

// ---------------------------------------------------------------- EventBridge

const SOURCE: &str = "com.example.kit";

#[derive(Default)]
struct EventBridge;

#[async_trait]
impl Service for EventBridge {
    type Sink = EventBridgeSink;

    async fn sink(&self, bus: &str, opts: AwsOptions) -> Result<EventBridgeSink, BoxError> {
        let config = EventBridgeConfig::new(SOURCE, opts)?.with_event_bus_name(bus)?;
        Ok(EventBridgeSink::new(config).await?)
    }

    /// A bus name names no endpoint.
    fn address(&self, _: &str, name: &str) -> String {
        name.to_owned()
    }

    async fn create(&self, endpoint: &str, name: &str) -> String {
        events_admin(endpoint)
            .await
            .create_event_bus()
            .name(name)
            .send()
            .await
            .unwrap();
        name.to_owned()
    }

    /// A bus with a rule sending the sink's events to a queue of the same name.
    async fn read_back(&self, prefix: &str) -> (String, String) {
        let name = unique(prefix);
        let url = bus_to_queue(&name, SOURCE).await;
        (name, url)
    }

    fn dropping(
        &self,
        setup: Setup<EventBridgeSink>,
        name: String,
        url: String,
    ) -> Setup<EventBridgeSink> {
        setup.with_teardown(move || async move {
            delete_bus(&name).await;
            delete_queue(&sqs_admin(&moto()).await, &url).await;
            Ok(())
        })
    }

    async fn probe(&self, _: &str, url: &str) -> Boxed {
        let mut p = probe(url).await;
        p.events = true;
        Boxed(Box::new(p))
    }

    /// moto routes about ten events a second to a rule's target (see
    /// `common::whole_event`), one request at a time in effect.
    fn volume_skip(&self) -> Option<String> {
        Some(
            "moto routes about 10 events a second to a rule's target (it compiles a JSONPath \
             grammar per event): 5,000 take over 8 minutes on the shared moto, then as long \
             to read back from its SQS queue; run it against real EventBridge"
                .to_owned(),
        )
    }

    fn throttled(&self) -> Resp {
        Resp::json11_error(400, "ThrottlingException")
    }

    /// moto takes about 0.1 s per event put on a bus with a rule (one request at a time
    /// in effect, see `common::whole_event`): the `concurrency` case's 200 puts take about
    /// 20 s, over the 15 s the other services get.
    fn call_timeout(&self) -> Duration {
        Duration::from_secs(60)
    }

    fn deadline(&self) -> Duration {
        Duration::from_secs(90)
    }

    /// The bus and its rule: the rule's queue stays for the teardown.
    async fn delete(&self, name: &str, _: &str) {
        delete_bus(name).await;
    }

    /// A scripted bus that refuses, as EventBridge refuses an entry over its limit, a
    /// request with an entry over [`SCRIPTED_LIMIT`] bytes and takes the others.
    async fn oversized(&self, keep: &Keep) -> Result<Setup<EventBridgeSink>, BoxError> {
        let server = Scripted::start(|req| {
            let entries = req.json()["Entries"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let size = |e: &serde_json::Value| {
                ["Detail", "Source", "DetailType"]
                    .iter()
                    .map(|k| e[*k].as_str().map_or(0, str::len))
                    .sum::<usize>()
            };
            if entries.iter().any(|e| size(e) > SCRIPTED_LIMIT) {
                return too_large();
            }
            let ids: Vec<_> = (0..entries.len())
                .map(|i| serde_json::json!({"EventId": format!("ev-{i}")}))
                .collect();
            Resp::json11_ok(serde_json::json!({"FailedEntryCount": 0, "Entries": ids}))
        })
        .await;
        let endpoint = server.endpoint();
        keep.servers.lock().unwrap().push(server);
        let sink = self
            .sink("scripted", planted().with_endpoint(&endpoint))
            .await?;
        Ok(Setup::new(sink).with_body_size(SCRIPTED_LIMIT))
    }
}

mod sqs {
    ankusa_sink_testkit::conformance_suite!(broker "moto", super::moto_addr(); super::AwsHarness::<super::Sqs>::default());
}

mod sns {
    ankusa_sink_testkit::conformance_suite!(broker "moto", super::moto_addr(); super::AwsHarness::<super::Sns>::default());
}

mod kinesis {
    ankusa_sink_testkit::conformance_suite!(broker "moto", super::moto_addr(); super::AwsHarness::<super::Kinesis>::default());
}

mod eventbridge {
    ankusa_sink_testkit::conformance_suite!(broker "moto", super::moto_addr(); super::AwsHarness::<super::EventBridge>::default());
}

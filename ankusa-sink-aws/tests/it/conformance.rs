//! The testkit's conformance suite against SQS and SNS on moto; throttling from the
//! scripted server, refused credentials from a dedicated moto that checks IAM.

use crate::common::*;
use crate::proxy::Proxy;
use crate::scripted::{Resp, Scripted};
use ankusa_sink_aws::{AwsOptions, SnsConfig, SnsSink, SqsConfig, SqsSink, StaticCredentials};
use ankusa_sink_core::{BoxError, async_trait};
use ankusa_sink_testkit::{Case, Expect, Fault, Harness, MixedBatch, Probe, Received, Setup};
use aws_sdk_sqs::types::QueueAttributeName;
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::Duration;

const SECRET: &str = "planted-secret-access-key-8c1f";
const TOKEN: &str = "planted-session-token-77ad";

fn planted() -> AwsOptions {
    options(&moto()).with_credentials(
        StaticCredentials::new("AKIAIOSFODNN7EXAMPLE", SECRET).with_session_token(TOKEN),
    )
}

/// Reads a queue back; SQS receives are destructive, so everything seen is kept.
struct QueueProbe {
    admin: aws_sdk_sqs::Client,
    url: String,
    seen: Mutex<Vec<Received>>,
}

#[async_trait]
impl Probe for QueueProbe {
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        for _ in 0..50 {
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
            let mut seen = self.seen.lock().unwrap();
            for m in out.messages() {
                seen.push(Received::from_message_bytes(
                    m.body().unwrap_or_default().as_bytes(),
                )?);
            }
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
        seen: Mutex::new(Vec::new()),
    }
}

/// What both harnesses share: a stoppable proxy in front of moto (recovery), the dedicated
/// moto (refused credentials) and the scripted servers (throttling, never answering), kept
/// alive until the harness is dropped.
#[derive(Default)]
struct Keep {
    proxy: tokio::sync::OnceCell<Proxy>,
    moto: Mutex<Option<Moto>>,
    servers: Mutex<Vec<Scripted>>,
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
    /// moto, through the proxy.
    async fn endpoint(&self) -> String {
        self.proxy
            .get_or_init(|| async {
                let upstream = moto();
                Proxy::start(upstream.trim_start_matches("http://")).await
            })
            .await
            .endpoint()
    }

    async fn stop(&self) -> Result<(), BoxError> {
        self.proxy.get().ok_or("no destination yet")?.stop();
        Ok(())
    }

    async fn start(&self) -> Result<(), BoxError> {
        self.proxy
            .get()
            .ok_or("no destination yet")?
            .restart()
            .await;
        Ok(())
    }

    /// A dedicated moto that already checks IAM; `setup` may make one unauthenticated
    /// call (creating the destination) first.
    async fn iam_moto(&self) -> String {
        let moto = tokio::task::spawn_blocking(|| start_moto(1)).await.unwrap();
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
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://127.0.0.1:{}", l.local_addr().unwrap().port())
}

// ---------------------------------------------------------------- SQS

#[derive(Default)]
struct SqsHarness(Keep);

async fn sqs_sink(url: &str, opts: AwsOptions) -> Result<SqsSink, BoxError> {
    Ok(SqsSink::new(SqsConfig::new(url, opts)?).await?)
}

#[async_trait]
impl Harness for SqsHarness {
    fn reports_landing(&self) -> bool {
        true
    }

    type Sink = SqsSink;

    /// moto scans the whole queue on every receive: reading back the 200 hooks of
    /// `concurrency` takes 20 receives of up to 0.5 s each, over the default 10 s.
    fn probe_timeout(&self) -> Duration {
        PROBE_TIMEOUT
    }

    async fn destination(&self, case: Case) -> Result<Setup<SqsSink>, BoxError> {
        let name = unique(&format!("kit-{}", case.name().replace('_', "-")));
        let url = create_queue(&sqs_admin(&moto()).await, &name, &[]).await;
        let via = self.0.endpoint().await;
        let opts = planted()
            .with_endpoint(&via)
            // See common::options: moto under load.
            .with_timeout(Duration::from_secs(15));
        let sink = sqs_sink(&format!("{via}/{ACCOUNT}/{name}"), opts).await?;
        let setup = Setup::new(sink).with_probe(probe(&url).await);
        Ok(dropping_queue(setup, url))
    }

    async fn fault(&self, fault: Fault) -> Result<Option<Setup<SqsSink>>, BoxError> {
        let setup = match fault {
            Fault::MissingDestination => {
                let url = format!("{}/{ACCOUNT}/{}", moto(), unique("absent"));
                Setup::new(sqs_sink(&url, planted()).await?)
            }
            Fault::RefusedCredential => {
                let ep = self.0.iam_moto().await;
                let url = create_queue(&sqs_admin(&ep).await, "refused", &[]).await;
                let opts = options(&ep)
                    .with_credentials(StaticCredentials::new("AKIAUNKNOWNKEY000000", SECRET));
                Setup::new(sqs_sink(&url, opts).await?)
            }
            Fault::Unreachable => {
                let ep = closed_port();
                let opts = planted()
                    .with_endpoint(&ep)
                    .with_timeout(Duration::from_secs(2));
                Setup::new(sqs_sink(&format!("{ep}/{ACCOUNT}/q"), opts).await?)
            }
            Fault::Throttled => {
                let ep = self
                    .0
                    .scripted(Resp::sqs_error(400, "RequestThrottled", "RequestThrottled"))
                    .await;
                Setup::new(
                    sqs_sink(&format!("{ep}/{ACCOUNT}/q"), planted().with_endpoint(&ep)).await?,
                )
            }
            Fault::Unacknowledged => {
                // Reads the SendMessage request and never answers it.
                let ep = self.0.scripted(Resp::hang()).await;
                let opts = planted()
                    .with_endpoint(&ep)
                    .with_timeout(Duration::from_secs(2));
                Setup::new(sqs_sink(&format!("{ep}/{ACCOUNT}/q"), opts).await?)
            }
            Fault::Oversized => {
                let url = create_queue(
                    &sqs_admin(&moto()).await,
                    &unique("small"),
                    &[(QueueAttributeName::MaximumMessageSize, "1024")],
                )
                .await;
                let setup = Setup::new(sqs_sink(&url, planted()).await?)
                    .with_probe(probe(&url).await)
                    .with_body_size(4096);
                dropping_queue(setup, url)
            }
        };
        Ok(Some(setup))
    }

    fn secrets(&self) -> Vec<String> {
        vec![SECRET.into(), TOKEN.into()]
    }

    fn can_restart(&self) -> bool {
        true
    }

    async fn stop(&self) -> Result<(), BoxError> {
        self.0.stop().await
    }

    async fn start(&self) -> Result<(), BoxError> {
        self.0.start().await
    }
}

// ---------------------------------------------------------------- SNS

#[derive(Default)]
struct SnsHarness(Keep);

async fn sns_sink(arn: &str, opts: AwsOptions) -> Result<SnsSink, BoxError> {
    Ok(SnsSink::new(SnsConfig::new(arn, opts)?).await?)
}

/// A topic with a raw-delivery queue subscribed: (topic ARN, queue URL).
async fn subscribed_topic(prefix: &str) -> (String, String) {
    let sns = sns_admin(&moto()).await;
    let name = unique(prefix);
    let arn = sns
        .create_topic()
        .name(&name)
        .send()
        .await
        .unwrap()
        .topic_arn()
        .unwrap()
        .to_owned();
    let url = create_queue(&sqs_admin(&moto()).await, &name, &[]).await;
    sns.subscribe()
        .topic_arn(&arn)
        .protocol("sqs")
        .endpoint(format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"))
        .attributes("RawMessageDelivery", "true")
        .send()
        .await
        .unwrap();
    (arn, url)
}

#[async_trait]
impl Harness for SnsHarness {
    fn reports_landing(&self) -> bool {
        true
    }

    type Sink = SnsSink;

    /// moto scans the whole queue on every receive: reading back the 200 hooks of
    /// `concurrency` takes 20 receives of up to 0.5 s each, over the default 10 s.
    fn probe_timeout(&self) -> Duration {
        PROBE_TIMEOUT
    }

    async fn destination(&self, case: Case) -> Result<Setup<SnsSink>, BoxError> {
        let (arn, url) = subscribed_topic(&format!("kit-{}", case.name().replace('_', "-"))).await;
        let via = self.0.endpoint().await;
        let opts = planted()
            .with_endpoint(&via)
            // See common::options: moto under load.
            .with_timeout(Duration::from_secs(15));
        let sink = sns_sink(&arn, opts).await?;
        let setup = Setup::new(sink).with_probe(probe(&url).await);
        Ok(dropping_topic(setup, arn, url))
    }

    async fn fault(&self, fault: Fault) -> Result<Option<Setup<SnsSink>>, BoxError> {
        let setup = match fault {
            Fault::MissingDestination => {
                let arn = format!("arn:aws:sns:{REGION}:{ACCOUNT}:{}", unique("absent"));
                Setup::new(sns_sink(&arn, planted()).await?)
            }
            Fault::RefusedCredential => {
                let ep = self.0.iam_moto().await;
                let arn = sns_admin(&ep)
                    .await
                    .create_topic()
                    .name("refused")
                    .send()
                    .await?
                    .topic_arn()
                    .unwrap_or_default()
                    .to_owned();
                let opts = options(&ep)
                    .with_credentials(StaticCredentials::new("AKIAUNKNOWNKEY000000", SECRET));
                Setup::new(sns_sink(&arn, opts).await?)
            }
            Fault::Unreachable => {
                let opts = planted()
                    .with_endpoint(closed_port())
                    .with_timeout(Duration::from_secs(2));
                Setup::new(sns_sink(&format!("arn:aws:sns:{REGION}:{ACCOUNT}:t"), opts).await?)
            }
            Fault::Throttled => {
                let ep = self.0.scripted(Resp::sns_error(400, "Throttled")).await;
                Setup::new(
                    sns_sink(
                        &format!("arn:aws:sns:{REGION}:{ACCOUNT}:t"),
                        planted().with_endpoint(&ep),
                    )
                    .await?,
                )
            }
            Fault::Unacknowledged => {
                // Reads the Publish request and never answers it.
                let ep = self.0.scripted(Resp::hang()).await;
                let opts = planted()
                    .with_endpoint(&ep)
                    .with_timeout(Duration::from_secs(2));
                Setup::new(sns_sink(&format!("arn:aws:sns:{REGION}:{ACCOUNT}:t"), opts).await?)
            }
            Fault::Oversized => {
                // SNS (moto) refuses more than 256 KiB; the pre-check is raised so SNS says so.
                let (arn, url) = subscribed_topic("big").await;
                let opts = planted()
                    .with_max_message_bytes(NonZeroUsize::new(1 << 20).unwrap())
                    .with_inline_max_bytes(NonZeroUsize::new(400_000).unwrap());
                let setup = Setup::new(sns_sink(&arn, opts).await?)
                    .with_probe(probe(&url).await)
                    .with_body_size(300_000);
                dropping_topic(setup, arn, url)
            }
        };
        Ok(Some(setup))
    }

    async fn mixed_batch(&self) -> Result<Option<MixedBatch<SnsSink>>, BoxError> {
        // moto refuses entries over 256 KiB one by one inside a PublishBatch.
        let (arn, url) = subscribed_topic("mixed").await;
        let opts = planted()
            .with_max_message_bytes(NonZeroUsize::new(1 << 20).unwrap())
            .with_inline_max_bytes(NonZeroUsize::new(400_000).unwrap())
            .with_batch(
                ankusa_sink_aws::AwsBatch::default().with_linger(Duration::from_millis(200)),
            );
        let setup = Setup::new(sns_sink(&arn, opts).await?).with_probe(probe(&url).await);
        let setup = dropping_topic(setup, arn, url);
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

    fn secrets(&self) -> Vec<String> {
        vec![SECRET.into(), TOKEN.into()]
    }

    fn can_restart(&self) -> bool {
        true
    }

    async fn stop(&self) -> Result<(), BoxError> {
        self.0.stop().await
    }

    async fn start(&self) -> Result<(), BoxError> {
        self.0.start().await
    }
}

mod sqs {
    ankusa_sink_testkit::conformance_suite!(super::SqsHarness::default());
}

mod sns {
    ankusa_sink_testkit::conformance_suite!(super::SnsHarness::default());
}

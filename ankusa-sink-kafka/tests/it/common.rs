//! Shared helpers: the real broker, unique topics, an `assign()`ed read-back consumer, and
//! private tansu instances for outage tests.

use ankusa_sink_core::{Envelope, Failure};
use ankusa_sink_kafka::{KafkaConfig, KafkaSink};
use ankusa_sink_testkit::support::{LogCapture, LogLine, unique_name};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{LazyLock, OnceLock};
use std::time::{Duration, Instant};

/// The real broker: `ANKUSA_KAFKA_BROKERS`, default tansu from `scripts/services/kafka.sh`.
pub(crate) fn brokers() -> String {
    let b = std::env::var("ANKUSA_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".into());
    let first = broker_addr();
    assert!(
        std::net::TcpStream::connect_timeout(
            &first.parse().expect("ANKUSA_KAFKA_BROKERS: host:port"),
            Duration::from_secs(2)
        )
        .is_ok(),
        "no Kafka broker at {first}: run scripts/services/kafka.sh (or set ANKUSA_KAFKA_BROKERS)"
    );
    b
}

/// The real broker's first `host:port`, for `require_broker!`.
pub(crate) fn broker_addr() -> String {
    let b = std::env::var("ANKUSA_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".into());
    b.split(',').next().unwrap_or_default().to_owned()
}

/// A topic name (or client id) unique to this run and call.
pub(crate) fn unique_topic(tag: &str) -> String {
    unique_name(&format!("ankusa-it-{tag}"))
}

/// Create `topic` with `partitions` partitions on `brokers`.
pub(crate) async fn create_topic(brokers: &str, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("admin client");
    let res = admin
        .create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create_topics");
    for r in res {
        r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e:?}"));
    }
}

/// Delete `topic`, best effort.
pub(crate) async fn delete_topic(brokers: &str, topic: &str) {
    let Ok(admin) = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create::<AdminClient<DefaultClientContext>>()
    else {
        return;
    };
    let _ = admin.delete_topics(&[topic], &AdminOptions::new()).await;
}

/// A created topic, deleted when dropped (best effort).
pub(crate) struct Topic {
    pub(crate) brokers: String,
    pub(crate) name: String,
}

impl Topic {
    pub(crate) async fn new(tag: &str, partitions: i32) -> Topic {
        let brokers = brokers();
        let name = unique_topic(tag);
        create_topic(&brokers, &name, partitions).await;
        Topic { brokers, name }
    }

    pub(crate) fn config(&self) -> KafkaConfig {
        KafkaConfig::new(&self.brokers, &self.name)
            .unwrap()
            .with_produce_timeout(Duration::from_secs(10))
    }

    pub(crate) fn sink(&self) -> KafkaSink {
        KafkaSink::new(self.config()).expect("sink")
    }

    pub(crate) async fn cleanup(self) {
        delete_topic(&self.brokers, &self.name).await;
    }
}

/// A record read back from the broker.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub(crate) partition: i32,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) value: Vec<u8>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) timestamp: Option<i64>,
}

/// Read `expect` records from every partition of `topic` with an `assign()`ed consumer
/// (no group join), bounded by `within`.
pub(crate) fn read_back(
    brokers: &str,
    topic: &str,
    expect: usize,
    within: Duration,
) -> Vec<Record> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "ankusa-it-readback")
        .set("enable.auto.commit", "false")
        .set("allow.auto.create.topics", "false")
        .create()
        .expect("consumer");
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    let t = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .expect("topic in metadata");
    let mut tpl = TopicPartitionList::new();
    for p in t.partitions() {
        tpl.add_partition_offset(topic, p.id(), Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).expect("assign");
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    while out.len() < expect && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => out.push(Record {
                partition: m.partition(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().unwrap_or_default().to_vec(),
                headers: m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| {
                                (
                                    h.key.to_owned(),
                                    String::from_utf8_lossy(h.value.unwrap_or_default())
                                        .into_owned(),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                timestamp: m.timestamp().to_millis(),
            }),
            Some(Err(e)) => panic!("consume {topic}: {e}"),
            None => {}
        }
    }
    out
}

/// The high watermark (records ever produced) summed over `topic`'s partitions.
pub(crate) fn high_watermark(brokers: &str, topic: &str) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "ankusa-it-watermarks")
        .create()
        .expect("consumer");
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    let t = md.topics().iter().find(|t| t.name() == topic).unwrap();
    t.partitions()
        .iter()
        .map(|p| {
            consumer
                .fetch_watermarks(topic, p.id(), Duration::from_secs(10))
                .expect("watermarks")
                .1
        })
        .sum()
}

/// Whether `topic` is in the cluster's metadata (asked without auto-creating it).
pub(crate) fn topic_exists(brokers: &str, topic: &str) -> bool {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "ankusa-it-exists")
        .set("allow.auto.create.topics", "false")
        .create()
        .expect("consumer");
    let md = consumer
        .fetch_metadata(None, Duration::from_secs(10))
        .expect("metadata");
    md.topics().iter().any(|t| t.name() == topic)
}

/// An envelope with a tenant, a dedupe key and a provider header.
pub(crate) fn envelope(id: &str, body: impl Into<ankusa_sink_core::Bytes>) -> Envelope {
    Envelope::builder(id, "stripe", body)
        .tenant_id("acme")
        .received_at(1_700_000_000_123)
        .content_type("application/json")
        .header("Stripe-Signature", "t=1,v1=abc")
        .dedupe_key(format!("evt_{id}"))
        .build()
        .unwrap()
}

/// Panic with the failure's text unless `res` is an error.
pub(crate) fn expect_err(res: Result<(), Failure>) -> Failure {
    match res {
        Ok(()) => panic!("expected a failure, got Ok"),
        Err(f) => f,
    }
}

/// A loopback port nobody listens on.
pub(crate) use ankusa_sink_testkit::support::free_port as closed_port;

/// The tansu binary: `ANKUSA_TANSU_BIN`, else where `scripts/services/kafka.sh` installs it
/// on this machine (`kafka.sh bin` prints it, installing it first if missing).
pub(crate) fn tansu_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(b) = std::env::var_os("ANKUSA_TANSU_BIN") {
            return b.into();
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/services/kafka.sh");
        let out = Command::new("bash")
            .arg(&script)
            .arg("bin")
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("run {script:?} bin: {e}"));
        let bin = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            out.status.success() && !bin.is_empty(),
            "{script:?} bin found no tansu binary (or set ANKUSA_TANSU_BIN)"
        );
        bin.into()
    })
    .clone()
}

/// A private tansu broker on its own loopback port, killed (by its own handle) on drop.
pub(crate) struct Tansu {
    pub(crate) port: u16,
    child: Option<Child>,
    extra: Vec<String>,
    /// `host:port` clients are told to connect to; its own address unless it sits behind a
    /// proxy.
    advertised: Option<String>,
}

impl Tansu {
    /// Start one on a free port and wait until it accepts connections.
    pub(crate) fn start(extra: &[&str]) -> Tansu {
        Self::start_advertising(extra, None)
    }

    /// Start one that tells clients (in its metadata) to connect to `advertised`, a proxy
    /// in front of it, instead of its own address: clients then reach it only through
    /// the proxy, which a test can stop, silence or point at another broker.
    pub(crate) fn start_advertising(extra: &[&str], advertised: Option<String>) -> Tansu {
        let mut t = Tansu {
            port: closed_port(),
            child: None,
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            advertised,
        };
        t.spawn();
        t
    }

    pub(crate) fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let url = format!("tcp://{}", self.addr());
        let advertised = match &self.advertised {
            Some(a) => format!("tcp://{a}"),
            None => url.clone(),
        };
        let child = Command::new(tansu_bin())
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &advertised,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn tansu");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(self.addr()).is_err() {
            assert!(
                Instant::now() < deadline,
                "tansu on {} did not start",
                self.addr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kill it; the port is closed once this returns.
    pub(crate) fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start it again on the same port.
    pub(crate) fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Every event and span of this crate and of librdkafka, at any level, for [`lines_with`].
static CAPTURE: LazyLock<LogCapture> =
    LazyLock::new(|| LogCapture::for_targets(&["librdkafka", "ankusa_sink_kafka"]));

/// Install the test subscriber (once per process): it prints what `RUST_LOG` asks for and
/// captures this crate's and librdkafka's events for [`lines_with`]. It carries the
/// testkit's global layer, so the conformance cases in this binary search every log line
/// for their planted secrets. When a conformance case ran first, the testkit's subscriber
/// is the global one: the capture is attached to it instead (without the `RUST_LOG` print).
pub(crate) fn trace() {
    use tracing_subscriber::prelude::*;
    static ATTACHED: OnceLock<Option<ankusa_sink_testkit::support::GlobalGuard>> = OnceLock::new();
    ATTACHED.get_or_init(|| {
        let installed = tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .with_test_writer()
                    .with_filter(tracing_subscriber::EnvFilter::from_default_env()),
            )
            .with(CAPTURE.clone())
            .with(ankusa_sink_testkit::support::global_layer())
            .try_init();
        installed.err().map(|_| CAPTURE.attach_global())
    });
}

/// The captured lines whose text contains `needle` (a sink's unique `client_id`).
pub(crate) fn lines_with(needle: &str) -> Vec<LogLine> {
    CAPTURE.lines_with(needle)
}

/// The lines a default (`info`) filter shows, of the sink with client id `client`.
pub(crate) fn shown_lines(client: &str) -> Vec<LogLine> {
    lines_with(client)
        .into_iter()
        .filter(|l| l.level <= tracing::Level::INFO)
        .collect()
}

//! The shared conformance suite (`ankusa-sink-testkit`) against a private tansu broker per
//! case, so the recovery case can stop and restart it without disturbing other tests.

use crate::common::*;
use ankusa_sink_core::{BoxError, Ctx, Sink, async_trait};
use ankusa_sink_kafka::{KafkaConfig, KafkaSink, SaslConfig, SaslMechanism};
use ankusa_sink_testkit::{Case, Fault, Harness, Probe, Received, Setup};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

const PLANTED_PASSWORD: &str = "planted-kafka-password-8c1f";
/// The mock cluster's topic for the unacknowledged fault.
const UNACKED_TOPIC: &str = "ankusa.unacked";

/// librdkafka's in-process mock cluster, on a thread of its own (it is not `Send`), with
/// `UNACKED_TOPIC`: its bootstrap servers, and where to send a round-trip time for every
/// answer (`None` ends it).
fn slow_mock_broker() -> Result<(String, std::sync::mpsc::Sender<Option<Duration>>), BoxError> {
    let (servers_tx, servers_rx) = std::sync::mpsc::channel();
    let (control, commands) = std::sync::mpsc::channel::<Option<Duration>>();
    std::thread::spawn(move || {
        let cluster =
            match rdkafka::mocking::MockCluster::<rdkafka::producer::DefaultProducerContext>::new(1)
            {
                Ok(c) => c,
                Err(e) => {
                    let _ = servers_tx.send(Err(e.to_string()));
                    return;
                }
            };
        if let Err(e) = cluster.create_topic(UNACKED_TOPIC, 1, 1) {
            let _ = servers_tx.send(Err(e.to_string()));
            return;
        }
        let _ = servers_tx.send(Ok(cluster.bootstrap_servers()));
        while let Ok(Some(rtt)) = commands.recv() {
            let _ = cluster.broker_round_trip_time(1, rtt);
        }
    });
    let servers = servers_rx.recv()??;
    Ok((servers, control))
}
const PLANTED_PROPERTY: &str = "planted-keystore-secret-51aa";

pub(crate) struct KafkaHarness {
    broker: Mutex<Tansu>,
    /// Topics created on `broker` and not torn down yet, recreated after a restart (memory
    /// storage forgets them).
    topics: Arc<Mutex<Vec<String>>>,
    /// Brokers that demand authentication, for the refused-credential fault.
    auth_brokers: Mutex<Vec<Tansu>>,
    /// Restarts of `broker` so far: a probe reads its topic from the start again after one.
    restarts: Arc<AtomicU64>,
    /// Every probe made, to stop their fetching across a restart.
    probes: Mutex<Vec<Weak<Mutex<ProbeState>>>>,
}

impl KafkaHarness {
    pub(crate) fn new() -> Self {
        KafkaHarness {
            broker: Mutex::new(Tansu::start(&[])),
            topics: Arc::default(),
            auth_brokers: Mutex::new(Vec::new()),
            restarts: Arc::default(),
            probes: Mutex::default(),
        }
    }

    fn addr(&self) -> String {
        self.broker.lock().unwrap().addr()
    }

    fn config(&self, topic: &str) -> KafkaConfig {
        KafkaConfig::new(self.addr(), topic)
            .unwrap()
            .with_produce_timeout(Duration::from_secs(10))
            .with_property("ssl.keystore.password", PLANTED_PROPERTY)
            .unwrap()
    }

    async fn new_topic(&self, tag: &str) -> String {
        let topic = unique_topic(tag);
        create_topic(&self.addr(), &topic, 1).await;
        self.topics.lock().unwrap().push(topic.clone());
        topic
    }

    /// `sink` with a probe on `topic` and a teardown deleting the topic.
    fn setup(&self, topic: &str, sink: KafkaSink) -> Result<Setup<Arc<KafkaSink>>, BoxError> {
        let probe = TopicProbe::new(&self.addr(), topic, Arc::clone(&self.restarts))?;
        let mut probes = self.probes.lock().unwrap();
        probes.retain(|p| p.strong_count() > 0);
        probes.push(Arc::downgrade(&probe.state));
        drop(probes);
        let (brokers, topics, topic) = (self.addr(), Arc::clone(&self.topics), topic.to_owned());
        Ok(Setup::new(Arc::new(sink))
            .with_probe(probe)
            .with_teardown(move || async move {
                topics.lock().unwrap().retain(|t| *t != topic);
                delete_topic(&brokers, &topic).await;
                Ok(())
            }))
    }
}

/// Reads a topic back with an `assign()`ed consumer, accumulating what it has seen.
struct TopicProbe {
    state: Arc<Mutex<ProbeState>>,
}

struct ProbeState {
    /// `None` from the harness's `stop` until the first read after its `start`.
    consumer: Option<BaseConsumer>,
    brokers: String,
    topic: String,
    seen: Vec<Received>,
    /// The harness's restart count when the consumer was made.
    assigned_at: u64,
    restarts: Arc<AtomicU64>,
}

impl ProbeState {
    /// A new consumer reading `topic` from its first offset. After a restart the in-memory
    /// broker's log starts again at offset 0 while an old consumer's position is past it,
    /// and the old consumer would fetch by the topic id the topic had before: the restarted
    /// broker answers that with a zero topic id and leader tags, on which librdkafka 2.12.1
    /// crashes (a NULL topic name in its metadata update). So every restart gets a new one.
    fn connect(&mut self) -> Result<(), BoxError> {
        self.consumer = None;
        self.assigned_at = self.restarts.load(Ordering::Acquire);
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", "ankusa-conformance")
            .set("enable.auto.commit", "false")
            .set("allow.auto.create.topics", "false")
            // Hand over a fetch as soon as it has a record: the durability case reads right
            // after each ack.
            .set("fetch.wait.max.ms", "10")
            .create()?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, 0, Offset::Beginning)?;
        consumer.assign(&tpl)?;
        self.consumer = Some(consumer);
        Ok(())
    }
}

impl TopicProbe {
    fn new(brokers: &str, topic: &str, restarts: Arc<AtomicU64>) -> Result<Self, BoxError> {
        let mut state = ProbeState {
            consumer: None,
            brokers: brokers.to_owned(),
            topic: topic.to_owned(),
            seen: Vec::new(),
            assigned_at: 0,
            restarts,
        };
        state.connect()?;
        Ok(TopicProbe {
            state: Arc::new(Mutex::new(state)),
        })
    }
}

#[async_trait]
impl Probe for TopicProbe {
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        let state = Arc::clone(&self.state);
        tokio::task::spawn_blocking(move || {
            let mut state = state.lock().unwrap();
            if state.assigned_at != state.restarts.load(Ordering::Acquire) {
                state.connect()?;
            }
            let ProbeState { consumer, seen, .. } = &mut *state;
            // Stopped: what was seen before.
            let Some(consumer) = consumer else {
                return Ok(seen.clone());
            };
            // What has arrived so far: poll until the consumer has nothing more at hand.
            let until = Instant::now() + Duration::from_millis(800);
            while Instant::now() < until {
                match consumer.poll(Duration::from_millis(50)) {
                    Some(Ok(m)) => seen.push(Received::from_message_bytes(
                        m.payload().unwrap_or_default(),
                    )?),
                    // A restarted broker, a partition not known yet: tried again next call.
                    Some(Err(_)) => {}
                    None => break,
                }
            }
            Ok(seen.clone())
        })
        .await?
    }
}

#[async_trait]
impl Harness for KafkaHarness {
    fn reports_landing(&self) -> bool {
        true
    }

    type Sink = Arc<KafkaSink>;

    async fn destination(&self, case: Case) -> Result<Setup<Self::Sink>, BoxError> {
        let topic = self.new_topic(case.name()).await;
        let sink = KafkaSink::new(self.config(&topic))?;
        self.setup(&topic, sink)
    }

    async fn fault(&self, fault: Fault) -> Result<Option<Setup<Self::Sink>>, BoxError> {
        let setup = match fault {
            Fault::MissingDestination => {
                let cfg = self
                    .config(&unique_topic("absent"))
                    .with_produce_timeout(Duration::from_secs(4));
                Setup::new(Arc::new(KafkaSink::new(cfg)?))
            }
            Fault::RefusedCredential => {
                let broker = Tansu::start(&["--authentication"]);
                let cfg = KafkaConfig::new(broker.addr(), "t")
                    .unwrap()
                    .with_produce_timeout(Duration::from_secs(3))
                    .with_sasl(SaslConfig::new(
                        SaslMechanism::ScramSha512,
                        "svc",
                        PLANTED_PASSWORD,
                    ))
                    .unwrap();
                self.auth_brokers.lock().unwrap().push(broker);
                Setup::new(Arc::new(KafkaSink::new(cfg)?))
            }
            Fault::Unreachable => {
                let cfg = KafkaConfig::new(format!("127.0.0.1:{}", closed_port()), "t")
                    .unwrap()
                    .with_produce_timeout(Duration::from_secs(2));
                Setup::new(Arc::new(KafkaSink::new(cfg)?))
            }
            Fault::Throttled => {
                // librdkafka's own back-pressure: a one-record local queue, already taken by
                // a record waiting for a broker that is not there.
                let cfg = KafkaConfig::new(format!("127.0.0.1:{}", closed_port()), "t")
                    .unwrap()
                    .with_produce_timeout(Duration::from_secs(20))
                    .with_property("queue.buffering.max.messages", "1")
                    .unwrap();
                let sink = Arc::new(KafkaSink::new(cfg)?);
                let holder = Arc::clone(&sink);
                tokio::spawn(async move {
                    let env = envelope("queue-holder", "{}");
                    let _ = holder.deliver(&env, &Ctx::for_envelope(&env)).await;
                });
                tokio::time::sleep(Duration::from_millis(200)).await;
                Setup::new(sink)
            }
            Fault::Oversized => {
                let topic = self.new_topic("oversized").await;
                let cfg = self
                    .config(&topic)
                    .with_inline_max_bytes(NonZeroUsize::new(1 << 20).unwrap())
                    .with_max_record_bytes(NonZeroUsize::new(10_000).unwrap())
                    .unwrap();
                // Body size from capabilities(): one byte over max_record_bytes.
                self.setup(&topic, KafkaSink::new(cfg)?)?
            }
            Fault::Unacknowledged => {
                // librdkafka's mock cluster: warmed up (producer id, metadata), then every
                // answer held 10 s, far past the sink's 1 s produce timeout.
                let (servers, control) = slow_mock_broker()?;
                let cfg = KafkaConfig::new(&servers, UNACKED_TOPIC)?
                    .with_produce_timeout(Duration::from_secs(1));
                let sink = Arc::new(KafkaSink::new(cfg)?);
                let warm = envelope("unacked-warm-up", "{}");
                sink.deliver(&warm, &Ctx::for_envelope(&warm)).await?;
                control.send(Some(Duration::from_secs(10)))?;
                Setup::new(sink).with_teardown(move || async move {
                    let _ = control.send(None);
                    Ok(())
                })
            }
        };
        Ok(Some(setup))
    }

    fn secrets(&self) -> Vec<String> {
        vec![PLANTED_PASSWORD.into(), PLANTED_PROPERTY.into()]
    }

    fn can_restart(&self) -> bool {
        true
    }

    async fn stop(&self) -> Result<(), BoxError> {
        // No probe fetches across the restart: each one's consumer goes now, and the first
        // read after `start` makes a new one ([`ProbeState::connect`]).
        let probes: Vec<_> = self.probes.lock().unwrap().clone();
        tokio::task::spawn_blocking(move || {
            for state in probes.iter().filter_map(Weak::upgrade) {
                state.lock().unwrap().consumer = None;
            }
        })
        .await?;
        self.broker.lock().unwrap().stop();
        Ok(())
    }

    async fn start(&self) -> Result<(), BoxError> {
        self.broker.lock().unwrap().restart();
        let topics = self.topics.lock().unwrap().clone();
        for t in topics {
            create_topic(&self.addr(), &t, 1).await;
        }
        self.restarts.fetch_add(1, Ordering::Release);
        Ok(())
    }
}

ankusa_sink_testkit::conformance_suite!(KafkaHarness::new());

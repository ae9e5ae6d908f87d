//! The shared conformance suite (`ankusa-sink-testkit`) against a private tansu broker per
//! case, so the recovery case can stop and restart it without disturbing other tests.
//! Warm faults run against a tansu of their own behind a proxy it advertises (so every
//! connection of the client goes through the proxy): stopped, silent, or pointed at a
//! tansu that requires authentication.

use crate::common::*;
use ankusa_message::MessageOptions;
use ankusa_sink_core::{BoxError, Ctx, Sink, async_trait};
use ankusa_sink_kafka::{KafkaConfig, KafkaSink, SaslConfig, SaslMechanism};
use ankusa_sink_testkit::support::TcpProxy;
use ankusa_sink_testkit::{Case, Fault, Harness, Probe, Received, Setup, WarmFault};
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

/// What the thread owning the mock cluster does next.
enum Mock {
    /// Hold every answer this long.
    Rtt(Duration),
    /// Answer the next produce requests with this error, and say it of `UNACKED_TOPIC` in
    /// every metadata answer: what a broker says of a topic the producer may no longer
    /// write to, or that is gone.
    TopicRefused(rdkafka::types::RDKafkaRespErr),
}

/// Where the mock cluster's thread takes its next [`Mock`] command (`None` ends it).
type MockControl = std::sync::mpsc::Sender<Option<Mock>>;

/// librdkafka's in-process mock cluster, on a thread of its own (it is not `Send`), with
/// `UNACKED_TOPIC`: its bootstrap servers, and its control.
fn slow_mock_broker() -> Result<(String, MockControl), BoxError> {
    let (servers_tx, servers_rx) = std::sync::mpsc::channel();
    let (control, commands) = std::sync::mpsc::channel::<Option<Mock>>();
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
        while let Ok(Some(command)) = commands.recv() {
            match command {
                Mock::Rtt(rtt) => {
                    let _ = cluster.broker_round_trip_time(1, rtt);
                }
                Mock::TopicRefused(error) => {
                    let _ = cluster.topic_error(UNACKED_TOPIC, error);
                    cluster.request_errors(rdkafka::types::RDKafkaApiKey::Produce, &[error; 100]);
                }
            }
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

    /// A sink on librdkafka's mock cluster (no probe), and its control.
    fn mock_setup(
        &self,
        produce_timeout: Duration,
    ) -> Result<(Setup<Arc<KafkaSink>>, MockControl), BoxError> {
        let (servers, control) = slow_mock_broker()?;
        let cfg = KafkaConfig::new(&servers, UNACKED_TOPIC)?.with_produce_timeout(produce_timeout);
        let stop = control.clone();
        let setup = Setup::new(Arc::new(KafkaSink::new(cfg)?)).with_teardown(move || async move {
            let _ = stop.send(None);
            Ok(())
        });
        Ok((setup, control))
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

/// A tansu of its own behind a proxy it advertises, with one topic; the setup's teardown
/// stops the proxy and every broker put in its slot.
struct Behind {
    proxy: Arc<TcpProxy>,
    topic: String,
    /// The brokers to kill at teardown: this one, and any a fault started.
    brokers: Arc<Mutex<Vec<Tansu>>>,
}

impl Behind {
    async fn start(extra: &[&str]) -> Result<Behind, BoxError> {
        // The proxy's address is what the broker advertises: make the proxy first.
        let proxy = Arc::new(TcpProxy::start("127.0.0.1:1").await?);
        let advertised = proxy.addr().to_string();
        let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        let tansu = tokio::task::spawn_blocking(move || {
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            Tansu::start_advertising(&extra, Some(advertised))
        })
        .await?;
        proxy.redirect(tansu.addr()).await;
        let topic = unique_topic("warm");
        create_topic(&proxy.addr().to_string(), &topic, 1).await;
        Ok(Behind {
            proxy,
            topic,
            brokers: Arc::new(Mutex::new(vec![tansu])),
        })
    }

    fn addr(&self) -> String {
        self.proxy.addr().to_string()
    }

    /// `sink` on the topic, read back through the proxy, torn down with the brokers.
    fn setup(&self, sink: KafkaSink) -> Result<Setup<Arc<KafkaSink>>, BoxError> {
        let probe = TopicProbe::new(&self.addr(), &self.topic, Arc::default())?;
        let (proxy, brokers) = (Arc::clone(&self.proxy), Arc::clone(&self.brokers));
        Ok(Setup::new(Arc::new(sink))
            .with_probe(probe)
            .with_teardown(move || async move {
                proxy.stop().await;
                let brokers = std::mem::take(&mut *brokers.lock().unwrap());
                tokio::task::spawn_blocking(move || drop(brokers)).await?;
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

/// Enqueue records through `sink` until `n` of them wait (for a broker that answers
/// nothing): each delivery enqueues on its first poll, which is done here, then it waits
/// on a task of its own. A delivery refused at once (a slot not freed yet) is tried again.
async fn fill_local_queue(sink: &Arc<KafkaSink>, n: usize) -> Result<(), BoxError> {
    use std::task::Poll;
    let mut held = 0;
    for _ in 0..100 {
        let holder = Arc::clone(sink);
        let mut wait = Box::pin(async move {
            let env = envelope(&unique_topic("queue-holder"), "{}");
            holder.deliver(&env, &Ctx::for_envelope(&env)).await
        });
        let first = std::future::poll_fn(|cx| Poll::Ready(wait.as_mut().poll(cx))).await;
        match first {
            Poll::Pending => {
                tokio::spawn(wait);
                held += 1;
                if held == n {
                    return Ok(());
                }
            }
            Poll::Ready(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    Err(format!("only {held} of {n} records could be left waiting in the local queue").into())
}

#[async_trait]
impl Harness for KafkaHarness {
    fn reports_landing(&self) -> bool {
        true
    }

    type Sink = Arc<KafkaSink>;

    /// Why `durability` does not restart the destination.
    fn restart_destination_skip_reason(&self) -> Option<String> {
        Some(
            "tansu (scripts/services/kafka.sh) is the one shared Kafka-protocol broker, other tests' too, and no private one is started for this case"
                .into(),
        )
    }

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
                    .with_message(
                        MessageOptions::new()
                            .with_inline_max_bytes(NonZeroUsize::new(1 << 20).unwrap()),
                    )
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
                control.send(Some(Mock::Rtt(Duration::from_secs(10))))?;
                Setup::new(sink).with_teardown(move || async move {
                    let _ = control.send(None);
                    Ok(())
                })
            }
        };
        Ok(Some(setup))
    }

    async fn warm_fault(&self, fault: Fault) -> Result<Option<WarmFault<Self::Sink>>, BoxError> {
        let short = Duration::from_secs(3);
        Ok(Some(match fault {
            // librdkafka's mock cluster, warmed up, then saying the topic is gone (tansu
            // takes records for a topic deleted under a producer that knows it: it is no
            // missing destination there).
            Fault::MissingDestination => {
                let (setup, control) = self.mock_setup(short)?;
                WarmFault::new(setup, move || async move {
                    let gone =
                        rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
                    control.send(Some(Mock::TopicRefused(gone)))?;
                    Ok(())
                })
            }
            // librdkafka's mock cluster, warmed up, then refusing the producer's
            // authorization for the topic (tansu keeps no SCRAM user across the restart
            // that would turn on authentication: its storage is memory).
            Fault::RefusedCredential => {
                let (setup, control) = self.mock_setup(short)?;
                WarmFault::new(setup, move || async move {
                    let refused =
                        rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED;
                    control.send(Some(Mock::TopicRefused(refused)))?;
                    Ok(())
                })
            }
            Fault::Unreachable => {
                let b = Behind::start(&[]).await?;
                let cfg = KafkaConfig::new(b.addr(), &b.topic)?.with_produce_timeout(short);
                let setup = b.setup(KafkaSink::new(cfg)?)?;
                WarmFault::new(setup, move || async move {
                    b.proxy.stop().await;
                    Ok(())
                })
            }
            // The broker goes silent and records fill the two-record local queue:
            // librdkafka's own back-pressure. (Two: a record's slot is freed a moment
            // after its delivery report, so one slot would refuse a warm-up delivery.)
            Fault::Throttled => {
                let b = Behind::start(&[]).await?;
                let cfg = KafkaConfig::new(b.addr(), &b.topic)?
                    .with_produce_timeout(Duration::from_secs(20))
                    .with_property("queue.buffering.max.messages", "2")?;
                let setup = b.setup(KafkaSink::new(cfg)?)?;
                let sink = Arc::clone(&setup.sink);
                WarmFault::new(setup, move || async move {
                    b.proxy.blackhole();
                    fill_local_queue(&sink, 2).await
                })
            }
            // The sink's own record limit, as cold: the warm-up's small hooks pass.
            Fault::Oversized => {
                let topic = self.new_topic("warm-oversized").await;
                let cfg = self
                    .config(&topic)
                    .with_message(
                        MessageOptions::new()
                            .with_inline_max_bytes(NonZeroUsize::new(1 << 20).unwrap()),
                    )
                    .with_max_record_bytes(NonZeroUsize::new(10_000).unwrap())?;
                WarmFault::standing(self.setup(&topic, KafkaSink::new(cfg)?)?)
            }
            // Silent on the connections the producer holds: records are taken, never acked.
            Fault::Unacknowledged => {
                let b = Behind::start(&[]).await?;
                let cfg = KafkaConfig::new(b.addr(), &b.topic)?.with_produce_timeout(short);
                let setup = b.setup(KafkaSink::new(cfg)?)?;
                WarmFault::new(setup, move || async move {
                    b.proxy.blackhole();
                    Ok(())
                })
            }
        }))
    }

    /// `check()` fetches the topic's metadata with the configured credentials.
    fn check_detects(&self, fault: Fault) -> bool {
        matches!(fault, Fault::MissingDestination | Fault::RefusedCredential)
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

ankusa_sink_testkit::conformance_suite!(broker "Kafka", broker_addr(); KafkaHarness::new());

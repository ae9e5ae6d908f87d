//! The whole conformance suite: sinks on the shared Mosquitto through a stoppable proxy
//! (for `recovery`), each topic read back by a subscriber made before the first delivery
//! (MQTT keeps nothing for a subscriber that comes later); a topic nobody subscribes to
//! for the missing destination (PUBACK 0x10), a private Mosquitto with a password file for
//! the refused credential (CONNACK 0x87) and with `max_packet_size` for the oversized
//! body, a scripted MQTT 5 broker for Quota exceeded (PUBACK 0x97) and for a PUBACK that
//! never comes. Warm: a subscriber that leaves, a proxy that comes back as a broker
//! wanting another password, stops, or goes silent, a broker that starts answering 0x97.

use crate::common::{
    Broker, BrokerConfig, Got, Reply, Script, Scripted, Subscriber, free_port, shared_addr,
    unique_name, wait_without_subscribers,
};
use ankusa_sink_core::{BoxError, Secret, async_trait};
use ankusa_sink_mqtt::{MqttConfig, MqttSink};
use ankusa_sink_testkit::support::TcpProxy;
use ankusa_sink_testkit::{Case, Fault, Harness, Probe, Received, Setup, WarmFault};
use rumqttc::v5::mqttbytes::v5::PubAckReason;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A password planted in every sink. The shared Mosquitto allows anonymous clients and
/// has no password file, so it takes any login: the sinks really send it.
const PLANTED: &str = "planted-mqtt-pa55word-4d1a";

/// The oversized fault's body: inline (under 64 KiB) and, as Message v1 (base64 and
/// about 500 bytes more), over the private broker's `max_packet_size` of 8 KiB.
const OVERSIZED_BODY: usize = 7_000;

/// Reads back what a subscriber got.
struct SubscriberProbe(Arc<Mutex<Vec<Got>>>);

#[async_trait]
impl Probe for SubscriberProbe {
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        let got = self.0.lock().unwrap().clone();
        got.iter()
            .map(|g| Received::from_message_bytes(&g.payload))
            .collect()
    }
}

fn config(addr: &str, topic: &str) -> Result<MqttConfig, BoxError> {
    Ok(MqttConfig::new(&format!("mqtt://{addr}"), topic)?
        .with_credentials("ankusa", Secret::new(PLANTED))
        .unwrap()
        .with_timeout(Duration::from_secs(2))
        .with_connect_timeout(Duration::from_secs(2)))
}

fn sink(addr: &str, topic: &str) -> Result<MqttSink, BoxError> {
    Ok(MqttSink::new(config(addr, topic)?)?)
}

/// `sink` publishing to `topic`, read back by a subscriber on `broker`, which leaves
/// afterwards.
async fn setup(broker: &str, topic: &str, sink: MqttSink) -> Result<Setup<MqttSink>, BoxError> {
    let sub = Subscriber::start(broker, topic).await?;
    let probe = SubscriberProbe(sub.handle());
    Ok(Setup::new(sink)
        .with_probe(probe)
        .with_teardown(move || async move {
            sub.leave().await;
            Ok(())
        }))
}

/// A private broker a fault started, stopped by the setup's teardown.
type Slot = Arc<Mutex<Option<Broker>>>;

pub(crate) struct MqttHarness {
    proxy: tokio::sync::OnceCell<TcpProxy>,
    keep: Mutex<(Vec<Scripted>, Vec<Broker>)>,
}

impl MqttHarness {
    pub(crate) fn new() -> Self {
        MqttHarness {
            proxy: tokio::sync::OnceCell::new(),
            keep: Mutex::new((Vec::new(), Vec::new())),
        }
    }

    async fn proxy(&self) -> Result<&TcpProxy, BoxError> {
        Ok(self
            .proxy
            .get_or_try_init(|| TcpProxy::start(shared_addr()))
            .await?)
    }

    /// A sink on a fresh topic of the shared broker through a proxy of its own, read back
    /// directly, and a slot for a broker the fault starts; the teardown stops both.
    async fn proxied(&self, tag: &str) -> Result<(Setup<MqttSink>, Arc<TcpProxy>, Slot), BoxError> {
        let proxy = Arc::new(TcpProxy::start(shared_addr()).await?);
        let topic = unique_name(&format!("tk-warm-{tag}"));
        let sink = sink(&proxy.addr().to_string(), &topic)?;
        let sub = Subscriber::start(&shared_addr(), &topic).await?;
        let slot = Slot::default();
        let (keep, started) = (Arc::clone(&proxy), Arc::clone(&slot));
        let setup = Setup::new(sink)
            .with_probe(SubscriberProbe(sub.handle()))
            .with_teardown(move || async move {
                keep.stop().await;
                let broker = started.lock().unwrap().take();
                if let Some(mut broker) = broker {
                    broker.stop().await;
                }
                sub.leave().await;
                Ok(())
            });
        Ok((setup, proxy, slot))
    }

    /// A private broker whose only user is not the sinks' login.
    async fn locked_broker() -> Broker {
        Broker::start(BrokerConfig {
            users: &[("someone-else", "another-password-than-planted")],
            ..BrokerConfig::default()
        })
        .await
    }

    /// A private broker announcing a Maximum Packet Size of 8 KiB.
    async fn small_broker() -> Broker {
        Broker::start(BrokerConfig {
            lines: &["max_packet_size 8192"],
            ..BrokerConfig::default()
        })
        .await
    }
}

#[async_trait]
impl Harness for MqttHarness {
    type Sink = MqttSink;

    fn reports_landing(&self) -> bool {
        true
    }

    async fn destination(&self, case: Case) -> Result<Setup<MqttSink>, BoxError> {
        let topic = unique_name(&format!("tk-{}", case.name()));
        let via = self.proxy().await?.addr().to_string();
        setup(&shared_addr(), &topic, sink(&via, &topic)?).await
    }

    async fn fault(&self, fault: Fault) -> Result<Option<Setup<MqttSink>>, BoxError> {
        let setup = match fault {
            // A topic nobody subscribes to: PUBACK 0x10, the hook would reach nobody.
            Fault::MissingDestination => {
                Setup::new(sink(&shared_addr(), &unique_name("tk-nobody"))?)
            }
            // A broker that knows another user only: CONNACK 0x87.
            Fault::RefusedCredential => {
                let broker = Self::locked_broker().await;
                let s = sink(&broker.addr(), "tk-refused")?;
                self.keep.lock().unwrap().1.push(broker);
                Setup::new(s)
            }
            Fault::Unreachable => Setup::new(sink(
                &format!("127.0.0.1:{}", free_port()),
                "tk-unreachable",
            )?),
            // Mosquitto sends no Quota exceeded on demand: a scripted broker does.
            Fault::Throttled => {
                let s = Scripted::start(Script::always(Reply::Ack(PubAckReason::QuotaExceeded)))
                    .await?;
                let sink = sink(&s.addr.to_string(), "tk-quota")?;
                self.keep.lock().unwrap().0.push(s);
                Setup::new(sink)
            }
            // The CONNACK's Maximum Packet Size, checked before sending.
            Fault::Oversized => {
                let broker = Self::small_broker().await;
                let topic = unique_name("tk-oversized");
                let s = setup(&broker.addr(), &topic, sink(&broker.addr(), &topic)?)
                    .await?
                    .with_body_size(OVERSIZED_BODY);
                self.keep.lock().unwrap().1.push(broker);
                s
            }
            // A broker that takes the PUBLISH and never answers it.
            Fault::Unacknowledged => {
                let s = Scripted::start(Script::always(Reply::Silent)).await?;
                let sink = sink(&s.addr.to_string(), "tk-silent")?;
                self.keep.lock().unwrap().0.push(s);
                Setup::new(sink)
            }
        };
        Ok(Some(setup))
    }

    async fn warm_fault(&self, fault: Fault) -> Result<Option<WarmFault<MqttSink>>, BoxError> {
        let warm = match fault {
            // The topic's one subscriber leaves: the next publish reaches nobody (0x10).
            Fault::MissingDestination => {
                let topic = unique_name("tk-warm-nobody");
                let sub = Subscriber::start(&shared_addr(), &topic).await?;
                let setup = Setup::new(sink(&shared_addr(), &topic)?);
                WarmFault::new(setup, move || async move {
                    sub.leave().await;
                    wait_without_subscribers(&shared_addr(), &topic).await
                })
            }
            // The proxy comes back as a broker that knows another user only: the sink's
            // next login is refused.
            Fault::RefusedCredential => {
                let (setup, proxy, slot) = self.proxied("refused").await?;
                WarmFault::new(setup, move || async move {
                    let broker = Self::locked_broker().await;
                    proxy.redirect(broker.addr()).await;
                    *slot.lock().unwrap() = Some(broker);
                    Ok(())
                })
            }
            Fault::Unreachable => {
                let (setup, proxy, _) = self.proxied("gone").await?;
                WarmFault::new(setup, move || async move {
                    proxy.stop().await;
                    Ok(())
                })
            }
            // A broker that starts answering Quota exceeded.
            Fault::Throttled => {
                let s = Arc::new(
                    Scripted::start(Script {
                        connack: rumqttc::v5::mqttbytes::v5::ConnectReturnCode::Success,
                        before: Reply::Ack(PubAckReason::Success),
                        after: Reply::Ack(PubAckReason::QuotaExceeded),
                    })
                    .await?,
                );
                let setup = Setup::new(sink(&s.addr.to_string(), "tk-warm-quota")?);
                WarmFault::new(setup, move || async move {
                    s.switch();
                    Ok(())
                })
            }
            // The broker's announced limit, as cold: small hooks pass, the big one not.
            Fault::Oversized => {
                let broker = Self::small_broker().await;
                let topic = unique_name("tk-warm-oversized");
                let s = setup(&broker.addr(), &topic, sink(&broker.addr(), &topic)?)
                    .await?
                    .with_body_size(OVERSIZED_BODY);
                self.keep.lock().unwrap().1.push(broker);
                WarmFault::standing(s)
            }
            // Silent on the connection the sink holds: the PUBLISH is taken, never acked.
            Fault::Unacknowledged => {
                let (setup, proxy, _) = self.proxied("silent").await?;
                ankusa_sink_testkit::support::silent_after_warm_up(setup, proxy)
            }
        };
        Ok(Some(warm))
    }

    /// `check()` connects and logs in: a refused login is config. Whether anyone
    /// subscribes cannot be known without publishing.
    fn check_detects(&self, fault: Fault) -> bool {
        matches!(fault, Fault::RefusedCredential)
    }

    fn secrets(&self) -> Vec<String> {
        vec![PLANTED.to_owned()]
    }

    fn can_restart(&self) -> bool {
        true
    }

    async fn stop(&self) -> Result<(), BoxError> {
        self.proxy().await?.stop().await;
        Ok(())
    }

    async fn start(&self) -> Result<(), BoxError> {
        Ok(self.proxy().await?.restart().await?)
    }
}

ankusa_sink_testkit::conformance_suite!(broker "Mosquitto", crate::common::shared_addr(); MqttHarness::new());

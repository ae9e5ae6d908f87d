//! The testkit's conformance suite against the real emulator (and the scripted server for
//! the refused credential and the throttle).

use crate::common::{Admin, PrivateEmulator, TestTopic, config_at, envelope, free_port, unique};
use crate::scripted::{self, Script};
use ankusa_sink_core::{BoxError, async_trait};
use ankusa_sink_pubsub::PubSubSink;
use ankusa_sink_testkit::support::TcpProxy;
use ankusa_sink_testkit::{
    Case, Expect, Fault, Harness, MixedBatch, Probe, Received, Setup, WarmFault,
};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::OnceCell;
use tonic::Code;

/// Refused before publishing: data + attributes + key over this.
const SMALL_MAX_MESSAGE: usize = 4_096;
/// A body whose Message v1 is over [`SMALL_MAX_MESSAGE`] but under the inline threshold.
const OVERSIZED_BODY: usize = 8_192;

/// Reads a subscription back through the emulator's REST pull (and acks what it read).
struct PullProbe {
    admin: Admin,
    sub: String,
    seen: tokio::sync::Mutex<Vec<Received>>,
}

#[async_trait]
impl Probe for PullProbe {
    /// Pulls until nothing is waiting, for at most 2 s: the emulator hands out at most a
    /// few hundred messages per pull, and `volume` leaves 5,000.
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        let mut seen = self.seen.lock().await;
        let until = std::time::Instant::now() + Duration::from_secs(2);
        while std::time::Instant::now() < until {
            let pulled = self.admin.pull_once(&self.sub).await?;
            if pulled.is_empty() {
                break;
            }
            for m in pulled {
                seen.push(Received::from_message_bytes(&m.data)?);
            }
        }
        Ok(seen.clone())
    }
}

/// Builds sinks for fresh topics on the shared emulator, or (for the recovery case) on a
/// private emulator it can stop and start.
pub(crate) struct PubSubHarness {
    restartable: bool,
    private: OnceCell<tokio::sync::Mutex<PrivateEmulator>>,
    /// Topics not torn down yet, made again after a private emulator's restart.
    created: Arc<Mutex<Vec<TestTopic>>>,
}

impl PubSubHarness {
    /// For `case`: `recovery` on a private emulator this harness may stop and restart,
    /// every other case on the shared emulator (scripts/services/pubsub.sh).
    pub(crate) fn for_case(case: Case) -> Self {
        PubSubHarness {
            restartable: case == Case::Recovery,
            private: OnceCell::new(),
            created: Arc::default(),
        }
    }

    async fn admin(&self) -> Result<Admin, BoxError> {
        if !self.restartable {
            return Ok(Admin::shared());
        }
        let emu = self
            .private
            .get_or_try_init(|| async {
                PrivateEmulator::start().await.map(tokio::sync::Mutex::new)
            })
            .await?;
        Ok(emu.lock().await.admin())
    }

    async fn topic(&self) -> Result<TestTopic, BoxError> {
        let t = self.admin().await?.topic_with_subscription().await?;
        self.created.lock().unwrap().push(t.clone());
        Ok(t)
    }

    /// `sink` with a probe on the topic's subscription and a teardown deleting both.
    fn setup(&self, t: &TestTopic, sink: PubSubSink) -> Setup<PubSubSink> {
        let (created, t) = (Arc::clone(&self.created), t.clone());
        Setup::new(sink)
            .with_probe(PullProbe {
                admin: t.admin.clone(),
                sub: t.sub.clone(),
                seen: tokio::sync::Mutex::new(Vec::new()),
            })
            .with_teardown(move || async move {
                created.lock().unwrap().retain(|c| c.topic != t.topic);
                t.delete().await;
                Ok(())
            })
    }

    /// A fresh topic and subscription, the sink (with `timeout`) reaching the emulator
    /// through a proxy of its own, which the teardown stops.
    async fn proxied(
        &self,
        timeout: Duration,
    ) -> Result<(Setup<PubSubSink>, Arc<TcpProxy>, TestTopic), BoxError> {
        let t = self.topic().await?;
        let upstream = t.admin.endpoint().trim_start_matches("http://").to_owned();
        let proxy = Arc::new(TcpProxy::start(upstream).await?);
        let via = format!("http://{}", proxy.addr());
        let sink = PubSubSink::new(
            config_at(t.topic.clone(), via)
                .with_timeout(timeout)
                .unwrap(),
        )
        .await?;
        let (created, topic, keep) = (Arc::clone(&self.created), t.clone(), Arc::clone(&proxy));
        let setup = Setup::new(sink)
            .with_probe(PullProbe {
                admin: t.admin.clone(),
                sub: t.sub.clone(),
                seen: tokio::sync::Mutex::new(Vec::new()),
            })
            .with_teardown(move || async move {
                keep.stop().await;
                created.lock().unwrap().retain(|c| c.topic != topic.topic);
                topic.delete().await;
                Ok(())
            });
        Ok((setup, proxy, t))
    }

    async fn small_limit_sink(t: &TestTopic) -> Result<PubSubSink, BoxError> {
        Ok(PubSubSink::new(
            t.config()
                .with_max_message_bytes(NonZeroUsize::new(SMALL_MAX_MESSAGE).unwrap())
                .unwrap(),
        )
        .await?)
    }
}

#[async_trait]
impl Harness for PubSubHarness {
    fn reports_landing(&self) -> bool {
        true
    }

    type Sink = PubSubSink;

    /// Why `durability` does not restart the destination.
    fn restart_destination_skip_reason(&self) -> Option<String> {
        Some(
            "the Pub/Sub emulator keeps everything in memory: a restart loses every topic and message by design"
                .into(),
        )
    }

    async fn destination(&self, _case: Case) -> Result<Setup<PubSubSink>, BoxError> {
        let t = self.topic().await?;
        let sink =
            PubSubSink::new(t.config().with_timeout(Duration::from_secs(5)).unwrap()).await?;
        Ok(self.setup(&t, sink))
    }

    async fn fault(&self, fault: Fault) -> Result<Option<Setup<PubSubSink>>, BoxError> {
        Ok(Some(match fault {
            Fault::MissingDestination => {
                let admin = self.admin().await?;
                Setup::new(
                    PubSubSink::new(config_at(unique("never-created"), admin.endpoint())).await?,
                )
            }
            Fault::RefusedCredential => {
                let server = scripted::start(Script::Fail(Code::PermissionDenied, None)).await;
                Setup::new(server.sink().await)
            }
            Fault::Throttled => {
                let server = scripted::start(Script::Fail(
                    Code::ResourceExhausted,
                    Some(Duration::from_secs(3)),
                ))
                .await;
                Setup::new(server.sink().await)
            }
            Fault::Unreachable => Setup::new(
                PubSubSink::new(
                    config_at("unreachable", format!("http://127.0.0.1:{}", free_port()))
                        .with_timeout(Duration::from_secs(5))
                        .unwrap(),
                )
                .await?,
            ),
            Fault::Oversized => {
                let t = self.topic().await?;
                let sink = Self::small_limit_sink(&t).await?;
                // Body size from capabilities(): one byte over max_message_bytes.
                self.setup(&t, sink)
            }
            Fault::Unacknowledged => {
                // The scripted server takes the Publish RPC and never answers it.
                let server = scripted::start(Script::Hang).await;
                let sink = PubSubSink::new(
                    config_at("scripted-topic", server.endpoint())
                        .with_timeout(Duration::from_secs(2))
                        .unwrap(),
                )
                .await?;
                Setup::new(sink)
            }
        }))
    }

    async fn warm_fault(&self, fault: Fault) -> Result<Option<WarmFault<PubSubSink>>, BoxError> {
        if fault == Fault::Oversized {
            // The sink's own limit, as cold: the warm-up's small hooks pass.
            let t = self.topic().await?;
            let sink = Self::small_limit_sink(&t).await?;
            return Ok(Some(WarmFault::standing(self.setup(&t, sink))));
        }
        let timeout = Duration::from_secs(if fault == Fault::Unacknowledged { 2 } else { 5 });
        let (setup, proxy, t) = self.proxied(timeout).await?;
        Ok(Some(match fault {
            // The topic is deleted under the sink.
            Fault::MissingDestination => WarmFault::new(setup, move || async move {
                t.delete().await;
                Ok(())
            }),
            // The proxy comes back as the scripted server refusing the caller.
            Fault::RefusedCredential => {
                let server = scripted::start(Script::Fail(Code::PermissionDenied, None)).await;
                WarmFault::new(setup, move || async move {
                    proxy.redirect(server.addr.to_string()).await;
                    Ok(())
                })
            }
            Fault::Unreachable => WarmFault::new(setup, move || async move {
                proxy.stop().await;
                Ok(())
            }),
            // The proxy comes back as the scripted server out of quota, with a retry delay.
            Fault::Throttled => {
                let server = scripted::start(Script::Fail(
                    Code::ResourceExhausted,
                    Some(Duration::from_secs(3)),
                ))
                .await;
                WarmFault::new(setup, move || async move {
                    proxy.redirect(server.addr.to_string()).await;
                    Ok(())
                })
            }
            // Silent on the connection the sink holds (2 s timeout).
            Fault::Unacknowledged => {
                ankusa_sink_testkit::support::silent_after_warm_up(setup, proxy)
            }
            Fault::Oversized => unreachable!("returned above"),
        }))
    }

    /// `check()` gets the topic (and its subscriptions) from the service.
    fn check_detects(&self, fault: Fault) -> bool {
        matches!(fault, Fault::MissingDestination | Fault::RefusedCredential)
    }

    /// Small hooks are published; hooks over `max_message_bytes` are refused before the
    /// batch is sent, each with its own result.
    async fn mixed_batch(&self) -> Result<Option<MixedBatch<PubSubSink>>, BoxError> {
        let t = self.topic().await?;
        let sink = Self::small_limit_sink(&t).await?;
        // Every fourth hook is over the limit.
        let envelopes = (0..24)
            .map(|i| {
                let expect = if i % 4 == 3 {
                    Expect::Permanent
                } else {
                    Expect::Ok
                };
                let body = match expect {
                    Expect::Permanent => vec![b'x'; OVERSIZED_BODY],
                    Expect::Ok => format!("{{\"i\":{i}}}").into_bytes(),
                };
                (envelope(&unique("mixed"), &body), expect)
            })
            .collect();
        Ok(Some(MixedBatch {
            setup: self.setup(&t, sink),
            envelopes,
        }))
    }

    /// The config holds no secret (credentials come from Application Default Credentials,
    /// and an endpoint with userinfo is refused): `contract` is a printed skip.
    fn takes_credentials(&self) -> bool {
        false
    }

    fn can_restart(&self) -> bool {
        self.restartable
    }

    async fn stop(&self) -> Result<(), BoxError> {
        let emu = self
            .private
            .get()
            .ok_or("no private emulator was started")?;
        emu.lock().await.stop().await
    }

    /// Restart on the same port; the emulator keeps no state, so every topic and
    /// subscription this harness made is made again.
    async fn start(&self) -> Result<(), BoxError> {
        let emu = self
            .private
            .get()
            .ok_or("no private emulator was started")?;
        let mut emu = emu.lock().await;
        emu.restart().await?;
        let admin = emu.admin();
        let created = self.created.lock().unwrap().clone();
        for t in created {
            admin.create_topic(&t.topic).await?;
            admin.create_subscription(&t.topic, &t.sub).await?;
        }
        Ok(())
    }
}

ankusa_sink_testkit::conformance_suite!(broker "Pub/Sub emulator", crate::common::emulator_host(); |case| PubSubHarness::for_case(case));

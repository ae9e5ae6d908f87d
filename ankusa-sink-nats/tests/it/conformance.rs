//! The shared conformance suite (`ankusa-sink-testkit`) against real NATS servers: the
//! shared one on 127.0.0.1:4222 for most cases, a private `nats-server` for `recovery`
//! (stopped and restarted), for `durability` (killed and started again on its own store:
//! `restart_destination`) and for the refused credential (a server with a password).
//! Warm faults: the stream deleted, a stream filled to its limit, and a proxy of each
//! setup's own that stops, goes silent, or comes back as a server wanting another token.

use crate::common::*;
use ankusa_sink_nats::NatsSink;
use ankusa_sink_testkit::ankusa_sink_core::async_trait;
use ankusa_sink_testkit::ankusa_sink_core::{BoxError, Secret};
use ankusa_sink_testkit::support::TcpProxy;
use ankusa_sink_testkit::{Case, Fault, Harness, Setup, WarmFault};
use futures_util::StreamExt as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

struct NatsHarness {
    /// A private server for `recovery` and `durability`, which restart it; every other
    /// case uses the shared one.
    private: Option<Arc<PrivateServer>>,
}

impl NatsHarness {
    fn new(case: Case) -> Self {
        let restarts = matches!(case, Case::Recovery | Case::Durability);
        NatsHarness {
            private: restarts.then(|| Arc::new(PrivateServer::start(""))),
        }
    }

    fn url(&self) -> String {
        match &self.private {
            Some(s) => s.url(),
            None => SHARED_URL.to_owned(),
        }
    }

    /// A fresh stream with `limits`, a sink on its subject, a probe and a teardown.
    async fn stream_setup(&self, tag: &str, limits: Limits) -> Result<Setup<NatsSink>, BoxError> {
        Ok(self.stream_via(tag, limits, None).await?.0)
    }

    /// [`stream_setup`](Self::stream_setup), the sink reaching the server through `proxy`
    /// when given (which the teardown stops, with any server a fault started); and the
    /// stream's name and subject. The teardown deletes the stream when it is still there.
    async fn stream_via(
        &self,
        tag: &str,
        limits: Limits,
        proxy: Option<Arc<TcpProxy>>,
    ) -> Result<(Setup<NatsSink>, String, String, Slot), BoxError> {
        let url = self.url();
        let (stream, subject) = names(tag);
        create_stream(&url, &stream, &subject, limits).await;
        let probe = StreamProbe {
            client: raw(&url).await,
            stream: stream.clone(),
        };
        let sink_url = match &proxy {
            Some(p) => format!("nats://{}", p.addr()),
            None => url.clone(),
        };
        let slot = Slot::default();
        let (started, gone) = (Arc::clone(&slot), stream.clone());
        let setup = Setup::new(sink(&sink_url, &subject))
            .with_probe(probe)
            .with_teardown(move || async move {
                if let Some(p) = proxy {
                    p.stop().await;
                }
                let server = started.lock().unwrap().take();
                if let Some(server) = server {
                    tokio::task::spawn_blocking(move || drop(server)).await?;
                }
                let js = async_nats::jetstream::new(raw(&url).await);
                // A warm missing destination deleted it already.
                if js.get_stream(&gone).await.is_ok() {
                    js.delete_stream(&gone).await?;
                }
                Ok(())
            });
        Ok((setup, stream, subject, slot))
    }

    /// A fresh stream reached through a proxy of its own.
    async fn proxied(&self, tag: &str) -> Result<(Setup<NatsSink>, Arc<TcpProxy>, Slot), BoxError> {
        let upstream = self.url().trim_start_matches("nats://").to_owned();
        let proxy = Arc::new(TcpProxy::start(upstream).await?);
        let (setup, _, _, slot) = self
            .stream_via(tag, Limits::default(), Some(Arc::clone(&proxy)))
            .await?;
        Ok((setup, proxy, slot))
    }
}

/// A private server a warm fault started, stopped by the setup's teardown.
type Slot = Arc<Mutex<Option<PrivateServer>>>;

#[async_trait]
impl Harness for NatsHarness {
    fn reports_landing(&self) -> bool {
        true
    }

    type Sink = NatsSink;

    async fn destination(&self, case: Case) -> Result<Setup<NatsSink>, BoxError> {
        self.stream_setup(case.name(), Limits::default()).await
    }

    async fn fault(&self, fault: Fault) -> Result<Option<Setup<NatsSink>>, BoxError> {
        Ok(Some(match fault {
            // No stream is bound to the subject: no responders.
            Fault::MissingDestination => {
                let (_, subject) = names("missing");
                Setup::new(sink(SHARED_URL, &subject))
            }
            // A private server that wants a user and password; the sink has a wrong one.
            Fault::RefusedCredential => {
                let server = tokio::task::spawn_blocking(|| {
                    PrivateServer::start(
                        "authorization { user: ankusa, password: right-password-1 }",
                    )
                })
                .await?;
                let (_, subject) = names("refused");
                let config = sink_config(&server.url(), &subject);
                let config = ankusa_sink_nats::NatsConfig::new(server.url(), &subject)?
                    .with_user_password("ankusa", Secret::new(PLANTED_TOKEN))?
                    .with_timeout(config.timeout())
                    .with_connect_timeout(config.connect_timeout());
                Setup::new(NatsSink::new(config)).with_teardown(move || async move {
                    drop(server);
                    Ok(())
                })
            }
            // Nothing listens on the port.
            Fault::Unreachable => {
                let url = format!("nats://127.0.0.1:{}", free_port());
                Setup::new(sink(&url, "ankusa.unreachable"))
            }
            // A stream of one message with discard-new, already full.
            Fault::Throttled => {
                let setup = self
                    .stream_setup(
                        "full",
                        Limits {
                            max_messages_discard_new: Some(1),
                            ..Limits::default()
                        },
                    )
                    .await?;
                let js = async_nats::jetstream::new(raw(SHARED_URL).await);
                js.publish(setup.sink.config().subject().to_owned(), "filler".into())
                    .await?
                    .await?;
                setup
            }
            // A stream that stores at most 1 KiB per message; the suite sends 900 bytes of
            // body, over 1 KiB as Message v1.
            Fault::Oversized => self
                .stream_setup(
                    "oversized",
                    Limits {
                        max_msg_size: Some(1024),
                        ..Limits::default()
                    },
                )
                .await?
                .with_body_size(900),
            // A plain subscriber takes the message and never answers: no ack ever comes.
            Fault::Unacknowledged => {
                let (_, subject) = names("silent");
                let client = raw(SHARED_URL).await;
                let mut sub = client.subscribe(subject.clone()).await?;
                client.flush().await?;
                let swallow = tokio::spawn(async move { while sub.next().await.is_some() {} });
                let sink = NatsSink::new(
                    sink_config(SHARED_URL, &subject).with_timeout(Duration::from_secs(1)),
                );
                Setup::new(sink).with_teardown(move || async move {
                    swallow.abort();
                    drop(client);
                    Ok(())
                })
            }
        }))
    }

    async fn warm_fault(&self, fault: Fault) -> Result<Option<WarmFault<NatsSink>>, BoxError> {
        Ok(Some(match fault {
            // The stream is deleted: no responders on its subject any more.
            Fault::MissingDestination => {
                let url = self.url();
                let (setup, stream, _, _) = self
                    .stream_via("warm_missing", Limits::default(), None)
                    .await?;
                WarmFault::new(
                    setup,
                    move || async move { delete_stream(&url, &stream).await },
                )
            }
            // The proxy comes back as a server that wants another token than the planted one.
            Fault::RefusedCredential => {
                let (setup, proxy, slot) = self.proxied("warm_refused").await?;
                WarmFault::new(setup, move || async move {
                    let server =
                        private("authorization { token: \"another-token-than-planted\" }").await;
                    proxy.redirect(format!("127.0.0.1:{}", server.port)).await;
                    *slot.lock().unwrap() = Some(server);
                    Ok(())
                })
            }
            Fault::Unreachable => {
                let (setup, proxy, _) = self.proxied("warm_gone").await?;
                WarmFault::new(setup, move || async move {
                    proxy.stop().await;
                    Ok(())
                })
            }
            // A stream of at most 50 messages, discard-new, filled up after the warm-up.
            Fault::Throttled => {
                let url = self.url();
                let limits = Limits {
                    max_messages_discard_new: Some(50),
                    ..Limits::default()
                };
                let (setup, _, subject, _) = self.stream_via("warm_full", limits, None).await?;
                WarmFault::new(setup, move || async move {
                    let js = async_nats::jetstream::new(raw(&url).await);
                    for _ in 0..50 {
                        let Ok(ack) = js.publish(subject.clone(), "filler".into()).await else {
                            break;
                        };
                        if ack.await.is_err() {
                            return Ok(());
                        }
                    }
                    Err("the stream of 50 messages took 50 more".into())
                })
            }
            // A stream that stores at most 1 KiB per message: the warm-up's small hooks fit.
            Fault::Oversized => {
                let limits = Limits {
                    max_msg_size: Some(1024),
                    ..Limits::default()
                };
                let (setup, _, _, _) = self.stream_via("warm_oversized", limits, None).await?;
                WarmFault::standing(setup.with_body_size(900))
            }
            // Silent on the connection the sink holds: the publish is taken, no ack comes.
            Fault::Unacknowledged => {
                let (setup, proxy, _) = self.proxied("warm_silent").await?;
                ankusa_sink_testkit::support::silent_after_warm_up(setup, proxy)
            }
        }))
    }

    /// `check()` asks JetStream for the stream bound to the subject, after logging in.
    fn check_detects(&self, fault: Fault) -> bool {
        matches!(fault, Fault::MissingDestination | Fault::RefusedCredential)
    }

    fn secrets(&self) -> Vec<String> {
        vec![PLANTED_TOKEN.to_owned()]
    }

    fn can_restart(&self) -> bool {
        self.private.is_some()
    }

    async fn stop(&self) -> Result<(), BoxError> {
        let s = self.private.clone().ok_or("no private server")?;
        tokio::task::spawn_blocking(move || s.stop()).await?;
        Ok(())
    }

    async fn start(&self) -> Result<(), BoxError> {
        let s = self.private.clone().ok_or("no private server")?;
        tokio::task::spawn_blocking(move || s.restart()).await?;
        Ok(())
    }

    fn can_restart_destination(&self) -> bool {
        self.private.is_some()
    }

    /// The private server killed (`SIGKILL`) and started again on the same port and
    /// JetStream store: the stream is file storage, the sink's probe reconnects.
    async fn restart_destination(&self) -> Result<(), BoxError> {
        let s = self.private.clone().ok_or("no private server")?;
        tokio::task::spawn_blocking(move || s.restart()).await?;
        Ok(())
    }

    fn deadline(&self) -> Duration {
        Duration::from_secs(20)
    }
}

ankusa_sink_testkit::conformance_suite!(broker "NATS", "127.0.0.1:4222"; |case| NatsHarness::new(case));

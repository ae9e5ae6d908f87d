//! The shared conformance suite (`ankusa-sink-testkit`) against real NATS servers: the
//! shared one on 127.0.0.1:4222 for most cases, a private `nats-server` for `recovery`
//! (stopped and restarted) and for the refused credential (a server with a password).

use crate::common::*;
use ankusa_sink_nats::NatsSink;
use ankusa_sink_testkit::ankusa_sink_core::async_trait;
use ankusa_sink_testkit::ankusa_sink_core::{BoxError, Secret};
use ankusa_sink_testkit::{Case, Fault, Harness, Setup};
use futures_util::StreamExt as _;
use std::sync::Arc;
use std::time::Duration;

struct NatsHarness {
    /// A private server for `recovery`; every other case uses the shared one.
    private: Option<Arc<PrivateServer>>,
}

impl NatsHarness {
    fn new(case: Case) -> Self {
        NatsHarness {
            private: (case == Case::Recovery).then(|| Arc::new(PrivateServer::start(""))),
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
        let url = self.url();
        let (stream, subject) = names(tag);
        create_stream(&url, &stream, &subject, limits).await;
        let probe = StreamProbe {
            client: raw(&url).await,
            stream: stream.clone(),
        };
        Ok(Setup::new(sink(&url, &subject))
            .with_probe(probe)
            .with_teardown(move || async move { delete_stream(&url, &stream).await }))
    }
}

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

    fn deadline(&self) -> Duration {
        Duration::from_secs(20)
    }
}

ankusa_sink_testkit::conformance_suite!(|case| NatsHarness::new(case));

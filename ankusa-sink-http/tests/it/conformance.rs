//! The testkit's conformance suite against real capture servers on 127.0.0.1.

use crate::server::{Captured, Reply, Script, Server, always};
use ankusa_sink_core::{BoxError, Bytes, async_trait};
use ankusa_sink_http::HttpSink;
use ankusa_sink_testkit::{Case, Fault, Harness, Probe, Received, Setup, WarmFault};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const PASSWORD: &str = "pl4nted-pa55word";
const QUERY_TOKEN: &str = "pl4nted-query-token";
const HEADER_TOKEN: &str = "pl4nted-header-token";
/// A Slack-style webhook token in the URL path (`/services/T0/B0/<token>`).
const PATH_TOKEN: &str = "pl4nted-path-token";
const WHSEC: &str = "whsec_cGw0bnRlZC1zaWduaW5nLWtleS1vZi10aGUtaGFybmVzcw==";
const WHSEC_KEY: &str = "pl4nted-signing-key-of-the-harness";

/// One endpoint: its live server (if running) and what earlier incarnations captured.
struct Dest {
    addr: SocketAddr,
    live: Option<Server>,
    archived: Vec<Captured>,
}

type Shared = Arc<Mutex<Dest>>;

/// Reads back the hooks an endpoint accepted (answered 2xx), across restarts.
struct CaptureProbe(Shared);

#[async_trait]
impl Probe for CaptureProbe {
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        let dest = self.0.lock().unwrap();
        let live = dest.live.as_ref().map(Server::captured).unwrap_or_default();
        Ok(dest
            .archived
            .iter()
            .chain(&live)
            .filter(|c| c.status.is_some_and(|s| (200..300).contains(&s)))
            .map(received)
            .collect())
    }
}

fn received(c: &Captured) -> Received {
    let h = |n: &str| c.header(n).map(str::to_owned);
    Received {
        id: h("x-ankusa-id").unwrap_or_default(),
        source_id: h("x-ankusa-source"),
        tenant_id: Some(h("x-ankusa-tenant")),
        idempotency_key: h("x-ankusa-idempotency-key"),
        received_at: None,
        replay_id: Some(h("x-ankusa-replay-id")),
        body: Some(Bytes::from(c.body.clone())),
        ..Received::default()
    }
}

/// Every endpoint answers per `reply`; the sink carries planted secrets in its URL
/// userinfo, path and query, an operator header and a signing secret.
#[derive(Default)]
pub(crate) struct HttpHarness {
    dests: Mutex<Vec<Shared>>,
}

impl HttpHarness {
    /// A capture server answering `reply`; the setup's teardown stops it.
    async fn endpoint(&self, reply: Reply) -> Result<Setup<HttpSink>, BoxError> {
        self.scripted(always(reply)).await
    }

    /// A capture server answering per `script`; the setup's teardown stops it.
    async fn scripted(&self, script: Script) -> Result<Setup<HttpSink>, BoxError> {
        let server = Server::start(script).await;
        let addr = server.addr();
        let dest = Arc::new(Mutex::new(Dest {
            addr,
            live: Some(server),
            archived: Vec::new(),
        }));
        self.dests.lock().unwrap().push(dest.clone());
        let sink = sink_for(addr)?;
        let live = dest.clone();
        Ok(Setup::new(sink)
            .with_probe(CaptureProbe(dest))
            .with_teardown(move || async move {
                let server = live.lock().unwrap().live.take();
                if let Some(server) = server {
                    server.stop().await;
                }
                Ok(())
            }))
    }

    fn last(&self) -> Result<Shared, BoxError> {
        self.dests
            .lock()
            .unwrap()
            .last()
            .cloned()
            .ok_or_else(|| "no destination yet".into())
    }
}

fn sink_for(addr: SocketAddr) -> Result<HttpSink, BoxError> {
    Ok(builder_for(addr).build()?)
}

fn builder_for(addr: SocketAddr) -> ankusa_sink_http::HttpSinkBuilder {
    HttpSink::builder(format!(
        "http://hook:{PASSWORD}@{addr}/services/T0/B0/{PATH_TOKEN}?token={QUERY_TOKEN}"
    ))
    .header("authorization", format!("Bearer {HEADER_TOKEN}"))
    .secret(WHSEC)
}

#[async_trait]
impl Harness for HttpHarness {
    fn reports_landing(&self) -> bool {
        true
    }

    type Sink = HttpSink;

    /// Why `durability` does not restart the destination.
    fn restart_destination_skip_reason(&self) -> Option<String> {
        Some(
            "the destination is the test's own in-process capture server: what it took is the probe's memory, with no store behind it to restart"
                .into(),
        )
    }

    async fn destination(&self, _case: Case) -> Result<Setup<HttpSink>, BoxError> {
        self.endpoint(Reply::status(200)).await
    }

    async fn fault(&self, fault: Fault) -> Result<Option<Setup<HttpSink>>, BoxError> {
        Ok(Some(match fault {
            Fault::MissingDestination => self.endpoint(Reply::status(404)).await?,
            Fault::RefusedCredential => self.endpoint(Reply::status(401)).await?,
            Fault::Throttled => self.endpoint(Reply::status(429)).await?,
            Fault::Oversized => self
                .endpoint(Reply::status(413))
                .await?
                .with_body_size(1 << 20),
            Fault::Unreachable => {
                let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
                let addr = listener.local_addr()?;
                drop(listener);
                Setup::new(sink_for(addr)?)
            }
            Fault::Unacknowledged => {
                // The server reads the whole request and never answers; the sink's own
                // timeout (2 s here) must end the delivery, never an Ok.
                let never = Reply::Slow(Duration::from_secs(3600), Box::new(Reply::status(200)));
                let mut setup = self.endpoint(never).await?;
                let addr = self.last()?.lock().unwrap().addr;
                let sink = builder_for(addr).timeout(Duration::from_secs(2)).build()?;
                // No probe: the capture records the reply the server never sends.
                setup.probe = None;
                setup.map_sink(|_| sink)
            }
        }))
    }

    /// An endpoint that answers 200 until provoked, then answers the fault's status (404,
    /// 401, 429, 413), never answers (the sink's 2 s timeout; the keep-alive connection it
    /// delivered on stays open), or is stopped (unreachable).
    async fn warm_fault(&self, fault: Fault) -> Result<Option<WarmFault<HttpSink>>, BoxError> {
        let reply = Arc::new(Mutex::new(Reply::status(200)));
        let current = Arc::clone(&reply);
        let script: Script = Arc::new(move |_| current.lock().unwrap().clone());
        let mut setup = self.scripted(script).await?;
        let dest = self.last()?;
        let then = match fault {
            Fault::MissingDestination => Reply::status(404),
            Fault::RefusedCredential => Reply::status(401),
            Fault::Throttled => Reply::status(429),
            Fault::Oversized => {
                setup = setup.with_body_size(1 << 20);
                Reply::status(413)
            }
            Fault::Unacknowledged => {
                let addr = dest.lock().unwrap().addr;
                let sink = builder_for(addr).timeout(Duration::from_secs(2)).build()?;
                setup = setup.map_sink(|_| sink);
                Reply::Slow(Duration::from_secs(3600), Box::new(Reply::status(200)))
            }
            Fault::Unreachable => {
                return Ok(Some(WarmFault::new(setup, move || async move {
                    let server = dest.lock().unwrap().live.take();
                    if let Some(server) = server {
                        server.stop().await;
                    }
                    Ok(())
                })));
            }
        };
        Ok(Some(WarmFault::new(setup, move || async move {
            *reply.lock().unwrap() = then;
            Ok(())
        })))
    }

    fn secrets(&self) -> Vec<String> {
        [
            PASSWORD,
            QUERY_TOKEN,
            HEADER_TOKEN,
            PATH_TOKEN,
            WHSEC,
            WHSEC_KEY,
        ]
        .map(str::to_owned)
        .to_vec()
    }

    fn can_restart(&self) -> bool {
        true
    }

    async fn stop(&self) -> Result<(), BoxError> {
        let dest = self.last()?;
        let server = {
            let mut d = dest.lock().unwrap();
            let server = d.live.take().ok_or("already stopped")?;
            d.archived.extend(server.captured());
            server
        };
        server.stop().await;
        Ok(())
    }

    async fn start(&self) -> Result<(), BoxError> {
        let dest = self.last()?;
        let addr = dest.lock().unwrap().addr;
        let server = Server::start_on(addr, always(Reply::status(200)), None).await;
        dest.lock().unwrap().live = Some(server);
        Ok(())
    }
}

ankusa_sink_testkit::conformance_suite!(HttpHarness::default());

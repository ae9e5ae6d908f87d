//! The shared conformance suite (`ankusa-sink-testkit`) against a real RabbitMQ, and a
//! scripted loopback AMQP server for the publish that is never confirmed.
//!
//! One test per case from `conformance_suite!` with a per-case constructor: every case but
//! `recovery` holds the shared side of the broker lock; `recovery` stops the broker, so it
//! holds the exclusive side and is the only one whose harness can restart. `durability`
//! runs on a private RabbitMQ node of its own ([`PrivateNode`]), killed and started again
//! on its data (`restart_destination`).

use crate::common::*;
use crate::private_node::{PeekProbe, PrivateNode};
use ankusa_sink_amqp::{AmqpConfig, AmqpSink};
use ankusa_sink_core::{BoxError, async_trait};
use ankusa_sink_testkit::support::TcpProxy;
use ankusa_sink_testkit::{Case, Fault, Harness, Probe, Received, Setup, WarmFault};
use lapin::options::{
    BasicAckOptions, BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions,
    QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{RwLockReadGuard, RwLockWriteGuard};

/// The password planted in the refused-credential sink; must never be printed.
const PLANTED: &str = "planted-s3cr3t-Pw";

#[allow(dead_code)] // held for its Drop
enum Lock {
    Shared(RwLockReadGuard<'static, ()>),
    Exclusive(RwLockWriteGuard<'static, ()>),
}

struct AmqpHarness {
    _lock: Lock,
    /// The `durability` case's private node, once `destination` started it.
    node: Arc<Mutex<Option<Arc<PrivateNode>>>>,
}

impl AmqpHarness {
    /// The harness for `case`: exclusive broker lock for `recovery`, shared otherwise.
    fn new(case: Case) -> Self {
        let lock = if case == Case::Recovery {
            Lock::Exclusive(spin(try_exclusive))
        } else {
            Lock::Shared(spin(try_shared))
        };
        AmqpHarness {
            _lock: lock,
            node: Arc::default(),
        }
    }
}

impl AmqpHarness {
    /// A sink on a durable exchange and queue of a private node, read without taking
    /// ([`PeekProbe`]); the teardown stops the node and removes its data.
    async fn durable_setup(&self) -> Result<Setup<AmqpSink>, BoxError> {
        let node = Arc::new(tokio::task::spawn_blocking(PrivateNode::start).await?);
        let url = node.url();
        *self.node.lock().unwrap() = Some(Arc::clone(&node));
        let (exchange, queue) = (unique("durable"), unique("durable.q"));
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        };
        declare_bound(&url, &exchange, &queue, durable, FieldTable::default()).await?;
        let sink = AmqpSink::new(AmqpConfig::new(&url, &exchange)?);
        let slot = Arc::clone(&self.node);
        drop(node);
        Ok(Setup::new(sink)
            .with_probe(PeekProbe { url, queue })
            .with_teardown(move || async move {
                let node = slot.lock().unwrap().take();
                // Killing the node and removing its data blocks.
                tokio::task::spawn_blocking(move || drop(node)).await?;
                Ok(())
            }))
    }
}

/// Declare the topic exchange `x` (with `exchange`) and the durable queue `q` (with
/// `queue_args`) bound to it with `#`, on the broker at `url`.
async fn declare_bound(
    url: &str,
    x: &str,
    q: &str,
    exchange: ExchangeDeclareOptions,
    queue_args: FieldTable,
) -> Result<(), BoxError> {
    let conn = Connection::connect(url, ConnectionProperties::default()).await?;
    let ch = conn.create_channel().await?;
    ch.exchange_declare(
        x.into(),
        ExchangeKind::Topic,
        exchange,
        FieldTable::default(),
    )
    .await?;
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.queue_declare(q.into(), durable, queue_args).await?;
    ch.queue_bind(
        q.into(),
        x.into(),
        "#".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    let _ = conn.close(200, "OK".into()).await;
    Ok(())
}

/// The harness is built synchronously inside the suite's runtime: poll the lock.
fn spin<G>(mut try_lock: impl FnMut() -> Option<G>) -> G {
    loop {
        if let Some(g) = try_lock() {
            return g;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A durable topic exchange and a queue bound with `#` (both expire when unused), named
/// after `case`.
struct Declared {
    exchange: String,
    queue: String,
}

impl Declared {
    async fn new(tag: &str, queue_args: &[(&str, AMQPValue)]) -> Result<Self, BoxError> {
        let x = unique(tag);
        let q = unique(&format!("{tag}.q"));
        let exchange = ExchangeDeclareOptions {
            durable: true,
            auto_delete: true,
            ..Default::default()
        };
        let mut args = FieldTable::default();
        args.insert("x-expires".into(), AMQPValue::LongInt(120_000));
        for (k, v) in queue_args {
            args.insert((*k).into(), v.clone());
        }
        declare_bound(&url(), &x, &q, exchange, args).await?;
        Ok(Declared {
            exchange: x,
            queue: q,
        })
    }

    /// `sink` with a probe on the queue and a teardown deleting queue and exchange.
    fn setup(self, sink: AmqpSink) -> Setup<AmqpSink> {
        self.setup_then(sink, || async { Ok(()) })
    }

    /// [`setup`](Self::setup), the teardown doing `more` first (stop a proxy, delete a
    /// user or a queue).
    fn setup_then<F, Fut>(self, sink: AmqpSink, more: F) -> Setup<AmqpSink>
    where
        F: FnOnce() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        let probe = QueueProbe::new(self.queue.clone());
        Setup::new(sink)
            .with_probe(probe)
            .with_teardown(move || async move {
                more().await?;
                self.delete().await
            })
    }

    async fn delete(self) -> Result<(), BoxError> {
        let conn = Connection::connect(&url(), ConnectionProperties::default()).await?;
        let ch = conn.create_channel().await?;
        ch.queue_delete(self.queue.as_str().into(), QueueDeleteOptions::default())
            .await?;
        // auto_delete: unbinding its only queue may already have removed the exchange.
        let _ = ch
            .exchange_delete(
                self.exchange.as_str().into(),
                ExchangeDeleteOptions::default(),
            )
            .await;
        let _ = conn.close(200, "OK".into()).await;
        Ok(())
    }
}

/// Drains the queue with basic.get and remembers everything; reconnects after a broker
/// restart. Each message is acked (all at once, `multiple`) only after it is remembered:
/// a get cut short by a timeout or a restart leaves its message unacked, and the broker
/// gives it back when the connection goes, where a `no_ack` get would lose it.
struct QueueProbe {
    queue: String,
    conn: tokio::sync::Mutex<Option<(Connection, Channel)>>,
    got: Mutex<Vec<Received>>,
}

impl QueueProbe {
    fn new(queue: String) -> Self {
        QueueProbe {
            queue,
            conn: tokio::sync::Mutex::new(None),
            got: Mutex::new(Vec::new()),
        }
    }

    async fn drain(&self, slot: &mut Option<(Connection, Channel)>) -> Result<(), BoxError> {
        if slot.as_ref().is_none_or(|(_, ch)| !ch.status().connected()) {
            let conn = Connection::connect(&url(), ConnectionProperties::default()).await?;
            let ch = conn.create_channel().await?;
            *slot = Some((conn, ch));
        }
        let (_, ch) = slot.as_ref().expect("just connected");
        // What has arrived so far, in bounded time: the rest is read by the next call.
        let until = std::time::Instant::now() + Duration::from_secs(1);
        let mut last = None;
        while std::time::Instant::now() < until {
            let Some(msg) = ch
                .basic_get(
                    self.queue.as_str().into(),
                    BasicGetOptions { no_ack: false },
                )
                .await?
            else {
                break;
            };
            let r = Received::from_message_bytes(&msg.delivery.data)?;
            self.got.lock().unwrap().push(r);
            let tag = msg.delivery.delivery_tag;
            last = Some(tag);
            if tag % 100 == 0 {
                ch.basic_ack(tag, BasicAckOptions { multiple: true })
                    .await?;
                last = None;
            }
        }
        if let Some(tag) = last {
            ch.basic_ack(tag, BasicAckOptions { multiple: true })
                .await?;
        }
        Ok(())
    }
}

#[async_trait]
impl Probe for QueueProbe {
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        let mut slot = self.conn.lock().await;
        if let Err(e) = tokio::time::timeout(Duration::from_secs(5), self.drain(&mut slot))
            .await
            .unwrap_or_else(|_| Err("probe timed out".into()))
        {
            // Broker restarting: report what has arrived so far and reconnect next time.
            eprintln!("probe: {e}");
            *slot = None;
        }
        Ok(self.got.lock().unwrap().clone())
    }
}

/// A loopback AMQP 0-9-1 server speaking just enough of the protocol for the sink to log
/// in, open a confirm-mode channel and check its exchange; it then takes every publish
/// (method, header and body frames) and never confirms it.
struct NeverConfirms {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for NeverConfirms {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl NeverConfirms {
    async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((sock, _)) = listener.accept().await {
                conns.spawn(async move {
                    let _ = serve_never_confirming(sock).await;
                });
            }
        });
        Ok(NeverConfirms { addr, task })
    }
}

const FRAME_METHOD: u8 = 1;
const FRAME_END: u8 = 0xCE;

async fn send_method(
    s: &mut TcpStream,
    channel: u16,
    class: u16,
    method: u16,
    args: &[u8],
) -> std::io::Result<()> {
    let mut f = vec![FRAME_METHOD];
    f.extend_from_slice(&channel.to_be_bytes());
    f.extend_from_slice(&(4 + args.len() as u32).to_be_bytes());
    f.extend_from_slice(&class.to_be_bytes());
    f.extend_from_slice(&method.to_be_bytes());
    f.extend_from_slice(args);
    f.push(FRAME_END);
    s.write_all(&f).await
}

/// An AMQP field table of boolean `true` entries.
fn flags_table(names: &[&str]) -> Vec<u8> {
    let mut entries = Vec::new();
    for n in names {
        entries.push(n.len() as u8);
        entries.extend_from_slice(n.as_bytes());
        entries.extend_from_slice(b"t\x01");
    }
    let mut t = (entries.len() as u32).to_be_bytes().to_vec();
    t.extend(entries);
    t
}

fn long_str(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

/// connection.start: 0-9, server properties with the capabilities lapin looks for.
fn start_args() -> Vec<u8> {
    let caps = flags_table(&[
        "publisher_confirms",
        "basic.nack",
        "connection.blocked",
        "consumer_cancel_notify",
        "exchange_exchange_bindings",
        "authentication_failure_close",
    ]);
    let mut props = Vec::new();
    props.push(b"capabilities".len() as u8);
    props.extend_from_slice(b"capabilities");
    props.push(b'F');
    props.extend(caps);
    let mut args = vec![0, 9];
    args.extend_from_slice(&(props.len() as u32).to_be_bytes());
    args.extend(props);
    args.extend(long_str("PLAIN AMQPLAIN"));
    args.extend(long_str("en_US"));
    args
}

async fn serve_never_confirming(mut s: TcpStream) -> std::io::Result<()> {
    let mut protocol_header = [0u8; 8];
    s.read_exact(&mut protocol_header).await?;
    send_method(&mut s, 0, 10, 10, &start_args()).await?;
    loop {
        let mut head = [0u8; 7];
        s.read_exact(&mut head).await?;
        let channel = u16::from_be_bytes([head[1], head[2]]);
        let size = u32::from_be_bytes([head[3], head[4], head[5], head[6]]) as usize;
        let mut payload = vec![0u8; size + 1];
        s.read_exact(&mut payload).await?;
        // Header, body and heartbeat frames are taken and never answered.
        if head[0] != FRAME_METHOD || size < 4 {
            continue;
        }
        let class = u16::from_be_bytes([payload[0], payload[1]]);
        let method = u16::from_be_bytes([payload[2], payload[3]]);
        let (reply, args): ((u16, u16), Vec<u8>) = match (class, method) {
            // start-ok → tune: 2047 channels, 128 KiB frames, no heartbeat.
            (10, 11) => (
                (10, 30),
                [
                    &2047u16.to_be_bytes()[..],
                    &131_072u32.to_be_bytes(),
                    &[0, 0],
                ]
                .concat(),
            ),
            // open → open-ok.
            (10, 40) => ((10, 41), vec![0]),
            (10, 50) => {
                send_method(&mut s, 0, 10, 51, &[]).await?;
                return Ok(());
            }
            // channel.open → open-ok; channel.close → close-ok.
            (20, 10) => ((20, 11), vec![0, 0, 0, 0]),
            (20, 40) => ((20, 41), Vec::new()),
            // exchange.declare (passive) → declare-ok; confirm.select → select-ok.
            (40, 10) => ((40, 11), Vec::new()),
            (85, 10) => ((85, 11), Vec::new()),
            // tune-ok, basic.publish and anything else: taken, never answered.
            _ => continue,
        };
        send_method(&mut s, channel, reply.0, reply.1, &args).await?;
    }
}

/// `d`'s exchange reached through a proxy of its own (stopped by the teardown), with this
/// publisher-confirm timeout.
async fn proxied(
    d: Declared,
    confirm_timeout: Duration,
) -> Result<(Setup<AmqpSink>, Arc<TcpProxy>), BoxError> {
    let proxy = Arc::new(TcpProxy::start(broker_addr()).await?);
    let via = format!("amqp://guest:guest@{}/%2f", proxy.addr());
    let cfg = AmqpConfig::new(&via, &d.exchange)?.with_confirm_timeout(confirm_timeout);
    let keep = Arc::clone(&proxy);
    let setup = d.setup_then(AmqpSink::new(cfg), move || async move {
        keep.stop().await;
        Ok(())
    });
    Ok((setup, proxy))
}

#[async_trait]
impl Harness for AmqpHarness {
    fn reports_landing(&self) -> bool {
        true
    }

    type Sink = AmqpSink;

    fn can_restart_destination(&self) -> bool {
        true
    }

    /// The private node killed (`SIGKILL`) and started again on its data: the queue is
    /// durable and every message persistent and confirmed.
    async fn restart_destination(&self) -> Result<(), BoxError> {
        let node = self
            .node
            .lock()
            .unwrap()
            .clone()
            .ok_or("no private node: destination(Case::Durability) starts it")?;
        tokio::task::spawn_blocking(move || node.restart()).await?;
        Ok(())
    }

    async fn destination(&self, case: Case) -> Result<Setup<AmqpSink>, BoxError> {
        if case == Case::Durability {
            return self.durable_setup().await;
        }
        let d = Declared::new(case.name(), &[]).await?;
        let sink = AmqpSink::new(AmqpConfig::new(&url(), &d.exchange)?);
        Ok(d.setup(sink))
    }

    async fn fault(&self, fault: Fault) -> Result<Option<Setup<AmqpSink>>, BoxError> {
        let setup = match fault {
            Fault::MissingDestination => {
                Setup::new(AmqpSink::new(AmqpConfig::new(&url(), &unique("missing"))?))
            }
            Fault::RefusedCredential => {
                let d = Declared::new("refused", &[]).await?;
                let cfg = AmqpConfig::new(&url_with("guest", PLANTED, "/"), &d.exchange)?;
                d.setup(AmqpSink::new(cfg))
            }
            Fault::Unreachable => {
                let port = ankusa_sink_testkit::support::free_port();
                let cfg =
                    AmqpConfig::new(&format!("amqp://guest:{PLANTED}@127.0.0.1:{port}/%2f"), "x")?;
                Setup::new(AmqpSink::new(cfg))
            }
            Fault::Throttled => {
                // A queue that holds nothing and rejects publishes: the broker nacks.
                let d = Declared::new(
                    "throttled",
                    &[
                        ("x-max-length", AMQPValue::LongInt(0)),
                        ("x-overflow", AMQPValue::LongString("reject-publish".into())),
                    ],
                )
                .await?;
                let sink = AmqpSink::new(AmqpConfig::new(&url(), &d.exchange)?);
                d.setup(sink)
            }
            Fault::Oversized => {
                // The sink's own limit: 8 KiB bodies are under the 64 KiB inline threshold.
                let d = Declared::new("oversized", &[]).await?;
                let cfg = AmqpConfig::new(&url(), &d.exchange)?
                    .with_max_message_bytes(std::num::NonZeroUsize::new(4096).ok_or("zero")?);
                // Body size from capabilities(): one byte over max_message_bytes.
                d.setup(AmqpSink::new(cfg))
            }
            Fault::Unacknowledged => {
                let server = NeverConfirms::start().await?;
                let cfg = AmqpConfig::new(
                    &format!("amqp://guest:{PLANTED}@{}/%2f", server.addr),
                    "tk.never-confirmed",
                )?
                .with_confirm_timeout(Duration::from_secs(1));
                Setup::new(AmqpSink::new(cfg)).with_teardown(move || async move {
                    drop(server);
                    Ok(())
                })
            }
        };
        Ok(Some(setup))
    }

    async fn warm_fault(&self, fault: Fault) -> Result<Option<WarmFault<AmqpSink>>, BoxError> {
        let d = Declared::new(&format!("warm-{fault:?}"), &[]).await?;
        let exchange = d.exchange.clone();
        Ok(Some(match fault {
            // The exchange is deleted: the next publish's channel is closed 404.
            Fault::MissingDestination => {
                let sink = AmqpSink::new(AmqpConfig::new(&url(), &exchange)?);
                WarmFault::new(d.setup(sink), move || async move {
                    let conn = Connection::connect(&url(), ConnectionProperties::default()).await?;
                    let ch = conn.create_channel().await?;
                    ch.exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
                        .await?;
                    let _ = conn.close(200, "OK".into()).await;
                    Ok(())
                })
            }
            // A user of its own whose password is changed, then every connection cut: the
            // sink's next login is refused.
            Fault::RefusedCredential => {
                let user = unique("warm-user");
                rabbitmqctl(&["add_user", &user, PLANTED]).await;
                rabbitmqctl(&["set_permissions", "-p", "/", &user, ".*", ".*", ".*"]).await;
                let proxy = Arc::new(TcpProxy::start(broker_addr()).await?);
                let via = format!("amqp://{user}:{PLANTED}@{}/%2f", proxy.addr());
                let sink = AmqpSink::new(AmqpConfig::new(&via, &exchange)?);
                let (keep, gone) = (Arc::clone(&proxy), user.clone());
                let setup = d.setup_then(sink, move || async move {
                    keep.stop().await;
                    rabbitmqctl(&["delete_user", &gone]).await;
                    Ok(())
                });
                WarmFault::new(setup, move || async move {
                    rabbitmqctl(&["change_password", &user, "another-password-than-planted"]).await;
                    proxy.redirect(broker_addr()).await;
                    Ok(())
                })
            }
            Fault::Unreachable => {
                let (setup, proxy) = proxied(d, Duration::from_secs(5)).await?;
                WarmFault::new(setup, move || async move {
                    proxy.stop().await;
                    Ok(())
                })
            }
            // A full queue that rejects publishes is bound to the exchange: the broker
            // nacks every publish routed to it.
            Fault::Throttled => {
                let full = unique("warm-full.q");
                let conn = Connection::connect(&url(), ConnectionProperties::default()).await?;
                let ch = conn.create_channel().await?;
                let mut args = FieldTable::default();
                args.insert("x-expires".into(), AMQPValue::LongInt(120_000));
                args.insert("x-max-length".into(), AMQPValue::LongInt(0));
                args.insert(
                    "x-overflow".into(),
                    AMQPValue::LongString("reject-publish".into()),
                );
                ch.queue_declare(full.as_str().into(), QueueDeclareOptions::default(), args)
                    .await?;
                let _ = conn.close(200, "OK".into()).await;
                let sink = AmqpSink::new(AmqpConfig::new(&url(), &exchange)?);
                let gone = full.clone();
                let setup = d.setup_then(sink, move || async move {
                    let conn = Connection::connect(&url(), ConnectionProperties::default()).await?;
                    let ch = conn.create_channel().await?;
                    ch.queue_delete(gone.as_str().into(), QueueDeleteOptions::default())
                        .await?;
                    let _ = conn.close(200, "OK".into()).await;
                    Ok(())
                });
                WarmFault::new(setup, move || async move {
                    let conn = Connection::connect(&url(), ConnectionProperties::default()).await?;
                    let ch = conn.create_channel().await?;
                    ch.queue_bind(
                        full.as_str().into(),
                        exchange.as_str().into(),
                        "#".into(),
                        QueueBindOptions::default(),
                        FieldTable::default(),
                    )
                    .await?;
                    let _ = conn.close(200, "OK".into()).await;
                    Ok(())
                })
            }
            // The sink's own limit, as cold: the warm-up's small hooks pass.
            Fault::Oversized => {
                let cfg = AmqpConfig::new(&url(), &exchange)?
                    .with_max_message_bytes(std::num::NonZeroUsize::new(4096).ok_or("zero")?);
                WarmFault::standing(d.setup(AmqpSink::new(cfg)))
            }
            // Silent on the connection the sink holds: the publish is taken, never confirmed.
            Fault::Unacknowledged => {
                let (setup, proxy) = proxied(d, Duration::from_secs(1)).await?;
                ankusa_sink_testkit::support::silent_after_warm_up(setup, proxy)
            }
        }))
    }

    /// `check()` declares the exchange passively after logging in.
    fn check_detects(&self, fault: Fault) -> bool {
        matches!(fault, Fault::MissingDestination | Fault::RefusedCredential)
    }

    fn secrets(&self) -> Vec<String> {
        vec![PLANTED.to_owned()]
    }

    fn can_restart(&self) -> bool {
        matches!(self._lock, Lock::Exclusive(_))
    }

    async fn stop(&self) -> Result<(), BoxError> {
        rabbitmqctl(&["stop_app"]).await;
        Ok(())
    }

    async fn start(&self) -> Result<(), BoxError> {
        rabbitmqctl(&["start_app"]).await;
        rabbitmqctl(&["await_startup"]).await;
        Ok(())
    }
}

ankusa_sink_testkit::conformance_suite!(broker "RabbitMQ", broker_addr(); |case| AmqpHarness::new(case));

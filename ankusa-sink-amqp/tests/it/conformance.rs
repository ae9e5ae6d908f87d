//! The shared conformance suite (`ankusa-sink-testkit`) against a real RabbitMQ.
//!
//! One test per case (the names `conformance_suite!` would give). Every case but
//! `recovery` holds the shared side of the broker lock; `recovery` stops the broker, so it
//! holds the exclusive side and is the only one whose harness can restart.

use crate::common::*;
use ankusa_sink_amqp::lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use ankusa_sink_amqp::lapin::types::{AMQPValue, FieldTable};
use ankusa_sink_amqp::lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use ankusa_sink_amqp::{AmqpConfig, AmqpSink};
use ankusa_sink_core::{BoxError, async_trait};
use ankusa_sink_testkit::{Case, Fault, Harness, Probe, Received, Setup, run_blocking};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::{RwLockReadGuard, RwLockWriteGuard};

/// The password planted in the refused-credential sink; must never be printed.
const PLANTED: &str = "planted-s3cr3t-Pw";

#[allow(dead_code)] // held for its Drop
enum Lock {
    Shared(RwLockReadGuard<'static, ()>),
    Exclusive(RwLockWriteGuard<'static, ()>),
}

struct AmqpHarness {
    /// Exchanges and queues to delete when the case ends.
    created: Mutex<Vec<(String, String)>>,
    _lock: Lock,
}

impl Drop for AmqpHarness {
    fn drop(&mut self) {
        let created = std::mem::take(&mut *self.created.lock().unwrap());
        if created.is_empty() {
            return;
        }
        // Drop runs inside the suite's runtime: delete on a thread with its own runtime.
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let Ok(conn) = Connection::connect(&url(), ConnectionProperties::default()).await
                else {
                    return;
                };
                let Ok(ch) = conn.create_channel().await else {
                    return;
                };
                for (x, q) in created {
                    let _ = ch
                        .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
                        .await;
                    let _ = ch
                        .exchange_delete(x.as_str().into(), ExchangeDeleteOptions::default())
                        .await;
                }
                let _ = conn.close(200, "OK".into()).await;
            });
        });
        let _ = cleanup.join();
    }
}

impl AmqpHarness {
    fn shared() -> Self {
        AmqpHarness {
            created: Mutex::new(Vec::new()),
            _lock: Lock::Shared(spin(try_shared)),
        }
    }
    fn exclusive() -> Self {
        AmqpHarness {
            created: Mutex::new(Vec::new()),
            _lock: Lock::Exclusive(spin(try_exclusive)),
        }
    }
    fn can_restart_now(&self) -> bool {
        matches!(self._lock, Lock::Exclusive(_))
    }

    /// [`declare`], remembering the names for cleanup.
    async fn declare(
        &self,
        queue_args: &[(&str, AMQPValue)],
    ) -> Result<(String, String), BoxError> {
        let (x, q) = declare(queue_args).await?;
        self.created.lock().unwrap().push((x.clone(), q.clone()));
        Ok((x, q))
    }
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

/// Declares a durable topic exchange and a queue bound with `#` (both expire when unused).
async fn declare(queue_args: &[(&str, AMQPValue)]) -> Result<(String, String), BoxError> {
    let conn = Connection::connect(&url(), ConnectionProperties::default()).await?;
    let ch = conn.create_channel().await?;
    let x = unique("tk");
    let q = unique("tkq");
    ch.exchange_declare(
        x.as_str().into(),
        ExchangeKind::Topic,
        ExchangeDeclareOptions {
            durable: true,
            auto_delete: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await?;
    let mut args = FieldTable::default();
    args.insert("x-expires".into(), AMQPValue::LongInt(120_000));
    for (k, v) in queue_args {
        args.insert((*k).into(), v.clone());
    }
    ch.queue_declare(
        q.as_str().into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        args,
    )
    .await?;
    ch.queue_bind(
        q.as_str().into(),
        x.as_str().into(),
        "#".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    let _ = conn.close(200, "OK".into()).await;
    Ok((x, q))
}

/// Drains the queue with basic.get and remembers everything; reconnects after a broker
/// restart.
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
        while let Some(msg) = ch
            .basic_get(self.queue.as_str().into(), BasicGetOptions { no_ack: true })
            .await?
        {
            let r = Received::from_message_bytes(&msg.delivery.data)?;
            self.got.lock().unwrap().push(r);
        }
        Ok(())
    }
}

#[async_trait]
impl Probe for QueueProbe {
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        let mut slot = self.conn.lock().await;
        if let Err(e) = tokio::time::timeout(Duration::from_secs(2), self.drain(&mut slot))
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

#[async_trait]
impl Harness for AmqpHarness {
    type Sink = AmqpSink;

    async fn destination(&self) -> Result<Setup<AmqpSink>, BoxError> {
        let (x, q) = self.declare(&[]).await?;
        let sink = AmqpSink::new(AmqpConfig::builder(url(), &x).build()?);
        Ok(Setup::new(sink).with_probe(QueueProbe::new(q)))
    }

    async fn fault(&self, fault: Fault) -> Result<Option<Setup<AmqpSink>>, BoxError> {
        let setup = match fault {
            Fault::MissingDestination => Setup::new(AmqpSink::new(
                AmqpConfig::builder(url(), unique("missing")).build()?,
            )),
            Fault::RefusedCredential => {
                let (x, _) = self.declare(&[]).await?;
                let cfg = AmqpConfig::builder(url_with("guest", PLANTED, "/"), &x).build()?;
                Setup::new(AmqpSink::new(cfg))
            }
            Fault::Unreachable => {
                let port = std::net::TcpListener::bind("127.0.0.1:0")?
                    .local_addr()?
                    .port();
                let cfg = AmqpConfig::builder(
                    format!("amqp://guest:{PLANTED}@127.0.0.1:{port}/%2f"),
                    "x",
                )
                .build()?;
                Setup::new(AmqpSink::new(cfg))
            }
            Fault::Throttled => {
                // A queue that holds nothing and rejects publishes: the broker nacks.
                let (x, _) = self
                    .declare(&[
                        ("x-max-length", AMQPValue::LongInt(0)),
                        ("x-overflow", AMQPValue::LongString("reject-publish".into())),
                    ])
                    .await?;
                Setup::new(AmqpSink::new(AmqpConfig::builder(url(), &x).build()?))
            }
            Fault::Oversized => {
                let (x, q) = self.declare(&[]).await?;
                let cfg = AmqpConfig::builder(url(), &x)
                    .max_message_bytes(4096)
                    .build()?;
                Setup::new(AmqpSink::new(cfg))
                    .with_probe(QueueProbe::new(q))
                    .with_body_size(8192)
            }
        };
        Ok(Some(setup))
    }

    fn secrets(&self) -> Vec<String> {
        vec![PLANTED.to_owned()]
    }

    fn can_restart(&self) -> bool {
        self.can_restart_now()
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

macro_rules! cases {
    ($($name:ident => $case:ident,)*) => {
        $(
            #[test]
            fn $name() {
                run_blocking(AmqpHarness::shared, Case::$case);
            }
        )*
    };
}

cases! {
    contract => Contract,
    round_trip => RoundTrip,
    inline_boundary => InlineBoundary,
    classify_missing_destination => ClassifyMissingDestination,
    classify_refused_credential => ClassifyRefusedCredential,
    classify_unreachable => ClassifyUnreachable,
    classify_throttled => ClassifyThrottled,
    classify_oversized => ClassifyOversized,
    concurrency => Concurrency,
    durability => Durability,
    panic_safety => PanicSafety,
    batching => Batching,
}

#[test]
fn recovery() {
    run_blocking(AmqpHarness::exclusive, Case::Recovery);
}

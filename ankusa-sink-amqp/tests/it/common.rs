//! Shared fixtures: names, an admin connection, rabbitmqctl, the broker lock.

use ankusa_sink_amqp::{AmqpConfig, AmqpSink};
use ankusa_sink_core::{Envelope, Failure};
use ankusa_sink_testkit::support::unique_name;
use lapin::options::{
    BasicAckOptions, BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions,
    QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use std::time::Duration;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

// The raw-loop baseline declares its queue the way these tests do.
#[path = "../../examples/shared/declare.rs"]
mod declare;

/// Broker-wide faults (restart, memory alarm) take the write side; every other test holds
/// the read side for its whole run, so none sees another's global fault.
static BROKER: RwLock<()> = RwLock::const_new(());

pub(crate) async fn shared() -> RwLockReadGuard<'static, ()> {
    BROKER.read().await
}

pub(crate) fn try_shared() -> Option<RwLockReadGuard<'static, ()>> {
    BROKER.try_read().ok()
}

pub(crate) fn try_exclusive() -> Option<RwLockWriteGuard<'static, ()>> {
    BROKER.try_write().ok()
}

pub(crate) async fn exclusive() -> RwLockWriteGuard<'static, ()> {
    BROKER.write().await
}

pub(crate) fn url() -> String {
    std::env::var("ANKUSA_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// The test broker's `host:port` (of `url()`).
pub(crate) fn broker_addr() -> String {
    let base = url::Url::parse(&url()).expect("ANKUSA_AMQP_URL");
    let host = base.host_str().expect("host");
    format!("{host}:{}", base.port().unwrap_or(5672))
}

/// `amqp://user:pass@<host:port of url()>/<vhost>`.
pub(crate) fn url_with(user: &str, pass: &str, vhost: &str) -> String {
    let vhost: String = url::form_urlencoded::byte_serialize(vhost.as_bytes()).collect();
    format!("amqp://{user}:{pass}@{}/{vhost}", broker_addr())
}

/// A unique name starting `sink.` (the restricted users' permission pattern).
pub(crate) fn unique(what: &str) -> String {
    unique_name(&format!("sink.{what}"))
}

/// After a failed connection attempt the sink answers from that attempt for this long
/// (its reconnect pause, 250 ms) before dialling again.
pub(crate) const RECONNECT_PAUSE: Duration = Duration::from_millis(250);

/// The default configuration for `exchange` on the test broker.
pub(crate) fn config(exchange: &str) -> AmqpConfig {
    AmqpConfig::new(&url(), exchange).unwrap()
}

pub(crate) fn sink(exchange: &str) -> AmqpSink {
    AmqpSink::new(config(exchange))
}

pub(crate) fn nz(n: usize) -> std::num::NonZeroUsize {
    std::num::NonZeroUsize::new(n).unwrap()
}

pub(crate) fn env(id: &str, source: &str) -> Envelope {
    Envelope::builder(id, source, &br#"{"type":"ping"}"#[..])
        .tenant_id("acme")
        .content_type("application/json")
        .received_at(1_700_000_000_123)
        .build()
        .unwrap()
}

/// A guest connection for declaring, binding, reading back and deleting; remembers what
/// it created so `cleanup` removes it (queues also expire on their own after 5 minutes).
pub(crate) struct Admin {
    _conn: Connection,
    ch: Channel,
    exchanges: Vec<String>,
    queues: Vec<String>,
}

impl Admin {
    pub(crate) async fn new() -> Admin {
        Self::connect(&url()).await
    }

    pub(crate) async fn connect(url: &str) -> Admin {
        let conn = Connection::connect(url, ConnectionProperties::default())
            .await
            .expect("admin connection to RabbitMQ (run scripts/services/rabbitmq.sh)");
        let ch = conn.create_channel().await.unwrap();
        Admin {
            _conn: conn,
            ch,
            exchanges: Vec::new(),
            queues: Vec::new(),
        }
    }

    pub(crate) async fn exchange(&mut self, name: &str, kind: ExchangeKind) {
        self.ch
            .exchange_declare(
                name.into(),
                kind,
                // Auto-delete: a test that panics before `cleanup` leaks nothing once
                // its (expiring) queues are gone.
                ExchangeDeclareOptions {
                    durable: true,
                    auto_delete: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
        self.exchanges.push(name.to_owned());
    }

    pub(crate) async fn delete_exchange(&self, name: &str) {
        self.ch
            .exchange_delete(name.into(), ExchangeDeleteOptions::default())
            .await
            .unwrap();
    }

    pub(crate) async fn delete_queue(&self, name: &str) {
        self.ch
            .queue_delete(name.into(), QueueDeleteOptions::default())
            .await
            .unwrap();
    }

    /// A topic exchange of this test's own and a queue bound to it with `key`.
    pub(crate) async fn topic_with_queue(&mut self, key: &str) -> (String, String) {
        let x = unique("x");
        self.exchange(&x, ExchangeKind::Topic).await;
        let q = self.queue(&x, key, &[]).await;
        (x, q)
    }

    /// A durable queue (expiring after 5 min unused) with extra `args`, bound with `key`.
    pub(crate) async fn queue(
        &mut self,
        exchange: &str,
        key: &str,
        args: &[(&str, AMQPValue)],
    ) -> String {
        let name = self.expiring_queue("q", args).await;
        self.bind(&name, exchange, key).await;
        name
    }

    /// A durable queue (expiring after 5 min unused), bound to nothing: published to
    /// through the default exchange.
    #[cfg_attr(not(feature = "source"), allow(dead_code))]
    pub(crate) async fn plain_queue(&mut self) -> String {
        self.expiring_queue("src", &[]).await
    }

    /// A durable queue named after `what`, expiring after 5 min unused, with extra `args`.
    async fn expiring_queue(&mut self, what: &str, args: &[(&str, AMQPValue)]) -> String {
        let name = unique(what);
        let mut table = FieldTable::default();
        table.insert("x-expires".into(), AMQPValue::LongInt(300_000));
        for (k, v) in args {
            table.insert((*k).into(), v.clone());
        }
        declare::durable_queue(&self.ch, &name, table)
            .await
            .unwrap();
        self.queues.push(name.clone());
        name
    }

    /// Remember `queue` for `cleanup` (one this admin did not declare).
    #[cfg_attr(not(feature = "source"), allow(dead_code))]
    pub(crate) fn forget_later(&mut self, queue: &str) {
        self.queues.push(queue.to_owned());
    }

    /// Publish `body` to `queue` through the default exchange, persistent, confirmed.
    #[cfg_attr(not(feature = "source"), allow(dead_code))]
    pub(crate) async fn publish(&self, queue: &str, body: &[u8]) {
        self.ch
            .basic_publish(
                "".into(),
                queue.into(),
                lapin::options::BasicPublishOptions {
                    mandatory: true,
                    immediate: false,
                },
                body,
                lapin::BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }

    /// Whether `queue` exists (a passive declare on a throwaway channel).
    #[cfg_attr(not(feature = "source"), allow(dead_code))]
    pub(crate) async fn exists(&self, queue: &str) -> bool {
        let ch = self._conn.create_channel().await.unwrap();
        let res = declare::passive(&ch, queue).await;
        if ch.status().connected() {
            let _ = ch.close(200, "OK".into()).await;
        }
        res.is_ok()
    }

    pub(crate) async fn bind(&self, queue: &str, exchange: &str, key: &str) {
        declare::bind(&self.ch, queue, exchange, key).await.unwrap();
    }

    /// Messages ready in `queue`.
    pub(crate) async fn count(&self, queue: &str) -> u32 {
        declare::passive(&self.ch, queue)
            .await
            .unwrap()
            .message_count()
    }

    /// The next message of `queue`, acked, waiting up to 10 s for one.
    pub(crate) async fn get(&self, queue: &str) -> lapin::message::BasicGetMessage {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let got = self
                .ch
                .basic_get(queue.into(), BasicGetOptions::default())
                .await
                .unwrap();
            if let Some(msg) = got {
                msg.delivery.ack(BasicAckOptions::default()).await.unwrap();
                return msg;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no message in {queue}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(crate) async fn cleanup(self) {
        for q in &self.queues {
            let _ = self
                .ch
                .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
        for x in &self.exchanges {
            let _ = self
                .ch
                .exchange_delete(x.as_str().into(), ExchangeDeleteOptions::default())
                .await;
        }
    }
}

/// `rabbitmqctl -q ARGS`, bounded; panics on failure with its output.
pub(crate) async fn rabbitmqctl(args: &[&str]) -> String {
    let out = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new("rabbitmqctl")
            .arg("-q")
            .args(args)
            .output(),
    )
    .await
    .expect("rabbitmqctl timed out")
    .expect("rabbitmqctl runs");
    assert!(
        out.status.success(),
        "rabbitmqctl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Blocking `rabbitmqctl`, for guards' `Drop`; errors are printed, never panicked on.
pub(crate) fn rabbitmqctl_blocking(args: &[&str]) {
    match std::process::Command::new("timeout")
        .arg("90")
        .arg("rabbitmqctl")
        .arg("-q")
        .args(args)
        .output()
    {
        Ok(o) if o.status.success() => {}
        Ok(o) => eprintln!(
            "rabbitmqctl {args:?} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => eprintln!("rabbitmqctl {args:?}: {e}"),
    }
}

/// A vhost with a user limited to `sink.*` names in it (guest gets full rights there too);
/// both deleted on drop.
pub(crate) struct Tenant {
    pub(crate) vhost: String,
    pub(crate) user: String,
    pub(crate) password: String,
}

impl Tenant {
    pub(crate) async fn new() -> Tenant {
        let t = Tenant {
            vhost: unique("vh"),
            user: unique("user"),
            password: format!("pw-{}", unique("secret")),
        };
        rabbitmqctl(&["add_vhost", &t.vhost]).await;
        rabbitmqctl(&["add_user", &t.user, &t.password]).await;
        let p = r"^sink\..*";
        rabbitmqctl(&["set_permissions", "-p", &t.vhost, &t.user, p, p, p]).await;
        rabbitmqctl(&["set_permissions", "-p", &t.vhost, "guest", ".*", ".*", ".*"]).await;
        t
    }

    pub(crate) fn url(&self) -> String {
        url_with(&self.user, &self.password, &self.vhost)
    }

    pub(crate) fn guest_url(&self) -> String {
        url_with("guest", "guest", &self.vhost)
    }
}

impl Drop for Tenant {
    fn drop(&mut self) {
        rabbitmqctl_blocking(&["delete_vhost", &self.vhost]);
        rabbitmqctl_blocking(&["delete_user", &self.user]);
    }
}

/// Deliver until `done(result)` or 60 s pass (then panic with the last result).
pub(crate) async fn deliver_until(
    sink: &AmqpSink,
    env: &Envelope,
    ctx: &ankusa_sink_core::Ctx,
    done: impl Fn(&Result<(), Failure>) -> bool,
) -> Result<(), Failure> {
    use ankusa_sink_core::Sink as _;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let res = bounded(sink.deliver(env, ctx)).await;
        if done(&res) || tokio::time::Instant::now() >= deadline {
            return res;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A guard against hanging: a delivery or check must answer within a minute.
pub(crate) async fn bounded<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .expect("no answer within 60 s: the sink hangs")
}

//! Every row of the classification table, provoked on a real broker.

use crate::common::*;
use ankusa_sink_amqp::{AmqpConfig, AmqpError, AmqpSink};
use ankusa_sink_core::{Check, Class, Ctx, Failure, Sink};
use lapin::ExchangeKind;
use lapin::types::AMQPValue;
use std::time::Duration;

/// The AMQP reply codes of the table (AMQP 0-9-1, section 1.9 "Constants").
mod reply_code {
    pub(crate) const NO_ROUTE: u16 = 312;
    pub(crate) const ACCESS_REFUSED: u16 = 403;
    pub(crate) const NOT_FOUND: u16 = 404;
    pub(crate) const PRECONDITION_FAILED: u16 = 406;
    pub(crate) const NOT_ALLOWED: u16 = 530;
}

/// The AMQP reply code behind a failure (walking to the sink's typed error).
fn code(f: &Failure) -> Option<u16> {
    f.reason()
        .downcast_ref::<AmqpError>()
        .and_then(AmqpError::reply_code)
}

fn typed(f: &Failure) -> &AmqpError {
    f.reason()
        .downcast_ref::<AmqpError>()
        .unwrap_or_else(|| panic!("not an AmqpError: {f}"))
}

#[tokio::test]
async fn no_route_is_config_then_ok_after_bind() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let mut admin = Admin::new().await;
    let x = unique("x");
    admin.exchange(&x, ExchangeKind::Topic).await;
    let sink = sink(&x);
    let e = env("hook-nr", "stripe");
    let err = bounded(sink.deliver(&e, &Ctx::for_envelope(&e)))
        .await
        .unwrap_err();
    assert_eq!(err.class(), Class::Config, "{err}");
    assert_eq!(code(&err), Some(reply_code::NO_ROUTE));
    assert!(err.to_string().contains("ankusa.stripe"), "{err}");
    // The channel survives a return: bind, and the same sink delivers.
    let q = admin.queue(&x, "ankusa.#", &[]).await;
    bounded(sink.deliver(&e, &Ctx::for_envelope(&e)))
        .await
        .unwrap();
    assert_eq!(admin.count(&q).await, 1);
    admin.cleanup().await;
}

#[tokio::test]
async fn deleted_exchange_is_config_and_the_sink_recovers() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let mut admin = Admin::new().await;
    let x = unique("x");
    admin.exchange(&x, ExchangeKind::Topic).await;
    admin.queue(&x, "#", &[]).await;
    let sink = sink(&x);
    let e = env("hook-del", "stripe");
    let ctx = Ctx::for_envelope(&e);
    bounded(sink.deliver(&e, &ctx)).await.unwrap();

    admin.delete_exchange(&x).await;
    let err = bounded(sink.deliver(&e, &ctx)).await.unwrap_err();
    assert_eq!(err.class(), Class::Config, "{err}");
    assert_eq!(code(&err), Some(reply_code::NOT_FOUND), "{err}");
    // While it is missing, the reopened channel's passive check says 404 too.
    tokio::time::sleep(RECONNECT_PAUSE).await;
    let err = bounded(sink.deliver(&e, &ctx)).await.unwrap_err();
    assert_eq!(err.class(), Class::Config, "{err}");
    assert_eq!(code(&err), Some(reply_code::NOT_FOUND), "{err}");

    admin.exchange(&x, ExchangeKind::Topic).await;
    let q = admin.queue(&x, "#", &[]).await;
    deliver_until(&sink, &e, &ctx, |r| r.is_ok()).await.unwrap();
    assert_eq!(admin.count(&q).await, 1);
    admin.cleanup().await;
}

#[tokio::test]
async fn missing_exchange_is_config_for_check_and_deliver() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let x = unique("missing");
    let sink = sink(&x);
    let err = bounded(sink.check()).await.unwrap_err();
    assert_eq!(err.class(), Class::Config, "{err}");
    assert_eq!(code(&err), Some(reply_code::NOT_FOUND));
    let e = env("hook-missing", "s");
    let err = bounded(sink.deliver(&e, &Ctx::for_envelope(&e)))
        .await
        .unwrap_err();
    assert_eq!(err.class(), Class::Config, "{err}");
    assert_eq!(code(&err), Some(reply_code::NOT_FOUND));
    // Passive by default: the sink did not create it.
    tokio::time::sleep(RECONNECT_PAUSE).await;
    let err = bounded(sink.check()).await.unwrap_err();
    assert_eq!(code(&err), Some(reply_code::NOT_FOUND));
}

#[tokio::test]
async fn precondition_failed_on_declare_is_config() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let mut admin = Admin::new().await;
    let x = unique("x");
    admin.exchange(&x, ExchangeKind::Direct).await;
    // Declaring it as topic contradicts the existing direct exchange: 406.
    let sink = AmqpSink::new(config(&x).with_declare_exchange(true).unwrap());
    let e = env("hook-406", "s");
    let err = bounded(sink.deliver(&e, &Ctx::for_envelope(&e)))
        .await
        .unwrap_err();
    assert_eq!(err.class(), Class::Config, "{err}");
    assert_eq!(code(&err), Some(reply_code::PRECONDITION_FAILED));
    tokio::time::sleep(RECONNECT_PAUSE).await;
    let err = bounded(sink.check()).await.unwrap_err();
    assert_eq!(err.class(), Class::Config, "{err}");
    assert_eq!(code(&err), Some(reply_code::PRECONDITION_FAILED));
    admin.cleanup().await;
}

#[tokio::test]
async fn restricted_user_refusals_are_config_and_never_leak_the_password() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let t = Tenant::new().await;
    let mut admin = Admin::connect(&t.guest_url()).await;
    let allowed = unique("x");
    let forbidden = format!("other.{}", unique("x"));
    admin.exchange(&allowed, ExchangeKind::Topic).await;
    admin.exchange(&forbidden, ExchangeKind::Topic).await;
    let q = admin.queue(&allowed, "#", &[]).await;
    admin.bind(&q, &forbidden, "#").await;
    let e = env("hook-acl", "s");
    let ctx = Ctx::for_envelope(&e);
    let no_secret = |f: &Failure| {
        let text = format!("{f} {f:?}");
        assert!(!text.contains(&t.password), "password leaked: {text}");
    };

    // The user works where it is allowed.
    let ok = AmqpSink::new(AmqpConfig::new(&t.url(), &allowed).unwrap());
    bounded(ok.deliver(&e, &ctx)).await.unwrap();
    assert_eq!(
        bounded(ok.check()).await.unwrap(),
        ankusa_sink_core::Check::Passed
    );

    // 403 ACCESS_REFUSED on a forbidden exchange (channel closed by the broker).
    let refused = AmqpSink::new(AmqpConfig::new(&t.url(), &forbidden).unwrap());
    let err = bounded(refused.deliver(&e, &ctx)).await.unwrap_err();
    assert_eq!(err.class(), Class::Config, "{err}");
    assert_eq!(code(&err), Some(reply_code::ACCESS_REFUSED), "{err}");
    no_secret(&err);

    // Login refused (bad password): 403 at connection open, for deliver and check.
    let bad = AmqpSink::new(
        AmqpConfig::new(&url_with(&t.user, "wrong-password", &t.vhost), &allowed).unwrap(),
    );
    let err = bounded(bad.deliver(&e, &ctx)).await.unwrap_err();
    assert_eq!(err.class(), Class::Config, "{err}");
    assert_eq!(code(&err), Some(reply_code::ACCESS_REFUSED), "{err}");
    assert!(!format!("{err}").contains("wrong-password"));
    tokio::time::sleep(RECONNECT_PAUSE).await;
    let err = bounded(bad.check()).await.unwrap_err();
    assert_eq!(err.class(), Class::Config, "{err}");

    // 530 NOT_ALLOWED: a vhost the user has no access to.
    let vhost_refused =
        AmqpSink::new(AmqpConfig::new(&url_with(&t.user, &t.password, "/"), &allowed).unwrap());
    let err = bounded(vhost_refused.deliver(&e, &ctx)).await.unwrap_err();
    assert_eq!(err.class(), Class::Config, "{err}");
    assert_eq!(code(&err), Some(reply_code::NOT_ALLOWED), "{err}");
    no_secret(&err);
    tokio::time::sleep(RECONNECT_PAUSE).await;
    let err = bounded(vhost_refused.check()).await.unwrap_err();
    assert_eq!(err.class(), Class::Config, "{err}");

    // Only the allowed publish got through.
    assert_eq!(admin.count(&q).await, 1);
    admin.cleanup().await;
}

#[tokio::test]
async fn nack_from_reject_publish_queue_is_throttled() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let mut admin = Admin::new().await;
    let x = unique("x");
    admin.exchange(&x, ExchangeKind::Topic).await;
    let q = admin
        .queue(
            &x,
            "#",
            &[
                ("x-max-length", AMQPValue::LongInt(1)),
                ("x-overflow", AMQPValue::LongString("reject-publish".into())),
            ],
        )
        .await;
    let sink = sink(&x);
    let e = env("hook-nack", "s");
    bounded(sink.deliver(&e, &Ctx::for_envelope(&e)))
        .await
        .unwrap();
    for attempt in [1, 4] {
        let ctx = Ctx::for_envelope(&e).with_attempt(attempt);
        let err = bounded(sink.deliver(&e, &ctx)).await.unwrap_err();
        // A throttle without a stated pause, whatever the attempt: dispatch draws it.
        assert_eq!(err.class(), Class::Throttled, "attempt {attempt}: {err}");
        assert!(matches!(typed(&err), AmqpError::Nacked { .. }), "{err}");
    }
    assert_eq!(admin.count(&q).await, 1);
    admin.cleanup().await;
}

#[tokio::test]
async fn refused_connection_is_transient_and_fails_fast() {
    let _g = shared().await;
    // A loopback port with nobody listening.
    let port = ankusa_sink_testkit::support::free_port();
    let sink = AmqpSink::new(
        AmqpConfig::new(&format!("amqp://guest:guest@127.0.0.1:{port}/%2f"), "x").unwrap(),
    );
    let e = env("hook-refused", "s");
    for i in 0..3 {
        let err = bounded(sink.deliver(&e, &Ctx::for_envelope(&e)))
            .await
            .unwrap_err();
        assert_eq!(err.class(), Class::Transient, "{err}");
        let text = err.to_string();
        assert!(!text.contains("guest:guest"), "{text}");
        // Each cause once, in words; the delivery that dialled reports its own attempt.
        assert_eq!(text.matches("onnection refused").count(), 1, "{text}");
        assert!(!text.contains(" 0 ms ago"), "{text}");
        if i == 0 {
            assert_eq!(
                text,
                format!(
                    "transient: connect failed on amqp://127.0.0.1:{port}/%2F: connection refused"
                )
            );
        }
    }
    let err = bounded(sink.check()).await.unwrap_err();
    assert_eq!(err.class(), Class::Transient, "{err}");
}

/// `sys:suspend`s the queue's process (so the broker cannot confirm messages routed to
/// it) and resumes it on drop.
struct SuspendedQueue(String);

impl SuspendedQueue {
    fn eval(name: &str, op: &str) -> String {
        format!(
            "{{ok, Q}} = rabbit_amqqueue:lookup(rabbit_misc:r(<<\"/\">>, queue, <<\"{name}\">>)), \
             sys:{op}(amqqueue:get_pid(Q))."
        )
    }
    async fn new(name: &str) -> Self {
        rabbitmqctl(&["eval", &Self::eval(name, "suspend")]).await;
        SuspendedQueue(name.to_owned())
    }
}

impl Drop for SuspendedQueue {
    fn drop(&mut self) {
        rabbitmqctl_blocking(&["eval", &Self::eval(&self.0, "resume")]);
    }
}

#[tokio::test]
async fn confirm_timeout_is_transient() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let mut admin = Admin::new().await;
    let (x, q) = admin.topic_with_queue("#").await;
    let sink = AmqpSink::new(config(&x).with_confirm_timeout(Duration::from_millis(800)));
    let e = env("hook-slow", "s");
    let ctx = Ctx::for_envelope(&e);
    bounded(sink.deliver(&e, &ctx)).await.unwrap();
    {
        let _suspended = SuspendedQueue::new(&q).await;
        let err = bounded(sink.deliver(&e, &ctx)).await.unwrap_err();
        assert_eq!(err.class(), Class::Transient, "{err}");
        assert!(
            matches!(typed(&err), AmqpError::ConfirmTimeout { .. }),
            "{err}"
        );
    }
    // Resumed: the same sink and channel deliver again.
    deliver_until(&sink, &e, &ctx, |r| r.is_ok()).await.unwrap();
    admin.cleanup().await;
}

#[tokio::test]
async fn connection_lost_is_transient_and_the_next_delivery_reconnects() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let mut admin = Admin::new().await;
    let (x, q) = admin.topic_with_queue("#").await;
    let sink = AmqpSink::new(config(&x).with_confirm_timeout(Duration::from_secs(30)));
    let e = env("hook-lost", "s");
    let ctx = Ctx::for_envelope(&e);
    bounded(sink.deliver(&e, &ctx)).await.unwrap();

    let res = {
        let _suspended = SuspendedQueue::new(&q).await;
        let pending = sink.deliver(&e, &ctx);
        let kill = async {
            // Wait until the publish awaits its confirm, then close our connection.
            while sink.in_flight() == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let conns = rabbitmqctl(&["list_connections", "pid", "client_properties"]).await;
            let pid = conns
                .lines()
                .find(|l| l.contains(&x))
                .and_then(|l| l.split_whitespace().next())
                .unwrap_or_else(|| panic!("our connection is not listed:\n{conns}"))
                .to_owned();
            rabbitmqctl(&["close_connection", &pid, "test closes the connection"]).await;
        };
        let (res, ()) = bounded(async { tokio::join!(pending, kill) }).await;
        res
    };
    let err = res.unwrap_err();
    assert_eq!(err.class(), Class::Transient, "{err}");
    assert!(!sink.is_connected().await);
    deliver_until(&sink, &e, &ctx, |r| r.is_ok()).await.unwrap();
    assert!(sink.is_connected().await);
    admin.cleanup().await;
}

/// The sink is durable: with the default exchange, `check()` asks whether the queue the
/// fixed routing key names is durable. A transient queue fails config (`QueueNotDurable`);
/// a durable classic queue and a quorum queue pass; a queue declared with arguments the
/// probe does not repeat (`x-expires`) cannot be asked and passes. Nothing is published,
/// and every queue keeps its flags.
#[tokio::test]
async fn check_fails_a_transient_queue_behind_the_default_exchange_as_config() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
    use lapin::types::FieldTable;
    let _g = shared().await;
    let logs = ankusa_sink_testkit::support::LogCapture::for_targets(&["ankusa_sink_amqp"]);
    let _attached = logs.attach_global();
    let conn = lapin::Connection::connect(&url(), lapin::ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    let declare = |name: String, durable: bool, args: &[(&str, AMQPValue)]| {
        let ch = ch.clone();
        let mut table = FieldTable::default();
        for (k, v) in args {
            table.insert((*k).into(), v.clone());
        }
        async move {
            let options = QueueDeclareOptions {
                durable,
                ..QueueDeclareOptions::default()
            };
            ch.queue_declare(name.as_str().into(), options, table)
                .await
                .unwrap()
        }
    };
    let check = |queue: &str| {
        let cfg = AmqpConfig::new(&url(), "")
            .unwrap()
            .with_routing_key_template(queue)
            .unwrap();
        async move { AmqpSink::new(cfg).check().await }
    };
    let quorum = [("x-queue-type", AMQPValue::LongString("quorum".into()))];
    let expires = [("x-expires", AMQPValue::LongInt(300_000))];
    let transient = unique("transient");
    let durable = unique("durable");
    let quorum_q = unique("quorum");
    let with_args = unique("expires");
    declare(transient.clone(), false, &[]).await;
    declare(durable.clone(), true, &[]).await;
    declare(quorum_q.clone(), true, &quorum).await;
    declare(with_args.clone(), true, &expires).await;

    let f = check(&transient).await.unwrap_err();
    assert_eq!(f.class(), Class::Config, "{f}");
    assert_eq!(f.may_have_landed(), Some(false));
    assert!(
        matches!(typed(&f), AmqpError::QueueNotDurable { queue } if *queue == transient),
        "{f}"
    );
    for q in [&durable, &quorum_q, &with_args] {
        assert_eq!(check(q).await.unwrap(), Check::Passed, "{q}");
    }
    // Only the queue with arguments could not be asked, and the check says so.
    for q in [&transient, &durable, &quorum_q] {
        assert!(logs.lines_with(q).is_empty(), "{q}: {}", logs.text());
    }
    let warned = logs.lines_with(&with_args);
    assert!(
        warned.len() == 1 && warned[0].to_string().contains("reply_code=406"),
        "{warned:?}"
    );
    // The probe changed no queue: each still takes its own declaration, and holds nothing.
    let again = declare(transient.clone(), false, &[]).await;
    assert_eq!(again.message_count(), 0);
    assert_eq!(declare(durable.clone(), true, &[]).await.message_count(), 0);
    assert_eq!(
        declare(quorum_q.clone(), true, &quorum)
            .await
            .message_count(),
        0
    );
    for q in [&transient, &durable, &quorum_q, &with_args] {
        ch.queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await
            .unwrap();
    }
}

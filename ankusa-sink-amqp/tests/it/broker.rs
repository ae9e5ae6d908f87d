//! Broker-wide faults: a restart and the memory alarm (connection.blocked). Each runs under
//! the exclusive broker lock and restores the broker in a guard, even on panic.

use crate::common::*;
use ankusa_sink_amqp::AmqpError;
use ankusa_sink_core::{Class, Ctx, Sink};

/// Runs `start_app` and waits for startup on drop.
struct AppStopped;

impl AppStopped {
    async fn new() -> Self {
        let guard = AppStopped;
        rabbitmqctl(&["stop_app"]).await;
        guard
    }
}

impl Drop for AppStopped {
    fn drop(&mut self) {
        rabbitmqctl_blocking(&["start_app"]);
        rabbitmqctl_blocking(&["await_startup"]);
    }
}

#[tokio::test]
async fn recovers_after_broker_restart_without_rebuilding_the_sink() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = exclusive().await;
    let mut admin = Admin::new().await;
    let (x, q) = admin.topic_with_queue("#").await;
    let sink = sink(&x);
    let e = env("hook-restart", "s");
    let ctx = Ctx::for_envelope(&e);
    bounded(sink.deliver(&e, &ctx)).await.unwrap();
    drop(admin);

    {
        let _stopped = AppStopped::new().await;
        // During the outage deliveries fail, transient, and never hang.
        for _ in 0..3 {
            let err = bounded(sink.deliver(&e, &ctx)).await.unwrap_err();
            assert_eq!(err.class(), Class::Transient, "{err}");
        }
        let err = bounded(sink.check()).await.unwrap_err();
        assert_eq!(err.class(), Class::Transient, "{err}");
    }

    // The broker is back: the same sink reconnects by itself.
    deliver_until(&sink, &e, &ctx, |r| r.is_ok()).await.unwrap();
    let admin = Admin::new().await;
    // The durable queue kept the first (persistent) message, plus the new one.
    assert_eq!(admin.count(&q).await, 2);
    admin.delete_queue(&q).await;
    admin.delete_exchange(&x).await;
}

/// Sets the memory high watermark to 0 (a memory alarm: the broker blocks publishers)
/// and restores the previous relative value on drop.
struct MemoryAlarm(String);

impl MemoryAlarm {
    async fn raise() -> Self {
        let before = rabbitmqctl(&["eval", "vm_memory_monitor:get_vm_memory_high_watermark()."])
            .await
            .trim()
            .to_owned();
        // Only a plain fraction is restored as is; anything else gets the default.
        let restore = match before.parse::<f64>() {
            Ok(f) if f > 0.0 => before,
            _ => "0.4".to_owned(),
        };
        let guard = MemoryAlarm(restore);
        rabbitmqctl(&["set_vm_memory_high_watermark", "0"]).await;
        guard
    }
}

impl Drop for MemoryAlarm {
    fn drop(&mut self) {
        rabbitmqctl_blocking(&["set_vm_memory_high_watermark", &self.0]);
    }
}

#[tokio::test]
async fn connection_blocked_is_throttled_and_unblocking_recovers() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = exclusive().await;
    let mut admin = Admin::new().await;
    let (x, q) = admin.topic_with_queue("#").await;
    let sink = sink(&x);
    let e = env("hook-blocked", "s");
    let ctx = Ctx::for_envelope(&e).with_attempt(2);
    bounded(sink.deliver(&e, &ctx)).await.unwrap();

    {
        let _alarm = MemoryAlarm::raise().await;
        // The alarm takes effect within the broker's memory check interval; until then a
        // delivery may still succeed.
        let err = deliver_until(&sink, &e, &ctx, |r| r.is_err())
            .await
            .unwrap_err();
        // A throttle without a stated pause: dispatch draws it.
        assert_eq!(err.class(), Class::Throttled, "{err}");
        assert!(
            matches!(
                err.reason().downcast_ref::<AmqpError>(),
                Some(AmqpError::Blocked)
            ),
            "{err}"
        );
        // While blocked, further deliveries answer throttled at once.
        let err = bounded(sink.deliver(&e, &ctx)).await.unwrap_err();
        assert_eq!(err.class(), Class::Throttled, "{err}");
    }

    // Alarm cleared: the broker unblocks the connection and the same sink delivers.
    deliver_until(&sink, &e, &ctx, |r| r.is_ok()).await.unwrap();
    assert!(admin.count(&q).await >= 2);
    admin.cleanup().await;
}

/// Lowers the broker's `max_message_size` (read when a channel opens) and restores the
/// previous value on drop.
struct MaxMessageSize(String);

impl MaxMessageSize {
    async fn set(bytes: u64) -> Self {
        let before = rabbitmqctl(&["eval", "application:get_env(rabbit, max_message_size)."]).await;
        let restore = before
            .trim()
            .strip_prefix("{ok,")
            .and_then(|s| s.strip_suffix('}'))
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(134_217_728)
            .to_string();
        let guard = MaxMessageSize(restore);
        rabbitmqctl(&[
            "eval",
            &format!("application:set_env(rabbit, max_message_size, {bytes})."),
        ])
        .await;
        guard
    }
}

impl Drop for MaxMessageSize {
    fn drop(&mut self) {
        rabbitmqctl_blocking(&[
            "eval",
            &format!("application:set_env(rabbit, max_message_size, {}).", self.0),
        ]);
    }
}

#[tokio::test]
async fn broker_refusing_the_size_on_publish_is_permanent() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = exclusive().await;
    let mut admin = Admin::new().await;
    let (x, q) = admin.topic_with_queue("#").await;
    let e = ankusa_sink_core::Envelope::builder("hook-406", "s", vec![b'b'; 8192])
        .build()
        .unwrap();
    let ctx = Ctx::for_envelope(&e);
    {
        let _limit = MaxMessageSize::set(4096).await;
        // A sink whose own pre-check allows it: the broker closes the channel with 406.
        let sink = sink(&x);
        let err = bounded(sink.deliver(&e, &ctx)).await.unwrap_err();
        assert_eq!(err.class(), Class::Permanent, "{err}");
        assert_eq!(
            err.reason()
                .downcast_ref::<AmqpError>()
                .and_then(AmqpError::reply_code),
            Some(406), // PRECONDITION_FAILED
            "{err}"
        );
    }
    assert_eq!(admin.count(&q).await, 0);
    admin.cleanup().await;
}

//! The AMQP source against the real broker: reading, acking, releasing, the window,
//! declaring, refusals and reconnecting.

use crate::common::*;
use ankusa_sink_amqp::{AmqpSource, AmqpSourceConfig};
use ankusa_source::{Record, Source, SourceError, SourceOptions};
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use std::time::Duration;

fn options(max_unacked: usize) -> SourceOptions {
    SourceOptions::new(nz(max_unacked), Duration::from_secs(5), nz(4))
}

fn config(queue: &str) -> AmqpSourceConfig {
    AmqpSourceConfig::new(&url(), queue).unwrap()
}

async fn open(queue: &str, max_unacked: usize) -> AmqpSource {
    AmqpSource::new(&config(queue), &options(max_unacked))
        .await
        .expect("the source opens")
}

/// The next record within 10 s.
async fn next(source: &mut AmqpSource) -> Record {
    tokio::time::timeout(Duration::from_secs(10), source.next())
        .await
        .expect("a record within 10 s")
        .expect("not stopped")
        .expect("no error")
}

/// Ready messages of `queue`, once the broker has taken back what a closed consumer held
/// (polled: a channel close is asynchronous on the broker's side).
async fn settles_at(admin: &Admin, queue: &str, want: u32) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let n = admin.count(queue).await;
        if n == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{queue}: {n} ready, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The shared broker's read guard, an admin and a plain queue holding `n` messages `r0`,
/// `r1`, ….
async fn queue_of(n: usize) -> (tokio::sync::RwLockReadGuard<'static, ()>, Admin, String) {
    let g = shared().await;
    let mut admin = Admin::new().await;
    let q = admin.plain_queue().await;
    for i in 0..n {
        admin.publish(&q, format!("r{i}").as_bytes()).await;
    }
    (g, admin, q)
}

/// Closes `source` (5 s of grace), waits for `queue` to hold nothing ready, and cleans up.
async fn close_and_settle_empty(source: AmqpSource, admin: Admin, queue: &str) {
    Box::new(source).close(Duration::from_secs(5)).await;
    settles_at(&admin, queue, 0).await;
    admin.cleanup().await;
}

#[tokio::test]
async fn records_are_read_and_acks_remove_them() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let (_g, admin, q) = queue_of(5).await;
    let mut source = open(&q, 10).await;
    assert!(source.is_connected());
    assert_eq!(
        source.prefetch(),
        4,
        "the default prefetch is the concurrency"
    );
    let d = source.describe();
    assert!(d.contains(&q) && d.contains("127.0.0.1:5672"), "{d}");
    assert!(!d.contains("guest"), "{d}");
    let mut got = Vec::new();
    for _ in 0..5 {
        let r = next(&mut source).await;
        assert!(r.position.starts_with(&format!("{q}#")), "{}", r.position);
        got.push(String::from_utf8(r.payload.clone()).unwrap());
        r.ack.ack();
    }
    got.sort();
    assert_eq!(got, ["r0", "r1", "r2", "r3", "r4"]);
    source.stop();
    assert!(source.next().await.is_none(), "stopped: no more records");
    close_and_settle_empty(source, admin, &q).await;
}

#[tokio::test]
async fn released_records_are_requeued_and_read_again() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let (_g, admin, q) = queue_of(3).await;
    let mut source = open(&q, 10).await;
    let mut first = Vec::new();
    for _ in 0..3 {
        let r = next(&mut source).await;
        first.push(r.payload.clone());
        // Explicitly for one, dropped (the handle's default) for the others.
        if first.len() == 1 {
            r.ack.release();
        } else {
            drop(r);
        }
    }
    let released = std::time::Instant::now();
    let mut again = Vec::new();
    for _ in 0..3 {
        let r = next(&mut source).await;
        again.push(r.payload.clone());
        r.ack.ack();
    }
    // Given back after a pause, not at once (no tight redelivery loop).
    assert!(
        released.elapsed() >= Duration::from_millis(900),
        "{:?}",
        released.elapsed()
    );
    first.sort();
    again.sort();
    assert_eq!(first, again, "the released records come back");
    close_and_settle_empty(source, admin, &q).await;
}

#[tokio::test]
async fn the_window_bounds_unsettled_records_and_close_returns_them() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let (_g, admin, q) = queue_of(5).await;
    let mut source = open(&q, 2).await;
    let a = next(&mut source).await;
    let b = next(&mut source).await;
    let third = tokio::time::timeout(Duration::from_millis(300), source.next()).await;
    assert!(third.is_err(), "two records unsettled: the window is full");
    a.ack.ack();
    let c = next(&mut source).await;
    // b and c are not settled when the source closes: back to the queue, with the two
    // never handed out.
    source.stop();
    let t0 = std::time::Instant::now();
    let (b, c) = (b, c);
    let closing = tokio::spawn(Box::new(source).close(Duration::from_millis(500)));
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(b);
    closing.await.unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "close waits at most its grace for c"
    );
    drop(c);
    settles_at(&admin, &q, 4).await;
    admin.cleanup().await;
}

#[tokio::test]
async fn a_missing_queue_is_a_config_error() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let admin = Admin::new().await;
    let q = unique("absent");
    let err = AmqpSource::new(&config(&q), &options(4))
        .await
        .expect_err("the queue does not exist");
    let SourceError::Config(text) = &err else {
        panic!("not a config error: {err:?}")
    };
    assert!(
        text.contains(&q) && text.contains("does not exist"),
        "{text}"
    );
    assert!(text.contains("declare = true"), "{text}");
    assert!(!text.contains("guest"), "{text}");
    assert!(!admin.exists(&q).await, "a passive check creates nothing");
    admin.cleanup().await;
}

#[tokio::test]
async fn a_refused_login_is_a_config_error_without_the_password() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let (_g, admin, q) = queue_of(0).await;
    let cfg = AmqpSourceConfig::new(&url_with("guest", "wrong-s3cr3t", "/"), &q).unwrap();
    let err = AmqpSource::new(&cfg, &options(4))
        .await
        .expect_err("the login is refused");
    let SourceError::Config(text) = &err else {
        panic!("not a config error: {err:?}")
    };
    assert!(text.contains("refused the login"), "{text}");
    assert!(!text.contains("wrong-s3cr3t"), "{text}");
    assert!(!format!("{cfg:?}").contains("wrong-s3cr3t"));
    admin.cleanup().await;
}

#[tokio::test]
async fn declare_creates_a_durable_queue() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let mut admin = Admin::new().await;
    let q = unique("declared");
    admin.forget_later(&q);
    let cfg = config(&q).with_declare(true);
    let mut source = AmqpSource::new(&cfg, &options(4)).await.unwrap();
    assert!(admin.exists(&q).await);
    // Declaring it durable again with the same (no) arguments agrees: it is durable (a
    // transient queue would refuse with 406 PRECONDITION_FAILED).
    let conn = lapin::Connection::connect(&url(), lapin::ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.queue_declare(
        q.as_str().into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("the queue is durable");
    admin.publish(&q, b"hello").await;
    let r = next(&mut source).await;
    assert_eq!(r.payload, b"hello");
    r.ack.ack();
    Box::new(source).close(Duration::from_secs(5)).await;
    // Declaring over an existing queue is fine too.
    let again = AmqpSource::new(&cfg, &options(4)).await.unwrap();
    Box::new(again).close(Duration::from_secs(1)).await;
    settles_at(&admin, &q, 0).await;
    let _ = conn.close(200, "OK".into()).await;
    admin.cleanup().await;
}

/// `rabbitmqctl close_connection` for every connection whose name mentions `queue`.
async fn close_connections_of(queue: &str) -> usize {
    let out = rabbitmqctl(&["list_connections", "pid", "client_properties"]).await;
    let mut n = 0;
    for line in out.lines().filter(|l| l.contains(queue)) {
        let pid = line.split_whitespace().next().expect("a pid");
        rabbitmqctl(&["close_connection", pid, "test: connection closed"]).await;
        n += 1;
    }
    n
}

#[tokio::test]
async fn a_lost_connection_is_reopened_and_its_records_redelivered() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let (_g, admin, q) = queue_of(0).await;
    admin.publish(&q, b"one").await;
    admin.publish(&q, b"two").await;
    let mut source = open(&q, 10).await;
    let held = next(&mut source).await;
    let held_payload = held.payload.clone();
    assert_eq!(close_connections_of(&q).await, 1, "the source's connection");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while source.is_connected() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the close is noticed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Settling a record of the closed connection does nothing (and does not panic).
    held.ack.ack();
    let mut got = Vec::new();
    for _ in 0..2 {
        let r = next(&mut source).await;
        got.push(r.payload.clone());
        r.ack.ack();
    }
    got.sort();
    assert_eq!(got, [b"one".to_vec(), b"two".to_vec()]);
    assert!(got.contains(&held_payload), "the held record came back");
    assert!(source.is_connected());
    close_and_settle_empty(source, admin, &q).await;
}

#[tokio::test]
async fn an_unreachable_broker_is_waited_for_not_an_error() {
    let _g = shared().await;
    // A loopback port nothing listens on.
    let port = ankusa_sink_testkit::support::free_port();
    let cfg = AmqpSourceConfig::new(
        &format!("amqp://guest:unreachable-s3cr3t@127.0.0.1:{port}/%2f"),
        "q",
    )
    .unwrap()
    .with_connect_timeout(Duration::from_millis(500));
    let logs = ankusa_sink_testkit::support::LogCapture::new();
    let guard = logs.set_default();
    let mut source = AmqpSource::new(&cfg, &options(4))
        .await
        .expect("not reachable now is not a config error");
    assert!(!source.is_connected());
    let waited = tokio::time::timeout(Duration::from_millis(700), source.next()).await;
    assert!(waited.is_err(), "next keeps trying: {waited:?}");
    source.stop();
    assert!(source.next().await.is_none());
    Box::new(source).close(Duration::from_secs(1)).await;
    drop(guard);
    let lines: Vec<String> = logs.lines().iter().map(ToString::to_string).collect();
    let warned = lines
        .iter()
        .filter(|l| l.starts_with("WARN ") && l.contains("cannot open the consumer"))
        .count();
    assert!(warned >= 2, "each failed attempt is logged: {lines:?}");
    assert!(
        lines.iter().all(|l| !l.contains("unreachable-s3cr3t")),
        "{lines:?}"
    );
}

#[tokio::test]
async fn a_queue_deleted_while_consuming_ends_the_source_with_a_config_error() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let (_g, admin, q) = queue_of(0).await;
    admin.publish(&q, b"one").await;
    let mut source = open(&q, 4).await;
    let r = next(&mut source).await;
    r.ack.ack();
    admin.delete_queue(&q).await;
    // The broker cancels the consumer; reopening finds no queue.
    let end = tokio::time::timeout(Duration::from_secs(10), source.next())
        .await
        .expect("an answer within 10 s")
        .expect("not stopped");
    match end {
        Err(SourceError::Config(text)) => assert!(text.contains("does not exist"), "{text}"),
        other => panic!("want a config error: {other:?}"),
    }
    Box::new(source).close(Duration::from_secs(1)).await;
    admin.cleanup().await;
}

/// Asks `lag` until it answers `want`, within 10 s (a delivery or an ack reaches the
/// queue's count asynchronously); the answers seen.
async fn lag_reaches(lag: &dyn ankusa_source::Lag, want: u64) -> Vec<Option<u64>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while seen.last() != Some(&Some(want)) && tokio::time::Instant::now() < deadline {
        seen.push(lag.lag().await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen
}

#[tokio::test]
async fn lag_is_the_queue_s_ready_messages() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let (_g, admin, q) = queue_of(10).await;
    // A prefetch of 3 and a window of 3: the broker gives out three and keeps seven ready.
    let o = SourceOptions::new(nz(3), Duration::from_secs(5), nz(3));
    let mut source = AmqpSource::new(&config(&q), &o).await.unwrap();
    let lag = source.lag().expect("an AMQP source reports its lag");
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(next(&mut source).await);
    }
    let seen = lag_reaches(lag.as_ref(), 7).await;
    assert_eq!(
        seen.last(),
        Some(&Some(7)),
        "ten published, three out: {seen:?}"
    );

    // The handle needs no access to the source: the rest is read in another task while
    // the lag is asked here (each question on a channel of its own).
    let reader = tokio::spawn(async move {
        for r in held {
            r.ack.ack();
        }
        for _ in 3..10 {
            next(&mut source).await.ack.ack();
        }
        source
    });
    let seen = lag_reaches(lag.as_ref(), 0).await;
    assert_eq!(seen.last(), Some(&Some(0)), "{seen:?}");
    assert!(
        seen.iter().all(|n| n.is_some_and(|n| n <= 7)),
        "never more than was left: {seen:?}"
    );
    let source = reader.await.expect("the reader read everything");
    assert!(
        source.is_connected(),
        "the questions left the consumer alone"
    );
    Box::new(source).close(Duration::from_secs(5)).await;
    settles_at(&admin, &q, 0).await;
    assert_eq!(lag.lag().await, None, "the source's connection is closed");
    admin.cleanup().await;
}

//! The JetStream source against a real `nats-server`: the shared one for streams and
//! consumers, private ones for credentials and a lost connection.

use crate::common::*;
use ankusa_sink_nats::{NatsSource, NatsSourceConfig};
use ankusa_sink_testkit::ankusa_sink_core::Secret;
use ankusa_source::{Record, Source, SourceError, SourceOptions};
use async_nats::jetstream::{self, consumer};
use std::num::NonZeroUsize;
use std::time::Duration;

fn options(max_unacked: usize, attempt: Duration) -> SourceOptions {
    SourceOptions::new(
        NonZeroUsize::new(max_unacked).unwrap(),
        attempt,
        NonZeroUsize::new(8).unwrap(),
    )
}

fn config(url: &str, stream: &str, consumer: &str) -> NatsSourceConfig {
    NatsSourceConfig::new(url, stream, consumer)
        .unwrap()
        .with_timeout(Duration::from_secs(2))
        .with_connect_timeout(Duration::from_secs(2))
}

/// A fresh stream on `url`, and a consumer name.
async fn fresh(url: &str, prefix: &str) -> (String, String, String) {
    let (stream, subject) = names(prefix);
    create_stream(url, &stream, &subject, Limits::default()).await;
    (stream, subject, format!("fwd_{prefix}"))
}

async fn publish(url: &str, subject: &str, payloads: impl IntoIterator<Item = Vec<u8>>) {
    let js = jetstream::new(raw(url).await);
    for p in payloads {
        js.publish(subject.to_owned(), p.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
}

async fn consumer_info(url: &str, stream: &str, name: &str) -> consumer::Info {
    let js = jetstream::new(raw(url).await);
    js.get_stream(stream)
        .await
        .unwrap()
        .consumer_info(name)
        .await
        .unwrap()
}

async fn open(config: &NatsSourceConfig, o: &SourceOptions) -> Result<NatsSource, SourceError> {
    NatsSource::open(config, o).await
}

/// A fresh stream on `url` holding `payloads`, and a source on a new consumer of it:
/// (stream, subject, consumer name, source).
async fn fresh_source(
    url: &str,
    prefix: &str,
    payloads: impl IntoIterator<Item = Vec<u8>>,
    o: &SourceOptions,
) -> (String, String, String, NatsSource) {
    let (stream, subject, name) = fresh(url, prefix).await;
    publish(url, &subject, payloads).await;
    let s = open(&config(url, &stream, &name), o).await.unwrap();
    (stream, subject, name, s)
}

/// The next record within `limit`, or `None`.
async fn next_within(source: &mut NatsSource, limit: Duration) -> Option<Record> {
    match tokio::time::timeout(limit, source.next()).await {
        Ok(Some(Ok(r))) => Some(r),
        Ok(Some(Err(e))) => panic!("source error: {e}"),
        Ok(None) => panic!("the source ended"),
        Err(_) => None,
    }
}

/// Whether `source` hands out nothing within `limit`.
async fn quiet_for(source: &mut NatsSource, limit: Duration) -> bool {
    next_within(source, limit).await.is_none()
}

/// The config error that opening `config` (attempt timeout `attempt`) fails with.
async fn refused(config: &NatsSourceConfig, attempt: Duration) -> String {
    match open(config, &options(8, attempt)).await {
        Err(SourceError::Config(m)) => m,
        Err(e) => panic!("not a config error: {e:?}"),
        Ok(s) => panic!("opened: {s:?}"),
    }
}

/// Closes `source`, then checks that its consumer holds nothing pending or unacked; the
/// consumer's info, for further checks.
async fn close_settled(
    source: NatsSource,
    within: Duration,
    url: &str,
    stream: &str,
    name: &str,
) -> consumer::Info {
    Box::new(source).close(within).await;
    let info = consumer_info(url, stream, name).await;
    assert_eq!((info.num_pending, info.num_ack_pending), (0, 0));
    info
}

#[tokio::test]
async fn a_missing_stream_is_a_config_error() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let (stream, _) = names("nostream");
    let m = refused(&config(SHARED_URL, &stream, "fwd"), Duration::from_secs(1)).await;
    assert!(
        m.contains("stream does not exist") && m.contains(&stream),
        "{m}"
    );
}

#[tokio::test]
async fn refused_credentials_are_a_config_error_and_good_ones_read() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let server = private("authorization { user: ankusa, password: good-pass-2 }").await;
    let admin = format!("nats://ankusa:good-pass-2@127.0.0.1:{}", server.port);
    let (stream, subject, name) = fresh(&admin, "srcauth").await;
    let bad = format!("nats://ankusa:wrong-pass-9@127.0.0.1:{}", server.port);
    let m = refused(&config(&bad, &stream, &name), Duration::from_secs(1)).await;
    assert!(m.to_lowercase().contains("author"), "{m}");
    assert!(!m.contains("wrong-pass-9"), "{m}");
    let good = config(&server.url(), &stream, &name)
        .with_user_password("ankusa", Secret::new("good-pass-2"))
        .unwrap();
    publish(&admin, &subject, [b"one".to_vec()]).await;
    let mut s = open(&good, &options(8, Duration::from_secs(1)))
        .await
        .unwrap();
    assert!(!s.describe().contains("good-pass-2"), "{}", s.describe());
    let r = next_within(&mut s, Duration::from_secs(10)).await.unwrap();
    assert_eq!(r.payload, b"one");
    r.ack.ack();
    close_settled(s, Duration::from_secs(2), &admin, &stream, &name).await;
}

#[tokio::test]
async fn existing_consumers_that_cannot_work_are_refused() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let (stream, subject, _) = fresh(SHARED_URL, "srcrefuse").await;
    let js = jetstream::new(raw(SHARED_URL).await);
    let s = js.get_stream(&stream).await.unwrap();
    // ack_wait of 5 s against an attempt timeout of 10 s.
    s.create_consumer(consumer::pull::Config {
        durable_name: Some("short".into()),
        ack_wait: Duration::from_secs(5),
        ..Default::default()
    })
    .await
    .unwrap();
    let m = refused(
        &config(SHARED_URL, &stream, "short"),
        Duration::from_secs(10),
    )
    .await;
    assert!(
        m.contains("ack_wait (5000 ms)") && m.contains("attempt timeout (10000 ms)"),
        "{m}"
    );
    // The same consumer is fine for a 2 s attempt timeout.
    let ok = open(
        &config(SHARED_URL, &stream, "short"),
        &options(8, Duration::from_secs(2)),
    )
    .await
    .unwrap();
    Box::new(ok).close(Duration::from_secs(1)).await;
    s.create_consumer(consumer::pull::Config {
        durable_name: Some("ackall".into()),
        ack_policy: consumer::AckPolicy::All,
        ack_wait: Duration::from_secs(60),
        ..Default::default()
    })
    .await
    .unwrap();
    let m = refused(
        &config(SHARED_URL, &stream, "ackall"),
        Duration::from_secs(1),
    )
    .await;
    assert!(m.contains("explicit acks"), "{m}");
    s.create_consumer(consumer::push::Config {
        durable_name: Some("pushed".into()),
        deliver_subject: format!("{subject}.deliver"),
        ack_wait: Duration::from_secs(60),
        ..Default::default()
    })
    .await
    .unwrap();
    let m = refused(
        &config(SHARED_URL, &stream, "pushed"),
        Duration::from_secs(1),
    )
    .await;
    assert!(m.contains("push consumer"), "{m}");
    // An ack_wait_ms that is not longer than the attempt timeout: refused before connecting.
    let m = refused(
        &config(SHARED_URL, &stream, "new").with_ack_wait(Duration::from_secs(2)),
        Duration::from_secs(2),
    )
    .await;
    assert!(m.contains("ack_wait_ms (2000 ms)"), "{m}");
    delete_stream(SHARED_URL, &stream).await.unwrap();
}

#[tokio::test]
async fn records_are_read_in_order_and_acks_empty_the_consumer() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let o = options(64, Duration::from_secs(5));
    let payloads = (0..20).map(|i| format!("m{i}").into_bytes());
    let (stream, _, name, mut s) = fresh_source(SHARED_URL, "srcread", payloads, &o).await;
    assert_eq!(
        s.describe(),
        format!("nats stream {stream} consumer {name} on nats://127.0.0.1:4222")
    );
    // The consumer was created: durable, explicit acks, ack_wait max(2 x 5 s, 30 s).
    let info = consumer_info(SHARED_URL, &stream, &name).await;
    assert_eq!(info.config.durable_name.as_deref(), Some(name.as_str()));
    assert_eq!(info.config.ack_policy, consumer::AckPolicy::Explicit);
    assert_eq!(info.config.ack_wait, Duration::from_secs(30));
    assert!(info.config.max_ack_pending >= 64);
    let mut records = Vec::new();
    for i in 0..20 {
        let r = next_within(&mut s, Duration::from_secs(10)).await.unwrap();
        assert_eq!(r.payload, format!("m{i}").into_bytes());
        assert_eq!(r.position, format!("{stream}/{name}@{}", i + 1));
        records.push(r);
    }
    let info = consumer_info(SHARED_URL, &stream, &name).await;
    assert_eq!((info.num_pending, info.num_ack_pending), (0, 20));
    for r in records {
        r.ack.ack();
    }
    // Nothing more: the next pull waits.
    assert!(quiet_for(&mut s, Duration::from_millis(300)).await);
    let info = close_settled(s, Duration::from_secs(2), SHARED_URL, &stream, &name).await;
    assert_eq!(info.num_redelivered, 0);
    // A second forwarder binds the same consumer and finds nothing left.
    let mut again = open(&config(SHARED_URL, &stream, &name), &o).await.unwrap();
    assert!(quiet_for(&mut again, Duration::from_millis(500)).await);
    Box::new(again).close(Duration::from_secs(1)).await;
    delete_stream(SHARED_URL, &stream).await.unwrap();
}

#[tokio::test]
async fn a_released_record_is_redelivered_at_once() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let o = options(8, Duration::from_secs(5));
    let (stream, _, name, mut s) =
        fresh_source(SHARED_URL, "srcnak", [b"again".to_vec()], &o).await;
    let r = next_within(&mut s, Duration::from_secs(10)).await.unwrap();
    let position = r.position.clone();
    r.ack.release();
    // Well before ack_wait (30 s): the -NAK gave it back.
    let r = next_within(&mut s, Duration::from_secs(5))
        .await
        .expect("redelivered after -NAK");
    assert_eq!(r.payload, b"again");
    assert_eq!(r.position, position);
    // Dropping the handle releases too.
    drop(r);
    let r = next_within(&mut s, Duration::from_secs(5))
        .await
        .expect("redelivered after a dropped handle");
    r.ack.ack();
    let info = close_settled(s, Duration::from_secs(2), SHARED_URL, &stream, &name).await;
    assert_eq!(info.num_redelivered, 0, "acked: nothing left to redeliver");
    delete_stream(SHARED_URL, &stream).await.unwrap();
}

#[tokio::test]
async fn in_progress_acks_hold_records_past_ack_wait_and_stop_at_close() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let (stream, subject, name) = fresh(SHARED_URL, "srcwpi").await;
    publish(SHARED_URL, &subject, [b"slow".to_vec(), b"queued".to_vec()]).await;
    // ack_wait 1.5 s, attempts of at most 0.5 s: +WPI every 0.5 s.
    let c = config(SHARED_URL, &stream, &name).with_ack_wait(Duration::from_millis(1500));
    let o = options(8, Duration::from_millis(500));
    let mut a = open(&c, &o).await.unwrap();
    let mut b = open(&c, &o).await.unwrap();
    // `a` hands out one record; the other was pulled too and waits in its queue.
    let held = next_within(&mut a, Duration::from_secs(10)).await.unwrap();
    assert_eq!(held.payload, b"slow");
    // Three ack_waits pass: `b`, on the same consumer, gets neither, the one handed out
    // nor the one queued.
    assert!(
        quiet_for(&mut b, Duration::from_millis(4500)).await,
        "redelivered while in progress"
    );
    let info = consumer_info(SHARED_URL, &stream, &name).await;
    assert_eq!(info.num_ack_pending, 2);
    assert_eq!(info.num_redelivered, 0);
    // `a` closes with one record unsettled (a forwarder cut off) and one never handed out:
    // the queued one is given back at once (-NAK); for the other the in-progress acks stop,
    // and after ack_wait the broker gives it to `b`.
    Box::new(a).close(Duration::from_millis(200)).await;
    // The queued one comes first although its sequence is higher: it was given back at
    // once, while the other waited out its ack_wait (expired records are redelivered in
    // sequence order).
    let first = next_within(&mut b, Duration::from_secs(10)).await.unwrap();
    assert_eq!(first.payload, b"queued");
    let second = next_within(&mut b, Duration::from_secs(10))
        .await
        .expect("redelivered after ack_wait");
    assert_eq!(second.payload, b"slow");
    first.ack.ack();
    second.ack.ack();
    // The stale handle of the closed source settles into nothing.
    held.ack.ack();
    close_settled(b, Duration::from_secs(2), SHARED_URL, &stream, &name).await;
    delete_stream(SHARED_URL, &stream).await.unwrap();
}

/// Delete the durable consumer `name` of `stream` behind the source's back.
async fn delete_consumer(stream: &str, name: &str) {
    let js = jetstream::new(raw(SHARED_URL).await);
    js.get_stream(stream)
        .await
        .unwrap()
        .delete_consumer(name)
        .await
        .unwrap();
}

/// `s` ends with the config error of a deleted consumer within 15 s; then it is closed and
/// `stream` deleted.
async fn ends_with_consumer_deleted(mut s: NatsSource, stream: &str) {
    match tokio::time::timeout(Duration::from_secs(15), s.next()).await {
        Ok(Some(Err(SourceError::Config(m)))) => {
            assert!(m.contains("consumer was deleted"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    Box::new(s).close(Duration::from_secs(1)).await;
    delete_stream(SHARED_URL, stream).await.unwrap();
}

#[tokio::test]
async fn a_deleted_consumer_ends_the_source_with_a_config_error() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let o = options(8, Duration::from_secs(1));
    let (stream, _, name, s) = fresh_source(SHARED_URL, "srcdel", [], &o).await;
    delete_consumer(&stream, &name).await;
    ends_with_consumer_deleted(s, &stream).await;
}

#[tokio::test]
async fn a_consumer_deleted_while_no_pull_waits_ends_the_source_with_a_config_error() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    // A window of one: the only record fills its pull, so no pull waits at the server when
    // the consumer goes, and nothing answers the next one (no 409, no 408).
    let o = options(1, Duration::from_secs(1));
    let (stream, _, name, mut s) =
        fresh_source(SHARED_URL, "srcdelidle", [b"one".to_vec()], &o).await;
    let held = next_within(&mut s, Duration::from_secs(10)).await.unwrap();
    delete_consumer(&stream, &name).await;
    held.ack.ack();
    ends_with_consumer_deleted(s, &stream).await;
}

#[tokio::test]
async fn the_window_bounds_what_is_pulled() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let o = options(3, Duration::from_secs(5));
    let payloads = (0..10).map(|i| format!("w{i}").into_bytes());
    let (stream, _, name, mut s) = fresh_source(SHARED_URL, "srcwindow", payloads, &o).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(next_within(&mut s, Duration::from_secs(10)).await.unwrap());
    }
    assert!(
        quiet_for(&mut s, Duration::from_millis(500)).await,
        "a fourth record while three are unsettled"
    );
    // Nothing pulled beyond the window: the broker delivered exactly three.
    let info = consumer_info(SHARED_URL, &stream, &name).await;
    assert_eq!((info.num_ack_pending, info.num_pending), (3, 7));
    held.remove(0).ack.ack();
    held.push(next_within(&mut s, Duration::from_secs(5)).await.unwrap());
    let mut seen = 4;
    while seen < 10 {
        held.remove(0).ack.ack();
        held.push(next_within(&mut s, Duration::from_secs(5)).await.unwrap());
        seen += 1;
        let info = consumer_info(SHARED_URL, &stream, &name).await;
        assert!(info.num_ack_pending <= 3, "{}", info.num_ack_pending);
    }
    for r in held {
        r.ack.ack();
    }
    close_settled(s, Duration::from_secs(2), SHARED_URL, &stream, &name).await;
    delete_stream(SHARED_URL, &stream).await.unwrap();
}

#[tokio::test]
async fn the_byte_budget_bounds_what_is_pulled_and_a_larger_record_comes_alone() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    // 3,500 bytes: three records of 1,000 (plus the subject JetStream counts) fit, a
    // fourth does not; the window's 100 places would take them all.
    let o = options(100, Duration::from_secs(5))
        .with_max_unacked_bytes(NonZeroUsize::new(3_500).unwrap());
    let payloads: Vec<Vec<u8>> = (0..9u8)
        .map(|i| vec![b'a' + i; if i == 6 { 5_000 } else { 1_000 }])
        .collect();
    let (stream, _, name, mut s) = fresh_source(SHARED_URL, "srcbytes", payloads.clone(), &o).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(next_within(&mut s, Duration::from_secs(10)).await.unwrap());
    }
    // The pull asked for the free bytes only: the broker delivered three, not nine.
    let info = consumer_info(SHARED_URL, &stream, &name).await;
    assert_eq!((info.num_ack_pending, info.num_pending), (3, 6));
    // Settled one by one, every record comes, the 5,000-byte one (over the budget) alone.
    let mut seen: Vec<Vec<u8>> = Vec::new();
    while seen.len() < payloads.len() {
        if held.is_empty() {
            held.push(next_within(&mut s, Duration::from_secs(10)).await.unwrap());
        }
        let r = held.remove(0);
        if r.payload.len() == 5_000 {
            let info = consumer_info(SHARED_URL, &stream, &name).await;
            assert_eq!(info.num_ack_pending, 1, "the large record is held alone");
        }
        seen.push(r.payload.clone());
        r.ack.ack();
    }
    assert_eq!(seen, payloads, "in order, each once");
    close_settled(s, Duration::from_secs(2), SHARED_URL, &stream, &name).await;
    delete_stream(SHARED_URL, &stream).await.unwrap();
}

#[tokio::test]
async fn a_lost_connection_is_survived() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let server = private("").await;
    let url = server.url();
    let o = options(8, Duration::from_secs(1));
    let (stream, subject, name, mut s) =
        fresh_source(&url, "srclost", [b"before".to_vec()], &o).await;
    let r = next_within(&mut s, Duration::from_secs(10)).await.unwrap();
    assert_eq!(r.payload, b"before");
    r.ack.ack();
    // Let the ack reach the server before it goes away.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let server = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .unwrap();
    // JetStream may take a moment to recover its streams after the restart.
    let js = jetstream::new(raw(&url).await);
    let mut tries = 0;
    while let Err(e) = async { js.publish(subject.clone(), "after".into()).await?.await }.await {
        tries += 1;
        assert!(tries < 100, "JetStream did not come back: {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = next_within(&mut s, Duration::from_secs(30))
        .await
        .expect("reading resumes after the reconnect");
    assert_eq!(r.payload, b"after");
    r.ack.ack();
    close_settled(s, Duration::from_secs(5), &url, &stream, &name).await;
    drop(server);
}

#[tokio::test]
async fn lag_is_what_the_consumer_has_not_delivered_yet() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let o = options(3, Duration::from_secs(5));
    let payloads = (0..10).map(|i| format!("l{i}").into_bytes());
    let (stream, _, name, mut s) = fresh_source(SHARED_URL, "srclag", payloads, &o).await;
    let lag = s.lag().expect("a JetStream source reports its lag");
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(next_within(&mut s, Duration::from_secs(10)).await.unwrap());
    }
    assert!(
        quiet_for(&mut s, Duration::from_millis(500)).await,
        "the window is full"
    );
    assert_eq!(lag.lag().await, Some(7), "ten published, three delivered");

    // The handle needs no access to the source: the rest is read in another task while
    // the lag is asked here, and falls to 0 once everything was delivered.
    let reader = tokio::spawn(async move {
        for r in held {
            r.ack.ack();
        }
        for _ in 3..10 {
            let r = next_within(&mut s, Duration::from_secs(5)).await.unwrap();
            r.ack.ack();
        }
        s
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while seen.last() != Some(&Some(0)) && tokio::time::Instant::now() < deadline {
        seen.push(lag.lag().await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen.last(), Some(&Some(0)), "{seen:?}");
    assert!(
        seen.iter().all(|n| n.is_some_and(|n| n <= 7)),
        "never more than was left: {seen:?}"
    );
    let s = reader.await.expect("the reader read everything");
    close_settled(s, Duration::from_secs(5), SHARED_URL, &stream, &name).await;
    assert_eq!(lag.lag().await, Some(0));
    delete_stream(SHARED_URL, &stream).await.unwrap();
    assert_eq!(lag.lag().await, None, "the stream is gone");
}

//! `Source::lag` against the real broker: the group's lag over its assigned partitions,
//! asked while the source reads.

use crate::common::*;
use ankusa_sink_core::{Ctx, Sink};
use ankusa_sink_kafka::{KafkaSource, KafkaSourceConfig};
use ankusa_source::{Lag, Record, Source, SourceOptions};
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

const N: u64 = 20;

/// The next record within 20 s (the first one waits for the group join).
async fn next(source: &mut KafkaSource) -> Record {
    tokio::time::timeout(Duration::from_secs(60), source.next())
        .await
        .expect("a record within 20 s")
        .expect("not stopped")
        .expect("no error")
}

/// Asks `lag` until it answers `want(n)`, within `within`; the last answer.
async fn lag_until(lag: &dyn Lag, within: Duration, want: impl Fn(u64) -> bool) -> Option<u64> {
    let deadline = Instant::now() + within;
    loop {
        let n = lag.lag().await;
        if n.is_some_and(&want) || Instant::now() >= deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lag_counts_what_the_group_has_not_committed_and_falls_to_zero() {
    ankusa_sink_testkit::require_broker!("Kafka", broker_addr());
    let topic = Topic::new("lag", 2).await;
    // Keyed by id: the records spread over both partitions.
    let sink = ankusa_sink_kafka::KafkaSink::new(topic.config().with_key("{id}").unwrap()).unwrap();
    for i in 0..N {
        let env = envelope(&format!("l{i}"), "{}");
        sink.deliver(&env, &Ctx::for_envelope(&env)).await.unwrap();
    }
    // Short session timeouts: the broker completes the group's first join sooner.
    let config = KafkaSourceConfig::new(&topic.brokers, &topic.name, unique_topic("lag-group"))
        .and_then(|c| c.with_property("session.timeout.ms", "6000"))
        .and_then(|c| c.with_property("heartbeat.interval.ms", "500"))
        .unwrap();
    let window = NonZeroUsize::new(3).unwrap();
    let options = SourceOptions::new(window, Duration::from_secs(5), NonZeroUsize::MIN);
    let mut source = KafkaSource::new(&config, &options).expect("the source opens");
    let lag = source.lag().expect("a Kafka source reports its lag");

    // The window holds 3 records, none acknowledged: nothing is committed past them, and
    // what librdkafka fetched ahead is not read either.
    let mut held = Vec::new();
    for _ in 0..window.get() {
        held.push(next(&mut source).await);
    }
    let before = lag_until(lag.as_ref(), Duration::from_secs(10), |n| n > 0).await;
    assert!(
        before.is_some_and(|n| n > 0 && n <= N),
        "lag with {} of {N} read and none acknowledged: {before:?}",
        window.get()
    );

    // The handle needs no access to the source: the rest is read and acknowledged in
    // another task while the lag is asked here.
    let reader = tokio::spawn(async move {
        for r in held {
            r.ack.ack();
        }
        for _ in window.get()..N as usize {
            next(&mut source).await.ack.ack();
        }
        source
    });
    let after = lag_until(lag.as_ref(), Duration::from_secs(30), |n| n == 0).await;
    let source = reader.await.expect("the reader read everything");
    assert_eq!(
        after,
        Some(0),
        "every record read, acknowledged and committed"
    );

    Box::new(source).close(Duration::from_secs(5)).await;
    assert_eq!(lag.lag().await, None, "the source is gone: nothing to ask");
    topic.cleanup().await;
}

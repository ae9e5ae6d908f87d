//! Unreachable and restarted brokers, on private tansu instances.

use crate::common::*;
use ankusa_sink_core::{Class, Ctx, Sink};
use ankusa_sink_kafka::{KafkaConfig, KafkaSink};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_unreachable_broker_fails_transient_within_the_produce_timeout() {
    crate::common::trace();
    let cfg = KafkaConfig::new(format!("127.0.0.1:{}", closed_port()), "t")
        .with_produce_timeout(Duration::from_millis(1_000));
    let sink = KafkaSink::new(cfg).unwrap();
    let env = envelope("down", "{}");
    let started = Instant::now();
    let f = expect_err(sink.deliver(&env, &Ctx::for_envelope(&env)).await);
    let took = started.elapsed();
    assert_eq!(f.class(), Class::Transient, "{f}");
    // librdkafka scans for timed-out records once a second; the sink's own bound is the
    // produce timeout plus a 5 s grace for the delivery report.
    assert!(
        took < Duration::from_millis(1_000) + Duration::from_secs(5),
        "took {took:?}"
    );
    eprintln!("unreachable broker: transient after {took:?} (produce timeout 1 s)");
    let f = sink.check().await.unwrap_err();
    assert_eq!(f.class(), Class::Transient, "{f}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovers_after_a_broker_restart() {
    crate::common::trace();
    let mut broker = Tansu::start(&[]);
    let topic = unique_topic("restart");
    create_topic(&broker.addr(), &topic, 1).await;
    let sink = KafkaSink::new(
        KafkaConfig::new(broker.addr(), &topic).with_produce_timeout(Duration::from_secs(3)),
    )
    .unwrap();
    let env = envelope("before", "{}");
    sink.deliver(&env, &Ctx::for_envelope(&env)).await.unwrap();

    broker.stop();
    let env = envelope("during", "{}");
    let f = expect_err(sink.deliver(&env, &Ctx::for_envelope(&env)).await);
    assert_eq!(f.class(), Class::Transient, "{f}");

    // Same port; memory storage lost the topic, so create it again.
    broker.restart();
    create_topic(&broker.addr(), &topic, 1).await;
    let env = envelope("after", "{}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match sink.deliver(&env, &Ctx::for_envelope(&env)).await {
            Ok(()) => break,
            Err(f) => {
                assert!(
                    !f.class().is_permanent() || f.class() == Class::Config,
                    "{f}"
                );
                assert!(Instant::now() < deadline, "no recovery: {f}");
            }
        }
    }
    let got = read_back(&broker.addr(), &topic, 1, Duration::from_secs(10));
    assert_eq!(got.len(), 1);
    assert_eq!(
        ankusa_sink_core::message::decode(&got[0].value).unwrap().id,
        "after"
    );
}

/// A broker that demands authentication refuses made-up SASL credentials: config, not a
/// retry loop, and the password appears nowhere in the failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_sasl_authentication_failure_is_config() {
    crate::common::trace();
    let broker = Tansu::start(&["--authentication"]);
    for mechanism in [
        ankusa_sink_kafka::SaslMechanism::Plain,
        ankusa_sink_kafka::SaslMechanism::ScramSha256,
    ] {
        let sink = KafkaSink::new(
            KafkaConfig::new(broker.addr(), "t")
                .with_produce_timeout(Duration::from_millis(2_000))
                .with_sasl(ankusa_sink_kafka::SaslConfig::new(
                    mechanism,
                    "nobody",
                    "planted-sasl-secret",
                )),
        )
        .unwrap();
        let env = envelope("sasl", "{}");
        let f = expect_err(sink.deliver(&env, &Ctx::for_envelope(&env)).await);
        eprintln!("{mechanism:?} deliver -> {f}");
        assert_eq!(f.class(), Class::Config, "{mechanism:?}: {f}");
        assert!(!format!("{f} {f:?}").contains("planted-sasl-secret"));
        let f = sink.check().await.unwrap_err();
        eprintln!("{mechanism:?} check -> {f}");
        assert_eq!(f.class(), Class::Config, "{mechanism:?}: {f}");
    }
}

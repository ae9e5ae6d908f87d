//! Unreachable and restarted brokers, on private tansu instances.

use crate::common::*;
use ankusa_sink_core::{Class, Ctx, Sink};
use ankusa_sink_kafka::{KafkaConfig, KafkaSink};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_unreachable_broker_fails_transient_within_the_produce_timeout() {
    crate::common::trace();
    let cfg = KafkaConfig::new(format!("127.0.0.1:{}", closed_port()), "t")
        .unwrap()
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
    ankusa_sink_testkit::require_broker!("Kafka", broker_addr());
    crate::common::trace();
    let mut broker = Tansu::start(&[]);
    let topic = unique_topic("restart");
    create_topic(&broker.addr(), &topic, 1).await;
    let sink = KafkaSink::new(
        KafkaConfig::new(broker.addr(), &topic)
            .unwrap()
            .with_produce_timeout(Duration::from_secs(3)),
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
    assert_eq!(ankusa_message::decode(&got[0].value).unwrap().id, "after");
}

/// A broker that demands authentication refuses made-up SASL credentials: config, not a
/// retry loop, and the password appears nowhere in the failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_sasl_authentication_failure_is_config() {
    ankusa_sink_testkit::require_broker!("Kafka", broker_addr());
    crate::common::trace();
    let broker = Tansu::start(&["--authentication"]);
    for mechanism in [
        ankusa_sink_kafka::SaslMechanism::Plain,
        ankusa_sink_kafka::SaslMechanism::ScramSha256,
    ] {
        let sink = KafkaSink::new(
            KafkaConfig::new(broker.addr(), "t")
                .unwrap()
                // The failure is classified when the produce times out, by the client
                // error librdkafka reported before it. SCRAM's key derivation on both sides
                // took over 2 s on two loaded cores (a CI run with a build beside it), and
                // the timeout came first: 10 s leaves room for the refusal.
                .with_produce_timeout(Duration::from_millis(10_000))
                .with_sasl(ankusa_sink_kafka::SaslConfig::new(
                    mechanism,
                    "nobody",
                    "planted-sasl-secret",
                ))
                .unwrap(),
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

/// A closed port: once the sink's probe confirms no broker answers, hooks fail at once
/// instead of each waiting the produce timeout (issue 15: 1,000 hooks took 164 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_fails_fast_once_a_probe_confirms_it() {
    crate::common::trace();
    let timeout = Duration::from_millis(6_000);
    let sink = std::sync::Arc::new(
        KafkaSink::new(
            KafkaConfig::new(format!("127.0.0.1:{}", closed_port()), "t")
                .unwrap()
                .with_produce_timeout(timeout),
        )
        .unwrap(),
    );
    let first = {
        let sink = std::sync::Arc::clone(&sink);
        tokio::spawn(async move {
            let env = envelope("first", "{}");
            sink.deliver(&env, &Ctx::for_envelope(&env)).await
        })
    };
    // The probe asks for a quarter of the produce timeout (1.5 s) before confirming.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let started = Instant::now();
    let fast = tokio::time::timeout(timeout, async {
        for i in 0..1_000 {
            let env = envelope(&format!("down-{i}"), "{}");
            let f = expect_err(sink.deliver(&env, &Ctx::for_envelope(&env)).await);
            assert_eq!(f.class(), Class::Transient, "{f}");
            assert!(f.to_string().contains("no broker reachable"), "{f}");
        }
    })
    .await;
    let took = started.elapsed();
    assert!(
        fast.is_ok(),
        "1,000 hooks did not all fail within {timeout:?}"
    );
    eprintln!(
        "closed port: 1,000 hooks failed transient in {took:?} (produce timeout {timeout:?})"
    );
    assert!(took < timeout / 3, "took {took:?}");
    assert_eq!(expect_err(first.await.unwrap()).class(), Class::Transient);
}

/// A closed port makes librdkafka report the refused connection and "1/1 brokers are down"
/// many times a second (58 lines before the fix). At the CLI's default level (`info`) a
/// handful remain: the first of each kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_logs_a_handful_of_lines() {
    crate::common::trace();
    let client = unique_topic("quiet");
    let sink = KafkaSink::new(
        KafkaConfig::new(format!("127.0.0.1:{}", closed_port()), "t")
            .unwrap()
            .with_client_id(&client)
            .unwrap()
            .with_produce_timeout(Duration::from_millis(1_000)),
    )
    .unwrap();
    let started = Instant::now();
    for id in ["a", "b"] {
        let env = envelope(id, "{}");
        let f = expect_err(sink.deliver(&env, &Ctx::for_envelope(&env)).await);
        assert_eq!(f.class(), Class::Transient, "{f}");
    }
    // Let librdkafka keep retrying the connection for a while.
    if let Some(rest) = Duration::from_secs(4).checked_sub(started.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    let shown = shown_lines(&client);
    for l in &shown {
        eprintln!("{} {}", l.level, l.text);
    }
    let all = lines_with(&client).len();
    eprintln!(
        "closed port: {} lines shown at info, {all} in all",
        shown.len()
    );
    assert!(!shown.is_empty(), "the first occurrence stays visible");
    assert!(shown.len() <= 6, "{} lines", shown.len());
}

/// librdkafka's own log lines go through the same scrubbing as errors: a property value the
/// sink treats as secret (`sasl.kerberos.keytab` names a key) that librdkafka does not
/// redact, dumped by `debug=conf`, appears as REDACTED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_log_lines_are_scrubbed() {
    crate::common::trace();
    let client = unique_topic("scrub");
    let planted = "/planted-keytab-secret-4f2a";
    let sink = KafkaSink::new(
        KafkaConfig::new(format!("127.0.0.1:{}", closed_port()), "t")
            .unwrap()
            .with_client_id(&client)
            .unwrap()
            .with_produce_timeout(Duration::from_millis(500))
            .with_property("debug", "conf")
            .unwrap()
            .with_property("sasl.kerberos.keytab", planted)
            .unwrap(),
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let dumped = loop {
        let lines = lines_with(&client);
        if let Some(l) = lines
            .iter()
            .find(|l| l.text.contains("sasl.kerberos.keytab"))
        {
            break l.text.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no configuration dump: {lines:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("{dumped}");
    assert!(dumped.contains("REDACTED"), "{dumped}");
    let leaked: Vec<_> = lines_with(planted.trim_start_matches('/'));
    assert!(leaked.is_empty(), "{leaked:?}");
    drop(sink);
}

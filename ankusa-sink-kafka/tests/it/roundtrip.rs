//! Against the real broker: what a consumer reads back, concurrency, size rules, check().

use crate::common::*;
use ankusa_message::MessageBody;
use ankusa_message::MessageOptions;
use ankusa_sink_core::{Check, Claim, ClaimRef, Class, Ctx, Sink, Subject};
use ankusa_sink_kafka::{KafkaConfig, KafkaSink};
use ankusa_sink_testkit::support::{current_thread_runtime, deliver_all};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_value_key_headers_timestamp() {
    ankusa_sink_testkit::require_broker!("Kafka", broker_addr());
    let topic = Topic::new("rt", 1).await;
    let sink = topic.sink();
    let env = envelope("h1", r#"{"type":"charge.succeeded"}"#);
    let ctx = Ctx::for_envelope(&env).with_replay_id("replay-7");
    sink.deliver(&env, &ctx).await.unwrap();

    let got = read_back(&topic.brokers, &topic.name, 1, Duration::from_secs(20));
    assert_eq!(got.len(), 1, "{got:?}");
    let r = &got[0];
    assert_eq!(r.key.as_deref(), Some(&b"acme/stripe"[..]));
    assert_eq!(r.timestamp, Some(1_700_000_000_123));
    assert_eq!(
        r.value,
        ankusa_message::encode(&env, &ctx, sink.capabilities().inline_max_bytes).unwrap()
    );
    let msg = ankusa_message::decode(&r.value).unwrap();
    assert_eq!(msg.id, "h1");
    assert_eq!(msg.replay_id.as_deref(), Some("replay-7"));
    assert_eq!(msg.body, MessageBody::Inline(env.body().clone()));
    assert_eq!(
        msg.headers,
        [("stripe-signature".to_owned(), "t=1,v1=abc".to_owned())]
    );
    let want: Vec<(String, String)> = [
        ("ankusa_id", "h1"),
        ("ankusa_source_id", "stripe"),
        ("ankusa_tenant_id", "acme"),
        ("ankusa_message_version", "1"),
        ("ankusa_idempotency_key", "acme:stripe:evt_h1"),
        ("content_type", "application/json"),
        ("ankusa_dedupe_key", "evt_h1"),
        ("ankusa_replay_id", "replay-7"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    assert_eq!(r.headers, want);
    topic.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_tenant_static_and_template_keys() {
    ankusa_sink_testkit::require_broker!("Kafka", broker_addr());
    let topic = Topic::new("keys", 1).await;
    let bare = ankusa_sink_core::Envelope::builder("h2", "gh", "{}")
        .received_at(5)
        .build()
        .unwrap();
    let default = topic.sink();
    default
        .deliver(&bare, &Ctx::for_envelope(&bare))
        .await
        .unwrap();
    let fixed = KafkaSink::new(topic.config().with_key("fixed-key").unwrap()).unwrap();
    fixed
        .deliver(&bare, &Ctx::for_envelope(&bare))
        .await
        .unwrap();
    let templ = KafkaSink::new(topic.config().with_key("{source_id}:{id}").unwrap()).unwrap();
    templ
        .deliver(&bare, &Ctx::for_envelope(&bare))
        .await
        .unwrap();

    let got = read_back(&topic.brokers, &topic.name, 3, Duration::from_secs(20));
    let keys: Vec<&[u8]> = got.iter().map(|r| r.key.as_deref().unwrap()).collect();
    assert_eq!(keys, [&b"/gh"[..], b"fixed-key", b"gh:h2"]);
    // Without a tenant the header is present and empty, and no dedupe/replay headers.
    let h = &got[0].headers;
    assert_eq!(h.len(), 6, "{h:?}");
    assert_eq!(h[2], ("ankusa_tenant_id".to_owned(), String::new()));
    assert_eq!(h[4], ("ankusa_idempotency_key".to_owned(), "h2".to_owned()));
    topic.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_concurrent_deliveries_none_lost() {
    ankusa_sink_testkit::require_broker!("Kafka", broker_addr());
    const N: usize = 5_000;
    let topic = Topic::new("load", 3).await;
    let sink = Arc::new(topic.sink());
    let started = Instant::now();
    let results = futures_util::future::join_all((0..N).map(|i| {
        let sink = Arc::clone(&sink);
        tokio::spawn(async move {
            let env = envelope(&format!("load-{i}"), format!("{{\"n\":{i}}}"));
            sink.deliver(&env, &Ctx::for_envelope(&env)).await
        })
    }))
    .await;
    let produce = started.elapsed();
    let failed: Vec<String> = results
        .into_iter()
        .filter_map(|r| r.unwrap().err().map(|f| f.to_string()))
        .collect();
    assert!(
        failed.is_empty(),
        "{} failed, first: {:?}",
        failed.len(),
        failed.first()
    );

    let got = read_back(&topic.brokers, &topic.name, N, Duration::from_secs(60));
    let mut ids: Vec<String> = got
        .iter()
        .map(|r| ankusa_message::decode(&r.value).unwrap().id)
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), N, "distinct ids read back");
    // Same key (acme/stripe) => one partition: the murmur2 partitioner is deterministic.
    let parts: std::collections::BTreeSet<i32> = got.iter().map(|r| r.partition).collect();
    assert_eq!(parts.len(), 1, "{parts:?}");
    eprintln!("5000 deliveries acknowledged in {produce:?}");
    topic.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_over_threshold_carries_the_claim() {
    ankusa_sink_testkit::require_broker!("Kafka", broker_addr());
    let topic = Topic::new("claim", 1).await;
    let sink =
        KafkaSink::new(topic.config().with_message(
            MessageOptions::new().with_inline_max_bytes(NonZeroUsize::new(16).unwrap()),
        ))
        .unwrap();
    let body = vec![b'x'; 17];
    let env = envelope("fat", body.clone());
    // Over the threshold without a claim: dispatch must have checked it in (config).
    let f = expect_err(sink.deliver(&env, &Ctx::for_envelope(&env)).await);
    assert_eq!(f.class(), Class::Config, "{f}");

    let r = ClaimRef::new("acme", ulid::Ulid::new().to_string()).unwrap();
    let claim = Claim::new(r.clone(), ankusa_message::sha256_hex(&body)).unwrap();
    let ctx = Ctx::for_envelope(&env).with_claim(claim);
    sink.deliver(&env, &ctx).await.unwrap();
    // Exactly at the threshold stays inline.
    let at = envelope("at", vec![b'y'; 16]);
    sink.deliver(&at, &Ctx::for_envelope(&at)).await.unwrap();

    let got = read_back(&topic.brokers, &topic.name, 2, Duration::from_secs(20));
    assert_eq!(got.len(), 2);
    let fat = ankusa_message::decode(&got[0].value).unwrap();
    assert_eq!(fat.body, MessageBody::Claim(r));
    assert_eq!(fat.sha256, ankusa_message::sha256_hex(&body));
    assert_eq!(fat.size, 17);
    let inline = ankusa_message::decode(&got[1].value).unwrap();
    assert!(matches!(inline.body, MessageBody::Inline(_)));
    topic.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_over_max_record_bytes_is_permanent_and_nothing_is_produced() {
    ankusa_sink_testkit::require_broker!("Kafka", broker_addr());
    let topic = Topic::new("size", 1).await;
    let sink = KafkaSink::new(
        topic
            .config()
            .with_max_record_bytes(NonZeroUsize::new(600).unwrap())
            .unwrap(),
    )
    .unwrap();
    let env = envelope("big", vec![b'z'; 600]);
    let f = expect_err(sink.deliver(&env, &Ctx::for_envelope(&env)).await);
    assert_eq!(f.class(), Class::Permanent, "{f}");
    assert!(
        f.to_string().contains("exceeds max_record_bytes 600"),
        "{f}"
    );
    assert_eq!(high_watermark(&topic.brokers, &topic.name), 0);
    // A small one passes the same sink.
    let small = envelope("small", "{}");
    sink.deliver(&small, &Ctx::for_envelope(&small))
        .await
        .unwrap();
    assert_eq!(high_watermark(&topic.brokers, &topic.name), 1);
    topic.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_passes_for_an_existing_topic_and_produces_nothing() {
    ankusa_sink_testkit::require_broker!("Kafka", broker_addr());
    let topic = Topic::new("check", 2).await;
    let sink = topic.sink();
    assert_eq!(sink.check().await.unwrap(), Check::Passed);
    assert_eq!(high_watermark(&topic.brokers, &topic.name), 0);
    topic.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_missing_topic_is_config_for_check_and_deliver_and_is_not_created() {
    ankusa_sink_testkit::require_broker!("Kafka", broker_addr());
    let brokers = brokers();
    let name = unique_topic("missing");
    let sink = KafkaSink::new(
        KafkaConfig::new(&brokers, &name)
            .unwrap()
            .with_produce_timeout(Duration::from_secs(4)),
    )
    .unwrap();
    let f = sink.check().await.unwrap_err();
    assert_eq!(f.class(), Class::Config, "{f}");
    assert!(!topic_exists(&brokers, &name), "check() created the topic");

    let env = envelope("m1", "{}");
    let started = Instant::now();
    let f = expect_err(sink.deliver(&env, &Ctx::for_envelope(&env)).await);
    assert_eq!(f.class(), Class::Config, "{f}");
    assert!(started.elapsed() < Duration::from_secs(4) + Duration::from_secs(5));
    assert!(
        !topic_exists(&brokers, &name),
        "deliver() created the topic"
    );
}

#[test]
fn describe_names_brokers_topic_and_key_schema_never_credentials() {
    let cfg = KafkaConfig::new("127.0.0.1:9092,127.0.0.1:9093", "hooks")
        .unwrap()
        .with_sasl(ankusa_sink_kafka::SaslConfig::new(
            ankusa_sink_kafka::SaslMechanism::ScramSha256,
            "svc-user",
            "planted-secret-1",
        ))
        .unwrap()
        .with_property("ssl.keystore.password", "planted-secret-2")
        .unwrap();
    let sink = KafkaSink::new(cfg).unwrap();
    let d = sink
        .describe(&Subject::new("stripe", Some("acme".into())))
        .unwrap();
    assert_eq!(d.protocol, "kafka");
    assert_eq!(d.host.as_deref(), Some("127.0.0.1:9092,127.0.0.1:9093"));
    assert_eq!(d.address.as_deref(), Some("hooks"));
    assert_eq!(
        d.bindings["kafka"],
        serde_json::json!({"topic":"hooks","bindingVersion":"0.5.0"})
    );
    assert_eq!(
        d.message_bindings["kafka"],
        serde_json::json!({"key":{"type":"string","const":"acme/stripe"},"bindingVersion":"0.5.0"})
    );
    let all = format!(
        "{} {:?} {:?} {:?}",
        serde_json::to_string(&d).unwrap(),
        d,
        sink,
        sink.config()
    );
    for s in ["planted-secret-1", "planted-secret-2", "svc-user"] {
        if s == "svc-user" {
            assert!(!serde_json::to_string(&d).unwrap().contains(s));
        } else {
            assert!(!all.contains(s), "{s} leaked: {all}");
        }
    }
}

#[test]
fn row_invalid_config_is_refused_before_a_sink_exists() {
    let base = || KafkaConfig::new("127.0.0.1:9092", "hooks").unwrap();
    // librdkafka judges extra properties when the config is built (the unit tests of
    // `properties.rs` go through the cases), from code or from a sink file.
    let err = base().with_property("linger.ms", "soon").unwrap_err();
    assert!(err.to_string().contains("\"linger.ms\""), "{err}");
    let err = serde_json::from_value::<KafkaConfig>(serde_json::json!({
        "brokers": ["127.0.0.1:9092"], "topic": "hooks", "properties": {"linger.ms": "soon"}
    }))
    .unwrap_err();
    assert!(err.to_string().contains("\"linger.ms\""), "{err}");
    // A TLS file that does not exist fails when the producer is created.
    let err =
        KafkaSink::new(base().with_tls(
            ankusa_sink_kafka::TlsConfig::default().with_ca_location("/nonexistent/ca.pem"),
        ))
        .unwrap_err();
    assert!(
        matches!(err, ankusa_sink_kafka::KafkaError::Create(_)),
        "{err}"
    );
    let f = ankusa_sink_core::Failure::from(err);
    assert_eq!(f.class(), Class::Config, "{f}");
}

/// Reports reach their deliveries through a task on the runtime of the first delivery
/// (one wake-up per burst instead of one per record). That runtime may end while the sink
/// lives on: the next runtime's deliveries still get their reports, and a burst of them on
/// one current-thread runtime (the CLI's) completes every delivery with its own outcome.
#[test]
fn reports_reach_deliveries_on_a_later_runtime_after_the_first_one_ends() {
    ankusa_sink_testkit::require_broker!("Kafka", broker_addr());
    let first = current_thread_runtime();
    let topic = first.block_on(Topic::new("runtimes", 1));
    let sink = Arc::new(topic.sink());
    let burst = |tag: &str| {
        (0..200)
            .map(|i| envelope(&format!("{tag}-{i}"), "{}"))
            .collect()
    };
    first.block_on(deliver_all(&sink, burst("first")));
    drop(first);
    let second = current_thread_runtime();
    let late = deliver_all(&sink, burst("second"));
    second
        .block_on(async { tokio::time::timeout(Duration::from_secs(30), late).await })
        .expect("the second runtime's deliveries got their reports");
    let got = read_back(&topic.brokers, &topic.name, 400, Duration::from_secs(20));
    assert_eq!(got.len(), 400);
    second.block_on(topic.cleanup());
}

/// The Java client's `Utils.murmur2`, written here from its definition (seed 0x9747b28c,
/// m 0x5bd1e995, r 24, little-endian 4-byte words), independent of librdkafka's.
fn java_murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h = SEED ^ u32::try_from(data.len()).unwrap();
    let mut words = data.chunks_exact(4);
    for w in words.by_ref() {
        let mut k = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = words.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if let Some(&b) = tail.first() {
        h ^= u32::from(b);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    i32::from_ne_bytes(h.to_ne_bytes())
}

/// The partition the Java client's default partitioner picks for a keyed record:
/// `Utils.toPositive(Utils.murmur2(key)) % partitions`.
fn java_partition(key: &[u8], partitions: i32) -> i32 {
    (java_murmur2(key) & 0x7fff_ffff) % partitions
}

#[test]
fn the_tests_murmur2_is_javas() {
    // Kafka's UtilsTest.testMurmur2.
    for (key, want) in [
        (&b"21"[..], -973_932_308),
        (b"foobar", -790_332_482),
        (b"a-little-bit-long-string", -985_981_536),
        (b"a-little-bit-longer-string", -1_486_304_829),
        (
            b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58_897_971,
        ),
        (b"abc", 479_470_107),
    ] {
        assert_eq!(java_murmur2(key), want, "{}", String::from_utf8_lossy(key));
    }
}

/// A keyed record lands on the partition the Java client would pick (README: "a keyed
/// record lands where the Java client puts it"), on a 12-partition topic, for 48 keys of
/// the default key template `{tenant_id}/{source_id}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_records_land_on_the_java_clients_partition() {
    ankusa_sink_testkit::require_broker!("Kafka", broker_addr());
    const PARTITIONS: i32 = 12;
    const KEYS: usize = 48;
    let topic = Topic::new("murmur2", PARTITIONS).await;
    let sink = topic.sink();
    let mut want = std::collections::BTreeMap::new();
    for i in 0..KEYS {
        let source = format!("src-{i}");
        let env = ankusa_sink_core::Envelope::builder(format!("h{i}"), source.as_str(), &b"{}"[..])
            .tenant_id(format!("tenant_{}", i % 5))
            .build()
            .unwrap();
        sink.deliver(&env, &Ctx::for_envelope(&env)).await.unwrap();
        let key = format!("tenant_{}/{source}", i % 5);
        want.insert(key.clone(), java_partition(key.as_bytes(), PARTITIONS));
    }
    let got = read_back(&topic.brokers, &topic.name, KEYS, Duration::from_secs(60));
    assert_eq!(got.len(), KEYS);
    let mut used = std::collections::BTreeSet::new();
    for r in &got {
        let key = String::from_utf8(r.key.clone().expect("a key")).unwrap();
        assert_eq!(Some(&r.partition), want.get(&key), "key {key}");
        used.insert(r.partition);
    }
    // Spread over the topic: a partitioner that ignored the key could not pass.
    assert!(used.len() >= 8, "{used:?}");
    topic.cleanup().await;
}

/// The sink writes `acks=all` and declares itself durable: `check()` asks the topic's
/// `min.insync.replicas`. The tests' broker is one node, so whatever it answers, the check
/// passes and reports that an `acks=all` write rests on that one broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_what_acks_all_means_on_a_one_broker_cluster() {
    ankusa_sink_testkit::require_broker!("Kafka", broker_addr());
    let logs = ankusa_sink_testkit::support::LogCapture::for_targets(&["ankusa_sink_kafka"]);
    let _attached = logs.attach_global();
    let topic = Topic::new("insync", 1).await;
    let sink = topic.sink();
    assert_eq!(sink.check().await.unwrap(), Check::Passed);
    let reported = logs.lines_with(&topic.name);
    assert!(
        reported.len() == 1
            && reported[0].level == tracing::Level::WARN
            && reported[0].text.contains("one-broker cluster"),
        "{}",
        logs.text()
    );
    assert_eq!(high_watermark(&topic.brokers, &topic.name), 0);
    topic.cleanup().await;
}

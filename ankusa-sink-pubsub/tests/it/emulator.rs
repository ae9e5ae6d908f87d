//! Against the official Pub/Sub emulator (scripts/services/pubsub.sh).

use crate::common::{Admin, PROJECT, PrivateEmulator, config_at, envelope, unique};
use ankusa_message::MessageOptions;
use ankusa_message::{EmptyValues, Layout, MessageBody, Outgoing, sha256_hex};
use ankusa_sink_core::{Check, Claim, ClaimRef, Class, Ctx, Envelope, Sink};
use ankusa_sink_pubsub::PubSubSink;
use futures_util::future::join_all;
use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

/// The attributes core's [`Outgoing`] lists for a Pub/Sub message of `env`, by name.
fn outgoing_attributes(env: &Envelope, ctx: &Ctx) -> HashMap<String, String> {
    let layout = Layout::message(None, EmptyValues::Drop);
    let out = Outgoing::new(env, ctx, &layout).unwrap();
    out.attributes()
        .iter()
        .map(|(a, v)| (a.as_attr().to_owned(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn round_trip_carries_data_attributes_and_ordering_key() {
    ankusa_sink_testkit::require_broker!("Pub/Sub emulator", crate::common::emulator_host());
    let t = Admin::shared().topic_with_subscription().await.unwrap();
    let sink = PubSubSink::new(
        t.config()
            .with_ordering_key("{tenant_id}/{source_id}")
            .unwrap(),
    )
    .await
    .unwrap();
    let env = envelope("rt-1", br#"{"ok":true}"#)
        .to_builder()
        .dedupe_key("evt_1")
        .header("X-Trace", "abc")
        .build()
        .unwrap();
    let ctx = Ctx::for_envelope(&env).with_replay_id("replay-7");
    sink.deliver(&env, &ctx).await.unwrap();

    let got = t.pull(1).await;
    assert_eq!(got.len(), 1, "{got:?}");
    let m = &got[0];
    assert!(!m.message_id.is_empty());
    // data is the Message v1 JSON, byte for byte.
    let expected =
        ankusa_message::encode(&env, &ctx, sink.capabilities().inline_max_bytes).unwrap();
    assert_eq!(m.data, expected);
    let decoded = ankusa_message::decode(&m.data).unwrap();
    assert_eq!(decoded.id, "rt-1");
    assert_eq!(decoded.replay_id.as_deref(), Some("replay-7"));
    assert!(matches!(decoded.body, MessageBody::Inline(ref b) if &b[..] == br#"{"ok":true}"#));
    // attributes are exactly `ankusa-message`'s Outgoing list, by attribute name ...
    assert_eq!(m.attributes, outgoing_attributes(&env, &ctx));
    // ... which is, name for name and value for value, what the sink always sent.
    let idempotency_key = env.idempotency_key().into_owned();
    let want: HashMap<String, String> = [
        ("ankusa_id", "rt-1"),
        ("ankusa_source_id", "stripe"),
        ("ankusa_tenant_id", "acme"),
        ("ankusa_message_version", "1"),
        ("ankusa_idempotency_key", idempotency_key.as_str()),
        ("content_type", "application/json"),
        ("ankusa_dedupe_key", "evt_1"),
        ("ankusa_replay_id", "replay-7"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(m.attributes, want);
    assert_eq!(m.ordering_key, "acme/stripe");

    // No ordering key by default, and no tenant means no tenant attribute.
    let plain = t.sink().await;
    let env = Envelope::builder("rt-2", "gh", &b"x"[..]).build().unwrap();
    plain.deliver(&env, &Ctx::for_envelope(&env)).await.unwrap();
    let got = t.pull(1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].ordering_key, "");
    assert!(!got[0].attributes.contains_key("ankusa_tenant_id"));
    assert_eq!(got[0].attributes["ankusa_id"], "rt-2");
    assert_eq!(
        got[0].attributes,
        outgoing_attributes(&env, &Ctx::for_envelope(&env))
    );
    assert_eq!(got[0].attributes.len(), 5, "{:?}", got[0].attributes);

    // A templated key with `{tenant_id}` renders "" without a tenant (no key at all here).
    let keyed = PubSubSink::new(t.config().with_ordering_key("{tenant_id}").unwrap())
        .await
        .unwrap();
    keyed.deliver(&env, &Ctx::for_envelope(&env)).await.unwrap();
    assert_eq!(t.pull(1).await[0].ordering_key, "");
    t.delete().await;
}

#[tokio::test]
async fn missing_topic_is_config_and_not_created() {
    ankusa_sink_testkit::require_broker!("Pub/Sub emulator", crate::common::emulator_host());
    let admin = Admin::shared();
    let topic = unique("never-created");
    let sink = PubSubSink::new(config_at(&topic, admin.endpoint()))
        .await
        .unwrap();
    let env = envelope("missing-1", b"{}");
    let err = sink
        .deliver(&env, &Ctx::for_envelope(&env))
        .await
        .unwrap_err();
    assert_eq!(err.class(), Class::Config, "{err}");
    assert!(err.to_string().contains("NOT_FOUND") || err.to_string().contains("not found"));
    assert!(!admin.topic_exists(&topic).await.unwrap());
}

#[tokio::test]
async fn check_reports_a_missing_topic_as_config_without_publishing() {
    ankusa_sink_testkit::require_broker!("Pub/Sub emulator", crate::common::emulator_host());
    let admin = Admin::shared();
    let topic = unique("never-created");
    let sink = PubSubSink::new(config_at(&topic, admin.endpoint()))
        .await
        .unwrap();
    let err = sink.check().await.unwrap_err();
    assert_eq!(err.class(), Class::Config, "{err}");
    assert!(
        !admin.topic_exists(&topic).await.unwrap(),
        "check created it"
    );

    // An existing topic passes, and nothing reaches its subscription.
    let t = admin.topic_with_subscription().await.unwrap();
    assert_eq!(t.sink().await.check().await.unwrap(), Check::Passed);
    assert!(t.pull_nothing_expected().await.is_empty());
    t.delete().await;
}

#[tokio::test]
async fn a_topic_without_a_subscription_reaches_nobody() {
    ankusa_sink_testkit::require_broker!("Pub/Sub emulator", crate::common::emulator_host());
    let admin = Admin::shared();
    let topic = unique("nobody");
    let sub = format!("{topic}-sub");
    admin.create_topic(&topic).await.unwrap();
    let config = config_at(&topic, admin.endpoint());
    let no_subscription = |err: &ankusa_sink_core::Failure| {
        err.class() == Class::Config && err.to_string().contains("has no subscription")
    };

    // check() says so; a plain sink still publishes (Pub/Sub accepts and drops it).
    let plain = PubSubSink::new(config.clone()).await.unwrap();
    let err = plain.check().await.unwrap_err();
    assert!(no_subscription(&err), "{err}");
    let env = envelope("nobody-1", b"{}");
    plain.deliver(&env, &Ctx::for_envelope(&env)).await.unwrap();

    // require_subscriber refuses as config, publishing nothing.
    let strict = |interval| {
        let config = config
            .clone()
            .with_require_subscriber(true)
            .with_subscriber_check_interval(Duration::from_secs(interval))
            .unwrap();
        PubSubSink::new(config)
    };
    let cached = strict(3_600).await.unwrap();
    let fresh = strict(1).await.unwrap();
    for sink in [&cached, &fresh] {
        let err = sink
            .deliver(&env, &Ctx::for_envelope(&env))
            .await
            .unwrap_err();
        assert!(no_subscription(&err), "{err}");
    }

    // A subscription appears: the 1 s sink sees it after its interval, and what it
    // publishes reaches the subscription; the 1 h sink keeps its answer (one listing per
    // interval).
    admin.create_subscription(&topic, &sub).await.unwrap();
    assert_eq!(plain.check().await.unwrap(), Check::Passed);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let seen = envelope("nobody-2", b"{}");
    fresh
        .deliver(&seen, &Ctx::for_envelope(&seen))
        .await
        .unwrap();
    let err = cached
        .deliver(&seen, &Ctx::for_envelope(&seen))
        .await
        .unwrap_err();
    assert!(no_subscription(&err), "{err}");
    let got = admin
        .pull_at_least(&sub, 1, Duration::from_secs(15))
        .await
        .unwrap();
    let ids: Vec<&str> = got
        .iter()
        .map(|m| m.attributes["ankusa_id"].as_str())
        .collect();
    assert_eq!(
        ids,
        ["nobody-2"],
        "only the strict sink's message after the subscription"
    );

    // The subscription goes: refused again after the interval.
    admin.delete_subscription(&sub).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let err = fresh
        .deliver(&seen, &Ctx::for_envelope(&seen))
        .await
        .unwrap_err();
    assert!(no_subscription(&err), "{err}");
    admin.delete(&topic, &sub).await;
}

#[tokio::test]
async fn invalid_argument_is_permanent() {
    ankusa_sink_testkit::require_broker!("Pub/Sub emulator", crate::common::emulator_host());
    // Topic names must start with a letter: the emulator answers INVALID_ARGUMENT.
    let admin = Admin::shared();
    let sink = PubSubSink::new(config_at("1-starts-with-a-digit", admin.endpoint()))
        .await
        .unwrap();
    let env = envelope("invalid-1", b"{}");
    let err = sink
        .deliver(&env, &Ctx::for_envelope(&env))
        .await
        .unwrap_err();
    assert_eq!(err.class(), Class::Permanent, "{err}");
}

#[tokio::test]
async fn over_max_message_bytes_is_permanent_and_not_sent() {
    ankusa_sink_testkit::require_broker!("Pub/Sub emulator", crate::common::emulator_host());
    let t = Admin::shared().topic_with_subscription().await.unwrap();
    let sink = PubSubSink::new(
        t.config()
            .with_max_message_bytes(NonZeroUsize::new(2_048).unwrap())
            .unwrap(),
    )
    .await
    .unwrap();
    let env = envelope("big-1", &vec![b'a'; 4_096]);
    let err = sink
        .deliver(&env, &Ctx::for_envelope(&env))
        .await
        .unwrap_err();
    assert_eq!(err.class(), Class::Permanent, "{err}");
    assert!(err.to_string().contains("max_message_bytes 2048"), "{err}");
    assert!(t.pull_nothing_expected().await.is_empty());

    // The limit counts data + attributes + ordering key: a message that fits with a short
    // key does not fit with a long one.
    let small = envelope("small-1", b"{}");
    let data = ankusa_message::encode(&small, &Ctx::for_envelope(&small), None).unwrap();
    let attrs: usize = outgoing_attributes(&small, &Ctx::for_envelope(&small))
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    let exact = data.len() + attrs + 3;
    let fits = PubSubSink::new(
        t.config()
            .with_ordering_key("abc")
            .unwrap()
            .with_max_message_bytes(NonZeroUsize::new(exact).unwrap())
            .unwrap(),
    )
    .await
    .unwrap();
    fits.deliver(&small, &Ctx::for_envelope(&small))
        .await
        .unwrap();
    let over = PubSubSink::new(
        t.config()
            .with_ordering_key("abcd")
            .unwrap()
            .with_max_message_bytes(NonZeroUsize::new(exact).unwrap())
            .unwrap(),
    )
    .await
    .unwrap();
    let err = over
        .deliver(&small, &Ctx::for_envelope(&small))
        .await
        .unwrap_err();
    assert_eq!(err.class(), Class::Permanent);
    assert_eq!(t.pull(1).await.len(), 1);
    t.delete().await;
}

#[tokio::test]
async fn body_over_the_threshold_carries_the_claim() {
    ankusa_sink_testkit::require_broker!("Pub/Sub emulator", crate::common::emulator_host());
    let t = Admin::shared().topic_with_subscription().await.unwrap();
    let sink =
        PubSubSink::new(t.config().with_message(
            MessageOptions::new().with_inline_max_bytes(NonZeroUsize::new(16).unwrap()),
        ))
        .await
        .unwrap();
    let exact = envelope("inline-16", &[b'i'; 16]);
    sink.deliver(&exact, &Ctx::for_envelope(&exact))
        .await
        .unwrap();

    let body = vec![b'c'; 17];
    let fat = envelope("fat-17", &body);
    // Without a claim from dispatch the sink refuses (config) and sends nothing.
    let err = sink
        .deliver(&fat, &Ctx::for_envelope(&fat))
        .await
        .unwrap_err();
    assert_eq!(err.class(), Class::Config, "{err}");

    let reference = ClaimRef::new("acme", ulid::Ulid::new().to_string()).unwrap();
    let claim = Claim::new(reference.clone(), sha256_hex(&body)).unwrap();
    sink.deliver(&fat, &Ctx::for_envelope(&fat).with_claim(claim))
        .await
        .unwrap();

    let got = t.pull(2).await;
    assert_eq!(got.len(), 2, "{got:?}");
    let by_id: HashMap<String, _> = got
        .iter()
        .map(|m| {
            let d = ankusa_message::decode(&m.data).unwrap();
            (d.id.clone(), d)
        })
        .collect();
    assert!(matches!(by_id["inline-16"].body, MessageBody::Inline(ref b) if b.len() == 16));
    match &by_id["fat-17"].body {
        MessageBody::Claim(r) => assert_eq!(r, &reference),
        other => panic!("expected a claim, got {other:?}"),
    }
    t.delete().await;
}

#[tokio::test]
async fn an_ordering_key_recovers_after_a_failure() {
    ankusa_sink_testkit::require_broker!("Pub/Sub emulator", crate::common::emulator_host());
    let admin = Admin::shared();
    let t = admin.topic_with_subscription().await.unwrap();
    let sink = PubSubSink::new(t.config().with_ordering_key("{tenant_id}").unwrap())
        .await
        .unwrap();
    let first = envelope("ord-1", b"1");
    sink.deliver(&first, &Ctx::for_envelope(&first))
        .await
        .unwrap();
    assert_eq!(t.pull(1).await[0].ordering_key, "acme");

    // The topic disappears: a publish on key "acme" fails, and the client pauses the key.
    admin.delete(&t.topic, &t.sub).await;
    let second = envelope("ord-2", b"2");
    let err = sink
        .deliver(&second, &Ctx::for_envelope(&second))
        .await
        .unwrap_err();
    assert_eq!(err.class(), Class::Config, "{err}");

    // The topic is back: the very next delivery on the same key succeeds, twice.
    admin.create_topic(&t.topic).await.unwrap();
    admin.create_subscription(&t.topic, &t.sub).await.unwrap();
    for id in ["ord-3", "ord-4"] {
        let env = envelope(id, b"3");
        sink.deliver(&env, &Ctx::for_envelope(&env).with_attempt(2))
            .await
            .unwrap_or_else(|f| panic!("{id} after the failure: {f}"));
    }
    let got = t.pull(2).await;
    let ids: Vec<String> = got
        .iter()
        .map(|m| ankusa_message::decode(&m.data).unwrap().id)
        .collect();
    assert_eq!(ids, ["ord-3", "ord-4"], "in order, on the key");
    assert!(got.iter().all(|m| m.ordering_key == "acme"));
    t.delete().await;
}

/// The control for the test above: the official client alone, without `resume_publish`,
/// leaves the key paused after one failure (what the sink must undo).
#[tokio::test]
async fn without_resume_the_client_keeps_the_key_paused() {
    ankusa_sink_testkit::require_broker!("Pub/Sub emulator", crate::common::emulator_host());
    use google_cloud_pubsub::client::Publisher;
    use google_cloud_pubsub::error::PublishError;
    use google_cloud_pubsub::model::Message;

    let admin = Admin::shared();
    let topic = unique("paused");
    let publisher = Publisher::builder(format!("projects/{PROJECT}/topics/{topic}"))
        .with_endpoint(admin.endpoint())
        .with_credentials(google_cloud_auth::credentials::anonymous::Builder::new().build())
        .with_retry_policy(google_cloud_gax::retry_policy::NeverRetry)
        .set_message_count_threshold(1)
        .build()
        .await
        .unwrap();
    let msg = || Message::new().set_data("x").set_ordering_key("k");
    let first = publisher.publish(msg()).await;
    assert!(matches!(first, Err(PublishError::Rpc(_))), "{first:?}");
    admin.create_topic(&topic).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    // The pause lands once the client has processed the failed batch.
    loop {
        match publisher.publish(msg()).await {
            Err(PublishError::OrderingKeyPaused) => break,
            other if Instant::now() >= deadline => panic!("never paused: {other:?}"),
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    publisher.resume_publish("k");
    publisher.publish(msg()).await.expect("resumed");
    admin.delete(&topic, "none").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_concurrent_deliveries_none_lost() {
    ankusa_sink_testkit::require_broker!("Pub/Sub emulator", crate::common::emulator_host());
    let t = Admin::shared().topic_with_subscription().await.unwrap();
    // A generous bound: the machine may be busy; losing nothing is the point here.
    let sink = PubSubSink::new(t.config().with_timeout(Duration::from_secs(120)).unwrap())
        .await
        .unwrap();
    let envs: Vec<_> = (0..2_000)
        .map(|i| envelope(&format!("c-{i}"), format!("{{\"n\":{i}}}").as_bytes()))
        .collect();
    // Half batched through the client's publisher, half one request per hook.
    let results = join_all(envs.iter().enumerate().map(|(i, env)| {
        let ctx = Ctx::for_envelope(env).with_batch(i % 2 == 0);
        let sink = &sink;
        async move { sink.deliver(env, &ctx).await }
    }))
    .await;
    let failed: Vec<_> = results.iter().filter(|r| r.is_err()).collect();
    assert!(
        failed.is_empty(),
        "{} failed: {:?}",
        failed.len(),
        failed.first()
    );

    let got = t
        .admin
        .pull_at_least(&t.sub, 2_000, Duration::from_secs(60))
        .await
        .unwrap();
    let ids: HashSet<String> = got
        .iter()
        .map(|m| ankusa_message::decode(&m.data).unwrap().id)
        .collect();
    assert_eq!(ids.len(), 2_000, "distinct hooks read back");
    t.delete().await;
}

#[tokio::test]
async fn emulator_stopped_is_transient_and_recovers_after_restart() {
    ankusa_sink_testkit::require_broker!("Pub/Sub emulator", crate::common::emulator_host());
    // A private emulator, so stopping it disturbs no other test; dropping it kills it even
    // when an assertion fails.
    let mut emu = PrivateEmulator::start().await.unwrap();
    let t = emu.admin().topic_with_subscription().await.unwrap();
    let sink = PubSubSink::new(t.config().with_timeout(Duration::from_secs(5)).unwrap())
        .await
        .unwrap();
    let before = envelope("before", b"{}");
    sink.deliver(&before, &Ctx::for_envelope(&before))
        .await
        .unwrap();

    emu.stop().await.unwrap();
    let during = envelope("during", b"{}");
    let started = Instant::now();
    let err = sink
        .deliver(&during, &Ctx::for_envelope(&during))
        .await
        .unwrap_err();
    assert_eq!(err.class(), Class::Transient, "{err}");
    assert!(started.elapsed() < Duration::from_secs(10), "bounded");
    assert!(sink.check().await.unwrap_err().class() == Class::Transient);

    // Same port; its state was in memory, so the topic is made again.
    emu.restart().await.unwrap();
    let admin = emu.admin();
    admin.create_topic(&t.topic).await.unwrap();
    admin.create_subscription(&t.topic, &t.sub).await.unwrap();
    let after = envelope("after", b"{}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut attempt = 1;
    loop {
        let ctx = Ctx::for_envelope(&after).with_attempt(attempt);
        match sink.deliver(&after, &ctx).await {
            Ok(()) => break,
            Err(f) if Instant::now() < deadline && f.class() == Class::Transient => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(f) => panic!("no recovery after the restart: {f}"),
        }
    }
    let got = t.pull(1).await;
    assert_eq!(ankusa_message::decode(&got[0].data).unwrap().id, "after");
}

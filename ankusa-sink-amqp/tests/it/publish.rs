//! What reaches the broker: body, properties, headers, routing keys, claims, concurrency.

use crate::common::*;
use ankusa_message::{Attr, EmptyValues, Layout, MessageBody, MessageOptions, Outgoing};
use ankusa_sink_amqp::{AmqpConfig, AmqpError, AmqpSink};
use ankusa_sink_core::{Check, Claim, ClaimRef, Class, Ctx, Envelope, Sink};
use ankusa_sink_testkit::support::{current_thread_runtime, deliver_all};
use lapin::ExchangeKind;
use lapin::types::AMQPValue;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const HEADER_IDEMPOTENCY_KEY: &str = Attr::IdempotencyKey.as_attr();
const HEADER_DEDUPE_KEY: &str = Attr::DedupeKey.as_attr();
const HEADER_REPLAY_ID: &str = Attr::ReplayId.as_attr();

fn header(props: &lapin::BasicProperties, name: &str) -> Option<String> {
    match props.headers().as_ref()?.inner().get(name)? {
        AMQPValue::LongString(s) => Some(s.to_string()),
        other => panic!("{name} is not a longstr: {other:?}"),
    }
}

#[tokio::test]
async fn round_trip_body_properties_and_headers() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let mut admin = Admin::new().await;
    let (x, q) = admin.topic_with_queue("#").await;
    let sink = sink(&x);

    let env = Envelope::builder("hook-rt-1", "stripe", &br#"{"a":1}"#[..])
        .tenant_id("acme")
        .dedupe_key("evt_42")
        .content_type("application/json")
        .header("Stripe-Signature", "t=1,v1=abc")
        .header("Authorization", "Bearer never-forwarded")
        .received_at(1_700_000_000_123)
        .build()
        .unwrap();
    let ctx = Ctx::for_envelope(&env).with_replay_id("replay-7");
    bounded(sink.deliver(&env, &ctx)).await.unwrap();

    let got = admin.get(&q).await;
    let d = &got.delivery;
    assert_eq!(d.exchange.as_str(), x);
    assert_eq!(d.routing_key.as_str(), "ankusa.stripe");
    let p = &d.properties;
    assert_eq!(p.message_id().as_ref().unwrap().as_str(), "hook-rt-1");
    assert_eq!(
        p.content_type().as_ref().unwrap().as_str(),
        "application/json"
    );
    assert_eq!(*p.delivery_mode(), Some(2));
    assert_eq!(*p.timestamp(), Some(1_700_000_000));
    assert_eq!(
        header(p, HEADER_IDEMPOTENCY_KEY).as_deref(),
        Some("acme:stripe:evt_42")
    );
    assert_eq!(header(p, HEADER_DEDUPE_KEY).as_deref(), Some("evt_42"));
    assert_eq!(header(p, HEADER_REPLAY_ID).as_deref(), Some("replay-7"));
    assert_eq!(p.headers().as_ref().unwrap().inner().len(), 3);

    // The body is exactly Message v1 and decodes.
    let expected =
        ankusa_message::encode(&env, &ctx, sink.capabilities().inline_max_bytes).unwrap();
    assert_eq!(d.data, expected);
    // Body, id and headers are `ankusa-message`'s Outgoing for the same envelope.
    let layout = Layout::message(sink.capabilities().inline_max_bytes, EmptyValues::Drop);
    let out = Outgoing::new(&env, &ctx, &layout).unwrap();
    assert_eq!(d.data, out.body());
    assert_eq!(
        p.message_id().as_ref().unwrap().as_str(),
        out.get(Attr::Id).unwrap()
    );
    let headers: Vec<(&str, &str)> = out
        .attributes()
        .iter()
        .filter(|(a, _)| matches!(a, Attr::IdempotencyKey | Attr::DedupeKey | Attr::ReplayId))
        .map(|(a, v)| (a.as_attr(), v.as_ref()))
        .collect();
    assert_eq!(headers.len(), 3);
    for (name, value) in headers {
        assert_eq!(header(p, name).as_deref(), Some(value), "{name}");
    }
    let msg = ankusa_message::decode(&d.data).unwrap();
    assert_eq!(msg.id, "hook-rt-1");
    assert_eq!(msg.replay_id.as_deref(), Some("replay-7"));
    assert_eq!(msg.body, MessageBody::Inline(env.body().clone()));
    assert_eq!(
        msg.headers,
        vec![("stripe-signature".into(), "t=1,v1=abc".into())]
    );

    // Without dedupe key and replay id only the idempotency key (= hook id) is sent.
    let plain = env_plain("hook-rt-2");
    bounded(sink.deliver(&plain, &Ctx::for_envelope(&plain)))
        .await
        .unwrap();
    let got = admin.get(&q).await;
    let p = &got.delivery.properties;
    assert_eq!(
        header(p, HEADER_IDEMPOTENCY_KEY).as_deref(),
        Some("hook-rt-2")
    );
    assert_eq!(p.headers().as_ref().unwrap().inner().len(), 1);
    admin.cleanup().await;
}

fn env_plain(id: &str) -> Envelope {
    Envelope::builder(id, "stripe", "{}").build().unwrap()
}

#[tokio::test]
async fn static_and_template_routing_keys() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let mut admin = Admin::new().await;
    let x = unique("x");
    admin.exchange(&x, ExchangeKind::Topic).await;
    let q_static = admin.queue(&x, "fixed.key", &[]).await;
    let q_tpl = admin.queue(&x, "t.acme.*", &[]).await;

    let fixed = AmqpSink::new(config(&x).with_routing_key("fixed.key").unwrap());
    let e = env("hook-rk-1", "github");
    bounded(fixed.deliver(&e, &Ctx::for_envelope(&e)))
        .await
        .unwrap();
    assert_eq!(
        admin.get(&q_static).await.delivery.routing_key.as_str(),
        "fixed.key"
    );

    let tpl = AmqpSink::new(
        config(&x)
            .with_routing_key_template("t.{tenant_id}.{source_id}")
            .unwrap(),
    );
    bounded(tpl.deliver(&e, &Ctx::for_envelope(&e)))
        .await
        .unwrap();
    assert_eq!(
        admin.get(&q_tpl).await.delivery.routing_key.as_str(),
        "t.acme.github"
    );
    assert_eq!(admin.count(&q_static).await, 0);
    admin.cleanup().await;
}

#[tokio::test]
async fn body_over_threshold_carries_the_claim() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let mut admin = Admin::new().await;
    let (x, q) = admin.topic_with_queue("#").await;
    let sink =
        AmqpSink::new(config(&x).with_message(MessageOptions::new().with_inline_max_bytes(nz(16))));

    let body = vec![b'z'; 100];
    let env = Envelope::builder("hook-fat", "s3", body.clone())
        .tenant_id("acme")
        .build()
        .unwrap();
    // Without a claim: config, nothing sent.
    let err = bounded(sink.deliver(&env, &Ctx::for_envelope(&env)))
        .await
        .unwrap_err();
    assert_eq!(err.class(), Class::Config, "{err}");

    let reference = ClaimRef::new("acme", ulid::Ulid::new().to_string()).unwrap();
    let claim = Claim::new(reference.clone(), ankusa_message::sha256_hex(&body)).unwrap();
    let ctx = Ctx::for_envelope(&env).with_claim(claim);
    bounded(sink.deliver(&env, &ctx)).await.unwrap();
    let got = admin.get(&q).await;
    let msg = ankusa_message::decode(&got.delivery.data).unwrap();
    assert_eq!(msg.body, MessageBody::Claim(reference));
    assert_eq!(msg.size, 100);
    assert_eq!(msg.sha256, ankusa_message::sha256_hex(&body));
    assert!(!String::from_utf8_lossy(&got.delivery.data).contains("body_base64"));
    // Exactly at the threshold is inline.
    let edge = Envelope::builder("hook-edge", "s3", vec![b'y'; 16])
        .build()
        .unwrap();
    bounded(sink.deliver(&edge, &Ctx::for_envelope(&edge)))
        .await
        .unwrap();
    let msg = ankusa_message::decode(&admin.get(&q).await.delivery.data).unwrap();
    assert!(matches!(msg.body, MessageBody::Inline(_)));
    assert_eq!(admin.count(&q).await, 0);
    admin.cleanup().await;
}

#[tokio::test]
async fn five_hundred_concurrent_deliveries_pipeline_confirms() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let mut admin = Admin::new().await;
    let (x, q) = admin.topic_with_queue("#").await;
    let sink = AmqpSink::new(config(&x).with_max_inflight(nz(64)));
    let envs: Vec<Envelope> = (0..500)
        .map(|i| env(&format!("hook-c-{i}"), "load"))
        .collect();

    let max_seen = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let deliveries = futures_util::future::join_all(envs.iter().map(|e| async {
        let r = sink.deliver(e, &Ctx::for_envelope(e)).await;
        done.fetch_add(1, Ordering::Relaxed);
        r
    }));
    let sampler = async {
        while done.load(Ordering::Relaxed) < envs.len() {
            max_seen.fetch_max(sink.in_flight(), Ordering::Relaxed);
            tokio::task::yield_now().await;
        }
    };
    let (results, ()) = bounded(async { tokio::join!(deliveries, sampler) }).await;
    for r in &results {
        assert!(r.is_ok(), "{r:?}");
    }
    let max_seen = max_seen.load(Ordering::Relaxed);
    assert!(
        max_seen > 1,
        "confirms were not pipelined (max in flight {max_seen})"
    );
    assert!(max_seen <= 64, "max_inflight not honoured: {max_seen}");
    assert_eq!(sink.in_flight(), 0);

    assert_eq!(admin.count(&q).await, 500);
    let mut ids = HashSet::new();
    for _ in 0..500 {
        let got = admin.get(&q).await;
        ids.insert(
            got.delivery
                .properties
                .message_id()
                .clone()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(ids.len(), 500);
    admin.cleanup().await;
}

#[tokio::test]
async fn over_max_message_bytes_is_permanent_and_nothing_is_sent() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let mut admin = Admin::new().await;
    let (x, q) = admin.topic_with_queue("#").await;
    let sink = AmqpSink::new(config(&x).with_max_message_bytes(nz(600)));
    let big = Envelope::builder("hook-big", "s", vec![b'a'; 2000])
        .build()
        .unwrap();
    let err = bounded(sink.deliver(&big, &Ctx::for_envelope(&big)))
        .await
        .unwrap_err();
    assert_eq!(err.class(), Class::Permanent, "{err}");
    assert!(err.to_string().contains("max_message_bytes"), "{err}");
    // Refused before any broker traffic: the sink never even connected.
    assert!(!sink.is_connected().await);
    let small = env("hook-small", "s");
    bounded(sink.deliver(&small, &Ctx::for_envelope(&small)))
        .await
        .unwrap();
    assert_eq!(
        admin
            .get(&q)
            .await
            .delivery
            .properties
            .message_id()
            .clone()
            .unwrap()
            .as_str(),
        "hook-small"
    );
    assert_eq!(admin.count(&q).await, 0);
    admin.cleanup().await;
}

#[tokio::test]
async fn check_passes_and_publishes_nothing() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let mut admin = Admin::new().await;
    let (x, q) = admin.topic_with_queue("#").await;
    let sink = sink(&x);
    assert_eq!(bounded(sink.check()).await.unwrap(), Check::Passed);
    assert_eq!(bounded(sink.check()).await.unwrap(), Check::Passed);
    assert_eq!(admin.count(&q).await, 0);

    // declare_exchange creates a missing exchange; check then passes.
    let y = unique("x");
    let declaring = AmqpSink::new(config(&y).with_declare_exchange(true).unwrap());
    assert_eq!(bounded(declaring.check()).await.unwrap(), Check::Passed);
    admin.delete_exchange(&y).await;
    admin.cleanup().await;
}

#[tokio::test]
async fn inserted_values_cannot_add_topic_words_or_wildcards() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let mut admin = Admin::new().await;
    let x = unique("x");
    admin.exchange(&x, ExchangeKind::Topic).await;
    // A consumer of acme's events only; a dedupe key "x.#"-style value must not reach it
    // under another tenant's words, nor any binding the template does not describe.
    let q = admin.queue(&x, "hooks.*.*", &[]).await;
    let sink = AmqpSink::new(
        config(&x)
            .with_routing_key_template("hooks.{source_id}.{dedupe_key}")
            .unwrap(),
    );
    let hook = |dedupe: &str| {
        Envelope::builder("hook-rk", "stripe", &b"{}"[..])
            .dedupe_key(dedupe)
            .build()
            .unwrap()
    };
    for (dedupe, bad) in [("evt.acme", '.'), ("*", '*'), ("#", '#')] {
        let e = hook(dedupe);
        let err = bounded(sink.deliver(&e, &Ctx::for_envelope(&e)))
            .await
            .unwrap_err();
        assert_eq!(err.class(), Class::Permanent, "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("{{dedupe_key}} contains {bad:?}")),
            "{text}"
        );
        assert!(!text.contains(dedupe) || dedupe.len() == 1, "{text}");
    }
    let e = hook("evt_1");
    bounded(sink.deliver(&e, &Ctx::for_envelope(&e)))
        .await
        .unwrap();
    assert_eq!(admin.count(&q).await, 1);
    // A direct exchange matches keys exactly: '.' is an ordinary character there.
    let d = unique("x");
    admin.exchange(&d, ExchangeKind::Direct).await;
    let dq = admin.queue(&d, "hooks.stripe.evt.1", &[]).await;
    let direct = AmqpSink::new(
        config(&d)
            .with_exchange_type(ankusa_sink_amqp::ExchangeType::Direct)
            .with_routing_key_template("hooks.{source_id}.{dedupe_key}")
            .unwrap(),
    );
    let e = hook("evt.1");
    bounded(direct.deliver(&e, &Ctx::for_envelope(&e)))
        .await
        .unwrap();
    assert_eq!(admin.count(&dq).await, 1);
    admin.cleanup().await;
}

/// A connection lives on the runtime it was opened on, and so does the task that awaits
/// publishes and confirms. That runtime may end while the sink lives on (a sink shared by
/// tests, each on its own runtime): the next runtime's deliveries connect again and are
/// published and confirmed, each with its own outcome.
#[test]
fn deliveries_on_a_later_runtime_work_after_the_first_one_ends() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let first = current_thread_runtime();
    let _g = first.block_on(shared());
    let (mut admin, x) = first.block_on(async {
        let admin = Admin::new().await;
        (admin, unique("x"))
    });
    first.block_on(admin.exchange(&x, ExchangeKind::Topic));
    let q = first.block_on(admin.queue(&x, "#", &[]));
    let sink = Arc::new(sink(&x));
    let burst = |tag: &str| {
        (0..200)
            .map(|i| env(&format!("{tag}-{i}"), "github"))
            .collect()
    };
    first.block_on(bounded(deliver_all(&sink, burst("first"))));
    drop(admin);
    drop(first);
    let second = current_thread_runtime();
    second.block_on(bounded(deliver_all(&sink, burst("second"))));
    second.block_on(async {
        let admin = Admin::new().await;
        assert_eq!(admin.count(&q).await, 400);
        admin.delete_queue(&q).await;
        admin.delete_exchange(&x).await;
    });
}

/// A loopback proxy to the test broker that, once stalled, stops reading what the client
/// sends (the broker's answers still flow): a broker that stopped reading its socket.
struct StallingProxy {
    addr: std::net::SocketAddr,
    stalled: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl StallingProxy {
    async fn start() -> StallingProxy {
        let upstream = broker_addr();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stalled, watch) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            // Dropped with this task: every connection's copying ends with the proxy.
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                conns.spawn(async move {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                });
                let mut stalled = watch.clone();
                conns.spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        if *stalled.borrow_and_update() {
                            // Read nothing more; the connection lives until the proxy ends.
                            std::future::pending::<()>().await;
                        }
                        let n = tokio::select! {
                            n = cr.read(&mut buf) => n.unwrap_or(0),
                            _ = stalled.changed() => continue,
                        };
                        if n == 0 || sw.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        StallingProxy {
            addr,
            stalled,
            task,
        }
    }

    fn stall(&self) {
        self.stalled.send_replace(true);
    }
}

impl Drop for StallingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_stops_reading_bounds_the_messages_waiting_to_be_written() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let mut admin = Admin::new().await;
    let (x, q) = admin.topic_with_queue("#").await;
    let proxy = StallingProxy::start().await;
    let cfg = AmqpConfig::new(&format!("amqp://guest:guest@{}/%2f", proxy.addr), &x)
        .unwrap()
        .with_confirm_timeout(std::time::Duration::from_millis(1500));
    let sink = Arc::new(AmqpSink::new(cfg));
    let first = env("stall-first", "s");
    bounded(sink.deliver(&first, &Ctx::for_envelope(&first)))
        .await
        .unwrap();
    proxy.stall();
    // 300 messages of about 81 KB (24 MB): more than the kernel's socket buffers and the
    // sink's 2 MiB of unwritten messages hold while nothing is read.
    let body = vec![b'x'; 60_000];
    let mut set = tokio::task::JoinSet::new();
    for i in 0..300 {
        let sink = Arc::clone(&sink);
        let e = Envelope::builder(format!("stall-{i}"), "s", body.clone())
            .build()
            .unwrap();
        set.spawn(async move { bounded(sink.deliver(&e, &Ctx::for_envelope(&e))).await });
    }
    let (mut unwritten, mut unconfirmed) = (0, 0);
    while let Some(res) = set.join_next().await {
        let err = res.unwrap().expect_err("nothing reaches the broker");
        assert_eq!(err.class(), Class::Transient, "{err}");
        match err.reason().downcast_ref::<AmqpError>() {
            // Never encoded, never sent.
            Some(AmqpError::Unwritten { .. }) => {
                assert_eq!(err.may_have_landed(), Some(false), "{err}");
                unwritten += 1;
            }
            Some(AmqpError::ConfirmTimeout { .. }) => unconfirmed += 1,
            // No confirm slot free (only if the kernel buffered more than 256 messages).
            Some(AmqpError::Busy { .. }) => assert_eq!(err.may_have_landed(), Some(false)),
            other => panic!("{other:?}: {err}"),
        }
    }
    assert!(
        unwritten > 0,
        "{unconfirmed} unconfirmed, none waited unwritten"
    );
    assert!(unconfirmed > 0, "{unwritten} unwritten, none was sent");
    drop(proxy);
    assert_eq!(admin.count(&q).await, 1, "only the first message arrived");
    admin.cleanup().await;
}

//! What reaches Redis: the stream entry's fields against `ankusa-message`'s `Outgoing` for the same
//! hook, `MAXLEN ~`, the channel payload, `describe`, `durable` and `check`.

use crate::common::{admin, del, entries, env, shared_url};
use ankusa_message::{DEFAULT_INLINE_MAX_BYTES, EmptyValues, Layout, Outgoing};
use ankusa_sink_core::{Check, Ctx, Payload, Sink, Subject};
use ankusa_sink_redis::{MESSAGE_FIELD, RedisConfig, RedisSink};
use ankusa_sink_testkit::support::{unique_name, wire_hooks};
use futures_util::StreamExt as _;
use std::num::NonZeroU64;

/// `(field, value)` pairs of `out`: `message` first, then the attributes as `as_attr()`.
fn expected(out: &Outgoing<'_>) -> Vec<(String, Vec<u8>)> {
    let mut v = vec![(MESSAGE_FIELD.to_owned(), out.body().to_vec())];
    v.extend(
        out.attributes()
            .iter()
            .map(|(a, value)| (a.as_attr().to_owned(), value.as_bytes().to_vec())),
    );
    v
}

#[tokio::test]
async fn a_stream_entry_is_the_message_then_the_kafka_header_names() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    let source = unique_name("src");
    let key = format!("wire-{source}");
    let sink =
        RedisSink::new(RedisConfig::stream(shared_url(), "wire-{source_id}").unwrap()).unwrap();
    let layout = Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), EmptyValues::Keep);
    let mut want = Vec::new();
    for (e, ctx) in &wire_hooks(&source) {
        sink.deliver(e, ctx).await.unwrap();
        want.push(expected(&Outgoing::new(e, ctx, &layout).unwrap()));
    }
    let got = entries(&shared_url(), &key).await.unwrap();
    del(&shared_url(), &key).await.unwrap();
    assert_eq!(got, want);
    // The tenantless hook keeps ankusa_tenant_id as "".
    assert!(got[0].contains(&("ankusa_tenant_id".to_owned(), Vec::new())));
    assert!(got[1].contains(&("ankusa_replay_id".to_owned(), b"rp-1".to_vec())));
}

#[tokio::test]
async fn maxlen_trims_approximately() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    let stream = unique_name("maxlen");
    let cfg = RedisConfig::stream(shared_url(), &stream)
        .unwrap()
        .with_maxlen(NonZeroU64::new(10).unwrap())
        .unwrap();
    let sink = RedisSink::new(cfg).unwrap();
    for _ in 0..250 {
        let e = env(&unique_name("h"));
        sink.deliver(&e, &Ctx::for_envelope(&e)).await.unwrap();
    }
    let len: u64 = redis::cmd("XLEN")
        .arg(&stream)
        .query_async(&mut admin(&shared_url()).await.unwrap())
        .await
        .unwrap();
    del(&shared_url(), &stream).await.unwrap();
    // `~` trims whole nodes (100 entries by default): fewer than sent, at least 10.
    assert!((10..250).contains(&len), "XLEN {len}");
}

#[tokio::test]
async fn a_channel_subscriber_receives_the_message() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    let channel = unique_name("chan");
    let client = redis::Client::open(shared_url()).unwrap();
    let mut sub = client.get_async_pubsub().await.unwrap();
    sub.subscribe(&channel).await.unwrap();
    let sink = RedisSink::new(RedisConfig::channel(shared_url(), &channel).unwrap()).unwrap();
    assert_eq!(sink.check().await.unwrap(), Check::Passed);
    let e = env(&unique_name("h"));
    let ctx = Ctx::for_envelope(&e);
    sink.deliver(&e, &ctx).await.unwrap();
    let msg = sub.on_message().next().await.unwrap();
    let layout = Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), EmptyValues::Keep);
    assert_eq!(
        msg.get_payload_bytes(),
        Outgoing::new(&e, &ctx, &layout).unwrap().body()
    );
}

#[tokio::test]
async fn describe_durable_and_check() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    let url = format!(
        "redis://default:desc-pa55@{}",
        shared_url().trim_start_matches("redis://")
    );
    let sink = RedisSink::new(
        RedisConfig::stream(&url, "hooks.{tenant_id}.{source_id}")
            .unwrap()
            .with_durable(true)
            .unwrap(),
    )
    .unwrap();
    assert!(sink.capabilities().durable);
    let d = sink
        .describe(&Subject::new("stripe", Some("acme".into())))
        .unwrap();
    assert_eq!(d.protocol, "redis");
    assert_eq!(d.payload, Payload::Message);
    assert_eq!(d.address.as_deref(), Some("hooks.acme.stripe"));
    assert_eq!(d.computed, vec!["stream".to_owned()]);
    assert_eq!(
        d.host.as_deref(),
        Some(shared_url().trim_start_matches("redis://"))
    );
    let dump = format!("{d:?} {sink:?}");
    assert!(!dump.contains("desc-pa55"), "{dump}");
    // The durable sink's check also asks the server whether it persists (the shared server
    // does not): `classify.rs` tests that; the same login and key without `durable` pass.
    let plain = RedisSink::new(RedisConfig::stream(&url, "hooks.{tenant_id}.{source_id}").unwrap())
        .unwrap();
    assert!(!plain.capabilities().durable);
    assert_eq!(plain.check().await.unwrap(), Check::Passed);
}

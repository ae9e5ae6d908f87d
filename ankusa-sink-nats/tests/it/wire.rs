//! The wire format read back from the stream: `Nats-Msg-Id`, the `ankusa_*` headers and
//! the Message v1 body are exactly what `ankusa-message`'s `Outgoing` makes for the same envelope.

use crate::common::*;
use ankusa_sink_testkit::ankusa_message::{EmptyValues, Layout, Outgoing};
use ankusa_sink_testkit::ankusa_sink_core::{Ctx, Envelope, Sink, Subject};

#[tokio::test]
async fn headers_and_body_are_outgoings() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let (stream, subject) = names("wire");
    create_stream(SHARED_URL, &stream, &subject, Limits::default()).await;
    let sink = sink(SHARED_URL, &subject);
    let with_tenant = Envelope::builder("w-1", "github", &b"{\"a\":1}"[..])
        .tenant_id("acme")
        .dedupe_key("evt-9")
        .received_at(1_700_000_000_000)
        .build()
        .unwrap();
    let without = Envelope::builder("w-2", "github", &b"\x00\xff"[..])
        .build()
        .unwrap();
    let cases = [
        (with_tenant.clone(), Ctx::for_envelope(&with_tenant), "w-1"),
        (without.clone(), Ctx::for_envelope(&without), "w-2"),
        (
            with_tenant.clone(),
            Ctx::for_envelope(&with_tenant).with_replay_id("r-7"),
            "w-1:replay:r-7",
        ),
    ];
    for (env, ctx, _) in &cases {
        sink.deliver(env, ctx).await.unwrap();
    }
    let got = stored(&raw(SHARED_URL).await, &stream).await.unwrap();
    assert_eq!(got.len(), cases.len());
    let layout = Layout::message(sink.capabilities().inline_max_bytes, EmptyValues::Keep);
    for ((env, ctx, msg_id), m) in cases.iter().zip(&got) {
        let out = Outgoing::new(env, ctx, &layout).unwrap();
        let mut want = vec![("Nats-Msg-Id".to_owned(), (*msg_id).to_owned())];
        want.extend(
            out.attributes()
                .iter()
                .map(|(a, v)| (a.as_attr().to_owned(), v.to_string())),
        );
        let mut have = m.headers.clone();
        have.sort();
        want.sort();
        assert_eq!(have, want);
        assert_eq!(m.payload, out.body());
    }
    // No tenant: the header is there, empty.
    assert!(
        got[1]
            .headers
            .iter()
            .any(|(k, v)| k == "ankusa_tenant_id" && v.is_empty())
    );
    delete_stream(SHARED_URL, &stream).await.unwrap();
}

#[tokio::test]
async fn a_duplicate_is_ok_and_stored_once_but_a_replay_is_stored_again() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let (stream, subject) = names("dup");
    create_stream(SHARED_URL, &stream, &subject, Limits::default()).await;
    let sink = sink(SHARED_URL, &subject);
    let env = Envelope::builder("dup-1", "src", &b"{}"[..])
        .build()
        .unwrap();
    sink.deliver(&env, &Ctx::for_envelope(&env)).await.unwrap();
    sink.deliver(&env, &Ctx::for_envelope(&env)).await.unwrap();
    let replay = Ctx::for_envelope(&env).with_replay_id("job-1");
    sink.deliver(&env, &replay).await.unwrap();
    let got = stored(&raw(SHARED_URL).await, &stream).await.unwrap();
    assert_eq!(got.len(), 2);
    delete_stream(SHARED_URL, &stream).await.unwrap();
}

#[tokio::test]
async fn describe_names_host_and_subject_without_userinfo() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let sink = ankusa_sink_nats::NatsSink::new(
        ankusa_sink_nats::NatsConfig::new("nats://u:pw-secret@127.0.0.1:4222", "a.b").unwrap(),
    );
    let d = sink.describe(&Subject::new("github", None)).unwrap();
    assert_eq!(d.protocol, "nats");
    assert_eq!(d.host.as_deref(), Some("127.0.0.1:4222"));
    assert_eq!(d.address.as_deref(), Some("a.b"));
    assert!(!format!("{d:?} {sink:?}").contains("pw-secret"));
    let t = ankusa_sink_nats::NatsSink::new(
        ankusa_sink_nats::NatsConfig::new("nats://127.0.0.1:4222", "x")
            .unwrap()
            .with_subject_template("hooks.{tenant_id}.{source_id}")
            .unwrap(),
    );
    let d = t
        .describe(&Subject::new("github", Some("acme".into())))
        .unwrap();
    assert_eq!(d.address.as_deref(), Some("hooks.acme.github"));
    let d = t.describe(&Subject::new("github", None)).unwrap();
    assert_eq!(d.computed, vec!["subject".to_owned()]);
}

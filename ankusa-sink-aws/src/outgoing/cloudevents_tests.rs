//! `to_entry` for SQS with CloudEvents, binary and structured.

use super::*;
use ankusa_message::TraceContext;
use ankusa_message::cloudevents::CloudEvents;
use ankusa_message::signing::Signer;
use ankusa_message::{DEFAULT_INLINE_MAX_BYTES, EmptyValues, Layout};
use ankusa_sink_core::{Class, Ctx, Envelope, Failure};
use aws_sdk_sqs::types::MessageAttributeValue;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn layout(mode: Mode) -> Layout {
    Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), EmptyValues::Drop)
        .with_cloudevents(CloudEvents::new(mode, "t.x").unwrap())
}

fn full(body: &[u8], content_type: &str) -> Envelope {
    Envelope::builder("h1", "stripe", body.to_vec())
        .tenant_id("acme")
        .dedupe_key("evt_1")
        .content_type(content_type)
        .build()
        .unwrap()
}

fn entry(env: &Envelope, ctx: &Ctx, layout: &Layout) -> Entry<MessageAttributeValue> {
    to_entry(Outgoing::new(env, ctx, layout).unwrap(), Ids::default()).unwrap()
}

fn names(e: &Entry<MessageAttributeValue>) -> Vec<&str> {
    let mut n: Vec<&str> = e.attributes.keys().map(String::as_str).collect();
    n.sort_unstable();
    n
}

fn value<'a>(e: &'a Entry<MessageAttributeValue>, k: &str) -> Option<&'a str> {
    e.attributes.get(k).map(|v| v.string_value().unwrap())
}

#[test]
fn binary_mode_sends_the_data_as_the_body_beside_ce_attributes() {
    let env = Envelope::builder("h2", "stripe", "plain text ✓")
        .content_type("text/plain; charset=utf-8")
        .build()
        .unwrap();
    let ctx = Ctx::for_envelope(&env);
    let e = entry(&env, &ctx, &layout(Mode::Binary));
    assert_eq!(e.body, "plain text ✓", "the data, as it came");
    // 4 of ours (no tenant: dropped, as SQS refuses empty values) + 6 of the event
    // (`datacontenttype` is `content_type`): 10, nothing left out.
    assert_eq!(
        names(&e),
        [
            "ankusa_id",
            "ankusa_idempotency_key",
            "ankusa_source_id",
            "ce-ankusaidempotencykey",
            "ce-id",
            "ce-source",
            "ce-specversion",
            "ce-time",
            "ce-type",
            "content_type",
        ]
    );
    assert_eq!(value(&e, "content_type"), Some("text/plain; charset=utf-8"));
    assert_eq!(value(&e, "ce-id"), Some("h2"));
    assert_eq!(value(&e, "ce-source"), Some("/sources/stripe"));
    assert_eq!(value(&e, "ce-type"), Some("t.x"));
    assert_eq!(value(&e, "ce-specversion"), Some("1.0"));
    let attr_bytes: usize = e
        .attributes
        .iter()
        .map(|(k, v)| k.len() + "String".len() + v.string_value().unwrap().len())
        .sum();
    assert_eq!(e.size, e.body.len() + attr_bytes);
    // A hook without a content type: the event's default.
    let bare = Envelope::builder("h3", "s", "x").build().unwrap();
    let ctx = Ctx::for_envelope(&bare);
    let e = entry(&bare, &ctx, &layout(Mode::Binary));
    assert_eq!(value(&e, "content_type"), Some("application/octet-stream"));
}

#[test]
fn binary_data_sqs_cannot_carry_is_refused_permanent_and_unsent() {
    for (body, why) in [
        (&[0xff_u8, 0x00, 0x80][..], "not UTF-8"),
        (b"", "empty"),
        (b"a\x00b", "a character SQS refuses"),
        ("\u{FFFE}".as_bytes(), "a character SQS refuses"),
    ] {
        let env = full(body, "application/octet-stream");
        let ctx = Ctx::for_envelope(&env);
        let out = Outgoing::new(&env, &ctx, &layout(Mode::Binary)).unwrap();
        let err = to_entry::<MessageAttributeValue>(out, Ids::default()).unwrap_err();
        assert!(
            matches!(err, AwsError::BodyNotText { why: w } if w.starts_with(why)),
            "{err:?}"
        );
        assert!(err.to_string().contains("cloudevents-structured"), "{err}");
        let f = Failure::from(err);
        assert_eq!(f.class(), Class::Permanent);
        assert_eq!(f.may_have_landed(), Some(false));
        // Structured mode carries the same data (as `data_base64`).
        let out = Outgoing::new(&env, &ctx, &layout(Mode::Structured)).unwrap();
        let e = to_entry::<MessageAttributeValue>(out, Ids::default()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&e.body).unwrap();
        assert!(v.get("data_base64").is_some(), "{v}");
    }
    // Tabs, newlines and astral characters are text SQS takes.
    let env = full("a\tb\r\nc 𝄞".as_bytes(), "text/plain");
    let ctx = Ctx::for_envelope(&env);
    assert_eq!(entry(&env, &ctx, &layout(Mode::Binary)).body, "a\tb\r\nc 𝄞");
}

#[test]
fn structured_mode_sends_the_event_with_our_attributes() {
    let env = full(br#"{"a":1}"#, "application/json");
    let ctx = Ctx::for_envelope(&env).with_replay_id("r1");
    let e = entry(&env, &ctx, &layout(Mode::Structured));
    let v: serde_json::Value = serde_json::from_str(&e.body).unwrap();
    assert_eq!(v["id"], "h1:replay:r1");
    assert_eq!(v["data"], serde_json::json!({"a": 1}));
    assert_eq!(
        value(&e, "content_type"),
        Some("application/cloudevents+json")
    );
    assert!(!e.attributes.keys().any(|k| k.starts_with("ce-")));
    assert!(!e.attributes.contains_key("ankusa_message_version"));
    assert_eq!(e.attributes.len(), 7);
}

/// The cap, written out independently: what stays of a binary-mode event with every
/// attribute set (tenant, dedupe key, replay, trace context with a state), unsigned
/// and signed; and the signature covers the body the consumer reads.
#[test]
fn binary_mode_keeps_ten_attributes_by_the_documented_order() {
    let env = full(br#"{"a":1}"#, "application/json");
    let trace = TraceContext::root().with_tracestate("a=1");
    let ctx = Ctx::for_envelope(&env)
        .with_replay_id("r1")
        .with_extension(trace.clone());
    // 9 of ours + 10 of the event: the 8 of ours whose value the event carries (or the
    // idempotency key holds) go first, then `ce-ankusareplayid` (in `ce-id`).
    let e = entry(&env, &ctx, &layout(Mode::Binary));
    assert_eq!(
        names(&e),
        [
            "ce-ankusaidempotencykey",
            "ce-ankusatenant",
            "ce-id",
            "ce-source",
            "ce-specversion",
            "ce-time",
            "ce-traceparent",
            "ce-tracestate",
            "ce-type",
            "content_type",
        ]
    );
    assert_eq!(value(&e, "ce-traceparent"), Some(trace.traceparent()));
    assert_eq!(value(&e, "ce-id"), Some("h1:replay:r1"));

    // Signed: 22 attributes, 10 stay: the required four, the content type, the
    // signature's three, then the idempotency key and the traceparent.
    let signer = Signer::new([SECRET]).unwrap();
    let signed = layout(Mode::Binary).with_signer(signer.clone());
    let e = entry(&env, &ctx, &signed);
    assert_eq!(
        names(&e),
        [
            "ce-ankusaidempotencykey",
            "ce-id",
            "ce-source",
            "ce-specversion",
            "ce-traceparent",
            "ce-type",
            "content_type",
            "webhook-id",
            "webhook-signature",
            "webhook-timestamp",
        ]
    );
    let sig = (
        value(&e, "webhook-id").unwrap(),
        value(&e, "webhook-timestamp").unwrap(),
        value(&e, "webhook-signature").unwrap(),
    );
    assert_eq!(sig.0, "h1:replay:r1");
    let now = std::time::SystemTime::now();
    let tolerance = std::time::Duration::from_secs(300);
    assert!(
        signer
            .verify(sig.0, sig.1, sig.2, e.body.as_bytes(), now, tolerance)
            .is_ok()
    );

    // Without a trace context and a replay: 6 of ours + 7 of the event, three go.
    let ctx = Ctx::for_envelope(&env);
    let e = entry(&env, &ctx, &layout(Mode::Binary));
    assert_eq!(e.attributes.len(), MAX_ATTRIBUTES);
    for gone in [
        "ankusa_source_id",
        "ankusa_tenant_id",
        "ankusa_idempotency_key",
    ] {
        assert!(!e.attributes.contains_key(gone), "{gone}");
    }
    assert_eq!(value(&e, "ankusa_id"), Some("h1"));
    assert_eq!(value(&e, "ankusa_dedupe_key"), Some("evt_1"));
}

#[test]
fn a_signed_structured_event_verifies_over_its_json() {
    let signer = Signer::new([SECRET]).unwrap();
    let env = full(b"\x00\xff", "application/octet-stream");
    let ctx = Ctx::for_envelope(&env).with_extension(TraceContext::root());
    let e = entry(
        &env,
        &ctx,
        &layout(Mode::Structured).with_signer(signer.clone()),
    );
    assert!(e.attributes.len() <= MAX_ATTRIBUTES);
    let v = |k: &str| value(&e, k).unwrap();
    assert!(
        signer
            .verify(
                v("webhook-id"),
                v("webhook-timestamp"),
                v("webhook-signature"),
                e.body.as_bytes(),
                std::time::SystemTime::now(),
                std::time::Duration::from_secs(300),
            )
            .is_ok()
    );
}

//! `to_entry` for SQS: the wire attributes, body and size.

use super::*;
use ankusa_message::{DEFAULT_INLINE_MAX_BYTES, EmptyValues, Layout, encode};
use ankusa_sink_core::{Ctx, Envelope};
use aws_sdk_sqs::types::MessageAttributeValue;

fn layout() -> Layout {
    Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), EmptyValues::Drop)
}

#[test]
fn the_wire_attributes_body_and_size() {
    let env = Envelope::builder("h1", "stripe", &b"{\"a\":1}"[..])
        .tenant_id("acme")
        .dedupe_key("evt_1")
        .build()
        .unwrap();
    let ctx = Ctx::for_envelope(&env).with_replay_id("r-9");
    let out = Outgoing::new(&env, &ctx, &layout()).unwrap();
    let e: Entry<MessageAttributeValue> = to_entry(out, Ids::default()).unwrap();
    let mut got: Vec<(&str, &str, &str)> = e
        .attributes
        .iter()
        .map(|(k, v)| (k.as_str(), v.data_type(), v.string_value().unwrap()))
        .collect();
    got.sort_unstable();
    let want = [
        ("ankusa_dedupe_key", "String", "evt_1"),
        ("ankusa_id", "String", "h1"),
        ("ankusa_idempotency_key", "String", "acme:stripe:evt_1"),
        ("ankusa_message_version", "String", "1"),
        ("ankusa_replay_id", "String", "r-9"),
        ("ankusa_source_id", "String", "stripe"),
        ("ankusa_tenant_id", "String", "acme"),
        ("content_type", "String", "application/json"),
    ];
    assert_eq!(got, want);
    let body = encode(&env, &ctx, Some(DEFAULT_INLINE_MAX_BYTES)).unwrap();
    assert_eq!(e.body.as_bytes(), &body[..]);
    let attr_bytes: usize = want
        .iter()
        .map(|(k, t, v)| k.len() + t.len() + v.len())
        .sum();
    assert_eq!(e.size, body.len() + attr_bytes);

    // No tenant: no tenant attribute (SQS refuses empty values).
    let bare = Envelope::builder("h2", "github", "").build().unwrap();
    let ctx = Ctx::for_envelope(&bare);
    let out = Outgoing::new(&bare, &ctx, &layout()).unwrap();
    let e: Entry<MessageAttributeValue> = to_entry(out, Ids::default()).unwrap();
    assert!(!e.attributes.contains_key("ankusa_tenant_id"));
    assert_eq!(e.attributes.len(), 5);
}

#[test]
fn entry_debug_shows_shape_not_content() {
    let env = Envelope::builder("hook-1", "stripe", "card 4242-secret")
        .dedupe_key("evt_private")
        .build()
        .unwrap();
    let ctx = Ctx::for_envelope(&env);
    let out = Outgoing::new(&env, &ctx, &layout()).unwrap();
    let ids = Ids {
        group: Some("acme/stripe".to_owned()),
        dedup: Some("hook-1".to_owned()),
    };
    let e: Entry<MessageAttributeValue> = to_entry(out, ids).unwrap();
    let text = format!("{e:?}");
    for secret in ["4242-secret", "evt_private", "acme/stripe", "hook-1"] {
        assert!(!text.contains(secret), "{text}");
    }
    assert!(text.contains("\"ankusa_dedupe_key\""), "{text}");
    assert!(text.contains("group_id: true"), "{text}");
}

#[test]
fn a_signed_message_keeps_ten_attributes_and_its_signature() {
    use ankusa_message::signing::Signer;
    let signer = Signer::new(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).unwrap();
    let signed = layout().with_signer(signer.clone());
    let env = Envelope::builder("h1", "stripe", &b"{}"[..])
        .tenant_id("acme")
        .dedupe_key("evt_1")
        .build()
        .unwrap();
    // Eight attributes plus three: the message version goes (it is the body's `v`).
    let ctx = Ctx::for_envelope(&env).with_replay_id("r-9");
    let out = Outgoing::new(&env, &ctx, &signed).unwrap();
    let (id, ts, sig) = (
        out.get(Attr::WebhookId).unwrap().to_owned(),
        out.get(Attr::WebhookTimestamp).unwrap().to_owned(),
        out.get(Attr::WebhookSignature).unwrap().to_owned(),
    );
    let e: Entry<MessageAttributeValue> = to_entry(out, Ids::default()).unwrap();
    assert_eq!(e.attributes.len(), MAX_ATTRIBUTES);
    assert!(!e.attributes.contains_key("ankusa_message_version"));
    for kept in ["ankusa_replay_id", "ankusa_dedupe_key", "ankusa_source_id"] {
        assert!(e.attributes.contains_key(kept), "{kept}");
    }
    let value = |k: &str| e.attributes[k].string_value().unwrap().to_owned();
    assert_eq!(value("webhook-id"), "h1:replay:r-9");
    assert_eq!(
        (value("webhook-timestamp"), value("webhook-signature")),
        (ts, sig.clone())
    );
    let attr_bytes: usize = e
        .attributes
        .iter()
        .map(|(k, v)| k.len() + "String".len() + v.string_value().unwrap().len())
        .sum();
    assert_eq!(
        e.size,
        e.body.len() + attr_bytes,
        "the dropped one is not counted"
    );
    let msg = ankusa_message::verify(
        &signer,
        &id,
        &value("webhook-timestamp"),
        &sig,
        e.body.as_bytes(),
        std::time::SystemTime::now(),
    )
    .unwrap();
    assert_eq!(msg.replay_id.as_deref(), Some("r-9"));

    // Fewer attributes: nothing is left out.
    let bare = Envelope::builder("h2", "stripe", &b"{}"[..])
        .build()
        .unwrap();
    let ctx = Ctx::for_envelope(&bare);
    let e: Entry<MessageAttributeValue> =
        to_entry(Outgoing::new(&bare, &ctx, &signed).unwrap(), Ids::default()).unwrap();
    assert_eq!(e.attributes.len(), 8, "5 + 3");
    let ctx = Ctx::for_envelope(&env);
    let e: Entry<MessageAttributeValue> =
        to_entry(Outgoing::new(&env, &ctx, &signed).unwrap(), Ids::default()).unwrap();
    assert_eq!(e.attributes.len(), 10, "7 + 3");
    assert!(e.attributes.contains_key("ankusa_message_version"));

    // With the whole trace context too (8 + 3 + 2): the message version, replay id and
    // dedupe key go, in that order; the trace context and the signature stay.
    let trace = ankusa_message::TraceContext::root().with_tracestate("a=1");
    let ctx = Ctx::for_envelope(&env)
        .with_replay_id("r-9")
        .with_extension(trace.clone());
    let e: Entry<MessageAttributeValue> =
        to_entry(Outgoing::new(&env, &ctx, &signed).unwrap(), Ids::default()).unwrap();
    assert_eq!(e.attributes.len(), MAX_ATTRIBUTES);
    for gone in [
        "ankusa_message_version",
        "ankusa_replay_id",
        "ankusa_dedupe_key",
    ] {
        assert!(!e.attributes.contains_key(gone), "{gone}");
    }
    let value = |k: &str| e.attributes[k].string_value().unwrap().to_owned();
    assert_eq!(value("traceparent"), trace.traceparent());
    assert_eq!(value("tracestate"), "a=1");
    assert!(e.attributes.contains_key("webhook-signature"));
}

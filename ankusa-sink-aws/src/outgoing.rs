//! Core's [`Outgoing`] as what SQS `SendMessage` / SNS `Publish` (or a batch entry)
//! carries: the Message v1 body, the attributes as the SDK's `String` message attributes,
//! the FIFO ids and the size AWS counts; and as what a Kinesis record ([`to_record`]) and
//! an EventBridge entry ([`to_event`]) carry: the Message v1 body alone, which holds
//! everything the attributes would (id, tenant, headers, idempotency key).

use ankusa_message::{Attr, Body, Outgoing};
use std::collections::HashMap;
use std::fmt;

/// The SDK's `MessageAttributeValue`: SQS and SNS each have their own type of the same
/// shape.
pub(crate) trait AttributeValue: Clone + Send + Sync + 'static {
    /// A `String` attribute of `value`.
    fn string(value: &str) -> Self;
}

/// [`AttributeValue`] for each SDK's `MessageAttributeValue`.
macro_rules! attribute_value {
    ($($feature:literal => $ty:ty),*) => {$(
        #[cfg(feature = $feature)]
        impl AttributeValue for $ty {
            fn string(value: &str) -> Self {
                <$ty>::builder()
                    .data_type(DATA_TYPE)
                    .string_value(value)
                    .build()
                    .expect("data_type is set")
            }
        }
    )*};
}

attribute_value!(
    "sqs" => aws_sdk_sqs::types::MessageAttributeValue,
    "sns" => aws_sdk_sns::types::MessageAttributeValue
);

/// The data type of every attribute.
const DATA_TYPE: &str = "String";

/// FIFO ids of one message (or a configured group on a standard destination).
#[derive(Clone, Default)]
pub(crate) struct Ids {
    /// The message group id.
    pub(crate) group: Option<String>,
    /// The deduplication id.
    pub(crate) dedup: Option<String>,
}

/// One prepared message.
///
/// `Debug` shows its shape only (sizes, attribute names, which ids are set): the body and
/// the attribute values carry the hook.
#[derive(Clone)]
pub(crate) struct Entry<A> {
    /// The Message v1 JSON.
    pub(crate) body: String,
    /// The attributes, `String` typed, in the SDK's map.
    pub(crate) attributes: HashMap<String, A>,
    /// The FIFO ids.
    pub(crate) ids: Ids,
    /// What AWS counts toward its limits: the body plus, for every attribute, its name,
    /// its data type (`String`) and its value.
    pub(crate) size: usize,
}

/// The most message attributes SQS and SNS take on one message.
pub(crate) const MAX_ATTRIBUTES: usize = 10;

/// Attributes left out, in this order, while a message has more than [`MAX_ATTRIBUTES`]:
/// each value is also inside the Message v1 body (`v`, `replay_id`, `dedupe_key`,
/// `source_id`). Only a signed message can have more than 10 (up to 8 + 3 signing + 2
/// trace context); the signature's three and the trace context always go.
pub(crate) const DROPPED_WHEN_OVER_LIMIT: [Attr; 4] = [
    Attr::MessageVersion,
    Attr::ReplayId,
    Attr::DedupeKey,
    Attr::SourceId,
];

/// The entry for `out`: the one mapping from core's message to the SDK's.
pub(crate) fn to_entry<A: AttributeValue>(out: Outgoing<'_>, ids: Ids) -> Entry<A> {
    let all = out.attributes();
    let over = all.len().saturating_sub(MAX_ATTRIBUTES);
    let dropped: Vec<Attr> = DROPPED_WHEN_OVER_LIMIT
        .into_iter()
        .filter(|d| all.iter().any(|(a, _)| a == d))
        .take(over)
        .collect();
    let attrs: Vec<&(Attr, _)> = all.iter().filter(|(a, _)| !dropped.contains(a)).collect();
    let attributes = attrs
        .iter()
        .map(|(attr, value)| (attr.as_attr().to_owned(), A::string(value)))
        .collect();
    let attribute_bytes: usize = attrs
        .iter()
        .map(|(a, v)| a.as_attr().len() + v.len() + DATA_TYPE.len())
        .sum();
    let size = out.body().len() + attribute_bytes;
    let body = match out.into_body() {
        Body::Message(json) => String::from_utf8(json).expect("Message v1 is JSON, hence UTF-8"),
        Body::Raw(raw) => String::from_utf8_lossy(&raw).into_owned(),
    };
    Entry {
        body,
        attributes,
        ids,
        size,
    }
}

#[cfg(feature = "kinesis")]
/// One prepared Kinesis record.
///
/// `Debug` shows sizes only: the data and the key carry the hook.
#[derive(Clone)]
pub(crate) struct Record {
    /// The Message v1 JSON.
    pub(crate) data: Vec<u8>,
    /// The partition key: the key template's rendering, else the idempotency key.
    pub(crate) partition_key: String,
}

#[cfg(feature = "kinesis")]
impl Record {
    /// What Kinesis counts toward its record limit: data plus partition key (UTF-8).
    pub(crate) fn size(&self) -> usize {
        self.data.len() + self.partition_key.len()
    }
}

#[cfg(feature = "kinesis")]
/// A partition key Kinesis takes: one over its 256 characters becomes `sha256:` and the
/// hex SHA-256 of the key (71 characters), so the same hook key still reaches the same
/// shard instead of failing every such hook.
fn partition_key(key: &str) -> String {
    use sha2::Digest as _;
    if key.chars().count() <= crate::config::KINESIS_MAX_PARTITION_KEY_CHARS {
        return key.to_owned();
    }
    format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(key.as_bytes()))
    )
}

#[cfg(feature = "kinesis")]
/// The Kinesis record for `out`: the Message v1 body as the data, the rendered key (the
/// layout's key template) or the idempotency key as the partition key.
pub(crate) fn to_record(out: Outgoing<'_>) -> Record {
    let partition_key = partition_key(out.key().unwrap_or(out.idempotency_key()));
    Record {
        data: out.into_body().as_bytes().to_vec(),
        partition_key,
    }
}

#[cfg(feature = "kinesis")]
impl fmt::Debug for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Record")
            .field("data_bytes", &self.data.len())
            .field("partition_key_chars", &self.partition_key.chars().count())
            .finish()
    }
}

#[cfg(feature = "eventbridge")]
/// One prepared EventBridge entry: its `Detail`; `Source`, `DetailType` and `EventBusName`
/// are the sink's, the same for every entry.
///
/// `Debug` shows the size only.
#[derive(Clone)]
pub(crate) struct Event {
    /// The Message v1 JSON (an object, as `Detail` must be).
    pub(crate) detail: String,
    /// What EventBridge counts: `Detail`, `Source` and `DetailType` (UTF-8 bytes).
    pub(crate) size: usize,
}

#[cfg(feature = "eventbridge")]
/// The EventBridge entry for `out`, whose `Source` and `DetailType` are `source` and
/// `detail_type`.
pub(crate) fn to_event(out: Outgoing<'_>, source: &str, detail_type: &str) -> Event {
    let detail = match out.into_body() {
        Body::Message(json) => String::from_utf8(json).expect("Message v1 is JSON, hence UTF-8"),
        Body::Raw(raw) => String::from_utf8_lossy(&raw).into_owned(),
    };
    Event {
        size: detail.len() + source.len() + detail_type.len(),
        detail,
    }
}

#[cfg(feature = "eventbridge")]
impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event").field("size", &self.size).finish()
    }
}

impl<A> fmt::Debug for Entry<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.attributes.keys().map(String::as_str).collect();
        names.sort_unstable();
        f.debug_struct("Entry")
            .field("body_bytes", &self.body.len())
            .field("attributes", &names)
            .field("group_id", &self.ids.group.is_some())
            .field("dedup_id", &self.ids.dedup.is_some())
            .field("size", &self.size)
            .finish()
    }
}

#[cfg(all(test, feature = "kinesis", feature = "eventbridge"))]
mod record_tests {
    use super::*;
    use ankusa_message::template::{AbsentTenant, KeyTemplate};
    use ankusa_message::{DEFAULT_INLINE_MAX_BYTES, EmptyValues, Layout, encode};
    use ankusa_sink_core::{Ctx, Envelope};

    fn layout() -> Layout {
        Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), EmptyValues::Drop)
    }

    #[test]
    fn a_record_is_the_message_keyed_by_the_template_or_the_idempotency_key() {
        let env = Envelope::builder("h1", "stripe", &b"{\"a\":1}"[..])
            .tenant_id("acme")
            .dedupe_key("evt_1")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env);
        let body = encode(&env, &ctx, Some(DEFAULT_INLINE_MAX_BYTES)).unwrap();
        let r = to_record(Outgoing::new(&env, &ctx, &layout()).unwrap());
        assert_eq!(r.data, body);
        assert_eq!(r.partition_key, "acme:stripe:evt_1");
        assert_eq!(r.size(), body.len() + "acme:stripe:evt_1".len());

        let keyed = layout().with_key(
            KeyTemplate::parse("{tenant_id}/{source_id}", AbsentTenant::Default).unwrap(),
        );
        let r = to_record(Outgoing::new(&env, &ctx, &keyed).unwrap());
        assert_eq!((r.partition_key.as_str(), &r.data), ("acme/stripe", &body));
        let bare = Envelope::builder("h2", "gh", "").build().unwrap();
        let ctx = Ctx::for_envelope(&bare);
        let r = to_record(Outgoing::new(&bare, &ctx, &keyed).unwrap());
        assert_eq!(r.partition_key, "default/gh");
        let text = format!("{r:?}");
        assert!(
            !text.contains("default/gh") && !text.contains("\"v\""),
            "{text}"
        );
    }

    #[test]
    fn an_over_long_key_is_hashed_the_same_way_every_time() {
        let long = "k".repeat(300);
        let env = Envelope::builder("h1", "stripe", "")
            .dedupe_key(long.clone())
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env);
        let a = to_record(Outgoing::new(&env, &ctx, &layout()).unwrap());
        let b = to_record(Outgoing::new(&env, &ctx, &layout()).unwrap());
        assert_eq!(a.partition_key, b.partition_key);
        assert!(
            a.partition_key.starts_with("sha256:"),
            "{}",
            a.partition_key
        );
        assert_eq!(a.partition_key.len(), 71);
        let edge = "é".repeat(256);
        assert_eq!(
            partition_key(&edge),
            edge,
            "256 characters, 512 bytes: kept"
        );
    }

    #[test]
    fn an_event_is_the_message_as_detail() {
        let env = Envelope::builder("h1", "stripe", "x").build().unwrap();
        let ctx = Ctx::for_envelope(&env);
        let body = encode(&env, &ctx, Some(DEFAULT_INLINE_MAX_BYTES)).unwrap();
        let e = to_event(Outgoing::new(&env, &ctx, &layout()).unwrap(), "app", "Hook");
        assert_eq!(e.detail.as_bytes(), &body[..]);
        assert!(
            serde_json::from_str::<serde_json::Value>(&e.detail)
                .unwrap()
                .is_object()
        );
        assert_eq!(e.size, body.len() + 3 + 4);
        assert_eq!(format!("{e:?}"), format!("Event {{ size: {} }}", e.size));
    }
}

#[cfg(all(test, feature = "sqs"))]
mod tests {
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
        let e: Entry<MessageAttributeValue> = to_entry(out, Ids::default());
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
        let e: Entry<MessageAttributeValue> = to_entry(out, Ids::default());
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
        let e: Entry<MessageAttributeValue> = to_entry(out, ids);
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
        let e: Entry<MessageAttributeValue> = to_entry(out, Ids::default());
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
            to_entry(Outgoing::new(&bare, &ctx, &signed).unwrap(), Ids::default());
        assert_eq!(e.attributes.len(), 8, "5 + 3");
        let ctx = Ctx::for_envelope(&env);
        let e: Entry<MessageAttributeValue> =
            to_entry(Outgoing::new(&env, &ctx, &signed).unwrap(), Ids::default());
        assert_eq!(e.attributes.len(), 10, "7 + 3");
        assert!(e.attributes.contains_key("ankusa_message_version"));

        // With the whole trace context too (8 + 3 + 2): the message version, replay id and
        // dedupe key go, in that order; the trace context and the signature stay.
        let trace = ankusa_sink_core::TraceContext::root().with_tracestate("a=1");
        let ctx = Ctx::for_envelope(&env)
            .with_replay_id("r-9")
            .with_trace(trace.clone());
        let e: Entry<MessageAttributeValue> =
            to_entry(Outgoing::new(&env, &ctx, &signed).unwrap(), Ids::default());
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
}

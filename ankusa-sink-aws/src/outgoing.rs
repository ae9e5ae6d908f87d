//! Core's [`Outgoing`] as what SQS `SendMessage` / SNS `Publish` (or a batch entry)
//! carries: the Message v1 body, the attributes as the SDK's `String` message attributes,
//! the FIFO ids and the size AWS counts.

use ankusa_sink_core::message::{Body, Outgoing};
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

/// The entry for `out`: the one mapping from core's message to the SDK's.
pub(crate) fn to_entry<A: AttributeValue>(out: Outgoing<'_>, ids: Ids) -> Entry<A> {
    let attrs = out.attributes();
    let attributes = attrs
        .iter()
        .map(|(attr, value)| (attr.as_attr().to_owned(), A::string(value)))
        .collect();
    let size = out.body().len() + out.attribute_bytes() + attrs.len() * DATA_TYPE.len();
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

#[cfg(all(test, feature = "sqs"))]
mod tests {
    use super::*;
    use ankusa_sink_core::message::{DEFAULT_INLINE_MAX_BYTES, EmptyValues, Layout, encode};
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
}

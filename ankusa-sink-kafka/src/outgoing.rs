//! One function from core's [`Outgoing`] to the record librdkafka produces.

use ankusa_sink_core::message::Outgoing;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::BaseRecord;
use rdkafka::util::IntoOpaque;

/// The record for `out` on `topic`: value = the Message v1 body, key = the rendered key
/// template, timestamp = the hook's `received_at`, one header per attribute in
/// [`Outgoing`]'s order (`ankusa_tenant_id` is `""` without a tenant: the layout keeps
/// empty values).
pub(crate) fn to_record<'a, D: IntoOpaque>(
    out: &'a Outgoing<'_>,
    topic: &'a str,
    received_at: i64,
    opaque: D,
) -> BaseRecord<'a, str, [u8], D> {
    let attributes = out.attributes();
    let mut headers = OwnedHeaders::new_with_capacity(attributes.len());
    for (attr, value) in attributes {
        headers = headers.insert(Header {
            key: attr.as_attr(),
            value: Some(value.as_ref()),
        });
    }
    BaseRecord::with_opaque_to(topic, opaque)
        .payload(out.body())
        .key(out.key().unwrap_or_default())
        .timestamp(received_at)
        .headers(headers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sink_core::message::{EmptyValues, Layout};
    use ankusa_sink_core::template::{AbsentTenant, KeyTemplate};
    use ankusa_sink_core::{Ctx, Envelope};
    use rdkafka::message::Headers;

    fn layout() -> Layout {
        Layout::message(None, EmptyValues::Keep)
            .with_key(KeyTemplate::parse(crate::config::DEFAULT_KEY, AbsentTenant::Empty).unwrap())
    }

    fn headers_of(env: &Envelope, ctx: &Ctx) -> (Vec<(String, String)>, Vec<u8>) {
        let out = Outgoing::new(env, ctx, &layout()).unwrap();
        let record = to_record(&out, "t", env.received_at(), ());
        let headers = record
            .headers
            .as_ref()
            .unwrap()
            .iter()
            .map(|h| {
                (
                    h.key.to_owned(),
                    String::from_utf8(h.value.unwrap().to_vec()).unwrap(),
                )
            })
            .collect();
        (headers, record.key.unwrap().as_bytes().to_vec())
    }

    #[test]
    fn header_set_and_order() {
        let env = Envelope::builder("h1", "stripe", "{}")
            .dedupe_key("evt_1")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env).with_replay_id("r1");
        let (h, key) = headers_of(&env, &ctx);
        let names: Vec<&str> = h.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "ankusa_id",
                "ankusa_source_id",
                "ankusa_tenant_id",
                "ankusa_message_version",
                "ankusa_idempotency_key",
                "content_type",
                "ankusa_dedupe_key",
                "ankusa_replay_id"
            ]
        );
        assert_eq!(h[2].1, "");
        assert_eq!(h[4].1, "default:stripe:evt_1");
        assert_eq!(key, b"/stripe");
        let env = Envelope::builder("h1", "stripe", "{}")
            .tenant_id("acme")
            .build()
            .unwrap();
        let (h, key) = headers_of(&env, &Ctx::for_envelope(&env));
        assert_eq!(h.len(), 6);
        assert_eq!(h[2], ("ankusa_tenant_id".into(), "acme".into()));
        assert_eq!(key, b"acme/stripe");
    }
}

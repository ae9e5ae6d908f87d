//! One function from core's [`Outgoing`] to the record librdkafka produces.

use ankusa_message::{Attr, Outgoing};
use ankusa_sink_kit::Unrepresentable;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::BaseRecord;
use rdkafka::util::IntoOpaque;

/// The record for `out` on `topic`: value = the Message v1 body, key = the rendered key
/// template, timestamp = the hook's `received_at`, one header per attribute in
/// [`Outgoing`]'s order (`ankusa_tenant_id` is `""` without a tenant: the layout keeps
/// empty values). A CloudEvent adds what the CloudEvents Kafka binding names: `content-type`
/// (the data's, or `application/cloudevents+json` in structured mode) and, in binary mode,
/// `ce_<attribute>` for every other attribute.
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
    if out.cloudevents_mode().is_some() {
        headers = headers.insert(Header {
            key: "content-type",
            value: out.get(Attr::ContentType),
        });
        for (name, value) in out.cloudevent_attributes() {
            if *name != "datacontenttype" {
                // librdkafka copies the name: a temporary is enough.
                headers = headers.insert(Header {
                    key: &format!("ce_{name}"),
                    value: Some(value.as_ref()),
                });
            }
        }
    }
    BaseRecord::with_opaque_to(topic, opaque)
        .payload(out.body())
        .key(out.key().unwrap_or_default())
        .timestamp(received_at)
        .headers(headers)
}

/// What librdkafka counts of a record against `message.max.bytes` (`max_record_bytes` plus
/// room for headers), and refuses at enqueue with `MSG_SIZE_TOO_LARGE` beyond it: value,
/// key, and every header's name and value. Kafka refuses nothing else a hook can make:
/// header values are bytes (U+FFFF, NUL, CR and LF travel as they are), the key is bytes,
/// the topic is the config's. This counts the bytes alone, without the varints and the
/// record framing librdkafka adds (a few dozen bytes), so it never refuses a record
/// librdkafka would take; one within those bytes of the limit still fails, permanent,
/// with librdkafka's own `MessageSizeTooLarge`.
///
/// # Errors
/// [`Unrepresentable`] naming the largest header (`header "ankusa_idempotency_key"`),
/// never its value.
pub(crate) fn check(out: &Outgoing<'_>, message_max_bytes: usize) -> Result<(), Unrepresentable> {
    // Every header as (name prefix, name, value bytes): counted on every delivery without
    // building a list or a name; a name is made only for the refusal.
    let attributes = out
        .attributes()
        .iter()
        .map(|(attr, value)| ("", attr.as_attr(), value.len()));
    let cloudevent = out.cloudevents_mode().is_some().then(|| {
        let content_type = out.get(Attr::ContentType).map_or(0, str::len);
        let events = out
            .cloudevent_attributes()
            .iter()
            .filter(|(name, _)| *name != "datacontenttype")
            .map(|(name, value)| ("ce_", *name, value.len()));
        std::iter::once(("", "content-type", content_type)).chain(events)
    });
    let headers = || {
        attributes
            .clone()
            .chain(cloudevent.clone().into_iter().flatten())
    };
    let header_bytes: usize = headers().map(|(p, n, v)| p.len() + n.len() + v).sum();
    let size = out.body().len() + out.key().map_or(0, str::len) + header_bytes;
    if size <= message_max_bytes {
        return Ok(());
    }
    let (prefix, name, _) = headers()
        .max_by_key(|(_, _, v)| *v)
        .expect("over the limit with headers: value + key alone were checked");
    Err(Unrepresentable::new(
        format!("header \"{prefix}{name}\""),
        "makes the record larger than message.max.bytes (max_record_bytes + 64 KiB for \
         headers)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_message::template::{AbsentTenant, KeyTemplate};
    use ankusa_message::{EmptyValues, Layout};
    use ankusa_sink_core::{Ctx, Envelope};
    use rdkafka::message::Headers;

    fn layout() -> Layout {
        Layout::message(None, EmptyValues::Keep)
            .with_key(KeyTemplate::parse(crate::config::DEFAULT_KEY, AbsentTenant::Empty).unwrap())
    }

    fn headers_of(env: &Envelope, ctx: &Ctx) -> (Vec<(String, String)>, Vec<u8>) {
        headers_with(&layout(), env, ctx).0
    }

    /// The headers, key and value of the record `layout` makes for `env`.
    #[allow(clippy::type_complexity)]
    fn headers_with(
        layout: &Layout,
        env: &Envelope,
        ctx: &Ctx,
    ) -> ((Vec<(String, String)>, Vec<u8>), Vec<u8>) {
        let out = Outgoing::new(env, ctx, layout).unwrap();
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
        (
            (headers, record.key.unwrap().as_bytes().to_vec()),
            record.payload.unwrap().to_vec(),
        )
    }

    #[test]
    fn cloudevents_headers_by_the_kafka_binding() {
        use ankusa_message::cloudevents::{CloudEvents, Mode};
        let env = Envelope::builder("h1", "stripe", "raw bytes")
            .tenant_id("acme")
            .content_type("text/plain")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env).with_replay_id("r1");
        let binary = layout().with_cloudevents(CloudEvents::new(Mode::Binary, "t.x").unwrap());
        let ((h, _), value) = headers_with(&binary, &env, &ctx);
        let get = |name: &str| h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        assert_eq!(
            value, b"raw bytes",
            "binary mode: the raw body is the value"
        );
        assert_eq!(get("content-type"), Some("text/plain"));
        assert_eq!(get("ce_id"), Some("h1:replay:r1"));
        assert_eq!(get("ce_type"), Some("t.x"));
        assert_eq!(get("ce_source"), Some("/sources/stripe"));
        assert_eq!(get("ce_ankusatenant"), Some("acme"));
        assert_eq!(get("ce_datacontenttype"), None, "it is content-type");
        assert_eq!(get("ankusa_message_version"), None, "not a Message v1");
        assert_eq!(get("ankusa_id"), Some("h1"), "ours still go");

        let structured =
            layout().with_cloudevents(CloudEvents::new(Mode::Structured, "t.x").unwrap());
        let ((h, _), value) = headers_with(&structured, &env, &ctx);
        assert!(!h.iter().any(|(k, _)| k.starts_with("ce_")), "{h:?}");
        let ct: Vec<&str> = h
            .iter()
            .filter(|(k, _)| k == "content-type")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(ct, ["application/cloudevents+json"]);
        let event: serde_json::Value = serde_json::from_slice(&value).unwrap();
        assert_eq!(event["data_base64"], "cmF3IGJ5dGVz");
        assert_eq!(event["id"], "h1:replay:r1");
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
        // Core owns the names and their order (its tests spell them out): one header per
        // attribute, the empty tenant kept.
        let out = Outgoing::new(&env, &ctx, &layout()).unwrap();
        let attrs: Vec<&str> = out.attributes().iter().map(|(a, _)| a.as_attr()).collect();
        assert_eq!(names, attrs);
        assert_eq!(names.len(), 8);
        assert_eq!(h[2], ("ankusa_tenant_id".into(), "".into()));
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

//! The one mapping from core [`Outgoing`] to the client's message.

use ankusa_message::{Attr, Outgoing};
use ankusa_sink_kit::{Unrepresentable, check_text};
use google_cloud_pubsub::model::Message;
use std::borrow::Cow;

/// Every attribute of the message for `out`, as sent: ours by their attribute names, and a
/// CloudEvent's `content-type` and (binary mode) `ce-<attribute>`.
fn attributes<'a>(out: &'a Outgoing<'_>) -> impl Iterator<Item = (Cow<'a, str>, &'a str)> {
    let ours = out
        .attributes()
        .iter()
        .map(|(attr, value)| (Cow::Borrowed(attr.as_attr()), value.as_ref()));
    let content_type = out.cloudevents_mode().map(|_| {
        let value = out.get(Attr::ContentType).unwrap_or_default();
        (Cow::Borrowed("content-type"), value)
    });
    let events = out
        .cloudevent_attributes()
        .iter()
        .filter(|(name, _)| *name != "datacontenttype")
        .map(|(name, value)| (Cow::Owned(format!("ce-{name}")), value.as_ref()));
    ours.chain(content_type).chain(events)
}

/// Pub/Sub's limits on a message's attributes and ordering key (the quotas page): at
/// most 100 attributes, keys of at most 256 bytes not starting with `goog`, values of at
/// most 1,024 bytes, an ordering key of at most 1,024 bytes. The server refuses a publish
/// request that breaks one with `INVALID_ARGUMENT` for the whole request, so a batch
/// would fail with its poison entry: the sink checks each message before it is queued.
pub(crate) const MAX_ATTRIBUTES: usize = 100;
/// See [`MAX_ATTRIBUTES`].
pub(crate) const MAX_ATTRIBUTE_KEY_BYTES: usize = 256;
/// See [`MAX_ATTRIBUTES`].
pub(crate) const MAX_ATTRIBUTE_VALUE_BYTES: usize = 1024;
/// See [`MAX_ATTRIBUTES`].
pub(crate) const MAX_ORDERING_KEY_BYTES: usize = 1024;

/// Checks every value of the message for `out` derived from the hook against
/// [`MAX_ATTRIBUTES`] and the other limits; any character is allowed (attribute values and
/// ordering keys are protobuf strings: any UTF-8).
///
/// # Errors
/// [`Unrepresentable`] naming the attribute (`attribute "ankusa_dedupe_key"`) or the
/// `ordering key`, never the value.
pub(crate) fn check(out: &Outgoing<'_>) -> Result<(), Unrepresentable> {
    let mut count = 0;
    for (name, value) in attributes(out) {
        count += 1;
        let field = || format!("attribute \"{name}\"");
        if name.len() > MAX_ATTRIBUTE_KEY_BYTES || name.starts_with("goog") {
            return Err(Unrepresentable::new(
                field(),
                "has a key Pub/Sub refuses (over 256 bytes, or starting with goog)",
            ));
        }
        check_text(field, value, MAX_ATTRIBUTE_VALUE_BYTES, |_| true)?;
    }
    if count > MAX_ATTRIBUTES {
        return Err(Unrepresentable::new(
            "attributes",
            "are more than Pub/Sub's 100 per message",
        ));
    }
    if let Some(key) = out.key() {
        check_text(
            || "ordering key".to_owned(),
            key,
            MAX_ORDERING_KEY_BYTES,
            |_| true,
        )?;
    }
    Ok(())
}

/// The client's message for `out`: the body as `data`, the attributes by their attribute
/// names, the rendered ordering key (an empty one is no key). A CloudEvent adds what the
/// CloudEvents Pub/Sub binding names: `content-type` (the data's, or
/// `application/cloudevents+json` in structured mode) and, in binary mode, `ce-<attribute>`
/// for every other attribute.
pub(crate) fn to_message(out: Outgoing<'_>) -> Message {
    // One pass into the client's map: no list of our own in between.
    let msg = Message::new()
        .set_attributes(attributes(&out))
        .set_ordering_key(out.key().unwrap_or_default());
    msg.set_data(out.into_body().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_message::cloudevents::{CloudEvents, Mode};
    use ankusa_message::{EmptyValues, Layout};
    use ankusa_sink_core::{Ctx, Envelope};

    #[test]
    fn cloudevents_attributes_by_the_pubsub_binding() {
        let env = Envelope::builder("h1", "stripe", "raw").build().unwrap();
        let ctx = Ctx::for_envelope(&env);
        let layout = Layout::message(None, EmptyValues::Drop)
            .with_cloudevents(CloudEvents::new(Mode::Binary, "t.x").unwrap());
        let out = Outgoing::new(&env, &ctx, &layout).unwrap();
        let bytes = out.attribute_bytes();
        let msg = to_message(out);
        assert_eq!(&msg.data[..], b"raw");
        let a = &msg.attributes;
        assert_eq!(a["content-type"], "application/octet-stream");
        assert_eq!(a["ce-id"], "h1");
        assert_eq!(a["ce-type"], "t.x");
        assert!(!a.contains_key("ce-datacontenttype"));
        assert!(!a.contains_key("ankusa_message_version"));
        // What the size check counts covers every attribute sent (content-type's name is
        // counted as the ContentType attribute's).
        let sent: usize = a.iter().map(|(k, v)| k.len() + v.len()).sum();
        assert!(
            bytes + "content-type".len() + 30 >= sent,
            "{bytes} < {sent}"
        );

        let layout = Layout::message(None, EmptyValues::Drop)
            .with_cloudevents(CloudEvents::new(Mode::Structured, "t.x").unwrap());
        let msg = to_message(Outgoing::new(&env, &ctx, &layout).unwrap());
        assert_eq!(
            msg.attributes["content-type"],
            "application/cloudevents+json"
        );
        assert!(!msg.attributes.keys().any(|k| k.starts_with("ce-")));
        let event: serde_json::Value = serde_json::from_slice(&msg.data).unwrap();
        assert_eq!(event["data_base64"], "cmF3");
    }

    #[test]
    fn attribute_values_and_the_ordering_key_fit_pubsub_limits() {
        use ankusa_message::template::{AbsentTenant, KeyTemplate};
        let layout = Layout::message(None, EmptyValues::Drop)
            .with_key(KeyTemplate::parse("{source_id}/{id}", AbsentTenant::Empty).unwrap());
        let check_env = |id: &str, dedupe: &str| {
            let env = Envelope::builder(id, "stripe", "x")
                .dedupe_key(dedupe)
                .build()
                .unwrap();
            let ctx = Ctx::for_envelope(&env);
            check(&Outgoing::new(&env, &ctx, &layout).unwrap())
        };
        // `default:stripe:` is 15 bytes: 1,009 more make the idempotency key 1,024.
        assert!(check_env("h", &"k".repeat(1009)).is_ok());
        let e = check_env("h", &"k".repeat(1010)).unwrap_err();
        assert_eq!(e.field, "attribute \"ankusa_idempotency_key\"");
        assert!(!e.to_string().contains("kkk"), "{e}");
        assert!(check_env("h", "\u{FFFF}é🦀").is_ok(), "any UTF-8");
        let e = check_env(&"i".repeat(1020), "d").unwrap_err();
        assert_eq!(e.field, "ordering key");
    }
}

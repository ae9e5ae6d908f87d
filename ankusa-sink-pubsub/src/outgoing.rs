//! The one mapping from core [`Outgoing`] to the client's message.

use ankusa_message::{Attr, Outgoing};
use google_cloud_pubsub::model::Message;
use std::borrow::Cow;

/// The client's message for `out`: the body as `data`, the attributes by their attribute
/// names, the rendered ordering key (an empty one is no key). A CloudEvent adds what the
/// CloudEvents Pub/Sub binding names: `content-type` (the data's, or
/// `application/cloudevents+json` in structured mode) and, in binary mode, `ce-<attribute>`
/// for every other attribute.
pub(crate) fn to_message(out: Outgoing<'_>) -> Message {
    // One pass into the client's map: no list of our own in between.
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
    let msg = Message::new()
        .set_attributes(ours.chain(content_type).chain(events))
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
}

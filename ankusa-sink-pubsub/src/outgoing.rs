//! The one mapping from core [`Outgoing`] to the client's message.

use ankusa_sink_core::message::Outgoing;
use google_cloud_pubsub::model::Message;

/// The client's message for `out`: the body as `data`, the attributes by their attribute
/// names, the rendered ordering key (an empty one is no key).
pub(crate) fn to_message(out: Outgoing<'_>) -> Message {
    let attributes = out
        .attributes()
        .iter()
        .map(|(attr, value)| (attr.as_attr(), value.as_ref()));
    let msg = Message::new()
        .set_attributes(attributes)
        .set_ordering_key(out.key().unwrap_or_default());
    msg.set_data(out.into_body().into_bytes())
}

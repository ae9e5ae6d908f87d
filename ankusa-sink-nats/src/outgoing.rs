//! One function from core's `Outgoing` to what a JetStream publish carries.

use ankusa_sink_core::message::{Attr, Outgoing};
use async_nats::HeaderMap;
use bytes::Bytes;

/// JetStream's deduplication header.
pub(crate) const MSG_ID: &str = "Nats-Msg-Id";

/// A publish: subject, headers and the Message v1 bytes.
#[derive(Debug)]
pub(crate) struct Publish {
    /// The rendered subject.
    pub(crate) subject: String,
    /// `Nats-Msg-Id`, then the `ankusa_*` attributes in core's order.
    pub(crate) headers: HeaderMap,
    /// The Message v1 bytes.
    pub(crate) payload: Bytes,
    /// Bytes the headers take on the wire (`NATS/1.0\r\n`, `name: value\r\n` each, `\r\n`).
    pub(crate) header_bytes: usize,
}

/// The publish for `out`: `Nats-Msg-Id` is the hook id, or `<id>:replay:<replay_id>` for a
/// replay (so JetStream's duplicate window never swallows a replay), then every attribute
/// under its `as_attr()` name (an empty tenant is kept as `""`).
pub(crate) fn to_publish(out: Outgoing<'_>) -> Publish {
    let id = out.get(Attr::Id).unwrap_or_default();
    let msg_id = match out.get(Attr::ReplayId) {
        Some(replay) => format!("{id}:replay:{replay}"),
        None => id.to_owned(),
    };
    let mut headers = HeaderMap::new();
    let mut header_bytes = "NATS/1.0\r\n\r\n".len();
    header_bytes += MSG_ID.len() + msg_id.len() + 4;
    headers.insert(MSG_ID, msg_id.as_str());
    for (attr, value) in out.attributes() {
        let name = attr.as_attr();
        header_bytes += name.len() + value.len() + 4;
        headers.insert(name, value.as_ref());
    }
    let subject = out.key().unwrap_or_default().to_owned();
    Publish {
        subject,
        headers,
        payload: out.into_body().into_bytes(),
        header_bytes,
    }
}

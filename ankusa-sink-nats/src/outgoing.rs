//! One function from `ankusa-message`'s `Outgoing` to what a JetStream publish carries.

use crate::error::NatsError;
use ankusa_message::{Attr, Outgoing};
use async_nats::{HeaderMap, HeaderName, HeaderValue};
use bytes::Bytes;
use std::str::FromStr as _;

/// JetStream's deduplication header.
pub(crate) const MSG_ID: &str = "Nats-Msg-Id";

/// A publish: subject, headers and the Message v1 bytes.
#[derive(Debug)]
pub(crate) struct Publish {
    /// The rendered subject.
    pub(crate) subject: String,
    /// `Nats-Msg-Id`, then the `ankusa_*` attributes.
    pub(crate) headers: HeaderMap,
    /// The Message v1 bytes.
    pub(crate) payload: Bytes,
}

/// The publish for `out`: `Nats-Msg-Id` is the hook id, or `<id>:replay:<replay_id>` for a
/// replay (so JetStream's duplicate window never swallows a replay), then every attribute
/// under its `as_attr()` name (an empty tenant is kept as `""`). A value a NATS header
/// cannot carry (CR or LF) is refused, never sent altered.
pub(crate) fn to_publish(out: Outgoing<'_>) -> Result<Publish, NatsError> {
    let id = out.get(Attr::Id).unwrap_or_default();
    let msg_id = match out.get(Attr::ReplayId) {
        Some(replay) => format!("{id}:replay:{replay}"),
        None => id.to_owned(),
    };
    let mut headers = HeaderMap::new();
    // Static names: no validation and no copy per header (from a `&str`, each name was
    // checked and copied on every delivery, a sixth of the sink's own instructions).
    headers.insert(HeaderName::from_static(MSG_ID), value(MSG_ID, &msg_id)?);
    for (attr, v) in out.attributes() {
        let name = attr.as_attr();
        headers.insert(HeaderName::from_static(name), value(name, v)?);
    }
    let subject = out.key().unwrap_or_default().to_owned();
    Ok(Publish {
        subject,
        headers,
        payload: out.into_body().into_bytes(),
    })
}

fn value(name: &'static str, v: &str) -> Result<HeaderValue, NatsError> {
    HeaderValue::from_str(v).map_err(|_| NatsError::HeaderValue(name))
}

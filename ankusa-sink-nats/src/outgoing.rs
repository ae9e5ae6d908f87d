//! One function from `ankusa-message`'s `Outgoing` to what a JetStream publish carries.

use crate::error::NatsError;
use ankusa_message::cloudevents::http_header_value;
use ankusa_message::{Attr, Outgoing};
use async_nats::{HeaderMap, HeaderName, HeaderValue};
use bytes::Bytes;
use std::str::FromStr as _;

/// JetStream's deduplication header.
pub(crate) const MSG_ID: &str = "Nats-Msg-Id";
/// The header of a CloudEvent's content type (the CloudEvents NATS binding).
pub(crate) const CONTENT_TYPE: &str = "Content-Type";

/// A publish: subject, headers and the Message v1 bytes (or the CloudEvent's).
#[derive(Debug)]
pub(crate) struct Publish {
    /// The rendered subject.
    pub(crate) subject: String,
    /// `Nats-Msg-Id`, then the `ankusa_*` attributes (and a CloudEvent's headers).
    pub(crate) headers: HeaderMap,
    /// The Message v1 bytes, a binary-mode CloudEvent's data or a structured-mode event.
    pub(crate) payload: Bytes,
}

/// The publish for `out`: `Nats-Msg-Id` is the hook id, or `<id>:replay:<replay_id>` for a
/// replay (so JetStream's duplicate window never swallows a replay), then every attribute
/// under its `as_attr()` name (an empty tenant is kept as `""`). A value a NATS header
/// cannot carry (CR or LF) is refused, never sent altered.
///
/// A CloudEvent follows the CloudEvents NATS binding: `Content-Type` is the event's
/// `datacontenttype` in binary mode (the data is the payload) and
/// `application/cloudevents+json` in structured mode (the JSON event is the payload); in
/// binary mode every other attribute is a `ce-<name>` header, its value percent-encoded
/// as the HTTP binding does (space, `"`, `%` and everything outside printable ASCII), so
/// no value is refused. Ours go beside it as for Message v1.
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
    if out.cloudevents_mode().is_some() {
        let content_type = out.get(Attr::ContentType).unwrap_or_default();
        headers.insert(
            HeaderName::from_static(CONTENT_TYPE),
            value(CONTENT_TYPE, content_type)?,
        );
    }
    for (name, v) in out.cloudevent_attributes() {
        if *name == "datacontenttype" {
            continue;
        }
        let header = HeaderName::from_str(&format!("ce-{name}"))
            .map_err(|_| NatsError::HeaderValue("ce-*"))?;
        headers.insert(header, value("ce-*", &http_header_value(v))?);
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

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_message::TraceContext;
    use ankusa_message::cloudevents::{CloudEvents, Mode};
    use ankusa_message::signing::Signer;
    use ankusa_message::template::{AbsentTenant, KeyTemplate};
    use ankusa_message::{EmptyValues, Layout};
    use ankusa_sink_core::{Ctx, Envelope};

    fn layout(mode: Option<Mode>) -> Layout {
        Layout::message(None, EmptyValues::Keep)
            .with_key(KeyTemplate::parse("hooks.{source_id}", AbsentTenant::Empty).unwrap())
            .with_cloudevents(mode.map(|m| CloudEvents::new(m, "t.x").unwrap()))
    }

    fn header<'a>(p: &'a Publish, name: &str) -> Option<&'a str> {
        p.headers.get(name).map(HeaderValue::as_str)
    }

    #[test]
    fn binary_mode_is_ce_headers_beside_the_data() {
        // Non-UTF-8 data travels as it came: a NATS payload is bytes.
        let body = vec![0x00, 0xff, 0x80, b'x'];
        let env = Envelope::builder("h1", "stripe", body.clone())
            .tenant_id("acme")
            .dedupe_key("e 1%é")
            .content_type("image/png")
            .build()
            .unwrap();
        let trace = TraceContext::root();
        let ctx = Ctx::for_envelope(&env)
            .with_replay_id("r1")
            .with_extension(trace.clone());
        let p =
            to_publish(Outgoing::new(&env, &ctx, &layout(Some(Mode::Binary))).unwrap()).unwrap();
        assert_eq!(&p.payload[..], &body[..]);
        assert_eq!(p.subject, "hooks.stripe");
        assert_eq!(header(&p, "Content-Type"), Some("image/png"));
        assert_eq!(header(&p, "ce-id"), Some("h1:replay:r1"));
        assert_eq!(header(&p, "ce-source"), Some("/sources/stripe"));
        assert_eq!(header(&p, "ce-type"), Some("t.x"));
        assert_eq!(header(&p, "ce-specversion"), Some("1.0"));
        assert_eq!(header(&p, "ce-ankusareplayid"), Some("r1"));
        assert_eq!(header(&p, "ce-traceparent"), Some(trace.traceparent()));
        assert_eq!(header(&p, "ce-datacontenttype"), None, "it is Content-Type");
        // Percent-encoded by the HTTP binding's rule.
        assert_eq!(
            header(&p, "ce-ankusaidempotencykey"),
            Some("acme:stripe:e%201%25%C3%A9")
        );
        // Ours still go beside the event.
        assert_eq!(header(&p, "ankusa_id"), Some("h1"));
        assert_eq!(
            header(&p, "ankusa_idempotency_key"),
            Some("acme:stripe:e 1%é")
        );
        assert_eq!(header(&p, MSG_ID), Some("h1:replay:r1"));
        assert!(header(&p, "ce-time").is_some_and(|t| t.ends_with('Z')));
    }

    #[test]
    fn structured_mode_is_the_json_event_as_the_payload() {
        let env = Envelope::builder("h1", "stripe", &b"\x00\xff"[..])
            .content_type("application/octet-stream")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env);
        let p = to_publish(Outgoing::new(&env, &ctx, &layout(Some(Mode::Structured))).unwrap())
            .unwrap();
        assert_eq!(
            header(&p, "Content-Type"),
            Some("application/cloudevents+json")
        );
        assert!(
            !p.headers
                .iter()
                .any(|(k, _)| k.to_string().starts_with("ce-"))
        );
        let v: serde_json::Value = serde_json::from_slice(&p.payload).unwrap();
        assert_eq!(v["id"], "h1");
        assert_eq!(v["data_base64"], "AP8=");
        // Message v1 keeps its headers: no Content-Type header, no ce- ones.
        let p = to_publish(Outgoing::new(&env, &ctx, &layout(None)).unwrap()).unwrap();
        assert_eq!(header(&p, "Content-Type"), None);
        assert_eq!(header(&p, "content_type"), Some("application/json"));
    }

    #[test]
    fn a_signed_event_verifies_over_the_payload() {
        let signer = Signer::new(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).unwrap();
        let env = Envelope::builder("h1", "stripe", "text")
            .content_type("text/plain")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env);
        for mode in [Mode::Binary, Mode::Structured] {
            let l = layout(Some(mode)).with_signer(signer.clone());
            let p = to_publish(Outgoing::new(&env, &ctx, &l).unwrap()).unwrap();
            let h = |n: &str| header(&p, n).unwrap();
            signer
                .verify(
                    h("webhook-id"),
                    h("webhook-timestamp"),
                    h("webhook-signature"),
                    &p.payload,
                    std::time::SystemTime::now(),
                    std::time::Duration::from_secs(300),
                )
                .unwrap();
        }
    }
}

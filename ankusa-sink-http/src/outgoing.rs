//! Core [`Outgoing`] to a [`reqwest::Request`]: the one mapping.

use crate::config::{SIGNATURE_HEADERS, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};
use crate::error::HttpError;
use ankusa_message::cloudevents;
use ankusa_message::signing::Signer;
use ankusa_message::{Attr, Outgoing};
use ankusa_sink_kit::Unrepresentable;
use bytes::{Bytes, BytesMut};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};

/// What every request of a sink shares, built once from the config.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) method: Method,
    /// The URL without its userinfo (that became `base`'s basic auth).
    pub(crate) url: Url,
    /// `user-agent`, basic auth from URL userinfo unless the operator set `authorization`,
    /// the operator's headers.
    pub(crate) base: HeaderMap,
    /// The operator set `content-type`: the hook's is not sent.
    pub(crate) operator_content_type: bool,
    pub(crate) signer: Option<Signer>,
}

/// A byte an HTTP field value may hold, as `http::HeaderValue` (and so reqwest and hyper)
/// takes it: visible ASCII, space, tab, and `obs-text` (0x80-0xFF, so any UTF-8 beyond
/// ASCII, U+FFFF included). A control byte (NUL, CR, LF, DEL, ...) is refused: CR and LF
/// would split the request.
fn is_field_value_byte(b: u8) -> bool {
    b == b'\t' || (b >= 0x20 && b != 0x7f)
}

/// Every header value [`to_request`] takes from the hook or the attempt: the [`Attr`]
/// headers and the forwarded provider headers (the `ce-*` values are percent-encoded, and
/// the signature's are ours). A validated envelope's values always fit; an attempt's
/// replay id need not (it is the replay job's, not the envelope's). Checked before the
/// request is built, so a value HTTP cannot carry fails this hook alone.
///
/// # Errors
/// [`Unrepresentable`] naming the header (`header "x-ankusa-replay-id"`), never its value.
pub(crate) fn check(out: &Outgoing<'_>, target: &Target) -> Result<(), Unrepresentable> {
    let attrs = out
        .attributes()
        .iter()
        .filter(|(attr, _)| !(target.operator_content_type && *attr == Attr::ContentType))
        .map(|(attr, v)| (attr.as_http_header(), v.as_ref()));
    let forwarded = out
        .forwarded_headers()
        .iter()
        .map(|(n, v)| (n.as_ref(), v.as_ref()));
    for (name, value) in attrs.chain(forwarded) {
        if !value.bytes().all(is_field_value_byte) {
            // The name is an HTTP token (ours, or the envelope checked it): safe to print.
            return Err(Unrepresentable::new(
                format!("header \"{name}\""),
                "holds a control character HTTP refuses in a header value",
            ));
        }
    }
    Ok(())
}

/// The request for `out`: the raw body, and every header of one attempt in this order:
/// `target.base`, the [`Attr`] headers of `out` (`x-ankusa-id`, `x-ankusa-source`,
/// `content-type` unless the operator set one, `x-ankusa-tenant`,
/// `x-ankusa-idempotency-key`, `x-ankusa-dedupe-key`, `x-ankusa-replay-id`), the forwarded
/// provider headers whose names are not taken yet (never `ce-*`, nor `webhook-*` when
/// signing), then the
/// signature headers for `timestamp` (Unix seconds) over the raw body.
///
/// # Errors
/// [`HttpError::HeaderValue`] when a hook value cannot be a header value (a replay id).
pub(crate) fn to_request(
    out: Outgoing<'_>,
    target: &Target,
    timestamp: u64,
) -> Result<reqwest::Request, HttpError> {
    let attrs = out
        .attributes()
        .iter()
        .filter(|(attr, _)| !(target.operator_content_type && *attr == Attr::ContentType));
    let forwarded = out.forwarded_headers();
    // Sized once for everything below; the prebuilt values are shared, not copied
    // (cloning `base` and growing it would reallocate its tables on every request).
    let mut h = HeaderMap::with_capacity(target.base.len() + 10 + forwarded.len());
    for (name, v) in &target.base {
        h.insert(name.clone(), v.clone());
    }
    // One buffer holds every value taken from the hook (forwarded ones after the sink's),
    // and each header value is a shared slice of it: one allocation per request instead
    // of one per header (allocations were most of this sink's cost over a raw client).
    let values = attrs
        .clone()
        .map(|(_, v)| v.as_ref())
        .chain(forwarded.iter().map(|(_, v)| v.as_ref()));
    let mut slices = Slices::new(values);
    for (attr, v) in attrs {
        let v = slices.take(v.len());
        // Validated envelopes always fit; a replay id need not.
        let v = HeaderValue::from_maybe_shared(v)
            .map_err(|_| HttpError::HeaderValue(attr.as_http_header()))?;
        h.insert(HeaderName::from_static(attr.as_http_header()), v);
    }
    // A binary-mode CloudEvent: `ce-<attribute>` headers (the CloudEvents HTTP binding;
    // `datacontenttype` is the content-type header already), values percent-encoded as
    // the binding says.
    for (name, v) in out.cloudevent_attributes() {
        if *name != "datacontenttype" {
            let value = cloudevents::http_header_value(v);
            let v = HeaderValue::from_str(&value).map_err(|_| HttpError::HeaderValue("ce-*"))?;
            let name = HeaderName::from_bytes(format!("ce-{name}").as_bytes())
                .expect("CloudEvents attribute names are lowercase letters and digits");
            h.insert(name, v);
        }
    }
    for (name, v) in forwarded {
        let v = slices.take(v.len());
        let (Ok(name), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_maybe_shared(v),
        ) else {
            continue;
        };
        let signature_header = SIGNATURE_HEADERS.contains(&name);
        // A hook's own `ce-*` headers would make the request read as a CloudEvent: one
        // nobody made in raw mode, or attributes of ours in CloudEvents mode.
        let event_header = name.as_str().starts_with("ce-");
        // The trace context is the attempt's (sent above when dispatch set one): a hook's
        // own would name a span that is not this request's, or carry an unchecked state.
        let trace_header = name == "traceparent" || name == "tracestate";
        if h.contains_key(&name)
            || (target.signer.is_some() && signature_header)
            || event_header
            || trace_header
        {
            continue;
        }
        h.insert(name, v);
    }
    if let Some(signer) = &target.signer {
        let id = out.get(Attr::Id).unwrap_or_default();
        let signature = signer.signature(id, timestamp, out.body());
        // The same value as x-ankusa-id (a shared slice, no copy).
        if let Some(id) = h.get(Attr::Id.as_http_header()).cloned() {
            h.insert(WEBHOOK_ID, id);
        }
        h.insert(WEBHOOK_TIMESTAMP, HeaderValue::from(timestamp));
        h.insert(
            WEBHOOK_SIGNATURE,
            HeaderValue::from_str(&signature).expect("base64 is a valid header value"),
        );
    }
    // The request is assembled directly: the builder would re-parse the URL's userinfo
    // and copy every header into a map of its own on each call.
    let mut req = reqwest::Request::new(target.method.clone(), target.url.clone());
    *req.headers_mut() = h;
    *req.body_mut() = Some(out.into_body().into_bytes().into());
    Ok(req)
}

/// Values laid end to end in one buffer, handed out in order as shared slices.
struct Slices {
    buf: Bytes,
    start: usize,
}

impl Slices {
    fn new<'v>(values: impl Iterator<Item = &'v str> + Clone) -> Self {
        let len = values.clone().map(str::len).sum();
        let mut buf = BytesMut::with_capacity(len);
        for v in values {
            buf.extend_from_slice(v.as_bytes());
        }
        Slices {
            buf: buf.freeze(),
            start: 0,
        }
    }

    /// The next value, `len` bytes long.
    fn take(&mut self, len: usize) -> Bytes {
        let end = self.start + len;
        let v = self.buf.slice(self.start..end);
        self.start = end;
        v
    }
}

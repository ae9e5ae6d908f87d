//! CloudEvents 1.0 for every sink that publishes a message (not Kinesis, EventBridge): the
//! event of a hook, in binary mode (the body is the event's data, the attributes ride beside
//! it) or structured mode (one `application/cloudevents+json` document).
//!
//! | Attribute | Value |
//! | --- | --- |
//! | `id` | the hook id, or `<id>:replay:<replay_id>` for a replay |
//! | `source` | `/sources/<source_id>` |
//! | `type` | the sink's `cloudevents_type`, default [`DEFAULT_TYPE`] |
//! | `specversion` | `1.0` |
//! | `time` | `received_at`, RFC 3339 in UTC with milliseconds |
//! | `datacontenttype` | the hook's content type, else `application/octet-stream` |
//! | `ankusatenant` | the tenant, when the hook has one |
//! | `ankusaidempotencykey` | [`Envelope::idempotency_key`] |
//! | `ankusareplayid` | the replay id, for a replay |
//! | `traceparent` | the attempt's W3C `traceparent` ([`TraceContext::of`](crate::TraceContext::of); the Distributed Tracing extension) |
//! | `tracestate` | the hook's W3C `tracestate`, when it had a valid one |
//!
//! Structured mode puts the body in `data` as a JSON value when the content type is JSON
//! (`application/json` or a `+json` type) and the body parses, else in `data_base64`.

use crate::signing::webhook_id;
use crate::trace::TraceContext;
use ankusa_sink_core::Ctx;
use ankusa_sink_core::{Envelope, MAX_RECEIVED_AT};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

/// The CloudEvents version every event declares.
pub const SPEC_VERSION: &str = "1.0";
/// The event type when the sink sets no `cloudevents_type`.
pub const DEFAULT_TYPE: &str = "ankusa.hook.received";
/// The content type of a structured-mode event.
pub const STRUCTURED_CONTENT_TYPE: &str = "application/cloudevents+json";
/// The data content type of a hook that came without one.
pub const DEFAULT_DATA_CONTENT_TYPE: &str = "application/octet-stream";

/// What a sink sends: its sink-file key `format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[non_exhaustive]
pub enum Format {
    /// `message-v1` (also read as `message`): the Message v1 JSON (the default of every
    /// queue sink).
    #[default]
    #[serde(rename = "message-v1", alias = "message")]
    MessageV1,
    /// `cloudevents`: a CloudEvent in binary mode.
    #[serde(rename = "cloudevents")]
    CloudEvents,
    /// `cloudevents-structured`: a CloudEvent in structured mode.
    #[serde(rename = "cloudevents-structured")]
    CloudEventsStructured,
}

impl Format {
    /// The CloudEvents mode, `None` for Message v1.
    pub fn mode(self) -> Option<Mode> {
        match self {
            Format::MessageV1 => None,
            Format::CloudEvents => Some(Mode::Binary),
            Format::CloudEventsStructured => Some(Mode::Structured),
        }
    }
}

/// A CloudEvents content mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The body is the data; the attributes are headers (or message attributes).
    Binary,
    /// The body is the whole event as JSON.
    Structured,
}

/// How a sink sends CloudEvents: the mode and the event type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudEvents {
    mode: Mode,
    event_type: String,
}

/// Why a `cloudevents_type` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TypeError {
    /// Empty, or with whitespace or control characters.
    #[error("cloudevents_type must be non-empty printable text without whitespace")]
    Invalid,
}

impl CloudEvents {
    /// Events of `event_type` in `mode`.
    ///
    /// # Errors
    /// [`TypeError::Invalid`] for an empty type or one with whitespace or control
    /// characters.
    pub fn new(mode: Mode, event_type: impl Into<String>) -> Result<Self, TypeError> {
        let event_type = event_type.into();
        if event_type.is_empty()
            || event_type
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(TypeError::Invalid);
        }
        Ok(CloudEvents { mode, event_type })
    }

    /// The events a sink file's `format` and `cloudevents_type` ask for: `None` for Message
    /// v1.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn from_keys(format: Format, event_type: Option<&str>) -> Result<Option<Self>, TypeError> {
        format
            .mode()
            .map(|mode| Self::new(mode, event_type.unwrap_or(DEFAULT_TYPE)))
            .transpose()
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The event type.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The context attributes of `env`'s event, by their CloudEvents names, in the module
    /// table's order; `idempotency_key` is the envelope's (computed once by the caller).
    pub fn attributes<'a>(
        &self,
        env: &'a Envelope,
        ctx: &'a Ctx,
        idempotency_key: Cow<'a, str>,
    ) -> Vec<(&'static str, Cow<'a, str>)> {
        let mut out = Vec::with_capacity(11);
        out.push((
            "id",
            match ctx.replay_id.as_deref().filter(|r| !r.is_empty()) {
                Some(r) => Cow::Owned(webhook_id(env.id(), Some(r))),
                None => Cow::Borrowed(env.id()),
            },
        ));
        out.push((
            "source",
            Cow::Owned(format!("/sources/{}", env.source_id())),
        ));
        out.push(("type", Cow::Owned(self.event_type.clone())));
        out.push(("specversion", Cow::Borrowed(SPEC_VERSION)));
        out.push(("time", Cow::Owned(rfc3339_ms(env.received_at()))));
        out.push(("datacontenttype", Cow::Borrowed(data_content_type(env))));
        if let Some(t) = env.tenant_id() {
            out.push(("ankusatenant", Cow::Borrowed(t)));
        }
        out.push(("ankusaidempotencykey", idempotency_key));
        if let Some(r) = ctx.replay_id.as_deref().filter(|r| !r.is_empty()) {
            out.push(("ankusareplayid", Cow::Borrowed(r)));
        }
        if let Some(trace) = TraceContext::of(ctx) {
            out.push(("traceparent", Cow::Borrowed(trace.traceparent())));
            if let Some(state) = trace.tracestate() {
                out.push(("tracestate", Cow::Borrowed(state)));
            }
        }
        out
    }

    /// The structured-mode event of `env` as JSON bytes.
    pub fn structured(&self, env: &Envelope, ctx: &Ctx, idempotency_key: &str) -> Vec<u8> {
        let mut event = serde_json::Map::new();
        for (name, value) in self.attributes(env, ctx, Cow::Borrowed(idempotency_key)) {
            event.insert(
                name.to_owned(),
                serde_json::Value::String(value.into_owned()),
            );
        }
        let body = env.body();
        let json = is_json(data_content_type(env))
            .then(|| serde_json::from_slice::<serde_json::Value>(body).ok())
            .flatten();
        match json {
            Some(v) => event.insert("data".to_owned(), v),
            None => event.insert(
                "data_base64".to_owned(),
                serde_json::Value::String(STANDARD.encode(body)),
            ),
        };
        serde_json::to_vec(&event).expect("a JSON map serializes")
    }
}

/// The hook's content type, else `application/octet-stream`.
pub fn data_content_type(env: &Envelope) -> &str {
    env.content_type()
        .filter(|c| !c.trim().is_empty())
        .unwrap_or(DEFAULT_DATA_CONTENT_TYPE)
}

/// Whether a media type is JSON: `application/json`, or any `+json` structured suffix
/// (parameters ignored, case-insensitive).
pub fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}

/// Unix milliseconds as RFC 3339 in UTC with milliseconds (`2026-12-01T19:37:48.123Z`).
///
/// Total: a time RFC 3339 cannot write (before 1970 here, or from year 10000 on, which no
/// valid [`Envelope`] holds) is clamped to the nearest one it can, never a panic.
fn rfc3339_ms(unix_ms: i64) -> String {
    const LAST: &str = "9999-12-31T23:59:59.999Z";
    let ms = u64::try_from(unix_ms.clamp(0, MAX_RECEIVED_AT)).unwrap_or(0);
    let Some(t) = UNIX_EPOCH.checked_add(Duration::from_millis(ms)) else {
        return LAST.to_owned();
    };
    let mut out = String::with_capacity(LAST.len());
    // humantime refuses (`fmt::Error`) only past year 9999, which the clamp rules out;
    // `to_string` would turn that refusal into a panic, `write!` hands it back.
    if write!(out, "{}", humantime::format_rfc3339_millis(t)).is_err() {
        return LAST.to_owned();
    }
    out
}

/// A value for an HTTP header of the CloudEvents HTTP binding: space, `"`, `%` and
/// everything outside printable ASCII percent-encoded (UTF-8 bytes).
pub fn http_header_value(value: &str) -> Cow<'_, str> {
    let plain = |b: u8| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'%';
    if value.bytes().all(plain) {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len() + 8);
    for b in value.bytes() {
        if plain(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(content_type: Option<&str>, body: &[u8]) -> Envelope {
        let mut b = Envelope::builder("h-1", "stripe", body.to_vec())
            .tenant_id("acme")
            .dedupe_key("evt_1")
            .received_at(1_796_154_731_068);
        if let Some(c) = content_type {
            b = b.content_type(c);
        }
        b.build().unwrap()
    }

    #[test]
    fn attributes_in_order_with_the_replay_in_the_id() {
        let ce = CloudEvents::new(Mode::Binary, DEFAULT_TYPE).unwrap();
        let e = env(Some("application/json"), b"{}");
        let ctx = Ctx::for_envelope(&e).with_replay_id("r7");
        let key = e.idempotency_key();
        let got: Vec<(&str, String)> = ce
            .attributes(&e, &ctx, Cow::Borrowed(&key))
            .into_iter()
            .map(|(k, v)| (k, v.into_owned()))
            .collect();
        let want = [
            ("id", "h-1:replay:r7"),
            ("source", "/sources/stripe"),
            ("type", "ankusa.hook.received"),
            ("specversion", "1.0"),
            ("time", "2026-12-01T19:52:11.068Z"),
            ("datacontenttype", "application/json"),
            ("ankusatenant", "acme"),
            ("ankusaidempotencykey", "acme:stripe:evt_1"),
            ("ankusareplayid", "r7"),
        ];
        let want: Vec<(&str, String)> = want.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn structured_data_is_json_when_it_can_be_else_base64() {
        let ce = CloudEvents::new(Mode::Structured, "com.example.hook").unwrap();
        let e = env(
            Some("application/vnd.api+json; charset=utf-8"),
            br#"{"a": [1, 2]}"#,
        );
        let ctx = Ctx::for_envelope(&e);
        let v: serde_json::Value =
            serde_json::from_slice(&ce.structured(&e, &ctx, &e.idempotency_key())).unwrap();
        assert_eq!(v["data"], serde_json::json!({"a": [1, 2]}));
        assert_eq!(v["type"], "com.example.hook");
        assert!(v.get("data_base64").is_none());
        assert!(v.get("ankusareplayid").is_none());
        for (ct, body) in [
            (Some("text/plain"), &b"hi"[..]),
            (Some("application/json"), b"{not json"),
            (None, b"\x00\xff"),
        ] {
            let e = env(ct, body);
            let v: serde_json::Value =
                serde_json::from_slice(&ce.structured(&e, &Ctx::for_envelope(&e), "k")).unwrap();
            assert_eq!(v["data_base64"], STANDARD.encode(body), "{ct:?}");
            assert!(v.get("data").is_none());
        }
        let e = env(None, b"x");
        let v: serde_json::Value =
            serde_json::from_slice(&ce.structured(&e, &Ctx::for_envelope(&e), "k")).unwrap();
        assert_eq!(v["datacontenttype"], "application/octet-stream");
    }

    #[test]
    fn time_is_total_over_every_i64() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(MAX_RECEIVED_AT), "9999-12-31T23:59:59.999Z");
        // Year 10000 and later (humantime refuses them; `to_string` panicked), and times
        // before 1970: clamped, never a panic.
        for late in [MAX_RECEIVED_AT + 1, 253_402_300_800_000 * 2, i64::MAX] {
            assert_eq!(rfc3339_ms(late), "9999-12-31T23:59:59.999Z", "{late}");
        }
        for early in [-1, i64::MIN] {
            assert_eq!(rfc3339_ms(early), "1970-01-01T00:00:00.000Z", "{early}");
        }
    }

    #[test]
    fn formats_types_and_header_values() {
        let f: Format = serde_json::from_value(serde_json::json!("cloudevents")).unwrap();
        assert_eq!(f.mode(), Some(Mode::Binary));
        let f: Format =
            serde_json::from_value(serde_json::json!("cloudevents-structured")).unwrap();
        assert_eq!(f.mode(), Some(Mode::Structured));
        let f: Format = serde_json::from_value(serde_json::json!("message-v1")).unwrap();
        assert_eq!(f.mode(), None);
        assert!(serde_json::from_value::<Format>(serde_json::json!("cloudevent")).is_err());
        assert_eq!(
            CloudEvents::from_keys(Format::MessageV1, Some("x")),
            Ok(None)
        );
        assert_eq!(
            CloudEvents::from_keys(Format::CloudEvents, None)
                .unwrap()
                .unwrap()
                .event_type(),
            DEFAULT_TYPE
        );
        for bad in ["", "a b", "a\nb"] {
            assert_eq!(CloudEvents::new(Mode::Binary, bad), Err(TypeError::Invalid));
        }
        assert_eq!(http_header_value("plain:value/1"), "plain:value/1");
        assert_eq!(http_header_value("a b\"%é"), "a%20b%22%25%C3%A9");
        assert!(is_json("Application/JSON") && is_json("application/cloudevents+json"));
        assert!(!is_json("text/json-ish"));
    }
}

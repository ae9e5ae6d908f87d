//! Core's [`Outgoing`] as what SQS `SendMessage` / SNS `Publish` (or a batch entry)
//! carries: the Message v1 body (or a CloudEvent: its data in binary mode, with `ce-*`
//! attributes; the JSON event in structured mode), the attributes as the SDK's `String`
//! message attributes, the FIFO ids and the size AWS counts; and as what a Kinesis record
//! ([`to_record`]) and an EventBridge entry ([`to_event`]) carry: the Message v1 body
//! alone, which holds everything the attributes would (id, tenant, headers, idempotency
//! key).

use crate::error::AwsError;
use ankusa_message::cloudevents::Mode;
use ankusa_message::{Attr, Body, Outgoing};
use ankusa_sink_kit::{Unrepresentable, check_text};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

/// The SDK's `MessageAttributeValue`: SQS and SNS each have their own type of the same
/// shape.
pub(crate) trait AttributeValue: Clone + Send + Sync + 'static {
    /// A `String` attribute of `value`.
    fn string(value: &str) -> Self;
}

/// [`AttributeValue`] for each SDK's `MessageAttributeValue`.
macro_rules! attribute_value {
    ($($feature:literal => $ty:ty),*) => {$(
        #[cfg(feature = $feature)]
        impl AttributeValue for $ty {
            fn string(value: &str) -> Self {
                <$ty>::builder()
                    .data_type(DATA_TYPE)
                    .string_value(value)
                    .build()
                    .expect("data_type is set")
            }
        }
    )*};
}

attribute_value!(
    "sqs" => aws_sdk_sqs::types::MessageAttributeValue,
    "sns" => aws_sdk_sns::types::MessageAttributeValue
);

/// The data type of every attribute.
const DATA_TYPE: &str = "String";

/// FIFO ids of one message (or a configured group on a standard destination).
#[derive(Clone, Default)]
pub(crate) struct Ids {
    /// The message group id.
    pub(crate) group: Option<String>,
    /// The deduplication id.
    pub(crate) dedup: Option<String>,
}

/// One prepared message.
///
/// `Debug` shows its shape only (sizes, attribute names, which ids are set): the body and
/// the attribute values carry the hook.
#[derive(Clone)]
pub(crate) struct Entry<A> {
    /// The Message v1 JSON.
    pub(crate) body: String,
    /// The attributes, `String` typed, in the SDK's map.
    pub(crate) attributes: HashMap<String, A>,
    /// The FIFO ids.
    pub(crate) ids: Ids,
    /// What AWS counts toward its limits: the body plus, for every attribute, its name,
    /// its data type (`String`) and its value.
    pub(crate) size: usize,
}

/// The most message attributes SQS and SNS take on one message.
pub(crate) const MAX_ATTRIBUTES: usize = 10;

/// Attributes left out, in this order, while a Message v1 (or a structured-mode
/// CloudEvent) has more than [`MAX_ATTRIBUTES`]: each value is also inside the body (`v`,
/// `replay_id`, `dedupe_key`, `source_id` of a Message v1; a structured event holds the
/// source, the replay id and the idempotency key the dedupe key is part of). Only a signed
/// message can have more than 10 (up to 8 + 3 signing + 2 trace context), or a dead
/// letter's (6 + 4 record attributes, whose reason and class its body holds too); the
/// signature's three and the trace context always go.
pub(crate) const DROPPED_WHEN_OVER_LIMIT: [Slot; 6] = [
    Slot::Ours(Attr::MessageVersion),
    Slot::Ours(Attr::ReplayId),
    Slot::Ours(Attr::DedupeKey),
    Slot::Ours(Attr::SourceId),
    Slot::Ours(Attr::RecordReason),
    Slot::Ours(Attr::RecordClass),
];

/// One attribute a binary-mode CloudEvent may carry: one of ours, or a CloudEvents
/// attribute (sent as `ce-<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// An `ankusa_*` (or signing, trace context) attribute.
    Ours(Attr),
    /// A CloudEvents attribute, by its CloudEvents name.
    Event(&'static str),
}

/// Attributes left out, in this order, while a binary-mode CloudEvent has more than
/// [`MAX_ATTRIBUTES`] (it has 12 at least with a trace context: every CloudEvents
/// attribute beside ours). First ours whose value the event carries too (`ankusa_replay_id`,
/// `ankusa_source_id`, `ankusa_tenant_id`, `ankusa_idempotency_key`, `ankusa_id`, the
/// protocol's `traceparent` and `tracestate`) and `ankusa_dedupe_key` (part of the
/// idempotency key), then the event's optional attributes (`ce-ankusareplayid`, also in
/// `ce-id`; `ce-tracestate`, `ce-ankusatenant`, `ce-time`, `ce-traceparent`,
/// `ce-ankusaidempotencykey`). Never left out: `ce-id`, `ce-source`, `ce-type`,
/// `ce-specversion` (the event's required attributes), `content_type` (its
/// `datacontenttype`) and the signature's three: at most 8.
pub(crate) const CE_DROPPED_WHEN_OVER_LIMIT: [Slot; 14] = [
    Slot::Ours(Attr::ReplayId),
    Slot::Ours(Attr::SourceId),
    Slot::Ours(Attr::TenantId),
    Slot::Ours(Attr::IdempotencyKey),
    Slot::Ours(Attr::Id),
    Slot::Ours(Attr::TraceParent),
    Slot::Ours(Attr::TraceState),
    Slot::Ours(Attr::DedupeKey),
    Slot::Event("ankusareplayid"),
    Slot::Event("tracestate"),
    Slot::Event("ankusatenant"),
    Slot::Event("time"),
    Slot::Event("traceparent"),
    Slot::Event("ankusaidempotencykey"),
];

/// A character SQS and SNS take in a message body and in a `String` attribute value (XML
/// 1.0's `Char`): `#x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF`.
#[cfg(test)]
fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r')
        || ('\u{20}'..='\u{D7FF}').contains(&c)
        || ('\u{E000}'..='\u{FFFD}').contains(&c)
        || c >= '\u{10000}'
}

/// Whether all of `text` is [`is_xml_char`], by bytes: in UTF-8 only a control byte or
/// `EF BF BE` / `EF BF BF` (U+FFFE, U+FFFF) is outside it, and a Message v1 body is mostly
/// base64, so this runs over every delivery's body at memory speed.
fn is_xml_text(b: &[u8]) -> bool {
    let control = b.iter().fold(false, |bad, &c| {
        bad | ((c < 0x20) & !matches!(c, b'\t' | b'\n' | b'\r'))
    });
    let nonchar = b
        .windows(3)
        .any(|w| w[0] == 0xEF && w[1] == 0xBF && (w[2] == 0xBE || w[2] == 0xBF));
    !control && !nonchar
}

/// Why a message cannot be an SQS or SNS body (nothing is sent): a binary-mode CloudEvent's
/// data travels as the body itself, and both services take a non-empty string of XML
/// characters only ([`is_xml_char`]).
fn check_text_body(body: &[u8]) -> Result<&str, AwsError> {
    let text = std::str::from_utf8(body).map_err(|_| AwsError::BodyNotText { why: "not UTF-8" })?;
    if text.is_empty() {
        return Err(AwsError::BodyNotText { why: "empty" });
    }
    if !is_xml_text(text.as_bytes()) {
        return Err(AwsError::BodyNotText {
            why: "a character SQS refuses (a control character or U+FFFE/U+FFFF)",
        });
    }
    Ok(text)
}

/// An SQS/SNS message attribute name: 1-256 characters of `[A-Za-z0-9_.-]`, not starting
/// with `AWS.` or `Amazon.` (any case), no leading, trailing or consecutive periods (the
/// `SendMessage` / `Publish` API references). Ours always are; checked so that a name
/// built from a hook someday cannot reach the service.
fn check_attribute_name(name: &str) -> Result<(), Unrepresentable> {
    let field = || format!("message attribute name \"{}\"", printable_name(name));
    check_text(field, name, 256, |c| {
        c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
    })?;
    // Every delivery checks each of its attribute names: no lowercase copy of each.
    let reserved = |prefix: &str| {
        name.get(..prefix.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(prefix))
    };
    if name.is_empty()
        || reserved("aws.")
        || reserved("amazon.")
        || name.starts_with('.')
        || name.ends_with('.')
        || name.contains("..")
    {
        return Err(Unrepresentable::new(
            field(),
            "is a name SQS and SNS refuse (empty, reserved prefix or misplaced period)",
        ));
    }
    Ok(())
}

/// A name as it may appear in a reason: ASCII letters, digits and `_.-` kept, anything
/// else `?` (a refused name is text from the hook, and could carry anything).
fn printable_name(name: &str) -> String {
    name.chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// An SQS/SNS `String` message attribute value: XML characters only (the size counts
/// toward `max_message_bytes`, checked with the body). A value outside them is refused by
/// SQS (`InvalidParameterValue`) for this message.
fn check_attribute_value(name: &str, value: &str) -> Result<(), Unrepresentable> {
    if is_xml_text(value.as_bytes()) {
        return Ok(());
    }
    Err(Unrepresentable::new(
        format!("message attribute \"{}\"", printable_name(name)),
        "holds a character SQS and SNS refuse (a control character or U+FFFE/U+FFFF)",
    ))
}

/// A FIFO message group or deduplication id: 1-128 characters, each an ASCII letter,
/// digit or punctuation mark (`!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~`), as SQS and SNS define
/// them. The sink derives them from the hook (`<tenant>/<source>`, the hook id and a
/// replay id), so a source id with `é` cannot be a FIFO group.
fn check_fifo_id(field: &'static str, id: &str) -> Result<(), Unrepresentable> {
    if id.is_empty() {
        return Err(Unrepresentable::new(field, "is empty"));
    }
    check_text(|| field.to_owned(), id, 128, |c| c.is_ascii_graphic())
}

/// The hook's values in a Message v1 (or structured-mode CloudEvent) body are JSON string
/// text, not escaped: a forwarded header with U+FFFF makes a body SQS refuses. Names the
/// header when one is the cause, else `message body` (a dedupe key, an id, JSON data).
fn check_message_body(out: &Outgoing<'_>, body: &[u8]) -> Result<(), Unrepresentable> {
    if is_xml_text(body) {
        return Ok(());
    }
    const WHY: &str = "holds a character SQS and SNS refuse in a message body (a control \
                       character or U+FFFE/U+FFFF)";
    for (name, value) in out.forwarded_headers() {
        if !is_xml_text(value.as_bytes()) {
            let field = format!("header \"{}\" in the message body", printable_name(name));
            return Err(Unrepresentable::new(field, WHY));
        }
    }
    Err(Unrepresentable::new("message body", WHY))
}

/// Every value of one SQS/SNS message derived from the hook, checked before it can join a
/// request (alone or in a batch): attribute names and values, the FIFO ids, the body.
fn check_entry<'a>(
    out: &Outgoing<'_>,
    attributes: impl Iterator<Item = (&'a str, &'a str)>,
    ids: &Ids,
    body: Option<&[u8]>,
) -> Result<(), Unrepresentable> {
    for (name, value) in attributes {
        check_attribute_name(name)?;
        check_attribute_value(name, value)?;
    }
    if let Some(group) = &ids.group {
        check_fifo_id("message group id", group)?;
    }
    if let Some(dedup) = &ids.dedup {
        check_fifo_id("message deduplication id", dedup)?;
    }
    if let Some(body) = body {
        check_message_body(out, body)?;
    }
    Ok(())
}

/// The entry for `out`: the one mapping from core's message to the SDK's.
///
/// Message v1 and a structured-mode CloudEvent: the body, and every attribute of `out`
/// under its `as_attr()` name, the first of [`DROPPED_WHEN_OVER_LIMIT`] left out while
/// over [`MAX_ATTRIBUTES`]. A binary-mode CloudEvent: the event's data as the body (text
/// only: [`AwsError::BodyNotText`] otherwise), ours beside every CloudEvents attribute as
/// `ce-<name>` (`datacontenttype` is `content_type`), the first of
/// [`CE_DROPPED_WHEN_OVER_LIMIT`] left out while over [`MAX_ATTRIBUTES`].
///
/// # Errors
/// [`AwsError::BodyNotText`] for a binary-mode CloudEvent whose data is not text SQS takes;
/// [`AwsError::Unrepresentable`] for a value of the hook SQS/SNS refuse ([`check_entry`]).
pub(crate) fn to_entry<A: AttributeValue>(
    out: Outgoing<'_>,
    ids: Ids,
) -> Result<Entry<A>, AwsError> {
    let mut slots: Vec<(Slot, Cow<'_, str>, &str)> = out
        .attributes()
        .iter()
        .map(|(a, v)| (Slot::Ours(*a), Cow::Borrowed(a.as_attr()), v.as_ref()))
        .collect();
    let binary = out.cloudevents_mode() == Some(Mode::Binary);
    if binary {
        slots.extend(
            out.cloudevent_attributes()
                .iter()
                .filter(|(name, _)| *name != "datacontenttype")
                .map(|(name, v)| {
                    (
                        Slot::Event(name),
                        Cow::Owned(format!("ce-{name}")),
                        v.as_ref(),
                    )
                }),
        );
    }
    let over = slots.len().saturating_sub(MAX_ATTRIBUTES);
    let order: &[Slot] = if binary {
        &CE_DROPPED_WHEN_OVER_LIMIT
    } else {
        &DROPPED_WHEN_OVER_LIMIT
    };
    let dropped: Vec<Slot> = order
        .iter()
        .copied()
        .filter(|d| slots.iter().any(|(s, ..)| s == d))
        .take(over)
        .collect();
    slots.retain(|(s, ..)| !dropped.contains(s));
    // Before the entry can join a batch: a value the service refuses fails this hook only.
    check_entry(
        &out,
        slots.iter().map(|(_, name, v)| (name.as_ref(), *v)),
        &ids,
        (!binary).then(|| out.body()),
    )?;
    let attribute_bytes: usize = slots
        .iter()
        .map(|(_, name, v)| name.len() + v.len() + DATA_TYPE.len())
        .sum();
    let size = out.body().len() + attribute_bytes;
    // A binary-mode event's data is the body itself: checked as text SQS takes, and
    // copied, once.
    let text = if binary {
        Some(check_text_body(out.body())?.to_owned())
    } else {
        None
    };
    let attributes = slots
        .into_iter()
        .map(|(_, name, value)| (name.into_owned(), A::string(value)))
        .collect();
    let body = match (text, out.into_body()) {
        (Some(text), _) => text,
        (None, Body::Message(json)) => {
            String::from_utf8(json).expect("Message v1 is JSON, hence UTF-8")
        }
        (None, Body::Raw(raw)) => String::from_utf8(raw.to_vec())
            .map_err(|_| AwsError::BodyNotText { why: "not UTF-8" })?,
    };
    Ok(Entry {
        body,
        attributes,
        ids,
        size,
    })
}

#[cfg(feature = "kinesis")]
/// One prepared Kinesis record.
///
/// `Debug` shows sizes only: the data and the key carry the hook.
#[derive(Clone)]
pub(crate) struct Record {
    /// The Message v1 JSON.
    pub(crate) data: Vec<u8>,
    /// The partition key: the key template's rendering, else the idempotency key.
    pub(crate) partition_key: String,
}

#[cfg(feature = "kinesis")]
impl Record {
    /// What Kinesis counts toward its record limit: data plus partition key (UTF-8).
    pub(crate) fn size(&self) -> usize {
        self.data.len() + self.partition_key.len()
    }
}

#[cfg(feature = "kinesis")]
/// A partition key Kinesis takes: one over its 256 characters becomes `sha256:` and the
/// hex SHA-256 of the key (71 characters), so the same hook key still reaches the same
/// shard instead of failing every such hook.
fn partition_key(key: &str) -> String {
    use sha2::Digest as _;
    if key.chars().count() <= crate::config::KINESIS_MAX_PARTITION_KEY_CHARS {
        return key.to_owned();
    }
    format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(key.as_bytes()))
    )
}

#[cfg(feature = "kinesis")]
/// A partition key Kinesis takes: 1-256 Unicode characters (the `PutRecord` API
/// reference). An over-long key was hashed already ([`partition_key`]); an empty one (a key
/// template that renders `""`, such as `{tenant_id}` for a hook without a tenant) would be
/// refused with `ValidationException`. Kinesis names no character rule, and hashes the
/// key's UTF-8 bytes: any character is kept.
fn check_partition_key(key: &str) -> Result<(), Unrepresentable> {
    if key.is_empty() {
        return Err(Unrepresentable::new("partition key", "is empty"));
    }
    Ok(())
}

#[cfg(feature = "kinesis")]
/// The Kinesis record for `out`: the Message v1 body as the data, the rendered key (the
/// layout's key template) or the idempotency key as the partition key.
///
/// # Errors
/// [`AwsError::Unrepresentable`] for an empty partition key.
pub(crate) fn to_record(out: Outgoing<'_>) -> Result<Record, AwsError> {
    let partition_key = partition_key(out.key().unwrap_or(out.idempotency_key()));
    check_partition_key(&partition_key)?;
    Ok(Record {
        data: out.into_body().as_bytes().to_vec(),
        partition_key,
    })
}

#[cfg(feature = "kinesis")]
impl fmt::Debug for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Record")
            .field("data_bytes", &self.data.len())
            .field("partition_key_chars", &self.partition_key.chars().count())
            .finish()
    }
}

#[cfg(feature = "eventbridge")]
/// One prepared EventBridge entry: its `Detail`; `Source`, `DetailType` and `EventBusName`
/// are the sink's, the same for every entry.
///
/// `Debug` shows the size only.
#[derive(Clone)]
pub(crate) struct Event {
    /// The Message v1 JSON (an object, as `Detail` must be).
    pub(crate) detail: String,
    /// What EventBridge counts: `Detail`, `Source` and `DetailType` (UTF-8 bytes).
    pub(crate) size: usize,
}

#[cfg(feature = "eventbridge")]
/// The EventBridge entry for `out`, whose `Source` and `DetailType` are `source` and
/// `detail_type`.
pub(crate) fn to_event(out: Outgoing<'_>, source: &str, detail_type: &str) -> Event {
    let detail = match out.into_body() {
        Body::Message(json) => String::from_utf8(json).expect("Message v1 is JSON, hence UTF-8"),
        Body::Raw(raw) => String::from_utf8_lossy(&raw).into_owned(),
    };
    Event {
        size: detail.len() + source.len() + detail_type.len(),
        detail,
    }
}

#[cfg(feature = "eventbridge")]
impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event").field("size", &self.size).finish()
    }
}

impl<A> fmt::Debug for Entry<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.attributes.keys().map(String::as_str).collect();
        names.sort_unstable();
        f.debug_struct("Entry")
            .field("body_bytes", &self.body.len())
            .field("attributes", &names)
            .field("group_id", &self.ids.group.is_some())
            .field("dedup_id", &self.ids.dedup.is_some())
            .field("size", &self.size)
            .finish()
    }
}

#[cfg(test)]
mod represent_tests {
    use super::*;

    #[test]
    fn the_byte_scan_is_the_xml_char_rule_on_every_code_point() {
        let mut buf = [0u8; 4];
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            let text = c.encode_utf8(&mut buf);
            assert_eq!(is_xml_text(text.as_bytes()), is_xml_char(c), "{c:?}");
        }
        assert!(is_xml_text("a\tb\r\nc é 🦀 \u{FFFD} \u{FDD0}".as_bytes()));
    }

    #[test]
    fn attribute_names_follow_the_sqs_rules() {
        for ok in [
            "ankusa_id",
            "ce-id",
            "content_type",
            "a.b",
            &"n".repeat(256),
        ] {
            assert!(check_attribute_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "AWS.x",
            "amazon.x",
            ".a",
            "a.",
            "a..b",
            "a b",
            "é",
            &"n".repeat(257),
        ] {
            let e = check_attribute_name(bad).unwrap_err();
            assert!(e.field.starts_with("message attribute name"), "{e}");
        }
    }

    #[test]
    fn fifo_ids_are_1_to_128_printable_ascii() {
        assert!(check_fifo_id("message group id", "acme/stripe!~").is_ok());
        assert!(check_fifo_id("message group id", &"g".repeat(128)).is_ok());
        for bad in ["", "a b", "é", &"g".repeat(129)] {
            let e = check_fifo_id("message group id", bad).unwrap_err();
            assert_eq!(e.field, "message group id");
        }
    }

    #[test]
    fn a_refused_value_is_named_never_shown() {
        let e = check_attribute_value("ankusa_dedupe_key", "secret\u{FFFF}").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("message attribute \"ankusa_dedupe_key\""),
            "{text}"
        );
        assert!(!text.contains("secret"), "{text}");
        assert!(check_attribute_value("a", "tab\tcr\rlf\n é").is_ok());
    }
}

#[cfg(all(test, feature = "kinesis", feature = "eventbridge"))]
mod record_tests {
    use super::*;
    use ankusa_message::template::{AbsentTenant, KeyTemplate};
    use ankusa_message::{DEFAULT_INLINE_MAX_BYTES, EmptyValues, Layout, encode};
    use ankusa_sink_core::{Ctx, Envelope};

    fn layout() -> Layout {
        Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), EmptyValues::Drop)
    }

    #[test]
    fn a_record_is_the_message_keyed_by_the_template_or_the_idempotency_key() {
        let env = Envelope::builder("h1", "stripe", &b"{\"a\":1}"[..])
            .tenant_id("acme")
            .dedupe_key("evt_1")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env);
        let body = encode(&env, &ctx, Some(DEFAULT_INLINE_MAX_BYTES)).unwrap();
        let r = to_record(Outgoing::new(&env, &ctx, &layout()).unwrap()).unwrap();
        assert_eq!(r.data, body);
        assert_eq!(r.partition_key, "acme:stripe:evt_1");
        assert_eq!(r.size(), body.len() + "acme:stripe:evt_1".len());

        let keyed = layout().with_key(
            KeyTemplate::parse("{tenant_id}/{source_id}", AbsentTenant::Default).unwrap(),
        );
        let r = to_record(Outgoing::new(&env, &ctx, &keyed).unwrap()).unwrap();
        assert_eq!((r.partition_key.as_str(), &r.data), ("acme/stripe", &body));
        let bare = Envelope::builder("h2", "gh", "").build().unwrap();
        let ctx = Ctx::for_envelope(&bare);
        let r = to_record(Outgoing::new(&bare, &ctx, &keyed).unwrap()).unwrap();
        assert_eq!(r.partition_key, "default/gh");
        let text = format!("{r:?}");
        assert!(
            !text.contains("default/gh") && !text.contains("\"v\""),
            "{text}"
        );
    }

    #[test]
    fn an_over_long_key_is_hashed_the_same_way_every_time() {
        let long = "k".repeat(300);
        let env = Envelope::builder("h1", "stripe", "")
            .dedupe_key(long.clone())
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env);
        let a = to_record(Outgoing::new(&env, &ctx, &layout()).unwrap()).unwrap();
        let b = to_record(Outgoing::new(&env, &ctx, &layout()).unwrap()).unwrap();
        assert_eq!(a.partition_key, b.partition_key);
        assert!(
            a.partition_key.starts_with("sha256:"),
            "{}",
            a.partition_key
        );
        assert_eq!(a.partition_key.len(), 71);
        let edge = "é".repeat(256);
        assert_eq!(
            partition_key(&edge),
            edge,
            "256 characters, 512 bytes: kept"
        );
    }

    #[test]
    fn an_event_is_the_message_as_detail() {
        let env = Envelope::builder("h1", "stripe", "x").build().unwrap();
        let ctx = Ctx::for_envelope(&env);
        let body = encode(&env, &ctx, Some(DEFAULT_INLINE_MAX_BYTES)).unwrap();
        let e = to_event(Outgoing::new(&env, &ctx, &layout()).unwrap(), "app", "Hook");
        assert_eq!(e.detail.as_bytes(), &body[..]);
        assert!(
            serde_json::from_str::<serde_json::Value>(&e.detail)
                .unwrap()
                .is_object()
        );
        assert_eq!(e.size, body.len() + 3 + 4);
        assert_eq!(format!("{e:?}"), format!("Event {{ size: {} }}", e.size));
    }
}

#[cfg(all(test, feature = "sqs"))]
mod tests {
    use super::*;
    use ankusa_message::{DEFAULT_INLINE_MAX_BYTES, EmptyValues, Layout, encode};
    use ankusa_sink_core::{Ctx, Envelope};
    use aws_sdk_sqs::types::MessageAttributeValue;

    fn layout() -> Layout {
        Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), EmptyValues::Drop)
    }

    #[test]
    fn the_wire_attributes_body_and_size() {
        let env = Envelope::builder("h1", "stripe", &b"{\"a\":1}"[..])
            .tenant_id("acme")
            .dedupe_key("evt_1")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env).with_replay_id("r-9");
        let out = Outgoing::new(&env, &ctx, &layout()).unwrap();
        let e: Entry<MessageAttributeValue> = to_entry(out, Ids::default()).unwrap();
        let mut got: Vec<(&str, &str, &str)> = e
            .attributes
            .iter()
            .map(|(k, v)| (k.as_str(), v.data_type(), v.string_value().unwrap()))
            .collect();
        got.sort_unstable();
        let want = [
            ("ankusa_dedupe_key", "String", "evt_1"),
            ("ankusa_id", "String", "h1"),
            ("ankusa_idempotency_key", "String", "acme:stripe:evt_1"),
            ("ankusa_message_version", "String", "1"),
            ("ankusa_replay_id", "String", "r-9"),
            ("ankusa_source_id", "String", "stripe"),
            ("ankusa_tenant_id", "String", "acme"),
            ("content_type", "String", "application/json"),
        ];
        assert_eq!(got, want);
        let body = encode(&env, &ctx, Some(DEFAULT_INLINE_MAX_BYTES)).unwrap();
        assert_eq!(e.body.as_bytes(), &body[..]);
        let attr_bytes: usize = want
            .iter()
            .map(|(k, t, v)| k.len() + t.len() + v.len())
            .sum();
        assert_eq!(e.size, body.len() + attr_bytes);

        // No tenant: no tenant attribute (SQS refuses empty values).
        let bare = Envelope::builder("h2", "github", "").build().unwrap();
        let ctx = Ctx::for_envelope(&bare);
        let out = Outgoing::new(&bare, &ctx, &layout()).unwrap();
        let e: Entry<MessageAttributeValue> = to_entry(out, Ids::default()).unwrap();
        assert!(!e.attributes.contains_key("ankusa_tenant_id"));
        assert_eq!(e.attributes.len(), 5);
    }

    #[test]
    fn entry_debug_shows_shape_not_content() {
        let env = Envelope::builder("hook-1", "stripe", "card 4242-secret")
            .dedupe_key("evt_private")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env);
        let out = Outgoing::new(&env, &ctx, &layout()).unwrap();
        let ids = Ids {
            group: Some("acme/stripe".to_owned()),
            dedup: Some("hook-1".to_owned()),
        };
        let e: Entry<MessageAttributeValue> = to_entry(out, ids).unwrap();
        let text = format!("{e:?}");
        for secret in ["4242-secret", "evt_private", "acme/stripe", "hook-1"] {
            assert!(!text.contains(secret), "{text}");
        }
        assert!(text.contains("\"ankusa_dedupe_key\""), "{text}");
        assert!(text.contains("group_id: true"), "{text}");
    }

    #[test]
    fn a_signed_message_keeps_ten_attributes_and_its_signature() {
        use ankusa_message::signing::Signer;
        let signer = Signer::new(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).unwrap();
        let signed = layout().with_signer(signer.clone());
        let env = Envelope::builder("h1", "stripe", &b"{}"[..])
            .tenant_id("acme")
            .dedupe_key("evt_1")
            .build()
            .unwrap();
        // Eight attributes plus three: the message version goes (it is the body's `v`).
        let ctx = Ctx::for_envelope(&env).with_replay_id("r-9");
        let out = Outgoing::new(&env, &ctx, &signed).unwrap();
        let (id, ts, sig) = (
            out.get(Attr::WebhookId).unwrap().to_owned(),
            out.get(Attr::WebhookTimestamp).unwrap().to_owned(),
            out.get(Attr::WebhookSignature).unwrap().to_owned(),
        );
        let e: Entry<MessageAttributeValue> = to_entry(out, Ids::default()).unwrap();
        assert_eq!(e.attributes.len(), MAX_ATTRIBUTES);
        assert!(!e.attributes.contains_key("ankusa_message_version"));
        for kept in ["ankusa_replay_id", "ankusa_dedupe_key", "ankusa_source_id"] {
            assert!(e.attributes.contains_key(kept), "{kept}");
        }
        let value = |k: &str| e.attributes[k].string_value().unwrap().to_owned();
        assert_eq!(value("webhook-id"), "h1:replay:r-9");
        assert_eq!(
            (value("webhook-timestamp"), value("webhook-signature")),
            (ts, sig.clone())
        );
        let attr_bytes: usize = e
            .attributes
            .iter()
            .map(|(k, v)| k.len() + "String".len() + v.string_value().unwrap().len())
            .sum();
        assert_eq!(
            e.size,
            e.body.len() + attr_bytes,
            "the dropped one is not counted"
        );
        let msg = ankusa_message::verify(
            &signer,
            &id,
            &value("webhook-timestamp"),
            &sig,
            e.body.as_bytes(),
            std::time::SystemTime::now(),
        )
        .unwrap();
        assert_eq!(msg.replay_id.as_deref(), Some("r-9"));

        // Fewer attributes: nothing is left out.
        let bare = Envelope::builder("h2", "stripe", &b"{}"[..])
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&bare);
        let e: Entry<MessageAttributeValue> =
            to_entry(Outgoing::new(&bare, &ctx, &signed).unwrap(), Ids::default()).unwrap();
        assert_eq!(e.attributes.len(), 8, "5 + 3");
        let ctx = Ctx::for_envelope(&env);
        let e: Entry<MessageAttributeValue> =
            to_entry(Outgoing::new(&env, &ctx, &signed).unwrap(), Ids::default()).unwrap();
        assert_eq!(e.attributes.len(), 10, "7 + 3");
        assert!(e.attributes.contains_key("ankusa_message_version"));

        // With the whole trace context too (8 + 3 + 2): the message version, replay id and
        // dedupe key go, in that order; the trace context and the signature stay.
        let trace = ankusa_message::TraceContext::root().with_tracestate("a=1");
        let ctx = Ctx::for_envelope(&env)
            .with_replay_id("r-9")
            .with_extension(trace.clone());
        let e: Entry<MessageAttributeValue> =
            to_entry(Outgoing::new(&env, &ctx, &signed).unwrap(), Ids::default()).unwrap();
        assert_eq!(e.attributes.len(), MAX_ATTRIBUTES);
        for gone in [
            "ankusa_message_version",
            "ankusa_replay_id",
            "ankusa_dedupe_key",
        ] {
            assert!(!e.attributes.contains_key(gone), "{gone}");
        }
        let value = |k: &str| e.attributes[k].string_value().unwrap().to_owned();
        assert_eq!(value("traceparent"), trace.traceparent());
        assert_eq!(value("tracestate"), "a=1");
        assert!(e.attributes.contains_key("webhook-signature"));
    }
}

#[cfg(all(test, feature = "sqs"))]
mod cloudevents_tests {
    use super::*;
    use ankusa_message::TraceContext;
    use ankusa_message::cloudevents::CloudEvents;
    use ankusa_message::signing::Signer;
    use ankusa_message::{DEFAULT_INLINE_MAX_BYTES, EmptyValues, Layout};
    use ankusa_sink_core::{Class, Ctx, Envelope, Failure};
    use aws_sdk_sqs::types::MessageAttributeValue;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn layout(mode: Mode) -> Layout {
        Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), EmptyValues::Drop)
            .with_cloudevents(CloudEvents::new(mode, "t.x").unwrap())
    }

    fn full(body: &[u8], content_type: &str) -> Envelope {
        Envelope::builder("h1", "stripe", body.to_vec())
            .tenant_id("acme")
            .dedupe_key("evt_1")
            .content_type(content_type)
            .build()
            .unwrap()
    }

    fn entry(env: &Envelope, ctx: &Ctx, layout: &Layout) -> Entry<MessageAttributeValue> {
        to_entry(Outgoing::new(env, ctx, layout).unwrap(), Ids::default()).unwrap()
    }

    fn names(e: &Entry<MessageAttributeValue>) -> Vec<&str> {
        let mut n: Vec<&str> = e.attributes.keys().map(String::as_str).collect();
        n.sort_unstable();
        n
    }

    fn value<'a>(e: &'a Entry<MessageAttributeValue>, k: &str) -> Option<&'a str> {
        e.attributes.get(k).map(|v| v.string_value().unwrap())
    }

    #[test]
    fn binary_mode_sends_the_data_as_the_body_beside_ce_attributes() {
        let env = Envelope::builder("h2", "stripe", "plain text ✓")
            .content_type("text/plain; charset=utf-8")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env);
        let e = entry(&env, &ctx, &layout(Mode::Binary));
        assert_eq!(e.body, "plain text ✓", "the data, as it came");
        // 4 of ours (no tenant: dropped, as SQS refuses empty values) + 6 of the event
        // (`datacontenttype` is `content_type`): 10, nothing left out.
        assert_eq!(
            names(&e),
            [
                "ankusa_id",
                "ankusa_idempotency_key",
                "ankusa_source_id",
                "ce-ankusaidempotencykey",
                "ce-id",
                "ce-source",
                "ce-specversion",
                "ce-time",
                "ce-type",
                "content_type",
            ]
        );
        assert_eq!(value(&e, "content_type"), Some("text/plain; charset=utf-8"));
        assert_eq!(value(&e, "ce-id"), Some("h2"));
        assert_eq!(value(&e, "ce-source"), Some("/sources/stripe"));
        assert_eq!(value(&e, "ce-type"), Some("t.x"));
        assert_eq!(value(&e, "ce-specversion"), Some("1.0"));
        let attr_bytes: usize = e
            .attributes
            .iter()
            .map(|(k, v)| k.len() + "String".len() + v.string_value().unwrap().len())
            .sum();
        assert_eq!(e.size, e.body.len() + attr_bytes);
        // A hook without a content type: the event's default.
        let bare = Envelope::builder("h3", "s", "x").build().unwrap();
        let ctx = Ctx::for_envelope(&bare);
        let e = entry(&bare, &ctx, &layout(Mode::Binary));
        assert_eq!(value(&e, "content_type"), Some("application/octet-stream"));
    }

    #[test]
    fn binary_data_sqs_cannot_carry_is_refused_permanent_and_unsent() {
        for (body, why) in [
            (&[0xff_u8, 0x00, 0x80][..], "not UTF-8"),
            (b"", "empty"),
            (b"a\x00b", "a character SQS refuses"),
            ("\u{FFFE}".as_bytes(), "a character SQS refuses"),
        ] {
            let env = full(body, "application/octet-stream");
            let ctx = Ctx::for_envelope(&env);
            let out = Outgoing::new(&env, &ctx, &layout(Mode::Binary)).unwrap();
            let err = to_entry::<MessageAttributeValue>(out, Ids::default()).unwrap_err();
            assert!(
                matches!(err, AwsError::BodyNotText { why: w } if w.starts_with(why)),
                "{err:?}"
            );
            assert!(err.to_string().contains("cloudevents-structured"), "{err}");
            let f = Failure::from(err);
            assert_eq!(f.class(), Class::Permanent);
            assert_eq!(f.may_have_landed(), Some(false));
            // Structured mode carries the same data (as `data_base64`).
            let out = Outgoing::new(&env, &ctx, &layout(Mode::Structured)).unwrap();
            let e = to_entry::<MessageAttributeValue>(out, Ids::default()).unwrap();
            let v: serde_json::Value = serde_json::from_str(&e.body).unwrap();
            assert!(v.get("data_base64").is_some(), "{v}");
        }
        // Tabs, newlines and astral characters are text SQS takes.
        let env = full("a\tb\r\nc 𝄞".as_bytes(), "text/plain");
        let ctx = Ctx::for_envelope(&env);
        assert_eq!(entry(&env, &ctx, &layout(Mode::Binary)).body, "a\tb\r\nc 𝄞");
    }

    #[test]
    fn structured_mode_sends_the_event_with_our_attributes() {
        let env = full(br#"{"a":1}"#, "application/json");
        let ctx = Ctx::for_envelope(&env).with_replay_id("r1");
        let e = entry(&env, &ctx, &layout(Mode::Structured));
        let v: serde_json::Value = serde_json::from_str(&e.body).unwrap();
        assert_eq!(v["id"], "h1:replay:r1");
        assert_eq!(v["data"], serde_json::json!({"a": 1}));
        assert_eq!(
            value(&e, "content_type"),
            Some("application/cloudevents+json")
        );
        assert!(!e.attributes.keys().any(|k| k.starts_with("ce-")));
        assert!(!e.attributes.contains_key("ankusa_message_version"));
        assert_eq!(e.attributes.len(), 7);
    }

    /// The cap, written out independently: what stays of a binary-mode event with every
    /// attribute set (tenant, dedupe key, replay, trace context with a state), unsigned
    /// and signed; and the signature covers the body the consumer reads.
    #[test]
    fn binary_mode_keeps_ten_attributes_by_the_documented_order() {
        let env = full(br#"{"a":1}"#, "application/json");
        let trace = TraceContext::root().with_tracestate("a=1");
        let ctx = Ctx::for_envelope(&env)
            .with_replay_id("r1")
            .with_extension(trace.clone());
        // 9 of ours + 10 of the event: the 8 of ours whose value the event carries (or the
        // idempotency key holds) go first, then `ce-ankusareplayid` (in `ce-id`).
        let e = entry(&env, &ctx, &layout(Mode::Binary));
        assert_eq!(
            names(&e),
            [
                "ce-ankusaidempotencykey",
                "ce-ankusatenant",
                "ce-id",
                "ce-source",
                "ce-specversion",
                "ce-time",
                "ce-traceparent",
                "ce-tracestate",
                "ce-type",
                "content_type",
            ]
        );
        assert_eq!(value(&e, "ce-traceparent"), Some(trace.traceparent()));
        assert_eq!(value(&e, "ce-id"), Some("h1:replay:r1"));

        // Signed: 22 attributes, 10 stay: the required four, the content type, the
        // signature's three, then the idempotency key and the traceparent.
        let signer = Signer::new([SECRET]).unwrap();
        let signed = layout(Mode::Binary).with_signer(signer.clone());
        let e = entry(&env, &ctx, &signed);
        assert_eq!(
            names(&e),
            [
                "ce-ankusaidempotencykey",
                "ce-id",
                "ce-source",
                "ce-specversion",
                "ce-traceparent",
                "ce-type",
                "content_type",
                "webhook-id",
                "webhook-signature",
                "webhook-timestamp",
            ]
        );
        let sig = (
            value(&e, "webhook-id").unwrap(),
            value(&e, "webhook-timestamp").unwrap(),
            value(&e, "webhook-signature").unwrap(),
        );
        assert_eq!(sig.0, "h1:replay:r1");
        let now = std::time::SystemTime::now();
        let tolerance = std::time::Duration::from_secs(300);
        assert!(
            signer
                .verify(sig.0, sig.1, sig.2, e.body.as_bytes(), now, tolerance)
                .is_ok()
        );

        // Without a trace context and a replay: 6 of ours + 7 of the event, three go.
        let ctx = Ctx::for_envelope(&env);
        let e = entry(&env, &ctx, &layout(Mode::Binary));
        assert_eq!(e.attributes.len(), MAX_ATTRIBUTES);
        for gone in [
            "ankusa_source_id",
            "ankusa_tenant_id",
            "ankusa_idempotency_key",
        ] {
            assert!(!e.attributes.contains_key(gone), "{gone}");
        }
        assert_eq!(value(&e, "ankusa_id"), Some("h1"));
        assert_eq!(value(&e, "ankusa_dedupe_key"), Some("evt_1"));
    }

    #[test]
    fn a_signed_structured_event_verifies_over_its_json() {
        let signer = Signer::new([SECRET]).unwrap();
        let env = full(b"\x00\xff", "application/octet-stream");
        let ctx = Ctx::for_envelope(&env).with_extension(TraceContext::root());
        let e = entry(
            &env,
            &ctx,
            &layout(Mode::Structured).with_signer(signer.clone()),
        );
        assert!(e.attributes.len() <= MAX_ATTRIBUTES);
        let v = |k: &str| value(&e, k).unwrap();
        assert!(
            signer
                .verify(
                    v("webhook-id"),
                    v("webhook-timestamp"),
                    v("webhook-signature"),
                    e.body.as_bytes(),
                    std::time::SystemTime::now(),
                    std::time::Duration::from_secs(300),
                )
                .is_ok()
        );
    }
}

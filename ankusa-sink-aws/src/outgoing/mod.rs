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

impl<A> Entry<A> {
    /// The entry and its size, as [`Publisher::entry`](crate::sink::Publisher::entry)
    /// returns them.
    pub(crate) fn sized(self) -> (Self, usize) {
        let size = self.size;
        (self, size)
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

#[cfg(any(feature = "kinesis", feature = "eventbridge"))]
mod streams;
#[cfg(feature = "eventbridge")]
pub(crate) use streams::{Event, to_event};
#[cfg(feature = "kinesis")]
pub(crate) use streams::{Record, to_record};

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

#[cfg(all(test, feature = "sqs"))]
mod tests;

#[cfg(all(test, feature = "sqs"))]
mod cloudevents_tests;

//! [`Outgoing`]: everything a sink sends for one delivery, built once.

use crate::cloudevents::{self, CloudEvents, Mode, STRUCTURED_CONTENT_TYPE};
use crate::forwarding::forwarded_headers;
use crate::message::{EncodeError, encode_with};
use crate::signing::{Signer, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP, webhook_id};
use crate::template::KeyTemplate;
use crate::trace::TraceContext;
use ankusa_sink_core::Ctx;
use ankusa_sink_core::Envelope;
use ankusa_sink_core::Payload;
use bytes::Bytes;
use std::borrow::Cow;
use std::num::NonZeroUsize;

/// Metadata that rides beside the body: one name, spelled per transport.
///
/// | `Attr` | [`as_attr`](Attr::as_attr) (SQS, SNS, Pub/Sub, Kafka, AMQP) | [`as_http_header`](Attr::as_http_header) | Value |
/// | --- | --- | --- | --- |
/// | `Id` | `ankusa_id` | `x-ankusa-id` | the hook id |
/// | `SourceId` | `ankusa_source_id` | `x-ankusa-source` | the source id |
/// | `TenantId` | `ankusa_tenant_id` | `x-ankusa-tenant` | the tenant, `""` without one |
/// | `MessageVersion` | `ankusa_message_version` | `x-ankusa-message-version` | `1` (Message v1 only) |
/// | `IdempotencyKey` | `ankusa_idempotency_key` | `x-ankusa-idempotency-key` | [`Envelope::idempotency_key`] |
/// | `ContentType` | `content_type` | `content-type` | `application/json`; a raw body's own |
/// | `DedupeKey` | `ankusa_dedupe_key` | `x-ankusa-dedupe-key` | when set and not empty |
/// | `ReplayId` | `ankusa_replay_id` | `x-ankusa-replay-id` | when set and not empty |
/// | `WebhookId` | `webhook-id` | `webhook-id` | signing: the hook id, or `<id>:replay:<replay_id>` |
/// | `WebhookTimestamp` | `webhook-timestamp` | `webhook-timestamp` | signing: Unix seconds of this attempt |
/// | `WebhookSignature` | `webhook-signature` | `webhook-signature` | signing: `v1,<base64>` per key |
/// | `TraceParent` | `traceparent` | `traceparent` | the attempt's W3C `traceparent` ([`TraceContext::of`](crate::TraceContext::of)) |
/// | `TraceState` | `tracestate` | `tracestate` | the hook's W3C `tracestate`, when it had a valid one |
/// | `RecordState` | `ankusa_record` | `x-ankusa-record` | a dead letter's or parked hook's message ([`RecordAttrs`]): `dead`, `parked` or `invalid` |
/// | `RecordSink` | `ankusa_record_sink` | `x-ankusa-record-sink` | the sink it died (or waits) at |
/// | `RecordClass` | `ankusa_record_class` | `x-ankusa-record-class` | its last failure's class |
/// | `RecordReason` | `ankusa_record_reason` | `x-ankusa-record-reason` | its reason's head, no values |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Attr {
    /// The hook id.
    Id,
    /// The source id.
    SourceId,
    /// The tenant.
    TenantId,
    /// The Message v1 version, `1`.
    MessageVersion,
    /// The consumer's dedupe key.
    IdempotencyKey,
    /// The body's content type.
    ContentType,
    /// The provider's event key.
    DedupeKey,
    /// The replay job.
    ReplayId,
    /// The signed id (Standard Webhooks `webhook-id`).
    WebhookId,
    /// The signing time (Standard Webhooks `webhook-timestamp`).
    WebhookTimestamp,
    /// The signatures (Standard Webhooks `webhook-signature`).
    WebhookSignature,
    /// The attempt's W3C `traceparent`.
    TraceParent,
    /// The hook's W3C `tracestate`.
    TraceState,
    /// A record's state ([`RecordAttrs::state`]).
    RecordState,
    /// A record's sink ([`RecordAttrs::sink`]).
    RecordSink,
    /// A record's failure class ([`RecordAttrs::class`]).
    RecordClass,
    /// A record's reason ([`RecordAttrs::reason`]).
    RecordReason,
}

/// What a message that carries a dispatch record (a dead letter, a parked hook) says of it
/// beside its body, for a consumer that filters without reading it: put on the carrier's
/// [`Ctx`] ([`Ctx::with_extension`]), it ends [`Outgoing`]'s attributes with
/// [`Attr::RecordState`], [`Attr::RecordSink`], [`Attr::RecordClass`] and
/// [`Attr::RecordReason`]. Values are printable ASCII (the dispatcher makes them so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordAttrs {
    /// `dead`, `parked` or `invalid`.
    pub state: String,
    /// The sink's name (empty for an undecodable source record).
    pub sink: String,
    /// The last failure's class.
    pub class: String,
    /// The reason's head, without its values.
    pub reason: String,
}

impl Attr {
    /// The attribute (or header) name of message transports: `ankusa_id`, ...,
    /// `content_type`.
    pub const fn as_attr(self) -> &'static str {
        match self {
            Attr::Id => "ankusa_id",
            Attr::SourceId => "ankusa_source_id",
            Attr::TenantId => "ankusa_tenant_id",
            Attr::MessageVersion => "ankusa_message_version",
            Attr::IdempotencyKey => "ankusa_idempotency_key",
            Attr::ContentType => "content_type",
            Attr::DedupeKey => "ankusa_dedupe_key",
            Attr::ReplayId => "ankusa_replay_id",
            Attr::WebhookId => WEBHOOK_ID,
            Attr::WebhookTimestamp => WEBHOOK_TIMESTAMP,
            Attr::WebhookSignature => WEBHOOK_SIGNATURE,
            Attr::TraceParent => TRACEPARENT,
            Attr::TraceState => TRACESTATE,
            Attr::RecordState => "ankusa_record",
            Attr::RecordSink => "ankusa_record_sink",
            Attr::RecordClass => "ankusa_record_class",
            Attr::RecordReason => "ankusa_record_reason",
        }
    }

    /// The HTTP header name (lowercase): `x-ankusa-id`, ..., `content-type`.
    pub const fn as_http_header(self) -> &'static str {
        match self {
            Attr::Id => "x-ankusa-id",
            Attr::SourceId => "x-ankusa-source",
            Attr::TenantId => "x-ankusa-tenant",
            Attr::MessageVersion => "x-ankusa-message-version",
            Attr::IdempotencyKey => "x-ankusa-idempotency-key",
            Attr::ContentType => "content-type",
            Attr::DedupeKey => "x-ankusa-dedupe-key",
            Attr::ReplayId => "x-ankusa-replay-id",
            Attr::WebhookId => WEBHOOK_ID,
            Attr::WebhookTimestamp => WEBHOOK_TIMESTAMP,
            Attr::WebhookSignature => WEBHOOK_SIGNATURE,
            Attr::TraceParent => TRACEPARENT,
            Attr::TraceState => TRACESTATE,
            Attr::RecordState => "x-ankusa-record",
            Attr::RecordSink => "x-ankusa-record-sink",
            Attr::RecordClass => "x-ankusa-record-class",
            Attr::RecordReason => "x-ankusa-record-reason",
        }
    }
}

/// The W3C Trace Context header (and attribute, field and CloudEvents extension) names: the
/// same in every transport (W3C Trace Context and its messaging guidance).
const TRACEPARENT: &str = "traceparent";
const TRACESTATE: &str = "tracestate";

/// What becomes of an Ankusa attribute whose value is empty: in practice
/// [`Attr::TenantId`] of a hook without a tenant (the id, source id and idempotency key of
/// a valid envelope are never empty; the dedupe key and replay id are left out when unset
/// or empty whatever the rule; a raw body's own content type passes through as it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmptyValues {
    /// Sent as `""` (Kafka: every record carries `ankusa_tenant_id`).
    Keep,
    /// Left out (SQS refuses empty attribute values; SNS, Pub/Sub and HTTP follow it).
    Drop,
}

/// How a sink's outgoing messages are made: chosen once, when the sink is built, and
/// handed to [`Outgoing::new`] for every delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    payload: Payload,
    inline_max_bytes: Option<NonZeroUsize>,
    empty_values: EmptyValues,
    key: Option<KeyTemplate>,
    signer: Option<Signer>,
    cloudevents: Option<CloudEvents>,
}

impl Layout {
    /// A Message v1 body ([`encode`](crate::encode)), inline up to
    /// `inline_max_bytes` (`None`: always inline), else by the claim dispatch checked in.
    pub fn message(inline_max_bytes: Option<NonZeroUsize>, empty_values: EmptyValues) -> Self {
        Layout {
            payload: Payload::Message,
            inline_max_bytes,
            empty_values,
            key: None,
            signer: None,
            cloudevents: None,
        }
    }

    /// The raw hook body, as it came (HTTP).
    pub fn raw_body(empty_values: EmptyValues) -> Self {
        Layout {
            payload: Payload::Body,
            inline_max_bytes: None,
            empty_values,
            key: None,
            signer: None,
            cloudevents: None,
        }
    }

    /// Send each hook as a CloudEvent instead (`None`: the layout's own body): in binary
    /// mode the body is the hook's raw body and [`Outgoing::cloudevent_attributes`] lists
    /// the event's attributes; in structured mode the body is the event as JSON. Always
    /// inline: the claim check does not apply. No `MessageVersion` attribute; the
    /// `ContentType` attribute is the data's content type (binary) or
    /// `application/cloudevents+json` (structured).
    pub fn with_cloudevents(mut self, events: impl Into<Option<CloudEvents>>) -> Self {
        self.cloudevents = events.into();
        self
    }

    /// The CloudEvents the layout sends, if any.
    pub fn cloudevents(&self) -> Option<&CloudEvents> {
        self.cloudevents.as_ref()
    }

    /// Sign every body the layout sends (Message v1, a CloudEvent, or the raw body):
    /// [`Outgoing`] ends its attributes with `WebhookId`, `WebhookTimestamp` and
    /// `WebhookSignature` (Standard Webhooks over the exact body bytes). `None` (a sink
    /// without a `[signing]` table) signs nothing. A signer is never dropped: a layout
    /// that holds one signs whatever it sends.
    pub fn with_signer(mut self, signer: impl Into<Option<Signer>>) -> Self {
        self.signer = signer.into();
        self
    }

    /// Render `key` for every message ([`Outgoing::key`]).
    pub fn with_key(mut self, key: KeyTemplate) -> Self {
        self.key = Some(key);
        self
    }

    /// What travels as the body: a CloudEvent when the layout sends them.
    pub fn payload(&self) -> Payload {
        match self.cloudevents {
            Some(_) => Payload::CloudEvent,
            None => self.payload,
        }
    }

    /// The inline threshold a sink of this layout declares
    /// ([`Capabilities::inline_max_bytes`](ankusa_sink_core::Capabilities::inline_max_bytes)): the Message v1 body's,
    /// `None` when the layout sends CloudEvents (they travel inline) or raw bodies.
    pub fn inline_max_bytes(&self) -> Option<NonZeroUsize> {
        self.inline_max_bytes.filter(|_| self.cloudevents.is_none())
    }

    /// The empty-value rule.
    pub fn empty_values(&self) -> EmptyValues {
        self.empty_values
    }

    /// The key template, if any.
    pub fn key(&self) -> Option<&KeyTemplate> {
        self.key.as_ref()
    }
}

/// The body of an [`Outgoing`].
#[derive(Clone, PartialEq, Eq)]
pub enum Body {
    /// JSON the sink built (UTF-8): Message v1, or a structured-mode CloudEvent.
    Message(Vec<u8>),
    /// The raw hook body (shares the envelope's buffer).
    Raw(Bytes),
}

impl Body {
    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Body::Message(v) => v,
            Body::Raw(b) => b,
        }
    }

    /// The bytes as [`Bytes`] (no copy).
    pub fn into_bytes(self) -> Bytes {
        match self {
            Body::Message(v) => Bytes::from(v),
            Body::Raw(b) => b,
        }
    }
}

impl std::fmt::Debug for Body {
    // A body is the hook's data: its size only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, len) = match self {
            Body::Message(v) => ("Message", v.len()),
            Body::Raw(b) => ("Raw", b.len()),
        };
        f.debug_struct(kind).field("len", &len).finish()
    }
}

/// At most this many attributes: every [`Attr`] once.
const MAX_ATTRS: usize = 17;
/// The prefix a CloudEvents binding puts before an attribute name, counted in
/// [`Outgoing::attribute_bytes`] (`ce-` for HTTP, AMQP and Pub/Sub, `ce_` for Kafka).
const CE_PREFIX_BYTES: usize = 3;

/// Everything a sink sends for one delivery, built once by [`Outgoing::new`]: the body,
/// the idempotency key, the ordered [`Attr`] list, the forwarded headers and the key. A
/// sink maps it to its client's type in one function.
///
/// # Behavior
/// - [`Layout::message`]: the body is Message v1; attributes in this order: `Id`,
///   `SourceId`, `TenantId`, `MessageVersion` (`1`), `IdempotencyKey`, `ContentType`
///   (`application/json`), then `DedupeKey` and `ReplayId` when set and not empty, then,
///   with [`Layout::with_signer`], `WebhookId`, `WebhookTimestamp` (now, Unix seconds: a
///   retry is signed afresh) and `WebhookSignature` over the exact body bytes.
/// - With [`RecordAttrs`] in the [`Ctx`] (a dead letter's or parked hook's carrier), the
///   four record attributes come last, each only when its value is not empty.
/// - With a trace context in the [`Ctx`] ([`TraceContext::of`](crate::TraceContext::of), which dispatch sets on every
///   attempt), every layout ends with `TraceParent`, then `TraceState` when there is one.
/// - [`Layout::raw_body`]: the body is the hook's own; attributes in this order: `Id`,
///   `SourceId`, `ContentType` (the hook's content type as it came, else
///   `application/octet-stream`), `TenantId`, `IdempotencyKey`, then `DedupeKey` and
///   `ReplayId` as above, then the signature attributes with [`Layout::with_signer`].
///   No `MessageVersion`.
/// - An empty `TenantId` (a hook without a tenant) follows [`EmptyValues`].
/// - The forwarded headers are [`forwarded_headers`]; in a Message v1 they are already in
///   the body, and a raw-body sink sends them beside it.
/// - Values borrow from the envelope and context; the idempotency key is computed once and
///   is the same text in the body and in the attributes. Building allocates only the body,
///   the forwarded header list, a joined idempotency key and the rendered key.
#[derive(Debug)]
pub struct Outgoing<'a> {
    body: Body,
    attrs: [(Attr, Cow<'a, str>); MAX_ATTRS],
    len: usize,
    idempotency_key: usize,
    headers: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    key: Option<String>,
    ce_mode: Option<Mode>,
    ce_attrs: Vec<(&'static str, Cow<'a, str>)>,
}

/// The content type of a raw body that came without one.
const RAW_DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

impl<'a> Outgoing<'a> {
    /// Build what `layout` sends for `env` in this attempt.
    ///
    /// # Errors
    /// A Message v1 body over the inline threshold without a matching claim in `ctx`
    /// ([`EncodeError`], a config failure).
    pub fn new(env: &'a Envelope, ctx: &'a Ctx, layout: &Layout) -> Result<Self, EncodeError> {
        let idempotency_key = env.idempotency_key();
        let headers = forwarded_headers(env, ctx);
        let ce = layout.cloudevents.as_ref();
        let ce_mode = ce.map(CloudEvents::mode);
        let body = match (ce, layout.payload) {
            (Some(ce), _) if ce.mode() == Mode::Structured => {
                Body::Message(ce.structured(env, ctx, &idempotency_key))
            }
            (None, Payload::Message) => Body::Message(encode_with(
                env,
                ctx,
                layout.inline_max_bytes,
                &idempotency_key,
                &headers,
            )?),
            (Some(_) | None, _) => Body::Raw(env.body().clone()),
        };
        let ce_attrs = match ce {
            Some(ce) if ce.mode() == Mode::Binary => {
                ce.attributes(env, ctx, idempotency_key.clone())
            }
            _ => Vec::new(),
        };
        let mut out = Outgoing {
            body,
            // Unused slots stay unread (`attributes` stops at `len`).
            attrs: std::array::from_fn(|_| (Attr::Id, Cow::Borrowed(""))),
            len: 0,
            idempotency_key: 0,
            headers,
            key: layout.key.as_ref().map(|k| k.render(env)),
            ce_mode,
            ce_attrs,
        };
        let tenant = Cow::Borrowed(env.tenant_id().unwrap_or(""));
        let keep_tenant = layout.empty_values == EmptyValues::Keep || !tenant.is_empty();
        out.push(Attr::Id, env.id().into());
        out.push(Attr::SourceId, env.source_id().into());
        let ce_content_type = match ce_mode {
            Some(Mode::Binary) => Some(cloudevents::data_content_type(env)),
            Some(Mode::Structured) => Some(STRUCTURED_CONTENT_TYPE),
            None => None,
        };
        match layout.payload {
            Payload::Message => {
                if keep_tenant {
                    out.push(Attr::TenantId, tenant);
                }
                if ce_mode.is_none() {
                    out.push(Attr::MessageVersion, "1".into());
                }
                out.idempotency_key = out.len;
                out.push(Attr::IdempotencyKey, idempotency_key);
                let content_type = ce_content_type.unwrap_or("application/json");
                out.push(Attr::ContentType, content_type.into());
            }
            Payload::Body | Payload::CloudEvent => {
                let content_type = ce_content_type
                    .or(env.content_type())
                    .unwrap_or(RAW_DEFAULT_CONTENT_TYPE);
                out.push(Attr::ContentType, content_type.into());
                if keep_tenant {
                    out.push(Attr::TenantId, tenant);
                }
                out.idempotency_key = out.len;
                out.push(Attr::IdempotencyKey, idempotency_key);
            }
        }
        if let Some(d) = env.dedupe_key().filter(|d| !d.is_empty()) {
            out.push(Attr::DedupeKey, d.into());
        }
        if let Some(r) = ctx.replay_id.as_deref().filter(|r| !r.is_empty()) {
            out.push(Attr::ReplayId, r.into());
        }
        if let Some(signer) = &layout.signer {
            let id = webhook_id(env.id(), ctx.replay_id.as_deref());
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs();
            let signature = signer.signature(&id, now, out.body());
            out.push(Attr::WebhookId, id.into());
            out.push(Attr::WebhookTimestamp, now.to_string().into());
            out.push(Attr::WebhookSignature, signature.into());
        }
        if let Some(trace) = TraceContext::of(ctx) {
            out.push(Attr::TraceParent, trace.traceparent().into());
            if let Some(state) = trace.tracestate() {
                out.push(Attr::TraceState, state.into());
            }
        }
        if let Some(r) = ctx.extension::<RecordAttrs>() {
            // An empty value is left out (SQS refuses one; an undecodable record has no sink).
            for (attr, v) in [
                (Attr::RecordState, &r.state),
                (Attr::RecordSink, &r.sink),
                (Attr::RecordClass, &r.class),
                (Attr::RecordReason, &r.reason),
            ] {
                if !v.is_empty() {
                    out.push(attr, v.as_str().into());
                }
            }
        }
        Ok(out)
    }

    fn push(&mut self, attr: Attr, value: Cow<'a, str>) {
        self.attrs[self.len] = (attr, value);
        self.len += 1;
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        self.body.as_bytes()
    }

    /// Take the body (after mapping the rest: the attributes borrow from `self`).
    pub fn into_body(self) -> Body {
        self.body
    }

    /// [`Envelope::idempotency_key`], the same text the body carries.
    pub fn idempotency_key(&self) -> &str {
        &self.attrs[self.idempotency_key].1
    }

    /// The attributes, in the layout's order (see [`Outgoing`]).
    pub fn attributes(&self) -> &[(Attr, Cow<'a, str>)] {
        &self.attrs[..self.len]
    }

    /// One attribute's value, if it is in the list.
    pub fn get(&self, attr: Attr) -> Option<&str> {
        self.attributes()
            .iter()
            .find(|(a, _)| *a == attr)
            .map(|(_, v)| &**v)
    }

    /// Names ([`Attr::as_attr`]) plus values, in bytes: what attributes add to a message's
    /// size where a destination counts them (SQS, Pub/Sub); with the CloudEvents
    /// attributes of binary mode, each under a 3-byte prefix.
    pub fn attribute_bytes(&self) -> usize {
        let ours: usize = self
            .attributes()
            .iter()
            .map(|(a, v)| a.as_attr().len() + v.len())
            .sum();
        let events: usize = self
            .ce_attrs
            .iter()
            .map(|(n, v)| CE_PREFIX_BYTES + n.len() + v.len())
            .sum();
        ours + events
    }

    /// The CloudEvents mode of this message, `None` for the layout's own body.
    pub fn cloudevents_mode(&self) -> Option<Mode> {
        self.ce_mode
    }

    /// The CloudEvents attributes of a binary-mode event, by their CloudEvents names
    /// (`id`, `source`, ..., `datacontenttype`; see [`cloudevents`](crate::cloudevents)),
    /// for the sink to name by its protocol binding; empty otherwise.
    pub fn cloudevent_attributes(&self) -> &[(&'static str, Cow<'a, str>)] {
        &self.ce_attrs
    }

    /// The forwarded provider headers ([`forwarded_headers`]).
    pub fn forwarded_headers(&self) -> &[(Cow<'a, str>, Cow<'a, str>)] {
        &self.headers
    }

    /// The rendered key, when the layout has a key template.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{DEFAULT_INLINE_MAX_BYTES, encode};
    use crate::template::AbsentTenant;
    use crate::{ForwardHeaders, HeaderPolicy};
    use ankusa_sink_core::{Claim, ClaimRef};

    /// Envelopes that between them take every branch of the attribute rules.
    fn envelopes() -> Vec<(Envelope, Ctx)> {
        let full = Envelope::builder("h1", "stripe", &b"{\"a\":1}"[..])
            .tenant_id("acme")
            .dedupe_key("evt_1")
            .content_type("application/json; charset=utf-8")
            .header("Stripe-Signature", "t=1")
            .header("x-multi", "a")
            .header("X-Multi", "b")
            .build()
            .unwrap();
        let bare = Envelope::builder("h2", "github", "").build().unwrap();
        let empty_dedupe = Envelope::builder("h3", "s", "x")
            .dedupe_key("")
            .content_type("")
            .build()
            .unwrap();
        let unicode = Envelope::builder("h4", "sørce", "héllo ✓".as_bytes().to_vec())
            .tenant_id("t-1")
            .dedupe_key("ключ")
            .header("x-note", "naïve ✓")
            .build()
            .unwrap();
        vec![
            (full.clone(), Ctx::for_envelope(&full).with_replay_id("r-9")),
            (full.clone(), Ctx::for_envelope(&full)),
            (bare.clone(), Ctx::for_envelope(&bare)),
            (bare.clone(), Ctx::for_envelope(&bare).with_replay_id("")),
            (empty_dedupe.clone(), Ctx::for_envelope(&empty_dedupe)),
            (
                unicode.clone(),
                Ctx::for_envelope(&unicode).with_replay_id("r"),
            ),
        ]
    }

    /// The attribute rule as the spec states it, written out independently of `Outgoing`:
    /// `ankusa_id`, `ankusa_source_id`, `ankusa_tenant_id`, `ankusa_message_version`
    /// (`"1"`), `ankusa_idempotency_key`, `content_type` (`application/json`),
    /// `ankusa_dedupe_key`, `ankusa_replay_id`, absent or empty values dropped.
    fn expected_attributes(env: &Envelope, ctx: &Ctx) -> Vec<(&'static str, String)> {
        let pairs: [(&'static str, Option<String>); 8] = [
            ("ankusa_id", Some(env.id().to_owned())),
            ("ankusa_source_id", Some(env.source_id().to_owned())),
            ("ankusa_tenant_id", env.tenant_id().map(str::to_owned)),
            ("ankusa_message_version", Some("1".to_owned())),
            (
                "ankusa_idempotency_key",
                Some(env.idempotency_key().into_owned()),
            ),
            ("content_type", Some("application/json".to_owned())),
            ("ankusa_dedupe_key", env.dedupe_key().map(str::to_owned)),
            ("ankusa_replay_id", ctx.replay_id.clone()),
        ];
        pairs
            .into_iter()
            .filter_map(|(k, v)| v.filter(|v| !v.is_empty()).map(|v| (k, v)))
            .collect()
    }

    fn pairs<'a>(out: &'a Outgoing<'_>, name: fn(Attr) -> &'static str) -> Vec<(&'a str, &'a str)> {
        out.attributes()
            .iter()
            .map(|(a, v)| (name(*a), &**v))
            .collect()
    }

    fn queue(empty: EmptyValues) -> Layout {
        Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), empty)
    }

    #[test]
    fn sqs_sns_and_pubsub_get_the_attribute_list_they_send_today() {
        for (env, ctx) in envelopes() {
            let out = Outgoing::new(&env, &ctx, &queue(EmptyValues::Drop)).unwrap();
            let today = expected_attributes(&env, &ctx);
            let today: Vec<(&str, &str)> = today.iter().map(|(k, v)| (*k, v.as_str())).collect();
            assert_eq!(pairs(&out, Attr::as_attr), today, "{}", env.id());
        }
    }

    /// Kafka's `headers()` today: `attributes` with `ankusa_tenant_id = ""` put back
    /// before `ankusa_message_version`.
    fn kafka_today(env: &Envelope, ctx: &Ctx) -> Vec<(&'static str, String)> {
        let mut h = Vec::new();
        for (name, value) in expected_attributes(env, ctx) {
            if name == "ankusa_message_version" && env.tenant_id().is_none_or(str::is_empty) {
                h.push(("ankusa_tenant_id", String::new()));
            }
            h.push((name, value));
        }
        h
    }

    #[test]
    fn kafka_keeps_an_empty_tenant_in_place() {
        for (env, ctx) in envelopes() {
            let out = Outgoing::new(&env, &ctx, &queue(EmptyValues::Keep)).unwrap();
            let today = kafka_today(&env, &ctx);
            let today: Vec<(&str, &str)> = today.iter().map(|(k, v)| (*k, v.as_str())).collect();
            assert_eq!(pairs(&out, Attr::as_attr), today, "{}", env.id());
        }
    }

    #[test]
    fn amqp_headers_and_message_id_come_from_the_same_list() {
        for (env, ctx) in envelopes() {
            let out = Outgoing::new(&env, &ctx, &queue(EmptyValues::Drop)).unwrap();
            // AMQP today: the idempotency key always, dedupe key and replay id when set.
            let mut today = vec![("ankusa_idempotency_key", env.idempotency_key().into_owned())];
            if let Some(k) = env.dedupe_key().filter(|k| !k.is_empty()) {
                today.push(("ankusa_dedupe_key", k.to_owned()));
            }
            if let Some(r) = ctx.replay_id.as_deref().filter(|r| !r.is_empty()) {
                today.push(("ankusa_replay_id", r.to_owned()));
            }
            let headers: Vec<(&str, String)> = out
                .attributes()
                .iter()
                .filter(|(a, _)| {
                    matches!(a, Attr::IdempotencyKey | Attr::DedupeKey | Attr::ReplayId)
                })
                .map(|(a, v)| (a.as_attr(), v.to_string()))
                .collect();
            assert_eq!(headers, today, "{}", env.id());
            assert_eq!(out.get(Attr::Id), Some(env.id()));
        }
    }

    /// HTTP's header list today (before the forwarded and signature headers).
    fn http_today<'a>(
        env: &'a Envelope,
        ctx: &'a Ctx,
        operator_ct: bool,
    ) -> Vec<(&'static str, String)> {
        let idempotency_key = env.idempotency_key();
        let content_type =
            (!operator_ct).then(|| env.content_type().unwrap_or("application/octet-stream"));
        let fields: [(&str, Option<&str>); 7] = [
            ("x-ankusa-id", Some(env.id())),
            ("x-ankusa-source", Some(env.source_id())),
            ("content-type", content_type),
            ("x-ankusa-tenant", env.tenant_id()),
            ("x-ankusa-idempotency-key", Some(&idempotency_key)),
            (
                "x-ankusa-dedupe-key",
                env.dedupe_key().filter(|d| !d.is_empty()),
            ),
            (
                "x-ankusa-replay-id",
                ctx.replay_id.as_deref().filter(|r| !r.is_empty()),
            ),
        ];
        fields
            .into_iter()
            .filter_map(|(n, v)| v.map(|v| (n, v.to_owned())))
            .collect()
    }

    #[test]
    fn http_gets_its_headers_in_its_order() {
        for (env, ctx) in envelopes() {
            let out = Outgoing::new(&env, &ctx, &Layout::raw_body(EmptyValues::Drop)).unwrap();
            for operator_ct in [false, true] {
                // The operator's own content-type wins: the sink skips ours.
                let sent: Vec<(&str, String)> = out
                    .attributes()
                    .iter()
                    .filter(|(a, _)| !(operator_ct && *a == Attr::ContentType))
                    .map(|(a, v)| (a.as_http_header(), v.to_string()))
                    .collect();
                assert_eq!(sent, http_today(&env, &ctx, operator_ct), "{}", env.id());
            }
            assert_eq!(out.body(), &env.body()[..]);
            assert!(matches!(out.into_body(), Body::Raw(_)));
        }
    }

    #[test]
    fn body_key_and_headers_are_what_each_part_makes_alone() {
        let key = KeyTemplate::parse("{tenant_id}/{source_id}", AbsentTenant::Empty).unwrap();
        for (env, ctx) in envelopes() {
            let layout = queue(EmptyValues::Drop).with_key(key.clone());
            let out = Outgoing::new(&env, &ctx, &layout).unwrap();
            assert_eq!(
                out.body(),
                encode(&env, &ctx, layout.inline_max_bytes()).unwrap()
            );
            assert_eq!(out.idempotency_key(), env.idempotency_key());
            assert_eq!(out.forwarded_headers(), forwarded_headers(&env, &ctx));
            assert_eq!(out.key(), Some(key.render(&env).as_str()));
            let bytes: usize = expected_attributes(&env, &ctx)
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum();
            assert_eq!(out.attribute_bytes(), bytes);
            let body = out.into_body();
            assert!(matches!(body, Body::Message(_)));
            assert_eq!(body.as_bytes(), &body.clone().into_bytes()[..]);
        }
        let (env, ctx) = envelopes().remove(2);
        let out = Outgoing::new(&env, &ctx, &queue(EmptyValues::Keep)).unwrap();
        assert_eq!(out.key(), None);
        // The idempotency key of a hook without a dedupe key is its id, borrowed.
        assert!(matches!(
            out.attributes()[4],
            (Attr::IdempotencyKey, Cow::Borrowed("h2"))
        ));
        let shown = format!("{out:?}");
        assert!(shown.contains("Message { len:"), "{shown}");
    }

    #[test]
    fn a_large_body_needs_the_claim_dispatch_checked_in() {
        let env = Envelope::builder("h", "s", vec![7u8; 10]).build().unwrap();
        let small = Layout::message(NonZeroUsize::new(4), EmptyValues::Drop);
        let ctx = Ctx::for_envelope(&env);
        assert!(matches!(
            Outgoing::new(&env, &ctx, &small),
            Err(EncodeError::NoClaim { size: 10, max: 4 })
        ));
        let r = ClaimRef::new(
            ankusa_sink_core::TENANTLESS,
            ulid::Ulid::from_parts(1, 2).to_string(),
        )
        .unwrap();
        let sha = crate::message::sha256_hex(env.body());
        let ctx = ctx
            .with_claim(Claim::new(r, sha).unwrap())
            .with_extension(HeaderPolicy::from(ForwardHeaders::Only(vec![])));
        let out = Outgoing::new(&env, &ctx, &small).unwrap();
        let m = crate::decode(out.body()).unwrap();
        assert!(matches!(m.body, crate::MessageBody::Claim(_)));
    }

    #[test]
    fn every_attr_has_both_spellings() {
        for a in [
            Attr::Id,
            Attr::SourceId,
            Attr::TenantId,
            Attr::MessageVersion,
            Attr::IdempotencyKey,
            Attr::ContentType,
            Attr::DedupeKey,
            Attr::ReplayId,
        ] {
            let h = a.as_http_header();
            assert!(h == "content-type" || h.starts_with("x-ankusa-"), "{h}");
            assert!(a.as_attr() == "content_type" || a.as_attr().starts_with("ankusa_"));
            assert_eq!(h, h.to_ascii_lowercase());
        }
        for a in [Attr::TraceParent, Attr::TraceState] {
            assert_eq!(a.as_attr(), a.as_http_header());
        }
    }

    #[test]
    fn the_trace_context_ends_every_layout_and_joins_cloudevents() {
        use crate::TraceContext;
        use crate::cloudevents::{CloudEvents, Mode};
        use crate::signing::Signer;
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let trace = TraceContext::parse(tp).unwrap();
        let signer = Signer::new(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).unwrap();
        let message = Layout::message(None, EmptyValues::Drop).with_signer(signer);
        let binary = Layout::raw_body(EmptyValues::Drop)
            .with_cloudevents(CloudEvents::new(Mode::Binary, "t").unwrap());
        for (env, ctx) in envelopes() {
            for (t, state) in [
                (trace.clone(), None),
                (trace.clone().with_tracestate("a=1"), Some("a=1")),
            ] {
                let ctx = ctx.clone().with_extension(t);
                for layout in [&message, &binary] {
                    let out = Outgoing::new(&env, &ctx, layout).unwrap();
                    let names: Vec<Attr> = out.attributes().iter().map(|(a, _)| *a).collect();
                    let tail: &[Attr] = if state.is_some() {
                        &[Attr::TraceParent, Attr::TraceState]
                    } else {
                        &[Attr::TraceParent]
                    };
                    assert!(names.ends_with(tail), "{names:?}");
                    assert_eq!(out.get(Attr::TraceParent), Some(tp));
                    assert_eq!(out.get(Attr::TraceState), state);
                }
                let out = Outgoing::new(&env, &ctx, &binary).unwrap();
                let ce = out.cloudevent_attributes();
                let get = |n: &str| ce.iter().find(|(k, _)| *k == n).map(|(_, v)| &**v);
                assert_eq!(get("traceparent"), Some(tp));
                assert_eq!(get("tracestate"), state);
            }
            // Without one, nothing: a library caller's own deliveries are unchanged.
            let out = Outgoing::new(&env, &ctx, &message).unwrap();
            assert_eq!(out.get(Attr::TraceParent), None);
        }
    }
}

//! The one mapping from core's [`Outgoing`] to what lapin publishes.

use crate::error::AmqpError;
use ankusa_message::{Attr, Body, Outgoing};
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, ShortString};

/// What one `basic.publish` sends: the routing key, the properties and the body.
#[derive(Debug)]
pub(crate) struct Publish {
    /// The rendered routing key.
    pub(crate) routing_key: String,
    /// Persistent, `application/json`, `message_id`, `timestamp` and the `ankusa_*` headers.
    pub(crate) properties: BasicProperties,
    /// Message v1.
    pub(crate) body: Body,
}

/// The publish of `out`, a Message v1 whose layout renders the routing key, for a hook
/// received at `received_at` (ms since the epoch).
///
/// Properties: `delivery_mode` 2 (persistent), `content_type` `application/json`,
/// `message_id` the hook id, `timestamp` `received_at` in seconds, and as longstr headers
/// `ankusa_idempotency_key` (always), `ankusa_dedupe_key` and `ankusa_replay_id` (when set),
/// when signing `webhook-id`, `webhook-timestamp` and `webhook-signature`, and the
/// attempt's `traceparent` (and `tracestate`) when it has a trace context.
///
/// # Errors
/// [`AmqpError::TooLong`] for a short string over 255 bytes ([`short`]); nothing is built
/// and nothing sent.
pub(crate) fn to_publish(out: Outgoing<'_>, received_at: i64) -> Result<Publish, AmqpError> {
    let routing_key = out.key().unwrap_or_default();
    // Sent as a short string too (lapin converts it when publishing, and would panic).
    short("routing key", routing_key)?;
    let mut headers = FieldTable::default();
    let mut properties = BasicProperties::default()
        .with_delivery_mode(2)
        .with_timestamp(u64::try_from(received_at / 1000).unwrap_or(0));
    for (attr, value) in out.attributes() {
        match attr {
            Attr::Id => properties = properties.with_message_id(short("message_id", value)?),
            Attr::ContentType => {
                properties = properties.with_content_type(short("content_type", value)?);
            }
            Attr::IdempotencyKey
            | Attr::DedupeKey
            | Attr::ReplayId
            | Attr::WebhookId
            | Attr::WebhookTimestamp
            | Attr::WebhookSignature
            | Attr::TraceParent
            | Attr::TraceState
            | Attr::RecordState
            | Attr::RecordSink
            | Attr::RecordClass
            | Attr::RecordReason => {
                headers.insert(
                    attr.as_attr().into(),
                    AMQPValue::LongString(value.as_ref().into()),
                );
            }
            // Source, tenant and version ride in the body only.
            _ => {}
        }
    }
    // A binary-mode CloudEvent: its attributes as the CloudEvents RabbitMQ (AMQP 0-9-1)
    // binding names them, `ce-<attribute>` headers; `datacontenttype` is the content_type
    // property already. (The CloudEvents AMQP binding is for AMQP 1.0.)
    for (name, value) in out.cloudevent_attributes() {
        if *name != "datacontenttype" {
            headers.insert(
                format!("ce-{name}").into(),
                AMQPValue::LongString(value.as_ref().into()),
            );
        }
    }
    Ok(Publish {
        routing_key: routing_key.to_owned(),
        properties: properties.with_headers(headers),
        body: out.into_body(),
    })
}

/// `value` as an AMQP short string, at most 255 bytes: the routing key, the `message_id`
/// (the hook id) and the `content_type` (a binary-mode CloudEvent carries the hook's own)
/// come from the hook. A longer one has no encoding: lapin's `ShortString` panics on it
/// (failing the delivery's task, not the hook), and cut to its one-byte length it would be
/// a malformed frame RabbitMQ closes the connection for, failing every publish in flight.
/// So the hook fails alone, permanent, before anything is sent; the error names the field
/// and the length, never the value. The header names are the sink's own, all short.
///
/// Nothing else is refused: header values are long strings, and RabbitMQ takes any bytes
/// in them and any UTF-8 in short strings (NUL, CR, LF, noncharacters).
fn short(field: &'static str, value: &str) -> Result<ShortString, AmqpError> {
    ShortString::try_new(value).map_err(|_| AmqpError::TooLong {
        field,
        len: value.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_message::template::{AbsentTenant, KeyTemplate};
    use ankusa_message::{EmptyValues, Layout};
    use ankusa_sink_core::{Ctx, Envelope};

    fn publish(env: &Envelope, ctx: &Ctx) -> Publish {
        let key = KeyTemplate::parse("k.{tenant_id}", AbsentTenant::Default).unwrap();
        let layout = Layout::message(None, EmptyValues::Drop).with_key(key);
        to_publish(Outgoing::new(env, ctx, &layout).unwrap(), env.received_at()).unwrap()
    }

    fn header(p: &BasicProperties, name: &str) -> Option<String> {
        match p.headers().as_ref()?.inner().get(name)? {
            AMQPValue::LongString(s) => Some(s.to_string()),
            other => panic!("{name} is not a longstr: {other:?}"),
        }
    }

    /// Each short string over 255 bytes is refused naming the field; 255 bytes and any
    /// character in a header value go.
    #[test]
    fn short_strings_over_255_bytes_are_refused_not_panicked_on() {
        use ankusa_message::cloudevents::{CloudEvents, Mode};
        let build = |id: &str, content_type: &str, replay: &str| {
            let env = Envelope::builder(id, "s\u{FFFF}", "{}")
                .content_type(content_type)
                .build()
                .unwrap();
            let ctx = Ctx::for_envelope(&env).with_replay_id(replay);
            let key = KeyTemplate::parse("k", AbsentTenant::Default).unwrap();
            let layout = Layout::message(None, EmptyValues::Drop)
                .with_key(key)
                .with_cloudevents(CloudEvents::new(Mode::Binary, "t.x").unwrap());
            to_publish(
                Outgoing::new(&env, &ctx, &layout).unwrap(),
                env.received_at(),
            )
        };
        let long = "x".repeat(256);
        let fits = "x".repeat(255);
        assert!(build(&fits, &fits, "r\0\r\n\u{FFFF}").is_ok());
        for (id, content_type, field) in [
            (long.as_str(), "a/b", "message_id"),
            ("h", long.as_str(), "content_type"),
        ] {
            match build(id, content_type, "r") {
                Err(AmqpError::TooLong { field: f, len: 256 }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[test]
    fn properties_carry_identity() {
        let env = Envelope::builder("h1", "s", "{}")
            .tenant_id("t")
            .dedupe_key("evt")
            .received_at(1_700_000_000_999)
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env).with_replay_id("r1");
        let m = publish(&env, &ctx);
        let p = &m.properties;
        assert_eq!(p.delivery_mode(), &Some(2));
        assert_eq!(p.message_id().as_ref().map(|m| m.as_str()), Some("h1"));
        assert_eq!(
            p.content_type().as_ref().map(|m| m.as_str()),
            Some("application/json")
        );
        assert_eq!(p.timestamp(), &Some(1_700_000_000));
        assert_eq!(p.headers().as_ref().unwrap().inner().len(), 3);
        assert_eq!(
            header(p, "ankusa_idempotency_key").as_deref(),
            Some("t:s:evt")
        );
        assert_eq!(header(p, "ankusa_dedupe_key").as_deref(), Some("evt"));
        assert_eq!(header(p, "ankusa_replay_id").as_deref(), Some("r1"));
        assert_eq!(m.routing_key, "k.t");
        assert_eq!(
            m.body.as_bytes(),
            ankusa_message::encode(&env, &ctx, None).unwrap()
        );

        let env = Envelope::builder("h1", "s", "{}").build().unwrap();
        let m = publish(&env, &Ctx::for_envelope(&env));
        let h = m.properties.headers().as_ref().unwrap().inner();
        assert_eq!(h.len(), 1);
        assert_eq!(
            header(&m.properties, "ankusa_idempotency_key").as_deref(),
            Some("h1")
        );
        assert_eq!(m.routing_key, "k.default");
    }

    #[test]
    fn cloudevents_headers_by_the_rabbitmq_binding() {
        use ankusa_message::cloudevents::{CloudEvents, Mode};
        let env = Envelope::builder("h1", "stripe", "raw")
            .content_type("text/plain")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env);
        let key = KeyTemplate::parse("k", AbsentTenant::Default).unwrap();
        let layout = Layout::message(None, EmptyValues::Drop)
            .with_key(key)
            .with_cloudevents(CloudEvents::new(Mode::Binary, "t.x").unwrap());
        let p = to_publish(
            Outgoing::new(&env, &ctx, &layout).unwrap(),
            env.received_at(),
        )
        .unwrap();
        assert_eq!(p.body.as_bytes(), b"raw");
        assert_eq!(
            p.properties.content_type().as_ref().map(|c| c.as_str()),
            Some("text/plain")
        );
        assert_eq!(header(&p.properties, "ce-id").as_deref(), Some("h1"));
        assert_eq!(header(&p.properties, "ce-type").as_deref(), Some("t.x"));
        assert_eq!(
            header(&p.properties, "ce-specversion").as_deref(),
            Some("1.0")
        );
        assert_eq!(header(&p.properties, "ce-datacontenttype"), None);
        assert!(header(&p.properties, "ankusa_idempotency_key").is_some());
    }
}

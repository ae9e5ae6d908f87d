//! One function from core's [`Outgoing`] to the MQTT 5 PUBLISH the client sends.

use ankusa_message::{Attr, Outgoing};
use ankusa_sink_kit::{Unrepresentable, check_text, is_noncharacter};
use bytes::Bytes;
use rumqttc::v5::mqttbytes::v5::PublishProperties;

/// What one QoS 1 PUBLISH carries.
#[derive(Debug)]
pub(crate) struct Publish {
    /// The rendered topic.
    pub(crate) topic: String,
    /// The Message v1 bytes (or the CloudEvent's body).
    pub(crate) payload: Bytes,
    /// Content Type and the user properties.
    pub(crate) properties: PublishProperties,
    /// The whole PUBLISH packet's size in bytes, as the client encodes it (for the
    /// broker's Maximum Packet Size).
    pub(crate) packet_size: usize,
}

/// The PUBLISH of `out`: the body as the payload, the `ContentType` attribute as the MQTT 5
/// Content Type property, every other attribute of `out` (in its order, named by
/// `as_attr()`: `ankusa_id`, ..., and the `webhook-*` signature when signed) as a user
/// property. A binary-mode CloudEvent adds its attributes as the CloudEvents MQTT binding
/// names them for MQTT 5: one user property per attribute under its own name (`id`,
/// `source`, `specversion`, ...), `datacontenttype` being the Content Type already.
pub(crate) fn to_publish(out: Outgoing<'_>) -> Publish {
    let attributes = out.attributes();
    let mut user_properties =
        Vec::with_capacity(attributes.len() + out.cloudevent_attributes().len());
    let mut content_type = None;
    for (attr, value) in attributes {
        if *attr == Attr::ContentType {
            content_type = Some(value.as_ref().to_owned());
        } else {
            user_properties.push((attr.as_attr().to_owned(), value.as_ref().to_owned()));
        }
    }
    for (name, value) in out.cloudevent_attributes() {
        if *name != "datacontenttype" {
            user_properties.push(((*name).to_owned(), value.as_ref().to_owned()));
        }
    }
    let topic = out.key().unwrap_or_default().to_owned();
    let payload = out.into_body().into_bytes();
    let properties = PublishProperties {
        content_type,
        user_properties,
        ..PublishProperties::default()
    };
    let packet_size = packet_size(&topic, &payload, &properties);
    Publish {
        topic,
        payload,
        properties,
        packet_size,
    }
}

/// The longest UTF-8 string MQTT carries (a two-byte length prefix): the topic, the Content
/// Type, each user property's name and value. rumqttc writes a longer one with its length
/// cut to 16 bits, a malformed packet.
pub(crate) const MAX_STRING_BYTES: usize = 65_535;

/// Whether a PUBLISH's UTF-8 strings may hold `c`. MQTT 5 (1.5.4) forbids U+0000 and lets
/// the receiver close the connection for the control characters (U+0001 to U+001F, U+007F
/// to U+009F) and the noncharacters; Mosquitto 2.0 does, for the topic, the Content Type and
/// every user property name and value alike (tab too), failing every publish in flight.
fn string_char(c: char) -> bool {
    !c.is_control() && !is_noncharacter(c)
}

/// Whether the broker can take every string of `p`: each at most [`MAX_STRING_BYTES`] and
/// free of what [`string_char`] refuses. Checked before anything is sent, so one hook that
/// cannot be carried fails alone (permanent) and the shared connection stays up. The error
/// names the field (`user property "ankusa_source_id"`), never its value. The topic's own
/// rules (wildcards, a `$` start, empty) are `topic_problem`'s.
pub(crate) fn check(p: &Publish) -> Result<(), Unrepresentable> {
    check_text(|| "topic".into(), &p.topic, MAX_STRING_BYTES, string_char)?;
    if let Some(ct) = &p.properties.content_type {
        check_text(|| "Content Type".into(), ct, MAX_STRING_BYTES, string_char)?;
    }
    for (name, value) in &p.properties.user_properties {
        // The names are ours or the CloudEvents binding's (never a hook's), checked all the
        // same; a refused one is not quoted.
        check_text(
            || "a user property name".into(),
            name,
            MAX_STRING_BYTES,
            string_char,
        )?;
        check_text(
            || format!("user property {name:?}"),
            value,
            MAX_STRING_BYTES,
            string_char,
        )?;
    }
    Ok(())
}

/// Bytes of a Variable Byte Integer holding `n`.
fn varint_len(n: usize) -> usize {
    match n {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

/// The size of a QoS 1 PUBLISH of these parts: fixed header, topic, packet id, properties
/// (Content Type and user properties, the only ones this sink sets), payload.
fn packet_size(topic: &str, payload: &[u8], p: &PublishProperties) -> usize {
    let properties = p.content_type.as_ref().map_or(0, |c| 1 + 2 + c.len())
        + p.user_properties
            .iter()
            .map(|(k, v)| 1 + 2 + k.len() + 2 + v.len())
            .sum::<usize>();
    let remaining = 2 + topic.len() + 2 + varint_len(properties) + properties + payload.len();
    1 + varint_len(remaining) + remaining
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_message::cloudevents::{CloudEvents, Mode};
    use ankusa_message::signing::Signer;
    use ankusa_message::template::{AbsentTenant, KeyTemplate};
    use ankusa_message::{EmptyValues, Layout};
    use ankusa_sink_core::{Ctx, Envelope};
    use rumqttc::v5::mqttbytes::QoS;

    fn layout() -> Layout {
        Layout::message(None, EmptyValues::Keep).with_key(
            KeyTemplate::parse("hooks/{tenant_id}/{source_id}", AbsentTenant::Default).unwrap(),
        )
    }

    fn env() -> Envelope {
        Envelope::builder("h1", "stripe", r#"{"a":1}"#)
            .tenant_id("acme")
            .content_type("application/json")
            .dedupe_key("evt_1")
            .build()
            .unwrap()
    }

    /// The bytes rumqttc writes for `p`.
    fn written(p: rumqttc::v5::mqttbytes::v5::Publish) -> usize {
        let mut buf = bytes::BytesMut::new();
        rumqttc::v5::mqttbytes::v5::Packet::Publish(p)
            .write(&mut buf, None)
            .unwrap();
        buf.len()
    }

    /// The size this sink computes is the size rumqttc encodes, for every shape it sends.
    #[test]
    fn the_packet_size_is_the_clients() {
        let signed =
            layout().with_signer(Signer::new(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).unwrap());
        let ce = layout().with_cloudevents(CloudEvents::new(Mode::Binary, "t.x").unwrap());
        let e = env();
        let ctx = Ctx::for_envelope(&e).with_replay_id("r1");
        for layout in [layout(), signed, ce] {
            let p = to_publish(Outgoing::new(&e, &ctx, &layout).unwrap());
            let mut client = rumqttc::v5::mqttbytes::v5::Publish::new(
                p.topic.clone(),
                QoS::AtLeastOnce,
                p.payload.clone(),
                Some(p.properties.clone()),
            );
            // On the wire, with the packet id its event loop assigns.
            client.pkid = 1;
            assert_eq!(p.packet_size, written(client));
        }
        for n in [0, 100, 127, 128, 16_383, 16_384, 70_000, 2_100_000] {
            let p = PublishProperties::default();
            let payload = vec![b'x'; n];
            let mut client = rumqttc::v5::mqttbytes::v5::Publish::new(
                "t",
                QoS::AtLeastOnce,
                payload.clone(),
                Some(p.clone()),
            );
            client.pkid = 7;
            assert_eq!(packet_size("t", &payload, &p), written(client), "{n}");
        }
    }

    /// Each string of a PUBLISH: a noncharacter, a control character or over 65,535 bytes
    /// is refused naming the field, never the value; what Mosquitto takes passes.
    #[test]
    fn check_names_the_field_of_a_value_mosquitto_refuses() {
        let ctx_of = |source: &str, replay: &str| {
            let e = Envelope::builder("h1", source, "{}").build().unwrap();
            let ctx = Ctx::for_envelope(&e).with_replay_id(replay);
            (e, ctx)
        };
        for (source, replay, refused) in [
            (
                "src\u{FFFF}",
                "r",
                Some("user property \"ankusa_source_id\""),
            ),
            ("\u{FDD0}", "r", Some("user property \"ankusa_source_id\"")),
            ("s", "r\0", Some("user property \"ankusa_replay_id\"")),
            ("s", "r\t", Some("user property \"ankusa_replay_id\"")),
            ("s", "\u{85}", Some("user property \"ankusa_replay_id\"")),
            ("s", "é😀\u{FFFD}\u{FEFF}", None),
            ("é\u{10FFFD}", "r", None),
        ] {
            let (e, ctx) = ctx_of(source, replay);
            let fixed = Layout::message(None, EmptyValues::Keep)
                .with_key(KeyTemplate::literal("hooks", AbsentTenant::Default));
            let p = to_publish(Outgoing::new(&e, &ctx, &fixed).unwrap());
            match (check(&p), refused) {
                (Ok(()), None) => {}
                (Err(u), Some(field)) => {
                    assert_eq!(u.field, field);
                    let text = u.to_string();
                    assert!(
                        text.chars().all(|c| c == ' ' || c.is_ascii_graphic()),
                        "{text}"
                    );
                }
                (got, want) => panic!("{source:?} {replay:?}: {got:?}, want {want:?}"),
            }
        }
        let mut p =
            to_publish(Outgoing::new(&env(), &Ctx::for_envelope(&env()), &layout()).unwrap());
        p.properties.content_type = Some("x".repeat(MAX_STRING_BYTES + 1));
        assert_eq!(check(&p).unwrap_err().field, "Content Type");
        p.properties.content_type = Some("x".repeat(MAX_STRING_BYTES));
        p.topic = "t\u{FFFE}".into();
        assert_eq!(check(&p).unwrap_err().field, "topic");
    }

    #[test]
    fn attributes_become_user_properties_and_the_content_type_property() {
        let e = env();
        let ctx = Ctx::for_envelope(&e);
        let out = Outgoing::new(&e, &ctx, &layout()).unwrap();
        let want: Vec<(String, String)> = out
            .attributes()
            .iter()
            .filter(|(a, _)| *a != Attr::ContentType)
            .map(|(a, v)| (a.as_attr().to_owned(), v.to_string()))
            .collect();
        let body = out.body().to_vec();
        let p = to_publish(out);
        assert_eq!(p.topic, "hooks/acme/stripe");
        assert_eq!(p.payload, body);
        assert_eq!(
            p.properties.content_type.as_deref(),
            Some("application/json")
        );
        assert_eq!(p.properties.user_properties, want);
        assert!(want.iter().any(|(k, v)| k == "ankusa_id" && v == "h1"));
    }

    #[test]
    fn cloudevents_by_the_mqtt_binding() {
        let e = Envelope::builder("h1", "stripe", "raw bytes")
            .tenant_id("acme")
            .content_type("text/plain")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&e).with_replay_id("r1");
        let binary = layout().with_cloudevents(CloudEvents::new(Mode::Binary, "t.x").unwrap());
        let p = to_publish(Outgoing::new(&e, &ctx, &binary).unwrap());
        let get = |name: &str| {
            p.properties
                .user_properties
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(&p.payload[..], b"raw bytes", "binary mode: the raw body");
        assert_eq!(p.properties.content_type.as_deref(), Some("text/plain"));
        assert_eq!(get("id"), Some("h1:replay:r1"));
        assert_eq!(get("type"), Some("t.x"));
        assert_eq!(get("specversion"), Some("1.0"));
        assert_eq!(get("source"), Some("/sources/stripe"));
        assert_eq!(get("datacontenttype"), None, "it is the Content Type");
        assert_eq!(get("ankusa_id"), Some("h1"), "ours still go");
        let structured =
            layout().with_cloudevents(CloudEvents::new(Mode::Structured, "t.x").unwrap());
        let p = to_publish(Outgoing::new(&e, &ctx, &structured).unwrap());
        assert_eq!(
            p.properties.content_type.as_deref(),
            Some("application/cloudevents+json")
        );
        assert!(!p.properties.user_properties.iter().any(|(k, _)| k == "id"));
    }
}

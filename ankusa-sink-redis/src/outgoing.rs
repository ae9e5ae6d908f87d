//! One function from `ankusa-message`'s `Outgoing` to the Redis command.

use crate::config::Target;
use ankusa_message::Outgoing;

/// The stream entry field that carries the Message v1 bytes (or a CloudEvent's: the data
/// in binary mode, the JSON event in structured mode).
pub const MESSAGE_FIELD: &str = "message";

/// The command for `out`: `XADD <key> [MAXLEN ~ N] * message <Message v1> ankusa_id <id>
/// ...` (the attributes of `out`, in its order, as `as_attr()` names them) or
/// `PUBLISH <channel> <Message v1>` (everything is in the body). A binary-mode CloudEvent
/// adds a `ce-<name>` field per attribute after ours, `datacontenttype` being the
/// `content_type` field already (a stream only: the config refuses binary mode on a
/// channel); values go as they are (Redis fields are binary-safe).
///
/// No value a hook derives is refused here (issue 60), because Redis refuses none: RESP
/// sends every argument length-prefixed, so the key (or channel), the field names and
/// values may hold NUL, CR, LF, noncharacters or any bytes, and an empty key is a key.
/// Its one limit, `proto-max-bulk-len` per argument (512 MiB by default; over it Redis
/// closes the connection), is checked on the body before sending (`TooLarge`); a key or
/// field over it would need a hook id, source or dedupe key of hundreds of MiB, which is
/// not checked. `tests/it/poison.rs` delivers the values the other
/// brokers refuse and reads them back exactly.
pub(crate) fn to_cmd(out: Outgoing<'_>, target: &Target) -> redis::Cmd {
    let key = out.key().unwrap_or_default();
    match target {
        Target::Stream { maxlen, .. } => {
            // Sized once: grown argument by argument, reallocating was a fifth of a 1 KiB
            // delivery's instructions (callgrind).
            let attributes = out.attributes();
            let events: Vec<(String, &str)> = out
                .cloudevent_attributes()
                .iter()
                .filter(|(name, _)| *name != "datacontenttype")
                .map(|(name, v)| (format!("ce-{name}"), v.as_ref()))
                .collect();
            let data = "XADD".len()
                + key.len()
                + "MAXLEN~18446744073709551615*".len()
                + MESSAGE_FIELD.len()
                + out.body().len()
                + attributes
                    .iter()
                    .map(|(a, v)| a.as_attr().len() + v.len())
                    .sum::<usize>()
                + events.iter().map(|(n, v)| n.len() + v.len()).sum::<usize>();
            let args = 8 + 2 * (attributes.len() + events.len());
            let mut cmd = redis::Cmd::with_capacity(args, data);
            cmd.arg("XADD").arg(key);
            if let Some(n) = maxlen {
                cmd.arg("MAXLEN").arg("~").arg(n.get());
            }
            cmd.arg("*").arg(MESSAGE_FIELD).arg(out.body());
            for (attr, value) in attributes {
                cmd.arg(attr.as_attr()).arg(value.as_ref());
            }
            for (name, value) in &events {
                cmd.arg(name.as_str()).arg(*value);
            }
            cmd
        }
        Target::Channel { .. } => {
            let data = "PUBLISH".len() + key.len() + out.body().len();
            let mut cmd = redis::Cmd::with_capacity(3, data);
            cmd.arg("PUBLISH").arg(key).arg(out.body());
            cmd
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_message::cloudevents::{CloudEvents, Mode};
    use ankusa_message::template::{AbsentTenant, KeyTemplate};
    use ankusa_message::{EmptyValues, Layout};
    use ankusa_sink_core::{Ctx, Envelope};

    fn layout(mode: Option<Mode>) -> Layout {
        Layout::message(None, EmptyValues::Keep)
            .with_key(KeyTemplate::parse("hooks", AbsentTenant::Empty).unwrap())
            .with_cloudevents(mode.map(|m| CloudEvents::new(m, "t.x").unwrap()))
    }

    fn stream() -> Target {
        Target::Stream {
            key: KeyTemplate::parse("hooks", AbsentTenant::Empty).unwrap(),
            maxlen: None,
            durable: false,
        }
    }

    /// The command's arguments after `XADD <key> *`, as (field, value) pairs.
    fn fields(cmd: &redis::Cmd) -> Vec<(Vec<u8>, Vec<u8>)> {
        let args: Vec<Vec<u8>> = cmd
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.to_vec(),
                _ => panic!("no cursor in XADD"),
            })
            .collect();
        assert_eq!(&args[..3], [&b"XADD"[..], b"hooks", b"*"]);
        args[3..]
            .chunks(2)
            .map(|c| (c[0].clone(), c[1].clone()))
            .collect()
    }

    fn get<'a>(f: &'a [(Vec<u8>, Vec<u8>)], name: &str) -> Option<&'a [u8]> {
        f.iter()
            .find(|(k, _)| k == name.as_bytes())
            .map(|(_, v)| v.as_slice())
    }

    #[test]
    fn binary_mode_is_ce_fields_beside_the_data() {
        let body = vec![0x00, 0xff, 0x80];
        let env = Envelope::builder("h1", "stripe", body.clone())
            .tenant_id("acme")
            .content_type("image/png")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env).with_replay_id("r1");
        let out = Outgoing::new(&env, &ctx, &layout(Some(Mode::Binary))).unwrap();
        let f = fields(&to_cmd(out, &stream()));
        assert_eq!(
            get(&f, MESSAGE_FIELD),
            Some(&body[..]),
            "the data, as it came"
        );
        assert_eq!(get(&f, "content_type"), Some(&b"image/png"[..]));
        assert_eq!(get(&f, "ce-id"), Some(&b"h1:replay:r1"[..]));
        assert_eq!(get(&f, "ce-source"), Some(&b"/sources/stripe"[..]));
        assert_eq!(get(&f, "ce-type"), Some(&b"t.x"[..]));
        assert_eq!(get(&f, "ce-specversion"), Some(&b"1.0"[..]));
        assert_eq!(get(&f, "ce-ankusatenant"), Some(&b"acme"[..]));
        assert_eq!(get(&f, "ce-datacontenttype"), None, "it is content_type");
        assert_eq!(get(&f, "ankusa_id"), Some(&b"h1"[..]), "ours still go");
        assert!(!f.iter().any(|(k, _)| k == b"ankusa_message_version"));
    }

    #[test]
    fn structured_mode_is_the_json_event_in_the_message_field_or_the_channel() {
        let env = Envelope::builder("h1", "stripe", r#"{"a":1}"#)
            .content_type("application/json")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env);
        let l = layout(Some(Mode::Structured));
        let f = fields(&to_cmd(Outgoing::new(&env, &ctx, &l).unwrap(), &stream()));
        let v: serde_json::Value = serde_json::from_slice(get(&f, MESSAGE_FIELD).unwrap()).unwrap();
        assert_eq!(v["data"], serde_json::json!({"a": 1}));
        assert_eq!(
            get(&f, "content_type"),
            Some(&b"application/cloudevents+json"[..])
        );
        assert!(!f.iter().any(|(k, _)| k.starts_with(b"ce-")));
        let channel = Target::Channel {
            channel: KeyTemplate::parse("hooks", AbsentTenant::Empty).unwrap(),
            no_subscriber: crate::config::NoSubscriber::Config,
        };
        let cmd = to_cmd(Outgoing::new(&env, &ctx, &l).unwrap(), &channel);
        let args: Vec<redis::Arg<&[u8]>> = cmd.args_iter().collect();
        assert_eq!(args.len(), 3);
        match args[2] {
            redis::Arg::Simple(b) => {
                let v: serde_json::Value = serde_json::from_slice(b).unwrap();
                assert_eq!(v["id"], "h1");
            }
            _ => panic!("no cursor in PUBLISH"),
        }
    }
}

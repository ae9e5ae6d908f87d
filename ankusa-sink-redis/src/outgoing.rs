//! One function from `ankusa-message`'s `Outgoing` to the Redis command.

use crate::config::Target;
use ankusa_message::Outgoing;

/// The stream entry field that carries the Message v1 bytes.
pub const MESSAGE_FIELD: &str = "message";

/// The command for `out`: `XADD <key> [MAXLEN ~ N] * message <Message v1> ankusa_id <id>
/// ...` (the attributes of `out`, in its order, as `as_attr()` names them) or
/// `PUBLISH <channel> <Message v1>` (everything is in the body).
pub(crate) fn to_cmd(out: Outgoing<'_>, target: &Target) -> redis::Cmd {
    let key = out.key().unwrap_or_default();
    match target {
        Target::Stream { maxlen, .. } => {
            // Sized once: grown argument by argument, reallocating was a fifth of a 1 KiB
            // delivery's instructions (callgrind).
            let attributes = out.attributes();
            let data = "XADD".len()
                + key.len()
                + "MAXLEN~18446744073709551615*".len()
                + MESSAGE_FIELD.len()
                + out.body().len()
                + attributes
                    .iter()
                    .map(|(a, v)| a.as_attr().len() + v.len())
                    .sum::<usize>();
            let mut cmd = redis::Cmd::with_capacity(8 + 2 * attributes.len(), data);
            cmd.arg("XADD").arg(key);
            if let Some(n) = maxlen {
                cmd.arg("MAXLEN").arg("~").arg(n.get());
            }
            cmd.arg("*").arg(MESSAGE_FIELD).arg(out.body());
            for (attr, value) in attributes {
                cmd.arg(attr.as_attr()).arg(value.as_ref());
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

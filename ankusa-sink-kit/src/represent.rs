//! Whether a value derived from a hook can be carried by a protocol at all. A hook whose
//! header, attribute, subject or key a broker would refuse fails alone, as `permanent`,
//! before anything is sent: a refused value must never reach a shared connection (Mosquitto
//! drops the whole connection for one bad user property, failing every publish in flight).

use ankusa_sink_core::Failure;

/// Why a value derived from a hook cannot be sent. Names the field, never its value (a
/// header value may be a credential). Converts into a `permanent` [`Failure`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the hook cannot be sent: {field} {why}")]
pub struct Unrepresentable {
    /// The field, as the protocol calls it: `user property "x-tenant"`, `subject`, `key`.
    pub field: String,
    /// What about it the protocol refuses, in a few words.
    pub why: &'static str,
}

impl Unrepresentable {
    /// `field` cannot be sent, because `why`.
    pub fn new(field: impl Into<String>, why: &'static str) -> Self {
        Unrepresentable {
            field: field.into(),
            why,
        }
    }
}

impl From<Unrepresentable> for Failure {
    fn from(u: Unrepresentable) -> Self {
        Failure::permanent(u)
    }
}

/// A Unicode noncharacter: U+FDD0..=U+FDEF and the last two code points of every plane
/// (U+FFFE, U+FFFF, U+1FFFE, ...). Valid UTF-8, yet refused by MQTT brokers in strings and
/// by AWS in message attributes.
pub fn is_noncharacter(c: char) -> bool {
    let c = u32::from(c);
    (0xFDD0..=0xFDEF).contains(&c) || (c & 0xFFFE) == 0xFFFE
}

/// Checks text a protocol carries as a string: at most `max_bytes` bytes of UTF-8, and
/// every character `allowed`. `field` names it in the error.
///
/// # Errors
/// [`Unrepresentable`] naming `field`: "is longer than the protocol allows" or "holds a
/// character the protocol refuses".
pub fn check_text(
    field: impl FnOnce() -> String,
    value: &str,
    max_bytes: usize,
    allowed: impl Fn(char) -> bool,
) -> Result<(), Unrepresentable> {
    if value.len() > max_bytes {
        return Err(Unrepresentable::new(
            field(),
            "is longer than the protocol allows",
        ));
    }
    if !value.chars().all(allowed) {
        return Err(Unrepresentable::new(
            field(),
            "holds a character the protocol refuses",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sink_core::Class;

    #[test]
    fn noncharacters_are_the_66_code_points() {
        let all = (0..=0x10FFFFu32)
            .filter_map(char::from_u32)
            .filter(|&c| is_noncharacter(c))
            .count();
        assert_eq!(all, 66);
        for c in [
            '\u{FFFF}',
            '\u{FFFE}',
            '\u{FDD0}',
            '\u{FDEF}',
            '\u{10FFFF}',
            '\u{1FFFE}',
        ] {
            assert!(is_noncharacter(c), "{c:?}");
        }
        for c in ['a', '\u{FFFD}', '\u{FDCF}', '\u{FDF0}', '\u{10000}', 'é'] {
            assert!(!is_noncharacter(c), "{c:?}");
        }
    }

    #[test]
    fn a_refusal_names_the_field_never_the_value_and_is_permanent() {
        let e = check_text(
            || "header \"x-a\"".into(),
            "secret\u{FFFF}",
            64,
            |c| !is_noncharacter(c),
        )
        .unwrap_err();
        assert!(e.to_string().contains("header \"x-a\""), "{e}");
        assert!(!e.to_string().contains("secret"), "{e}");
        let long = check_text(|| "key".into(), "abcd", 3, |_| true).unwrap_err();
        assert!(long.to_string().contains("longer"), "{long}");
        assert!(check_text(|| "key".into(), "abc", 3, |_| true).is_ok());
        let f = Failure::from(e);
        assert_eq!(f.class(), Class::Permanent);
    }
}

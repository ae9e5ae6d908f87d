//! Text a sink puts in a reason: destination-controlled text made safe to print, and the
//! words for common socket failures; and the millisecond unit sink configs store.

use std::num::NonZeroU64;
use std::time::Duration;

/// The longest destination-controlled text (a server's error message, a broker's reply
/// text) a sink keeps in a reason, in characters; longer text is cut and ends in `…`.
pub const MAX_REASON_TEXT: usize = 200;

/// `text` fit for a reason or a log line: control and other invisible characters are
/// escaped (`\u{1b}`), so a destination cannot inject terminal escapes or fake log lines,
/// and the result is at most [`MAX_REASON_TEXT`] characters (plus `…`). Sinks run every
/// text a destination wrote through it before it reaches a `Failure`.
pub fn printable(text: &str) -> String {
    let mut out = String::new();
    for (n, c) in text.chars().enumerate() {
        if n == MAX_REASON_TEXT {
            out.push('…');
            break;
        }
        push_visible(&mut out, c);
    }
    out
}

/// A common socket failure named by its kind alone (`connection refused`), the words a
/// reason uses for it; `None` for any other kind (DNS, TLS, ...), whose error's own text
/// says more than its kind.
pub fn socket_failure(kind: std::io::ErrorKind) -> Option<String> {
    use std::io::ErrorKind as K;
    matches!(
        kind,
        K::ConnectionRefused
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::NotConnected
            | K::BrokenPipe
            | K::TimedOut
            | K::UnexpectedEof
    )
    .then(|| kind.to_string())
}

/// [`printable`] without the length bound: for text already bounded where it was made (a
/// reason chain) on its way to a terminal.
pub fn escape_invisible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        push_visible(&mut out, c);
    }
    out
}

fn push_visible(out: &mut String, c: char) {
    // escape_debug also escapes quotes and backslashes, which are harmless here.
    if c.is_control() || (!matches!(c, '\\' | '\'' | '"') && c.escape_debug().len() > 1) {
        out.extend(c.escape_debug());
    } else {
        out.push(c);
    }
}

/// A configured timeout as whole milliseconds, the unit sink configs store: rounded down,
/// at least 1 ms (a zero timeout would fail every delivery), saturating at `u64::MAX`.
pub fn timeout_ms(timeout: Duration) -> NonZeroU64 {
    let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    NonZeroU64::new(ms).unwrap_or(NonZeroU64::MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_whole_milliseconds_of_at_least_one() {
        assert_eq!(timeout_ms(Duration::from_micros(2_999)).get(), 2);
        assert_eq!(timeout_ms(Duration::ZERO).get(), 1);
        assert_eq!(timeout_ms(Duration::MAX).get(), u64::MAX);
    }

    #[test]
    fn destination_text_is_escaped_and_bounded() {
        assert_eq!(printable("queue 'q' gone"), "queue 'q' gone");
        assert_eq!(
            printable("a\u{1b}[2Jb\nc\u{200b}"),
            "a\\u{1b}[2Jb\\nc\\u{200b}"
        );
        let long = "x".repeat(500);
        assert_eq!(escape_invisible(&long), long, "no bound");
        assert_eq!(escape_invisible("a\u{202e}b\r"), "a\\u{202e}b\\r");
        let p = printable(&long);
        assert_eq!(p.chars().count(), MAX_REASON_TEXT + 1);
        assert!(p.ends_with('…'));
    }

    #[test]
    fn socket_failures_by_kind_alone() {
        use std::io::ErrorKind as K;
        assert_eq!(
            socket_failure(K::ConnectionRefused).as_deref(),
            Some("connection refused")
        );
        assert_eq!(
            socket_failure(K::UnexpectedEof).as_deref(),
            Some("unexpected end of file")
        );
        assert_eq!(socket_failure(K::NotFound), None, "its own text says more");
    }
}

//! The one place an answer or a transport error becomes a [`Failure`] class.
//!
//! | Answer | Class |
//! | --- | --- |
//! | 2xx | `Ok` |
//! | 410 | permanent (destination gone) |
//! | 400, 413, 422, 501 | permanent |
//! | 401, 403, 404, 405 | config (credential, URL or method) |
//! | 301, 308 | config, the reason names the redacted new location |
//! | 408, 425, 429, 500, 502, 503, 504 with a valid `Retry-After` | retry-after that long (a past date: 1 ms) |
//! | 429 without a valid `Retry-After` | retry-after [`throttle_after_ms`](ankusa_sink_core::throttle_after_ms)`(attempt)` |
//! | other 1xx/3xx/4xx/5xx, timeouts, resets, refused connections | transient |
//! | TLS certificate rejected | config |

use ankusa_sink_core::Failure;
use reqwest::StatusCode;
use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::num::NonZeroU64;
use std::time::SystemTime;

/// Why a delivery failed: the reason inside a [`Failure`]. Holds no secret, header value or
/// URL userinfo (URLs are redacted, reqwest errors are stripped of their URL).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// The endpoint answered a status that is not 2xx.
    #[error("endpoint answered HTTP {}{}", Status(*.status), RetryAfterText(*.retry_after_ms))]
    Status {
        /// The status code.
        status: u16,
        /// The pause the endpoint asked for, when it sent a valid `Retry-After`.
        retry_after_ms: Option<u64>,
    },
    /// The endpoint moved permanently (301/308); redirects are never followed.
    #[error(
        "endpoint answered HTTP {} and moved to {location}; redirects are not followed, update the sink url",
        Status(*.status)
    )]
    Moved {
        /// 301 or 308.
        status: u16,
        /// The `Location`, resolved against the sink's URL and redacted.
        location: String,
    },
    /// The endpoint's TLS certificate was rejected.
    #[error("endpoint's TLS certificate was rejected")]
    Certificate(#[source] reqwest::Error),
    /// The request failed below HTTP.
    #[error("{kind}")]
    Transport {
        /// What kind of failure.
        kind: TransportKind,
        /// reqwest's error, without its URL.
        #[source]
        source: reqwest::Error,
    },
    /// [`check`](ankusa_sink_core::Sink::check) could not open a TCP connection to the
    /// endpoint (or to the proxy, when one is set).
    #[error("{kind} (check: TCP connect to the {to})")]
    Unreachable {
        /// What kind of failure: refused, timeout or could not connect.
        kind: TransportKind,
        /// `"endpoint"` or `"proxy"`.
        to: &'static str,
        /// The connect error (`None` when the connect timeout passed).
        #[source]
        source: Option<io::Error>,
    },
    /// A value of this hook or attempt cannot be sent in this header.
    #[error("header {0} cannot carry this hook's value")]
    HeaderValue(&'static str),
}

/// The kind of a transport failure (all are transient).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportKind {
    /// The request or connect timeout passed.
    Timeout,
    /// The endpoint refused the connection.
    Refused,
    /// The connection was reset or closed before the answer was complete.
    Reset,
    /// Connecting failed otherwise (DNS, TLS handshake, unreachable).
    Connect,
    /// Anything else.
    Other,
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransportKind::Timeout => "request timed out",
            TransportKind::Refused => "connection refused",
            TransportKind::Reset => "connection reset or closed before the answer",
            TransportKind::Connect => "could not connect",
            TransportKind::Other => "request failed",
        })
    }
}

struct Status(u16);

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reason = StatusCode::from_u16(self.0)
            .ok()
            .and_then(|s| s.canonical_reason());
        match reason {
            Some(r) => write!(f, "{} {r}", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}

struct RetryAfterText(Option<u64>);

impl fmt::Display for RetryAfterText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(ms) => write!(f, " (Retry-After {ms} ms)"),
            None => Ok(()),
        }
    }
}

/// `text` with every control character (C0, DEL, C1) written as an escape (`\u{1b}`), so
/// text the destination controls (a `Location`) cannot inject terminal escapes or fake log
/// lines wherever a reason is printed.
pub(crate) fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The [`TransportKind`] of a connect error's [`io::ErrorKind`].
pub(crate) fn connect_kind(kind: io::ErrorKind) -> TransportKind {
    match kind {
        io::ErrorKind::ConnectionRefused => TransportKind::Refused,
        io::ErrorKind::TimedOut => TransportKind::Timeout,
        _ => TransportKind::Connect,
    }
}

/// The pause a `Retry-After` value asks for, in milliseconds, at `now`.
///
/// Delta-seconds (`"120"`) or an HTTP-date (IMF-fixdate, RFC 850 or asctime). A date in the
/// past, or `"0"`, is the smallest pause, 1 ms. Anything else (negative, fractional, empty,
/// not a date) is `None`: treated as if the header were absent.
pub fn parse_retry_after(value: &[u8], now: SystemTime) -> Option<NonZeroU64> {
    let text = std::str::from_utf8(value).ok()?.trim();
    if text.is_empty() {
        return None;
    }
    let ms = if text.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits to fit is still "a very long pause"; dispatch caps it.
        text.parse::<u64>().unwrap_or(u64::MAX).saturating_mul(1000)
    } else {
        let at = httpdate::parse_http_date(text).ok()?;
        match at.duration_since(now) {
            Ok(d) => d
                .as_nanos()
                .div_ceil(1_000_000)
                .try_into()
                .unwrap_or(u64::MAX),
            Err(_) => 0,
        }
    };
    Some(NonZeroU64::new(ms).unwrap_or(NonZeroU64::MIN))
}

/// Classify a non-transport answer. `retry_after` is the parsed `Retry-After` (`None` when
/// absent or malformed); `location` the redacted, resolved `Location` (its control
/// characters are escaped here); `attempt` is `ctx.attempt`.
pub(crate) fn classify_status(
    status: StatusCode,
    retry_after: Option<NonZeroU64>,
    location: Option<String>,
    attempt: u32,
) -> Result<(), Failure> {
    let code = status.as_u16();
    let plain = |retry_after_ms| HttpError::Status {
        status: code,
        retry_after_ms,
    };
    match (code, retry_after) {
        (200..=299, _) => Ok(()),
        (400 | 410 | 413 | 422 | 501, _) => Err(Failure::permanent(plain(None))),
        (401 | 403 | 404 | 405, _) => Err(Failure::config(plain(None))),
        (301 | 308, _) => Err(Failure::config(HttpError::Moved {
            status: code,
            location: location.map_or_else(
                || "an unknown location (no valid Location)".into(),
                |l| sanitize(&l),
            ),
        })),
        (408 | 425 | 429 | 500 | 502 | 503 | 504, Some(ms)) => {
            Err(Failure::retry_after(ms, plain(Some(ms.get()))))
        }
        (429, None) => Err(Failure::throttled(attempt, plain(None))),
        _ => Err(Failure::transient(plain(None))),
    }
}

/// Classify a request that produced no answer: a rejected certificate is config,
/// everything else (timeouts, resets, refused connections) is transient. Reads typed errors
/// in reqwest's source chain, never error text.
pub(crate) fn classify_transport(err: reqwest::Error) -> Failure {
    let err = err.without_url();
    if certificate_rejected(&err) {
        return Failure::config(HttpError::Certificate(err));
    }
    let kind = transport_kind(&err);
    Failure::transient(HttpError::Transport { kind, source: err })
}

/// Each error in the chain. An `io::Error`'s `source()` skips the error it wraps (and
/// reqwest nests them), so the chain goes through `get_ref()` there instead.
fn chain<'a>(
    err: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(err), |&e| {
        match e.downcast_ref::<io::Error>().and_then(io::Error::get_ref) {
            Some(inner) => Some(inner as &(dyn StdError + 'static)),
            None => e.source(),
        }
    })
}

fn certificate_rejected(err: &reqwest::Error) -> bool {
    chain(err).any(|e| {
        matches!(
            e.downcast_ref::<rustls::Error>(),
            Some(
                rustls::Error::InvalidCertificate(_)
                    | rustls::Error::NoCertificatesPresented
                    | rustls::Error::UnsupportedNameType
            )
        )
    })
}

fn transport_kind(err: &reqwest::Error) -> TransportKind {
    if err.is_timeout() {
        return TransportKind::Timeout;
    }
    let io_kind = chain(err).find_map(|e| e.downcast_ref::<io::Error>().map(io::Error::kind));
    match io_kind {
        Some(io::ErrorKind::TimedOut) => TransportKind::Timeout,
        Some(io::ErrorKind::ConnectionRefused) => TransportKind::Refused,
        Some(
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof,
        ) => TransportKind::Reset,
        _ if err.is_connect() => TransportKind::Connect,
        // hyper reports a connection closed mid-answer as an incomplete message.
        _ if err.is_request() || err.is_body() => TransportKind::Reset,
        _ => TransportKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sink_core::Class;
    use std::time::Duration;

    fn class(status: u16, retry_after: Option<u64>) -> Class {
        let ra = retry_after.map(|ms| NonZeroU64::new(ms).unwrap());
        match classify_status(StatusCode::from_u16(status).unwrap(), ra, None, 1) {
            Ok(()) => panic!("{status} classified Ok"),
            Err(f) => f.class(),
        }
    }

    fn ra(ms: u64) -> Class {
        Class::RetryAfter(NonZeroU64::new(ms).unwrap())
    }

    #[test]
    fn row_2xx_is_ok() {
        for s in [200, 201, 202, 204, 299] {
            assert!(classify_status(StatusCode::from_u16(s).unwrap(), None, None, 1).is_ok());
        }
    }

    #[test]
    fn row_410_is_permanent() {
        assert_eq!(class(410, None), Class::Permanent);
        assert_eq!(class(410, Some(5000)), Class::Permanent);
    }

    #[test]
    fn row_400_413_422_501_are_permanent() {
        for s in [400, 413, 422, 501] {
            assert_eq!(class(s, None), Class::Permanent, "{s}");
            assert_eq!(class(s, Some(5000)), Class::Permanent, "{s}");
        }
    }

    #[test]
    fn row_401_403_404_405_are_config() {
        for s in [401, 403, 404, 405] {
            assert_eq!(class(s, None), Class::Config, "{s}");
        }
    }

    #[test]
    fn row_301_308_are_config_naming_the_location() {
        for s in [301, 308] {
            let f = classify_status(
                StatusCode::from_u16(s).unwrap(),
                None,
                Some("https://new.example/hooks?token=REDACTED".into()),
                1,
            )
            .unwrap_err();
            assert_eq!(f.class(), Class::Config);
            assert!(
                f.to_string()
                    .contains("https://new.example/hooks?token=REDACTED"),
                "{f}"
            );
        }
    }

    #[test]
    fn control_characters_in_a_location_are_escaped() {
        let f = classify_status(
            StatusCode::MOVED_PERMANENTLY,
            None,
            Some("https://new.example/\u{1b}[31mred\r\nfake: line\u{7f}\u{9b}".into()),
            1,
        )
        .unwrap_err();
        let text = f.to_string();
        assert!(!text.chars().any(char::is_control), "{text:?}");
        assert!(
            text.contains(r"https://new.example/\u{1b}[31mred\r\nfake: line\u{7f}\u{9b}"),
            "{text}"
        );
        assert_eq!(sanitize("plain/ä?x=1"), "plain/ä?x=1");
    }

    #[test]
    fn row_retryable_with_retry_after() {
        for s in [408, 425, 429, 500, 502, 503, 504] {
            assert_eq!(class(s, Some(2000)), ra(2000), "{s}");
        }
    }

    #[test]
    fn row_429_without_retry_after_is_throttled() {
        for attempt in [1, 3, 20] {
            let f =
                classify_status(StatusCode::TOO_MANY_REQUESTS, None, None, attempt).unwrap_err();
            let ms = f.class().retry_after_ms().expect("retry-after");
            let cap = (500u64 << (attempt - 1).min(6)).min(30_000);
            assert!((1..=cap).contains(&ms), "attempt {attempt}: {ms}");
        }
    }

    #[test]
    fn row_everything_else_is_transient() {
        for s in [
            100, 302, 303, 304, 307, 399, 402, 406, 409, 415, 418, 451, 499, 505, 511, 599,
        ] {
            assert_eq!(class(s, None), Class::Transient, "{s}");
        }
        // Retryable statuses without Retry-After (429 aside) follow this row too.
        for s in [408, 425, 500, 502, 503, 504] {
            assert_eq!(class(s, None), Class::Transient, "{s}");
        }
        // Retry-After on a status outside the retry-after row changes nothing.
        for s in [302, 409, 505] {
            assert_eq!(class(s, Some(3000)), Class::Transient, "{s}");
        }
    }

    #[test]
    fn retry_after_delta_seconds() {
        let now = SystemTime::now();
        assert_eq!(parse_retry_after(b"120", now).unwrap().get(), 120_000);
        assert_eq!(parse_retry_after(b" 3 ", now).unwrap().get(), 3_000);
        assert_eq!(parse_retry_after(b"0", now).unwrap().get(), 1);
        assert_eq!(
            parse_retry_after(b"99999999999999999999999", now)
                .unwrap()
                .get(),
            u64::MAX
        );
    }

    #[test]
    fn retry_after_http_date() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        let in_90s = b"Sun, 06 Nov 1994 08:51:07 GMT";
        assert_eq!(parse_retry_after(in_90s, now).unwrap().get(), 90_000);
        // RFC 850 and asctime forms.
        assert_eq!(
            parse_retry_after(b"Sunday, 06-Nov-94 08:51:07 GMT", now)
                .unwrap()
                .get(),
            90_000
        );
        assert_eq!(
            parse_retry_after(b"Sun Nov  6 08:51:07 1994", now)
                .unwrap()
                .get(),
            90_000
        );
        // Sub-second remainders round up, never down to zero.
        let almost = now - Duration::from_millis(1);
        assert_eq!(
            parse_retry_after(b"Sun, 06 Nov 1994 08:49:37 GMT", almost)
                .unwrap()
                .get(),
            1
        );
        // A date in the past is the smallest pause.
        assert_eq!(
            parse_retry_after(b"Sun, 06 Nov 1994 08:00:00 GMT", now)
                .unwrap()
                .get(),
            1
        );
    }

    #[test]
    fn retry_after_malformed_is_absent() {
        let now = SystemTime::now();
        for bad in [
            b"".as_slice(),
            b" ",
            b"-5",
            b"1.5",
            b"soon",
            b"12s",
            b"Sun, 32 Nov 1994 08:49:37 GMT",
            b"\xff\xfe",
        ] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }
}

//! [`HttpError`] and the one place it becomes a [`Class`]: [`classify`].

use ankusa_sink_core::{Class, Failure};
use reqwest::StatusCode;
use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::num::NonZeroU64;
use std::time::SystemTime;

/// Why a delivery failed: the reason inside a [`Failure`], whose class the crate's
/// Classification table gives. Holds no secret, header value or
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
    /// The endpoint answered a status the operator classed (`[status_classes]`).
    #[error("endpoint answered HTTP {}{} (classed {} by status_classes)", Status(*.status), RetryAfterText(*.retry_after_ms), .class.as_str())]
    Classed {
        /// The status code.
        status: u16,
        /// The pause the endpoint asked for, when it sent a valid `Retry-After`.
        retry_after_ms: Option<u64>,
        /// The operator's class (never `ok`: that one is a delivery).
        class: crate::StatusClass,
    },
    /// `[oauth2]`: no access token could be had; nothing was sent.
    #[error("oauth2: {0}")]
    Token(crate::oauth2::TokenError),
    /// `deny_private`: every address the destination resolved to is refused; nothing was
    /// sent.
    #[error("{0}")]
    PrivateDestination(String),
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
    /// The endpoint refused the client certificate (mutual TLS): none was configured, or
    /// the endpoint does not trust it (its TLS alert).
    #[error("endpoint refused the client certificate (TLS alert {0})")]
    ClientCertificate(String),
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
    /// A value of this hook or attempt cannot be sent in this header. The sink checks every
    /// hook value before building the request (a permanent failure naming the header), so
    /// this is a last guard that a valid envelope never reaches.
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
pub(crate) fn parse_retry_after(value: &[u8], now: SystemTime) -> Option<NonZeroU64> {
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

impl HttpError {
    /// The error of an answer: `None` for 2xx. `retry_after` is the parsed `Retry-After`
    /// (`None` when absent or malformed); `location` the redacted, resolved `Location` of a
    /// 301/308 (its control characters are escaped here).
    /// `classes` are the operator's (`[status_classes]`): the most specific key wins over
    /// the table below, and `ok` is a delivery whatever the status.
    pub(crate) fn from_answer(
        status: StatusCode,
        retry_after: Option<NonZeroU64>,
        location: Option<String>,
        classes: &crate::StatusClasses,
    ) -> Option<HttpError> {
        let status = status.as_u16();
        match classes.class_of(status) {
            Some(crate::StatusClass::Ok) => return None,
            Some(class) => {
                return Some(HttpError::Classed {
                    status,
                    retry_after_ms: retry_after.map(NonZeroU64::get),
                    class,
                });
            }
            None => {}
        }
        Some(match status {
            200..=299 => return None,
            301 | 308 => HttpError::Moved {
                status,
                location: location.map_or_else(
                    || "an unknown location (no valid Location)".into(),
                    |l| sanitize(&l),
                ),
            },
            // Only these statuses carry their pause; on any other it changes nothing.
            408 | 425 | 429 | 500 | 502 | 503 | 504 => HttpError::Status {
                status,
                retry_after_ms: retry_after.map(NonZeroU64::get),
            },
            _ => HttpError::Status {
                status,
                retry_after_ms: None,
            },
        })
    }

    /// A request that produced no answer: a rejected certificate, or a transport failure.
    /// Reads typed errors in reqwest's source chain, never error text; drops the URL.
    pub(crate) fn from_transport(err: reqwest::Error) -> HttpError {
        let err = err.without_url();
        if let Some(refused) = guard_refusal(&err) {
            return HttpError::PrivateDestination(refused);
        }
        if let Some(alert) = client_certificate_refused(&err) {
            return HttpError::ClientCertificate(alert);
        }
        if certificate_rejected(&err) {
            return HttpError::Certificate(err);
        }
        HttpError::Transport {
            kind: transport_kind(&err),
            source: err,
        }
    }
}

/// `deny_private`'s refusal in `err`'s chain (the resolver found only refused addresses),
/// as its reason: typed, never read from the text.
pub(crate) fn guard_refusal(err: &reqwest::Error) -> Option<String> {
    chain(err)
        .find_map(|e| e.downcast_ref::<crate::guard::Refused>())
        .map(ToString::to_string)
}

/// What dispatch does with `err`: a pure, deterministic function of the error.
///
/// | Answer | Class |
/// | --- | --- |
/// | 2xx | `Ok` (no error) |
/// | 410 | permanent (destination gone) |
/// | 400, 413, 422, 501 | permanent |
/// | 401, 403, 404, 405 | config (credential, URL or method) |
/// | 301, 308 | config, the reason names the redacted new location |
/// | 408, 425, 429, 500, 502, 503, 504 with a valid `Retry-After` | retry-after that long (a past date: 1 ms) |
/// | 429 without a valid `Retry-After` | throttled: dispatch draws `throttle_after_ms(attempt)` (`ankusa_dispatch`) |
/// | other 1xx/3xx/4xx/5xx, timeouts, resets, refused connections | transient |
/// | TLS certificate rejected | config |
/// | the endpoint refuses the client certificate (a TLS alert: bad, unknown CA, required, expired, revoked, access denied) | config |
/// | a hook value that cannot be a header value | permanent |
/// | a status `[status_classes]` names | its class; `retry_after` honours a valid `Retry-After`, else throttled |
/// | `deny_private`: every address the name resolved to is refused | config, nothing sent |
/// | `[oauth2]`: the token endpoint refuses the client (400/401/403), answers no token or more than 64 KiB | config, nothing sent |
/// | `[oauth2]`: `deny_private` refuses every address of the token endpoint | config, nothing sent |
/// | `[oauth2]`: the token endpoint is unreachable or answers another error | transient, nothing sent |
pub(crate) fn classify(err: &HttpError) -> Class {
    match err {
        HttpError::Classed {
            class,
            retry_after_ms,
            ..
        } => match class {
            crate::StatusClass::Permanent => Class::Permanent,
            crate::StatusClass::Config => Class::Config,
            crate::StatusClass::RetryAfter => retry_after_ms
                .and_then(NonZeroU64::new)
                .map_or(Class::Throttled, Class::RetryAfter),
            // `ok` is never an error (see `from_answer`).
            crate::StatusClass::Transient | crate::StatusClass::Ok => Class::Transient,
        },
        HttpError::Status {
            status,
            retry_after_ms,
        } => match (status, retry_after_ms.and_then(NonZeroU64::new)) {
            (400 | 410 | 413 | 422 | 501, _) => Class::Permanent,
            (401 | 403 | 404 | 405, _) => Class::Config,
            (408 | 425 | 429 | 500 | 502 | 503 | 504, Some(ms)) => Class::RetryAfter(ms),
            (429, None) => Class::Throttled,
            _ => Class::Transient,
        },
        HttpError::Moved { .. }
        | HttpError::Certificate(_)
        | HttpError::ClientCertificate(_)
        | HttpError::PrivateDestination(_) => Class::Config,
        HttpError::HeaderValue(_) => Class::Permanent,
        HttpError::Token(t) => match t {
            crate::oauth2::TokenError::Refused { .. }
            | crate::oauth2::TokenError::Malformed
            | crate::oauth2::TokenError::TooLarge
            | crate::oauth2::TokenError::PrivateEndpoint(_) => Class::Config,
            _ => Class::Transient,
        },
        HttpError::Transport { .. } | HttpError::Unreachable { .. } => Class::Transient,
    }
}

impl From<crate::oauth2::TokenError> for HttpError {
    fn from(e: crate::oauth2::TokenError) -> Self {
        HttpError::Token(e)
    }
}

impl From<HttpError> for Failure {
    fn from(e: HttpError) -> Self {
        let landed = landed(&e);
        Failure::new(classify(&e), e).with_may_have_landed(landed)
    }
}

/// Whether the request may have reached the endpoint's application: a pure function of the
/// error, like [`classify`].
///
/// | Error | May have landed |
/// | --- | --- |
/// | a `4xx` (the endpoint refused it), `501`, `503` (not served), a redirect, a rejected certificate, a header that cannot carry a value, a connection refused or that could not be made, check's TCP probe | `Some(false)` |
/// | any other `5xx` (the endpoint may have acted before failing); a timeout or a connection reset after the request was sent | `Some(true)` |
/// | another transport failure | `None` |
pub(crate) fn landed(err: &HttpError) -> Option<bool> {
    match err {
        // 501 and 503 say the server did not process the request (RFC 9110 §15.6.2 and
        // §15.6.4: it does not support it, or cannot handle it now); another 5xx may come
        // after the application acted.
        HttpError::Status { status, .. } | HttpError::Classed { status, .. } => {
            Some(*status >= 500 && !matches!(status, 501 | 503))
        }
        HttpError::Moved { .. }
        | HttpError::ClientCertificate(_)
        | HttpError::Token(_)
        | HttpError::PrivateDestination(_)
        | HttpError::Certificate(_)
        | HttpError::HeaderValue(_)
        | HttpError::Unreachable { .. } => Some(false),
        HttpError::Transport { source, .. } if source.is_connect() => Some(false),
        HttpError::Transport { kind, .. } => match kind {
            TransportKind::Refused | TransportKind::Connect => Some(false),
            TransportKind::Timeout | TransportKind::Reset => Some(true),
            TransportKind::Other => None,
        },
    }
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

/// The TLS alert with which the endpoint refused our client certificate, if it did (typed:
/// rustls's received alert in reqwest's chain).
fn client_certificate_refused(err: &reqwest::Error) -> Option<String> {
    use rustls::AlertDescription as A;
    chain(err).find_map(|e| match e.downcast_ref::<rustls::Error>() {
        Some(rustls::Error::AlertReceived(
            alert @ (A::BadCertificate
            | A::UnknownCA
            | A::CertificateRequired
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::AccessDenied),
        )) => Some(format!("{alert:?}")),
        _ => None,
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
    use std::time::Duration;

    fn answer(status: u16, retry_after: Option<u64>, location: Option<&str>) -> Option<HttpError> {
        let ra = retry_after.map(|ms| NonZeroU64::new(ms).unwrap());
        HttpError::from_answer(
            StatusCode::from_u16(status).unwrap(),
            ra,
            location.map(str::to_owned),
            &crate::StatusClasses::default(),
        )
    }

    fn class(status: u16, retry_after: Option<u64>) -> Class {
        let err =
            answer(status, retry_after, None).unwrap_or_else(|| panic!("{status} classified Ok"));
        classify(&err)
    }

    fn ra(ms: u64) -> Class {
        Class::RetryAfter(NonZeroU64::new(ms).unwrap())
    }

    #[test]
    fn row_2xx_is_ok() {
        for s in [200, 201, 202, 204, 299] {
            assert!(answer(s, None, None).is_none());
            assert!(answer(s, Some(5000), None).is_none());
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
            let e = answer(s, None, Some("https://new.example/hooks?token=REDACTED")).unwrap();
            assert_eq!(classify(&e), Class::Config);
            let f = Failure::from(e);
            assert_eq!(f.class(), Class::Config);
            assert!(
                f.to_string()
                    .contains("https://new.example/hooks?token=REDACTED"),
                "{f}"
            );
            let unknown = answer(s, Some(1000), None).unwrap();
            assert_eq!(classify(&unknown), Class::Config);
            assert!(unknown.to_string().contains("an unknown location"));
        }
    }

    #[test]
    fn control_characters_in_a_location_are_escaped() {
        let e = answer(
            301,
            None,
            Some("https://new.example/\u{1b}[31mred\r\nfake: line\u{7f}\u{9b}"),
        )
        .unwrap();
        let text = Failure::from(e).to_string();
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
        // The pause the endpoint asked for, as today: up to u64::MAX ms (dispatch caps it).
        assert_eq!(class(503, Some(u64::MAX)), ra(u64::MAX));
    }

    #[test]
    fn row_429_without_retry_after_is_throttled() {
        assert_eq!(class(429, None), Class::Throttled);
        let f = Failure::from(answer(429, None, None).unwrap());
        assert_eq!(f.class(), Class::Throttled);
        assert_eq!(f.class().retry_after_ms(), None, "dispatch draws the pause");
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
            assert!(
                !answer(s, Some(3000), None)
                    .unwrap()
                    .to_string()
                    .contains("Retry-After")
            );
        }
    }

    #[test]
    fn row_a_value_that_cannot_be_a_header_is_permanent() {
        assert_eq!(
            classify(&HttpError::HeaderValue("x-ankusa-replay-id")),
            Class::Permanent
        );
    }

    #[test]
    fn token_rows_refused_malformed_oversized_or_private_are_config_the_rest_transient() {
        use crate::oauth2::TokenError as T;
        for (e, want) in [
            (
                T::Refused {
                    status: 401,
                    error: None,
                },
                Class::Config,
            ),
            (T::Malformed, Class::Config),
            (T::TooLarge, Class::Config),
            (
                T::PrivateEndpoint("auth.internal resolves only to refused addresses".into()),
                Class::Config,
            ),
            (T::Unavailable { status: 503 }, Class::Transient),
        ] {
            let e = HttpError::Token(e);
            assert_eq!(classify(&e), want, "{e}");
            assert_eq!(landed(&e), Some(false), "{e}");
        }
    }

    #[test]
    fn check_failures_are_transient() {
        let e = HttpError::Unreachable {
            kind: TransportKind::Refused,
            to: "endpoint",
            source: None,
        };
        assert_eq!(classify(&e), Class::Transient);
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

    #[test]
    fn landing_rows_of_answers() {
        for (status, want) in [
            (400, Some(false)),
            (404, Some(false)),
            (429, Some(false)),
            (501, Some(false)),
            (503, Some(false)),
            (500, Some(true)),
            (502, Some(true)),
            (504, Some(true)),
        ] {
            let e = answer(status, None, None).unwrap();
            assert_eq!(landed(&e), want, "{status}");
        }
        assert_eq!(
            landed(&HttpError::HeaderValue("x-ankusa-replay-id")),
            Some(false)
        );
        let moved = answer(301, None, Some("https://elsewhere.example/")).unwrap();
        assert_eq!(landed(&moved), Some(false));
    }
}

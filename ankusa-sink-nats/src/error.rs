//! [`NatsError`] and the one classifier.

use ankusa_sink_core::{Class, Failure};
use async_nats::ConnectErrorKind;

/// JetStream's `err_code` for "message size exceeds maximum allowed" (the stream's
/// `max_msg_size`, or the account's limit).
pub(crate) const JS_MESSAGE_TOO_LARGE: u16 = 10054;
/// JetStream's `err_code` for "stream not found".
pub(crate) const JS_STREAM_NOT_FOUND: u16 = 10059;

/// Why a delivery to NATS failed. Text never holds a secret (the URL is kept without its
/// userinfo); server text goes through `ankusa_sink_kit::printable`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NatsError {
    /// The connection could not be made; `kind` is async-nats' typed reason.
    #[error("connect to {host}: {kind}")]
    Connect {
        /// `host:port` of the URL.
        host: String,
        /// What failed: I/O, TLS, authentication, authorization, timeout, ...
        kind: ConnectErrorKind,
        /// The client's error.
        #[source]
        source: async_nats::ConnectError,
    },
    /// The connection was not made within `connect_timeout_ms`.
    #[error("connect to {host}: no connection within {ms} ms")]
    ConnectTimeout {
        /// `host:port` of the URL.
        host: String,
        /// The timeout.
        ms: u64,
    },
    /// The credentials file could not be read or holds no valid credentials.
    #[error("credentials_file: cannot be used")]
    CredentialsFile(#[source] std::io::Error),
    /// The connection is down (the client is reconnecting); nothing was sent.
    #[error("not connected: the client is reconnecting; nothing was sent")]
    NotConnected,
    /// Nothing answers on the subject: no JetStream stream is bound to it (or JetStream is
    /// off for the account).
    #[error("no JetStream stream is bound to subject {subject:?} (no responders)")]
    NoStream {
        /// The subject.
        subject: String,
    },
    /// The message and its headers exceed the server's `max_payload`; nothing was sent.
    #[error("message (with headers) exceeds the server's max_payload of {max} bytes")]
    TooLarge {
        /// The server's `max_payload`.
        max: usize,
    },
    /// A header value of this hook holds CR or LF, which a NATS header cannot carry.
    #[error("header {0}: the hook's value holds CR or LF")]
    HeaderValue(&'static str),
    /// The subject a template rendered for this hook cannot be published to.
    #[error("subject rendered for this hook is not publishable: {0}")]
    Subject(&'static str),
    /// A value the subject template inserts (`{tenant_id}`, ...) holds `.`, which would
    /// add a token the template does not describe (a subscriber's `*` would not match);
    /// refused unless `subject_values_may_add_tokens`.
    #[error(
        "subject_template: the hook's {0} holds `.`, which would add a subject token \
         (subject_values_may_add_tokens = true allows it)"
    )]
    SubjectValue(&'static str),
    /// The message was sent and no ack came within `timeout_ms`: it may have landed.
    #[error("no JetStream ack within {ms} ms (the message may have been stored)")]
    AckTimeout {
        /// The timeout.
        ms: u64,
    },
    /// The request failed after it was handed to the client (connection lost, ...).
    #[error("publish request failed: {kind:?}")]
    Request {
        /// async-nats' typed reason.
        kind: async_nats::RequestErrorKind,
        /// The client's error.
        #[source]
        source: async_nats::RequestError,
    },
    /// JetStream refused the publish with an API error.
    #[error("JetStream refused the publish: {code} (err_code {err_code}): {description}")]
    JetStream {
        /// The HTTP-like status: 400, 404, 429, 503, ...
        code: u16,
        /// JetStream's precise error code (10054 = message too large, ...); 0 when absent.
        err_code: u16,
        /// The server's description, made printable.
        description: String,
    },
    /// The reply carried a status header instead of an ack.
    #[error("JetStream answered with status {status}")]
    Status {
        /// The status code.
        status: u16,
    },
    /// The reply was not a JetStream ack.
    #[error("unexpected reply to the publish: {0}")]
    BadAck(String),
    /// `check()`: the stream bound to the subject keeps its messages in memory, so an ack
    /// does not outlive a restart of the server, and this sink declares itself durable.
    #[error(
        "stream {stream:?} is on memory storage: its acks do not survive a server restart \
         (the sink is durable; use a file stream)"
    )]
    MemoryStorage {
        /// The stream's name.
        stream: String,
    },
}

/// What dispatch does with `err`: a pure, deterministic function of the error.
///
/// | Error | Class |
/// | --- | --- |
/// | `Connect` with `AuthorizationViolation`, `Authentication` (bad credentials) | `Config` |
/// | `Connect` with `Tls`, or `Io` caused by a `rustls::Error` (certificate refused, no TLS on the server), or `ServerParse` (bad address) | `Config` |
/// | `CredentialsFile` | `Config` |
/// | `NoStream` (no responders: no stream bound to the subject), `Status` 503 (the no-responders status) | `Config` |
/// | `MemoryStorage` (`check()`: the stream is on memory storage) | `Config` |
/// | `JetStream` with `err_code` 10059 (stream not found), or code 401 / 403 / 404 | `Config` |
/// | `TooLarge` (over the server's `max_payload`) | `Permanent` |
/// | `JetStream` with `err_code` 10054 (over the stream's `max_msg_size`) | `Permanent` |
/// | `Subject`, `HeaderValue` (a hook's values make an unpublishable subject, e.g. one starting with `$`, or header) | `Permanent` |
/// | `SubjectValue` (an inserted value holds `.`) | `Permanent` |
/// | `JetStream` with code 429 or 503 (stream full with discard-new, unavailable), `Status` 429 | `Throttled` |
/// | `Connect` with `Io`, `TimedOut`, `Dns`, `MaxReconnects`; `ConnectTimeout` | `Transient` |
/// | `NotConnected`, `AckTimeout`, `Request` (lost connection, ...) | `Transient` |
/// | any other `JetStream` or `Status` answer, `BadAck` | `Transient` |
pub(crate) fn classify(err: &NatsError) -> Class {
    match err {
        NatsError::Connect { kind, source, .. } => match kind {
            ConnectErrorKind::AuthorizationViolation
            | ConnectErrorKind::Authentication
            | ConnectErrorKind::Tls
            | ConnectErrorKind::ServerParse => Class::Config,
            _ if tls_refused(source) => Class::Config,
            _ => Class::Transient,
        },
        NatsError::CredentialsFile(_)
        | NatsError::NoStream { .. }
        | NatsError::MemoryStorage { .. } => Class::Config,
        NatsError::TooLarge { .. }
        | NatsError::Subject(_)
        | NatsError::SubjectValue(_)
        | NatsError::HeaderValue(_) => Class::Permanent,
        NatsError::JetStream { code, err_code, .. } => match (*code, *err_code) {
            (_, JS_MESSAGE_TOO_LARGE) => Class::Permanent,
            (_, JS_STREAM_NOT_FOUND) | (401 | 403 | 404, _) => Class::Config,
            (429 | 503, _) => Class::Throttled,
            _ => Class::Transient,
        },
        // A bare 503 status is NATS' "no responders": nothing is bound to the subject.
        NatsError::Status { status: 503 } => Class::Config,
        NatsError::Status { status: 429 } => Class::Throttled,
        NatsError::ConnectTimeout { .. }
        | NatsError::NotConnected
        | NatsError::AckTimeout { .. }
        | NatsError::Request { .. }
        | NatsError::Status { .. }
        | NatsError::BadAck(_) => Class::Transient,
    }
}

/// Whether the connect failed in the TLS handshake: a `rustls::Error` (untrusted
/// certificate, a plain server answering a TLS hello) somewhere in the source chain, which
/// async-nats reports as an I/O error. Found by type, never by text.
fn tls_refused(err: &async_nats::ConnectError) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = next {
        if e.is::<async_nats::rustls::Error>() {
            return true;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
            && inner.is::<async_nats::rustls::Error>()
        {
            return true;
        }
        next = match e.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|i| i as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    false
}

impl From<NatsError> for Failure {
    fn from(e: NatsError) -> Self {
        let landed = landed(&e);
        Failure::new(classify(&e), e).with_may_have_landed(landed)
    }
}

/// Whether the message may have been stored: a pure function of the error, like
/// [`classify`].
///
/// | Error | May have landed |
/// | --- | --- |
/// | no connection (refused, timed out, credentials), not connected, no stream bound to the subject, a memory stream (`check()`), over `max_payload`, an unpublishable subject, subject value or header, a JetStream API error (the stream refused it), a `503` status (no responders) | `Some(false)` |
/// | no ack within `timeout_ms`; a reply that is not an ack | `Some(true)` |
/// | the request failed after it was handed to the client; another status | `None` |
pub(crate) fn landed(err: &NatsError) -> Option<bool> {
    match err {
        NatsError::Connect { .. }
        | NatsError::ConnectTimeout { .. }
        | NatsError::CredentialsFile(_)
        | NatsError::NotConnected
        | NatsError::NoStream { .. }
        | NatsError::MemoryStorage { .. }
        | NatsError::TooLarge { .. }
        | NatsError::HeaderValue(_)
        | NatsError::Subject(_)
        | NatsError::SubjectValue(_)
        | NatsError::JetStream { .. }
        | NatsError::Status { status: 503 } => Some(false),
        NatsError::AckTimeout { .. } | NatsError::BadAck(_) => Some(true),
        NatsError::Request { .. } | NatsError::Status { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    //! The rows a real server cannot be made to answer on demand; every other row is
    //! provoked for real in `tests/it/classify.rs`.
    use super::*;

    fn js(code: u16, err_code: u16) -> NatsError {
        NatsError::JetStream {
            code,
            err_code,
            description: String::new(),
        }
    }

    #[test]
    fn jetstream_codes() {
        assert_eq!(classify(&js(400, 10054)), Class::Permanent);
        assert_eq!(classify(&js(404, 10059)), Class::Config);
        assert_eq!(classify(&js(403, 0)), Class::Config);
        assert_eq!(classify(&js(401, 0)), Class::Config);
        assert_eq!(classify(&js(429, 0)), Class::Throttled);
        assert_eq!(classify(&js(503, 10077)), Class::Throttled);
        assert_eq!(classify(&js(500, 10001)), Class::Transient);
        assert_eq!(classify(&js(400, 10071)), Class::Transient);
    }

    #[test]
    fn statuses_and_replies() {
        assert_eq!(classify(&NatsError::Status { status: 503 }), Class::Config);
        assert_eq!(
            classify(&NatsError::Status { status: 429 }),
            Class::Throttled
        );
        assert_eq!(
            classify(&NatsError::Status { status: 408 }),
            Class::Transient
        );
        assert_eq!(classify(&NatsError::BadAck("x".into())), Class::Transient);
        assert_eq!(classify(&NatsError::NotConnected), Class::Transient);
        let memory = NatsError::MemoryStorage { stream: "s".into() };
        assert_eq!(classify(&memory), Class::Config);
        assert_eq!(landed(&memory), Some(false));
        assert_eq!(classify(&NatsError::Subject("empty")), Class::Permanent);
        assert_eq!(
            classify(&NatsError::SubjectValue("tenant_id")),
            Class::Permanent
        );
        assert_eq!(
            classify(&NatsError::CredentialsFile(std::io::Error::other("x"))),
            Class::Config
        );
    }

    #[test]
    fn landing_rows() {
        for (e, want) in [
            (js(400, 10054), Some(false)),
            (js(503, 10077), Some(false)),
            (NatsError::NotConnected, Some(false)),
            (
                NatsError::NoStream {
                    subject: "s".into(),
                },
                Some(false),
            ),
            (NatsError::TooLarge { max: 1 }, Some(false)),
            (NatsError::HeaderValue("h"), Some(false)),
            (NatsError::Subject("s"), Some(false)),
            (NatsError::SubjectValue("source_id"), Some(false)),
            (
                NatsError::ConnectTimeout {
                    host: "h".into(),
                    ms: 1,
                },
                Some(false),
            ),
            (NatsError::Status { status: 503 }, Some(false)),
            (NatsError::AckTimeout { ms: 1 }, Some(true)),
            (NatsError::BadAck("x".into()), Some(true)),
            (NatsError::Status { status: 408 }, None),
        ] {
            assert_eq!(landed(&e), want, "{e}");
        }
    }
}
